// llama_model<B>: a small Llama-style language model assembled from Layers, trained by strata's
// trainers (resident and streamed) like the example GPT:
//
//   embed_tokens -> n_layer x llama_block -> rmsnorm -> LM head (tied to embed_tokens, or lm_head)
//
// It is strata::decoder_model<llama_block<float, B>, rmsnorm_layer<float, B>> without learned
// positions (the blocks rotate q and k instead) and with Hugging Face Llama's parameter names
// (model.embed_tokens.weight, model.layers.<l>.*, model.norm.weight, lm_head.weight when untied).
// llama_config holds the shape and gives the three configs decoder_model takes; it reads and
// writes the config.json of LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM.
//
// Checkpoints in Hugging Face's format (transformers.LlamaForCausalLM.from_pretrained loads them):
// write_model_files writes model.safetensors + config.json, load_llama_files reads them back,
// bit for bit; strata::model_files<llama_model> (at the end) is what strata's save_checkpoint /
// load_checkpoint and run_training write and read them through, straight from a trainer, group by
// group (save_llama_checkpoint / load_llama_checkpoint: with a config.json's identity). The layouts differ from strata's in two ways:
// - strata's matmul takes (in, out) weights; nn.Linear stores (out, in): every 2-D block weight
//   is transposed (embed_tokens is (V, C) in both);
// - the block fuses q|k|v into one (C, A + 2 KV) matrix (A = NH HS, KV = NKV HS): HF has q_proj
//   (A, C), k_proj and v_proj (KV, C), the output columns [0, A), [A, A + KV) and [A + KV, A + 2 KV)
//   of the fused one; likewise q_proj.bias, k_proj.bias, v_proj.bias are slices of the fused bias.
// Rotary embedding: the block rotates "half" pairs (i, i + HS/2) inside each head, HF Llama's
// rotate_half convention, so q_proj and k_proj need no permutation.
//
// Glossary: V vocab, C channels, H hidden size of the MLP, L layers, NH query heads, NKV key/value
// heads, HS head size.
#pragma once

#include "llama_block.hpp"    // llama_block, llama_block_config
#include "rmsnorm_layer.hpp"  // rmsnorm_layer, rmsnorm_config

#include <strata/backend/cpu_backend.hpp>  // strata::cpu_backend (layouts for loading)
#include <strata/core/error.hpp>           // strata::error
#include <strata/core/float_formats.hpp>  // strata::float_to_bf16, float_to_f16
#include <strata/io/hf_weights.hpp>        // strata::hf_weights (sharded, BF16 / F16 checkpoints)
#include <strata/io/json_file.hpp>         // strata::read_json_file, write_json_file, json_file_text
#include <strata/io/safetensors.hpp>       // strata::safetensors_writer, strata::safetensors_file
#include <strata/model/decoder.hpp>        // strata::decoder_model, strata::decoder_config
#include <strata/nn/cpu_ops.hpp>           // strata::ops<cpu_backend>
#include <strata/tensor/param_layout.hpp>  // strata::param_entry
#include <strata/model/model_files.hpp>    // strata::model_files, WeightBlocks, for_each_weight_block
#include <strata/train/checkpoint.hpp>     // strata::save_checkpoint, load_checkpoint

#include <nlohmann/json.hpp>  // nlohmann::json

#include <algorithm>   // std::copy, std::equal
#include <cmath>       // std::isfinite
#include <cstddef>     // std::size_t
#include <cstdint>     // std::uint64_t
#include <filesystem>  // std::filesystem::path, exists
#include <set>         // std::set
#include <span>        // std::span
#include <optional>    // std::optional
#include <string>      // std::string, std::to_string
#include <utility>     // std::pair
#include <vector>      // std::vector

namespace llama {

// The SwiGLU width Llama's rule gives for C channels: 8/3 C, rounded up to a multiple of 8
// (Llama rounds to 256, which is too coarse for small models).
constexpr std::size_t default_hidden(std::size_t n_embd) { return (8 * n_embd / 3 + 7) / 8 * 8; }

// The Hugging Face architectures of the Llama family the block computes.
enum class llama_arch { llama, mistral, qwen2 };

inline const char* model_type_of(llama_arch a) {
    return a == llama_arch::llama ? "llama" : a == llama_arch::mistral ? "mistral" : "qwen2";
}
inline const char* architecture_of(llama_arch a) {
    return a == llama_arch::llama ? "LlamaForCausalLM" : a == llama_arch::mistral ? "MistralForCausalLM" : "Qwen2ForCausalLM";
}

struct llama_config {
    std::size_t vocab = 257;    // V (bytes + end of text)
    std::size_t max_seq = 256;  // the longest context trained or sampled (max_position_embeddings)
    std::size_t n_layer = 4;    // L
    std::size_t n_head = 4;     // NH query heads
    std::size_t n_embd = 128;   // C
    std::size_t hidden = 344;   // H
    double eps = 1e-5;          // RMSNorm, every norm of the model
    double rope_theta = 10000.0;
    // Defaults below are the multi-head, tied, unscaled Llama strata-llama always trained.
    std::size_t n_kv_head = 0;  // NKV (num_key_value_heads), divides NH; 0: NH
    std::size_t head_dim = 0;   // HS, even; 0: C / NH
    bool tie_word_embeddings = true;
    bool qkv_bias = false;  // q/k/v biases: Qwen2 has them, Llama and Mistral do not
    // rope_scaling {"rope_type": "llama3", ...} when rope_factor > 0 (Llama 3.1)
    double rope_factor = 0.0;
    double rope_low_freq_factor = 1.0;
    double rope_high_freq_factor = 4.0;
    std::size_t rope_original_max = 8192;  // original_max_position_embeddings
    llama_arch arch = llama_arch::llama;
    // config.json's bos_token_id and eos_token_id as read (eos may be a list: Llama 3.1 Instruct's
    // three end tokens), written back as they were; null: V - 1, the end-of-text token of strata's
    // own tokenizers at the default vocabulary (main sets the tokenizer's when --vocab pads).
    nlohmann::json bos_token_id = nullptr, eos_token_id = nullptr;

    bool operator==(const llama_config&) const = default;

    std::size_t kv_heads() const { return block().kv_heads(); }
    std::size_t head_size() const { return block().head_size(); }

    strata::decoder_config decoder() const {
        return {.vocab_size = vocab,
                .max_seq = max_seq,
                .n_layer = n_layer,
                .n_embd = n_embd,
                .learned_positions = false,
                .root = "model.",
                .block_prefix = "layers.",
                .final_prefix = "norm.",
                .token_embedding = "embed_tokens.weight",
                .tied_head = tie_word_embeddings,
                .lm_head = "lm_head.weight"};
    }
    kernels::rope_params rope() const {
        return {rope_theta, rope_factor, rope_low_freq_factor, rope_high_freq_factor, double(rope_original_max)};
    }
    llama_block_config block() const {
        return {.n_embd = n_embd,
                .n_head = n_head,
                .hidden = hidden,
                .norm_eps = eps,
                .rope_theta = rope(),
                .n_kv_head = n_kv_head,
                .head_dim = head_dim,
                .qkv_bias = qkv_bias};
    }
    rmsnorm_config norm() const { return {.channels = n_embd, .eps = eps}; }

    void validate() const {
        decoder().validate();
        block().validate();
        if (n_kv_head == n_head && n_head != 0)
            throw strata::error("llama config: n_kv_head equal to n_head is written 0 (as many as n_head)",
                                "set n_kv_head = 0 for multi-head attention");
        if (head_dim != 0 && n_head != 0 && n_embd % n_head == 0 && head_dim == n_embd / n_head)
            throw strata::error("llama config: head_dim equal to n_embd / n_head is written 0", "set head_dim = 0");
        if (qkv_bias != (arch == llama_arch::qwen2))
            throw strata::error(std::string("llama config: ") + architecture_of(arch) +
                                    (qkv_bias ? " has no q/k/v biases" : " has q/k/v biases"),
                                "q/k/v biases go with Qwen2 (qwen2), and only with it");
        if (rope_factor > 0 && arch != llama_arch::llama)
            throw strata::error(std::string("llama config: llama3 rope scaling on ") + architecture_of(arch),
                                "rope_scaling llama3 is supported for LlamaForCausalLM only");
    }

    // Real parameters: V C (+ V C for an untied head) + L (2 C + C QKV [+ QKV] + A C + 3 C H) + C.
    std::size_t parameter_count() const {
        const auto b = block();
        const std::size_t A = b.attn_channels(), QKV = b.qkv_channels();
        return vocab * n_embd * (tie_word_embeddings ? 1 : 2) +
               n_layer * (2 * n_embd + n_embd * QKV + (qkv_bias ? QKV : 0) + A * n_embd + 3 * n_embd * hidden) + n_embd;
    }

    // Hugging Face's LlamaConfig, MistralConfig or Qwen2Config. bos and eos are the last id, the
    // end-of-text token of strata's tokenizers (as the GPT's config.json says).
    nlohmann::json to_hf_json() const {
        nlohmann::json j = {{"architectures", {architecture_of(arch)}},
                            {"model_type", model_type_of(arch)},
                            {"vocab_size", vocab},
                            {"hidden_size", n_embd},
                            {"intermediate_size", hidden},
                            {"num_hidden_layers", n_layer},
                            {"num_attention_heads", n_head},
                            {"num_key_value_heads", kv_heads()},
                            {"head_dim", head_size()},
                            {"hidden_act", "silu"},
                            {"max_position_embeddings", max_seq},
                            {"rms_norm_eps", eps},
                            {"rope_theta", rope_theta},
                            {"rope_scaling", nullptr},
                            {"attention_dropout", 0.0},
                            {"initializer_range", 0.02},
                            {"tie_word_embeddings", tie_word_embeddings},
                            {"use_cache", true},
                            {"bos_token_id", bos_token_id.is_null() ? nlohmann::json(vocab - 1) : bos_token_id},
                            {"eos_token_id", eos_token_id.is_null() ? nlohmann::json(vocab - 1) : eos_token_id},
                            {"torch_dtype", "float32"}};
        if (arch == llama_arch::llama) {
            j["attention_bias"] = false;
            j["mlp_bias"] = false;
            j["pretraining_tp"] = 1;
            if (rope_factor > 0)
                j["rope_scaling"] = {{"rope_type", "llama3"},
                                     {"factor", rope_factor},
                                     {"low_freq_factor", rope_low_freq_factor},
                                     {"high_freq_factor", rope_high_freq_factor},
                                     {"original_max_position_embeddings", rope_original_max}};
        } else if (arch == llama_arch::mistral) {
            j["sliding_window"] = nullptr;
        } else {
            j["use_sliding_window"] = false;
            j["sliding_window"] = nullptr;
            j["max_window_layers"] = n_layer;
        }
        return j;
    }

    // The rotary frequencies of a config.json. transformers 4 writes rope_theta at the top (and
    // rope_scaling null or a scaling); transformers 5 writes only rope_parameters {"rope_type":
    // "default" or "llama3", "rope_theta": ...}. Both are read; where both give a base they must
    // agree; rope types other than plain and llama3 (linear, dynamic, yarn, ...) are refused by name.
    static kernels::rope_params rope_of(const nlohmann::json& j, const std::string& source) {
        auto number = [&](const std::string& where, const nlohmann::json& v) {
            const double x = v.is_number() ? v.get<double>() : -1;
            if (!(x > 0) || !std::isfinite(x))
                throw strata::error(source + ": " + where + " " + v.dump() + " is not a positive number",
                                    "is this a Llama config.json?");
            return x;
        };
        std::vector<std::pair<std::string, double>> bases;  // where it was found, value
        if (j.contains("rope_theta") && !j["rope_theta"].is_null()) bases.emplace_back("rope_theta", number("rope_theta", j["rope_theta"]));
        kernels::rope_params rope;
        for (const char* key : {"rope_parameters", "rope_scaling"}) {
            if (!j.contains(key) || j[key].is_null()) continue;
            const auto& r = j[key];
            const auto unsupported = [&] {
                return strata::error(source + ": " + key + " " + r.dump() + " is not supported",
                                     "the block applies plain rotary embedding or Llama 3.1's (rope_type \"default\" "
                                     "or \"llama3\")");
            };
            if (!r.is_object()) throw unsupported();
            std::string type = "default";
            if (r.contains("rope_type")) type = r["rope_type"].is_string() ? r["rope_type"].get<std::string>() : "?";
            else if (r.contains("type")) type = r["type"].is_string() ? r["type"].get<std::string>() : "?";
            if (type != "default" && type != "llama3") throw unsupported();
            kernels::rope_params found;
            std::size_t llama3_fields = 0;
            for (const auto& [name, value] : r.items()) {
                const std::string where = std::string(key) + "." + name;
                if (name == "rope_type" || name == "type") continue;
                if (name == "rope_theta") {
                    bases.emplace_back(where, number(where, value));
                } else if (type == "llama3" && name == "factor") {
                    found.factor = number(where, value), ++llama3_fields;
                } else if (type == "llama3" && name == "low_freq_factor") {
                    found.low_freq_factor = number(where, value), ++llama3_fields;
                } else if (type == "llama3" && name == "high_freq_factor") {
                    found.high_freq_factor = number(where, value), ++llama3_fields;
                } else if (type == "llama3" && name == "original_max_position_embeddings") {
                    if (!value.is_number_unsigned() || value.get<std::size_t>() == 0)
                        throw strata::error(source + ": " + where + " " + value.dump() + " is not a positive integer",
                                            "is this a Llama 3.1 config.json?");
                    found.original_max_position_embeddings = double(value.get<std::size_t>()), ++llama3_fields;
                } else if (!(name == "partial_rotary_factor" && value.is_number() && value.get<double>() == 1.0)) {
                    throw unsupported();
                }
            }
            if (type == "llama3") {
                if (llama3_fields != 4)
                    throw strata::error(source + ": " + key + " " + r.dump() + " lacks a field of rope_type llama3",
                                        "llama3 scaling needs factor, low_freq_factor, high_freq_factor and "
                                        "original_max_position_embeddings");
                if (!(found.high_freq_factor > found.low_freq_factor))
                    throw strata::error(source + ": " + key + ".high_freq_factor must exceed low_freq_factor",
                                        "is this a Llama 3.1 config.json?");
                if (rope.scaled() && !(rope.factor == found.factor && rope.low_freq_factor == found.low_freq_factor &&
                                       rope.high_freq_factor == found.high_freq_factor &&
                                       rope.original_max_position_embeddings == found.original_max_position_embeddings))
                    throw strata::error(source + ": rope_parameters and rope_scaling disagree", "keep one of them");
                rope = found;
            }
        }
        for (const auto& [where, value] : bases)
            if (value != bases.front().second)
                throw strata::error(source + ": " + bases.front().first + " " + std::to_string(bases.front().second) + " and " +
                                        where + " " + std::to_string(value) + " disagree",
                                    "keep one rotary base (transformers 5 reads rope_parameters.rope_theta)");
        rope.theta = bases.empty() ? 10000.0 : bases.front().second;  // LlamaConfig's default
        return rope;
    }
    static double rope_theta_of(const nlohmann::json& j, const std::string& source) { return rope_of(j, source).theta; }

    // A LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM strata can train: SiLU, grouped-
    // query attention, tied or untied head, q/k/v biases only for Qwen2, plain or llama3 rotary
    // embedding, full causal attention. Anything else is refused, naming the config field.
    static llama_config from_hf_json(const nlohmann::json& j, const std::string& source = "config.json") {
        if (!j.is_object())
            throw strata::error(source + " is a JSON " + std::string(j.type_name()) + ", not an object",
                                "is this a Llama config.json?");
        auto field = [&](const char* name) -> std::size_t {
            if (!j.contains(name) || !j[name].is_number_unsigned())
                throw strata::error(source + ": missing or non-integer field '" + name + "'",
                                    "is this a Llama config.json?");
            return j[name].get<std::size_t>();
        };
        auto refuse = [&](const std::string& what, const std::string& hint) {
            throw strata::error(source + ": " + what + " is not supported", hint);
        };
        auto present = [&](const char* name) { return j.contains(name) && !j[name].is_null(); };
        llama_config c;
        if (j.contains("model_type")) {
            if (j["model_type"] == "llama") c.arch = llama_arch::llama;
            else if (j["model_type"] == "mistral") c.arch = llama_arch::mistral;
            else if (j["model_type"] == "qwen2") c.arch = llama_arch::qwen2;
            else
                refuse("model_type " + j["model_type"].dump(),
                       "strata-llama loads Llama, Mistral and Qwen2 checkpoints (\"llama\", \"mistral\", \"qwen2\")");
        }
        if (j.contains("hidden_act") && j["hidden_act"] != "silu")
            refuse("hidden_act " + j["hidden_act"].dump(), "the block's MLP is SwiGLU (\"silu\")");
        // Mixture of experts (Mixtral, Qwen2-MoE, ...): no field of theirs may be set.
        for (const char* moe : {"num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                                "shared_expert_intermediate_size", "router_aux_loss_coef", "decoder_sparse_step"})
            if (present(moe) && j[moe] != 0)
                refuse(std::string("mixture of experts (") + moe + " " + j[moe].dump() + ")",
                       "the block has one dense SwiGLU MLP");
        // j.value(key, default) throws nlohmann's type_error when the value has another type.
        auto number_or = [&](const char* name, double fallback) {
            if (!present(name)) return fallback;
            const double v = j[name].is_number() ? j[name].get<double>() : -1;
            if (!(v > 0) || !std::isfinite(v))
                throw strata::error(source + ": field '" + name + "' is " + j[name].dump() + ", not a positive number",
                                    "is this a Llama config.json?");
            return v;
        };
        if (c.arch == llama_arch::llama)
            for (const char* flag : {"attention_bias", "mlp_bias"})
                if (j.contains(flag) && j[flag] != false && !j[flag].is_null())
                    refuse(std::string(flag) + " " + j[flag].dump(),
                           "a Llama block has no biases (Qwen2's q/k/v biases come with model_type qwen2)");
        c.vocab = field("vocab_size");
        for (auto [name, to] : {std::pair{"bos_token_id", &c.bos_token_id}, std::pair{"eos_token_id", &c.eos_token_id}})
            if (present(name)) {
                const nlohmann::json& id = j[name];
                const bool ids = id.is_number_integer() ||
                                 (id.is_array() && std::all_of(id.begin(), id.end(), [](const nlohmann::json& e) { return e.is_number_integer(); }));
                if (!ids) refuse(std::string(name) + " " + id.dump(), "a token id or a list of token ids");
                if (id != nlohmann::json(c.vocab - 1)) *to = id;  // V - 1 is what null stands for
            }
        c.n_embd = field("hidden_size");
        c.hidden = field("intermediate_size");
        c.n_layer = field("num_hidden_layers");
        c.n_head = field("num_attention_heads");
        c.max_seq = field("max_position_embeddings");
        c.eps = number_or("rms_norm_eps", 1e-6);  // LlamaConfig's defaults
        if (present("num_key_value_heads")) {
            const std::size_t kv = field("num_key_value_heads");
            if (kv == 0 || c.n_head % kv != 0)
                refuse("num_key_value_heads " + std::to_string(kv) + " of " + std::to_string(c.n_head) + " heads",
                       "num_key_value_heads must divide num_attention_heads");
            c.n_kv_head = kv == c.n_head ? 0 : kv;
        }
        if (present("head_dim")) {
            const std::size_t hs = field("head_dim");
            if (hs == 0 || hs % 2 != 0)
                refuse("head_dim " + std::to_string(hs), "rotary embedding rotates pairs: head_dim must be even and > 0");
            c.head_dim = (c.n_head != 0 && c.n_embd % c.n_head == 0 && hs == c.n_embd / c.n_head) ? 0 : hs;
        }
        const auto rope = rope_of(j, source);
        c.rope_theta = rope.theta;
        if (rope.scaled()) {
            if (c.arch != llama_arch::llama)
                refuse("rope_scaling llama3 with model_type " + j["model_type"].dump(),
                       "llama3 rope scaling is read for model_type llama only");
            c.rope_factor = rope.factor;
            c.rope_low_freq_factor = rope.low_freq_factor;
            c.rope_high_freq_factor = rope.high_freq_factor;
            c.rope_original_max = static_cast<std::size_t>(rope.original_max_position_embeddings);
        }
        // LlamaConfig, MistralConfig and Qwen2Config all default tie_word_embeddings to false.
        if (present("tie_word_embeddings")) {
            if (!j["tie_word_embeddings"].is_boolean())
                throw strata::error(source + ": tie_word_embeddings " + j["tie_word_embeddings"].dump() + " is not a boolean",
                                    "is this a Llama config.json?");
            c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
        } else {
            c.tie_word_embeddings = false;
        }
        if (c.arch == llama_arch::mistral && present("sliding_window")) {
            const std::size_t window = field("sliding_window");
            if (window < c.max_seq)
                refuse("sliding_window " + std::to_string(window) + " (smaller than max_position_embeddings " +
                           std::to_string(c.max_seq) + ")",
                       "the block attends to the whole causal context: use a config with sliding_window null, or "
                       "max_position_embeddings at most the window");
        }
        // transformers >= 4.53 also says per layer what attention it has
        if (present("layer_types")) {
            if (!j["layer_types"].is_array())
                refuse("layer_types " + j["layer_types"].dump(), "layer_types is a list of \"full_attention\"");
            for (const auto& t : j["layer_types"])
                if (t != "full_attention")
                    refuse("layer_types entry " + t.dump(), "the block attends to the whole causal context (\"full_attention\")");
        }
        if (c.arch == llama_arch::qwen2) {
            if (present("use_sliding_window") && j["use_sliding_window"] != false)
                refuse("use_sliding_window " + j["use_sliding_window"].dump(),
                       "the block attends to the whole causal context (use_sliding_window false)");
            c.qkv_bias = true;  // Qwen2Attention: q/k/v with bias, o_proj without
        }
        c.validate();
        return c;
    }
};

// The model, and the one way to build it from a llama_config.
template <strata::Backend B>
using llama_model = strata::decoder_model<llama_block<float, B>, rmsnorm_layer<float, B>>;

template <strata::Backend B>
llama_model<B> make_llama_model(const llama_config& c) {
    c.validate();
    return llama_model<B>(c.decoder(), c.block(), c.norm());
}

// The shape of a built model.
template <class R, strata::Backend B>
llama_config config_of(const strata::decoder_model<llama_block<R, B>, rmsnorm_layer<R, B>>& m) {
    const auto& b = m.block_layer_config();
    const auto& d = m.config();
    llama_config c{.vocab = d.vocab_size,
                   .max_seq = d.max_seq,
                   .n_layer = d.n_layer,
                   .n_head = b.n_head,
                   .n_embd = d.n_embd,
                   .hidden = b.hidden,
                   .eps = b.norm_eps,
                   .rope_theta = b.rope_theta.theta,
                   .n_kv_head = b.n_kv_head,
                   .head_dim = b.head_dim,
                   .tie_word_embeddings = d.tied_head,
                   .qkv_bias = b.qkv_bias,
                   .rope_factor = b.rope_theta.factor,
                   .rope_low_freq_factor = b.rope_theta.low_freq_factor,
                   .rope_high_freq_factor = b.rope_theta.high_freq_factor,
                   .rope_original_max = static_cast<std::size_t>(b.rope_theta.original_max_position_embeddings)};
    // the architecture is not in the model's shape: qwen2 is the one with q/k/v biases, and a
    // model without them is exported as a Llama
    c.arch = b.qkv_bias ? llama_arch::qwen2 : llama_arch::llama;
    return c;
}

// ---- Hugging Face files ----

// One tensor of a Hugging Face Llama file and where it lives in strata's parameter entry: the
// whole entry, or (2-D weights) the transposed columns [column, column + shape[0]) of the
// (in, out) entry, or (1-D biases) the elements [column, column + shape[0]) of the entry.
struct hf_tensor {
    std::string name;
    std::vector<std::size_t> shape;  // as HF stores it: nn.Linear (out, in)
    bool transposed = false;
    std::size_t column = 0;
};

// The HF tensors of one parameter entry of group g (see the top of this file): the fused q|k|v
// weight (C, QKV) is q_proj (A, C), k_proj and v_proj (KV, C); its bias (QKV) is q_proj.bias (A),
// k_proj.bias and v_proj.bias (KV). An untied head is lm_head.weight (V, C) as it is.
template <class Model>
std::vector<hf_tensor> hf_tensors_of(const Model& m, std::size_t g, const strata::param_entry& entry) {
    const std::string name = m.hf_name(g, entry);
    const auto& e = entry.spec.shape.extents();
    const auto& b = m.block_layer_config();
    const std::size_t A = b.attn_channels(), KV = b.kv_heads() * b.head_size();
    if (g != 0 && entry.spec.name == "self_attn.qkv_proj.bias") {
        const std::string layer = name.substr(0, name.size() - entry.spec.name.size());
        return {{layer + "self_attn.q_proj.bias", {A}, false, 0},
                {layer + "self_attn.k_proj.bias", {KV}, false, A},
                {layer + "self_attn.v_proj.bias", {KV}, false, A + KV}};
    }
    if (g == 0 || e.size() != 2) return {{name, e}};  // embed_tokens, lm_head (V, C) and the norm gains as they are
    const std::size_t in = e[0], out = e[1];
    if (entry.spec.name != "self_attn.qkv_proj.weight") return {{name, {out, in}, true, 0}};
    const std::string layer = name.substr(0, name.size() - entry.spec.name.size());  // "model.layers.<l>."
    return {{layer + "self_attn.q_proj.weight", {A, in}, true, 0},
            {layer + "self_attn.k_proj.weight", {KV, in}, true, A},
            {layer + "self_attn.v_proj.weight", {KV, in}, true, A + KV}};
}

namespace detail {
// HF tensor (out_n, in) <- columns [column, column + out_n) of the entry's (in, out) matrix.
template <class R>
std::vector<R> to_hf(const R* entry, std::size_t out, const hf_tensor& t) {
    const std::size_t rows = t.shape[0], in = t.shape[1];
    std::vector<R> hf(rows * in);
    for (std::size_t o = 0; o < rows; ++o)
        for (std::size_t i = 0; i < in; ++i) hf[o * in + i] = entry[i * out + t.column + o];
    return hf;
}
template <class R>
void from_hf(R* entry, std::size_t out, const hf_tensor& t, const std::vector<R>& hf) {
    const std::size_t rows = t.shape[0], in = t.shape[1];
    for (std::size_t o = 0; o < rows; ++o)
        for (std::size_t i = 0; i < in; ++i) entry[i * out + t.column + o] = hf[o * in + i];
}
inline std::string join(const std::vector<std::string>& names) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    return list;
}
}  // namespace detail

// model.safetensors of a model, declared: HF names and shapes, no lm_head (tied).
template <class R, strata::Backend B>
strata::safetensors_writer declared_model_tensors(
    const strata::decoder_model<llama_block<R, B>, rmsnorm_layer<R, B>>& model) {
    strata::safetensors_writer w;
    w.set_metadata("format", "pt");
    for (std::size_t g = 0; g < model.group_count(); ++g)
        for (const auto& entry : model.groups()[g].entries())
            for (const hf_tensor& t : hf_tensors_of(model, g, entry)) w.declare<R>(t.name, t.shape);
    return w;
}

// What config.json says beyond the model's shape: the architecture (the shape alone gives Llama,
// or Qwen2 with q/k/v biases) and the special token ids (alone: V - 1), as a loaded directory or
// the trainer's tokenizer gave them. A model from a Mistral directory is written back as Mistral,
// one from Llama 3 with its bos/eos ids.
struct hf_identity {
    std::optional<llama_arch> arch;
    nlohmann::json bos_token_id = nullptr, eos_token_id = nullptr;

    static hf_identity of(const llama_config& c) { return {c.arch, c.bos_token_id, c.eos_token_id}; }
};

// The config.json written for `model`: its shape, with `id`'s architecture where the shape allows
// it (q/k/v biases only with Qwen2) and its token ids.
template <class R, strata::Backend B>
llama_config written_config(const strata::decoder_model<llama_block<R, B>, rmsnorm_layer<R, B>>& model,
                            const hf_identity& id) {
    llama_config c = config_of(model);
    if (id.arch && (*id.arch == llama_arch::qwen2) == c.qkv_bias && (*id.arch != llama_arch::mistral || c.rope_factor == 0))
        c.arch = *id.arch;
    c.bos_token_id = id.bos_token_id;
    c.eos_token_id = id.eos_token_id;
    return c;
}

// The bytes of model.safetensors + config.json, exactly.
template <class R, strata::Backend B>
std::uint64_t model_files_bytes(const strata::decoder_model<llama_block<R, B>, rmsnorm_layer<R, B>>& model,
                                const hf_identity& id = {}) {
    return declared_model_tensors(model).file_size() + strata::json_file_text(written_config(model, id).to_hf_json()).size();
}

namespace detail {
// model.safetensors and config.json from blocks handed over group by group: for_each_block(visit)
// calls visit(g, group g's whole block) for every group in order.
template <class R, strata::Backend B, class ForEachBlock>
void write_model_files_by_group(const strata::decoder_model<llama_block<R, B>, rmsnorm_layer<R, B>>& model,
                                ForEachBlock&& for_each_block, const std::filesystem::path& dir, const hf_identity& id) {
    declared_model_tensors(model).write_streamed(dir / "model.safetensors", [&](strata::safetensors_writer::stream& out) {
        for_each_block([&](std::size_t g, std::span<const R> block) {
            for (const auto& entry : model.groups()[g].entries()) {
                const R* p = block.data() + entry.offset;
                for (const hf_tensor& t : hf_tensors_of(model, g, entry)) {
                    if (t.transposed)
                        out.write(t.name, std::span<const R>(to_hf(p, entry.spec.shape.extents()[1], t)));
                    else
                        out.write(t.name, std::span<const R>(p + t.column, strata::shape(t.shape).numel()));
                }
            }
        });
    });
    strata::write_json_file(dir / "config.json", written_config(model, id).to_hf_json());
}
}  // namespace detail

// model.safetensors (HF names and layouts, no lm_head: tied) and config.json into `dir`.
// blocks[g]: group g's parameter block in the model's layout (trainer download, checkpoint load).
template <class R, strata::Backend B>
void write_model_files(const strata::decoder_model<llama_block<R, B>, rmsnorm_layer<R, B>>& model,
                       const std::vector<std::vector<R>>& blocks, const std::filesystem::path& dir,
                       const hf_identity& id = {}) {
    detail::write_model_files_by_group(
        model, [&](auto&& visit) {
            for (std::size_t g = 0; g < model.group_count(); ++g) visit(g, std::span<const R>(blocks[g]));
        },
        dir, id);
}

// The weights of a Llama directory in strata's group layout.
struct loaded_llama {
    llama_config config;
    std::vector<std::vector<float>> blocks;
};

// A Llama directory's weights, read group by group (strata-llama's checkpoints, or a Hugging
// Face Llama of a shape strata trains: see llama_config::from_hf_json): config.json and one
// model.safetensors or the shards listed by model.safetensors.index.json (io/hf_weights.hpp), in
// float32, bfloat16 or float16 (widened to float exactly), tensor by tensor. Tensors may carry
// the "model." prefix or not. lm_head.weight, when present, must equal embed_tokens (the head is
// tied); rotary inv_freq buffers of older exports are skipped; any other unknown tensor, any
// missing one, a wrong shape and any other dtype is an error naming it. Every name is checked
// when the directory is opened; group(g) then reads one group's block, so a trainer can take a
// model of any size through host memory one group at a time (at most the largest group, the
// embedding or the head, on top of its own tiers).
class llama_weights {
public:
    explicit llama_weights(const std::filesystem::path& dir)
        : m_config(config_of_directory(dir)),
          m_model(make_llama_model<strata::cpu_backend>(m_config)),
          m_file(strata::hf_weights::open(dir)),
          m_model_path((dir / strata::hf_weights::single_file).string()) {
        check_names();
    }

    const llama_config& config() const { return m_config; }
    std::size_t group_count() const { return m_model.group_count(); }

    // Group g's parameter block in llama_model's layout.
    std::vector<float> group(std::size_t g) const {
        std::vector<float> block(m_model.groups()[g].numel(), 0.0f);
        for (const auto& entry : m_model.groups()[g].entries()) {
            float* p = block.data() + entry.offset;
            for (const hf_tensor& t : hf_tensors_of(m_model, g, entry)) {
                const auto values = read(key_of(t.name), t.shape);
                if (t.transposed)
                    detail::from_hf(p, entry.spec.shape.extents()[1], t, values);
                else
                    std::copy(values.begin(), values.end(), p + t.column);
            }
        }
        return block;
    }

private:
    static llama_config config_of_directory(const std::filesystem::path& dir) {
        const auto config_path = dir / "config.json";
        if (!std::filesystem::exists(config_path) ||
            !(std::filesystem::exists(dir / strata::hf_weights::single_file) ||
              std::filesystem::exists(dir / strata::hf_weights::index_file)))
            throw strata::error("'" + dir.string() + "' is not a Llama checkpoint: config.json or model.safetensors (or its index) is missing",
                                "pass a directory written by strata-llama (OUT/step-N) or a Hugging Face Llama directory");
        return llama_config::from_hf_json(strata::read_json_file(config_path), config_path.string());
    }

    // The file's name of a model tensor ("model." prefix or not); empty when it has none.
    std::string key_of(const std::string& name) const {
        if (m_file.contains(name)) return name;
        if (name.starts_with("model.") && m_file.contains(name.substr(6))) return name.substr(6);
        return {};
    }

    void check_shape(const std::string& key, const std::vector<std::size_t>& shape) const {
        if (m_file.info(key).shape != shape)
            throw strata::error("'" + m_file.source_of(key) + "': tensor '" + key + "' has shape " +
                                    strata::detail::shape_string(m_file.info(key).shape) + ", the model's is " +
                                    strata::detail::shape_string(shape),
                                "the file does not match config.json");
    }

    std::vector<float> read(const std::string& key, const std::vector<std::size_t>& shape) const {
        check_shape(key, shape);
        std::vector<float> values(strata::shape(shape).numel());
        m_file.read_as_float(key, std::span<float>(values));  // F32, BF16, F16 exactly; others refused by name
        return values;
    }

    // Every tensor of the model is there with its shape, nothing else is (but a tied copy of the
    // embedding and rotary buffers).
    void check_names() const {
        std::set<std::string> used;
        std::vector<std::string> missing;
        for (std::size_t g = 0; g < m_model.group_count(); ++g)
            for (const auto& entry : m_model.groups()[g].entries())
                for (const hf_tensor& t : hf_tensors_of(m_model, g, entry)) {
                    const std::string key = key_of(t.name);
                    if (key.empty()) {
                        missing.push_back(t.name);
                        continue;
                    }
                    check_shape(key, t.shape);
                    used.insert(key);
                }
        if (!missing.empty())
            throw strata::error("'" + m_model_path + "' lacks " + std::to_string(missing.size()) +
                                    " tensor(s): " + detail::join(missing),
                                "the file does not match config.json (num_hidden_layers, hidden_size, vocab_size, num_key_value_heads, tie_word_embeddings)");
        std::vector<std::string> unknown;
        for (const auto& name : m_file.names()) {
            if (used.count(name) || name.ends_with("rotary_emb.inv_freq")) continue;
            if (name == "lm_head.weight") {  // tied: must be a copy of embed_tokens
                const std::string embed = key_of("model.embed_tokens.weight");
                const auto shape = m_file.info(embed).shape;
                const auto head = read(name, shape), wte = read(embed, shape);
                if (!std::equal(head.begin(), head.end(), wte.begin()))
                    throw strata::error("'" + m_model_path + "': lm_head.weight differs from " + embed +
                                            " but config.json says tie_word_embeddings true",
                                        "set tie_word_embeddings to false for an untied head");
                continue;
            }
            unknown.push_back(name);
        }
        if (!unknown.empty())
            throw strata::error("'" + m_model_path + "' has tensor(s) a Llama model of this shape does not: " +
                                    detail::join(unknown),
                                "is this a LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM checkpoint?");
    }

    llama_config m_config;
    llama_model<strata::cpu_backend> m_model;  // the layout: groups, entries, HF names
    strata::hf_weights m_file;
    std::string m_model_path;
};

// The whole model in host memory (the sampler, the tests, a LoRA base): every group read.
inline loaded_llama load_llama_files(const llama_weights& weights) {
    loaded_llama out{weights.config(), {}};
    for (std::size_t g = 0; g < weights.group_count(); ++g) out.blocks.push_back(weights.group(g));
    return out;
}

inline loaded_llama load_llama_files(const std::filesystem::path& dir) { return load_llama_files(llama_weights(dir)); }

// ---- trainer checkpoints ----

// OUT/step-<N>/ of a trainer of a llama_model, written atomically: the HF Llama files above, the
// optimizer's state (optimizer.safetensors, unless `contents` is weights) and trainer_state.json,
// plus extra_files (a tokenizer's): strata::save_checkpoint with the model's files of `id`.
template <class Trainer>
std::filesystem::path save_llama_checkpoint(Trainer& t, const std::filesystem::path& out_dir, nlohmann::json trainer_state,
                                            const std::vector<std::filesystem::path>& extra_files = {},
                                            strata::checkpoint_contents contents = strata::checkpoint_contents::full,
                                            const hf_identity& id = {}) {
    return strata::save_checkpoint(t, out_dir, std::move(trainer_state), extra_files, contents, {.identity = id});
}

// Restores what save_llama_checkpoint wrote (weights, moments, step count) into a trainer of the
// same model shape; returns trainer_state.json.
template <class Trainer>
nlohmann::json load_llama_checkpoint(Trainer& t, const std::filesystem::path& dir) {
    return strata::load_checkpoint(t, dir);
}

}  // namespace llama

// A Llama model's files in a checkpoint (strata/model/model_files.hpp): the Hugging Face Llama
// directory above, model.safetensors + config.json with `identity`'s architecture and token ids,
// written group by group from the weights; read back group by group (llama_weights) into a model
// of the same shape, whatever the directory's own architecture and token ids.
template <class R, strata::Backend B>
struct strata::model_files<strata::decoder_model<llama::llama_block<R, B>, llama::rmsnorm_layer<R, B>>> {
    using model_type = strata::decoder_model<llama::llama_block<R, B>, llama::rmsnorm_layer<R, B>>;
    llama::hf_identity identity;

    std::uint64_t bytes(const model_type& model) const { return llama::model_files_bytes(model, identity); }

    template <strata::WeightBlocks<R> Weights>
    void write(const model_type& model, Weights& weights, const std::filesystem::path& dir) const {
        llama::detail::write_model_files_by_group(
            model, [&](auto&& visit) { strata::for_each_weight_block(model, weights, visit); }, dir, identity);
    }

    template <strata::WeightBlocks<R> Weights>
    void read(const model_type& model, Weights& weights, const std::filesystem::path& dir) const {
        const llama::llama_weights files(dir);
        if (!(files.config() == llama::written_config(model, llama::hf_identity::of(files.config()))))
            throw strata::error("checkpoint '" + dir.string() + "' holds a different Llama shape than the one being trained",
                                "resume with the shape of its config.json");
        for (std::size_t g = 0; g < files.group_count(); ++g) {
            const std::vector<float> block = files.group(g);
            weights.upload(g, std::span<const R>(block));
        }
    }
};
