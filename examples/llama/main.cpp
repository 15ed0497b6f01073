// strata-llama: train the example Llama-style model (llama_model.hpp: the block of llama_block.hpp
// assembled into a decoder_model) with strata's trainers, resident or streamed, and sample from it.
// The data, tokenizer, schedule, metrics and progress conventions are strata-gpt's.
//
//   strata-llama train [--data FILE] [options]    (strata-llama train --help)
//   strata-llama sample --checkpoint DIR --prompt TEXT [--tokens N --temperature T --top-k K --seed S]
//   strata-llama export --checkpoint DIR --out DIR [--dtype float32|bfloat16|float16]
//   strata-llama score --checkpoint DIR (--prompt TEXT | --tokens-file FILE) --out FILE.safetensors
//
// Without --data it trains on the licence texts every Debian system has in
// /usr/share/common-licenses (the corpus of scripts/train-demo.sh), written to OUT/corpus.txt.
// Checkpoints are Hugging Face Llama directories (model.safetensors, config.json) with strata's
// trainer state (optimizer.safetensors, trainer_state.json): transformers.LlamaForCausalLM loads
// them; `--resume`, `--init-from` and `sample` take them (and `--init-from` and `sample` Hugging
// Face Llamas of a shape the block has).
//
// main.cpp is the command line; train.cpp and commands.cpp run the commands, and the trainers
// (most of the compiler's time) are one unit per backend and model (train_model.hpp).
#include "../common/command_line.hpp"  // set_up_program, parse_command_line, run_command
#include "../common/config_file.hpp"   // apply_config_file
#include "../common/run_checks.hpp"    // count_in, real_in
#include "../common/train_flags.hpp"   // add_train_command, apply_resume_defaults
#include "commands.hpp"                // sample_args, export_args, score_args, run_sample, run_export, run_score
#include "train.hpp"                   // train_args, run_train

#include <strata/core/error.hpp>  // strata::error

#include <CLI/CLI.hpp>  // CLI::App
#include <nlohmann/json.hpp>  // nlohmann::json

#include <filesystem>  // std::filesystem
#include <string>      // std::string

namespace fs = std::filesystem;
using namespace strata;
using llama_cli::export_args, llama_cli::sample_args, llama_cli::score_args, llama_cli::train_args;
using llama_cli::run_export, llama_cli::run_sample, llama_cli::run_score, llama_cli::run_train;

int main(int argc, char** argv) {
    CLI::App app{"strata-llama: train a small Llama-style model with strata, and sample from it", "strata-llama"};
    examples::set_up_program(app, STRATA_VERSION);
    using examples::count_in, examples::real_in;

    train_args t;
    // strata-llama's own options (its data, its kind of model directory, the Llama shape beyond layers,
    // heads and channels, its projections) around the ones strata-gpt shares
    auto* train = examples::add_train_command(
        app, t, "train a Llama-style model on a text or JSON file",
        "training data: plain text, JSONL/JSON {\"text\"}, instruction records or chat records {\"messages\"} (default: the licence texts of /usr/share/common-licenses)",
        "start from the weights of a Llama directory (strata-llama's or Hugging Face's); its config gives the model's shape");
    train->add_option("--n-kv-head", t.n_kv_head, "key/value heads, grouped-query attention (0: --n-head; must divide --n-head)")->capture_default_str()->check(count_in(0, 4096));
    train->add_option("--head-dim", t.head_dim, "channels per attention head, even (0: n-embd / n-head, which must then be even)")->capture_default_str()->check(count_in(0, 1L << 16));
    train->add_option("--vocab", t.vocab, "embedding rows (0: the tokenizer's; more pads the vocabulary, e.g. 128256 for Llama 3's shape)")->capture_default_str()->check(count_in(0, 1L << 24));
    train->add_flag("--untied-head", t.untied_head, "an LM head of its own (lm_head.weight) instead of the token embedding's transpose");
    train->add_flag("--qkv-bias", t.qkv_bias, "biases on the q, k and v projections (Qwen2's; written back as Qwen2ForCausalLM)");
    train->add_option("--hidden", t.hidden, "SwiGLU width (0: 8/3 n-embd rounded up to a multiple of 8)")->capture_default_str()->check(count_in(0, 1L << 22));
    train->add_option("--rope-theta", t.rope_theta, "rotary embedding base")->capture_default_str()->check(real_in(1e-6, 1e12));
    train->add_option("--norm-eps", t.norm_eps, "RMSNorm epsilon")->capture_default_str()->check(real_in(1e-30, 1));
    train->add_option("--moments", t.moments, "home of the optimizer's state (AdamW's moments, SGD's momentum) when streamed: host or storage (files in --storage-dir; the same as --state-on-storage)")->check(CLI::IsMember({"host", "storage"}))->capture_default_str();
    train->add_option("--lora-targets", t.lora_targets, "LoRA: comma-separated projections to adapt (qkv_proj: q|k|v fused, o_proj, gate_proj, up_proj, down_proj); without --init-from the base is randomly initialized in the shape of the flags")->capture_default_str();

    sample_args s;
    examples::add_sample_command(app, s, "checkpoint directory (strata-llama's OUT/step-N, OUT for its latest, or a Hugging Face Llama directory)");

    export_args e;
    auto* exporter = app.add_subcommand("export", "write a checkpoint as a Hugging Face directory (weights, config, tokenizer) that transformers loads");
    exporter->add_option("--checkpoint", e.checkpoint, "checkpoint directory (OUT/step-N, or OUT for its latest)")->required()->check(CLI::ExistingDirectory);
    exporter->add_option("--out", e.out, "the directory to write (must not exist, or be empty)")->required();
    exporter->add_option("--dtype", e.dtype, "dtype of the exported weights (bfloat16 and float16: rounded to nearest even)")->check(CLI::IsMember({"float32", "bfloat16", "float16"}))->capture_default_str();

    score_args sc;
    auto* scorer = app.add_subcommand("score", "write a checkpoint's logits and mean next-token loss on a text or token ids to a safetensors file");
    scorer->add_option("--checkpoint", sc.checkpoint, "checkpoint directory (OUT/step-N, OUT for its latest, or a Hugging Face Llama directory)")->required()->check(CLI::ExistingDirectory);
    auto* score_prompt = scorer->add_option("--prompt", sc.prompt, "text to score (the checkpoint's tokenizer encodes it)");
    auto* score_ids = scorer->add_option("--tokens-file", sc.tokens_file, "token ids to score: integers separated by spaces or commas")->check(CLI::ExistingFile);
    score_prompt->excludes(score_ids);
    scorer->add_option("--out", sc.out, "safetensors file to write: input_ids (T), logits (T, V), loss")->required();
    scorer->add_option("--device", sc.device, "cpu, cuda or auto")->capture_default_str();
    scorer->add_flag("--overwrite", sc.overwrite, "replace an existing --out file");

    if (const auto code = examples::parse_command_line(app, argc, argv)) return *code;
    return examples::run_command(app, [&] {
        if (train->parsed()) {
            if (!t.config.empty()) examples::apply_config_file(*train, t.config);
            t.tokenizer_given = train->count("--tokenizer") > 0;
            if (!t.resume.empty())  // the model's shape and tokenizer come from the checkpoint's own files
                examples::apply_resume_defaults(*train, t, [](const fs::path&, const nlohmann::json&) { return nlohmann::json::object(); });
            return run_train(t);
        }
        if (exporter->parsed()) return run_export(e);
        if (scorer->parsed()) {
            if (!scorer->count("--prompt") && !scorer->count("--tokens-file"))
                throw error("score needs --prompt TEXT or --tokens-file FILE", "give one of them");
            return run_score(sc);
        }
        return run_sample(s);
    });
}
