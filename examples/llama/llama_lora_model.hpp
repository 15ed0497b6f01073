// llama_lora_model<B>: a LoRA fine-tune of a Llama-family model, assembled from strata's
// decoder_model: llama_lora_block as the block (base weights frozen, adapters trainable), a frozen
// final RMSNorm, frozen embeddings and head. Resident or streamed, with either trainer:
//
//   auto model = llama::make_llama_lora_model<B>(base_config, {.rank = 8, .alpha = 16});
//   trainer_t<float, B, ..., llama::llama_lora_model<B>> t(backend, model, o);
//   t.initialize(seed);                                        // adapters: A random, B = 0
//   llama::upload_base_weights(t, model, loaded.config, loaded.blocks);  // load_llama_files' weights, by name
//
// Its checkpoint names are the Llama model's (model.layers.<l>.self_attn.qkv_proj.weight ...), the
// adapters' too (model.layers.<l>.mlp.down_proj.lora_A), so a Llama checkpoint maps onto it by
// name. The adapters are saved as their own file by ../lora/adapters.hpp (format
// "strata.lora.llama/1", strata's (in, out) orientation), the base never: it does not change.
#pragma once

#include "../lora/lora_model.hpp"  // lora::copy_by_name, save_model_adapters, load_model_adapters, model_adapters_bytes
#include "llama_lora_block.hpp"    // llama_lora_block, llama_lora_config
#include "llama_model.hpp"         // llama_config, make_llama_model

#include <strata/backend/cpu_backend.hpp>  // strata::cpu_backend (the base's layout)
#include <strata/model/decoder.hpp>        // strata::decoder_model
#include <strata/train/checkpoint.hpp>     // strata::host_blocks, strata::download_blocks

#include <cstddef>      // std::size_t
#include <string_view>  // std::string_view

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

}  // namespace llama
