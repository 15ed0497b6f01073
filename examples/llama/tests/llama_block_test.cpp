// The Llama block against the layer contract, through strata's layer harness: FP64 finite
// differences for every parameter and the input, checkpointed == plain bitwise on every backend
// of the build, and CPU vs CUDA parity (skipped, visibly, where there is no GPU or no CUDA build).
#include "../llama_block.hpp"  // llama::llama_block
#ifdef STRATA_TESTS_WITH_CUDA
#include "../llama_ops_cuda.hpp"  // llama_ops<cuda_backend> (definitions: strata_llama_cuda_ops)
#endif
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, STRATA_TESTS_WITH_CUDA

#include <strata/nn/layer.hpp>                // strata::check_layer
#include <strata/testing/layer_harness.hpp>  // strata::testing::check_*

#include <doctest/doctest.h>  // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE, MESSAGE

#include <cstddef>      // std::size_t
#include <string>       // std::string
#include <type_traits>  // std::is_same_v
#include <utility>      // std::pair

namespace llama_block_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using llama::llama_block;
using llama::llama_block_config;
namespace st = strata::testing;

static_assert(strata::check_layer<llama_block<float, strata::cpu_backend>>());
static_assert(strata::check_layer<llama_block<double, strata::cpu_backend>>());
static_assert(strata::check_recomputes_part<llama_block<float, strata::cpu_backend>>());  // selective recompute
#ifdef STRATA_TESTS_WITH_CUDA
static_assert(strata::check_layer<llama_block<float, strata::cuda_backend>>());
#endif

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

TEST_CASE_TEMPLATE("llama block: recomputed forward + backward equals plain backward bitwise (float)", Bk,
                   STRATA_TEST_BACKENDS) {
    const auto f = st::check_checkpointing<llama_block, float, Bk>(tiny, B, T);
    if (f.skipped) strata::test::skip(f.describe());
    CHECK_MESSAGE(f.ok(), f.describe());
}

TEST_CASE("llama block: recomputed forward + backward equals plain backward bitwise (double)") {
    const auto d = st::check_checkpointing<llama_block, double>(tiny, B, T);
    CHECK_MESSAGE(d.ok(), d.describe());
}

TEST_CASE_TEMPLATE("llama block: a bad shape is refused with a hint", Bk, STRATA_TEST_BACKENDS) {
    using block = llama_block<float, Bk>;  // checked by the constructor, before any backend is touched
    CHECK_THROWS_WITH_AS(block({.n_embd = 12, .n_head = 4, .hidden = 8}), doctest::Contains("heads of an even size"),
                         strata::error);
}

TEST_CASE("llama block: FLOPs are the five GEMMs and attention's two T x T products") {
    const double BT = B * T, C = 8, H = 12;
    const double gemms = 2 * BT * (C * 3 * C + C * C + 2 * C * H + H * C);
    CHECK(llama_block<float, strata::cpu_backend>::flops(tiny, B, T) == gemms + 4.0 * B * T * T * C);
}

// Decoding with a KV cache (strata's Decodes): a prompt, single rows and a rewind against forward's
// rows, multi-head and the family's shapes: grouped-query attention (its compact cache), q/k/v
// biases, a head size of its own, llama3 rope at absolute positions up to 10.
static_assert(strata::check_decodes<llama_block<float, strata::cpu_backend>>());
const llama_block_config family{.n_embd = 16,
                                .n_head = 6,
                                .hidden = 24,
                                .rope_theta = {100.0, 8.0, 1.0, 4.0, 4.0},
                                .n_kv_head = 2,
                                .head_dim = 4,
                                .qkv_bias = true};

TEST_CASE_TEMPLATE("llama block decodes with a KV cache: forward's rows, MHA and GQA + biases + head_dim + llama3 rope",
                   Bk, STRATA_TEST_BACKENDS) {
    for (const auto& [name, c] : {std::pair{std::string("multi-head"), tiny}, std::pair{std::string("family"), family}}) {
        INFO(name);
        const auto f = st::check_decoding<llama_block, float, Bk>(c, 11);
        if (f.skipped) strata::test::skip(f.describe());
        CHECK_MESSAGE(f.ok(), f.describe());
        MESSAGE(name << " on " << Bk::name << ": largest |decode - forward| / max |forward| " << f.worst_error());
        if constexpr (std::is_same_v<Bk, strata::cpu_backend>) {
            const auto d = st::check_decoding<llama_block, double>(c, 11);
            CHECK_MESSAGE(d.ok(), d.describe());
        }
    }
}

#ifdef STRATA_TESTS_WITH_CUDA
// The harness's NMSE tolerance (1e-8): FP32 GEMMs and the block's kernels summing in another order
// differ by ~1e-14 per op; a wrong kernel by ~1.
TEST_CASE("llama block: CUDA matches the CPU (normalized squared error)") {
    const auto report = st::check_backend_parity<llama_block, strata::cuda_backend>(tiny, B, T);
    if (report.skipped) strata::test::skip(report.describe());
    CHECK_MESSAGE(report.ok(), report.describe());
}

TEST_CASE("llama block: CUDA matches the CPU at a wider shape, eps 1e-6 and Llama 3's rope theta") {
    // C = 80 (5 heads of 16): rows longer than a warp, a partial 32-channel tile in rmsnorm's
    // dweight; B * T = 74 rows: several row blocks, 2+ rows per row phase.
    const llama_block_config wide{.n_embd = 80, .n_head = 5, .hidden = 216, .norm_eps = 1e-6, .rope_theta = 500000.0};
    const auto report = st::check_backend_parity<llama_block, strata::cuda_backend>(wide, 2, 37);
    if (report.skipped) strata::test::skip(report.describe());
    CHECK_MESSAGE(report.ok(), report.describe());
}
#else
TEST_CASE("llama block: CUDA parity") {
    strata::test::skip("this build has no CUDA backend (configure with STRATA_ENABLE_CUDA=ON)");
}
#endif

}  // namespace

}  // namespace llama_block_test
