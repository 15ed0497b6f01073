// model_files<Model>: the files a model's weights are in, the model's own customization point.
// A checkpoint (train/checkpoint.hpp) writes and reads a model's weights through it and names no
// model; a model says what its files are by specializing it, next to its definition:
//
//   template <class R, Backend B>
//   struct model_files<gpt_model<R, B>> {            // model/gpt.hpp: Hugging Face GPT-2's files
//       std::uint64_t bytes(const gpt_model<R, B>& model) const;                  // exactly what write writes
//       void write(const gpt_model<R, B>& model, WeightBlocks<R> auto& weights, const path& dir) const;
//       void read(const gpt_model<R, B>& model, WeightBlocks<R> auto& weights, const path& dir) const;
//   };
//
// write puts the files into `dir` (a checkpoint directory being assembled), taking the weights
// group by group from weights.download(g, block); read checks the files of `dir` against the
// model (shape, names) and hands the weights back group by group to weights.upload(g, block).
// Blocks are whole parameter blocks in the model's group layout. A model whose files need more
// than its layout (Llama's architecture and token ids, a LoRA run's adapter configuration) keeps
// that in the specialization's members: a checkpoint takes a model_files object, by default
// value-initialized.
//
// host_weights makes host blocks (a loaded checkpoint, an export) a WeightBlocks; a trainer's
// weights are one through train/checkpoint.hpp's trainer_weights.
#pragma once

#include <algorithm>   // std::copy, std::max
#include <concepts>    // std::same_as
#include <cstddef>     // std::size_t
#include <cstdint>     // std::uint64_t
#include <filesystem>  // std::filesystem::path
#include <span>        // std::span
#include <vector>      // std::vector

namespace strata {

// Host copies of every parameter block of a model, in the model's group layout.
template <class R>
using host_blocks = std::vector<std::vector<R>>;

// Undefined: a model has files only where it specializes model_files.
template <class Model>
struct model_files;

// The weights of a model, group by group: download(g, block) fills group g's whole parameter
// block, upload(g, block) replaces it.
template <class W, class R>
concept WeightBlocks = requires(W& w, std::size_t g, std::span<R> out, std::span<const R> in) {
    w.download(g, out);
    w.upload(g, in);
};

// Host blocks as WeightBlocks (one vector per group, the model's layout).
template <class R>
struct host_weights {
    host_blocks<R>& blocks;
    void download(std::size_t g, std::span<R> out) const { std::copy(blocks[g].begin(), blocks[g].end(), out.begin()); }
    void upload(std::size_t g, std::span<const R> in) const { blocks[g].assign(in.begin(), in.end()); }
};

// A model that has files: model_files<Model> is specialized, value-constructible, with bytes,
// write and read (host_weights stands for any WeightBlocks).
template <class Model>
concept HasModelFiles = requires(const model_files<Model>& files, const Model& model,
                                 host_weights<typename Model::value_type>& weights, const std::filesystem::path& dir) {
    model_files<Model>{};
    { files.bytes(model) } -> std::same_as<std::uint64_t>;
    files.write(model, weights, dir);
    files.read(model, weights, dir);
};

// The largest block of one kind of a model's state: whole weight blocks, or the trainable prefixes
// that gradients and moments have.
template <class Model>
std::size_t largest_block(const Model& model, bool whole) {
    std::size_t largest = 0;
    for (const auto& layout : model.groups()) largest = std::max(largest, whole ? layout.numel() : layout.trainable_numel());
    return largest;
}

// visit(g, block) for every group's whole weight block in group order, downloaded through one host
// buffer of the largest block (block is valid until visit returns): what a model_files::write
// streams to its files.
template <class Model, class Weights, class Visit>
void for_each_weight_block(const Model& model, Weights& weights, Visit&& visit) {
    using R = typename Model::value_type;
    std::vector<R> buffer(largest_block(model, /*whole=*/true));
    for (std::size_t g = 0; g < model.group_count(); ++g) {
        const std::span<R> block(buffer.data(), model.groups()[g].numel());
        weights.download(g, block);
        visit(g, std::span<const R>(block));
    }
}

}  // namespace strata
