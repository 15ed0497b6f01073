// LoRA adapters of a GPT-2 model as their own file, and merging them into the base weights. The
// file's writer and reader serve any LoRA config with an adapter_naming (the Llama block's too).
//
// Every function takes host copies of the blocks' parameter blocks (std::span) and the layout
// that places the tensors in them (strata::param_layout), nothing of a trainer: adapters can be
// saved from any loop that has the blocks on the host, and merged for export.
//
// (a) save_adapters: the adapters of n_layer gpt2_lora_blocks as one safetensors file, written
//     atomically (safetensors_writer::write: the file holds its old content or the new one, never
//     part of it). Tensors "transformer.h.<l>.<projection>.lora_A" (in, r) and ".lora_B" (r, out),
//     in strata's (in, out) orientation (PEFT stores lora_A.weight (r, in) and lora_B.weight
//     (out, r): transpose to convert), F32 for float blocks, F64 for double. Metadata (text):
//       format "strata.lora.gpt2/1", rank, alpha, targets ("attn.c_attn,mlp.c_fc"), n_layer, n_embd.
// (b) read_adapter_info / load_adapters: the metadata alone (to build the matching config), and
//     the tensors into host blocks; every mismatch (another rank, alpha, target set, layer count or
//     width, a missing, extra or misshapen tensor, a file that is not an adapter file) is a
//     strata::error naming the file, what differs and what to do.
// (c) merge_adapters: W + (alpha / r) A B for every targeted projection, written with the other
//     base tensors into a plain GPT-2 block (gpt_block_params layout): a merged model that loads
//     as a plain GPT-2 checkpoint and runs without adapters.
#pragma once

#include "gpt2_lora_block.hpp"  // gpt2_lora_config, gpt2_projection_shape, gpt2_projections

#include <strata/core/error.hpp>           // strata::error
#include <strata/io/safetensors.hpp>       // strata::safetensors_writer, strata::safetensors_file
#include <strata/tensor/param_layout.hpp>  // strata::param_layout, strata::param_entry

#include <algorithm>    // std::copy, std::min
#include <charconv>     // std::to_chars, std::from_chars
#include <cstddef>      // std::size_t
#include <filesystem>   // std::filesystem::path
#include <set>          // std::set
#include <span>         // std::span
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace lora {

inline constexpr std::string_view adapter_file_format = "strata.lora.gpt2/1";

// What an adapter file records of a LoRA config beyond rank, alpha and ordered_targets(): its
// format tag, the checkpoint prefix of layer l's tensors and the model's width. Specialized per
// block (the Llama block's: examples/llama/llama_lora_model.hpp), so one writer and one reader
// serve every LoRA model.
template <class Config>
struct adapter_naming;

template <>
struct adapter_naming<gpt2_lora_config> {
    static constexpr std::string_view format = adapter_file_format;
    static constexpr std::string_view layer_prefix = "transformer.h.";
    static std::size_t n_embd(const gpt2_lora_config& c) { return c.n_embd; }
};

// What an adapter file says about its adapters (its metadata), enough to build the model's config.
struct adapter_file_info {
    std::size_t rank = 0;
    double alpha = 0.0;
    std::vector<std::string> targets;  // in block order
    std::size_t n_layer = 0;
    std::size_t n_embd = 0;
};

// "<layer prefix><layer>.<projection>.<matrix>", matrix "lora_A" or "lora_B"; GPT-2's by default
// ("transformer.h.<layer>...").
template <class Config = gpt2_lora_config>
std::string adapter_tensor_name(std::size_t layer, std::string_view projection, std::string_view matrix) {
    return std::string(adapter_naming<Config>::layer_prefix) + std::to_string(layer) + "." + std::string(projection) +
           "." + std::string(matrix);
}

namespace detail {

// Shortest text that reads back as the same double.
inline std::string exact_text(double value) {
    char text[32];
    const auto [end, ec] = std::to_chars(text, text + sizeof(text), value);
    return std::string(text, end);
}

inline std::string joined(const std::vector<std::string>& names) {
    std::string text;
    for (const auto& n : names) text += (text.empty() ? "" : ",") + n;
    return text;
}

// Blocks as a caller holds them, checked against the layout before anything is read or written.
template <class Config, class Span>
void check_blocks(std::string_view what, const Config& c, const strata::param_layout& layout,
                  std::span<const Span> blocks) {
    c.validate();
    if (blocks.empty())
        throw strata::error(std::string(what) + ": no blocks given", "pass one host block per layer of the model");
    for (std::size_t l = 0; l < blocks.size(); ++l)
        if (blocks[l].size() < layout.numel())
            throw strata::error(std::string(what) + ": block " + std::to_string(l) + " holds " +
                                    std::to_string(blocks[l].size()) + " elements, its layout " +
                                    std::to_string(layout.numel()),
                                "pass whole parameter blocks laid out by param_layout::of<R>(gpt2_lora_block::params)");
    for (const std::string& proj : c.targets)
        for (std::string_view m : {"lora_A", "lora_B"}) {
            const std::string name = proj + "." + std::string(m);
            bool found = false;
            for (const auto& entry : layout.entries()) found = found || entry.spec.name == name;
            if (!found)
                throw strata::error(std::string(what) + ": the layout has no tensor '" + name + "' for target " + proj,
                                    "build the layout from gpt2_lora_block::params of the same config");
        }
}

template <class R>
std::span<R> tensor_of(std::span<R> block, const strata::param_entry& entry) {
    return block.subspan(entry.offset, entry.spec.shape.numel());
}

}  // namespace detail

// The adapter file of n_layer blocks, declared (metadata, tensor names and shapes): what
// save_adapters writes, and its exact size (file_size()) before any block exists.
template <class R, class Config>
strata::safetensors_writer declared_adapter_file(const Config& c, const strata::param_layout& layout,
                                                 std::size_t n_layer) {
    c.validate();
    const std::vector<std::string> targets = c.ordered_targets();
    strata::safetensors_writer writer;
    writer.set_metadata("format", std::string(adapter_naming<Config>::format));
    writer.set_metadata("rank", std::to_string(c.rank));
    writer.set_metadata("alpha", detail::exact_text(c.alpha));
    writer.set_metadata("targets", detail::joined(targets));
    writer.set_metadata("n_layer", std::to_string(n_layer));
    writer.set_metadata("n_embd", std::to_string(adapter_naming<Config>::n_embd(c)));
    for (std::size_t l = 0; l < n_layer; ++l)
        for (const std::string& proj : targets)
            for (std::string_view m : {"lora_A", "lora_B"})
                writer.declare<R>(adapter_tensor_name<Config>(l, proj, m), layout.find(proj + "." + std::string(m)).spec.shape.extents());
    return writer;
}

// (a) The adapters of n_layer blocks into one safetensors file at `path`, atomically; block_of(l)
// gives layer l's whole block (laid out by `layout`, which is param_layout::of<R>(
// gpt2_lora_block<R, B>::params(c))), valid until the next call: a trainer's weights stream
// through one buffer.
template <class R, class Config, class BlockOf>
void save_adapters_by_layer(const std::filesystem::path& path, const Config& c,
                            const strata::param_layout& layout, std::size_t n_layer, BlockOf&& block_of) {
    const std::vector<std::string> targets = c.ordered_targets();
    declared_adapter_file<R>(c, layout, n_layer).write_streamed(path, [&](strata::safetensors_writer::stream& out) {
        for (std::size_t l = 0; l < n_layer; ++l) {
            const std::span<const R> block = block_of(l);
            const std::span<const std::span<const R>> one(&block, 1);
            detail::check_blocks("save_adapters", c, layout, one);
            for (const std::string& proj : targets)
                for (std::string_view m : {"lora_A", "lora_B"})
                    out.write(adapter_tensor_name<Config>(l, proj, m),
                              detail::tensor_of(block, layout.find(proj + "." + std::string(m))));
        }
    });
}

// (a) The same from host copies of blocks[0..n_layer).
template <class R, class Config>
void save_adapters(const std::filesystem::path& path, const Config& c, const strata::param_layout& layout,
                   std::span<const std::span<const R>> blocks) {
    detail::check_blocks("save_adapters", c, layout, blocks);
    save_adapters_by_layer<R>(path, c, layout, blocks.size(), [&](std::size_t l) { return blocks[l]; });
}

// (b) The metadata of an adapter file; a file that is not one (of `format`) is a strata::error.
inline adapter_file_info read_adapter_info(const strata::safetensors_file& file,
                                           std::string_view format_expected = adapter_file_format) {
    const auto& meta = file.metadata();
    const auto text = [&](const std::string& key) -> const std::string& {
        const auto it = meta.find(key);
        if (it == meta.end())
            throw strata::error("LoRA adapters: '" + file.source() + "' has no '" + key + "' in its metadata",
                                "it is not an adapter file written by save_adapters (format " +
                                    std::string(format_expected) + ")");
        return it->second;
    };
    const std::string& format = text("format");
    if (format != format_expected)
        throw strata::error("LoRA adapters: '" + file.source() + "' has format '" + format + "', expected '" +
                                std::string(format_expected) + "'",
                            "write the adapters with this version of save_adapters");
    const auto number = [&]<class T>(const std::string& key, T& value) {
        const std::string& t = text(key);
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
        if (ec != std::errc() || end != t.data() + t.size())
            throw strata::error("LoRA adapters: '" + file.source() + "': metadata '" + key + "' = '" + t +
                                    "' is not a number",
                                "the file is corrupt; save the adapters again");
    };
    adapter_file_info info;
    number("rank", info.rank);
    number("alpha", info.alpha);
    number("n_layer", info.n_layer);
    number("n_embd", info.n_embd);
    const std::string& targets = text("targets");
    for (std::size_t start = 0; start < targets.size();) {
        const std::size_t comma = std::min(targets.find(',', start), targets.size());
        info.targets.push_back(targets.substr(start, comma - start));
        start = comma + 1;
    }
    return info;
}

inline adapter_file_info read_adapter_info(const std::filesystem::path& path,
                                           std::string_view format_expected = adapter_file_format) {
    return read_adapter_info(strata::safetensors_file::open(path), format_expected);
}

// (b) The adapters of the file at `path` into blocks[0..n_layer) (host copies laid out by
// `layout`, as for save_adapters). The file must have been written for exactly this
// configuration (rank, alpha, targets, n_embd) and this number of blocks; base tensors are not
// touched. Nothing is written into the blocks unless every check passes.
template <class R, class Config>
void load_adapters(const std::filesystem::path& path, const Config& c, const strata::param_layout& layout,
                   std::span<const std::span<R>> blocks) {
    detail::check_blocks("load_adapters", c, layout, blocks);
    const strata::safetensors_file file = strata::safetensors_file::open(path);
    const adapter_file_info info = read_adapter_info(file, adapter_naming<Config>::format);
    const std::string from = "LoRA adapters: '" + file.source() + "' ";
    const std::string hint = "build the config from read_adapter_info(path), or load the file the model was "
                             "trained with";
    if (info.rank != c.rank)
        throw strata::error(from + "have rank " + std::to_string(info.rank) + ", the model's adapters rank " +
                                std::to_string(c.rank),
                            hint);
    if (info.alpha != c.alpha)
        throw strata::error(from + "have alpha " + detail::exact_text(info.alpha) + ", the model " +
                                detail::exact_text(c.alpha),
                            hint);
    const std::vector<std::string> targets = c.ordered_targets();
    if (info.targets != targets)
        throw strata::error(from + "target [" + detail::joined(info.targets) + "], the model [" +
                                detail::joined(targets) + "]",
                            hint);
    if (info.n_embd != adapter_naming<Config>::n_embd(c))
        throw strata::error(from + "are for n_embd " + std::to_string(info.n_embd) + ", the model has " +
                                std::to_string(adapter_naming<Config>::n_embd(c)),
                            hint);
    if (info.n_layer != blocks.size())
        throw strata::error(from + "hold " + std::to_string(info.n_layer) + " layers, " +
                                std::to_string(blocks.size()) + " blocks were given",
                            "pass one host block per layer of the model the adapters were trained on");

    // Every tensor present with its shape and dtype, and nothing else, before anything is copied.
    std::set<std::string> expected;
    for (std::size_t l = 0; l < blocks.size(); ++l)
        for (const std::string& proj : targets)
            for (std::string_view m : {"lora_A", "lora_B"}) {
                const std::string name = adapter_tensor_name<Config>(l, proj, m);
                expected.insert(name);
                if (!file.contains(name))
                    throw strata::error(from + "has no tensor '" + name + "'",
                                        "the file is incomplete or was not written by save_adapters; save it again");
                const std::vector<std::size_t>& want = layout.find(proj + "." + std::string(m)).spec.shape.extents();
                const auto& t = file.info(name);
                if (t.shape != want)
                    throw strata::error(from + "tensor '" + name + "' has shape " +
                                            strata::detail::shape_string(t.shape) + ", the model expects " +
                                            strata::detail::shape_string(want),
                                        hint);
                if (t.dtype != strata::safetensors_dtype_v<R>)
                    throw strata::error(from + "tensor '" + name + "' is " + std::string(strata::to_string(t.dtype)) +
                                            ", the blocks hold " +
                                            std::string(strata::to_string(strata::safetensors_dtype_v<R>)),
                                        "load into blocks of the element type the adapters were saved from");
            }
    for (const std::string& name : file.names())
        if (!expected.contains(name))
            throw strata::error(from + "holds a tensor '" + name + "' that the model has no place for", hint);

    for (std::size_t l = 0; l < blocks.size(); ++l)
        for (const std::string& proj : targets)
            for (std::string_view m : {"lora_A", "lora_B"})
                file.copy_to<R>(adapter_tensor_name<Config>(l, proj, m),
                                detail::tensor_of(blocks[l], layout.find(proj + "." + std::string(m))));
}

// (c) The merged plain GPT-2 block: every base tensor of `lora_block` (laid out by `lora_layout`,
// as for save_adapters) copied into `plain_block` (laid out by `plain_layout`, e.g.
// param_layout::of<R>(strata::gpt_block_params(c.base()))), and for each targeted projection
// W += (alpha / r) A B, summed in double and rounded once. The plain block's gaps are left as they
// are (zero in a fresh block).
template <class R>
void merge_adapters(const gpt2_lora_config& c, const strata::param_layout& lora_layout, std::span<const R> lora_block,
                    const strata::param_layout& plain_layout, std::span<R> plain_block) {
    detail::check_blocks("merge_adapters", c, lora_layout, std::span<const std::span<const R>>(&lora_block, 1));
    if (plain_block.size() < plain_layout.numel())
        throw strata::error("merge_adapters: the plain block holds " + std::to_string(plain_block.size()) +
                                " elements, its layout " + std::to_string(plain_layout.numel()),
                            "pass a whole block laid out by param_layout::of<R>(gpt_block_params(config.base()))");
    for (const auto& to : plain_layout.entries()) {
        const strata::param_entry& from = lora_layout.find(to.spec.name);
        if (from.spec.shape != to.spec.shape)
            throw strata::error("merge_adapters: '" + to.spec.name + "' is " + to.spec.shape.to_string() +
                                    " in the plain block, " + from.spec.shape.to_string() + " in the LoRA block",
                                "build both layouts for the same n_embd");
        const auto src = detail::tensor_of(lora_block, from);
        std::copy(src.begin(), src.end(), detail::tensor_of(plain_block, to).begin());
    }
    const std::size_t r = c.rank;
    const double scaling = c.scaling();
    for (const std::string& proj : c.ordered_targets()) {
        const projection_shape shape = gpt2_projection_shape(proj, c.n_embd);
        const auto W0 = detail::tensor_of(lora_block, lora_layout.find(proj + ".weight"));
        const auto A = detail::tensor_of(lora_block, lora_layout.find(proj + ".lora_A"));  // (in, r)
        const auto B = detail::tensor_of(lora_block, lora_layout.find(proj + ".lora_B"));  // (r, out)
        const auto W = detail::tensor_of(plain_block, plain_layout.find(proj + ".weight"));  // (in, out)
        for (std::size_t i = 0; i < shape.in; ++i)
            for (std::size_t j = 0; j < shape.out; ++j) {
                double ab = 0.0;
                for (std::size_t k = 0; k < r; ++k) ab += double(A[i * r + k]) * double(B[k * shape.out + j]);
                W[i * shape.out + j] = static_cast<R>(double(W0[i * shape.out + j]) + scaling * ab);
            }
    }
}

}  // namespace lora
