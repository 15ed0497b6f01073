// What the example trainers check about a run besides its directory: the ranges of numeric
// flags, that a resumed run has the options it was saved with, that its checkpoints fit on the
// disk (--save), that a checkpoint is never saved from a diverged run, and a clean stop on
// SIGINT / SIGTERM.
// Example code, not library code: both strata-gpt and strata-llama include it.
#pragma once

#include <strata/core/bytes.hpp>          // format_bytes_short
#include <strata/core/error.hpp>          // strata::error
#include <strata/report/loss_plot.hpp>    // loss_point
#include <strata/tier/resources.hpp>      // free_disk_bytes
#include <strata/train/checkpoint.hpp>    // checkpoint_contents, check_checkpoint_fits, json_file_text

#include <CLI/CLI.hpp>        // CLI::Validator
#include <nlohmann/json.hpp>  // nlohmann::json

#include <signal.h>  // sigaction, SIGINT, SIGTERM

#include <algorithm>   // std::min
#include <cmath>       // std::isfinite
#include <csignal>     // std::sig_atomic_t
#include <cstdint>     // std::uint64_t
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
inline CLI::Range count_in(long lo, long hi) { return CLI::Range(lo, hi); }

// A finite real number in [lo, hi] (CLI::Range lets NaN through: every comparison with it is false).
inline CLI::Validator real_in(double lo, double hi) {
    const std::string range = "[" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]";
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            double value = 0;
            if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) || value < lo || value > hi)
                return "Value " + text + " not in range " + range;
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

// ---- checkpoints that the disk can hold (--save) ----

// --save full|weights|none: what each checkpoint holds (none: no checkpoint is written at all).
inline const std::vector<std::string> save_choices{"full", "weights", "none"};

inline void add_save_option(CLI::App& train, std::string& save) {
    train.add_option("--save", save,
                     "what each checkpoint holds: full (weights, AdamW moments, state: a bitwise resume), weights "
                     "(no moments: a third of the bytes; a resume starts AdamW afresh) or none (no checkpoint at all)")
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

// The checkpoints a run writes from step `from` (0, or the resumed step) to `stop`: one at every
// multiple of save_every, and one at the last step. Each is kept: strata deletes no checkpoint,
// and a save writes the whole new one (step-N.tmp-PID) before it renames it, while the ones
// before it stay. So all of them are on the disk at the end; a stop by SIGINT saves one in place
// of those still to come, never more.
inline long planned_checkpoints(long from, long stop, long save_every, const std::string& save) {
    if (save == "none" || from >= stop) return 0;
    long count = save_every > 0 ? stop / save_every - from / save_every : 0;
    if (save_every <= 0 || stop % save_every != 0) ++count;
    return count;
}

// trainer_state.json grows with the loss curve it keeps: per step at most a training and a
// validation point, each at most 75 bytes as written (indent 2, 6 deep: "[", a step below 2^40
// as a double, a loss of at most 24 characters, "],"; about 55 in practice).
inline constexpr std::uint64_t state_bytes_per_step = 2 * 80;

// The mean size of the run's checkpoints (planned_checkpoints of them): `fixed` bytes (tensors,
// config, extra files: checkpoint_bytes without the state) plus trainer_state.json, which is `now`
// as it would be written at step `from` and grows by at most state_bytes_per_step for each step
// trained before a save. Rounded up, so that count x mean covers them all.
inline std::uint64_t mean_checkpoint_bytes(std::uint64_t fixed, const nlohmann::json& now, long from, long stop,
                                           long save_every, const std::string& save) {
    constexpr std::uint64_t fields_added_by_save = 512;  // step, format, moments_saved, optimizer
    const long count = planned_checkpoints(from, stop, save_every, save);
    if (count == 0) return 0;
    // the steps trained before each save, summed: saves at every multiple of save_every in
    // (from, stop], and at stop when it is not one (128 bits: up to 2^40 saves of 2^40 steps)
    unsigned __int128 steps = 0;
    if (save_every > 0) {
        const unsigned __int128 first = from / save_every + 1, last = stop / save_every, n = last + 1 - first;
        if (last >= first) steps += static_cast<unsigned __int128>(save_every) * (first + last) * n / 2 - n * from;
    }
    if (save_every <= 0 || stop % save_every != 0) steps += static_cast<unsigned __int128>(stop - from);
    const auto mean_steps = static_cast<std::uint64_t>((steps + count - 1) / count);
    return fixed + json_file_text(now).size() + fields_added_by_save + state_bytes_per_step * mean_steps;
}

// Before step 1: the run's checkpoints (planned_checkpoints of `one_checkpoint` bytes each, their
// mean_checkpoint_bytes) must fit in the free space of --out, or the run is refused with the bytes
// needed and free and the choices. Prints what will be saved.
template <class Args>
void check_checkpoints_fit(const Args& a, std::uint64_t one_checkpoint, long from, long stop) {
    if (a.save == "none") {
        std::cout << "checkpoints: none (--save none): nothing of this run is saved" << std::endl;
        return;
    }
    const long copies = planned_checkpoints(from, stop, a.save_every, a.save);
    const std::uint64_t free = free_disk_bytes(a.out);
    std::string hint = "another --out on a disk with more free space";
    if (a.save == "full") hint += ", --save weights (the weights without AdamW's moments)";
    hint += ", or --save none (no checkpoint)";
    if (copies > 1)
        hint += "; every checkpoint is kept (each --save-every " + std::to_string(a.save_every) +
                " steps and the last): a larger --save-every writes fewer";
    check_checkpoint_fits(one_checkpoint, free, copies, a.out, hint);
    std::cout << "checkpoints: --save " << a.save << ", " << copies << " x " << format_bytes_short(one_checkpoint)
              << " in " << a.out << " (" << format_bytes_short(free) << " free)" << std::endl;
}

// The line a resume from a checkpoint without AdamW's moments (--save weights) prints. The
// trainer's step count drives AdamW's bias correction too, so it is not reset: with zero moments
// and a correction near 1 the next updates are larger than a fresh optimizer's (up to about 6x
// at beta1 0.9, beta2 0.999, fading over some hundred steps).
inline std::string fresh_optimizer_note(const std::string& checkpoint, long step) {
    return "note: " + checkpoint + " holds the weights without AdamW's moments (--save weights): the optimizer starts "
           "afresh (moments at zero; bias correction continues from step " + std::to_string(step) +
           ", so the next updates are larger than the run's were), and this run is not the one an uninterrupted "
           "run would have been";
}

// ---- a resumed run has the options it was saved with ----

// The options a resume must keep to continue bitwise (saved in trainer_state.json, compared on
// resume by check_resume_options): both programs' train_args have these fields.
template <class Args>
nlohmann::json run_options(const Args& a, long warmup) {
    nlohmann::json options{{"batch", a.batch}, {"accum", a.accum}, {"seq_len", a.seq_len}, {"lr", a.lr},
                           {"min_lr", a.min_lr}, {"schedule", a.schedule}, {"warmup", warmup},
                           {"steps", a.steps}, {"weight_decay", a.weight_decay}, {"clip", a.clip}};
    if constexpr (requires { a.optimizer; a.momentum; }) {  // a CLI with --optimizer (checkpoints before it: AdamW)
        options["optimizer"] = a.optimizer;
        if (a.optimizer == "sgd") options["momentum"] = a.momentum;
    }
    return options;
}

// --warmup -1 (the default): a tenth of the run, at most 20 steps.
inline long resolved_warmup(long warmup, long steps) { return warmup >= 0 ? warmup : std::min<long>(20, steps / 10); }

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
        if (!same) changes += (changes.empty() ? "" : ", ") + std::string("--") + key + " " + before.dump() + " -> " + value.dump();
    }
    if (changes.empty()) return;
    if (!allow)
        throw error("--resume " + checkpoint + " with options that differ from the run's: " + changes,
                    "resume with the run's options, or pass --allow-option-changes to continue with the new ones "
                    "(the run is then no longer the same as one never interrupted)");
    std::cout << "warning: --allow-option-changes: resuming " << checkpoint << " with changed options: " << changes
              << std::endl;
}

// ---- no checkpoint of a diverged run ----

// The policy: a checkpoint is saved only when the step's loss is finite and at most
// divergence_factor times the run's first loss (the loss of step 1, kept across resumes).
inline constexpr double divergence_factor = 3.0;

inline void require_saveable_loss(double loss, double first_loss, long step, const std::string& last_checkpoint) {
    if (std::isfinite(loss) && loss <= divergence_factor * first_loss) return;
    throw error("the loss at step " + std::to_string(step) + " is " + std::to_string(loss) +
                    ", past the divergence limit (" + std::to_string(static_cast<int>(divergence_factor)) +
                    " x the run's first loss " + std::to_string(first_loss) + "): the run diverged and no checkpoint was saved",
                "lower --lr or lengthen --warmup" +
                    (last_checkpoint.empty() ? std::string() : "; the last good checkpoint is " + last_checkpoint));
}

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
        {"steps", "--steps"},
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

// ---- the loss curve of the whole run, across resumes ----

// The curves as the checkpoint keeps them: {"train": [[step, loss], ...], "val": [...]}.
inline nlohmann::json loss_curve_json(const std::vector<loss_point>& train, const std::vector<loss_point>& val) {
    auto pairs = [](const std::vector<loss_point>& curve) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& p : curve) out.push_back({p.step, p.loss});
        return out;
    };
    return {{"train", pairs(train)}, {"val", pairs(val)}};
}

// A resumed run starts from the checkpoint's curves and first loss (absent in older checkpoints:
// then the curve starts at the resume and the first loss is the resumed run's first).
inline void restore_loss_curve(const nlohmann::json& state, std::vector<loss_point>& train,
                               std::vector<loss_point>& val, double& first_loss) {
    if (state.contains("first_loss") && state["first_loss"].is_number()) first_loss = state["first_loss"].get<double>();
    if (!state.contains("loss_curve")) return;
    auto read = [](const nlohmann::json& pairs, std::vector<loss_point>& curve) {
        for (const auto& p : pairs) curve.push_back({p.at(0).get<double>(), p.at(1).get<double>()});
    };
    read(state["loss_curve"].at("train"), train);
    read(state["loss_curve"].at("val"), val);
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
