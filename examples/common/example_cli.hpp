// What the example trainers (strata-gpt, strata-llama) share on their command lines: the
// tokenizer a flag or a checkpoint names, the --device choice, and the trainer type a memory plan
// asks for. Example code, not library code: both programs include it.
#pragma once

#include <strata/core/bytes.hpp>              // parse_bytes
#include <strata/core/error.hpp>              // strata::error
#include <strata/data/records.hpp>            // data::record_kind
#include <strata/text/chat_template.hpp>      // chat_template
#include <strata/model/activations.hpp>        // activation_policy
#include <strata/plan/planner.hpp>            // memory_plan, placement, tier_bytes, default_budgets
#include <strata/storage/io_engine.hpp>       // io_engine_options, io_engine_kind_from_string
#include <strata/text/byte_tokenizer.hpp>     // byte_tokenizer
#include <strata/text/gpt2_tokenizer.hpp>     // gpt2_tokenizer
#include <strata/text/hf_tokenizer.hpp>       // hf_tokenizer
#include <strata/train/tiered_trainer.hpp>  // tiered_trainer
#ifdef STRATA_WITH_CUDA
#include <strata/cuda.hpp>  // cuda_backend
#endif

#include "choices.hpp"  // names_of

#include <CLI/CLI.hpp>  // CLI::App

#include <filesystem>  // std::filesystem
#include <iostream>    // std::cout
#include <optional>    // std::optional
#include <string>      // std::string
#include <variant>     // std::variant
#include <vector>      // std::vector

namespace strata::examples {

using any_tokenizer = std::variant<byte_tokenizer, gpt2_tokenizer, hf_tokenizer>;

// One line of a command's report on standard output, flushed (a long run's lines appear as they come).
inline void print_line(const std::string& s) { std::cout << s << std::endl; }

// The --tokenizer help text: every spec make_tokenizer accepts.
inline constexpr const char* tokenizer_help =
    "byte; gpt2:DIR with vocab.json and merges.txt; or hf:PATH, a Hugging Face tokenizer.json (or a directory "
    "holding one: Llama 3, Qwen2, Llama 2, Mistral kinds)";

// "byte", "gpt2:DIR" (a directory with vocab.json and merges.txt) or "hf:PATH" (a tokenizer.json,
// or a directory with one).
inline any_tokenizer make_tokenizer(const std::string& spec) {
    if (spec == "byte") return byte_tokenizer{};
    if (spec.starts_with("gpt2:")) return gpt2_tokenizer::load(spec.substr(5));
    if (spec.starts_with("hf:")) return hf_tokenizer::load(spec.substr(3));
    throw error("unknown tokenizer '" + spec + "'",
                "use --tokenizer byte, --tokenizer gpt2:DIR or --tokenizer hf:PATH (a tokenizer.json or its directory)");
}

// The kind a spec names, as trainer_state.json records it: "byte", "gpt2" or "hf".
inline std::string tokenizer_kind(const std::string& spec) {
    if (spec.starts_with("gpt2:")) return "gpt2";
    if (spec.starts_with("hf:")) return "hf";
    return "byte";
}

// The files of a spec's tokenizer, which a checkpoint keeps next to the weights (under their own
// names) so that tokenizer_of_checkpoint finds them again; for hf:, also the tokenizer_config.json
// and chat_template.jinja beside tokenizer.json (the chat template, for --chat-template auto).
inline std::vector<std::filesystem::path> tokenizer_files(const std::string& spec) {
    if (spec.starts_with("gpt2:")) {
        const std::filesystem::path dir = spec.substr(5);
        return {dir / "vocab.json", dir / "merges.txt"};
    }
    if (spec.starts_with("hf:")) {
        const std::filesystem::path path = spec.substr(3);
        if (!std::filesystem::is_directory(path) && path.filename() != "tokenizer.json")
            throw error("--tokenizer " + spec + ": a checkpoint keeps the file under its own name, and looks for "
                        "tokenizer.json when it is loaded again",
                        "rename the file to tokenizer.json, or pass the directory that holds it");
        const std::filesystem::path dir = std::filesystem::is_directory(path) ? path : path.parent_path();
        std::vector<std::filesystem::path> files{dir / "tokenizer.json"};
        for (const char* beside : {"tokenizer_config.json", "chat_template.jinja"})
            if (std::filesystem::is_regular_file(dir / beside)) files.push_back(dir / beside);
        return files;
    }
    return {};
}

// The --chat-template help text.
inline constexpr const char* chat_template_help =
    "how chat and instruction records are rendered: auto (the chat template of the model: tokenizer_config.json "
    "or chat_template.jinja beside the hf: tokenizer.json, or in the --init-from / --resume directory), none (instruction "
    "records with the Alpaca prompt), or FILE (a tokenizer_config.json, a .jinja file or a model directory); default: auto for chat "
    "records, none for instruction records";

// The chat template that --chat-template `choice` names for records of `kind`: "" (the default:
// auto for chat records, none otherwise), "auto", "none" or a file. `tokenizer_spec` and
// `model_dir` (--init-from or --resume, may be empty) are where auto looks.
inline std::optional<chat_template> find_chat_template(const std::string& choice, data::record_kind kind,
                                                       const std::string& tokenizer_spec, const std::string& model_dir) {
    const std::string resolved = !choice.empty() ? choice : kind == data::record_kind::chat ? "auto" : "none";
    if (resolved == "none") return std::nullopt;
    if (kind == data::record_kind::base)
        throw error("--chat-template " + resolved + " is given, but the data holds plain text records",
                    "a chat template renders chat ({\"messages\"}) or instruction records; drop --chat-template for text");
    if (resolved != "auto") return chat_template::load(resolved);
    std::vector<std::filesystem::path> dirs;
    if (tokenizer_spec.starts_with("hf:")) {
        const std::filesystem::path path = tokenizer_spec.substr(3);
        dirs.push_back(std::filesystem::is_directory(path) ? path : path.parent_path());
    }
    if (!model_dir.empty()) dirs.push_back(model_dir);
    std::string searched;
    for (const std::filesystem::path& dir : dirs) {
        if (auto found = chat_template::find_in(dir)) return found;
        searched += (searched.empty() ? "" : ", ") + dir.string();
    }
    throw error("--chat-template auto: no chat template found" + (searched.empty() ? std::string(" (no hf: tokenizer and no --init-from directory to look in)") : " in " + searched),
                "pass --chat-template FILE (a tokenizer_config.json with a chat_template, or a .jinja file)" +
                    std::string(kind == data::record_kind::instruct ? ", or --chat-template none for the Alpaca prompt" : ""));
}

// find_chat_template, and a template without a bos_token (a .jinja file alone) given the BOS that
// the tokenizer's post-processor adds, which is what the model saw at the start of its texts.
inline std::optional<chat_template> chat_template_for(const std::string& choice, data::record_kind kind,
                                                      const std::string& tokenizer_spec, const std::string& model_dir,
                                                      const any_tokenizer& tok) {
    std::optional<chat_template> t = find_chat_template(choice, kind, tokenizer_spec, model_dir);
    if (const auto* hf = std::get_if<hf_tokenizer>(&tok); t && t->bos_token().empty() && hf && hf->bos_id())
        t->set_special_token("bos_token", std::string(hf->token_text(*hf->bos_id())));
    return t;
}

// The tokenizer a checkpoint directory was trained with: its own vocab.json + merges.txt (saved
// next to the weights when training with GPT-2 BPE), or tokenizer.json (with hf:), else bytes.
inline std::string tokenizer_of_checkpoint(const std::filesystem::path& dir) {
    if (std::filesystem::exists(dir / "vocab.json") && std::filesystem::exists(dir / "merges.txt"))
        return "gpt2:" + dir.string();
    if (std::filesystem::exists(dir / "tokenizer.json")) return "hf:" + dir.string();
    return "byte";
}

// --device: cpu, cuda, or auto (CUDA when this build has it and a GPU is present).
inline bool use_cuda(const std::string& device, const std::string& program) {
    if (device != "cpu" && device != "cuda" && device != "auto")
        throw error("--device must be cpu, cuda or auto, got '" + device + "'");
#ifdef STRATA_WITH_CUDA
    (void)program;
    if (device == "cuda" && !cuda_backend::available())
        throw error("--device cuda: no CUDA GPU is visible to this process", "check nvidia-smi, or use --device cpu");
    return device == "cuda" || (device == "auto" && cuda_backend::available());
#else
    if (device == "cuda")
        throw error("--device cuda: this " + program + " was built without the CUDA backend",
                    "rebuild where nvcc is found (cmake --preset cuda-release), or use --device cpu");
    return false;
#endif
}

// --device-budget, --host-budget, --storage-budget: each tier's bytes (e.g. 100G), overriding the
// defaults; --io-engine and --io-workers: the storage tier's I/O engine. Into a.device_budget,
// a.host_budget, a.storage_budget, a.io_engine, a.io_workers.
template <class Args>
void add_tier_options(CLI::App& train, Args& a) {
    train.add_option("--device-budget", a.device_budget,
                     "device tier budget in bytes (e.g. 120G; default: the GPU's free memory less a margin, a quarter of "
                     "RAM on the CPU backend)");
    train.add_option("--host-budget", a.host_budget, "host tier budget in bytes (default: 90% of RAM)");
    train.add_option("--storage-budget", a.storage_budget, "storage tier budget in bytes (default: free disk at --storage-dir)");
    train.add_option("--io-engine", a.io_engine,
                     "storage tier I/O: auto (io_uring where the build and the kernel have it, else a thread pool), "
                     "threads or io_uring")
        ->check(CLI::IsMember(names_of(io_engine_kinds)))
        ->capture_default_str();
    train.add_option("--io-workers", a.io_workers, "threads of the thread-pool I/O engine (0: its default)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
}

// The storage tier's I/O engine those options ask for (empty: the library's default).
template <class Args>
std::optional<io_engine_options> io_options_of(const Args& a) {
    if (a.io_engine == "auto" && a.io_workers == 0) return std::nullopt;
    return io_engine_options{.kind = io_engine_kind_from_string(a.io_engine), .workers = a.io_workers};
}

// The budgets those options ask for, over the defaults (default_budgets of device_bytes, the
// device tier's default, and of the storage directory).
template <class Args>
tier_bytes budgets_of(const Args& a, std::size_t device_bytes, const std::filesystem::path& storage_dir) {
    tier_bytes budgets = default_budgets(device_bytes, storage_dir);
    if (!a.device_budget.empty()) budgets.device = parse_bytes(a.device_budget, "--device-budget");
    if (!a.host_budget.empty()) budgets.host = parse_bytes(a.host_budget, "--host-budget");
    if (!a.storage_budget.empty()) budgets.storage = parse_bytes(a.storage_budget, "--storage-budget");
    return budgets;
}

// --activations auto|keep|recompute|offload, and --no-checkpointing (its older spelling of keep), into
// a.activations and a.no_checkpointing.
template <class Args>
void add_activation_options(CLI::App& train, Args& a) {
    train.add_option("--activations", a.activations,
                     "keep, recompute, offload or auto: each block's activations kept on the device for the "
                     "backward or recomputed from its input; offload: the recomputing blocks' inputs wait in pinned "
                     "host memory (auto: keep as many as the device budget holds, offloading inputs when that "
                     "keeps more; with the machine's rates, the placement the step's cost model predicts fastest, "
                     "in which recomputing blocks may keep their attention output to recompute only the rest)")
        ->check(CLI::IsMember(names_of(activation_policies)))
        ->capture_default_str();
    train.add_flag("--no-checkpointing", a.no_checkpointing, "the same as --activations keep");
}

// The policy those options ask for.
template <class Args>
activation_policy activation_policy_of(const Args& a) {
    if (!a.no_checkpointing) return activation_policy_from_string(a.activations);
    if (a.activations != "auto" && a.activations != "keep")
        throw error("--no-checkpointing (keep every block's activations) contradicts --activations " + a.activations,
                    "pass one of them");
    return activation_policy::keep;
}

// Calls f.template operator()<Trainer>() with the trainer of every plan: the plan itself is data
// (train_options::homes = memory_plan::trainer_homes(), train_options::slots = memory_plan::slots).
template <Backend B, class Model, class F>
int with_planned_trainer(const memory_plan&, F&& f) {
    return f.template operator()<tiered_trainer<typename Model::value_type, B, Model>>();
}

}  // namespace strata::examples
