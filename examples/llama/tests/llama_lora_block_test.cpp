// llama_lora_block against the layer contract (FP64 finite differences of every adapter and the
// input with the base frozen, checkpointed == plain bitwise, frozen gradients never written) for
// several target sets, and against llama_block: freshly initialized (B = 0) it computes the plain
// block's output bit for bit.
#include "../llama_lora_block.hpp"  // llama::llama_lora_block, llama_lora_config, parse_lora_targets
#ifdef STRATA_TESTS_WITH_CUDA
#include "../llama_ops_cuda.hpp"  // llama_ops<cuda_backend> (definitions: strata_llama_cuda_ops)
#endif
#include "support/backends.hpp"     // STRATA_TEST_BACKENDS

#include <strata/kernels/cpu/gradient_check.hpp>  // strata::kernels::cpu::random_vector
#include <strata/nn/layer.hpp>                    // strata::check_layer
#include <strata/testing/layer_harness.hpp>      // strata::testing::check_*, forward_output

#include <doctest/doctest.h>  // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE, MESSAGE

#include <cstddef>  // std::size_t
#include <cstring>  // std::memcmp
#include <span>     // std::span
#include <string>   // std::string
#include <vector>   // std::vector

namespace llama_lora_block_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using llama::llama_block;
using llama::llama_lora_block;
using llama::llama_lora_config;
namespace st = strata::testing;

static_assert(strata::check_layer<llama_lora_block<float, strata::cpu_backend>>());
static_assert(strata::check_layer<llama_lora_block<double, strata::cpu_backend>>());
static_assert(strata::check_recomputes_part<llama_lora_block<float, strata::cpu_backend>>());  // selective recompute

// C = 8, 4 query heads of 2 sharing 2 key/value heads, q/k/v biases (Qwen2), hidden 12, r = 2,
// alpha / r = 1.5: every tensor small enough for finite differences of every element.
llama_lora_config tiny(std::vector<std::string> targets) {
    return {.base = {.n_embd = 8, .n_head = 4, .hidden = 12, .n_kv_head = 2, .qkv_bias = true},
            .rank = 2,
            .alpha = 3.0,
            .targets = std::move(targets)};
}
const llama_lora_config all_five = tiny(llama::parse_lora_targets("qkv_proj,o_proj,gate_proj,up_proj,down_proj"));
const llama_lora_config down_only = tiny({"mlp.down_proj"});  // backward stops below the MLP when dinp is null
const llama_lora_config frozen = tiny({});                    // a wholly frozen plain block
constexpr std::size_t B = 2, T = 5;

TEST_CASE("llama_lora_block: llama_block's tensors, frozen; adapters <projection>.lora_A/B lead the block") {
    const auto specs = llama_lora_block<float, strata::cpu_backend>::params(all_five);
    const auto plain = llama_block<float, strata::cpu_backend>::params(all_five.base);
    REQUIRE(specs.size() == plain.size() + 10);
    for (std::size_t i = 0; i < plain.size(); ++i) {
        CHECK(specs[i].name == plain[i].name);
        CHECK(specs[i].shape == plain[i].shape);
        CHECK_FALSE(specs[i].trainable);
    }
    const auto layout = strata::param_layout::of<float>(specs);
    CHECK(layout.find("self_attn.qkv_proj.lora_A").spec.shape == strata::shape{8, 2});
    CHECK(layout.find("self_attn.qkv_proj.lora_B").spec.shape == strata::shape{2, 16});  // (4 + 2 x 2) heads of 2
    CHECK(layout.find("self_attn.o_proj.lora_A").spec.shape == strata::shape{8, 2});
    CHECK(layout.find("mlp.down_proj.lora_A").spec.shape == strata::shape{12, 2});
    CHECK(layout.find("mlp.down_proj.lora_B").spec.shape == strata::shape{2, 8});
    CHECK(layout.find("self_attn.qkv_proj.lora_A").offset == 0);
    CHECK(layout.trainable_parameter_count() == 2 * ((8 + 16) + (8 + 8) + 2 * (8 + 12) + (12 + 8)));
    CHECK(strata::param_layout::of<float>(llama_lora_block<float, strata::cpu_backend>::params(frozen)).frozen());
}

TEST_CASE("llama_lora_block: every adapter's and the input's gradient matches FP64 central differences") {
    const auto r = st::check_gradients<llama_lora_block>(all_five, B, T);
    MESSAGE(r.describe());  // the measured errors, kept in the test log
    CHECK_MESSAGE(r.ok(), r.describe());
    REQUIRE(r.tensors.size() == 8 + 10 + 1);  // 8 base tensors (with the q/k/v bias), 10 adapters, the input
    std::size_t skipped = 0;
    for (const auto& t : r.tensors) skipped += t.skipped ? 1 : 0;
    CHECK(skipped == 8);
    for (const auto& c : {down_only, tiny({"self_attn.qkv_proj"}), tiny({"mlp.up_proj", "self_attn.o_proj"})}) {
        CAPTURE(c.targets.size());
        const auto g = st::check_gradients<llama_lora_block>(c, 1, 4);
        CHECK_MESSAGE(g.ok(), g.describe());
    }
    auto mha = tiny({"self_attn.qkv_proj", "mlp.gate_proj"});  // multi-head, no biases, Llama 3's rope base
    mha.base = {.n_embd = 8, .n_head = 2, .hidden = 12, .rope_theta = 500000.0};
    const auto m = st::check_gradients<llama_lora_block>(mha, B, T);
    CHECK_MESSAGE(m.ok(), m.describe());
}

TEST_CASE_TEMPLATE("llama_lora_block: recomputed forward + backward equals plain backward bitwise", Bk,
                   STRATA_TEST_BACKENDS) {
    for (const auto& c : {all_five, down_only, frozen}) {
        CAPTURE(c.targets.size());
        const auto f = st::check_checkpointing<llama_lora_block, float, Bk>(c, B, T);
        if (f.skipped) strata::test::skip(f.describe());
        CHECK_MESSAGE(f.ok(), f.describe());
    }
}

static_assert(strata::check_decodes<llama_lora_block<float, strata::cpu_backend>>());

TEST_CASE_TEMPLATE("llama_lora_block decodes with a KV cache: forward's rows with the adapters on", Bk,
                   STRATA_TEST_BACKENDS) {
    for (const auto& c : {all_five, down_only}) {
        CAPTURE(c.targets.size());
        const auto f = st::check_decoding<llama_lora_block, float, Bk>(c, 9);
        if (f.skipped) strata::test::skip(f.describe());
        CHECK_MESSAGE(f.ok(), f.describe());
    }
}

TEST_CASE("llama_lora_block: freshly initialized (B = 0), its output is llama_block's, bitwise") {
    using lora_block = llama_lora_block<float, strata::cpu_backend>;
    using plain_block = llama_block<float, strata::cpu_backend>;
    const auto layout = strata::param_layout::of<float>(lora_block::params(all_five));
    const auto plain_layout = strata::param_layout::of<float>(plain_block::params(all_five.base));
    std::vector<float> block(layout.numel(), 0.0f), plain(plain_layout.numel(), 0.0f);
    strata::rng gen(2024), plain_gen(2024);
    lora_block::initialize(all_five, layout, std::span<float>(block), gen);
    strata::detail::default_initialize(plain_layout, std::span<float>(plain), plain_gen);
    for (const auto& entry : plain_layout.entries()) {  // the same base weights, draw for draw
        const auto& mine = layout.find(entry.spec.name);
        CHECK_MESSAGE(std::memcmp(block.data() + mine.offset, plain.data() + entry.offset,
                                  entry.spec.shape.numel() * sizeof(float)) == 0,
                      entry.spec.name);
    }
    const auto x = strata::kernels::cpu::random_vector<float>(B * T * 8, 9);
    const auto y = st::forward_output<llama_lora_block>(all_five, std::span<const float>(block), std::span<const float>(x), B, T);
    const auto y_plain =
        st::forward_output<llama_block>(all_five.base, std::span<const float>(plain), std::span<const float>(x), B, T);
    REQUIRE(y.size() == y_plain.size());
    CHECK(std::memcmp(y.data(), y_plain.data(), y.size() * sizeof(float)) == 0);
}

TEST_CASE("llama_lora_block: FLOPs are the plain block's and each adapter's two thin GEMMs") {
    using L = llama_lora_block<float, strata::cpu_backend>;
    const double BT = B * T, r = 2;
    const double adapters = 2 * BT * r * ((8 + 16) + (8 + 8) + 2 * (8 + 12) + (12 + 8));
    CHECK(L::flops(all_five, B, T) == llama_block<float, strata::cpu_backend>::flops(all_five.base, B, T) + adapters);
    CHECK(L::flops(frozen, B, T) == llama_block<float, strata::cpu_backend>::flops(frozen.base, B, T));
    // Recompute from the kept part: the plain block's, each adapter's two thin GEMMs but down_proj's
    // x B (its output is not recomputed, its x A is: backward reads it).
    using plain = llama_block<float, strata::cpu_backend>;
    const double recomputed_adapters = 2 * BT * r * ((8 + 16) + (8 + 8) + 2 * (8 + 12) + 12);
    CHECK(L::recompute_flops(all_five, B, T).gemm == plain::recompute_flops(all_five.base, B, T).gemm + recomputed_adapters);
    CHECK(L::recompute_flops(frozen, B, T).gemm == plain::recompute_flops(frozen.base, B, T).gemm);
    CHECK(L::kept_part(all_five, B, T).floats == plain::kept_part(all_five.base, B, T).floats);
}

TEST_CASE("llama_lora_block: PEFT's target names map to the block's projections; others are refused") {
    CHECK(llama::parse_lora_targets("o_proj,mlp.down_proj,,gate_proj") ==
          std::vector<std::string>{"self_attn.o_proj", "mlp.down_proj", "mlp.gate_proj"});
    CHECK(llama::parse_lora_targets("self_attn.qkv_proj") == std::vector<std::string>{"self_attn.qkv_proj"});
    CHECK_THROWS_WITH_AS(llama::parse_lora_targets("q_proj"), doctest::Contains("target qkv_proj"), strata::error);
    CHECK_THROWS_WITH_AS(llama::parse_lora_targets("self_attn.v_proj"), doctest::Contains("fuses"), strata::error);
    CHECK_THROWS_WITH_AS(llama::parse_lora_targets("c_attn"), doctest::Contains("not a projection"), strata::error);
    using L = llama_lora_block<float, strata::cpu_backend>;
    CHECK_THROWS_WITH_AS(L(tiny({"mlp.up_proj", "mlp.up_proj"})), doctest::Contains("targeted twice"), strata::error);
    CHECK_THROWS_WITH_AS(L(tiny({"up_proj"})), doctest::Contains("not a projection"), strata::error);
    auto bad = all_five;
    bad.rank = 0;
    CHECK_THROWS_WITH_AS(L{bad}, doctest::Contains("rank must be positive"), strata::error);
}

}  // namespace

}  // namespace llama_lora_block_test
