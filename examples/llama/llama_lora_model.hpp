// llama_lora_model<B>: a LoRA fine-tune of a Llama-family model, assembled from strata's
// decoder_model: llama_lora_block as the block (base weights frozen, adapters trainable), a frozen
// final RMSNorm, frozen embeddings and head. Resident or streamed, with either trainer:
//
//   auto model = llama::make_llama_lora_model<B>(base_config, {.rank = 8, .alpha = 16});
//   tiered_trainer<float, B, llama::llama_lora_model<B>> t(backend, model, o);  // o.homes: the plan's
//   t.initialize(seed);                                        // adapters: A random, B = 0
//   llama::upload_base_weights(t, model, loaded.config, loaded.blocks);  // load_llama_files' weights, by name
//
// Its checkpoint names are the Llama model's (model.layers.<l>.self_attn.qkv_proj.weight ...), the
// adapters' too (model.layers.<l>.mlp.down_proj.lora_A), so a Llama checkpoint maps onto it by
// name. The adapters are saved as their own file by ../lora/adapters.hpp (format
// "strata.lora.llama/1", strata's (in, out) orientation), the base never: it does not change.
#pragma once

#include "../lora/lora_model.hpp"  // lora::copy_by_name, adapter_files, adapters_file
#include "llama_lora_block.hpp"    // llama_lora_block, llama_lora_config
#include "llama_model.hpp"         // llama_config, make_llama_model, llama_weights

#include <strata/backend/cpu_backend.hpp>  // strata::cpu_backend (the base's layout)
#include <strata/io/json_file.hpp>         // strata::json_file_text, write_json_file
#include <strata/model/decoder.hpp>        // strata::decoder_model
#include <strata/model/model_files.hpp>    // strata::model_files, WeightBlocks
#include <strata/train/checkpoint.hpp>     // strata::host_blocks, strata::download_blocks

#include <nlohmann/json.hpp>  // nlohmann::json

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <filesystem>   // std::filesystem::path
#include <span>         // std::span
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

template <>
struct lora::adapter_naming<llama::llama_lora_config> {
    static constexpr std::string_view format = "strata.lora.llama/1";
    static constexpr std::string_view layer_prefix = "model.layers.";
    static std::size_t n_embd(const llama::llama_lora_config& c) { return c.base.n_embd; }
};

namespace llama {

template <strata::Backend B>
using llama_lora_model = strata::decoder_model<llama_lora_block<float, B>, rmsnorm_layer<float, B>>;

// The LoRA model of a Llama shape: everything frozen but the adapters (lora.base is set from `base`).
template <strata::Backend B>
llama_lora_model<B> make_llama_lora_model(const llama_config& base, llama_lora_config lora) {
    base.validate();
    lora.base = base.block();
    lora.validate();
    strata::decoder_config decoder = base.decoder();
    decoder.freeze_embeddings = true;  // embed_tokens, and lm_head when untied
    rmsnorm_config norm = base.norm();
    norm.trainable = false;
    return llama_lora_model<B>(decoder, lora, norm);
}

// The trainer's weights after initialize(): the base model's tensors (load_llama_files' blocks, in
// llama_model's layout) by name, the adapters as initialized (B = 0: the model starts as the base
// model, bit for bit).
template <class Trainer, class Model>
void upload_base_weights(Trainer& t, const Model& model, const llama_config& base,
                         const strata::host_blocks<float>& base_blocks) {
    using kind = typename Trainer::state_kind;
    auto blocks = strata::download_blocks(t, kind::params);
    lora::copy_by_name(make_llama_model<strata::cpu_backend>(base), base_blocks, model, blocks);
    for (std::size_t g = 0; g < blocks.size(); ++g) t.upload(kind::params, g, blocks[g]);
}

// The same from a Llama directory, group by group: one group of the base and one of the trainer in
// host memory at a time (a 14B base does not need its size twice in RAM). Group g of the LoRA model
// holds the base's group g's tensors under the same names.
template <class Trainer, class Model>
void upload_base_weights(Trainer& t, const Model& model, const llama_weights& base) {
    using kind = typename Trainer::state_kind;
    const auto base_model = make_llama_model<strata::cpu_backend>(base.config());
    if (base_model.group_count() != model.group_count())
        throw strata::error("the LoRA model has " + std::to_string(model.group_count()) + " layer groups, its base " +
                                std::to_string(base_model.group_count()),
                            "build the LoRA model from the base checkpoint's config");
    std::size_t copied = 0, tensors = 0;
    for (std::size_t g = 0; g < model.group_count(); ++g) {
        std::vector<float> block(model.groups()[g].numel());
        t.download(kind::params, g, std::span<float>(block));  // the adapters as initialized
        const std::vector<float> from = base.group(g);
        tensors += base_model.groups()[g].entries().size();
        copied += lora::copy_group_by_name(base_model, g, std::span<const float>(from), model, std::span<float>(block));
        t.upload(kind::params, g, std::span<const float>(block));
    }
    if (copied != tensors)
        throw strata::error("the LoRA model has a place for " + std::to_string(copied) + " of the base model's " +
                            std::to_string(tensors) + " tensors");
}

}  // namespace llama

// A Llama LoRA model's checkpoint files (strata/model/model_files.hpp): the adapters
// (lora::adapters_file) and adapter_config.json, `adapter_config` (what the adapters adapt and
// the base they were trained on); read back: the adapters, on the base already uploaded.
template <strata::Backend B>
struct strata::model_files<llama::llama_lora_model<B>> {
    using model_type = llama::llama_lora_model<B>;
    nlohmann::json adapter_config = nlohmann::json::object();

    std::uint64_t bytes(const model_type& model) const {
        return lora::adapter_files<model_type>{}.bytes(model) + strata::json_file_text(adapter_config).size();
    }
    template <strata::WeightBlocks<float> Weights>
    void write(const model_type& model, Weights& weights, const std::filesystem::path& dir) const {
        lora::adapter_files<model_type>{}.write(model, weights, dir);
        strata::write_json_file(dir / "adapter_config.json", adapter_config);
    }
    template <strata::WeightBlocks<float> Weights>
    void read(const model_type& model, Weights& weights, const std::filesystem::path& dir) const {
        lora::adapter_files<model_type>{}.read(model, weights, dir);
    }
};
