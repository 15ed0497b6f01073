// The Llama family's additions to the block (issue 16): grouped-query attention (expand_kv and its
// adjoint), q/k/v biases, a head size other than C / NH, and Llama 3.1's rope frequencies. Each
// kernel against a textbook restatement or FP64 central differences, the block against the layer
// contract (finite differences of every parameter, checkpointing bitwise), and GQA against the
// multi-head block whose k/v weights are the groups' copies (bit for bit).
#include "../kernels_cpu.hpp"  // llama::kernels::cpu::*, rope_params
#include "../llama_block.hpp"  // llama::llama_block
#ifdef STRATA_TESTS_WITH_CUDA
#include "../llama_ops_cuda.hpp"  // llama_ops<cuda_backend> (definitions: strata_llama_cuda_ops)
#endif
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS

#include <strata/kernels/cpu/gradient_check.hpp>  // gradient_error, compare, random_vector
#include <strata/testing/layer_harness.hpp>       // strata::testing::check_*, forward_output

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE

#include <cmath>    // std::cos, std::sin, std::pow
#include <cstddef>  // std::size_t
#include <cstring>  // std::memcmp
#include <numeric>  // std::inner_product
#include <vector>   // std::vector

namespace llama_family_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using namespace llama::kernels::cpu;
using llama::llama_block;
using llama::llama_block_config;
using llama::kernels::rope_params;
using strata::kernels::cpu::compare;
using strata::kernels::cpu::gradient_error;
using strata::kernels::cpu::random_vector;
namespace st = strata::testing;

// Glossary: B batch, T time, NH query heads, NKV key/value heads, HS head size.
constexpr std::size_t B = 2, T = 5, NH = 6, NKV = 2, HS = 3;  // groups of 3 heads, an odd head size
constexpr std::size_t A = NH * HS, KV = NKV * HS, QKV = A + 2 * KV;

template <class Real>
struct expand_kv_problem {
    std::vector<Real> qkv = random_vector<Real>(B * T * QKV, 21, -2.0, 2.0);
    std::vector<Real> out = std::vector<Real>(B * T * 3 * A);
    std::vector<Real> dout = random_vector<Real>(B * T * 3 * A, 22);
    std::vector<Real> dqkv = random_vector<Real>(B * T * QKV, 23);  // start random: backward must add

    double forward() {
        expand_kv_forward(out.data(), qkv.data(), B, T, NH, NKV, HS);
        return std::inner_product(out.begin(), out.end(), dout.begin(), 0.0);
    }
    void backward() { expand_kv_backward(dqkv.data(), dout.data(), B, T, NH, NKV, HS); }
};

TEST_CASE("expand_kv copies q, and k/v head h / (NH/NKV) into each query head h") {
    expand_kv_problem<double> p;
    p.forward();
    for (std::size_t row = 0; row < B * T; ++row)
        for (std::size_t h = 0; h < NH; ++h)
            for (std::size_t d = 0; d < HS; ++d) {
                const double* x = p.qkv.data() + row * QKV;
                const double* y = p.out.data() + row * 3 * A;
                const std::size_t g = h * NKV / NH;  // the group of query head h
                CHECK(y[h * HS + d] == x[h * HS + d]);
                CHECK(y[A + h * HS + d] == x[A + g * HS + d]);
                CHECK(y[2 * A + h * HS + d] == x[A + KV + g * HS + d]);
            }
}

TEST_CASE("expand_kv backward (the group sums) matches central differences") {
    using P = expand_kv_problem<double>;
    const auto dqkv = gradient_error(P{}, &P::qkv, &P::dqkv);
    CHECK_MESSAGE(dqkv.error < 1e-6, dqkv.describe("dqkv"));  // a dropped group member is off by O(1)
}

TEST_CASE("expand_kv refuses key/value heads that do not divide the query heads, naming the field") {
    std::vector<double> x(64), y(64);
    CHECK_THROWS_WITH_AS(expand_kv_forward(y.data(), x.data(), 1, 1, 6, 4, 2),
                         doctest::Contains("num_key_value_heads must divide"), strata::error);
}

// transformers' _compute_llama3_parameters, restated the way it is written there (torch.where on
// the wavelength), in long double: the reference of rope_params::inv_freq.
long double llama3_reference(std::size_t i, std::size_t HS, long double theta, long double factor, long double low,
                             long double high, long double original) {
    const long double pi = 3.141592653589793238462643383279502884L;
    const long double inv_freq = 1.0L / std::pow(theta, static_cast<long double>(2 * i) / static_cast<long double>(HS));
    const long double low_freq_wavelen = original / low, high_freq_wavelen = original / high;
    const long double wavelen = 2 * pi / inv_freq;
    long double llama = wavelen > low_freq_wavelen ? inv_freq / factor : inv_freq;
    const long double smooth = (original / wavelen - low) / (high - low);
    const long double smoothed = (1 - smooth) * llama / factor + smooth * llama;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    return medium ? smoothed : llama;
}

TEST_CASE("rope_params: llama3 frequencies are transformers' _compute_llama3_parameters (long double reference)") {
    SUBCASE("Llama 3.1's values, HS 128: every pair") {
        const rope_params r(500000.0, 8.0, 1.0, 4.0, 8192.0);
        int kept = 0, scaled = 0, smoothed = 0;
        for (std::size_t i = 0; i < 64; ++i) {
            const long double want = llama3_reference(i, 128, 500000.0L, 8.0L, 1.0L, 4.0L, 8192.0L);
            const double plain = std::pow(500000.0, -2.0 * double(i) / 128.0);
            const double got = r.inv_freq(i, 128);
            CHECK_MESSAGE(std::abs(double((got - want) / want)) < 1e-14, "pair ", i, ": ", got, " vs ", double(want));
            (got == plain ? kept : std::abs(got * 8.0 - plain) < 1e-15 * plain ? scaled : smoothed) += 1;
        }
        MESSAGE("pairs kept ", kept, ", divided by factor ", scaled, ", interpolated ", smoothed);
        CHECK(kept > 0);
        CHECK(scaled > 0);
        CHECK(smoothed > 0);
    }
    SUBCASE("no scaling is theta^(-2i/HS)") {
        const rope_params r = 10000.0;
        for (std::size_t i = 0; i < 4; ++i) CHECK(r.inv_freq(i, 8) == std::pow(10000.0, -2.0 * double(i) / 8.0));
    }
}

// A small scaling whose three regions a head of 6 reaches: theta 100, original context 32.
const rope_params small_llama3(100.0, 8.0, 1.0, 4.0, 32.0);

TEST_CASE("rope with llama3 frequencies rotates by t f_i, and its backward matches central differences") {
    constexpr std::size_t C = 12, heads = 2, hs = 6;
    std::vector<double> qkv = random_vector<double>(B * T * 3 * C, 31), out(B * T * 3 * C);
    rope_forward(out.data(), qkv.data(), B, T, C, heads, small_llama3);
    double worst = 0.0;
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t t = 0; t < T; ++t)
            for (std::size_t h = 0; h < 2 * heads; ++h)
                for (std::size_t i = 0; i < hs / 2; ++i) {
                    const std::size_t row = (b * T + t) * 3 * C, lo = row + h * hs + i, hi = lo + hs / 2;
                    const double angle = double(t) * double(llama3_reference(i, hs, 100.0L, 8.0L, 1.0L, 4.0L, 32.0L));
                    worst = std::max(worst, std::abs(out[lo] - (qkv[lo] * std::cos(angle) - qkv[hi] * std::sin(angle))));
                    worst = std::max(worst, std::abs(out[hi] - (qkv[hi] * std::cos(angle) + qkv[lo] * std::sin(angle))));
                }
    CHECK_MESSAGE(worst < 1e-14, "largest difference from the textbook rotation ", worst);

    struct problem {
        std::vector<double> qkv = random_vector<double>(B * T * 3 * C, 32);
        std::vector<double> out = std::vector<double>(B * T * 3 * C);
        std::vector<double> dout = random_vector<double>(B * T * 3 * C, 33);
        std::vector<double> dqkv = random_vector<double>(B * T * 3 * C, 34);
        double forward() {
            rope_forward(out.data(), qkv.data(), B, T, C, heads, small_llama3);
            return std::inner_product(out.begin(), out.end(), dout.begin(), 0.0);
        }
        void backward() { rope_backward(dqkv.data(), dout.data(), B, T, C, heads, small_llama3); }
    };
    const auto d = gradient_error(problem{}, &problem::qkv, &problem::dqkv);
    CHECK_MESSAGE(d.error < 1e-6, d.describe("dqkv"));
}

// ---- the block ----

// C = 10, 4 query heads of 6 (A = 24 != C), 2 key/value heads, q/k/v biases, llama3 frequencies.
const llama_block_config family{.n_embd = 10,
                                .n_head = 4,
                                .hidden = 8,
                                .rope_theta = small_llama3,
                                .n_kv_head = 2,
                                .head_dim = 6,
                                .qkv_bias = true};

TEST_CASE("llama block (GQA, q/k/v biases, head_dim != C / NH, llama3 rope): every gradient matches FP64 central "
          "differences") {
    CHECK(family.attn_channels() == 24);
    CHECK(family.qkv_channels() == 48);
    const auto report = st::check_gradients<llama_block>(family, B, T);
    MESSAGE(report.describe());
    CHECK_MESSAGE(report.ok(), report.describe());
    CHECK(report.tensors.size() == 9);  // eight parameter tensors (with the bias) and the input
}

TEST_CASE("llama block: each addition alone also matches central differences") {
    llama_block_config gqa{.n_embd = 8, .n_head = 4, .hidden = 6, .n_kv_head = 1};  // multi-query
    llama_block_config bias{.n_embd = 8, .n_head = 2, .hidden = 6, .qkv_bias = true};
    llama_block_config wide{.n_embd = 6, .n_head = 2, .hidden = 6, .head_dim = 4};
    for (const auto& c : {gqa, bias, wide}) {
        const auto report = st::check_gradients<llama_block>(c, 1, 6);
        CHECK_MESSAGE(report.ok(), report.describe());
    }
}

TEST_CASE_TEMPLATE("llama block (GQA, biases, head_dim, llama3): recomputed forward + backward equals plain bitwise",
                   Bk, STRATA_TEST_BACKENDS) {
    const auto f = st::check_checkpointing<llama_block, float, Bk>(family, B, T);
    if (f.skipped) strata::test::skip(f.describe());
    CHECK_MESSAGE(f.ok(), f.describe());
}

// GQA equals multi-head attention with each key/value head copied to its group's query heads: the
// block with NKV = 2 and the multi-head block (NKV = NH, today's block) whose k and v columns are
// those copies give the same output, bit for bit (the GEMM computes each column alone, the copies
// make the same (B, T, 3A) input of attention).
TEST_CASE("llama block: GQA equals the multi-head block with copied k/v heads, bit for bit") {
    llama_block_config gqa = family;
    gqa.rope_theta = 10000.0;
    llama_block_config mha = gqa;
    mha.n_kv_head = 0;
    const auto gqa_layout = strata::param_layout::of<float>(llama_block<float, strata::cpu_backend>::params(gqa));
    const auto mha_layout = strata::param_layout::of<float>(llama_block<float, strata::cpu_backend>::params(mha));
    const auto p = st::detail::random_params<float>(gqa_layout, 41, 0.5);
    std::vector<float> q(mha_layout.numel(), 0.0f);
    const std::size_t C = gqa.n_embd, a = gqa.attn_channels(), kv = gqa.kv_heads() * gqa.head_size(),
                      hs = gqa.head_size(), group = gqa.n_head / gqa.kv_heads();
    // the fused column of multi-head channel c of the expanded layout, in the grouped layout
    auto grouped_column = [&](std::size_t c) {
        if (c < a) return c;
        const std::size_t part = (c - a) / a, h = (c - a) % a / hs, d = c % hs;
        return a + part * kv + (h / group) * hs + d;
    };
    for (std::size_t s = 0; s < gqa_layout.entries().size(); ++s) {
        const auto& from = gqa_layout.entries()[s];
        const auto& to = mha_layout.entries()[s];
        REQUIRE(from.spec.name == to.spec.name);
        if (from.spec.name == "self_attn.qkv_proj.weight") {
            for (std::size_t i = 0; i < C; ++i)
                for (std::size_t c = 0; c < 3 * a; ++c)
                    q[to.offset + i * 3 * a + c] = p[from.offset + i * gqa.qkv_channels() + grouped_column(c)];
        } else if (from.spec.name == "self_attn.qkv_proj.bias") {
            for (std::size_t c = 0; c < 3 * a; ++c) q[to.offset + c] = p[from.offset + grouped_column(c)];
        } else {
            std::copy(p.begin() + from.offset, p.begin() + from.offset + from.spec.shape.numel(), q.begin() + to.offset);
        }
    }
    const auto inp = random_vector<float>(B * T * C, 42, -1.0, 1.0);
    const auto grouped = st::forward_output<llama_block>(gqa, std::span<const float>(p), std::span<const float>(inp), B, T);
    const auto multi = st::forward_output<llama_block>(mha, std::span<const float>(q), std::span<const float>(inp), B, T);
    REQUIRE(grouped.size() == multi.size());
    const auto diff = compare(grouped, std::vector<double>(multi.begin(), multi.end()), 1.0);
    CHECK_MESSAGE(std::memcmp(grouped.data(), multi.data(), grouped.size() * sizeof(float)) == 0,
                  diff.describe("GQA vs multi-head with copied heads"));
}

TEST_CASE("llama block: n_kv_head equal to n_head is the multi-head block: same parameters, same bits") {
    llama_block_config mha{.n_embd = 8, .n_head = 2, .hidden = 12};
    llama_block_config explicit_kv = mha;
    explicit_kv.n_kv_head = 2;
    CHECK_FALSE(explicit_kv.grouped());
    using L = llama_block<float, strata::cpu_backend>;
    CHECK(L::activation_floats(mha, B, T) == L::activation_floats(explicit_kv, B, T));
    const auto layout = strata::param_layout::of<float>(L::params(mha));
    CHECK(layout.numel() == strata::param_layout::of<float>(L::params(explicit_kv)).numel());
    const auto p = st::detail::random_params<float>(layout, 43, 0.5);
    const auto inp = random_vector<float>(B * T * 8, 44, -1.0, 1.0);
    const auto a = st::forward_output<llama_block>(mha, std::span<const float>(p), std::span<const float>(inp), B, T);
    const auto b = st::forward_output<llama_block>(explicit_kv, std::span<const float>(p), std::span<const float>(inp), B, T);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

#ifdef STRATA_TESTS_WITH_CUDA
TEST_CASE("llama block (GQA, biases, head_dim, llama3): CUDA matches the CPU (normalized squared error)") {
    const auto report = st::check_backend_parity<llama_block, strata::cuda_backend>(family, B, T);
    if (report.skipped) strata::test::skip(report.describe());
    CHECK_MESSAGE(report.ok(), report.describe());
}
#else
TEST_CASE("llama block (GQA, biases, head_dim, llama3): CUDA parity") {
    strata::test::skip("this build has no CUDA backend (configure with STRATA_ENABLE_CUDA=ON)");
}
#endif

TEST_CASE("llama block: key/value heads that do not divide the query heads are refused") {
    using L = llama_block<float, strata::cpu_backend>;
    CHECK_THROWS_WITH_AS(L({.n_embd = 12, .n_head = 6, .hidden = 8, .n_kv_head = 4}),
                         doctest::Contains("does not divide n_head=6"), strata::error);
    CHECK_THROWS_WITH_AS(L({.n_embd = 12, .n_head = 2, .hidden = 8, .head_dim = 5}),
                         doctest::Contains("heads of an even size"), strata::error);
}

}  // namespace

}  // namespace llama_family_test
