// strata-gpt: train a GPT-2-architecture model with strata, and sample from it.
//
//   strata-gpt train --data FILE [options]      (strata-gpt train --help)
//   strata-gpt train --init-from CKPT --lora-rank R --data FILE    (LoRA: only adapters train)
//   strata-gpt export --adapters DIR --out DIR  (a LoRA run's adapters merged into its base)
//   strata-gpt sample --checkpoint DIR --prompt TEXT [--device cpu|cuda] [options]
#include <strata/core/error.hpp>     // strata::error
#include <strata/io/json_file.hpp>    // read_json_file
#include <strata/nn/gpt2_config.hpp>  // gpt_config::from_hf_json

#include "../common/command_line.hpp"   // parse_command_line, usage_error
#include "../common/config_file.hpp"    // apply_config_file
#include "../common/example_cli.hpp"    // tokenizer_help, chat_template_help, add_tier_options, add_activation_options
#include "../common/machine_cli.hpp"    // add_machine_options
#include "../common/run_checks.hpp"     // count_in, real_in, unsigned_number, add_optimizer_options, add_save_option, flag_hint_for
#include "../common/run_directory.hpp"  // resolve_checkpoint, run_directory_of
#include "export.hpp"                   // the export command (export.cpp): export_args, run_export
#include "sample.hpp"                   // the sample command (sample.cpp): sample_args, run_sample
#include "train.hpp"                    // the train command (train.cpp): train_args, run_train

#include <CLI/CLI.hpp>  // CLI::App

#include <exception>  // std::exception
#include <iostream>   // std::cerr
#include <string>     // std::string

using namespace strata;
using gpt_cli::export_args, gpt_cli::sample_args, gpt_cli::train_args;
using gpt_cli::run_export, gpt_cli::run_sample, gpt_cli::run_train;

namespace {

// --resume CKPT: the run's recorded options, data and model shape are the defaults of the flags not
// given, and the run's own directory (CKPT's) that of --out.
void resume_defaults(CLI::App& train, train_args& t) {
    namespace fs = std::filesystem;
    t.resume = examples::resolve_checkpoint(t.resume, "--resume").string();
    const fs::path state_file = fs::path(t.resume) / "trainer_state.json";
    if (!fs::exists(state_file))
        throw error("--resume " + t.resume + ": no trainer_state.json, so it is no checkpoint a run saved",
                    "resume from a run's OUT/step-N (or OUT); to start from a model's weights, pass --init-from");
    const auto state = read_json_file(state_file);
    nlohmann::json shape = nlohmann::json::object();
    if (state.contains("lora") && state["lora"].is_object()) {  // a LoRA run: the base and the rank
        shape["init_from"] = state["lora"].value("base", std::string());
        shape["lora_rank"] = state["lora"].value("rank", 0);
    } else if (fs::exists(fs::path(t.resume) / "config.json")) {
        const auto c = gpt_config::from_hf_json(read_json_file(fs::path(t.resume) / "config.json"),
                                                (fs::path(t.resume) / "config.json").string());
        shape = {{"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_embd", c.n_embd}};
    }
    examples::apply_recorded_options(train, state, shape);
    if (train.count("--out") > 0) return;
    const auto home = examples::run_directory_of(t.resume);
    if (!home)
        throw error("--resume " + t.resume + " is not a run's OUT/step-N, so its run's directory is unknown",
                    "pass --out DIR for the resumed run's checkpoints");
    t.out = home->string();
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"strata-gpt: train a GPT-2-architecture model with strata, and sample from it", "strata-gpt"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("strata-gpt ") + STRATA_VERSION);
    using examples::count_in, examples::real_in, examples::unsigned_number;
    constexpr long max_count = 1L << 40;  // far beyond any real value; a typo or a wrapped negative is not

    train_args t;
    auto* train = app.add_subcommand("train", "train (pre-train or fine-tune) a GPT on a text or JSON file");
    train->add_option("--config", t.config, "read options from a TOML/INI file: keys are the long flag names (steps = 600), at the top or in [train]; the command line wins")->check(CLI::ExistingFile);
    train->add_option("--data", t.data, "training data: plain text, JSONL/JSON {\"text\"} or instruction records (required)")->check(CLI::ExistingFile);
    train->add_option("--format", t.format, "data format")->check(CLI::IsMember({"auto", "text", "jsonl", "instruct", "chat"}))->capture_default_str();
    train->add_option("--chat-template", t.chat_template, examples::chat_template_help);
    train->add_option("--tokenizer", t.tokenizer, examples::tokenizer_help)->capture_default_str();
    train->add_option("--init-from", t.init_from, "start from the weights of a GPT-2 directory (Hugging Face's or strata's); its config gives the model's shape")->check(CLI::ExistingDirectory);
    train->add_option("--n-layer", t.n_layer, "transformer blocks")->capture_default_str()->check(count_in(1, 4096));
    train->add_option("--n-head", t.n_head, "attention heads")->capture_default_str()->check(count_in(1, 4096));
    train->add_option("--n-embd", t.n_embd, "channels")->capture_default_str()->check(count_in(1, 1L << 20));
    train->add_option("--seq-len", t.seq_len, "tokens per sequence (the model's context)")->capture_default_str()->check(count_in(1, 1L << 24));
    train->add_option("--batch", t.batch, "sequences per micro-batch")->capture_default_str()->check(count_in(1, 1L << 24));
    train->add_option("--accum", t.accum, "micro-batches per optimizer step")->capture_default_str()->check(count_in(1, 1L << 24));
    train->add_option("--gpus", t.gpus,
                      "data-parallel ranks, each on its share of the batch (global batch: gpus x accum x batch): "
                      "GPUs 0..N-1 over NCCL, or on the CPU backend N ranks as threads; the host state is kept once")
        ->capture_default_str()
        ->check(count_in(1, 64));
    train->add_option("--steps", t.steps, "optimizer steps")->capture_default_str()->check(count_in(1, max_count));
    train->add_option("--lr", t.lr, "peak learning rate")->capture_default_str()->check(real_in(0, 1e6));
    train->add_option("--min-lr", t.min_lr, "final learning rate of the decay")->capture_default_str()->check(real_in(0, 1e6));
    train->add_option("--warmup", t.warmup, "linear warmup steps (default: a tenth of --steps, at most 20)")->check(count_in(0, max_count));
    train->add_option("--schedule", t.schedule, "learning-rate schedule")->check(CLI::IsMember({"cosine", "linear", "constant", "step"}))->capture_default_str();
    examples::add_optimizer_options(*train, t);
    train->add_option("--clip", t.clip, "max global gradient norm (0: no clipping)")->capture_default_str()->check(real_in(0, 1e30));
    train->add_option("--val-fraction", t.val_fraction, "fraction of sequences held out for validation")->capture_default_str()->check(real_in(0, 0.9));
    train->add_option("--eval-every", t.eval_every, "evaluate every N steps (0: never)")->capture_default_str()->check(count_in(0, max_count));
    train->add_option("--eval-batches", t.eval_batches, "validation batches per evaluation")->capture_default_str()->check(count_in(1, max_count));
    train->add_option("--seed", t.seed, "seed of initialization and shuffling")->capture_default_str()->check(unsigned_number);
    train->add_option("--out", t.out, "directory for checkpoints (OUT/step-N) and loss.svg (a resume: the run's own)")->capture_default_str();
    train->add_option("--save-every", t.save_every, "save a checkpoint every N steps (0: only at the end); every one is kept")->capture_default_str()->check(count_in(0, max_count));
    examples::add_save_option(*train, t.save);
    train->add_option("--resume", t.resume, "resume from a checkpoint directory (OUT/step-N, or OUT: its latest), in its run's directory; the run's recorded options, data and shape are the defaults")->check(CLI::ExistingDirectory);
    train->add_flag("--allow-option-changes", t.allow_option_changes, "resume with options that differ from the checkpoint's (each change is printed; the run no longer equals one never interrupted)");
    train->add_flag("--overwrite", t.overwrite, "replace the checkpoints in --out of another run (or, resuming, this run's past the resumed step): strata's checkpoints only, removed at the first save");
    train->add_option("--metrics", t.metrics, "write per-step metrics as JSON lines to FILE (a resume appends to the run's own; never over another file)");
    train->add_flag("--metrics-append", t.metrics_append, "add this run's metrics lines to an existing --metrics file that is not this run's");
    train->add_option("--stop-at", t.stop_at, "stop and save after this step, keeping the schedule of --steps (resume later)")->check(count_in(1, max_count));
    train->add_option("--placement", t.placement, "where the training state lives: auto (the planner decides), resident, streamed")->check(CLI::IsMember({"auto", "resident", "streamed"}))->capture_default_str();
    examples::add_tier_options(*train, t);
    train->add_option("--storage-dir", t.storage_dir, "directory for storage-tier files (default: a temporary one); how much of the optimizer's state goes there is the planner's choice, or --state-on-storage's");
    train->add_flag("--plan", t.plan_only, "print the memory plan and the predicted step, and exit");
    examples::add_machine_options(*train, t);
    train->add_option("--trace", t.trace, "write a Chrome/Perfetto trace of steps 2-3 to FILE.json");
    train->add_option("--device", t.device, "cpu, cuda or auto (auto: CUDA when a GPU is present)")->capture_default_str();
    train->add_flag("--tf32", t.tf32, "CUDA: let the GEMMs use TF32 tensor cores (default: strict FP32)");
    train->add_option("--threads", t.threads, "CPU threads for matrix products (0: all)")->check(count_in(0, 1 << 20));
    examples::add_activation_options(*train, t);
    train->add_option("--lora-rank", t.lora_rank, "LoRA: train only rank-R adapters on the projections of --init-from's model (0: off)")->capture_default_str()->check(count_in(0, 1L << 20));
    train->add_option("--lora-alpha", t.lora_alpha, "LoRA: the adapters' outputs are scaled by alpha / rank (default: 2 x rank)")->check(real_in(0, 1e6));
    train->add_option("--lora-targets", t.lora_targets, "LoRA: comma-separated projections to adapt (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj)")->capture_default_str();

    export_args x;
    auto* exporter = app.add_subcommand("export", "merge a LoRA run's adapters into its base model (a plain GPT-2 checkpoint)");
    exporter->add_option("--adapters", x.adapters, "a LoRA run's checkpoint directory (OUT/step-N, or OUT for its latest) or its adapters.safetensors")->required()->check(CLI::ExistingPath);
    exporter->add_option("--base", x.base, "the base model (default: the --init-from the LoRA run recorded)")->check(CLI::ExistingDirectory);
    exporter->add_option("--out", x.out, "directory to write the merged checkpoint to (replaced whole)")->required();
    exporter->add_flag("--overwrite", x.overwrite, "replace an --out that is not a previous export");

    sample_args s;
    auto* sample = app.add_subcommand("sample", "generate text from a checkpoint");
    sample->add_option("--checkpoint", s.checkpoint, "checkpoint directory (strata's OUT/step-N, OUT for its latest, or a Hugging Face GPT-2 directory)")->required()->check(CLI::ExistingDirectory);
    sample->add_option("--prompt", s.prompt, "text to continue")->required();
    sample->add_option("--max-new-tokens,--tokens", s.max_new_tokens, "tokens to generate")->capture_default_str()->check(count_in(0, 1L << 24));
    sample->add_option("--temperature", s.temperature, "softmax temperature (0: greedy)")->capture_default_str()->check(real_in(0, 1e6));
    sample->add_option("--top-k", s.top_k, "sample among the k most likely tokens (0: all)")->capture_default_str()->check(count_in(0, 1L << 24));
    sample->add_option("--seed", s.seed, "sampling seed")->capture_default_str()->check(unsigned_number);
    sample->add_option("--device", s.device, "cpu, cuda or auto (auto: CUDA when a GPU is present)")->capture_default_str();
    sample->add_option("--threads", s.threads, "CPU threads for matrix products (0: all)")->check(count_in(0, 1 << 20));

    if (const auto code = examples::parse_command_line(app, argc, argv)) return *code;
    try {
        if (train->parsed()) {
            if (!t.config.empty()) examples::apply_config_file(*train, t.config);
            if (!t.resume.empty()) resume_defaults(*train, t);
            if (t.data.empty()) throw error("--data is required", "pass --data FILE (or data = \"FILE\" in --config)");
            t.tokenizer_given = train->count("--tokenizer") > 0;
            return run_train(t);
        }
        if (exporter->parsed()) return run_export(x);
        return run_sample(s);
    } catch (const std::exception& e) {
        std::cerr << "strata-gpt: error: " << e.what() << std::endl;
        if (const auto hint = examples::flag_hint_for(e); !hint.empty()) std::cerr << "strata-gpt: " << hint << std::endl;
        return 1;
    }
}
