// run_training: the step loop of a training run, written once for every program that trains with
// strata: micro-batches from a loader into trainer.step(), evaluation every N steps, a metrics file
// (JSON lines), the progress line, the loss plot, checkpoints every N steps and at the end, a stop
// after a chosen step that keeps the schedule of the whole run, and a resume that continues bitwise
// as if the run had never stopped. strata-gpt and strata-llama both train through it; what differs
// between models and programs comes in as hooks (run_hooks), every one optional.
//
//   run_options o{.out = "runs/x", .eval_every = 50, .save_every = 100, .metrics = "runs/x/metrics.jsonl"};
//   run_hooks h;
//   h.state = [&] { return nlohmann::json{{"seed", seed}}; };  // the program's fields of trainer_state.json
//   const run_result r = run_training(trainer, train_loader, &validation_loader, o, h);
//
// One step, in order:
//   1. accum micro-batches (trainer.options().accum) from the train loader, then trainer.step():
//      the trainer accumulates them and takes the step's learning rate from its schedule
//      (train_options::schedule, lr_at); the run's length `steps` is that schedule's total_steps
//      unless run_options says otherwise.
//   2. A loss that is not finite stops the run with strata::error naming the last checkpoint:
//      nothing of that step is saved, and every checkpoint already written stays as it was.
//      (strata's trainers refuse such a step themselves before any weight changes; the check here
//      holds for any trainer.)
//   3. A metrics record: step, loss, lr, grad_norm, tokens_per_s, tokens, the bytes the step moved
//      per link (bytes_h2d, bytes_d2h, bytes_storage_read, bytes_storage_write), model_tflops_per_s
//      when the model counts its FLOPs (a training step is 3 forwards: the backward is two), and
//      transfer_hidden_fraction when the streams are traced. hooks.on_step may add fields before
//      the record is written; then the progress line (report/progress.hpp).
//   4. Every eval_every steps and at the last step: the first eval_batches batches of the
//      validation loader (at most one pass), trainer.evaluate(); val_loss goes to the metrics, to a
//      progress note and to hooks.on_eval.
//   5. Every save_every steps, at the last step, and when hooks.stop_requested() says so: a
//      checkpoint (save_checkpoint: OUT/step-N assembled under a temporary name, then renamed),
//      then OUT/latest naming it (replaced atomically), then OUT/loss.svg; hooks.on_checkpoint.
//      A loss past divergence_factor x the run's first loss is refused before anything is written.
//      Every checkpoint is kept: a save never touches an earlier one.
//
// The model's files in each checkpoint are model_files<Model>'s (model/model_files.hpp: the
// model's own, e.g. model/gpt.hpp's for a GPT-2): run_training's last argument, value-initialized
// by default; checkpoint.hpp writes and reads them, and calls nothing of this file back.
//
// Resume (run_options::resume): load_checkpoint, with the model's files for the weights, restores
// the weights, the optimizer's state and the step; trainer_state.json the loader's cursor, the loss
// curves and the run's first loss. The next step then draws the batches, and computes the bits, the
// uninterrupted run would have, provided the trainer was built with the run's options (the caller
// compares them: the examples' check_resume_options). stop_at stops early without changing the
// schedule, so a run stopped at step k and resumed is bitwise the run never stopped.
//
// trainer_state.json: the program's fields (hooks.state()), then the loop's own: data_cursor,
// first_loss, loss_curve {"train": [[step, loss], ...], "val": [...]}; save_checkpoint adds step,
// format and moments_saved.
//
// Side outputs (the metrics file, the trace, OUT/loss.svg) never cost a run its training: the
// metrics file is opened before step 1 (a path that cannot be written is refused then), and one
// that fails later (a full disk, a directory removed) is noted on the log, written no more, and
// named in run_result::lost_outputs, while the steps and checkpoints go on.
//
// Before step 1 the checkpoints the run will write are known (checkpoint_plan: how many, their mean
// size, the free bytes where they go): hooks.check_checkpoints judges them, or, without that hook,
// check_checkpoint_fits refuses a run whose checkpoints the disk cannot hold, before any training
// is spent.
//
// The library's part is the loop: it never exits, reads no environment variable and installs no
// signal handler (a program polls its own through hooks.stop_requested); errors are strata::error
// with a hint in the library's terms (a program may add its flags: the examples' flag_hint_for).
#pragma once

#include <strata/core/bytes.hpp>              // format_bytes_short
#include <strata/core/error.hpp>              // strata::error
#include <strata/core/format.hpp>             // fmt::format (host only)
#include <strata/data/loader.hpp>             // data::batch_loader, data::batch, data::loader_cursor
#include <strata/io/atomic_write.hpp>         // write_file_atomically
#include <strata/io/json_file.hpp>            // json_field, json_file_text
#include <strata/report/loss_plot.hpp>        // loss_point, write_loss_svg
#include <strata/report/metrics.hpp>          // metrics_writer
#include <strata/report/progress.hpp>         // progress_reporter, stdout_is_terminal, format_loss
#include <strata/report/trace.hpp>            // trace_recorder
#include <strata/stream/prefetch_pipeline.hpp>  // transfer_counters
#include <strata/tier/resources.hpp>          // free_disk_bytes
#include <strata/model/model_files.hpp>       // model_files
#include <strata/train/checkpoint.hpp>        // save_checkpoint, load_checkpoint, checkpoint_bytes
#include <strata/train/tiered_trainer.hpp>           // step_result, train_options

#include <nlohmann/json.hpp>  // nlohmann::json

#include <algorithm>    // std::min, std::sort
#include <chrono>       // std::chrono::steady_clock
#include <cmath>        // std::isfinite, std::isnan
#include <concepts>     // std::same_as, std::convertible_to
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <filesystem>   // std::filesystem::path
#include <functional>   // std::function
#include <iostream>     // std::cout
#include <limits>       // std::numeric_limits
#include <memory>       // std::shared_ptr, std::make_shared
#include <optional>     // std::optional
#include <ostream>      // std::ostream
#include <span>         // std::span
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace strata {

// What run_training asks of a trainer (tiered_trainer has it, for every plan).
template <class T>
concept RunTrainer = requires(T& t, const T& ct, std::span<const data::batch> batches) {
    { t.step(batches) } -> std::same_as<step_result>;
    { t.evaluate(batches) } -> std::convertible_to<double>;
    { ct.step_count() } -> std::convertible_to<long>;
    { ct.options() } -> std::convertible_to<const train_options&>;
    ct.model();
};

struct run_options {
    std::filesystem::path out;      // OUT (required; created): checkpoints OUT/step-N, OUT/latest, OUT/loss.svg
    long steps = 0;                 // the run's length; 0: the trainer's schedule's total_steps
    long stop_at = 0;               // stop (and save) after this step; the schedule stays that of steps
    long eval_every = 0;            // evaluate every N steps and at the last one (0: never)
    long eval_batches = 8;          // validation batches per evaluation (at most one pass)
    long save_every = 0;            // a checkpoint every N steps (0: only at the last step)
    // What each checkpoint holds; nullopt: no checkpoint at all (OUT/loss.svg is still written).
    std::optional<checkpoint_contents> checkpoints = checkpoint_contents::full;
    // No checkpoint of a step whose loss exceeds this many times the run's first loss (the loss of
    // step 1, kept across resumes): the run stops with an error instead. 0: finite is enough.
    double divergence_factor = 3.0;
    std::vector<std::filesystem::path> extra_files;  // copied into every checkpoint (a tokenizer's files)
    std::filesystem::path resume;   // a checkpoint directory (OUT/step-N) to continue; empty: a fresh run
    std::filesystem::path metrics;  // JSON lines (empty: none); a resumed run appends to it
    bool append_metrics = false;    // a fresh run appends to an existing metrics file too (else: replaces it)
    std::filesystem::path trace;    // a Chrome/Perfetto trace of steps 2 and 3 (empty: none)
    bool transfer_overlap = false;  // every record carries transfer_hidden_fraction (each step traced)
    std::string plot_title = "loss";
    std::ostream* log = nullptr;    // the progress line and the run's notes; null: std::cout
    std::optional<bool> terminal;   // redraw the progress bar in place; empty: stdout_is_terminal() for std::cout
    long print_every = 10;          // plain (not terminal) progress: a line every N steps
    // The cost model's step time for this run's plan (plan/cost_model.hpp), seconds; 0: none.
    // Every metrics record carries it beside the measured step_seconds, and the run's last lines
    // say how far the measurement was from it.
    double predicted_step_seconds = 0;
};

// The checkpoints a run will write, known before step 1 (run_hooks::check_checkpoints).
struct checkpoint_plan {
    bool saving = true;               // false: the run saves no checkpoint at all
    long count = 0;                   // how many (every one is kept)
    std::uint64_t bytes_each = 0;     // their mean size, rounded up: count x bytes_each covers them all
    std::uint64_t free_bytes = 0;     // free bytes where they go
    std::filesystem::path where;      // run_options::out
};

// What differs between models and programs. Every hook is optional.
struct run_hooks {
    // The program's fields of trainer_state.json (an object: seed, options, tokenizer, ...).
    std::function<nlohmann::json()> state;
    // After a resume restored the trainer and the loader: the checkpoint's trainer_state.json.
    std::function<void(const nlohmann::json& state)> on_resume;
    // Before step 1: judge the checkpoints the run will write (and say so). Throw to refuse the run.
    // Empty: check_checkpoint_fits, and one line on the log.
    std::function<void(const checkpoint_plan& plan)> check_checkpoints;
    // After each step, before its metrics record is written: may add fields to the record.
    std::function<void(const step_result& r, nlohmann::json& record)> on_step;
    // After each evaluation.
    std::function<void(long step, double val_loss)> on_eval;
    // Before each checkpoint is written, with the directory it will be (OUT/step-N): a program may
    // clear what the run replaces there (the examples' --overwrite, at the first save only).
    std::function<void(const std::filesystem::path& checkpoint)> before_checkpoint;
    // After each checkpoint, once OUT/latest names it.
    std::function<void(const std::filesystem::path& checkpoint)> on_checkpoint;
    // Polled before step 1 and after each step: true saves a checkpoint of the step just done (if
    // any) and ends the run (a program's SIGINT). Empty: never.
    std::function<bool()> stop_requested;
};

struct run_result {
    long step = 0;                          // the trainer's step count at the end
    bool stopped = false;                   // hooks.stop_requested ended the run before its last step
    std::filesystem::path last_checkpoint;  // the last checkpoint this run saved (empty: none)
    std::filesystem::path loss_plot;        // OUT/loss.svg, when written
    bool trace_written = false;             // run_options::trace was written
    // A side output (metrics, trace, loss plot) that failed during the run: what failed. The run
    // stopped writing it and trained on (its checkpoints are the run's work; those outputs are not).
    std::vector<std::string> lost_outputs;
    double step_seconds = 0;                // the median step of this run, its first step left out when it had more
};

// "step time: measured 6.12 s (median of 9 steps), predicted 5.80 s: 5.5 % slower than predicted".
inline std::string prediction_summary(double measured, double predicted, std::size_t steps) {
    const double off = 100.0 * (measured - predicted) / predicted;
    return fmt::format("step time: measured {:.3f} s (median of {} step{}), predicted {:.3f} s: {:.1f} % {} than predicted",
                       measured, steps, steps == 1 ? "" : "s", predicted, off < 0 ? -off : off,
                       off < 0 ? "faster" : "slower");
}

// ---- the checkpoints of a run, before step 1 ----

// How many checkpoints a run saves from step `from` (0, or the resumed step) to `stop`: one at
// every multiple of save_every, and one at `stop` unless it is one. A stop requested midway saves
// one in place of those still to come, never more.
inline long planned_checkpoints(long from, long stop, long save_every) {
    if (from >= stop) return 0;
    long count = save_every > 0 ? stop / save_every - from / save_every : 0;
    if (save_every <= 0 || stop % save_every != 0) ++count;
    return count;
}

// trainer_state.json grows with the loss curve it keeps: per step at most a training and a
// validation point, each at most 75 bytes as written (indent 2, 6 deep: "[", a step below 2^40
// as a double, a loss of at most 24 characters, "],"; about 55 in practice).
inline constexpr std::uint64_t state_bytes_per_step = 2 * 80;

// The mean size of the run's planned_checkpoints: `fixed` bytes (model files, moments, extra files:
// checkpoint_bytes without the state) plus trainer_state.json, which is `now` as it would be
// written at step `from` and grows by at most state_bytes_per_step for each step trained before a
// save. Rounded up, so that count x mean covers them all.
inline std::uint64_t mean_checkpoint_bytes(std::uint64_t fixed, const nlohmann::json& now, long from, long stop,
                                           long save_every) {
    constexpr std::uint64_t fields_added_by_save = 512;  // step, format, moments_saved, optimizer
    const long count = planned_checkpoints(from, stop, save_every);
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

// ---- the loss curve of the whole run, across resumes ----

// The curves as trainer_state.json keeps them: {"train": [[step, loss], ...], "val": [...]}.
inline nlohmann::json loss_curve_json(std::span<const loss_point> train, std::span<const loss_point> val) {
    auto pairs = [](std::span<const loss_point> curve) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& p : curve) out.push_back({p.step, p.loss});
        return out;
    };
    return {{"train", pairs(train)}, {"val", pairs(val)}};
}

// A resumed run starts from the checkpoint's curves and first loss (absent in older checkpoints:
// then the curve starts at the resume and the first loss is the resumed run's first). A first loss
// that no training step gives (not a finite number above 0: the divergence policy would refuse
// every later checkpoint) is an error naming `source`, before any training.
inline void restore_loss_curve(const nlohmann::json& state, std::vector<loss_point>& train,
                               std::vector<loss_point>& val, double& first_loss,
                               const std::string& source = "trainer_state.json") {
    if (state.contains("first_loss") && !state["first_loss"].is_null()) {
        const auto& f = state["first_loss"];
        if (!f.is_number() || !std::isfinite(f.get<double>()) || !(f.get<double>() > 0))
            throw error(source + ": first_loss " + f.dump() + " is no loss a training step gives (a finite number above 0)",
                        "the file was edited: resume from a checkpoint as strata saved it");
        first_loss = f.get<double>();
    }
    if (!state.contains("loss_curve")) return;
    auto read = [](const nlohmann::json& pairs, std::vector<loss_point>& curve) {
        for (const auto& p : pairs) curve.push_back({p.at(0).get<double>(), p.at(1).get<double>()});
    };
    read(state["loss_curve"].at("train"), train);
    read(state["loss_curve"].at("val"), val);
}

namespace detail {

inline std::string last_checkpoint_words(const std::filesystem::path& last) {
    return last.empty() ? std::string("this run saved none") : "the last good one is " + last.string();
}

// A step whose loss is NaN or infinite ends the run; nothing of it is saved.
inline void refuse_non_finite_loss(const step_result& r, const std::filesystem::path& last) {
    if (std::isfinite(r.loss)) return;
    throw error(fmt::format("the loss at step {} is {}: training diverged, and nothing of this step is saved", r.step,
                            format_loss(r.loss)),
                fmt::format("lower the learning rate or lengthen the warmup, and resume from a checkpoint before "
                            "step {} ({})",
                            r.step, last_checkpoint_words(last)),
                {"lr", "warmup"});
}

// The divergence policy, before a checkpoint is written: a finite loss, at most factor x the first.
inline void refuse_diverged_checkpoint(double loss, double first_loss, double factor, long step,
                                       const std::filesystem::path& last) {
    if (std::isfinite(loss) && (factor <= 0 || loss <= factor * first_loss)) return;
    throw error(fmt::format("the loss at step {} is {}, past the divergence limit ({:g} x the run's first loss {}): "
                            "the run diverged and no checkpoint was saved",
                            step, format_loss(loss), factor, format_loss(first_loss)),
                "lower the learning rate or lengthen the warmup" +
                    (last.empty() ? std::string() : "; the last good checkpoint is " + last.string()),
                {"lr", "warmup"});
}

inline void check_run_options(const run_options& o, long steps) {
    const auto bad = [](const std::string& what, const std::string& hint) {
        throw error("run_training: " + what, hint);
    };
    if (o.out.empty())
        bad("run_options::out is empty", "name the run's directory (checkpoints and the loss plot go there)");
    if (steps < 1)
        bad(fmt::format("the run has {} steps", steps),
            "set run_options::steps, or the schedule's total_steps, to at least 1");
    if (o.stop_at < 0 || o.stop_at > steps)
        bad(fmt::format("stop_at {} is outside the run's steps 0..{}", o.stop_at, steps),
            "stop at a step of the run (0: at its end); the schedule stays that of the whole run");
    if (o.stop_at > 0 && !o.checkpoints)
        bad(fmt::format("stop_at {} without checkpoints: the run would stop to be resumed from nothing", o.stop_at),
            "save checkpoints (run_options::checkpoints), or run to the end");
    if (o.eval_every < 0 || o.save_every < 0 || o.eval_batches < 1 || o.print_every < 1)
        bad(fmt::format("eval_every {}, save_every {} (each >= 0), eval_batches {}, print_every {} (each >= 1)",
                        o.eval_every, o.save_every, o.eval_batches, o.print_every),
            "0 turns evaluation or periodic checkpoints off");
    if (!(o.divergence_factor >= 0))
        bad(fmt::format("divergence_factor {} is not >= 0", o.divergence_factor),
            "3 is the usual limit; 0 checks finiteness only");
}

// The trainer's streams report their work to a trace recorder while this lives (CPU streams: each
// task; CUDA streams: each op, collected by flush()). The recorder is shared with the tracers, and
// the tracers are removed at the end, so a stream never reports to a recorder that is gone.
template <class Trainer>
class stream_tracing {
public:
    stream_tracing(Trainer& t, std::shared_ptr<trace_recorder> recorder)
        : m_trainer(t), m_recorder(std::move(recorder)) {
        if (!m_recorder) return;
        m_trainer.for_each_stream([&](std::string_view track, auto& s) {
            if constexpr (requires { s.set_tracer(nullptr); })
                s.set_tracer([rec = m_recorder, name = std::string(track)](std::string_view what, auto b, auto e) {
                    rec->add(name, what, b, e);
                });
        });
    }
    ~stream_tracing() {
        if (!m_recorder) return;
        m_trainer.for_each_stream([](std::string_view, auto& s) {
            if constexpr (requires { s.set_tracer(nullptr); }) s.set_tracer(nullptr);
        });
    }
    stream_tracing(const stream_tracing&) = delete;
    stream_tracing& operator=(const stream_tracing&) = delete;

    // GPU streams time their ops with events: collected once the step is done.
    void flush() {
        if (!m_recorder) return;
        m_trainer.for_each_stream([](std::string_view, auto& s) {
            if constexpr (requires { s.flush_trace(); }) s.flush_trace();
        });
    }

private:
    Trainer& m_trainer;
    std::shared_ptr<trace_recorder> m_recorder;
};

}  // namespace detail

// Trains `t` from its current step to run_options::stop_at (or the run's last step), drawing
// micro-batches from `train` and evaluating on `validation` (null: no evaluation); see the top of
// this file. Returns what the run did; throws strata::error when it cannot go on (a diverged loss,
// a checkpoint that cannot be written, a hook's own error), with every checkpoint already written
// intact.
template <RunTrainer Trainer>
run_result run_training(Trainer& t, data::batch_loader& train, data::batch_loader* validation, const run_options& o,
                        const run_hooks& hooks = {}, const model_files<typename Trainer::model_type>& files = {}) {
    namespace fs = std::filesystem;
    check_model_has_files<typename Trainer::model_type>();
    std::ostream& notes = o.log ? *o.log : std::cout;
    const bool terminal = o.terminal.value_or(o.log == nullptr && stdout_is_terminal());
    const long steps = o.steps > 0 ? o.steps : t.options().schedule.total_steps;
    detail::check_run_options(o, steps);
    std::filesystem::create_directories(o.out);
    const long stop = o.stop_at > 0 ? o.stop_at : steps;
    const bool saving = o.checkpoints.has_value();

    // Resume: weights, moments, step; the loader's place; the loss curve of the whole run so far.
    std::vector<loss_point> train_curve, val_curve;
    double first_loss = std::numeric_limits<double>::quiet_NaN();
    if (!o.resume.empty()) {
        const nlohmann::json state = strata::load_checkpoint(t, o.resume, files);
        const std::string state_file = (o.resume / "trainer_state.json").string();
        train.restore(json_field<data::loader_cursor>(state, "data_cursor", state_file));
        restore_loss_curve(state, train_curve, val_curve, first_loss, state_file);
        notes << fmt::format("resumed from {} at step {}", o.resume.string(), t.step_count()) << std::endl;
        if (hooks.on_resume) hooks.on_resume(state);
    }
    auto trainer_state = [&] {
        nlohmann::json state = hooks.state ? hooks.state() : nlohmann::json::object();
        state["data_cursor"] = train.cursor();
        state["first_loss"] = first_loss;
        state["loss_curve"] = loss_curve_json(train_curve, val_curve);
        return state;
    };

    // Before step 1: the checkpoints this run writes fit where they go (their exact bytes, from
    // the model's layouts), or the run is refused now rather than at its last save.
    const long from = t.step_count();
    checkpoint_plan plan{.saving = saving, .where = o.out};
    if (saving) {
        plan.count = planned_checkpoints(from, stop, o.save_every);
        const std::uint64_t fixed = checkpoint_bytes(t.model(), t.optimizer(), *o.checkpoints,
                                                     files.bytes(t.model()), 0, o.extra_files);
        plan.bytes_each = mean_checkpoint_bytes(fixed, trainer_state(), from, stop, o.save_every);
        plan.free_bytes = free_disk_bytes(o.out);
    }
    if (hooks.check_checkpoints) {
        hooks.check_checkpoints(plan);
    } else if (!saving) {
        notes << "checkpoints: none: nothing of this run is saved" << std::endl;
    } else {
        check_checkpoint_fits(plan.bytes_each, plan.free_bytes, plan.count, o.out.string());
        notes << fmt::format("checkpoints: {} x {} in {} ({} free)", plan.count, format_bytes_short(plan.bytes_each),
                             o.out.string(), format_bytes_short(plan.free_bytes))
              << std::endl;
    }

    std::optional<metrics_writer> metrics;
    if (!o.metrics.empty()) metrics.emplace(o.metrics, /*append=*/!o.resume.empty() || o.append_metrics);
    progress_reporter progress(steps, notes, terminal, {.print_every = o.print_every, .start_step = from});
    std::shared_ptr<trace_recorder> trace;
    if (o.transfer_overlap || !o.trace.empty()) trace = std::make_shared<trace_recorder>();
    detail::stream_tracing<Trainer> tracing(t, trace);
    // The trace file keeps steps 2 and 3 (past the first step's cold caches).
    const auto traced = [&](long step) { return !o.trace.empty() && (step == 2 || step == 3); };
    const auto stop_requested = [&] { return hooks.stop_requested && hooks.stop_requested(); };
    bool stopping = stop_requested();  // polled before step 1 (a stop asked for while resuming), then after each step

    run_result result;
    // A side output that fails is noted, and no longer written: it never costs the run its training.
    const auto side_output = [&](const char* what, auto&& write) {
        try {
            write();
            return true;
        } catch (const std::exception& e) {
            result.lost_outputs.push_back(std::string(what) + ": " + e.what());
            progress.note(fmt::format("warning: {}; {} no longer written, training goes on", e.what(), what));
            return false;
        }
    };
    // The checkpoint a failed run continues from: the last this run saved, or the one it resumed.
    const auto last_good = [&] { return result.last_checkpoint.empty() ? o.resume : result.last_checkpoint; };
    bool plotting = true;
    // A checkpoint is written first, then OUT/latest names it; never one of a diverged run.
    auto save_and_plot = [&](const step_result& r) {
        if (saving) {
            detail::refuse_diverged_checkpoint(r.loss, first_loss, o.divergence_factor, r.step, last_good());
            if (hooks.before_checkpoint) hooks.before_checkpoint(o.out / checkpoint_dir_name(t.step_count()));
            result.last_checkpoint =
                strata::save_checkpoint(t, o.out, trainer_state(), o.extra_files, *o.checkpoints, files);
            write_file_atomically(o.out / "latest", result.last_checkpoint.filename().string() + "\n");
        }
        if (plotting)
            plotting = side_output("the loss plot", [&] {
                write_loss_svg(o.out / "loss.svg", train_curve, val_curve, o.plot_title);
                result.loss_plot = o.out / "loss.svg";
            });
        if (saving && hooks.on_checkpoint) hooks.on_checkpoint(result.last_checkpoint);
    };
    const train_options& to = t.options();
    std::vector<double> step_seconds;  // this run's steps, for the median against the prediction
    transfer_counters before{};
    if constexpr (requires { t.counters(); }) before = t.counters();
    try {
        while (t.step_count() < stop && !stopping) {
            const long next = t.step_count() + 1;
            std::vector<data::batch> micro;
            micro.reserve(to.accum);
            for (std::size_t i = 0; i < to.accum; ++i) micro.push_back(train.next());
            if (trace && !(traced(next) && next == 3)) trace->clear();  // step 3 of a trace file keeps step 2
            const auto start = std::chrono::steady_clock::now();
            const step_result r = t.step(micro);
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            tracing.flush();
            detail::refuse_non_finite_loss(r, last_good());
            const double tokens_per_s = static_cast<double>(r.tokens) / seconds;
            train_curve.push_back({static_cast<double>(r.step), r.loss});
            if (std::isnan(first_loss)) first_loss = r.loss;

            nlohmann::json record{{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                                  {"tokens_per_s", tokens_per_s}, {"tokens", r.tokens},
                                  {"bytes_storage_read", 0}, {"bytes_storage_write", 0},  // 0: no counters
                                  {"step_seconds", seconds}};
            if (o.predicted_step_seconds > 0) record["predicted_step_seconds"] = o.predicted_step_seconds;
            step_seconds.push_back(seconds);
            if constexpr (requires { t.counters(); }) {  // the bytes each link moved in this step
                const transfer_counters now = t.counters();
                record["bytes_h2d"] = now.h2d_bytes - before.h2d_bytes;
                record["bytes_d2h"] = now.d2h_bytes - before.d2h_bytes;
                record["bytes_storage_read"] = now.storage_read_bytes - before.storage_read_bytes;
                record["bytes_storage_write"] = now.storage_write_bytes - before.storage_write_bytes;
                before = now;
            }
            // The layers' forward FLOPs: a training step is 3 forwards (backward = 2), the model
            // FLOPs; activation checkpointing recomputes one more forward that does not count.
            if constexpr (requires { t.model().flops(to.batch, to.seq); })
                record["model_tflops_per_s"] =
                    3.0 * t.model().flops(to.batch, to.seq) * static_cast<double>(to.accum) / seconds / 1e12;
            if (trace) {
                record["transfer_hidden_fraction"] = trace->transfer_hidden_fraction();
                if (traced(r.step) && (r.step == 3 || r.step == stop))
                    result.trace_written = side_output("the trace", [&] { trace->write(o.trace); });
            }
            if (hooks.on_step) hooks.on_step(r, record);
            if (metrics && !side_output("the metrics", [&] { metrics->write(record); })) metrics.reset();
            progress.update(r.step, r.loss, tokens_per_s);

            const bool last = r.step == stop;
            if (validation && o.eval_every > 0 && (r.step % o.eval_every == 0 || last)) {
                validation->reset();
                std::vector<data::batch> batches;
                const long n = std::min<long>(o.eval_batches, static_cast<long>(validation->batches_per_epoch()));
                for (long i = 0; i < n; ++i) batches.push_back(validation->next());
                const double val = t.evaluate(batches);
                val_curve.push_back({static_cast<double>(r.step), val});
                if (metrics && !side_output("the metrics", [&] { metrics->write({{"step", r.step}, {"val_loss", val}}); }))
                    metrics.reset();
                progress.note(fmt::format("step {}: val_loss {}", r.step, format_loss(val)));
                if (hooks.on_eval) hooks.on_eval(r.step, val);
            }
            stopping = stop_requested();
            if ((o.save_every > 0 && r.step % o.save_every == 0) || last || stopping) save_and_plot(r);
        }
    } catch (...) {
        progress.finish();
        const fs::path good = last_good();
        notes << fmt::format("training stopped by an error after step {}; {}", t.step_count(),
                             good.empty() ? std::string("no checkpoint of this run was saved")
                                          : "the last checkpoint, intact, is " + good.string())
              << std::endl;
        throw;
    }
    progress.finish();
    result.step = t.step_count();
    result.stopped = result.step < stop;
    if (!step_seconds.empty()) {  // the first step (cold caches, first pins) only when it is the only one
        std::vector<double> timed(step_seconds.begin() + (step_seconds.size() > 1 ? 1 : 0), step_seconds.end());
        std::sort(timed.begin(), timed.end());
        const std::size_t n = timed.size();
        result.step_seconds = n % 2 ? timed[n / 2] : (timed[n / 2 - 1] + timed[n / 2]) / 2;
        if (o.predicted_step_seconds > 0)
            notes << prediction_summary(result.step_seconds, o.predicted_step_seconds, n) << std::endl;
    }
    if (result.trace_written)
        notes << fmt::format("trace of steps 2-3: {} (open it in ui.perfetto.dev)", o.trace.string()) << std::endl;
    if (!result.last_checkpoint.empty())
        notes << fmt::format("saved {}{}{}", result.last_checkpoint.string(),
                             *o.checkpoints == checkpoint_contents::weights ? " (weights only: no optimizer state)" : "",
                             result.loss_plot.empty() ? std::string() : " (loss curve: " + result.loss_plot.string() + ")")
              << std::endl;
    for (const auto& lost : result.lost_outputs) notes << "warning: " << lost << std::endl;
    return result;
}

}  // namespace strata
