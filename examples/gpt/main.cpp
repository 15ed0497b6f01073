// strata-gpt: train a GPT-2-architecture model with strata, and sample from it.
//
//   strata-gpt train --data FILE [options]      (strata-gpt train --help)
//   strata-gpt train --init-from CKPT --lora-rank R --data FILE    (LoRA: only adapters train)
//   strata-gpt export --adapters DIR --out DIR  (a LoRA run's adapters merged into its base)
//   strata-gpt sample --checkpoint DIR --prompt TEXT [--device cpu|cuda] [options]
#include <strata/core/error.hpp>     // strata::error
#include <strata/io/json_file.hpp>    // read_json_file
#include <strata/nn/gpt2_config.hpp>  // gpt_config::from_hf_json

#include "../common/command_line.hpp"   // set_up_program, parse_command_line, run_command
#include "../common/config_file.hpp"    // apply_config_file
#include "../common/train_flags.hpp"    // add_train_command, apply_resume_defaults
#include "export.hpp"                   // the export command (export.cpp): export_args, run_export
#include "sample.hpp"                   // the sample command (sample.cpp): sample_args, run_sample
#include "train.hpp"                    // the train command (train.cpp): train_args, run_train

#include <CLI/CLI.hpp>  // CLI::App

#include <string>  // std::string

using namespace strata;
using gpt_cli::export_args, gpt_cli::sample_args, gpt_cli::train_args;
using gpt_cli::run_export, gpt_cli::run_sample, gpt_cli::run_train;

namespace {

// The model's shape a checkpoint records, as flags: a LoRA run's base and rank, or its config.json's
// layers, heads and channels (the defaults of a resume: examples::apply_resume_defaults).
nlohmann::json recorded_shape(const std::filesystem::path& checkpoint, const nlohmann::json& state) {
    if (state.contains("lora") && state["lora"].is_object())
        return {{"init_from", state["lora"].value("base", std::string())}, {"lora_rank", state["lora"].value("rank", 0)}};
    if (!std::filesystem::exists(checkpoint / "config.json")) return nlohmann::json::object();
    const auto c = gpt_config::from_hf_json(read_json_file(checkpoint / "config.json"), (checkpoint / "config.json").string());
    return {{"n_layer", c.n_layer}, {"n_head", c.n_head}, {"n_embd", c.n_embd}};
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"strata-gpt: train a GPT-2-architecture model with strata, and sample from it", "strata-gpt"};
    examples::set_up_program(app, STRATA_VERSION);

    train_args t;
    // strata-gpt's own options (its data, its kind of model directory, its projections) around the
    // ones strata-llama shares
    auto* train = examples::add_train_command(
        app, t, "train (pre-train or fine-tune) a GPT on a text or JSON file",
        "training data: plain text, JSONL/JSON {\"text\"}, instruction records or chat records {\"messages\"} (required)",
        "start from the weights of a GPT-2 directory (Hugging Face's or strata's); its config gives the model's shape");
    train->add_option("--lora-targets", t.lora_targets, "LoRA: comma-separated projections to adapt (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj)")->capture_default_str();

    export_args x;
    auto* exporter = app.add_subcommand("export", "merge a LoRA run's adapters into its base model (a plain GPT-2 checkpoint)");
    exporter->add_option("--adapters", x.adapters, "a LoRA run's checkpoint directory (OUT/step-N, or OUT for its latest) or its adapters.safetensors")->required()->check(CLI::ExistingPath);
    exporter->add_option("--base", x.base, "the base model (default: the --init-from the LoRA run recorded)")->check(CLI::ExistingDirectory);
    exporter->add_option("--out", x.out, "directory to write the merged checkpoint to (replaced whole)")->required();
    exporter->add_flag("--overwrite", x.overwrite, "replace an --out that is not a previous export");

    sample_args s;
    examples::add_sample_command(app, s, "checkpoint directory (strata's OUT/step-N, OUT for its latest, or a Hugging Face GPT-2 directory)");

    if (const auto code = examples::parse_command_line(app, argc, argv)) return *code;
    return examples::run_command(app, [&] {
        if (train->parsed()) {
            if (!t.config.empty()) examples::apply_config_file(*train, t.config);
            if (!t.resume.empty()) examples::apply_resume_defaults(*train, t, recorded_shape);
            if (t.data.empty()) throw error("--data is required", "pass --data FILE (or data = \"FILE\" in --config)");
            t.tokenizer_given = train->count("--tokenizer") > 0;
            return run_train(t);
        }
        if (exporter->parsed()) return run_export(x);
        return run_sample(s);
    });
}
