// The Llama block's CUDA kernels (kernels_cuda.cuh) against its CPU kernels (kernels_cpu.hpp, the
// oracle, itself checked against finite differences in kernels_test.cpp), forward and backward, on
// fresh random inputs per shape. Every gradient starts random, so a backward that overwrote
// instead of adding would be off by O(1).
//
// Errors are strata's normalized error max |gpu - cpu| / max(1, max |cpu|) (cuda_test_util.cuh);
// each threshold says why it is what it is. A wrong term, sign, pair or angle is off by > 1e-3.
#include "cuda/cuda_test_util.cuh"  // skip_without_gpu, device_buffer, test_stream, comparisons

#include "../kernels_cpu.hpp"   // llama::kernels::cpu::* (the oracle)
#include "../kernels_cuda.cuh"  // llama::kernels::cuda::* (under test)

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE, CAPTURE

#include <algorithm>  // std::all_of
#include <cmath>      // std::isfinite
#include <cstddef>  // std::size_t, std::ptrdiff_t
#include <cstdint>  // std::uint32_t
#include <tuple>    // std::tuple
#include <vector>   // std::vector

namespace {

using namespace strata::test;
namespace cpu = llama::kernels::cpu;
namespace gpu = llama::kernels::cuda;

// Glossary: B batch, T time, C channels, NH heads, N elements.

struct rmsnorm_shape {
    std::size_t B, T, C;
    double eps;
};

// C of 1, odd (7, 37), one warp's width (32), not a multiple of the 32-channel dweight tile (48, 37)
// and Llama's 4096; B*T of 1 to 1024 (not a multiple of the 8 rows of a block or the 32 row phases).
const std::vector<rmsnorm_shape> rmsnorm_shapes{{1, 1, 1, 1e-5},     {2, 5, 7, 1e-5},      {1, 7, 32, 1e-6},
                                                {3, 100, 48, 1e-5},  {2, 150, 37, 1e-6},  {1, 9, 4096, 1e-5},
                                                {4, 256, 4096, 1e-6}};

TEST_CASE("llama cuda rmsnorm forward and backward match the CPU; backward adds, repeats its bits, and "
          "gives the gain the same gradient when dinp is null") {
    if (skip_without_gpu()) return;
    // Thresholds:
    // - rstd 1e-6, out 1e-6: both sides sum x^2 in double (in another order) and round 1 / sqrt(...)
    //   to float, which lands at most one float ulp apart (6e-8 relative); out is the same float
    //   expression x * rstd * w on the same rstd.
    // - dinp 1e-6: the same double dot product per row in another order, rounded to float, then a
    //   few float operations (FMAs on the GPU): a few ulps of the largest element.
    // - dweight 1e-5: the CPU adds up to 1024 rows one by one in float, the GPU in 32 strided
    //   partials and then in order; both round, differently, by ~sqrt(rows) ulps of the sums.
    test_stream stream;
    std::uint32_t seed = 100;
    for (const auto [B, T, C, eps] : rmsnorm_shapes) {
        CAPTURE(B);
        CAPTURE(T);
        CAPTURE(C);
        CAPTURE(eps);
        const std::size_t rows = B * T;
        auto inp = random_floats(rows * C, ++seed, -2.0, 2.0);
        for (std::size_t c = 0; c < C; ++c) inp[c] *= 1e-3f;  // a row where eps matters
        const auto weight = random_floats(C, ++seed, 0.5, 1.5);
        const auto dout = random_floats(rows * C, ++seed);
        const auto dinp0 = random_floats(rows * C, ++seed);
        const auto dweight0 = random_floats(C, ++seed);

        std::vector<float> out(rows * C), rstd(rows), dinp = dinp0, dweight = dweight0;
        cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), B, T, C, eps);
        cpu::rmsnorm_backward<float>(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), rstd.data(),
                                     B, T, C);

        device_buffer<float> d_inp(inp), d_weight(weight), d_dout(dout), d_out(rows * C), d_rstd(rows), d_dinp(dinp0),
            d_dweight(dweight0);
        gpu::rmsnorm_forward(d_out.get(), d_rstd.get(), d_inp.get(), d_weight.get(), B, T, C, eps, stream);
        const auto e_out = normalized_error(d_out.download(), out);
        const auto e_rstd = normalized_error(d_rstd.download(), rstd);
        CHECK_MESSAGE(e_out.error < 1e-6, e_out.describe("out"));
        CHECK_MESSAGE(e_rstd.error < 1e-6, e_rstd.describe("rstd"));

        // Backward from the CPU's rstd, so both sides differentiate the same forward.
        d_rstd.upload(rstd);
        gpu::rmsnorm_backward(d_dinp.get(), d_dweight.get(), d_dout.get(), d_inp.get(), d_weight.get(), d_rstd.get(),
                              B, T, C, stream);
        const auto first_dinp = d_dinp.download(), first_dweight = d_dweight.download();
        const auto e_dinp = normalized_error(first_dinp, dinp);
        const auto e_dweight = normalized_error(first_dweight, dweight);
        CHECK_MESSAGE(e_dinp.error < 1e-6, e_dinp.describe("dinp"));
        CHECK_MESSAGE(e_dweight.error < 1e-5, e_dweight.describe("dweight"));

        // Deterministic: the same inputs give the same bits.
        d_dinp.upload(dinp0);
        d_dweight.upload(dweight0);
        gpu::rmsnorm_backward(d_dinp.get(), d_dweight.get(), d_dout.get(), d_inp.get(), d_weight.get(), d_rstd.get(),
                              B, T, C, stream);
        const auto repeated_dinp = first_difference(d_dinp.download(), first_dinp, "dinp (repeated)");
        const auto repeated_dweight = first_difference(d_dweight.download(), first_dweight, "dweight (repeated)");
        CHECK_MESSAGE(repeated_dinp.empty(), repeated_dinp);
        CHECK_MESSAGE(repeated_dweight.empty(), repeated_dweight);

        // dinp = null: the gain still gets its gradient, the same bits.
        d_dweight.upload(dweight0);
        gpu::rmsnorm_backward<float>(nullptr, d_dweight.get(), d_dout.get(), d_inp.get(), d_weight.get(), d_rstd.get(),
                                     B, T, C, stream);
        const auto without_dinp = first_difference(d_dweight.download(), first_dweight, "dweight (dinp = null)");
        CHECK_MESSAGE(without_dinp.empty(), without_dinp);
    }
}

// The elements of a (B, T, 3C) qkv that rope computes with the same float operations on the CPU
// and the GPU: v everywhere, and q and k at position 0 (cos 1, sin 0).
std::vector<float> exact_part(const std::vector<float>& x, std::size_t B, std::size_t T, std::size_t C) {
    std::vector<float> part;
    for (std::size_t bt = 0; bt < B * T; ++bt) {
        const auto row = x.begin() + static_cast<std::ptrdiff_t>(bt * 3 * C);
        part.insert(part.end(), bt % T == 0 ? row : row + static_cast<std::ptrdiff_t>(2 * C),
                    row + static_cast<std::ptrdiff_t>(3 * C));
    }
    return part;
}

struct rope_shape {
    std::size_t B, T, C, NH;
    double theta;
};

// Head sizes 2 (one pair), 4, 16, 64 and Llama's 128; positions up to 1023 (angles of ~1000
// radians); theta of Llama 2 (1e4) and Llama 3 (5e5).
const std::vector<rope_shape> rope_shapes{{2, 3, 4, 2, 1e4},      {2, 5, 12, 3, 1e4},     {1, 7, 8, 2, 5e5},
                                          {2, 33, 80, 5, 5e5},    {1, 300, 256, 4, 1e4},  {1, 1024, 2048, 16, 5e5}};

TEST_CASE("llama cuda rope forward and backward match the CPU; v and position 0 pass bit for bit") {
    if (skip_without_gpu()) return;
    // Threshold 1e-6 for q and k, forward and backward: both sides take the angle and its cos and
    // sin in double (CUDA's pow, sin, cos are within 2 ulps of glibc's in double) and round cos and
    // sin to float, so they agree to at most one float ulp; each output is two products and a sum
    // of values below 1 (an FMA on the GPU): a few float ulps (6e-8 each).
    // v (a copy forward, one addition backward) and position 0 (cos 1, sin 0 exactly) are the same
    // float operations on both sides: bitwise.
    test_stream stream;
    std::uint32_t seed = 200;
    for (const auto [B, T, C, NH, theta] : rope_shapes) {
        CAPTURE(B);
        CAPTURE(T);
        CAPTURE(C);
        CAPTURE(NH);
        CAPTURE(theta);
        const std::size_t n = B * T * 3 * C;
        const auto qkv = random_floats(n, ++seed);
        const auto dout = random_floats(n, ++seed);
        const auto dqkv0 = random_floats(n, ++seed);

        std::vector<float> out(n), dqkv = dqkv0;
        cpu::rope_forward(out.data(), qkv.data(), B, T, C, NH, theta);
        cpu::rope_backward(dqkv.data(), dout.data(), B, T, C, NH, theta);

        device_buffer<float> d_qkv(qkv), d_dout(dout), d_out(n), d_dqkv(dqkv0);
        gpu::rope_forward(d_out.get(), d_qkv.get(), B, T, C, NH, theta, stream);
        gpu::rope_backward(d_dqkv.get(), d_dout.get(), B, T, C, NH, theta, stream);
        const auto g_out = d_out.download(), g_dqkv = d_dqkv.download();
        const auto e_out = normalized_error(g_out, out);
        const auto e_dqkv = normalized_error(g_dqkv, dqkv);
        CHECK_MESSAGE(e_out.error < 1e-6, e_out.describe("out"));
        CHECK_MESSAGE(e_dqkv.error < 1e-6, e_dqkv.describe("dqkv"));

        const auto exact_out = first_difference(exact_part(g_out, B, T, C), exact_part(out, B, T, C), "out");
        const auto exact_dqkv = first_difference(exact_part(g_dqkv, B, T, C), exact_part(dqkv, B, T, C), "dqkv");
        CHECK_MESSAGE(exact_out.empty(), exact_out << " (v, or q and k at position 0)");
        CHECK_MESSAGE(exact_dqkv.empty(), exact_dqkv << " (v, or q and k at position 0)");
    }
}

TEST_CASE("llama cuda rope refuses heads of an odd size before launching anything") {
    // No GPU needed: the shape is checked on the host, as the CPU kernel does.
    float* none = nullptr;
    CHECK_THROWS_WITH_AS(gpu::rope_forward(none, none, 2, 5, 9, 3, 1e4, nullptr),
                         doctest::Contains("heads of an even size"), strata::error);
    CHECK_THROWS_WITH_AS(gpu::rope_backward(none, none, 2, 5, 12, 0, 1e4, nullptr),
                         doctest::Contains("heads of an even size"), strata::error);
}

TEST_CASE("llama cuda rope with llama3 frequencies matches the CPU") {
    if (skip_without_gpu()) return;
    // Threshold 1e-6, as plain rope: rope_params::inv_freq is the same double expression on both
    // sides (__host__ __device__), then the same rotation.
    test_stream stream;
    std::uint32_t seed = 250;
    const llama::kernels::rope_params llama31(500000.0, 8.0, 1.0, 4.0, 8192.0), small(100.0, 8.0, 1.0, 4.0, 32.0);
    for (const auto& [C, NH, rope] : {std::tuple{std::size_t{256}, std::size_t{2}, llama31},
                                      std::tuple{std::size_t{12}, std::size_t{2}, small}}) {
        CAPTURE(C);
        const std::size_t B = 2, T = 300, n = B * T * 3 * C;
        const auto qkv = random_floats(n, ++seed), dout = random_floats(n, ++seed), dqkv0 = random_floats(n, ++seed);
        std::vector<float> out(n), dqkv = dqkv0;
        cpu::rope_forward(out.data(), qkv.data(), B, T, C, NH, rope);
        cpu::rope_backward(dqkv.data(), dout.data(), B, T, C, NH, rope);
        device_buffer<float> d_qkv(qkv), d_dout(dout), d_out(n), d_dqkv(dqkv0);
        gpu::rope_forward(d_out.get(), d_qkv.get(), B, T, C, NH, rope, stream);
        gpu::rope_backward(d_dqkv.get(), d_dout.get(), B, T, C, NH, rope, stream);
        const auto e_out = normalized_error(d_out.download(), out);
        const auto e_dqkv = normalized_error(d_dqkv.download(), dqkv);
        CHECK_MESSAGE(e_out.error < 1e-6, e_out.describe("out"));
        CHECK_MESSAGE(e_dqkv.error < 1e-6, e_dqkv.describe("dqkv"));
    }
}

TEST_CASE("llama cuda rope_rotate (decoding) matches the CPU in place at absolute positions; position 0 bit for bit") {
    if (skip_without_gpu()) return;
    // Threshold 1e-6, as rope_forward: the same angle, cos and sin in double rounded to float, and
    // two products and a sum per element (an FMA on the GPU). At position 0 (cos 1, sin 0) and in
    // the channels it leaves alone (v, the spare channel of a strided row) both sides are exact.
    test_stream stream;
    std::uint32_t seed = 260;
    const llama::kernels::rope_params plain(10000.0), llama31(500000.0, 8.0, 1.0, 4.0, 8192.0);
    struct rotate_shape {
        std::size_t rows, heads, HS, first;
        llama::kernels::rope_params rope;
    };
    // a prompt from position 0 (GQA: 6 + 2 heads of 4), one row at position 1000, Llama 3.1's 40 heads of 128
    for (const auto& [rows, heads, HS, first, rope] :
         {rotate_shape{7, 8, 4, 0, plain}, rotate_shape{1, 8, 4, 1000, plain}, rotate_shape{3, 40, 128, 4093, llama31}}) {
        CAPTURE(rows);
        CAPTURE(heads);
        CAPTURE(first);
        const std::size_t stride = heads * HS + 2 * HS + 1;  // rotated heads, then v heads, then one spare
        const auto x = random_floats(rows * stride, ++seed);
        std::vector<float> want = x;
        cpu::rope_rotate(want.data(), rows, stride, heads, HS, first, rope);
        device_buffer<float> d_x(x);
        gpu::rope_rotate(d_x.get(), rows, stride, heads, HS, first, rope, stream);
        const auto got = d_x.download();
        const auto e = normalized_error(got, want);
        CHECK_MESSAGE(e.error < 1e-6, e.describe("rotated rows"));
        for (std::size_t r = 0; r < rows; ++r) {
            const auto row = [&](const std::vector<float>& v, std::size_t from, std::size_t to) {
                return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(r * stride + from),
                                          v.begin() + static_cast<std::ptrdiff_t>(r * stride + to));
            };
            const auto kept = first_difference(row(got, heads * HS, stride), row(x, heads * HS, stride), "kept channels");
            CHECK_MESSAGE(kept.empty(), kept);
            if (first + r == 0) {
                const auto at_zero = first_difference(row(got, 0, stride), row(want, 0, stride), "position 0");
                CHECK_MESSAGE(at_zero.empty(), at_zero);
            }
        }
    }
}

TEST_CASE("llama cuda expand_kv forward and backward match the CPU bit for bit") {
    if (skip_without_gpu()) return;
    // Copies forward; backward adds each group's heads in head order in float, as the CPU does,
    // then one addition: the same float operations, so bitwise.
    test_stream stream;
    std::uint32_t seed = 270;
    struct kv_shape {
        std::size_t B, T, NH, NKV, HS;
    };
    for (const auto [B, T, NH, NKV, HS] : {kv_shape{1, 1, 2, 1, 2}, kv_shape{2, 5, 6, 2, 3}, kv_shape{2, 37, 32, 8, 128},
                                           kv_shape{1, 300, 12, 1, 64}}) {
        CAPTURE(NH);
        CAPTURE(NKV);
        CAPTURE(HS);
        const std::size_t A = NH * HS, QKV = (NH + 2 * NKV) * HS, rows = B * T;
        const auto qkv = random_floats(rows * QKV, ++seed), dout = random_floats(rows * 3 * A, ++seed);
        const auto dqkv0 = random_floats(rows * QKV, ++seed);
        std::vector<float> out(rows * 3 * A), dqkv = dqkv0;
        cpu::expand_kv_forward(out.data(), qkv.data(), B, T, NH, NKV, HS);
        cpu::expand_kv_backward(dqkv.data(), dout.data(), B, T, NH, NKV, HS);
        device_buffer<float> d_qkv(qkv), d_dout(dout), d_out(rows * 3 * A), d_dqkv(dqkv0);
        gpu::expand_kv_forward(d_out.get(), d_qkv.get(), B, T, NH, NKV, HS, stream);
        gpu::expand_kv_backward(d_dqkv.get(), d_dout.get(), B, T, NH, NKV, HS, stream);
        const auto out_diff = first_difference(d_out.download(), out, "out");
        const auto dqkv_diff = first_difference(d_dqkv.download(), dqkv, "dqkv");
        CHECK_MESSAGE(out_diff.empty(), out_diff);
        CHECK_MESSAGE(dqkv_diff.empty(), dqkv_diff);
    }
}

TEST_CASE("llama cuda expand_kv refuses key/value heads that do not divide the query heads") {
    float* none = nullptr;
    CHECK_THROWS_WITH_AS(gpu::expand_kv_forward(none, none, 1, 1, 6, 4, 2, nullptr),
                         doctest::Contains("num_key_value_heads must divide"), strata::error);
}

TEST_CASE("llama cuda swiglu forward and backward match the CPU, also where exp overflows") {
    if (skip_without_gpu()) return;
    // Thresholds:
    // - out 1e-6, dup 1e-6: silu(g) = g / (1 + exp(-g)) with CUDA's expf (2 ulps) against glibc's
    //   (< 1 ulp), then one or two products: a few float ulps of the largest element.
    // - dgate 1e-5: silu'(g) = s (1 + g (1 - s)) multiplies the sigmoid's few-ulp difference by g
    //   (|g| up to 6 here), and 1 - s cancels as s nears 1.
    test_stream stream;
    std::uint32_t seed = 300;
    for (const std::size_t N : {std::size_t{1}, std::size_t{37}, std::size_t{4099}, std::size_t{(1u << 20) + 3}}) {
        CAPTURE(N);
        auto gate = random_floats(N, ++seed, -6.0, 6.0);
        // exp(-g) overflows to infinity for g < -88: the sigmoid is then 0, on both sides, not NaN
        const float extremes[] = {-100.0f, 100.0f, -30.0f, 30.0f};
        for (std::size_t i = 0; i < N && i < 4; ++i) gate[i] = extremes[i];
        const auto up = random_floats(N, ++seed, -2.0, 2.0);
        const auto dout = random_floats(N, ++seed);
        const auto dgate0 = random_floats(N, ++seed);
        const auto dup0 = random_floats(N, ++seed);

        std::vector<float> out(N), dgate = dgate0, dup = dup0;
        cpu::swiglu_forward(out.data(), gate.data(), up.data(), N);
        cpu::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), N);

        device_buffer<float> d_gate(gate), d_up(up), d_dout(dout), d_out(N), d_dgate(dgate0), d_dup(dup0);
        gpu::swiglu_forward(d_out.get(), d_gate.get(), d_up.get(), N, stream);
        gpu::swiglu_backward(d_dgate.get(), d_dup.get(), d_dout.get(), d_gate.get(), d_up.get(), N, stream);
        const auto e_out = normalized_error(d_out.download(), out);
        const auto e_dgate = normalized_error(d_dgate.download(), dgate);
        const auto e_dup = normalized_error(d_dup.download(), dup);
        CHECK_MESSAGE(e_out.error < 1e-6, e_out.describe("out"));
        CHECK_MESSAGE(e_dgate.error < 1e-5, e_dgate.describe("dgate"));
        CHECK_MESSAGE(e_dup.error < 1e-6, e_dup.describe("dup"));
    }
}

TEST_CASE("llama cuda kernels: speed at Llama-7B shapes (B*T = 8192, C = 4096, H = 11008)") {
    if (skip_without_gpu()) return;
    test_stream stream;
    const std::size_t B = 8, T = 1024, C = 4096, NH = 32, H = 11008, rows = B * T;
    device_buffer<float> x(rows * C), w(C), y(rows * C), rstd(rows), dy(rows * C), dx(rows * C), dw(C),
        qkv(rows * 3 * C), qkv_rope(rows * 3 * C), gate(rows * H), up(rows * H), act(rows * H), dgate(rows * H),
        dup(rows * H);
    fill_pattern(x.get(), rows * C, 1);
    fill_pattern(w.get(), C, 2);
    fill_pattern(dy.get(), rows * C, 3);
    fill_pattern(qkv.get(), rows * 3 * C, 4);
    fill_pattern(gate.get(), rows * H, 5);
    fill_pattern(up.get(), rows * H, 6);
    const double norm_fwd = time_ms(stream, 20, [&] {
        gpu::rmsnorm_forward(y.get(), rstd.get(), x.get(), w.get(), B, T, C, 1e-5, stream);
    });
    const double norm_bwd = time_ms(stream, 20, [&] {
        gpu::rmsnorm_backward(dx.get(), dw.get(), dy.get(), x.get(), w.get(), rstd.get(), B, T, C, stream);
    });
    const double rope =
        time_ms(stream, 20, [&] { gpu::rope_forward(qkv_rope.get(), qkv.get(), B, T, C, NH, 1e4, stream); });
    const double swiglu_fwd =
        time_ms(stream, 20, [&] { gpu::swiglu_forward(act.get(), gate.get(), up.get(), rows * H, stream); });
    const double swiglu_bwd = time_ms(stream, 20, [&] {
        gpu::swiglu_backward(dgate.get(), dup.get(), act.get(), gate.get(), up.get(), rows * H, stream);
    });
    // Bytes from DRAM: rmsnorm forward reads x, writes y; backward reads x, dy, dx, writes dx, then
    // reads x and dy again; rope reads and writes 3C per row; swiglu 3 and 7 tensors of B*T*H.
    const double n = double(rows * C), m = double(rows * H);
    MESSAGE("rmsnorm forward " << norm_fwd << " ms (" << gigabytes_per_second(8 * n, norm_fwd) << " GB/s), backward "
                               << norm_bwd << " ms (" << gigabytes_per_second(24 * n, norm_bwd) << " GB/s); rope "
                               << rope << " ms (" << gigabytes_per_second(24 * n, rope) << " GB/s); swiglu forward "
                               << swiglu_fwd << " ms (" << gigabytes_per_second(12 * m, swiglu_fwd)
                               << " GB/s), backward " << swiglu_bwd << " ms ("
                               << gigabytes_per_second(28 * m, swiglu_bwd) << " GB/s)");
    // The timing itself is not asserted; the timed runs must have run and produced numbers.
    for (const double ms : {norm_fwd, norm_bwd, rope, swiglu_fwd, swiglu_bwd}) CHECK(ms > 0.0);
    auto finite = [](const std::vector<float>& v) {
        return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
    };
    CHECK(finite(y.download()));
    CHECK(finite(dx.download()));
    CHECK(finite(qkv_rope.download()));
    CHECK(finite(act.download()));
    CHECK(finite(dgate.download()));
    CHECK(finite(dup.download()));
}

}  // namespace
