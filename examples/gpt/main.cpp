// strata-gpt: train a GPT-2-architecture model with strata, and sample from it.
//
//   strata-gpt train --data FILE [options]      (strata-gpt train --help)
//   strata-gpt train --init-from CKPT --lora-rank R --data FILE    (LoRA: only adapters train)
//   strata-gpt export --adapters DIR --out DIR  (a LoRA run's adapters merged into its base)
//   strata-gpt sample --checkpoint DIR --prompt TEXT [--device cpu|cuda] [options]
#include <strata/data/loader.hpp>
#include <strata/data/records.hpp>
#include <strata/data/tokenize.hpp>
#include <strata/io/json_file.hpp>
#include <strata/model/gpt.hpp>
#include <strata/model/generator.hpp>  // sample: the generator (KV cache) on either backend
#include <strata/plan/planner.hpp>
#include <strata/report/trace.hpp>
#include <strata/train/streamed_trainer.hpp>
#include <strata/nn/cpu_ops.hpp>
#include <strata/report/loss_plot.hpp>
#include <strata/report/metrics.hpp>
#include <strata/report/progress.hpp>
#include <strata/strata.hpp>
#include <strata/text/byte_tokenizer.hpp>
#include <strata/text/gpt2_tokenizer.hpp>
#include <strata/train/checkpoint.hpp>
#include <strata/train/trainer.hpp>
#ifdef STRATA_WITH_CUDA
#include <strata/cuda.hpp>  // cuda_backend, ops<cuda_backend>
#endif

#include "../common/config_file.hpp"    // apply_config_file
#include "../common/example_cli.hpp"    // make_tokenizer, use_cuda, with_planned_trainer
#include "../common/run_checks.hpp"     // validators, add_save_option, flag_hint_for
#include "../common/run_directory.hpp"  // resolve_checkpoint, is_within
#include "../lora/lora_model.hpp"        // LoRA: gpt2_lora_model, adapters, merging
#include "train.hpp"                     // the train command (train.cpp): train_args, run_train

#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace fs = std::filesystem;
using namespace strata;

namespace {

using examples::make_tokenizer;
using examples::tokenizer_of_checkpoint;

using gpt_cli::run_train;
using gpt_cli::train_args;

void print_line(const std::string& s) { std::cout << s << std::endl; }

// export: a LoRA run's adapters merged into its base model, written as a plain GPT-2 checkpoint
// (model.safetensors + config.json, loadable by strata-gpt sample, --init-from and transformers).
struct export_args {
    std::string adapters, base, out;
    bool overwrite = false;
};

// export replaces --out whole: never an input, and only a previous export unless --overwrite.
void check_export_out(const export_args& a, const fs::path& adapters, const std::string& base) {
    for (const auto& [flag, in] : std::vector<examples::named_path>{{"--adapters", adapters}, {"--base", base}})
        if (examples::is_within(a.out, in) || examples::is_within(in, a.out))
            throw error("--out '" + a.out + "' is or holds the " + flag + " input '" + in.string() +
                            "': writing it would destroy the input",
                        "pick another --out");
    const fs::path state = fs::path(a.out) / "trainer_state.json";
    const bool previous_export = fs::exists(state) && read_json_file(state).value("format", "") == "strata-gpt LoRA merge 1";
    if (fs::exists(a.out) && !fs::is_empty(a.out) && !previous_export && !a.overwrite)
        throw error("--out '" + a.out + "' exists and is not a merge strata-gpt export wrote: refusing to replace it",
                    "pick another --out, or pass --overwrite");
}

int run_export(const export_args& a) {
    fs::path adapters = a.adapters;
    std::string base = a.base;
    if (fs::is_directory(adapters)) {  // a checkpoint directory of a LoRA run: its state names the base
        const auto state_path = adapters / "trainer_state.json";
        if (base.empty() && fs::exists(state_path)) {
            const auto state = read_json_file(state_path);
            if (state.contains("lora") && state["lora"].contains("base")) base = state["lora"]["base"].get<std::string>();
        }
        adapters /= "adapters.safetensors";
    }
    if (!fs::exists(adapters))
        throw error("'" + adapters.string() + "' does not exist", "pass a LoRA run's checkpoint (OUT/step-N) or its adapters.safetensors");
    if (base.empty())
        throw error("the base model of '" + adapters.string() + "' is unknown", "pass --base DIR (the --init-from of the LoRA run)");
    check_export_out(a, adapters, base);
    auto loaded = load_model_files<float>(base);
    auto lc = lora::config_of(adapters);
    lc.n_head = loaded.config.n_head;
    const auto merged = lora::merged_blocks(loaded.config, lc, loaded.blocks, adapters);
    const fs::path tmp = fs::path(a.out).string() + ".tmp-" + std::to_string(::getpid());
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    write_model_files(gpt_model<float, cpu_backend>(loaded.config), merged, tmp);
    for (const char* f : {"vocab.json", "merges.txt"})
        if (fs::exists(fs::path(base) / f)) fs::copy_file(fs::path(base) / f, tmp / f);
    write_json_file(tmp / "trainer_state.json", nlohmann::json{{"format", "strata-gpt LoRA merge 1"},
                                                 {"tokenizer", examples::tokenizer_kind(tokenizer_of_checkpoint(base))},
                                                 {"base", fs::absolute(base).string()},
                                                 {"adapters", fs::absolute(adapters).string()}});
    commit_directory_atomically(tmp, a.out, {.replace_existing = true});
    print_line("merged " + adapters.string() + " (rank " + std::to_string(lc.rank) + ", " +
               std::to_string(lc.targets.size()) + " projections x " + std::to_string(lc.n_layer) + " layers) into " +
               base + ": " + a.out);
    return 0;
}

struct sample_args {
    std::string checkpoint, prompt, device = "auto";
    std::size_t max_new_tokens = 200, top_k = 40;
    double temperature = 0.8;
    std::uint64_t seed = 42;
};

int run_sample(const sample_args& a) {
    const fs::path checkpoint = examples::resolve_checkpoint(a.checkpoint);
    auto loaded = load_model_files<float>(checkpoint);
    auto tok = make_tokenizer(tokenizer_of_checkpoint(checkpoint));
    const token_id eot = std::visit([](const auto& t) { return t.eot_id(); }, tok);
    const bool cuda = examples::use_cuda(a.device, "strata-gpt");
    // the prompt begins a document as in training (an hf tokenizer's BOS first, as tokenizer(text))
    std::vector<token_id> prompt = std::visit([&](const auto& t) { return data::encode_document(t, a.prompt); }, tok);
    sample_options so;
    so.max_new_tokens = a.max_new_tokens;
    so.temperature = a.temperature;
    so.top_k = a.top_k;
    so.seed = a.seed;
    so.bos = eot;
    // The weights and the KV cache live in the device tier (the tiers' default budgets).
    auto generate = [&]<class B>(B& backend) {
        const gpt_model<float, B> model(loaded.config);  // its blocks decode with a KV cache
        generator<gpt_model<float, B>> gen(backend, model, loaded.blocks);
        loaded.blocks = {};  // uploaded: the host copy is not needed again
        return gen.generate(prompt, so);
    };
    std::vector<token_id> ids;
#ifdef STRATA_WITH_CUDA
    if (cuda) {
        cuda_backend backend(tier_options{});
        ids = generate(backend);
    }
#endif
    if (!cuda) {
        cpu_backend backend(tier_options{});
        ids = generate(backend);
    }
    std::cout << a.prompt << std::visit([&](const auto& t) { return t.decode(ids); }, tok) << std::endl;
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"strata-gpt: train a GPT-2-architecture model with strata, and sample from it"};
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
    train->add_option("--optimizer", t.optimizer, "adamw, or sgd (with --momentum; torch.optim.SGD's step)")->check(CLI::IsMember({"adamw", "sgd"}))->capture_default_str();
    train->add_option("--momentum", t.momentum, "SGD's momentum (0: plain SGD)")->capture_default_str()->check(real_in(0, 1));
    train->add_option("--weight-decay", t.weight_decay, "weight decay of 2-D weights and embeddings: AdamW's decoupled, SGD's coupled (added to the gradient)")->capture_default_str()->check(real_in(0, 1e6));
    train->add_option("--clip", t.clip, "max global gradient norm (0: no clipping)")->capture_default_str()->check(real_in(0, 1e30));
    train->add_option("--val-fraction", t.val_fraction, "fraction of sequences held out for validation")->capture_default_str()->check(real_in(0, 0.9));
    train->add_option("--eval-every", t.eval_every, "evaluate every N steps (0: never)")->capture_default_str()->check(count_in(0, max_count));
    train->add_option("--eval-batches", t.eval_batches, "validation batches per evaluation")->capture_default_str()->check(count_in(1, max_count));
    train->add_option("--seed", t.seed, "seed of initialization and shuffling")->capture_default_str()->check(unsigned_number);
    train->add_option("--out", t.out, "directory for checkpoints (OUT/step-N) and loss.svg")->capture_default_str();
    train->add_option("--save-every", t.save_every, "save a checkpoint every N steps (0: only at the end); every one is kept")->capture_default_str()->check(count_in(0, max_count));
    examples::add_save_option(*train, t.save);
    train->add_option("--resume", t.resume, "resume from a checkpoint directory (OUT/step-N, or OUT: its latest), with the run's options")->check(CLI::ExistingDirectory);
    train->add_flag("--allow-option-changes", t.allow_option_changes, "resume with options that differ from the checkpoint's (each change is printed; the run no longer equals one never interrupted)");
    train->add_flag("--overwrite", t.overwrite, "start afresh in an --out holding another run's checkpoints (they are removed), and overwrite --metrics/--trace files strata did not write");
    train->add_option("--metrics", t.metrics, "write per-step metrics as JSON lines to FILE");
    train->add_option("--stop-at", t.stop_at, "stop and save after this step, keeping the schedule of --steps (resume later)")->check(count_in(1, max_count));
    train->add_option("--placement", t.placement, "where the training state lives: auto (the planner decides), resident, streamed")->check(CLI::IsMember({"auto", "resident", "streamed"}))->capture_default_str();
    examples::add_tier_options(*train, t);
    train->add_option("--storage-dir", t.storage_dir, "directory for storage-tier files; puts the AdamW moments there when streaming");
    train->add_flag("--plan", t.plan_only, "print the memory plan and exit");
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
    exporter->add_option("--adapters", x.adapters, "a LoRA run's checkpoint directory (OUT/step-N) or its adapters.safetensors")->required()->check(CLI::ExistingPath);
    exporter->add_option("--base", x.base, "the base model (default: the --init-from the LoRA run recorded)")->check(CLI::ExistingDirectory);
    exporter->add_option("--out", x.out, "directory to write the merged checkpoint to (replaced whole)")->required();
    exporter->add_flag("--overwrite", x.overwrite, "replace an --out that is not a previous export");

    sample_args s;
    auto* sample = app.add_subcommand("sample", "generate text from a checkpoint");
    sample->add_option("--checkpoint", s.checkpoint, "checkpoint directory (strata's OUT/step-N, OUT for its latest, or a Hugging Face GPT-2 directory)")->required()->check(CLI::ExistingDirectory);
    sample->add_option("--prompt", s.prompt, "text to continue")->required();
    sample->add_option("--max-new-tokens", s.max_new_tokens, "tokens to generate")->capture_default_str()->check(count_in(0, 1L << 24));
    sample->add_option("--temperature", s.temperature, "softmax temperature (0: greedy)")->capture_default_str()->check(real_in(0, 1e6));
    sample->add_option("--top-k", s.top_k, "sample among the k most likely tokens (0: all)")->capture_default_str()->check(count_in(0, 1L << 24));
    sample->add_option("--seed", s.seed, "sampling seed")->capture_default_str()->check(unsigned_number);
    sample->add_option("--device", s.device, "cpu, cuda or auto (auto: CUDA when a GPU is present)")->capture_default_str();

    CLI11_PARSE(app, argc, argv);
    try {
        if (train->parsed()) {
            if (!t.config.empty()) examples::apply_config_file(*train, t.config);
            if (t.data.empty()) throw error("--data is required", "pass --data FILE (or data = \"FILE\" in --config)");
            t.tokenizer_given = train->count("--tokenizer") > 0;
            if (!t.resume.empty()) t.resume = examples::resolve_checkpoint(t.resume).string();
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
