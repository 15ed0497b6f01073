// export_llama_directory: a checkpoint's weights as the Hugging Face directory transformers'
// from_pretrained loads, in float32, bfloat16 or float16, with nothing of the training state.
//
//   model.safetensors     the weights, HF names and layouts (those of the checkpoint: strata's
//                         checkpoints are HF directories already), in the dtype asked: float32 as
//                         is, bfloat16 and float16 rounded to nearest, ties to even
//                         (core/float_formats.hpp), as torch's tensor.to(dtype) rounds
//   config.json           the checkpoint's, with torch_dtype (and transformers 5's dtype) set
//   tokenizer files, generation_config.json    copied as they are, those the checkpoint has
//
// Not written: optimizer.safetensors, trainer_state.json, anything else of the checkpoint. The
// weights are read and written one tensor at a time (a 14B model never needs its size in RAM),
// into a temporary directory next to the target that is renamed into place when complete: a
// failed export leaves nothing behind.
#pragma once

#include "../common/run_directory.hpp"  // strata::examples::is_within
#include "llama_model.hpp"                // llama_config, make_llama_model, hf_tensors_of

#include <strata/backend/cpu_backend.hpp>  // strata::cpu_backend (the layout of the expected tensors)
#include <strata/core/error.hpp>           // strata::error
#include <strata/core/float_formats.hpp>   // strata::float_to_bf16, float_to_f16
#include <strata/io/hf_weights.hpp>        // strata::hf_weights
#include <strata/io/json_file.hpp>         // strata::read_json_file, write_json_file
#include <strata/io/safetensors.hpp>       // strata::safetensors_writer, safetensors_dtype

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint16_t
#include <filesystem>   // std::filesystem
#include <span>         // std::span, std::as_bytes
#include <string>       // std::string
#include <system_error> // std::error_code
#include <unistd.h>     // ::getpid
#include <vector>       // std::vector

namespace llama {

// The dtypes an export writes the weights in, named as torch and config.json name them.
enum class weight_dtype { float32, bfloat16, float16 };

inline weight_dtype parse_weight_dtype(const std::string& name) {
    if (name == "float32") return weight_dtype::float32;
    if (name == "bfloat16") return weight_dtype::bfloat16;
    if (name == "float16") return weight_dtype::float16;
    throw strata::error("unknown weight dtype '" + name + "'", "use float32, bfloat16 or float16");
}
inline const char* torch_dtype_name(weight_dtype d) {
    return d == weight_dtype::float32 ? "float32" : d == weight_dtype::bfloat16 ? "bfloat16" : "float16";
}
inline strata::safetensors_dtype safetensors_dtype_of(weight_dtype d) {
    return d == weight_dtype::float32    ? strata::safetensors_dtype::f32
           : d == weight_dtype::bfloat16 ? strata::safetensors_dtype::bf16
                                         : strata::safetensors_dtype::f16;
}

// The files an export copies from the checkpoint when it has them: the tokenizer's (tokenizer.json,
// or GPT-2's vocab.json + merges.txt, and what transformers' AutoTokenizer reads beside them, the
// chat template included) and the generation defaults.
inline constexpr const char* exported_side_files[] = {"tokenizer.json",          "tokenizer_config.json",
                                                      "special_tokens_map.json", "vocab.json",
                                                      "merges.txt",              "tokenizer.model",
                                                      "chat_template.jinja",     "generation_config.json"};

// Writes the export of `checkpoint` (a Llama directory load_llama_files reads) into `out`, which
// must not exist or be an empty directory, and must be neither the checkpoint nor inside it (nor
// hold it).
inline void export_llama_directory(const std::filesystem::path& checkpoint, const std::filesystem::path& out,
                                   weight_dtype dtype) {
    namespace fs = std::filesystem;
    using strata::examples::is_within;
    if (is_within(out, checkpoint) || is_within(checkpoint, out))
        throw strata::error("export: the target '" + out.string() + "' is the checkpoint '" + checkpoint.string() +
                                "', inside it or holds it: writing there would change the input",
                            "export into a new directory outside the checkpoint");
    if (fs::exists(out) && !(fs::is_directory(out) && fs::is_empty(out)))
        throw strata::error("export: the target '" + out.string() + "' exists and is not an empty directory",
                            "export into a new (or empty) directory; an export never overwrites files");

    const fs::path config_path = checkpoint / "config.json";
    nlohmann::json config_json = strata::read_json_file(config_path);
    const llama_config config = llama_config::from_hf_json(config_json, config_path.string());
    const auto model = make_llama_model<strata::cpu_backend>(config);
    const auto weights = strata::hf_weights::open(checkpoint);

    // Every tensor of the model, under the checkpoint's name for it (with or without "model.").
    struct entry {
        std::string name, key;
        std::vector<std::size_t> shape;
    };
    std::vector<entry> tensors;
    std::vector<std::string> missing;
    for (std::size_t g = 0; g < model.group_count(); ++g)
        for (const auto& entry : model.groups()[g].entries())
            for (const hf_tensor& t : hf_tensors_of(model, g, entry)) {
                const std::string key = weights.contains(t.name) ? t.name
                                        : t.name.starts_with("model.") && weights.contains(t.name.substr(6))
                                            ? t.name.substr(6)
                                            : std::string();
                if (key.empty()) missing.push_back(t.name);
                else if (weights.info(key).shape != t.shape)
                    throw strata::error("export: '" + weights.source_of(key) + "': tensor '" + key + "' has shape " +
                                            strata::detail::shape_string(weights.info(key).shape) + ", the model's is " +
                                            strata::detail::shape_string(t.shape),
                                        "the weights do not match config.json");
                else tensors.push_back({t.name, key, t.shape});
            }
    if (!missing.empty())
        throw strata::error("export: the checkpoint '" + checkpoint.string() + "' lacks " + detail::join(missing),
                            "the weights do not match config.json");

    fs::path target = strata::examples::resolved(out);
    if (!target.has_filename()) target = target.parent_path();  // "DIR/"
    const fs::path staging = target.parent_path() / (target.filename().string() + ".tmp-" + std::to_string(::getpid()));
    fs::remove_all(staging);
    fs::create_directories(staging);
    try {
        strata::safetensors_writer w;
        w.set_metadata("format", "pt");
        for (const entry& e : tensors) w.declare(e.name, safetensors_dtype_of(dtype), e.shape);
        std::vector<float> values;
        std::vector<std::uint16_t> narrow;
        w.write_streamed(staging / "model.safetensors", [&](strata::safetensors_writer::stream& s) {
            for (const entry& e : tensors) {  // one tensor in memory at a time
                values.resize(strata::shape(e.shape).numel());
                weights.read_as_float(e.key, std::span<float>(values));
                if (dtype == weight_dtype::float32) {
                    s.write(e.name, std::span<const float>(values));
                    continue;
                }
                narrow.resize(values.size());
                for (std::size_t i = 0; i < values.size(); ++i)
                    narrow[i] = dtype == weight_dtype::bfloat16 ? strata::float_to_bf16(values[i]) : strata::float_to_f16(values[i]);
                s.write(e.name, std::as_bytes(std::span<const std::uint16_t>(narrow)));
            }
        });
        // transformers 4 reads torch_dtype, 5 writes dtype (and still reads torch_dtype)
        config_json["torch_dtype"] = torch_dtype_name(dtype);
        if (config_json.contains("dtype")) config_json["dtype"] = torch_dtype_name(dtype);
        strata::write_json_file(staging / "config.json", config_json);
        for (const char* name : exported_side_files)
            if (fs::is_regular_file(checkpoint / name)) fs::copy_file(checkpoint / name, staging / name);
        if (fs::exists(out)) fs::remove(out);  // the empty directory checked above
        fs::rename(staging, out);
    } catch (...) {
        std::error_code ec;
        fs::remove_all(staging, ec);
        throw;
    }
}

}  // namespace llama
