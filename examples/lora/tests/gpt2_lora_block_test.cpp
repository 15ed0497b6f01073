// gpt2_lora_block against the layer contract (FP64 finite differences of every adapter and the
// input with the twelve base tensors frozen, checkpointed == plain bitwise, CUDA parity) for
// several target sets, and against strata's plain GPT-2 block: freshly initialized (B = 0) it
// computes the plain block's output bit for bit.
#include "../gpt2_lora_block.hpp"  // lora::gpt2_lora_block, lora::gpt2_lora_config
#include "support/backends.hpp"    // STRATA_TEST_BACKENDS, STRATA_TESTS_WITH_CUDA

#include <strata/kernels/cpu/gradient_check.hpp>  // strata::kernels::cpu::random_vector
#include <strata/nn/cpu_ops.hpp>                  // ops<cpu_backend>
#include <strata/nn/gpt2_block.hpp>               // strata::gpt2_block
#include <strata/nn/layer.hpp>                    // strata::check_layer, strata::sizes_of
#include <strata/testing/layer_harness.hpp>      // strata::testing::check_*, forward_output

#include <doctest/doctest.h>  // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE, MESSAGE

#include <cstddef>  // std::size_t
#include <cstring>  // std::memcmp
#include <span>     // std::span
#include <string>   // std::string
#include <vector>   // std::vector

namespace gpt2_lora_block_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using lora::gpt2_lora_block;
using lora::gpt2_lora_config;
namespace st = strata::testing;

static_assert(strata::check_layer<gpt2_lora_block<float, strata::cpu_backend>>());
static_assert(strata::check_layer<gpt2_lora_block<double, strata::cpu_backend>>());
static_assert(strata::check_recomputes_part<gpt2_lora_block<float, strata::cpu_backend>>());  // selective recompute
#ifdef STRATA_TESTS_WITH_CUDA
static_assert(strata::check_layer<gpt2_lora_block<float, strata::cuda_backend>>());
static_assert(strata::check_recomputes_part<gpt2_lora_block<float, strata::cuda_backend>>());
#endif

// C = 6 in 2 heads, r = 2, alpha / r = 1.5: small enough for finite differences of every element.
gpt2_lora_config tiny(std::vector<std::string> targets) {
    return {.n_embd = 6, .n_head = 2, .rank = 2, .alpha = 3.0, .targets = std::move(targets)};
}
const gpt2_lora_config all_four = tiny({"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"});
const gpt2_lora_config mlp_only = tiny({"mlp.c_proj"});  // backward stops below the MLP when dinp is null
const gpt2_lora_config frozen = tiny({});                // a wholly frozen plain block
constexpr std::size_t B = 2, T = 5;

TEST_CASE("gpt2_lora_block: the base tensors of gpt_block_params, frozen; adapters named <projection>.lora_A/B") {
    const auto specs = gpt2_lora_block<float, strata::cpu_backend>::params(all_four);
    const auto plain = strata::gpt_block_params(all_four.base());
    REQUIRE(specs.size() == plain.size() + 8);
    for (std::size_t i = 0; i < plain.size(); ++i) {
        CHECK(specs[i].name == plain[i].name);
        CHECK(specs[i].shape == plain[i].shape);
        CHECK_FALSE(specs[i].trainable);
    }
    const auto layout = strata::param_layout::of<float>(specs);
    CHECK(layout.find("attn.c_attn.lora_A").spec.shape == strata::shape{6, 2});
    CHECK(layout.find("attn.c_attn.lora_B").spec.shape == strata::shape{2, 18});
    CHECK(layout.find("mlp.c_proj.lora_A").spec.shape == strata::shape{24, 2});
    CHECK(layout.find("mlp.c_proj.lora_B").spec.shape == strata::shape{2, 6});
    CHECK(layout.find("attn.c_attn.lora_A").spec.trainable);
    CHECK(layout.find("attn.c_attn.lora_A").offset == 0);  // the adapters lead the block
    CHECK(layout.trainable_parameter_count() == 2 * (6 + 18) + 2 * (6 + 6) + 2 * (6 + 24) + 2 * (24 + 6));
    CHECK(strata::param_layout::of<float>(gpt2_lora_block<float, strata::cpu_backend>::params(frozen)).frozen());
}

TEST_CASE("gpt2_lora_block: every adapter's and the input's gradient matches FP64 central differences") {
    const auto r = st::check_gradients<gpt2_lora_block>(all_four, B, T);
    MESSAGE(r.describe());  // the measured errors, kept in the test log
    CHECK_MESSAGE(r.ok(), r.describe());
    REQUIRE(r.tensors.size() == 12 + 8 + 1);
    std::size_t skipped = 0;
    for (const auto& t : r.tensors) skipped += t.skipped ? 1 : 0;
    CHECK(skipped == 12);
    for (const auto& c : {mlp_only, tiny({"attn.c_attn"}), tiny({"mlp.c_fc", "attn.c_proj"})}) {
        CAPTURE(c.targets.size());
        const auto g = st::check_gradients<gpt2_lora_block>(c, 1, 4);
        CHECK_MESSAGE(g.ok(), g.describe());
    }
}

TEST_CASE_TEMPLATE("gpt2_lora_block: recomputed forward + backward equals plain backward bitwise", Bk,
                   STRATA_TEST_BACKENDS) {
    for (const auto& c : {all_four, mlp_only, frozen}) {
        CAPTURE(c.targets.size());
        const auto f = st::check_checkpointing<gpt2_lora_block, float, Bk>(c, B, T);
        if (f.skipped) strata::test::skip(f.describe());
        CHECK_MESSAGE(f.ok(), f.describe());
    }
}

TEST_CASE("gpt2_lora_block: CUDA against the CPU") {
#ifdef STRATA_TESTS_WITH_CUDA
    for (const auto& c : {all_four, mlp_only}) {
        const auto p = st::check_backend_parity<gpt2_lora_block, strata::cuda_backend>(c, B, T);
        if (p.skipped) strata::test::skip(p.describe());
        CHECK_MESSAGE(p.ok(), p.describe());
    }
#else
    strata::test::skip("this build has no CUDA backend");
#endif
}

TEST_CASE("gpt2_lora_block: freshly initialized (B = 0), its output is strata's plain GPT-2 block's, bitwise") {
    using lora_block = gpt2_lora_block<float, strata::cpu_backend>;
    using plain_block = strata::gpt2_block<float, strata::cpu_backend>;
    auto c = all_four;
    c.n_layer = 3;
    const auto layout = strata::param_layout::of<float>(lora_block::params(c));
    const auto plain_layout = strata::param_layout::of<float>(plain_block::params(c.base()));
    std::vector<float> block(layout.numel(), 0.0f), plain(plain_layout.numel(), 0.0f);
    strata::rng gen(2024), plain_gen(2024);
    lora_block::initialize(c, layout, std::span<float>(block), gen);
    plain_block::initialize(c.base(), plain_layout, std::span<float>(plain), plain_gen);
    // the same base weights, draw for draw
    for (const auto& entry : plain_layout.entries()) {
        const auto& mine = layout.find(entry.spec.name);
        CHECK_MESSAGE(std::memcmp(block.data() + mine.offset, plain.data() + entry.offset,
                                  entry.spec.shape.numel() * sizeof(float)) == 0,
                      entry.spec.name);
    }
    const auto x = strata::kernels::cpu::random_vector<float>(B * T * c.n_embd, 9);
    const auto y = st::forward_output<gpt2_lora_block>(c, std::span<const float>(block), std::span<const float>(x), B, T);
    const auto y_plain =
        st::forward_output<strata::gpt2_block>(c.base(), std::span<const float>(plain), std::span<const float>(x), B, T);
    REQUIRE(y.size() == y_plain.size());
    CHECK(std::memcmp(y.data(), y_plain.data(), y.size() * sizeof(float)) == 0);
}

TEST_CASE("gpt2_lora_block: FLOPs are the plain block's and each adapter's two thin GEMMs") {
    using L = gpt2_lora_block<float, strata::cpu_backend>;
    const double BT = B * T, r = 2;
    const double adapters = 2 * BT * r * ((6 + 18) + (6 + 6) + (6 + 24) + (24 + 6));
    CHECK(L::flops(all_four, B, T) == strata::gpt2_block<float, strata::cpu_backend>::flops(all_four.base(), B, T) +
                                          adapters);
    CHECK(L::flops(frozen, B, T) == strata::gpt2_block<float, strata::cpu_backend>::flops(frozen.base(), B, T));
    // Recompute from the kept part: the plain block's, each adapter's two thin GEMMs but the MLP
    // projection's x B (its output is not recomputed, its x A is: backward reads it).
    using plain = strata::gpt2_block<float, strata::cpu_backend>;
    const double recomputed_adapters = 2 * BT * r * ((6 + 18) + (6 + 6) + (6 + 24) + 24);
    CHECK(L::recompute_flops(all_four, B, T).gemm == plain::recompute_flops(all_four.base(), B, T).gemm + recomputed_adapters);
    CHECK(L::recompute_flops(frozen, B, T).gemm == plain::recompute_flops(frozen.base(), B, T).gemm);
    CHECK(L::kept_part(all_four, B, T).floats == plain::kept_part(all_four.base(), B, T).floats);
}

TEST_CASE("gpt2_lora_block: an unknown or repeated target, or a bad shape, is refused with a hint") {
    using L = gpt2_lora_block<float, strata::cpu_backend>;
    CHECK_THROWS_WITH_AS(L(tiny({"attn.q_proj"})), doctest::Contains("target any of attn.c_attn"), strata::error);
    CHECK_THROWS_WITH_AS(L(tiny({"mlp.c_fc", "mlp.c_fc"})), doctest::Contains("targeted twice"), strata::error);
    auto bad = all_four;
    bad.n_head = 4;  // 6 channels do not split into 4 heads
    CHECK_THROWS_AS(L{bad}, strata::error);
    bad = all_four;
    bad.rank = 0;
    CHECK_THROWS_WITH_AS(L{bad}, doctest::Contains("rank must be positive"), strata::error);
}

}  // namespace

}  // namespace gpt2_lora_block_test
