// The Llama block against the layer contract, through strata's layer harness: FP64 finite
// differences for every parameter and the input, checkpointed == plain bitwise, and CPU vs CUDA
// parity (skipped, visibly, where there is no GPU or the CUDA kernels are not built).
#include "../llama_block.hpp"  // llama::llama_block

#include <strata/nn/layer.hpp>                // strata::check_layer
#include <strata/testing/layer_harness.hpp>  // strata::testing::check_*

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE, MESSAGE

#include <cstddef>  // std::size_t

namespace {

using llama::llama_block;
using llama::llama_block_config;
namespace st = strata::testing;

static_assert(strata::check_layer<llama_block<float, strata::cpu_backend>>());
static_assert(strata::check_layer<llama_block<double, strata::cpu_backend>>());

// C = 8, 2 heads of 4 (two rotary pairs each), hidden 12: every parameter tensor is small enough
// for finite differences of every element; T = 5 so rotation angles and causal masks vary.
const llama_block_config tiny{.n_embd = 8, .n_head = 2, .hidden = 12};
constexpr std::size_t B = 2, T = 5;

TEST_CASE("llama block: gradients of every parameter and the input match FP64 central differences") {
    const auto report = st::check_gradients<llama_block>(tiny, B, T);
    MESSAGE(report.describe());  // the measured errors, kept in the test log
    CHECK_MESSAGE(report.ok(), report.describe());
    // all seven parameter tensors and the input were checked
    CHECK(report.tensors.size() == 8);
}

TEST_CASE("llama block: eps 1e-6 and another rope theta also match central differences") {
    auto c = tiny;
    c.norm_eps = 1e-6;
    c.rope_theta = 500000.0;  // Llama 3
    const auto report = st::check_gradients<llama_block>(c, 1, 7);
    CHECK_MESSAGE(report.ok(), report.describe());
}

TEST_CASE("llama block: recomputed forward + backward equals plain backward bitwise (float and double)") {
    const auto f = st::check_checkpointing<llama_block, float>(tiny, B, T);
    CHECK_MESSAGE(f.ok(), f.describe());
    const auto d = st::check_checkpointing<llama_block, double>(tiny, B, T);
    CHECK_MESSAGE(d.ok(), d.describe());
}

TEST_CASE("llama block: a bad shape is refused with a hint") {
    using block = llama_block<float, strata::cpu_backend>;
    CHECK_THROWS_WITH_AS(block({.n_embd = 12, .n_head = 4, .hidden = 8}), doctest::Contains("heads of an even size"),
                         strata::error);
}

TEST_CASE("llama block: FLOPs are the five GEMMs and attention's two T x T products") {
    const double BT = B * T, C = 8, H = 12;
    const double gemms = 2 * BT * (C * 3 * C + C * C + 2 * C * H + H * C);
    CHECK(llama_block<float, strata::cpu_backend>::flops(tiny, B, T) == gemms + 4.0 * B * T * T * C);
}

#ifdef LLAMA_WITH_CUDA
TEST_CASE("llama block: CUDA matches the CPU (normalized squared error)") {
    const auto report = st::check_backend_parity<llama_block, strata::cuda_backend>(tiny, B, T);
    if (report.skipped) MESSAGE(report.describe());
    CHECK_MESSAGE(report.ok(), report.describe());
}
#else
TEST_CASE("llama block: CUDA parity") {
    MESSAGE("SKIPPED: this build has no CUDA kernels for the Llama block (examples/llama has CPU kernels only)");
}
#endif

}  // namespace
