// The cost model against the H200 runs of issue 27 (docs/benchmarks.md), planned without
// allocating on hand-written H200 rates: the fixed rules' plans of the 10.2B GPT (5.82 s measured),
// the 16.6B GPT on three tiers (60.3 s) and the Qwen2.5-14B shape (46.7-49.0 s) come out near their
// measured steps, and the search finds the faster plans the issue predicts (~7 s for 14B, <= 30 s
// for 16.6B). The table is printed (doctest MESSAGE; run with -s to see it): a GPU run of each
// searched plan is the check of the prediction.
#include <strata/nn/cpu_ops.hpp>       // ops<cpu_backend> (before the models are instantiated)
#include <strata/plan/cost_model.hpp>  // predict
#include <strata/plan/planner.hpp>     // plan, plan_request
#include <strata/model/decoder.hpp>    // decoder_model
#include <strata/model/gpt.hpp>        // gpt_model, gpt_config
#include <strata/strata.hpp>           // cpu_backend

#include "../../examples/llama/llama_block.hpp"    // llama_block (the Qwen2.5-14B shape)
#include "../../examples/llama/rmsnorm_layer.hpp"  // rmsnorm_layer

#include <doctest/doctest.h>

#include <chrono>   // std::chrono::steady_clock
#include <cstddef>  // std::size_t
#include <cstdio>   // std::snprintf
#include <string>   // std::string
#include <vector>   // std::vector

namespace cost_model_h200_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

constexpr std::size_t GiB = std::size_t(1) << 30;

// The H200 machine of issue 27: its measured links and disk, FP32 GEMM and attention rates of the
// big shapes, the host AdamW, and the budgets of its runs.
machine_rates h200() {
    machine_rates m;
    m.name = "h200 (issue 27, by hand)";
    m.budgets = {.device = 132 * GiB, .host = 100 * GiB, .storage = 55 * GiB};
    m.host_cores = 16;
    m.h2d = m.d2h = 55e9;
    m.duplex = 99e9;
    // The disk: ~2 GB/s read, and writes as fast on average in the runs (the 14B run moved
    // 90 GiB both ways in 47-49 s; a single-stream write measured 1.4 GB/s).
    m.storage_read = 2e9;
    m.storage_write = 2e9;
    m.gemm_flops = 44e12;
    m.attention_flops = 15e12;
    m.device_memory = 3.5e12;
    m.host_optimizer = {{"adamw", 4.5e9}};
    return m;
}

model_footprint gpt_footprint(std::size_t layers, std::size_t channels, std::size_t B, std::size_t T) {
    const gpt_config c{.vocab_size = 50257, .max_seq = T, .n_layer = layers, .n_head = channels / 128,
                       .n_embd = channels};
    return footprint_of<cpu_backend>(gpt_model<float, cpu_backend>(c), B, T);
}

// Qwen2.5-14B: 48 x 5120, 40 query heads and 8 key/value heads of 128, SwiGLU 13824, q/k/v
// biases, an untied head over 152064 tokens.
model_footprint qwen14b_footprint(std::size_t B, std::size_t T) {
    using model_t = decoder_model<llama::llama_block<float, cpu_backend>, llama::rmsnorm_layer<float, cpu_backend>>;
    const llama::llama_block_config block{.n_embd = 5120, .n_head = 40, .hidden = 13824, .n_kv_head = 8, .qkv_bias = true};
    const model_t model({.vocab_size = 152064, .max_seq = T, .n_layer = 48, .n_embd = 5120, .learned_positions = false,
                         .tied_head = false},
                        block, llama::rmsnorm_config{.channels = 5120});
    return footprint_of<cpu_backend>(model, B, T);
}

// "streamed, 3 slots: embeddings device, blocks 0-17 device, 22 host (0 on storage), 40/40 keep".
std::string summary(const memory_plan& p) {
    if (p.where == placement::resident)
        return "resident, " + std::to_string(p.kept_blocks) + "/" + std::to_string(p.block_count) + " keep";
    std::size_t device_blocks = 0, host_blocks = 0, stored = 0;
    for (std::size_t g = 1; g + 1 < p.homes.size(); ++g) {
        device_blocks += p.homes[g].weights == tier_id::device;
        host_blocks += p.homes[g].weights == tier_id::host;
    }
    for (const group_home& h : p.homes) stored += h.moments == tier_id::storage;
    char line[256];
    std::snprintf(line, sizeof line,
                  "streamed, %zu slots: embeddings %s, %zu blocks device, %zu host, %zu groups' state on storage "
                  "(%.1f GiB), %zu/%zu keep%s",
                  p.slots, p.homes[0].weights == tier_id::device ? "device" : "host", device_blocks, host_blocks, stored,
                  static_cast<double>(p.bytes_of(plan_category::moments, tier_id::storage)) / GiB, p.kept_blocks,
                  p.block_count, p.offloaded_inputs ? ", the others' inputs offloaded" : "");
    return line;
}

std::string row(const std::string& name, const memory_plan& p, const step_prediction& s) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "%-26s %7.2f s/step %8.0f tok/s  bound: %-16s compute %3.0f %%, up %3.0f %%, down %3.0f %%, "
                  "storage %3.0f %%, host opt %3.0f %%",
                  name.c_str(), s.seconds, s.tokens_per_second, std::string(name_of(s.bottleneck)).c_str(),
                  100 * s.busy_fraction(step_resource::compute), 100 * s.busy_fraction(step_resource::pcie_up),
                  100 * s.busy_fraction(step_resource::pcie_down), 100 * s.busy_fraction(step_resource::storage),
                  100 * s.busy_fraction(step_resource::host_optimizer));
    std::string out = std::string(line) + "\n    " + summary(p);
    if (s.compute_bound_accum)
        out += "\n    compute-bound from --accum " + std::to_string(s.compute_bound_accum) + ": " +
               std::to_string(static_cast<long>(s.compute_bound_tokens_per_second)) + " tok/s";
    return out;
}

struct shape_case {
    std::string name;
    model_footprint model;
    double measured;  // s/step of the fixed rules' plan on the H200 (0: not run)
};

}  // namespace

TEST_CASE("H200: the fixed rules' plans predict their measured steps; the search finds the faster ones") {
    const machine_rates m = h200();
    std::vector<shape_case> cases{{"10.2B GPT B4 T1024", gpt_footprint(40, 4608, 4, 1024), 5.82},
                                  {"16.6B GPT B4 T1024", gpt_footprint(52, 5120, 4, 1024), 60.3},
                                  {"Qwen2.5-14B B1 T2048", qwen14b_footprint(1, 2048), 47.8}};
    std::string table = "\n";
    for (const shape_case& c : cases) {
        CAPTURE(c.name);
        plan_request r{.model = c.model, .budgets = m.budgets};
        const memory_plan fixed = plan(r);
        const step_prediction before = predict(fixed, r, m);
        r.rates = m;
        const auto start = std::chrono::steady_clock::now();
        const memory_plan fastest = plan(r);
        const double search = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const step_prediction after = predict(fastest, r, m);
        table += c.name + " (measured " + std::to_string(c.measured).substr(0, 5) + " s), searched in " +
                 std::to_string(search).substr(0, 5) + " s\n  " + row("fixed rules", fixed, before) + "\n  " +
                 row("searched", fastest, after) + "\n";
        // the fixed rules' plans within 25 % of their measured steps (the rates are by hand)
        CHECK(before.seconds > 0.75 * c.measured);
        CHECK(before.seconds < 1.25 * c.measured);
        CHECK(after.seconds <= before.seconds);
    }
    MESSAGE(table);
}

TEST_CASE("H200: the searched 14B plan reaches the issue's target; 16.6B sends as little through the disk as fits") {
    const machine_rates m = h200();
    plan_request qwen{.model = qwen14b_footprint(1, 2048), .budgets = m.budgets, .rates = m};
    const memory_plan q = plan(qwen);
    CHECK(q.total(tier_id::storage) == 0);
    CHECK(predict(q, qwen, m).seconds <= 8.0);  // issue 27's target, measured: <= 8 s
    // 16.6B: weights, gradients, m and v are 247 GiB, more than the device's 132 and the host's 100
    // GiB together: some state must live on storage, and every byte of it is read and written once
    // a step behind the backward (the trainer's order), so the disk bounds the step. The search
    // spills the least it can: every block recomputes (1 keeps), 2 slots, the device full of blocks.
    plan_request gpt{.model = gpt_footprint(52, 5120, 4, 1024), .budgets = m.budgets};
    const memory_plan fixed = plan(gpt);
    gpt.rates = m;
    const memory_plan searched = plan(gpt);
    CHECK(searched.total(tier_id::storage) < fixed.total(tier_id::storage) * 3 / 4);
    const step_prediction s = predict(searched, gpt, m);
    CHECK(s.bottleneck == step_resource::storage);
    CHECK(s.seconds < 0.8 * predict(fixed, gpt, m).seconds);
}

TEST_CASE("the search plans a 120B model on a large host well under a second") {
    machine_rates m = h200();
    m.budgets = {.device = 132 * GiB, .host = 1400 * GiB, .storage = 4096 * GiB};
    plan_request r{.model = gpt_footprint(96, 10240, 1, 4096), .budgets = m.budgets, .rates = m};
    const auto start = std::chrono::steady_clock::now();
    const memory_plan p = plan(r);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const step_prediction s = predict(p, r, m);
    MESSAGE("120B (96 x 10240, B1 T4096): searched in " << seconds << " s\n  " << row("searched", p, s));
    CHECK(p.fits());
    CHECK(seconds < 2.0);  // well under a second in a release build; sanitizers are slower
}

}  // namespace cost_model_h200_test
