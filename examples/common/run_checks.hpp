// What the example trainers check about a run besides its directory: the ranges of numeric
// flags, that a resumed run has the options it was saved with, that its checkpoints fit on the
// disk (--save), the flags that cure the library's errors, and a clean stop on SIGINT / SIGTERM.
// (The divergence policy itself is strata::run_training's.)
// Example code, not library code: both strata-gpt and strata-llama include it.
#pragma once

#include <strata/core/bytes.hpp>          // format_bytes_short
#include <strata/core/error.hpp>          // strata::error
#include <strata/optim/optimizers.hpp>    // sgd_optimizer
#include <strata/train/checkpoint.hpp>    // checkpoint_contents, check_checkpoint_fits
#include <strata/train/run.hpp>           // checkpoint_plan
#include <strata/io/file_fingerprint.hpp>  // fingerprint_of

#include "choices.hpp"  // optimizer_choices

#include <CLI/CLI.hpp>        // CLI::Validator
#include <nlohmann/json.hpp>  // nlohmann::json

#include <signal.h>  // sigaction, SIGINT, SIGTERM

#include <algorithm>   // std::min, std::replace
#include <filesystem>  // std::filesystem::is_regular_file
#include <cmath>       // std::isfinite
#include <csignal>     // std::sig_atomic_t
#include <iostream>    // std::cout
#include <string>      // std::string
#include <utility>     // std::pair
#include <thread>      // std::thread::hardware_concurrency
#include <vector>      // std::vector

namespace strata::examples {

// ---- ranges of flags ----

// For unsigned options: CLI11 would read "-1" as 2^64 - 1; this refuses any sign.
inline const CLI::Validator unsigned_number(
    [](std::string& text) -> std::string {
        if (text.find_first_of("-+") != std::string::npos) return "Value " + text + " must be a number without a sign";
        return {};
    },
    "UINT");

// A count in [lo, hi], read as a signed number so that a negative one is refused, not wrapped.
inline CLI::Validator count_in(long lo, long hi) {
    const std::string range = "[" + std::to_string(lo) + " - " + std::to_string(hi) + "]";
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            long value = 0;
            if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a whole number";
            if (value < lo || value > hi) return "Value " + text + " not in range " + range;
            return {};
        },
        "INT in " + range);
}

// A finite real number in [lo, hi] (CLI::Range lets NaN through: every comparison with it is false).
inline CLI::Validator real_in(double lo, double hi) {
    const std::string range = "[" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]";
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            double value = 0;
            if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a number";
            if (!std::isfinite(value) || value < lo || value > hi) return "Value " + text + " not in range " + range;
            return {};
        },
        "FLOAT in " + range);
}

// --threads N: 0 (all) up to the machine's hardware threads.
inline void check_threads(int threads) {
    const unsigned hw = std::thread::hardware_concurrency();
    if (threads < 0 || (hw > 0 && static_cast<unsigned>(threads) > hw))
        throw error("--threads " + std::to_string(threads) + ": this machine has " + std::to_string(hw) + " hardware threads",
                    "pass 0 (all of them) or at most " + std::to_string(hw));
}

// --stop-at S with --steps N: 1 <= S <= N (0, the default, means no early stop).
inline void check_stop_at(long stop_at, long steps) {
    if (stop_at != 0 && (stop_at < 1 || stop_at > steps))
        throw error("--stop-at " + std::to_string(stop_at) + " is outside the run's steps 1.." + std::to_string(steps),
                    "stop at a step within --steps (the schedule stays that of --steps)");
}

// ---- the optimizer ----

// --optimizer (a registered one: adamw, sgd, adafactor), --momentum (SGD's), --beta2-decay,
// --eps2, --update-clip (Adafactor's) and --weight-decay (every one's) into a's fields;
// train_options_of makes them train_options::optimizer (optimizer_hparams_of), and
// recorded_options records them for a resume to compare.
template <class Args>
void add_optimizer_options(CLI::App& train, Args& a) {
    train.add_option("--optimizer", a.optimizer,
                     "adamw, sgd (with --momentum; torch.optim.SGD's step) or adafactor (torch.optim.Adafactor's; "
                     "--lr caps its relative step, 1e-2 is torch's default)")
        ->check(CLI::IsMember(optimizer_choices()))
        ->capture_default_str();
    train.add_option("--momentum", a.momentum, "SGD's momentum (0: plain SGD)")->capture_default_str()->check(real_in(0, 1));
    train.add_option("--beta2-decay", a.beta2_decay, "Adafactor's beta2_decay (<= 0: the squared gradient's weight t^beta2_decay)")
        ->capture_default_str()
        ->check(real_in(-100, 0));
    train.add_option("--eps2", a.eps2, "Adafactor's eps2 (the smallest parameter RMS its relative step scales by)")
        ->capture_default_str()
        ->check(real_in(0, 1));
    train.add_option("--update-clip", a.update_clip, "Adafactor's clipping threshold d (>= 1: an update's RMS is at most d)")
        ->capture_default_str()
        ->check(real_in(1, 1e6));
    train.add_option("--weight-decay", a.weight_decay,
                     "weight decay of 2-D weights and embeddings: AdamW's decoupled, SGD's coupled (added to the gradient)")
        ->capture_default_str()
        ->check(real_in(0, 1e6));
}

// ---- checkpoints that the disk can hold (--save) ----

// --save full|weights|none: what each checkpoint holds (none: no checkpoint is written at all).
inline const std::vector<std::string> save_choices{"full", "weights", "none"};

inline void add_save_option(CLI::App& train, std::string& save) {
    train.add_option("--save", save,
                     "what each checkpoint holds: full (weights, optimizer state, trainer state: a bitwise resume), weights "
                     "(no optimizer state: a third of the bytes with AdamW, half with SGD; a resume starts the "
                     "optimizer afresh) or none (no checkpoint at all)")
        ->check(CLI::IsMember(save_choices))
        ->capture_default_str();
}

inline checkpoint_contents contents_of_save(const std::string& save) {
    return save == "weights" ? checkpoint_contents::weights : checkpoint_contents::full;
}

// Flags that need a checkpoint, with --save none.
inline void check_save_options(const std::string& save, long save_every, long stop_at) {
    if (save != "none") return;
    if (save_every > 0)
        throw error("--save none with --save-every " + std::to_string(save_every) + ": no checkpoint is saved at all",
                    "drop --save-every, or keep the weights with --save weights");
    if (stop_at > 0)
        throw error("--save none with --stop-at " + std::to_string(stop_at) +
                        ": the run would stop to be resumed later, from no checkpoint",
                    "drop --stop-at, or save with --save full (or --save weights)");
}

// Before step 1 (run_hooks::check_checkpoints): the run's checkpoints (run_training's plan: how many,
// their mean size, the free space of --out) must fit, or the run is refused with the bytes needed
// and free and the choices. Prints what will be saved.
template <class Args>
void check_checkpoints_fit(const Args& a, const checkpoint_plan& plan) {
    if (a.save == "none") {
        std::cout << "checkpoints: none (--save none): nothing of this run is saved" << std::endl;
        return;
    }
    std::string hint = "another --out on a disk with more free space";
    if (a.save == "full") hint += ", --save weights (the weights without the optimizer's state)";
    hint += ", or --save none (no checkpoint)";
    if (plan.count > 1)
        hint += "; every checkpoint is kept (each --save-every " + std::to_string(a.save_every) +
                " steps and the last): a larger --save-every writes fewer";
    check_checkpoint_fits(plan.bytes_each, plan.free_bytes, plan.count, a.out, hint);
    std::cout << "checkpoints: --save " << a.save << ", " << plan.count << " x " << format_bytes_short(plan.bytes_each)
              << " in " << a.out << " (" << format_bytes_short(plan.free_bytes) << " free)" << std::endl;
}

// The line a resume from a checkpoint without the optimizer's state (--save weights) prints;
// `optimizer` is the checkpoint's (checkpoint_optimizer). For AdamW, the trainer's step count
// drives the bias correction too, so it is not reset: with zero moments and a correction near 1
// the next updates are larger than a fresh optimizer's (up to about 6x at beta1 0.9, beta2 0.999,
// fading over some hundred steps). SGD's momentum buffer at zero is what its first step starts from.
inline std::string fresh_optimizer_note(const std::string& checkpoint, long step, const std::string& optimizer) {
    const std::string afresh =
        optimizer == sgd_optimizer::name()
            ? "without SGD's momentum (--save weights): the optimizer starts afresh (momentum at zero, as at step 1)"
            : "without AdamW's moments (--save weights): the optimizer starts afresh (moments at zero; bias "
              "correction continues from step " + std::to_string(step) +
                  ", so the next updates are larger than the run's were)";
    return "note: " + checkpoint + " holds the weights " + afresh +
           ", and this run is not the one an uninterrupted run would have been";
}

// ---- a resumed run has the options it was saved with ----

// The options a resume must keep to continue bitwise (saved in trainer_state.json, compared on
// resume by check_resume_options): both programs' train_args have these fields. `warmup` is the
// resolved one (resolved_warmup: steps, never the flag's -1), as the trainer's schedule has it.
template <class Args>
nlohmann::json recorded_options(const Args& a, long warmup) {
    nlohmann::json options{{"batch", a.batch}, {"accum", a.accum}, {"seq_len", a.seq_len}, {"lr", a.lr},
                           {"min_lr", a.min_lr}, {"schedule", a.schedule}, {"warmup", warmup},
                           {"steps", a.steps}, {"weight_decay", a.weight_decay}, {"clip", a.clip}};
    // checkpoints written before --optimizer lack the key (they are AdamW's): check_resume_options skips it
    options["optimizer"] = a.optimizer;
    if (a.optimizer == "sgd") options["momentum"] = a.momentum;
    if (a.optimizer == "adafactor") {
        options["beta2_decay"] = a.beta2_decay;
        options["eps2"] = a.eps2;
        options["update_clip"] = a.update_clip;
    }
    // Data-parallel ranks: the global batch is gpus x accum x batch (checkpoints before --gpus: 1).
    if constexpr (requires { a.gpus; }) options["gpus"] = a.gpus;
    return options;
}

// --warmup -1 (the default): a tenth of the run, at most 20 steps.
inline long resolved_warmup(long warmup, long steps) { return warmup >= 0 ? warmup : std::min<long>(20, steps / 10); }

// The options a checkpoint's trainer_state.json recorded (recorded_options, and its seed), as
// check_resume_options compares them. strata-gpt checkpoints written before the warmup was
// recorded resolved hold the flag's -1: read as the warmup it meant.
inline nlohmann::json saved_options(const nlohmann::json& state) {
    nlohmann::json saved = state.value("options", nlohmann::json::object());
    if (saved.contains("warmup") && saved["warmup"] == -1 && saved.contains("steps"))
        saved["warmup"] = resolved_warmup(-1, saved["steps"].get<long>());
    if (state.contains("seed")) saved["seed"] = state["seed"];
    return saved;
}


// The flag of a recorded option ("seq_len" -> "--seq-len").
inline std::string flag_of_option(std::string key) {
    std::replace(key.begin(), key.end(), '_', '-');
    return "--" + key;
}

// Compares the options a run is started with (`now`, an object of option -> value) with those the
// checkpoint recorded (`saved`); any difference breaks "resume continues bitwise as if never
// interrupted". Refused, unless `allow`: then each change is printed as a warning.
inline void check_resume_options(const nlohmann::json& saved, const nlohmann::json& now, const std::string& checkpoint,
                                 bool allow) {
    std::string changes;
    for (const auto& [key, value] : now.items()) {
        if (!saved.contains(key)) continue;  // recorded by a newer or older version: nothing to compare
        const auto& before = saved.at(key);
        const bool same = (before.is_number() && value.is_number()) ? before.get<double>() == value.get<double>()
                                                                    : before == value;
        if (!same) changes += (changes.empty() ? "" : ", ") + flag_of_option(key) + " " + before.dump() + " -> " + value.dump();
    }
    if (changes.empty()) return;
    if (!allow)
        throw error("--resume " + checkpoint + " with options that differ from the run's: " + changes,
                    "resume with the run's options, or pass --allow-option-changes to continue with the new ones "
                    "(the run is then no longer the same as one never interrupted)");
    std::cout << "warning: --allow-option-changes: resuming " << checkpoint << " with changed options: " << changes
              << std::endl;
}

// A resume trains on the run's data: the data file's size and fingerprint (trainer_state.json's
// "data_identity"; checkpoints saved before it was recorded have none) must be the recorded ones.
// Refused, unless `allow`: then the change is printed as a warning.
inline void check_resumed_data(const std::string& data, const nlohmann::json& state, const std::string& checkpoint,
                               bool allow) {
    if (data.empty() || !state.contains("data_identity") || !std::filesystem::is_regular_file(data)) return;
    const auto& recorded = state["data_identity"];
    const file_fingerprint now = fingerprint_of(data);
    if (now.bytes == recorded.value("bytes", std::uint64_t{0}) && now.hash == recorded.value("hash", std::string())) return;
    const std::string what = "--data " + data + " is not the data " + checkpoint + " was trained on (" +
                             std::to_string(now.bytes) + " bytes, fingerprint " + now.hash + "; the run's: " +
                             recorded.dump() + ", " + state.value("data", std::string("a file")) + ")";
    if (!allow)
        throw error("--resume " + what,
                    "resume with the run's data file, or pass --allow-option-changes to continue on this one (the "
                    "run is then no longer the same as one never interrupted)");
    std::cout << "warning: --allow-option-changes: " << what << std::endl;
}

// check_resume_options and check_resumed_data for a run resumed from the checkpoint whose
// trainer_state.json is `state`.
template <class Args>
void check_resumed_options(const Args& a, const nlohmann::json& state) {
    nlohmann::json now = recorded_options(a, resolved_warmup(a.warmup, a.steps));
    now["seed"] = a.seed;
    check_resume_options(saved_options(state), now, a.resume, a.allow_option_changes);
    check_resumed_data(a.data, state, a.resume, a.allow_option_changes);
}

// --resume: the options the run recorded (saved_options of its trainer_state.json) become the
// values of the flags the command line (or --config) did not give, and so do its --data and, for
// strata-gpt, its model's shape (`shape`: flag -> value); a flag given keeps its value, which
// check_resumed_options then compares.
inline void apply_recorded_options(CLI::App& train, const nlohmann::json& state, const nlohmann::json& shape = {}) {
    nlohmann::json recorded = saved_options(state);
    if (state.contains("data") && state["data"].is_string()) recorded["data"] = state["data"];
    if (shape.is_object())
        for (const auto& [key, value] : shape.items()) recorded[key] = value;
    for (const auto& [key, value] : recorded.items()) {
        CLI::Option* opt = train.get_option_no_throw(flag_of_option(key));
        if (opt == nullptr || opt->count() > 0 || value.is_null()) continue;
        opt->add_result(value.is_string() ? value.get<std::string>() : value.dump());
        opt->run_callback();
    }
}

// ---- flags for the library's errors ----

// The library's hints name no flags: a strata::error lists the settings its hint is about
// (error::settings(), library names such as "seq_len"); these are the programs' flags for them.
inline std::string flag_of_setting(const std::string& setting) {
    static const std::pair<const char*, const char*> flags[] = {
        {"seq_len", "--seq-len"},       {"lr", "--lr"},
        {"min_lr", "--min-lr"},         {"warmup", "--warmup"},
        {"clip", "--clip"},             {"batch_size", "--batch"},
        {"val_fraction", "--val-fraction"}, {"tokenizer", "--tokenizer"},
        {"chat_template", "--chat-template"}, {"format", "--format"},
        {"host_budget", "--host-budget"}, {"device_budget", "--device-budget"},
        {"storage_dir", "--storage-dir"}, {"storage_budget", "--storage-budget"},
        {"optimizer", "--optimizer"},
        {"device", "--device"},         {"metrics", "--metrics"},
        {"init_from", "--init-from"},   {"n_layer", "--n-layer"},
        {"n_head", "--n-head"},         {"n_embd", "--n-embd"},
        {"activations", "--activations"}, {"moments", "--moments"},
        {"steps", "--steps"},           {"ranks", "--gpus"},
        {"state_on_storage", "--state-on-storage"}, {"machine", "--machine"},
    };
    for (const auto& [name, flag] : flags)
        if (setting == name) return flag;
    return {};
}

// "the flags for that: --lr, --warmup" for an error whose hint names settings the program has flags for.
inline std::string flag_hint_for(const std::exception& e) {
    const auto* err = dynamic_cast<const error*>(&e);
    if (err == nullptr) return {};
    std::string flags;
    for (const auto& setting : err->settings())
        if (const auto flag = flag_of_setting(setting); !flag.empty()) flags += (flags.empty() ? "" : ", ") + flag;
    if (flags.empty()) return {};
    return "the flags for that: " + flags;
}

// ---- a clean stop on SIGINT / SIGTERM ----

inline volatile std::sig_atomic_t interrupt_signal = 0;

// While alive, SIGINT and SIGTERM only set interrupt_signal: the training loop finishes its step,
// saves a checkpoint and returns. The handler is one-shot (SA_RESETHAND): a second signal stops
// the process at once, and a next run removes the temporary checkpoint it may leave.
class interrupt_guard {
public:
    interrupt_guard() {
        struct sigaction sa {};
        sa.sa_handler = [](int sig) { interrupt_signal = sig; };
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND | SA_RESTART;  // interrupted reads and writes resume
        ::sigaction(SIGINT, &sa, &m_int);
        ::sigaction(SIGTERM, &sa, &m_term);
    }
    ~interrupt_guard() {
        ::sigaction(SIGINT, &m_int, nullptr);
        ::sigaction(SIGTERM, &m_term, nullptr);
    }
    interrupt_guard(const interrupt_guard&) = delete;
    interrupt_guard& operator=(const interrupt_guard&) = delete;

    static bool interrupted() { return interrupt_signal != 0; }
    static const char* name() { return interrupt_signal == SIGINT ? "SIGINT" : "SIGTERM"; }
    static int exit_code() { return 128 + interrupt_signal; }  // the shell's convention for a signal

private:
    struct sigaction m_int {}, m_term {};
};

}  // namespace strata::examples
