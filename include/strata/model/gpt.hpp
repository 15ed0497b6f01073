// gpt_model<R, B>: GPT-2, the decoder_model (model/decoder.hpp) of the GPT-2 block and a final
// layernorm, built from one gpt_config:
//
//   gpt_model<float, cpu_backend> model(config);  // config: a gpt_config
//
// One definition of the block (nn/gpt2_block.hpp) and one list of the activations
// (decoder_model::activation_buffers) serve every model. The model owns no weights. Groups:
// 0 = "wte.weight", "wpe.weight"; 1..L = the blocks (Hugging Face order: ln_1, attn.c_attn,
// attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj); L+1 = "ln_f.weight", "ln_f.bias". The LM head is tied to
// wte. hf_name gives GPT2LMHeadModel's names ("transformer.h.3.attn.c_attn.weight"); initialize
// draws GPT-2's initialization (gpt2_block::initialize; N(0, 0.02) embeddings, unit ln_f gain).
#pragma once

#include <strata/backend/backend.hpp>     // Backend
#include <strata/core/error.hpp>          // strata::error
#include <strata/model/decoder.hpp>       // decoder_model, decoder_config, decoder_configs
#include <strata/nn/gpt2_block.hpp>       // gpt2_block
#include <strata/nn/gpt2_config.hpp>      // gpt_config
#include <strata/nn/layernorm_layer.hpp>  // layernorm_layer, layernorm_config

#include <string>       // std::string
#include <type_traits>  // std::false_type, std::true_type

namespace strata {

template <class R, Backend B>
using gpt_model = decoder_model<gpt2_block<R, B>, layernorm_layer<R, B>>;

// GPT-2's three configs from its gpt_config: decoder_model(gpt_config) builds through this. The
// decoder_config's defaults are GPT-2's (learned positions, tied head, Hugging Face names); the
// block's config is the gpt_config itself (its n_head, and n_layer for the initialization).
inline decoder_configs<gpt_config, layernorm_config> decoder_configs_of(const gpt_config& c) {
    c.validate();
    return {.model = {.vocab_size = c.vocab_size,
                      .max_seq = c.max_seq,
                      .n_layer = c.n_layer,
                      .n_embd = c.n_embd,
                      .head_chunk_rows = c.head_chunk_rows},
            .block = c,
            .norm = {.channels = c.n_embd}};
}

template <class Model>
struct is_gpt_model : std::false_type {};
template <class R, Backend B>
struct is_gpt_model<gpt_model<R, B>> : std::true_type {};

// The gpt_config of a GPT-2 model (what its config.json says): the shape from the model's
// decoder_config, the heads from its block's. A model of gpt2_blocks whose embeddings or head are
// not GPT-2's (no learned positions, an untied head) has none.
template <class R, Backend B>
gpt_config gpt_config_of(const gpt_model<R, B>& model) {
    const decoder_config& d = model.config();
    if (!d.learned_positions || !d.tied_head)
        throw error("gpt_config_of: the model has " +
                        std::string(!d.learned_positions ? "no learned positions" : "an untied LM head") +
                        ", which GPT-2 (GPT2LMHeadModel) has not",
                    "build the model from a gpt_config");
    gpt_config c = model.block_layer_config();
    c.vocab_size = d.vocab_size;
    c.max_seq = d.max_seq;
    c.n_layer = d.n_layer;
    c.n_embd = d.n_embd;
    c.head_chunk_rows = d.head_chunk_rows;
    return c;
}

}  // namespace strata
