// A GPT-2 model with LoRA adapters, assembled from strata's decoder_model: gpt2_lora_block as the
// block (base weights frozen, adapters trainable), a frozen final layernorm, frozen embeddings
// (and so the tied head). What a LoRA fine-tune of a strata-gpt (or Hugging Face GPT-2)
// checkpoint trains, resident or streamed, with either trainer:
//
//   auto model = lora::make_gpt2_lora_model<B>(base_config, lora_config);
//   tiered_trainer<float, B, lora::gpt2_lora_model<B>> t(backend, model, o);  // o.homes: the plan's
//   t.initialize(seed);                                   // adapters: A random, B = 0
//   lora::upload_base_weights(t, model, base_blocks);     // the checkpoint's weights, by name
//
// The model's groups are the GPT's (embeddings, one per block, final layernorm) and its checkpoint
// names are GPT-2's (transformer.h.<l>.attn.c_attn.weight ...), the adapters' too
// (transformer.h.<l>.attn.c_attn.lora_A): a plain GPT-2 checkpoint maps onto it by name.
#pragma once

#include "adapters.hpp"         // save_adapters_by_layer, declared_adapter_file, load_adapters, merge_adapters
#include "gpt2_lora_block.hpp"  // gpt2_lora_block, gpt2_lora_config

#include <strata/core/error.hpp>          // strata::error
#include <strata/model/decoder.hpp>       // strata::decoder_model
#include <strata/model/gpt.hpp>           // strata::gpt_config, strata::gpt_model
#include <strata/nn/layernorm_layer.hpp>  // strata::layernorm_layer
#include <strata/model/model_files.hpp>  // strata::model_files, WeightBlocks
#include <strata/train/checkpoint.hpp>    // strata::host_blocks, strata::download_blocks

#include <algorithm>   // std::copy
#include <cstddef>     // std::size_t
#include <cstdint>     // std::uint64_t
#include <filesystem>  // std::filesystem::path
#include <map>         // std::map
#include <span>        // std::span
#include <string>      // std::string
#include <utility>     // std::pair
#include <vector>      // std::vector

namespace lora {

template <strata::Backend B>
using gpt2_lora_model = strata::decoder_model<gpt2_lora_block<float, B>, strata::layernorm_layer<float, B>>;

// The LoRA model of a GPT-2 shape: everything frozen but the adapters.
template <strata::Backend B>
gpt2_lora_model<B> make_gpt2_lora_model(const strata::gpt_config& base, gpt2_lora_config lora) {
    base.validate();
    lora.n_embd = base.n_embd;
    lora.n_head = base.n_head;
    lora.n_layer = base.n_layer;
    lora.validate();
    return gpt2_lora_model<B>({.vocab_size = base.vocab_size,
                               .max_seq = base.max_seq,
                               .n_layer = base.n_layer,
                               .n_embd = base.n_embd,
                               .learned_positions = true,
                               .freeze_embeddings = true},
                              lora, strata::layernorm_config{.channels = base.n_embd, .trainable = false});
}

// Copies every tensor of a plain model's host blocks (e.g. gpt_model's layout) into the tensor of
// the same checkpoint name in `to` (a model with those names and more, e.g. the LoRA model);
// tensors of `to` the plain model does not have (the adapters) are left alone. Shapes must agree.
template <class From, class To, class R>
void copy_by_name(const From& from, const strata::host_blocks<R>& from_blocks,
                  const To& to, strata::host_blocks<R>& to_blocks) {
    std::map<std::string, std::pair<std::size_t, const strata::param_entry*>> where;
    for (std::size_t g = 0; g < from.group_count(); ++g)
        for (const auto& entry : from.groups()[g].entries()) where[from.hf_name(g, entry)] = {g, &entry};
    std::size_t copied = 0;
    for (std::size_t g = 0; g < to.group_count(); ++g)
        for (const auto& entry : to.groups()[g].entries()) {
            const auto it = where.find(to.hf_name(g, entry));
            if (it == where.end()) continue;
            const auto [fg, fs] = it->second;
            if (fs->spec.shape != entry.spec.shape)
                throw strata::error("'" + it->first + "' is " + fs->spec.shape.to_string() + " in the base model, " +
                                        entry.spec.shape.to_string() + " in the LoRA model",
                                    "build the LoRA model from the base checkpoint's config");
            const R* src = from_blocks[fg].data() + fs->offset;
            std::copy(src, src + entry.spec.shape.numel(), to_blocks[g].data() + entry.offset);
            ++copied;
        }
    if (copied != where.size())
        throw strata::error("the LoRA model has a place for " + std::to_string(copied) + " of the base model's " +
                            std::to_string(where.size()) + " tensors");
}

// copy_by_name for group g of both models (a LoRA model's group g holds its base's group g's
// tensors): copies the base tensors of `from_block` into `to_block` by name; returns how many.
template <class From, class To, class R>
std::size_t copy_group_by_name(const From& from, std::size_t g, std::span<const R> from_block, const To& to,
                               std::span<R> to_block) {
    std::size_t copied = 0;
    for (const auto& fs : from.groups()[g].entries())
        for (const auto& entry : to.groups()[g].entries()) {
            if (to.hf_name(g, entry) != from.hf_name(g, fs)) continue;
            if (fs.spec.shape != entry.spec.shape)
                throw strata::error("'" + from.hf_name(g, fs) + "' is " + fs.spec.shape.to_string() + " in the base model, " +
                                        entry.spec.shape.to_string() + " in the LoRA model",
                                    "build the LoRA model from the base checkpoint's config");
            const R* src = from_block.data() + fs.offset;
            std::copy(src, src + entry.spec.shape.numel(), to_block.data() + entry.offset);
            ++copied;
        }
    return copied;
}

// The trainer's weights after initialize(): the base checkpoint's tensors by name, the adapters
// as initialized (A random, B = 0: the model starts as the base model, bit for bit).
template <class Trainer, class Model>
void upload_base_weights(Trainer& t, const Model& model, const strata::gpt_config& base,
                         const strata::host_blocks<float>& base_blocks) {
    using kind = typename Trainer::state_kind;
    auto blocks = strata::download_blocks(t, kind::params);
    copy_by_name(strata::gpt_model<float, strata::cpu_backend>(base), base_blocks, model, blocks);
    for (std::size_t g = 0; g < blocks.size(); ++g) t.upload(kind::params, g, blocks[g]);
}

// Spans of the model's block groups (1..n_layer) of a set of host blocks, as adapters.hpp takes them.
template <class Model, class R>
std::vector<std::span<R>> block_spans(const Model& model, std::vector<std::vector<R>>& blocks) {
    std::vector<std::span<R>> out;
    for (std::size_t l = 0; l < model.block_count(); ++l) out.emplace_back(blocks[model.block_group(l)]);
    return out;
}

// The weights of the model's blocks (groups 1..n_layer, where the adapters are), one host copy
// per layer: saving or loading adapters never moves the embeddings or the final norm. `weights`:
// strata::WeightBlocks (a trainer's: strata::trainer_weights{t}).
template <class Weights, class Model>
std::vector<std::vector<float>> download_block_weights(Weights&& weights, const Model& model) {
    std::vector<std::vector<float>> blocks;
    for (std::size_t l = 0; l < model.block_count(); ++l) {
        blocks.emplace_back(model.groups()[model.block_group(l)].numel());
        weights.download(model.block_group(l), std::span<float>(blocks.back()));
    }
    return blocks;
}

// The adapters of the weights (strata::WeightBlocks, e.g. strata::trainer_weights{t}), as their
// own safetensors file (adapters.hpp's format), layer by layer through one host copy of a block.
template <class Weights, class Model>
void save_model_adapters(Weights&& weights, const Model& model, const std::filesystem::path& path) {
    const auto& layout = model.groups()[model.block_group(0)];
    std::vector<float> block(layout.numel());
    save_adapters_by_layer<float>(path, model.block_layer_config(), layout, model.block_count(), [&](std::size_t l) {
        weights.download(model.block_group(l), std::span<float>(block));
        return std::span<const float>(block);
    });
}

// The bytes save_model_adapters writes, exactly.
template <class Model>
std::uint64_t model_adapters_bytes(const Model& model) {
    return declared_adapter_file<float>(model.block_layer_config(), model.groups()[model.block_group(0)],
                                        model.block_count())
        .file_size();
}

// The adapters of `path` into the weights (the base weights stay as they are).
template <class Weights, class Model>
void load_model_adapters(Weights&& weights, const Model& model, const std::filesystem::path& path) {
    auto blocks = download_block_weights(weights, model);
    const std::vector<std::span<float>> spans(blocks.begin(), blocks.end());
    load_adapters<float>(path, model.block_layer_config(), model.groups()[model.block_group(0)], spans);
    for (std::size_t l = 0; l < model.block_count(); ++l)
        weights.upload(model.block_group(l), std::span<const float>(blocks[l]));
}

// A LoRA checkpoint's file of the adapters (the base is not saved: it does not change).
inline constexpr const char* adapters_file = "adapters.safetensors";

// The files of a LoRA model (strata::model_files, below): its adapters alone, adapters_file.
template <class Model>
struct adapter_files {
    std::uint64_t bytes(const Model& model) const { return model_adapters_bytes(model); }
    template <strata::WeightBlocks<float> Weights>
    void write(const Model& model, Weights& weights, const std::filesystem::path& dir) const {
        save_model_adapters(weights, model, dir / adapters_file);
    }
    template <strata::WeightBlocks<float> Weights>
    void read(const Model& model, Weights& weights, const std::filesystem::path& dir) const {
        load_model_adapters(weights, model, dir / adapters_file);
    }
};

// The merged plain GPT-2 (gpt_model<float>(base)'s host blocks): W + (alpha / r) A B in every
// adapted projection, every other tensor as the base has it.
inline strata::host_blocks<float> merged_blocks(const strata::gpt_config& base, const gpt2_lora_config& lora,
                                                const strata::host_blocks<float>& base_blocks,
                                                const std::filesystem::path& adapters) {
    const auto model = make_gpt2_lora_model<strata::cpu_backend>(base, lora);
    const strata::gpt_model<float, strata::cpu_backend> plain(base);
    strata::host_blocks<float> blocks;
    for (const auto& g : model.groups()) blocks.emplace_back(g.numel(), 0.0f);
    copy_by_name(plain, base_blocks, model, blocks);
    const auto spans = block_spans(model, blocks);
    load_adapters<float>(adapters, model.block_layer_config(), model.groups()[model.block_group(0)], spans);
    strata::host_blocks<float> merged = base_blocks;
    for (std::size_t l = 0; l < base.n_layer; ++l) {
        const std::size_t g = model.block_group(l);
        merge_adapters<float>(model.block_layer_config(), model.groups()[g], blocks[g], plain.groups()[g], merged[g]);
    }
    return merged;
}

// The LoRA configuration an adapter file was saved with.
inline gpt2_lora_config config_of(const std::filesystem::path& adapters) {
    const adapter_file_info info = read_adapter_info(adapters);
    return {.n_embd = info.n_embd, .n_layer = info.n_layer, .rank = info.rank, .alpha = info.alpha, .targets = info.targets};
}

}  // namespace lora

// A GPT-2 LoRA model's checkpoint files (strata/model/model_files.hpp): the adapters alone; the
// base is the run's --init-from, which export merges them into.
template <strata::Backend B>
struct strata::model_files<lora::gpt2_lora_model<B>> : lora::adapter_files<lora::gpt2_lora_model<B>> {};
