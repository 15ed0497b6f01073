// gpt_config: the shape of a GPT-2-architecture model, read and written as Hugging Face's
// config.json for GPT2LMHeadModel, and how its LM head runs (head_chunk_rows, not in config.json).
#pragma once

#include <strata/core/error.hpp>           // strata::error
#include <strata/nn/ops.hpp>               // lm_head_chunk_rows
#include <strata/tensor/param_layout.hpp>  // param_spec

#include <nlohmann/json.hpp>  // nlohmann::json

#include <cstddef>  // std::size_t
#include <string>   // std::string, std::to_string
#include <vector>   // std::vector

namespace strata {

struct gpt_config {
    std::size_t vocab_size = 257;  // byte tokenizer: 256 bytes + end-of-text
    std::size_t max_seq = 256;     // n_positions: rows of the position embedding
    std::size_t n_layer = 4;
    std::size_t n_head = 4;
    std::size_t n_embd = 128;
    // Positions per chunk of the LM head and cross-entropy (model/lm_head.hpp): the logits buffers
    // hold this many rows of V, whatever B x T is. Changes no number while B x T fits in one chunk.
    std::size_t head_chunk_rows = lm_head_chunk_rows;

    std::size_t head_size() const { return n_embd / n_head; }

    void validate() const {
        auto positive = [](std::size_t v, const char* name) {
            if (v == 0) throw error(std::string("model config: ") + name + " must be positive");
        };
        positive(vocab_size, "vocab_size");
        positive(max_seq, "n_positions");
        positive(n_layer, "n_layer");
        positive(n_head, "n_head");
        positive(n_embd, "n_embd");
        positive(head_chunk_rows, "head_chunk_rows");
        if (n_embd % n_head != 0)
            throw error("model config: n_embd " + std::to_string(n_embd) + " is not a multiple of n_head " +
                            std::to_string(n_head),
                        "choose n_embd divisible by n_head", {"n_embd", "n_head"});
    }

    // Parameters of the model (the LM head is tied to the token embedding).
    std::size_t parameter_count() const {
        const std::size_t C = n_embd, V = vocab_size;
        const std::size_t block = 2 * C + C * 3 * C + 3 * C + C * C + C + 2 * C + C * 4 * C + 4 * C + 4 * C * C + C;
        return V * C + max_seq * C + n_layer * block + 2 * C;
    }

    nlohmann::json to_hf_json() const {
        return {{"architectures", {"GPT2LMHeadModel"}},
                {"model_type", "gpt2"},
                {"vocab_size", vocab_size},
                {"n_positions", max_seq},
                {"n_ctx", max_seq},
                {"n_embd", n_embd},
                {"n_layer", n_layer},
                {"n_head", n_head},
                {"n_inner", nullptr},
                {"activation_function", "gelu_new"},
                {"layer_norm_epsilon", 1e-5},
                {"resid_pdrop", 0.0},
                {"embd_pdrop", 0.0},
                {"attn_pdrop", 0.0},
                {"initializer_range", 0.02},
                {"scale_attn_weights", true},
                {"tie_word_embeddings", true},
                {"bos_token_id", vocab_size - 1},
                {"eos_token_id", vocab_size - 1},
                {"torch_dtype", "float32"}};
    }

    static gpt_config from_hf_json(const nlohmann::json& j, const std::string& source = "config.json") {
        auto field = [&](const char* name) -> std::size_t {
            if (!j.contains(name) || !j[name].is_number_unsigned())
                throw error(source + ": missing or non-integer field '" + name + "'",
                            "is this a GPT-2 config.json?");
            return j[name].get<std::size_t>();
        };
        if (j.contains("model_type") && j["model_type"] != "gpt2")
            throw error(source + ": model_type is " + j["model_type"].dump() + ", not \"gpt2\"",
                        "strata-gpt loads GPT-2-architecture checkpoints");
        if (j.contains("activation_function") && j["activation_function"] != "gelu_new")
            throw error(source + ": activation_function " + j["activation_function"].dump() +
                        " is not supported (strata's MLP uses GELU, tanh form: \"gelu_new\")");
        if (j.contains("n_inner") && !j["n_inner"].is_null() &&
            (!j["n_inner"].is_number_unsigned() || j["n_inner"].get<std::size_t>() != 4 * field("n_embd")))
            throw error(source + ": n_inner " + j["n_inner"].dump() + " is not supported (only null or 4 * n_embd)");
        gpt_config c;
        c.vocab_size = field("vocab_size");
        c.max_seq = field("n_positions");
        c.n_layer = field("n_layer");
        c.n_head = field("n_head");
        c.n_embd = field("n_embd");
        c.validate();
        return c;
    }
};

// The parameters of each group of a GPT-2 model, under Hugging Face's names (GPT2LMHeadModel
// without the "transformer." prefix): the embeddings, one block, the final layernorm.
inline std::vector<param_spec> gpt_embedding_params(const gpt_config& c) {
    return {{"wte.weight", {c.vocab_size, c.n_embd}, true}, {"wpe.weight", {c.max_seq, c.n_embd}, true}};
}

inline std::vector<param_spec> gpt_block_params(const gpt_config& c) {
    const std::size_t C = c.n_embd;
    return {{"ln_1.weight", {C}, false},           {"ln_1.bias", {C}, false},
            {"attn.c_attn.weight", {C, 3 * C}, true}, {"attn.c_attn.bias", {3 * C}, false},
            {"attn.c_proj.weight", {C, C}, true},     {"attn.c_proj.bias", {C}, false},
            {"ln_2.weight", {C}, false},           {"ln_2.bias", {C}, false},
            {"mlp.c_fc.weight", {C, 4 * C}, true},    {"mlp.c_fc.bias", {4 * C}, false},
            {"mlp.c_proj.weight", {4 * C, C}, true},  {"mlp.c_proj.bias", {C}, false}};
}

inline std::vector<param_spec> gpt_final_params(const gpt_config& c) {
    return {{"ln_f.weight", {c.n_embd}, false}, {"ln_f.bias", {c.n_embd}, false}};
}

}  // namespace strata
