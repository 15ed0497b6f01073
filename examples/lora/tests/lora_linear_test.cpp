// lora_linear against the layer contract, through strata's layer harness: FP64 finite differences
// of the adapters and the input (the frozen base skipped, its gradients never written),
// checkpointed == plain bitwise on every backend of the build, CPU vs CUDA parity (skipped,
// visibly, without a GPU); and the standard initialization: B = 0 gives the base output bitwise.
#include "../lora_linear.hpp"     // lora::lora_linear, lora::init_lora_adapters
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, STRATA_TESTS_WITH_CUDA

#include <strata/core/bytes.hpp>                  // strata::page_size
#include <strata/kernels/cpu/gradient_check.hpp>  // strata::kernels::cpu::random_vector
#include <strata/kernels/cpu/matmul.hpp>          // strata::kernels::cpu::matmul_forward
#include <strata/nn/cpu_ops.hpp>                  // ops<cpu_backend>
#include <strata/nn/layer.hpp>                    // strata::check_layer, strata::sizes_of
#include <strata/testing/layer_harness.hpp>      // strata::testing::check_*, forward_output

#include <doctest/doctest.h>  // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE, MESSAGE

#include <algorithm>    // std::copy
#include <cmath>        // std::sqrt, std::abs
#include <cstddef>      // std::size_t
#include <cstring>      // std::memcmp
#include <span>         // std::span
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

namespace lora_linear_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using lora::lora_linear;
using lora::lora_linear_config;
namespace st = strata::testing;

static_assert(strata::check_layer<lora_linear<float, strata::cpu_backend>>());
static_assert(strata::check_layer<lora_linear<double, strata::cpu_backend>>());
#ifdef STRATA_TESTS_WITH_CUDA
static_assert(strata::check_layer<lora_linear<float, strata::cuda_backend>>());
#endif

// Odd, distinct sizes so a transposed adapter cannot pass by symmetry; alpha / r = 2.5.
const lora_linear_config tiny{.in = 7, .out = 5, .rank = 2, .alpha = 5.0, .bias = true};
constexpr std::size_t B = 2, T = 3;

TEST_CASE("lora_linear: the adapters' and the input's gradients match FP64 central differences; the base is frozen") {
    for (bool bias : {true, false}) {
        auto c = tiny;
        c.bias = bias;
        CAPTURE(bias);
        const auto r = st::check_gradients<lora_linear>(c, B, T);
        CHECK_MESSAGE(r.ok(), r.describe());
        // weight (and bias) skipped as frozen, lora_A, lora_B and the input compared
        REQUIRE(r.tensors.size() == (bias ? 5u : 4u));
        CHECK(r.tensors[0].name == "dweight");
        CHECK(r.tensors[0].skipped);
        if (bias) CHECK(r.tensors[1].skipped);
        CHECK(r.describe().find("dlora_A: error") != std::string::npos);
        CHECK(r.describe().find("dlora_B: error") != std::string::npos);
        REQUIRE(r.invariants.size() == 1);
        CHECK(r.invariants[0].ok);
    }
}

TEST_CASE_TEMPLATE("lora_linear: recomputed forward + backward equals plain backward bitwise", Bk,
                   STRATA_TEST_BACKENDS) {
    const auto f = st::check_checkpointing<lora_linear, float, Bk>(tiny, B, T);
    if (f.skipped) strata::test::skip(f.describe());
    CHECK_MESSAGE(f.ok(), f.describe());
    if constexpr (std::is_same_v<Bk, strata::cpu_backend>) {
        const auto d = st::check_checkpointing<lora_linear, double>(tiny, B, T);
        CHECK_MESSAGE(d.ok(), d.describe());
    }
}

TEST_CASE("lora_linear: CUDA against the CPU") {
#ifdef STRATA_TESTS_WITH_CUDA
    const auto p = st::check_backend_parity<lora_linear, strata::cuda_backend>(tiny, B, T);
    if (p.skipped) strata::test::skip(p.describe());
    CHECK_MESSAGE(p.ok(), p.describe());
#else
    strata::test::skip("this build has no CUDA backend");
#endif
}

TEST_CASE("lora_linear: the gradient block is the adapters alone") {
    using L = lora_linear<float, strata::cpu_backend>;
    const auto layout = strata::param_layout::of<float>(L::params(tiny));
    CHECK(layout.trainable_parameter_count() == tiny.rank * (tiny.in + tiny.out));
    CHECK(layout.parameter_count() == tiny.in * tiny.out + tiny.out + tiny.rank * (tiny.in + tiny.out));
    CHECK(layout.find("lora_A").offset < layout.find("weight").offset);  // trainable first
    CHECK(strata::sizes_of<L>(tiny, B, T).grads == layout.trainable_numel());
    // a layer of some size: 600 x 600 frozen, 2 x (600 + 600) trained: three pages of gradients
    const lora_linear_config wide{.in = 600, .out = 600, .rank = 2, .alpha = 2.0};
    const auto n = strata::sizes_of<L>(wide, B, T);
    CHECK(n.grads * sizeof(float) == 3 * strata::page_size);
    CHECK(n.params > 100 * n.grads);
}

TEST_CASE("lora_linear: standard initialization: B = 0 gives the base projection's output bitwise") {
    using L = lora_linear<float, strata::cpu_backend>;
    const auto layout = strata::param_layout::of<float>(L::params(tiny));
    std::vector<float> block(layout.numel(), 0.0f);
    for (const char* base : {"weight", "bias"}) {
        const auto& slot = layout.find(base);
        const auto values = strata::kernels::cpu::random_vector<float>(slot.spec.shape.numel(), 3);
        std::copy(values.begin(), values.end(), block.begin() + static_cast<std::ptrdiff_t>(slot.offset));
    }
    strata::rng gen(42);
    lora::init_lora_adapters(layout, std::span<float>(block), gen);

    const auto& A = layout.find("lora_A");
    const auto& Bs = layout.find("lora_B");
    const double bound = 1.0 / std::sqrt(double(tiny.in));
    bool a_nonzero = false;
    for (std::size_t i = 0; i < A.spec.shape.numel(); ++i) {
        const float a = block[A.offset + i];
        CHECK(std::abs(a) <= bound);
        a_nonzero = a_nonzero || a != 0.0f;
    }
    CHECK(a_nonzero);
    for (std::size_t i = 0; i < Bs.spec.shape.numel(); ++i) CHECK(block[Bs.offset + i] == 0.0f);

    const auto x = strata::kernels::cpu::random_vector<float>(B * T * tiny.in, 5);
    const auto y = st::forward_output<lora_linear>(tiny, std::span<const float>(block), std::span<const float>(x), B, T);
    std::vector<float> base(B * T * tiny.out);
    strata::kernels::cpu::matmul_forward(base.data(), x.data(), block.data() + layout.find("weight").offset,
                                         block.data() + layout.find("bias").offset, B, T, tiny.in, tiny.out);
    REQUIRE(y.size() == base.size());
    CHECK(std::memcmp(y.data(), base.data(), y.size() * sizeof(float)) == 0);
}

TEST_CASE("lora_linear: gaussian initialization draws A with standard deviation 1 / r") {
    const lora_linear_config c{.in = 64, .out = 3, .rank = 4, .alpha = 4.0};
    const auto layout = strata::param_layout::of<float>(lora_linear<float, strata::cpu_backend>::params(c));
    std::vector<float> block(layout.numel(), 1.0f);
    strata::rng gen(7);
    lora::init_lora_adapters(layout, std::span<float>(block), gen, lora::lora_init::gaussian);
    const auto& A = layout.find("lora_A");
    double sum2 = 0.0;
    for (std::size_t i = 0; i < A.spec.shape.numel(); ++i) sum2 += double(block[A.offset + i]) * block[A.offset + i];
    const double stddev = std::sqrt(sum2 / double(A.spec.shape.numel()));
    CHECK(stddev == doctest::Approx(1.0 / 4).epsilon(0.15));  // 256 draws: ~5% sampling error
    CHECK(block[layout.find("weight").offset] == 1.0f);        // the base is not touched
}

TEST_CASE("lora_linear: an invalid adapter is refused with a hint") {
    using L = lora_linear<float, strata::cpu_backend>;
    CHECK_THROWS_WITH_AS(L({.in = 4, .out = 4, .rank = 0, .alpha = 1.0}), doctest::Contains("rank must be positive"),
                         strata::error);
}

TEST_CASE("lora_linear: FLOPs are the base GEMM and the two thin ones") {
    using L = lora_linear<float, strata::cpu_backend>;
    CHECK(L::flops(tiny, B, T) == 2.0 * B * T * (7 * 5 + 7 * 2 + 2 * 5));
}

}  // namespace

}  // namespace lora_linear_test
