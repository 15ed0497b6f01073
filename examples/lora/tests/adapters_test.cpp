// Adapter files and merging (adapters.hpp): a save/load round trip is bitwise and leaves the base
// alone; every mismatch between a file and the model is a strata::error that says what differs;
// the merged plain GPT-2 block computes what the adapted block computes.
#include "../adapters.hpp"         // lora::save_adapters, load_adapters, read_adapter_info, merge_adapters
#include "../gpt2_lora_block.hpp"  // lora::gpt2_lora_block
#include "io/scratch_dir.hpp"      // strata::test::scratch_dir

#include <strata/io/safetensors.hpp>              // strata::safetensors_file, strata::safetensors_writer
#include <strata/kernels/cpu/gradient_check.hpp>  // strata::kernels::cpu::random_vector
#include <strata/nn/cpu_ops.hpp>                  // ops<cpu_backend>
#include <strata/nn/gpt2_block.hpp>               // strata::gpt2_block
#include <strata/testing/layer_harness.hpp>      // strata::testing::forward_output

#include <doctest/doctest.h>  // TEST_CASE, CHECK, CHECK_THROWS_WITH_AS

#include <algorithm>   // std::copy, std::fill_n, std::max
#include <cmath>       // std::abs
#include <cstddef>     // std::size_t
#include <cstdint>     // std::uint32_t
#include <cstring>     // std::memcmp
#include <filesystem>  // std::filesystem::path, std::filesystem::resize_file
#include <functional>  // std::function
#include <span>        // std::span
#include <string>      // std::string
#include <vector>      // std::vector

namespace adapters_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using lora::gpt2_lora_block;
using lora::gpt2_lora_config;
using strata::test::scratch_dir;
using block_type = gpt2_lora_block<float, strata::cpu_backend>;

const gpt2_lora_config config{
    .n_embd = 6, .n_head = 2, .rank = 2, .alpha = 0.1, .targets = {"mlp.c_proj", "attn.c_attn"}};
constexpr std::size_t n_layer = 2, B = 2, T = 5;

// Host blocks of an adapted model: random base, random adapters (B != 0, so that they matter).
template <class R = float>
std::vector<std::vector<R>> random_blocks(const gpt2_lora_config& c, std::size_t layers, std::uint32_t seed) {
    const auto layout = strata::param_layout::of<R>(gpt2_lora_block<R, strata::cpu_backend>::params(c));
    std::vector<std::vector<R>> blocks;
    for (std::size_t l = 0; l < layers; ++l) {
        std::vector<R> block(layout.numel(), R(0));
        std::uint32_t k = 0;
        for (const auto& entry : layout.entries()) {
            const auto v = strata::kernels::cpu::random_vector<R>(entry.spec.shape.numel(), seed + 97 * l + ++k, -0.5, 0.5);
            std::copy(v.begin(), v.end(), block.begin() + static_cast<std::ptrdiff_t>(entry.offset));
        }
        blocks.push_back(std::move(block));
    }
    return blocks;
}

template <class R>
std::vector<std::span<const R>> const_spans(const std::vector<std::vector<R>>& blocks) {
    return {blocks.begin(), blocks.end()};
}
template <class R>
std::vector<std::span<R>> spans(std::vector<std::vector<R>>& blocks) {
    return {blocks.begin(), blocks.end()};
}

const strata::param_layout layout = strata::param_layout::of<float>(block_type::params(config));

void save(const std::filesystem::path& path, const std::vector<std::vector<float>>& blocks,
          const gpt2_lora_config& c = config) {
    const auto l = strata::param_layout::of<float>(block_type::params(c));
    lora::save_adapters<float>(path, c, l, const_spans(blocks));
}

void load(const std::filesystem::path& path, std::vector<std::vector<float>>& blocks,
          const gpt2_lora_config& c = config) {
    const auto l = strata::param_layout::of<float>(block_type::params(c));
    lora::load_adapters<float>(path, c, l, spans(blocks));
}

// A copy of the adapter file at `from` through `edit(name, shape)` (false drops the tensor); with
// `metadata` false, without the file's metadata.
void rewrite(const std::filesystem::path& from, const std::filesystem::path& to,
             const std::function<bool(const std::string&, std::vector<std::size_t>&)>& edit, bool metadata = true) {
    const auto file = strata::safetensors_file::open(from);
    strata::safetensors_writer writer;
    if (metadata)
        for (const auto& [key, value] : file.metadata()) writer.set_metadata(key, value);
    for (const auto& name : file.names()) {
        const auto& info = file.info(name);
        auto shape = info.shape;
        if (edit(name, shape)) writer.add(name, info.dtype, shape, info.bytes);
    }
    writer.write(to);
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);  // memcmp of null is UB
}

std::span<const float> tensor(const std::vector<float>& block, const std::string& name) {
    const auto& entry = layout.find(name);
    return std::span<const float>(block).subspan(entry.offset, entry.spec.shape.numel());
}

TEST_CASE("adapters: save then load gives the adapters back bitwise and leaves the base alone") {
    scratch_dir dir;
    const auto trained = random_blocks(config, n_layer, 1);
    save(dir / "adapters.safetensors", trained);

    const auto info = lora::read_adapter_info(dir / "adapters.safetensors");
    CHECK(info.rank == 2);
    CHECK(info.alpha == 0.1);  // exactly: the text reads back as the same double
    CHECK(info.targets == std::vector<std::string>{"attn.c_attn", "mlp.c_proj"});  // block order
    CHECK(info.n_layer == n_layer);
    CHECK(info.n_embd == 6);
    const auto file = strata::safetensors_file::open(dir / "adapters.safetensors");
    CHECK(file.size() == n_layer * 2 * 2);
    CHECK(file.info("transformer.h.1.attn.c_attn.lora_A").shape == std::vector<std::size_t>{6, 2});
    CHECK(file.info("transformer.h.0.mlp.c_proj.lora_B").shape == std::vector<std::size_t>{2, 6});

    auto fresh = random_blocks(config, n_layer, 2);  // another base: load must not touch it
    const auto before = fresh;
    load(dir / "adapters.safetensors", fresh);
    for (std::size_t l = 0; l < n_layer; ++l)
        for (const auto& entry : layout.entries()) {
            CAPTURE(l);
            CAPTURE(entry.spec.name);
            CHECK(same_bits(tensor(fresh[l], entry.spec.name),
                            tensor(entry.spec.trainable ? trained[l] : before[l], entry.spec.name)));
        }
    CHECK(dir.list() == std::vector<std::string>{"adapters.safetensors"});  // no temporary left behind
}

TEST_CASE("adapters: a file for another configuration is refused, saying what differs") {
    scratch_dir dir;
    const auto path = dir / "adapters.safetensors";
    save(path, random_blocks(config, n_layer, 1));

    auto other = config;
    other.rank = 4;
    auto blocks = random_blocks(other, n_layer, 3);
    CHECK_THROWS_WITH_AS(load(path, blocks, other), doctest::Contains("have rank 2, the model's adapters rank 4"),
                         strata::error);
    other = config;
    other.alpha = 0.2;
    blocks = random_blocks(other, n_layer, 3);
    CHECK_THROWS_WITH_AS(load(path, blocks, other), doctest::Contains("have alpha 0.1, the model 0.2"), strata::error);
    other = config;
    other.targets = {"attn.c_attn"};
    blocks = random_blocks(other, n_layer, 3);
    CHECK_THROWS_WITH_AS(load(path, blocks, other),
                         doctest::Contains("target [attn.c_attn,mlp.c_proj], the model [attn.c_attn]"), strata::error);
    other = config;
    other.n_embd = 8;
    blocks = random_blocks(other, n_layer, 3);
    CHECK_THROWS_WITH_AS(load(path, blocks, other), doctest::Contains("are for n_embd 6, the model has 8"),
                         strata::error);
    blocks = random_blocks(config, 3, 3);
    CHECK_THROWS_WITH_AS(load(path, blocks), doctest::Contains("hold 2 layers, 3 blocks were given"), strata::error);
    auto doubles = random_blocks<double>(config, n_layer, 3);
    const auto double_layout = strata::param_layout::of<double>(gpt2_lora_block<double, strata::cpu_backend>::params(config));
    CHECK_THROWS_WITH_AS(lora::load_adapters<double>(path, config, double_layout, spans(doubles)),
                         doctest::Contains("is F32, the blocks hold F64"), strata::error);
}

TEST_CASE("adapters: a missing, misshapen or extra tensor is refused, and nothing is loaded") {
    scratch_dir dir;
    const auto good = dir / "good.safetensors";
    save(good, random_blocks(config, n_layer, 1));
    auto blocks = random_blocks(config, n_layer, 5);
    const auto before = blocks;

    rewrite(good, dir / "missing.safetensors",
            [](const std::string& name, auto&) { return name != "transformer.h.1.mlp.c_proj.lora_B"; });
    CHECK_THROWS_WITH_AS(load(dir / "missing.safetensors", blocks),
                         doctest::Contains("has no tensor 'transformer.h.1.mlp.c_proj.lora_B'"), strata::error);

    rewrite(good, dir / "transposed.safetensors", [](const std::string& name, std::vector<std::size_t>& shape) {
        if (name == "transformer.h.0.attn.c_attn.lora_B") std::swap(shape[0], shape[1]);  // (3C, r): PEFT's orientation
        return true;
    });
    CHECK_THROWS_WITH_AS(load(dir / "transposed.safetensors", blocks),
                         doctest::Contains("'transformer.h.0.attn.c_attn.lora_B' has shape [18, 2], the model "
                                           "expects [2, 18]"),
                         strata::error);
    CHECK(blocks == before);  // checked before anything is copied

    {
        const auto file = strata::safetensors_file::open(good);
        strata::safetensors_writer writer;
        for (const auto& [key, value] : file.metadata()) writer.set_metadata(key, value);
        for (const auto& name : file.names()) writer.add(name, file.info(name).dtype, file.info(name).shape, file.bytes(name));
        writer.add("transformer.h.0.mlp.c_fc.lora_A", {6, 2}, std::vector<float>(12, 1.0f));
        writer.write(dir / "extra.safetensors");
    }
    CHECK_THROWS_WITH_AS(load(dir / "extra.safetensors", blocks),
                         doctest::Contains("holds a tensor 'transformer.h.0.mlp.c_fc.lora_A' that the model has no "
                                           "place for"),
                         strata::error);
    CHECK(blocks == before);
}

TEST_CASE("adapters: a file that is not an adapter file, or is corrupt, is a clear strata::error") {
    scratch_dir dir;
    const auto good = dir / "good.safetensors";
    save(good, random_blocks(config, n_layer, 1));
    auto blocks = random_blocks(config, n_layer, 5);

    rewrite(good, dir / "plain.safetensors", [](const std::string&, auto&) { return true; }, false);
    CHECK_THROWS_WITH_AS(load(dir / "plain.safetensors", blocks),
                         doctest::Contains("has no 'format' in its metadata (hint: it is not an adapter file"),
                         strata::error);

    std::filesystem::copy_file(good, dir / "truncated.safetensors");
    std::filesystem::resize_file(dir / "truncated.safetensors", std::filesystem::file_size(good) - 5);
    CHECK_THROWS_WITH_AS(load(dir / "truncated.safetensors", blocks), doctest::Contains("truncated.safetensors"),
                         strata::error);

    CHECK_THROWS_AS(load(dir / "absent.safetensors", blocks), strata::error);
}

TEST_CASE("adapters: the merged plain GPT-2 block computes what the adapted block computes") {
    auto c = config;
    c.alpha = 4.0;  // alpha / r = 2: the adapters change the output visibly
    const auto blocks = random_blocks(c, 1, 11);
    const auto& adapted = blocks[0];
    const auto plain_layout = strata::param_layout::of<float>(strata::gpt_block_params(c.base()));
    std::vector<float> merged(plain_layout.numel(), 0.0f);
    lora::merge_adapters<float>(c, layout, adapted, plain_layout, merged);

    // untargeted tensors copied bitwise; targeted weights W + (alpha / r) A B
    for (const auto& entry : plain_layout.entries()) {
        const std::span<const float> got(merged.data() + entry.offset, entry.spec.shape.numel());
        if (entry.spec.name != "attn.c_attn.weight" && entry.spec.name != "mlp.c_proj.weight") {
            CHECK_MESSAGE(same_bits(got, tensor(adapted, entry.spec.name)), entry.spec.name);
            continue;
        }
        const std::string proj = entry.spec.name.substr(0, entry.spec.name.size() - std::string(".weight").size());
        const auto W = tensor(adapted, entry.spec.name), A = tensor(adapted, proj + ".lora_A"),
                   Bm = tensor(adapted, proj + ".lora_B");
        const std::size_t in = entry.spec.shape[0], out = entry.spec.shape[1];
        double worst = 0.0;
        for (std::size_t i = 0; i < in; ++i)
            for (std::size_t j = 0; j < out; ++j) {
                const double ab = double(A[i * 2]) * Bm[j] + double(A[i * 2 + 1]) * Bm[out + j];
                worst = std::max(worst, std::abs(got[i * out + j] - (W[i * out + j] + 2.0 * ab)));
            }
        CHECK_MESSAGE(worst < 1e-6, entry.spec.name);
    }

    // The base alone (B = 0 merges to the base weights, bitwise), for the size of the adapters' effect.
    auto unadapted = adapted;
    for (const char* name : {"attn.c_attn.lora_B", "mlp.c_proj.lora_B"}) {
        const auto& entry = layout.find(name);
        std::fill_n(unadapted.begin() + static_cast<std::ptrdiff_t>(entry.offset), entry.spec.shape.numel(), 0.0f);
    }
    std::vector<float> base(plain_layout.numel(), 0.0f);
    lora::merge_adapters<float>(c, layout, unadapted, plain_layout, base);
    CHECK(same_bits(std::span<const float>(base.data() + plain_layout.find("attn.c_attn.weight").offset, 6 * 18),
                    tensor(adapted, "attn.c_attn.weight")));

    const auto x = strata::kernels::cpu::random_vector<float>(B * T * c.n_embd, 13);
    const auto run_plain = [&](const std::vector<float>& block) {
        return strata::testing::forward_output<strata::gpt2_block>(c.base(), std::span<const float>(block),
                                                                   std::span<const float>(x), B, T);
    };
    const auto y = strata::testing::forward_output<gpt2_lora_block>(c, std::span<const float>(adapted),
                                                                    std::span<const float>(x), B, T);
    const auto y_merged = run_plain(merged), y_base = run_plain(base);
    double worst = 0.0, effect = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) {
        worst = std::max(worst, std::abs(double(y[i]) - y_merged[i]));
        effect = std::max(effect, std::abs(double(y[i]) - y_base[i]));
        scale = std::max(scale, std::abs(double(y[i])));
    }
    MESSAGE("merged vs adapted: largest difference " << worst << "; the adapters change the output by up to "
                                                     << effect << " (largest output " << scale << ")");
    // Only rounding differs (the adapters' term summed apart vs folded into W): ~1e-7 relative.
    CHECK(worst <= 1e-5 * scale);
    CHECK(effect > 1e-2 * scale);
}

}  // namespace

}  // namespace adapters_test
