// The machine a train command plans for, on both example trainers' command lines: --machine FILE
// (another machine, described by a machine file: plan and predict only, nothing allocated),
// else this machine's calibration (plan/calibrate.hpp: measured once, then read from the cache;
// --recalibrate measures again), and the cost model's prediction printed under the plan.
// Example code, not library code: strata-gpt and strata-llama include it.
#pragma once

#include <strata/backend/backend.hpp>         // Backend
#include <strata/core/error.hpp>              // strata::error
#include <strata/core/format.hpp>             // fmt::format
#include <strata/plan/calibrate.hpp>          // calibrated_rates, calibration_options, gemm_shape
#include <strata/plan/cost_model.hpp>         // step_prediction
#include <strata/plan/machine_file.hpp>       // read_machine_file, machine_rates, attention_rate
#include <strata/plan/planner.hpp>            // memory_plan, plan_request, tier_bytes, link_bandwidths
#include <strata/plan/prediction_table.hpp>   // prediction_table

#include <CLI/CLI.hpp>  // CLI::App

#include <algorithm>   // std::max
#include <filesystem>  // std::filesystem::path
#include <iostream>    // std::cerr
#include <optional>    // std::optional
#include <string>      // std::string

namespace strata::examples {

// --machine FILE, --recalibrate and --state-on-storage into a.machine, a.recalibrate and
// a.state_on_storage.
template <class Args>
void add_machine_options(CLI::App& train, Args& a) {
    train.add_option("--machine", a.machine,
                     "plan and predict for the machine a JSON file describes (its budgets, links, disk, GEMM and host "
                     "optimizer rates: machines/*.json) instead of this one; only with --plan, since training runs "
                     "here; budget flags override the file's")
        ->check(CLI::ExistingFile);
    train.add_flag("--recalibrate", a.recalibrate,
                   "measure this machine's rates again (GEMMs at the model's shapes, the links, the storage "
                   "directory, the host optimizer) instead of reading them from the calibration cache "
                   "($XDG_CACHE_HOME/strata or ~/.cache/strata)");
    train.add_flag("--state-on-storage", a.state_on_storage,
                   "put the optimizer's state (AdamW's moments, SGD's momentum) of every host-homed group on storage "
                   "(files in --storage-dir), even where the host could hold it; without it the planner decides");
}

// A machine file plans for another machine: a run on this one would not be what was planned.
template <class Args>
void check_machine_flags(const Args& a) {
    if (!a.machine.empty() && !a.plan_only)
        throw error("--machine " + a.machine +
                        " describes another machine; training runs on this one, so --machine only plans",
                    "add --plan to print the plan and prediction for that machine, or drop --machine to train here "
                    "(this machine's rates are calibrated)");
    if (!a.machine.empty() && a.recalibrate)
        throw error("--recalibrate measures this machine, and --machine " + a.machine + " plans for another one",
                    "drop one of them");
}

// The rates the plan is made with: --machine's file (its attention rate the one for the model's
// head size, where the file lists rates by head size), else this machine's calibration at the
// model's shapes (`shapes`: its GEMMs and attention), read from the cache when it has them. The
// probe backend B is made here with the default budgets and gone before the run's is made.
template <Backend B, class Args>
machine_rates machine_for_plan(const Args& a, calibration_options shapes) {
    if (!a.machine.empty()) {
        machine_rates m = read_machine_file(a.machine);
        m.attention_flops = attention_rate(m, shapes.attention.channels / std::max<std::size_t>(shapes.attention.heads, 1));
        return m;
    }
    shapes.storage_dir = a.storage_dir;
    shapes.recalibrate = a.recalibrate;
    B probe(tier_options{});
    return calibrated_rates(probe, shapes);
}

// The budgets of --machine's file, or `defaults`, with the budget flags over them.
template <class Args>
tier_bytes budgets_for(const Args& a, const machine_rates& m, tier_bytes defaults) {
    tier_bytes budgets = a.machine.empty() ? defaults : m.budgets;
    if (!a.device_budget.empty()) budgets.device = parse_bytes(a.device_budget, "--device-budget");
    if (!a.host_budget.empty()) budgets.host = parse_bytes(a.host_budget, "--host-budget");
    if (!a.storage_budget.empty()) budgets.storage = parse_bytes(a.storage_budget, "--storage-budget");
    return budgets;
}

// The links the plan's table prints seconds for.
inline link_bandwidths links_of(const machine_rates& m) {
    return {.h2d = m.h2d, .d2h = m.d2h, .storage_read = m.storage_read, .storage_write = m.storage_write};
}

// "machine: h200 (--machine machines/h200.json; nothing allocated): GEMM 47.3 TFLOP/s, ...".
template <class Args>
std::string machine_line(const Args& a, const machine_rates& m) {
    const std::string whose = a.machine.empty() ? "this one, calibrated (" + m.name + ")"
                                                : m.name + " (--machine " + a.machine + "; planned, nothing allocated)";
    return "machine: " + whose + ": " + machine_summary(m);
}

// The rates the planner searches with (plan_request::rates): a GPU's, or a machine file's. On the
// CPU backend the "device" is the host's own cores, which the cost model counts as separate
// resources (it would move updates to the host "optimizer" to run beside the "device" compute that
// uses the same cores), so a CPU run keeps the fixed rules' plan and only prints its prediction.
template <class Args>
std::optional<machine_rates> search_rates(const Args& a, bool cuda, const machine_rates& m) {
    if (cuda || !a.machine.empty()) return m;
    return std::nullopt;
}

// The cost model's prediction of the plan's step (plan/cost_model.hpp); none when the machine's
// rates lack what the plan needs (a machine file without a disk rate, say): the plan stands, and
// the note says why there is no prediction.
inline std::optional<step_prediction> predicted_step(const memory_plan& p, const plan_request& r, const machine_rates& m) {
    try {
        return predict(p, r, m);
    } catch (const error& e) {
        std::cerr << "note: no step prediction: " << e.what() << "\n";
        return std::nullopt;
    }
}

}  // namespace strata::examples
