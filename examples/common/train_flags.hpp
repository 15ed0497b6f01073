// The `train` flags strata-gpt and strata-llama share, declared once: train_flags holds their
// values (each program's train_args extends it with its own), add_train_options declares them on
// a program's train command with one help text each, and each program adds its own options on top
// (its model's shape beyond layers, heads and channels, --data's default, --init-from's kind of
// directory, the projections --lora-targets names). Choice lists come from the library's names
// (name_of / to_string of each enum's list), so a choice the library adds is a choice here.
// Example code, not library code: both programs include it.
#pragma once

#include <strata/data/records.hpp>      // record_formats, to_string(record_format)
#include <strata/plan/memory_plan.hpp>  // placements, name_of(placement)
#include <strata/train/schedule.hpp>    // lr_kinds, to_string(lr_kind)

#include "choices.hpp"      // names_of
#include "example_cli.hpp"  // tokenizer_help, chat_template_help, add_tier_options, add_activation_options
#include "machine_cli.hpp"  // add_machine_options
#include "run_checks.hpp"   // count_in, real_in, unsigned_number, add_optimizer_options, add_save_option
#include "run_directory.hpp"  // checkpoint_to_resume, resumed_run_directory

#include <CLI/CLI.hpp>  // CLI::App, CLI::IsMember

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <string>       // std::string

namespace strata::examples {

// The values of the flags add_train_options declares (the defaults both programs train with).
struct train_flags {
    std::string config;  // --config FILE (applied in main)
    std::string data, format = "auto", tokenizer = "byte", init_from, resume;
    std::string chat_template;  // --chat-template: "" (auto for chat records, none otherwise), auto, none or FILE
    std::size_t n_layer = 4, n_head = 4, n_embd = 128, seq_len = 128;
    std::size_t batch = 8, accum = 1;
    std::size_t gpus = 1;  // data-parallel ranks: GPUs 0..N-1 (CUDA, NCCL) or N CPU ranks as threads
    long steps = 300, warmup = -1, eval_every = 50, save_every = 0, eval_batches = 8;
    long stop_at = 0;  // stop (and save) after this step without changing the schedule
    double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, clip = 1.0, val_fraction = 0.05;
    std::string optimizer = "adamw";  // a registered optimizer's name: adamw, sgd (with momentum) or adafactor
    double momentum = 0.9;            // SGD's
    double beta2_decay = -0.8, eps2 = 1e-3, update_clip = 1.0;  // Adafactor's (torch's defaults)
    std::string schedule = "cosine";
    std::uint64_t seed = 1337;
    std::string out, metrics, trace, device = "auto";
    std::string save = "full";  // what each checkpoint holds: full, weights (no optimizer state) or none
    std::string placement = "auto", storage_dir;
    std::string device_budget, host_budget, storage_budget;  // bytes per tier (empty: the defaults)
    std::string io_engine = "auto";                          // the storage tier's I/O engine
    std::size_t io_workers = 0;
    bool plan_only = false;         // --plan: print the plan and stop
    std::string machine;            // --machine FILE: plan and predict for that machine (with --plan only)
    bool recalibrate = false;       // measure this machine's rates again, not from the cache
    bool state_on_storage = false;  // every host group's optimizer state on storage
    int threads = 0;
    bool no_checkpointing = false;  // the older name of --activations keep
    std::string activations = "auto";
    bool tf32 = false;
    std::size_t lora_rank = 0;  // 0: every weight trains; > 0: LoRA adapters only (the base frozen)
    double lora_alpha = 0;      // 0: 2 x rank
    bool tokenizer_given = false;       // --tokenizer was given (else a checkpoint's own is used)
    bool overwrite = false;             // replace the checkpoints in --out of another run (or this run's past --resume)
    bool metrics_append = false;        // add to an existing --metrics file that is not this run's
    bool allow_option_changes = false;  // resume with options that differ from the checkpoint's
};

// Declares the train flags both programs share on `train` into `a` (a train_flags, or a program's
// train_args that extends it). Their help texts are the same in both programs: the CLI tests
// compare them. Model-specific flags (--data, --init-from, --lora-targets, a shape's other sizes)
// are the program's, added after this.
template <class Args>
void add_train_options(CLI::App& train, Args& a) {
    constexpr long max_count = 1L << 40;  // far beyond any real value; a typo or a wrapped negative is not
    train.add_option("--config", a.config, "read options from a TOML/INI file: keys are the long flag names (steps = 600), at the top or in [train]; the command line wins")->check(CLI::ExistingFile);
    train.add_option("--format", a.format, "data format")->check(CLI::IsMember(names_of(data::record_formats)))->capture_default_str();
    train.add_option("--chat-template", a.chat_template, chat_template_help);
    train.add_option("--tokenizer", a.tokenizer, tokenizer_help)->capture_default_str();
    // the model's shape: a checkpoint's config.json gives it with --init-from and --resume
    train.add_option("--n-layer", a.n_layer, "decoder blocks (layers)")->capture_default_str()->check(count_in(1, 4096));
    train.add_option("--n-head", a.n_head, "attention heads")->capture_default_str()->check(count_in(1, 4096));
    train.add_option("--n-embd", a.n_embd, "channels")->capture_default_str()->check(count_in(1, 1L << 20));
    train.add_option("--seq-len", a.seq_len, "tokens per sequence (the model's context)")->capture_default_str()->check(count_in(1, 1L << 24));
    // the batch and the schedule
    train.add_option("--batch", a.batch, "sequences per micro-batch")->capture_default_str()->check(count_in(1, 1L << 24));
    train.add_option("--accum", a.accum, "micro-batches per optimizer step")->capture_default_str()->check(count_in(1, 1L << 24));
    train.add_option("--gpus", a.gpus,
                     "data-parallel ranks, each on its share of the batch (global batch: gpus x accum x batch): "
                     "GPUs 0..N-1 over NCCL, or on the CPU backend N ranks as threads; the host state is kept once")
        ->capture_default_str()
        ->check(count_in(1, 64));
    train.add_option("--steps", a.steps, "optimizer steps")->capture_default_str()->check(count_in(1, max_count));
    train.add_option("--lr", a.lr, "peak learning rate")->capture_default_str()->check(real_in(0, 1e6));
    train.add_option("--min-lr", a.min_lr, "final learning rate of the decay")->capture_default_str()->check(real_in(0, 1e6));
    train.add_option("--warmup", a.warmup, "linear warmup steps (default: a tenth of --steps, at most 20)")->check(count_in(0, max_count));
    train.add_option("--schedule", a.schedule, "learning-rate schedule")->check(CLI::IsMember(names_of(lr_kinds)))->capture_default_str();
    // the optimizer: --optimizer, then each optimizer's hyperparameters (add_optimizer_options)
    add_optimizer_options(train, a);
    train.add_option("--clip", a.clip, "max global gradient norm (0: no clipping)")->capture_default_str()->check(real_in(0, 1e30));
    // evaluation, checkpoints, outputs
    train.add_option("--val-fraction", a.val_fraction, "fraction of sequences held out for validation")->capture_default_str()->check(real_in(0, 0.9));
    train.add_option("--eval-every", a.eval_every, "evaluate every N steps (0: never)")->capture_default_str()->check(count_in(0, max_count));
    train.add_option("--eval-batches", a.eval_batches, "validation batches per evaluation")->capture_default_str()->check(count_in(1, max_count));
    train.add_option("--seed", a.seed, "seed of initialization and shuffling")->capture_default_str()->check(unsigned_number);
    train.add_option("--out", a.out, "directory for checkpoints (OUT/step-N) and loss.svg (a resume: the run's own)")->capture_default_str();
    train.add_option("--save-every", a.save_every, "save a checkpoint every N steps (0: only at the end); every one is kept")->capture_default_str()->check(count_in(0, max_count));
    add_save_option(train, a.save);
    train.add_option("--resume", a.resume, "continue the run of a checkpoint directory (OUT/step-N, or OUT: its latest; weights, the optimizer's state unless saved with --save weights, step, data position) in its run's directory; the run's recorded options, data and model shape are the defaults")->check(CLI::ExistingDirectory);
    train.add_flag("--allow-option-changes", a.allow_option_changes, "resume with options that differ from the checkpoint's (each change is printed; the run no longer equals one never interrupted)");
    train.add_flag("--overwrite", a.overwrite, "replace the checkpoints in --out of another run (or, resuming, this run's past the resumed step): strata's checkpoints only, removed at the first save");
    train.add_option("--stop-at", a.stop_at, "stop and save after this step, keeping the schedule of --steps (resume later)")->check(count_in(1, max_count));
    train.add_option("--metrics", a.metrics, "write per-step metrics as JSON lines to FILE (a resume appends to the run's own; never over another file)");
    train.add_flag("--metrics-append", a.metrics_append, "add this run's metrics lines to an existing --metrics file that is not this run's");
    train.add_option("--trace", a.trace, "write a Chrome/Perfetto trace of steps 2-3 to FILE.json");
    // where the state lives, the plan and the machine
    train.add_option("--placement", a.placement, "where the training state lives: auto (the planner decides), resident, streamed")->check(CLI::IsMember(names_of(placements)))->capture_default_str();
    train.add_option("--storage-dir", a.storage_dir, "directory for storage-tier files (default: a temporary one, removed at the end); how much of the optimizer's state goes there is the planner's choice, or --state-on-storage's");
    add_tier_options(train, a);
    train.add_flag("--plan", a.plan_only, "print the memory plan and the predicted step, and exit");
    add_machine_options(train, a);
    // the backend
    train.add_option("--device", a.device, "cpu, cuda or auto (auto: CUDA when a GPU is present)")->capture_default_str();
    train.add_flag("--tf32", a.tf32, "CUDA: let the GEMMs use TF32 tensor cores (default: strict FP32)");
    train.add_option("--threads", a.threads, "CPU threads for matrix products (0: all)")->check(count_in(0, 1 << 20));
    add_activation_options(train, a);
    // LoRA (the program adds --lora-targets: its model's projections)
    train.add_option("--lora-rank", a.lora_rank, "LoRA: train only rank-R adapters on the model's projections, every other weight frozen (0: off)")->capture_default_str()->check(count_in(0, 1L << 20));
    train.add_option("--lora-alpha", a.lora_alpha, "LoRA: the adapters' outputs are scaled by alpha / rank (default: 2 x rank)")->check(real_in(0, 1e6));
}

// --resume CKPT, after the flags are parsed: CKPT resolved (OUT: its latest); the options, data and
// model shape the run recorded are the defaults of the flags not given (`shape_of(checkpoint,
// state)`: the model's flags and values, from the checkpoint's files); and, unless --out is
// given, the run continues in its own directory.
template <class Args, class ShapeOf>
void apply_resume_defaults(CLI::App& train, Args& a, ShapeOf&& shape_of) {
    const auto [checkpoint, state] = checkpoint_to_resume(a.resume);
    a.resume = checkpoint.string();
    apply_recorded_options(train, state, shape_of(checkpoint, state));
    if (train.count("--out") == 0) a.out = resumed_run_directory(checkpoint).string();
}

// The train command of a program: --data and --init-from with the program's own help (its data
// default, its kind of model directory), then the flags both programs share (add_train_options),
// in that order (the order --help lists them). The program adds its own model flags after.
template <class Args>
CLI::App* add_train_command(CLI::App& app, Args& a, const std::string& description, const std::string& data_help,
                            const std::string& init_from_help) {
    auto* train = app.add_subcommand("train", description);
    train->add_option("--data", a.data, data_help)->check(CLI::ExistingFile);
    train->add_option("--init-from", a.init_from, init_from_help)->check(CLI::ExistingDirectory);
    add_train_options(*train, a);
    return train;
}

}  // namespace strata::examples
