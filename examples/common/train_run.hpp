// The part of a `train` command that strata-gpt and strata-llama share around strata::run_training
// (train/run.hpp, the step loop): the trainer's and the run's options from their flags, the hooks that speak in
// flags (the checkpoint plan printed and refused with --save's choices, the note of a resume
// without the optimizer's state, SIGINT / SIGTERM), the trainer_state.json fields both record, and the
// run's last lines. A program adds its model's files (strata::model_files: what a checkpoint holds of
// the model) and its own fields of trainer_state.json.
// Example code, not library code: both programs include it.
#pragma once

#include <strata/backend/pinning.hpp>  // format_pinning
#include <strata/core/format.hpp>      // fmt::format
#include <strata/data/loader.hpp>      // data::make_train_loader, make_validation_loader
#include <strata/data/tokenize.hpp>    // data::prepared_data
#include <strata/model/model_files.hpp>  // model_files
#include <strata/report/progress.hpp>  // stdout_is_terminal
#include <strata/train/run.hpp>        // run_training, run_options, run_hooks, run_result, checkpoint_plan
#include <strata/train/schedule.hpp>   // parse_lr_kind, validate
#include <strata/train/tiered_trainer.hpp>    // train_options
#include <strata/comm/thread_communicator.hpp>  // thread_group, thread_communicator
#include <strata/train/data_parallel.hpp>       // data_parallel_trainer
#if defined(STRATA_WITH_CUDA) && defined(STRATA_HAVE_NCCL)
#include <strata/comm/nccl_communicator.hpp>  // nccl_group, nccl_communicator
#include <strata/cuda.hpp>                    // cuda_backend
#endif

#include "example_cli.hpp"  // tokenizer_kind, tokenizer_files
#include "run_checks.hpp"   // check_threads, contents_of_save, check_checkpoints_fit, recorded_options, interrupt_guard
#include "run_directory.hpp"  // new_run_id, run_id_of, output_record, metrics_append_of, replace_checkpoints

#include <nlohmann/json.hpp>  // nlohmann::json

#include <algorithm>   // std::max
#include <chrono>      // std::chrono::steady_clock
#include <filesystem>  // std::filesystem::path
#include <iostream>    // std::cout, std::cerr
#include <optional>    // std::optional
#include <string>      // std::string
#include <utility>     // std::exchange
#include <vector>      // std::vector

namespace strata::examples {

// The flags of a run that do not fit together, whatever the model: --threads, --stop-at, --save.
template <class Args>
void check_run_flags(const Args& a) {
    check_threads(a.threads);
    check_stop_at(a.stop_at, a.steps);
    check_save_options(a.save, a.save_every, a.stop_at);
}

// The chosen optimizer's hyperparameters from the flags (make_optimizer's names).
template <class Args>
nlohmann::json optimizer_hparams_of(const Args& a) {
    nlohmann::json h{{"weight_decay", a.weight_decay}};
    if (a.optimizer == "sgd") h["momentum"] = a.momentum;
    if (a.optimizer == "adafactor") {
        h["beta2_decay"] = a.beta2_decay;
        h["eps2"] = a.eps2;
        h["d"] = a.update_clip;
    }
    return h;
}

// The trainer's options from the flags both programs have (the plan adds activations and homes).
// The schedule's warmup is resolved_warmup's, the number trainer_state.json records
// (recorded_options) and a resume compares.
template <class Args>
train_options train_options_of(const Args& a) {
    train_options o{.batch = a.batch, .seq = a.seq_len, .accum = a.accum};
    o.schedule = {.kind = parse_lr_kind(a.schedule), .lr = a.lr, .min_lr = a.min_lr,
                  .warmup_steps = resolved_warmup(a.warmup, a.steps), .total_steps = a.steps,
                  .step_size = std::max<long>(1, a.steps / 3), .gamma = 0.1};
    validate(o.schedule);
    o.optimizer = make_optimizer(a.optimizer, optimizer_hparams_of(a));
    o.clip = a.clip;
    return o;
}

// run_training's options from the train flags both programs have. `data` is the file trained on,
// `tokenizer` the spec used ("byte", "gpt2:DIR", "hf:PATH": its files go into every checkpoint).
template <class Args>
run_options run_options_of(const Args& a, const std::string& program, const std::string& data,
                           const std::string& tokenizer) {
    run_options o{.out = a.out, .steps = a.steps, .stop_at = a.stop_at, .eval_every = a.eval_every,
                  .eval_batches = a.eval_batches, .save_every = a.save_every};
    if (a.save == "none")
        o.checkpoints.reset();
    else
        o.checkpoints = contents_of_save(a.save);
    o.extra_files = tokenizer_files(tokenizer);
    o.resume = a.resume;
    o.metrics = a.metrics;
    o.append_metrics = metrics_append_of(a);
    if constexpr (requires { a.trace; }) o.trace = a.trace;
    o.plot_title = program + ": " + data;
    o.terminal = stdout_is_terminal();
    return o;
}

// The hooks both programs set: trainer_state.json's seed, tokenizer kind, data (its path and
// identity: size and fingerprint), options (what a resume compares), the run's id (kept across
// resumes) and its metrics file (what proves it this run's at a resume), the checkpoint plan
// against --save, --overwrite's removal at the first save, the note of a resume without moments,
// and a stop on SIGINT / SIGTERM (an interrupt_guard must be alive during the run). `a` must
// outlive the hooks.
template <class Args>
run_hooks cli_hooks(const Args& a, const std::string& tokenizer, const std::string& data) {
    run_hooks h;
    std::string run_id = a.resume.empty() ? std::string() : run_id_of(read_json_file(std::filesystem::path(a.resume) / "trainer_state.json"));
    if (run_id.empty()) run_id = new_run_id();
    const file_fingerprint identity = fingerprint_of(data);
    h.state = [&a, kind = tokenizer_kind(tokenizer), data, identity, run_id] {
        nlohmann::json state{{"seed", a.seed},
                             {"tokenizer", kind},
                             {"data", std::filesystem::absolute(data).string()},
                             {"data_identity", {{"bytes", identity.bytes}, {"hash", identity.hash}}},
                             {"run_id", run_id},
                             {"options", recorded_options(a, resolved_warmup(a.warmup, a.steps))}};
        if (!a.metrics.empty()) state["metrics"] = output_record(a.metrics);
        return state;
    };
    h.before_checkpoint = [&a, first = true](const std::filesystem::path&) mutable {
        if (std::exchange(first, false) && a.overwrite) replace_checkpoints(a);
    };
    h.check_checkpoints = [&a](const checkpoint_plan& plan) { check_checkpoints_fit(a, plan); };
    h.on_resume = [&a](const nlohmann::json& state) {
        if (!moments_saved(state))
            std::cout << fresh_optimizer_note(a.resume, state.value("step", 0L), checkpoint_optimizer(state)) << std::endl;
    };
    h.stop_requested = [] { return interrupt_guard::interrupted(); };
    return h;
}

// What a train command knows when it comes to build the trainer, besides its flags.
struct run_inputs {
    std::string program;                  // "strata-gpt": the loss plot's title
    std::string data;                     // the data file trained on
    std::string tokenizer;                // the tokenizer spec used ("byte", "gpt2:DIR", "hf:PATH")
    const data::prepared_data& prepared;  // its training and validation sequences
    token_id eot;                         // pads the validation batches
    bool streamed = false;                // a streamed plan: every step traced (transfer_hidden_fraction)
    double predicted_step_seconds = 0;    // the cost model's step time for the plan (0: none)
};

// The trainer `t` (built since `built`) initialized from --seed, `upload(t)` putting the
// program's starting weights in (--init-from), then run_training with the program's loaders,
// options and hooks, `model_state(state)` adding the model's fields to trainer_state.json, and the
// model's checkpoint files `files`.
template <class T, class Model, class Args, class Upload, class ModelState>
run_result train_built(T& t, std::chrono::steady_clock::time_point built, const Model& model, const Args& a,
                       const run_inputs& in, Upload&& upload, ModelState&& model_state,
                       const model_files<Model>& files) {
    t.initialize(a.seed);
    std::cout << fmt::format("trainer built and {} groups initialized in {:.1f} s", model.groups().size(),
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - built).count())
              << std::endl;
    upload(t);
    auto train_loader = data::make_train_loader(in.prepared.train, a.batch, a.seed);
    std::optional<data::batch_loader> validation;
    if (!in.prepared.validation.empty())
        validation.emplace(data::make_validation_loader(in.prepared.validation, a.batch, in.eot));
    run_options options = run_options_of(a, in.program, in.data, in.tokenizer);
    options.transfer_overlap = in.streamed;
    options.predicted_step_seconds = in.predicted_step_seconds;
    run_hooks hooks = cli_hooks(a, in.tokenizer, in.data);
    hooks.state = [common = hooks.state, &model_state] {
        nlohmann::json state = common();
        model_state(state);
        return state;
    };
    interrupt_guard interrupt;  // SIGINT / SIGTERM: finish the step, save, stop
    return run_training(t, train_loader, validation ? &*validation : nullptr, options, hooks, files);
}

// The trainer of the plan (Trainer) built on `backend`, then train_built.
template <class Trainer, class B, class Model, class Args, class Upload, class ModelState>
run_result build_and_train(B& backend, const Model& model, const train_options& o, const Args& a, const run_inputs& in,
                           Upload&& upload, ModelState&& model_state, const model_files<Model>& files) {
    const auto built = std::chrono::steady_clock::now();
    Trainer t(backend, model, o);
    std::cout << format_pinning(backend.pinning()) << std::endl;
    return train_built(t, built, model, a, in, upload, model_state, files);
}

// The communicators of data-parallel ranks on backend B: ranks as threads on the CPU backend
// (thread_communicator), NCCL on the CUDA backend (one thread per GPU of this process).
template <class B>
struct rank_group {
    static constexpr bool available = false;  // no communicator for B in this build
};
template <>
struct rank_group<cpu_backend> {
    static constexpr bool available = true;
    thread_group group;
    std::vector<thread_communicator> comms;
    explicit rank_group(const std::vector<cpu_backend*>& backends) : group(backends.size()) {
        for (std::size_t r = 0; r < backends.size(); ++r) comms.emplace_back(group, r);
    }
};
#if defined(STRATA_WITH_CUDA) && defined(STRATA_HAVE_NCCL)
template <>
struct rank_group<cuda_backend> {
    static constexpr bool available = true;
    nccl_group group;
    std::vector<nccl_communicator> comms;
    explicit rank_group(const std::vector<cuda_backend*>& backends) : group(devices_of(backends)) {
        for (std::size_t r = 0; r < backends.size(); ++r) comms.emplace_back(group, r);
    }
    static std::vector<int> devices_of(const std::vector<cuda_backend*>& backends) {
        std::vector<int> devices;
        for (auto* b : backends) devices.push_back(b->device());
        return devices;
    }
};
#endif

// build_and_train over several devices (--gpus N): data_parallel_trainer of Trainer, one rank
// per backend, the ranks' communicators made here.
template <class Trainer, class B, class Model, class Args, class Upload, class ModelState>
run_result build_and_train_parallel(const std::vector<B*>& backends, const Model& model, const train_options& o,
                                    const Args& a, const run_inputs& in, Upload&& upload, ModelState&& model_state,
                                    const model_files<Model>& files) {
    if constexpr (rank_group<B>::available) {
        const auto built = std::chrono::steady_clock::now();
        rank_group<B> ranks(backends);
        using comm = typename decltype(ranks.comms)::value_type;
        data_parallel_trainer<Trainer, comm> t(backends, std::move(ranks.comms), model, o);
        std::cout << format_pinning(backends[0]->pinning()) << " (rank 0; the host state is its)" << std::endl;
        return train_built(t, built, model, a, in, upload, model_state, files);
    } else {
        throw error(std::string("data-parallel training on the ") + std::string(B::name) +
                        " backend needs NCCL, and this build has none",
                    "build with the CUDA Toolkit's NCCL (libnccl-dev), or train on one device", {"ranks"});
    }
}

// The run's last lines after run_training (which said what it saved); the exit code: the
// signal's when SIGINT / SIGTERM stopped the run before its last step.
template <class Args>
int finish_run(const run_result& r, const Args& a) {
    for (const auto& lost : r.lost_outputs) std::cerr << "warning: " << lost << " (the training and its checkpoints are intact)" << std::endl;
    if (a.save == "none")
        std::cout << "no checkpoint saved (--save none); loss curve: "
                  << (std::filesystem::path(a.out) / "loss.svg").string() << std::endl;
    if (!r.stopped) return 0;
    const std::string from = r.last_checkpoint.empty() ? a.resume : r.last_checkpoint.string();
    std::cout << "stopped by " << interrupt_guard::name() << " after step " << r.step
              << (a.save == "none" ? std::string("; no checkpoint saved (--save none)")
                  : from.empty()   ? std::string()
                                   : "; continue with --resume " + from)
              << std::endl;
    return interrupt_guard::exit_code();
}

}  // namespace strata::examples
