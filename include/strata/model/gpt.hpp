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
//
// Its files are Hugging Face GPT-2's: model.safetensors (GPT2LMHeadModel's names, Conv1D's
// [in, out] layouts) and config.json. write_model_files / load_model_files write and read them
// from host blocks; model_files<gpt_model> (model/model_files.hpp) is what a checkpoint writes
// and reads them through, straight from a trainer group by group.
#pragma once

#include <strata/backend/backend.hpp>      // Backend
#include <strata/backend/cpu_backend.hpp>  // cpu_backend (the layout a loaded directory is read in)
#include <strata/core/error.hpp>           // strata::error
#include <strata/io/json_file.hpp>         // read_json_file, write_json_file, json_file_text
#include <strata/io/safetensors.hpp>       // safetensors_writer, safetensors_file
#include <strata/model/decoder.hpp>        // decoder_model, decoder_config, decoder_configs
#include <strata/model/model_files.hpp>    // model_files, WeightBlocks, host_blocks, for_each_weight_block
#include <strata/nn/gpt2_block.hpp>        // gpt2_block
#include <strata/nn/gpt2_config.hpp>       // gpt_config
#include <strata/nn/layernorm_layer.hpp>   // layernorm_layer, layernorm_config

#include <algorithm>    // std::copy
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <filesystem>   // std::filesystem::path, exists
#include <set>          // std::set
#include <span>         // std::span
#include <string>       // std::string
#include <type_traits>  // std::false_type, std::true_type
#include <vector>       // std::vector

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

// ---- its files: Hugging Face GPT-2's (transformers.GPT2LMHeadModel.from_pretrained loads them) ----

// The weights of a GPT-2 directory (strata's or Hugging Face's) in strata's group layout.
template <class R>
struct loaded_model {
    gpt_config config;
    host_blocks<R> blocks;
};

namespace detail {
// Entries of HF GPT-2 files that are not parameters: causal-mask buffers of older exports.
inline bool is_hf_buffer(const std::string& name) {
    return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}
// HF files name parameters with or without the "transformer." prefix.
inline std::string hf_key(const safetensors_file& f, const std::string& name) {
    if (f.contains(name)) return name;
    const std::string bare = name.substr(std::string("transformer.").size());
    if (f.contains(bare)) return bare;
    return {};
}
}  // namespace detail

// model.safetensors of a GPT-2 model, declared: Hugging Face's names, the group layouts' shapes.
template <class R, Backend B>
safetensors_writer declared_model_tensors(const gpt_model<R, B>& model) {
    safetensors_writer w;
    w.set_metadata("format", "pt");
    for (std::size_t g = 0; g < model.group_count(); ++g)
        for (const auto& entry : model.groups()[g].entries()) w.declare<R>(model.hf_name(g, entry), entry.spec.shape.extents());
    return w;
}

// The bytes of model.safetensors + config.json of a GPT-2 model, exactly.
template <class R, Backend B>
std::uint64_t model_files_bytes(const gpt_model<R, B>& model) {
    return declared_model_tensors(model).file_size() + json_file_text(gpt_config_of(model).to_hf_json()).size();
}

namespace detail {
// model.safetensors + config.json from blocks handed over group by group:
// for_each_block(visit) calls visit(g, group g's whole block) for every group in order.
template <class R, Backend B, class ForEachBlock>
void write_model_files_by_group(const gpt_model<R, B>& model, ForEachBlock&& for_each_block,
                                const std::filesystem::path& dir) {
    declared_model_tensors(model).write_streamed(dir / "model.safetensors", [&](safetensors_writer::stream& out) {
        for_each_block([&](std::size_t g, std::span<const R> block) {
            for (const auto& entry : model.groups()[g].entries())
                out.write(model.hf_name(g, entry), block.subspan(entry.offset, entry.spec.shape.numel()));
        });
    });
    write_json_file(dir / "config.json", gpt_config_of(model).to_hf_json());
}
}  // namespace detail

template <class R, Backend B>
void write_model_files(const gpt_model<R, B>& model, const host_blocks<R>& blocks, const std::filesystem::path& dir) {
    detail::write_model_files_by_group(
        model, [&](auto&& visit) {
            for (std::size_t g = 0; g < model.group_count(); ++g) visit(g, std::span<const R>(blocks[g]));
        },
        dir);
}

// Reads config.json + model.safetensors. Tied weights: lm_head.weight, when present, must equal
// wte. Causal-mask buffers are skipped; any other unknown tensor and any missing one is an error
// naming it.
template <class R>
loaded_model<R> load_model_files(const std::filesystem::path& dir) {
    if (!std::filesystem::exists(dir / "config.json") || !std::filesystem::exists(dir / "model.safetensors"))
        throw error("'" + dir.string() + "' is not a GPT-2 checkpoint: config.json or model.safetensors is missing",
                    "pass a directory written by strata-gpt (OUT/step-N) or a Hugging Face GPT-2 directory");
    loaded_model<R> out;
    out.config = gpt_config::from_hf_json(read_json_file(dir / "config.json"), (dir / "config.json").string());
    gpt_model<R, cpu_backend> model(out.config);
    const auto file = safetensors_file::open(dir / "model.safetensors");
    std::set<std::string> used;
    std::vector<std::string> missing;
    for (std::size_t g = 0; g < model.group_count(); ++g) {
        out.blocks.emplace_back(model.groups()[g].numel(), R(0));
        for (const auto& entry : model.groups()[g].entries()) {
            const std::string name = model.hf_name(g, entry);
            const std::string key = detail::hf_key(file, name);
            if (key.empty()) {
                missing.push_back(name);
                continue;
            }
            used.insert(key);
            const auto& info = file.info(key);
            std::span<R> dst(out.blocks[g].data() + entry.offset, entry.spec.shape.numel());
            if (info.dtype == safetensors_dtype_v<R>) {
                file.copy_to<R>(key, dst, entry.spec.shape.extents());
            } else if (info.dtype == safetensors_dtype::f32) {  // e.g. float file into a double model
                std::vector<float> tmp(dst.size());
                file.copy_to<float>(key, std::span<float>(tmp), entry.spec.shape.extents());
                std::copy(tmp.begin(), tmp.end(), dst.begin());
            } else {
                throw error("'" + (dir / "model.safetensors").string() + "': tensor '" + key + "' has dtype " +
                                std::string(detail::dtype_row(info.dtype).name) + "; strata trains in FP32",
                            "convert the checkpoint to float32 (torch_dtype float32)");
            }
        }
    }
    if (!missing.empty()) {
        std::string list;
        for (auto& m : missing) list += (list.empty() ? "" : ", ") + m;
        throw error("'" + (dir / "model.safetensors").string() + "' lacks " + std::to_string(missing.size()) +
                        " tensor(s): " + list,
                    "the file does not match config.json (n_layer, n_embd, vocab_size)");
    }
    std::vector<std::string> unknown;
    for (const auto& name : file.names()) {
        if (used.count(name) || detail::is_hf_buffer(name)) continue;
        if (name == "lm_head.weight") {  // tied: must be a copy of wte
            const std::string wte_key = detail::hf_key(file, "transformer.wte.weight");
            std::vector<float> wte(file.info(wte_key).bytes.size() / sizeof(float));
            std::vector<float> head(file.info(name).bytes.size() / sizeof(float));
            file.copy_to<float>(wte_key, std::span<float>(wte));
            file.copy_to<float>(name, std::span<float>(head));
            if (wte != head)
                throw error("'" + (dir / "model.safetensors").string() +
                                "': lm_head.weight differs from transformer.wte.weight",
                            "strata's GPT ties the LM head to the token embedding; untied heads are not supported");
            continue;
        }
        unknown.push_back(name);
    }
    if (!unknown.empty()) {
        std::string list;
        for (auto& u : unknown) list += (list.empty() ? "" : ", ") + u;
        throw error("'" + (dir / "model.safetensors").string() + "' has tensor(s) a GPT-2 model does not: " + list,
                    "is this a GPT-2 (GPT2LMHeadModel) checkpoint?");
    }
    return out;
}

// A GPT-2 model's files in a checkpoint (model/model_files.hpp): model.safetensors + config.json,
// written group by group from the weights and read back into a model of the same shape.
template <class R, Backend B>
struct model_files<gpt_model<R, B>> {
    std::uint64_t bytes(const gpt_model<R, B>& model) const { return model_files_bytes(model); }

    template <WeightBlocks<R> Weights>
    void write(const gpt_model<R, B>& model, Weights& weights, const std::filesystem::path& dir) const {
        detail::write_model_files_by_group(
            model, [&](auto&& visit) { for_each_weight_block(model, weights, visit); }, dir);
    }

    template <WeightBlocks<R> Weights>
    void read(const gpt_model<R, B>& model, Weights& weights, const std::filesystem::path& dir) const {
        auto loaded = load_model_files<R>(dir);
        const gpt_config c = gpt_config_of(model);
        if (loaded.config.n_layer != c.n_layer || loaded.config.n_embd != c.n_embd || loaded.config.n_head != c.n_head ||
            loaded.config.vocab_size != c.vocab_size || loaded.config.max_seq != c.max_seq)
            throw error("checkpoint '" + dir.string() + "' holds a different model shape than the one being trained",
                        "resume with the same n_layer, n_head, n_embd, context and tokenizer",
                        {"n_layer", "n_head", "n_embd", "seq_len", "tokenizer"});
        for (std::size_t g = 0; g < loaded.blocks.size(); ++g) weights.upload(g, std::span<const R>(loaded.blocks[g]));
    }
};

}  // namespace strata
