// cuda attention: forward (out, lse) and backward (dqkv, accumulated) against the CPU kernel, the
// oracle, on odd and GPT-2 shapes; large-magnitude scores; buffers off 16-byte alignment; bitwise
// reproducibility; the errors it throws; and its speed at the GPT-2 124M shape.
//
// Glossary: B batch, T time, C channels, NH heads, HS head size (C / NH).
#include <algorithm>  // std::max, std::all_of
#include <cmath>      // std::abs, std::exp, std::log, std::sqrt, std::isfinite
#include <cstddef>    // std::size_t
#include <cstring>    // std::memcmp
#include <random>     // std::mt19937, std::uniform_real_distribution
#include <string>     // std::string
#include <vector>     // std::vector

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE, CAPTURE, MESSAGE, INFO

#include "support/skip.hpp"  // strata::test::skip

#include <strata/backend/cuda/check.hpp>     // strata::cuda::check, strata::cuda::device_count
#include <strata/core/error.hpp>             // strata::error
#include <strata/kernels/cpu/attention.hpp>  // cpu::attention_forward, cpu::attention_backward
#include <strata/kernels/cuda/attention.cuh> // cuda::attention_forward, cuda::attention_backward
#include <strata/kernels/cuda/attention_backward.cuh>  // attention_detail::wide (the placement case)

#include <cuda_runtime.h>  // cudaMalloc, cudaMemcpy, cudaEvent_t

namespace {

namespace cpu = strata::kernels::cpu;
namespace gpu = strata::kernels::cuda;
using strata::cuda::check;

// Owns n floats of device memory, starting `offset` floats past a cudaMalloc (256-byte aligned)
// address: offset 1 makes every row of a GPT-2 shape 4 bytes off 16-byte alignment.
class device_floats {
public:
    explicit device_floats(std::size_t n, std::size_t offset = 0) : m_n(n) {
        check(cudaMalloc(&m_allocation, (n + offset + 1) * sizeof(float)), "cudaMalloc");
        m_data = m_allocation + offset;
    }
    explicit device_floats(const std::vector<float>& host, std::size_t offset = 0) : device_floats(host.size(), offset) {
        upload(host);
    }
    device_floats(const device_floats&) = delete;
    device_floats& operator=(const device_floats&) = delete;
    ~device_floats() { cudaFree(m_allocation); }

    float* data() { return m_data; }
    void upload(const std::vector<float>& host) {
        check(cudaMemcpy(m_data, host.data(), m_n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy to device");
    }
    std::vector<float> download() const {
        std::vector<float> host(m_n);
        check(cudaMemcpy(host.data(), m_data, m_n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
        return host;
    }

private:
    float* m_allocation = nullptr;
    float* m_data = nullptr;
    std::size_t m_n;
};

std::vector<float> random_floats(std::size_t n, unsigned seed, float amplitude = 1.f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-amplitude, amplitude);
    std::vector<float> v(n);
    for (float& x : v) x = uniform(rng);
    return v;
}

double max_abs(const std::vector<double>& v) {
    double m = 0.0;
    for (double x : v) m = std::max(m, std::abs(x));
    return m;
}

// max |got - expected| / max(1e-30, scale): the error relative to the tensor's size, scale
// (normally max |expected|). Any non-finite value of got counts as an infinite error.
double normalized_error(const std::vector<float>& got, const std::vector<double>& expected, double scale) {
    double worst = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        worst = std::max(worst, std::abs(static_cast<double>(got[i]) - expected[i]));
    }
    return worst / std::max(1e-30, scale);
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

struct shape {
    std::size_t B, T, C, NH;
};

// Log-sum-exp of every query row's scaled causal scores, in double: (B, NH, T).
std::vector<double> reference_lse(const std::vector<float>& qkv, const shape& s) {
    const std::size_t HS = s.C / s.NH;
    const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
    std::vector<double> lse(s.B * s.NH * s.T), scores(s.T);
    for (std::size_t b = 0; b < s.B; ++b)
        for (std::size_t h = 0; h < s.NH; ++h)
            for (std::size_t t = 0; t < s.T; ++t) {
                const float* q = &qkv[(b * s.T + t) * 3 * s.C + h * HS];
                double max_score = -INFINITY;
                for (std::size_t u = 0; u <= t; ++u) {
                    const float* k = &qkv[(b * s.T + u) * 3 * s.C + s.C + h * HS];
                    double dot = 0.0;
                    for (std::size_t i = 0; i < HS; ++i) dot += static_cast<double>(q[i]) * k[i];
                    scores[u] = dot * scale;
                    max_score = std::max(max_score, scores[u]);
                }
                double sum = 0.0;
                for (std::size_t u = 0; u <= t; ++u) sum += std::exp(scores[u] - max_score);
                lse[(b * s.NH + h) * s.T + t] = max_score + std::log(sum);
            }
    return lse;
}

// Thresholds on normalized errors (see normalized_error). Both sides are FP32 with a different
// summation order (GPU: 4-channel FMA chains and online rescaling per 64-key tile; CPU: Eigen's
// blocked GEMM and a two-pass softmax), so each carries rounding of a few 1e-7 relative per
// reduction, compounded over up to 2048 keys. A real bug (a mask off by one, a missed rescale, a
// wrong head offset) moves them by 1e-2 or more. Each bound below is about 10x the largest error
// measured on an H200 over all the shapes of this file (nvcc 13, seeds as written).
struct tolerances {
    double out, lse, dqkv;
};
// qkv in [-1, 1]: scores of order 1. out is one softmax-weighted average (measured <= 1.9e-7);
// lse is compared with a double-precision reference, so its error is that of the FP32 scores
// alone (<= 1.5e-7); dqkv goes through dS = P (dP - D), where dP and D cancel, then a second
// reduction over up to 2048 keys or queries (<= 2.4e-6; 6e-6 for T = 1's vanishing dq, dk).
constexpr tolerances unit_scores{5e-6, 2e-6, 5e-5};
// qkv * 8: scores of order 20 (64x larger), so the FP32 score rounding, ~eps * |q||k|, is 64x
// larger in absolute terms and P = exp(S - lse) inherits it as a relative error (measured: out
// <= 1.4e-5, lse <= 4e-7, dqkv <= 2.6e-5).
constexpr tolerances large_scores{2e-4, 5e-6, 3e-4};

// Runs both kernels on one shape and compares them with the CPU kernel; checks each error against
// tol and that a second backward run gives identical bits. offset shifts every device buffer by
// that many floats (1: the kernels must fall back from 16-byte to 4-byte copies).
void compare_with_cpu(const shape& s, float amplitude, const tolerances& tol, unsigned seed, std::size_t offset = 0) {
    INFO("B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH << " qkv amplitude " << amplitude
              << " offset " << offset);
    const std::size_t BT = s.B * s.T, C = s.C;
    const std::vector<float> qkv = random_floats(BT * 3 * C, seed, amplitude);
    const std::vector<float> dout = random_floats(BT * C, seed + 1);
    const std::vector<float> dqkv_start = random_floats(BT * 3 * C, seed + 2);  // proves +=

    // The oracle. Its backward starts from zero: g is the gradient alone, dqkv_start + g the target.
    std::vector<float> out_cpu(BT * C), lse_cpu(cpu::attention_saved(s.B, s.T, s.NH)), g_cpu(BT * 3 * C, 0.f);
    cpu::attention_forward(out_cpu.data(), lse_cpu.data(), qkv.data(), s.B, s.T, C, s.NH);
    cpu::attention_backward(g_cpu.data(), lse_cpu.data(), dout.data(), qkv.data(), s.B, s.T, C, s.NH);
    const std::vector<double> lse_ref = reference_lse(qkv, s);

    device_floats d_qkv(qkv, offset), d_dout(dout, offset), d_out(BT * C, offset);
    device_floats d_lse(gpu::attention_saved(s.B, s.T, s.NH), offset);
    device_floats d_dqkv(dqkv_start, offset), d_dqkv_again(dqkv_start, offset);
    gpu::attention_forward(d_out.data(), d_lse.data(), d_qkv.data(), s.B, s.T, C, s.NH, nullptr);
    gpu::attention_backward(d_dqkv.data(), d_lse.data(), d_dout.data(), d_out.data(), d_qkv.data(), s.B, s.T, C,
                            s.NH, nullptr);
    gpu::attention_backward(d_dqkv_again.data(), d_lse.data(), d_dout.data(), d_out.data(), d_qkv.data(), s.B, s.T,
                            C, s.NH, nullptr);
    check(cudaDeviceSynchronize(), "attention kernels");

    const std::vector<double> out_ref = to_double(out_cpu);
    const double out_error = normalized_error(d_out.download(), out_ref, max_abs(out_ref));
    const double lse_error = normalized_error(d_lse.download(), lse_ref, max_abs(lse_ref));

    // dq, dk, dv apart: each is normalized by its own gradient's size (they differ by an order of
    // magnitude), not by dqkv_start, which would hide their errors. A part whose exact gradient
    // vanishes (T = 1: the softmax of a single key is constant, so dq = dk = 0, where the CPU's
    // double dot gives exact zeros and the GPU's dP - D leaves FP32 rounding, ~6e-8) is measured
    // against 1% of the largest part instead.
    const std::vector<float> dqkv = d_dqkv.download();
    std::vector<float> got[3];
    std::vector<double> expected[3], gradient[3];
    for (std::size_t row = 0; row < BT; ++row)
        for (std::size_t part = 0; part < 3; ++part)
            for (std::size_t c = 0; c < C; ++c) {
                const std::size_t i = row * 3 * C + part * C + c;
                got[part].push_back(dqkv[i]);
                expected[part].push_back(static_cast<double>(dqkv_start[i]) + g_cpu[i]);
                gradient[part].push_back(g_cpu[i]);
            }
    const double largest_part = std::max({max_abs(gradient[0]), max_abs(gradient[1]), max_abs(gradient[2])});
    double dqkv_error[3];
    for (std::size_t part = 0; part < 3; ++part)
        dqkv_error[part] =
            normalized_error(got[part], expected[part], std::max(max_abs(gradient[part]), 0.01 * largest_part));
    MESSAGE("B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH << " x" << amplitude
                 << std::string(offset ? " misaligned" : "") << ": normalized errors out " << out_error << ", lse " << lse_error << ", dq " << dqkv_error[0]
                 << ", dk " << dqkv_error[1] << ", dv " << dqkv_error[2]);
    CHECK(out_error < tol.out);
    CHECK(lse_error < tol.lse);
    CHECK(dqkv_error[0] < tol.dqkv);
    CHECK(dqkv_error[1] < tol.dqkv);
    CHECK(dqkv_error[2] < tol.dqkv);

    const std::vector<float> again = d_dqkv_again.download();
    CHECK_MESSAGE(std::memcmp(dqkv.data(), again.data(), dqkv.size() * sizeof(float)) == 0,
                  "two backward runs on the same inputs differ");
}

TEST_CASE("cuda attention matches the CPU kernel: out, lse and accumulated dqkv, odd and GPT-2 shapes") {
    if (strata::cuda::device_count() == 0) { strata::test::skip("cuda: no GPU on this machine"); return; }
    // T not a multiple of the 64-row tile, head sizes padded to 16 (HS = 1, 10, 12, 16), 32 (24,
    // 32), 64 (GPT-2 small and XL) and 128 (100, 128), T = 1, and T = 2048.
    const shape shapes[] = {{2, 7, 40, 4},     {1, 33, 36, 3},   {2, 64, 48, 2},    {1, 300, 768, 12},
                            {2, 1024, 768, 12}, {1, 2048, 128, 2}, {1, 129, 1600, 25}, {3, 1, 40, 4},
                            {1, 5, 3, 3},      {2, 65, 64, 4},   {1, 97, 128, 4},   {1, 200, 400, 4},
                            {1, 130, 256, 2}};
    unsigned seed = 100;
    for (const shape& s : shapes) compare_with_cpu(s, 1.f, unit_scores, seed += 10);
}

TEST_CASE("cuda attention online softmax holds with large-magnitude scores (qkv * 8)") {
    if (strata::cuda::device_count() == 0) { strata::test::skip("cuda: no GPU on this machine"); return; }
    // One shape per padded head size: 16, 32, 64, 128.
    compare_with_cpu({2, 7, 40, 4}, 8.f, large_scores, 6);
    compare_with_cpu({1, 300, 768, 12}, 8.f, large_scores, 7);
    compare_with_cpu({2, 64, 48, 2}, 8.f, large_scores, 8);
    compare_with_cpu({1, 200, 400, 4}, 8.f, large_scores, 9);
}

TEST_CASE("cuda attention takes buffers off 16-byte alignment (4-byte copies) for every padded head size") {
    if (strata::cuda::device_count() == 0) { strata::test::skip("cuda: no GPU on this machine"); return; }
    compare_with_cpu({1, 33, 48, 3}, 1.f, unit_scores, 21, 1);    // HS 16
    compare_with_cpu({2, 64, 48, 2}, 1.f, unit_scores, 22, 1);    // HS 24 -> 32
    compare_with_cpu({1, 300, 768, 12}, 1.f, unit_scores, 23, 1); // HS 64
    compare_with_cpu({1, 130, 256, 2}, 1.f, unit_scores, 24, 1);  // HS 128
}

TEST_CASE("cuda attention forward is bitwise reproducible") {
    if (strata::cuda::device_count() == 0) { strata::test::skip("cuda: no GPU on this machine"); return; }
    const shape s{2, 1024, 768, 12};
    device_floats qkv(random_floats(s.B * s.T * 3 * s.C, 3));
    device_floats out1(s.B * s.T * s.C), out2(s.B * s.T * s.C);
    device_floats lse1(gpu::attention_saved(s.B, s.T, s.NH)), lse2(gpu::attention_saved(s.B, s.T, s.NH));
    gpu::attention_forward(out1.data(), lse1.data(), qkv.data(), s.B, s.T, s.C, s.NH, nullptr);
    gpu::attention_forward(out2.data(), lse2.data(), qkv.data(), s.B, s.T, s.C, s.NH, nullptr);
    const std::vector<float> o1 = out1.download(), o2 = out2.download(), l1 = lse1.download(), l2 = lse2.download();
    CHECK(std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float)) == 0);
}

TEST_CASE("cuda attention refuses head sizes above 128 and heads that do not split C") {
    if (strata::cuda::device_count() == 0) { strata::test::skip("cuda: no GPU on this machine"); return; }
    // The sizes are checked before any launch, so null pointers never reach a kernel.
    float* none = nullptr;
    CHECK_THROWS_AS(gpu::attention_forward(none, none, none, 1, 8, 258, 2, nullptr), strata::error);  // HS 129
    CHECK_THROWS_AS(gpu::attention_backward(none, none, none, none, none, 1, 8, 258, 2, nullptr), strata::error);
    CHECK_THROWS_AS(gpu::attention_forward(none, none, none, 1, 8, 10, 3, nullptr), strata::error);  // 10 % 3
    CHECK_THROWS_AS(gpu::attention_backward(none, none, none, none, none, 1, 8, 10, 0, nullptr), strata::error);
}

TEST_CASE("cuda attention speed at the GPT-2 124M shape (B=8, T=1024, C=768, NH=12)") {
    if (strata::cuda::device_count() == 0) { strata::test::skip("cuda: no GPU on this machine"); return; }
    const shape s{8, 1024, 768, 12};
    const std::size_t BT = s.B * s.T;
    device_floats qkv(random_floats(BT * 3 * s.C, 11)), dout(random_floats(BT * s.C, 12));
    device_floats out(BT * s.C), lse(gpu::attention_saved(s.B, s.T, s.NH)), dqkv(BT * 3 * s.C);
    check(cudaMemset(dqkv.data(), 0, BT * 3 * s.C * sizeof(float)), "cudaMemset");
    auto forward = [&] { gpu::attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, nullptr); };
    auto backward_dkdv = [&] {
        gpu::attention_backward_dkdv(dqkv.data(), lse.data(), dout.data(), out.data(), qkv.data(), s.B, s.T, s.C,
                                     s.NH, nullptr);
    };
    auto backward_dq = [&] {
        gpu::attention_backward_dq(dqkv.data(), lse.data(), dout.data(), out.data(), qkv.data(), s.B, s.T, s.C, s.NH,
                                   nullptr);
    };
    auto backward = [&] {
        gpu::attention_backward(dqkv.data(), lse.data(), dout.data(), out.data(), qkv.data(), s.B, s.T, s.C, s.NH,
                                nullptr);
    };
    // One launch of each first, in this order (a profiler can take the first three launches).
    forward();
    backward_dkdv();
    backward_dq();
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    auto milliseconds = [&](auto&& launch) {
        constexpr int warmup = 3, reps = 20;
        for (int i = 0; i < warmup; ++i) launch();
        check(cudaEventRecord(start), "cudaEventRecord");
        for (int i = 0; i < reps; ++i) launch();
        check(cudaEventRecord(stop), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float ms = 0.f;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        return static_cast<double>(ms) / reps;
    };
    const double forward_ms = milliseconds(forward);
    const double dkdv_ms = milliseconds(backward_dkdv);
    const double dq_ms = milliseconds(backward_dq);
    const double backward_ms = milliseconds(backward);
    check(cudaEventDestroy(start), "cudaEventDestroy");
    check(cudaEventDestroy(stop), "cudaEventDestroy");
    // Causal FLOPs: S = Q K^T and O = P V over the lower triangle, 2 * (2 * T^2 / 2 * HS) each
    // head. Backward counts five such products (S again, dP, dV, dK, dQ): 2.5x the forward. (The
    // kernels execute seven: dk/dv recomputes S, dP and dq recomputes S, dP, as no atomics are used.)
    const double HS = static_cast<double>(s.C / s.NH), T = static_cast<double>(s.T);
    const double forward_flops = 2.0 * s.B * s.NH * T * T * HS;
    MESSAGE("attention B=8 T=1024 C=768 NH=12 (FP32): forward " << forward_ms << " ms, "
            << forward_flops / forward_ms * 1e-9 << " TFLOP/s; backward " << backward_ms << " ms (dk/dv "
            << dkdv_ms << " ms, dq " << dq_ms << " ms), " << 2.5 * forward_flops / backward_ms * 1e-9
            << " TFLOP/s counting 5 GEMMs, " << 3.5 * forward_flops / backward_ms * 1e-9
            << " TFLOP/s executed (7), " << backward_ms / forward_ms << "x the forward");
    // What the timed runs produced must still be numbers (the timing itself is not asserted).
    const std::vector<float> timed_out = out.download();
    CHECK(std::all_of(timed_out.begin(), timed_out.end(), [](float x) { return std::isfinite(x); }));
}

// The placement of threads (host arithmetic: runs without a GPU). Each block's threads cover its
// grid once; in every warp lanes n, n^1 share ty and n, n^2 share tx (a float4 read of either
// factor then takes 2 shared-memory wavefronts, not 4); a warp's 4 ty and 8 tx are consecutive
// from multiples of 4 and 8 (the bank arguments of the tiles' strides); and row_sum's lanes (bits
// 0, 2, 3) are the 8 tx of one ty, in tx bit order.
template <int grid_x>
void check_placement(int threads) {
    namespace d = gpu::attention_detail;
    CAPTURE(grid_x);
    const int rows = threads / grid_x;
    std::vector<int> seen(static_cast<std::size_t>(threads), 0);
    for (int t = 0; t < threads; ++t) {
        const d::thread_place p = d::place<grid_x>(t);
        REQUIRE(p.ty >= 0);
        REQUIRE(p.ty < rows);
        REQUIRE(p.tx >= 0);
        REQUIRE(p.tx < grid_x);
        ++seen[static_cast<std::size_t>(p.ty * grid_x + p.tx)];
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    for (int warp = 0; warp < threads / 32; ++warp) {
        const d::thread_place first = d::place<grid_x>(32 * warp);
        CHECK(first.ty % 4 == 0);
        CHECK(first.tx % 8 == 0);
        for (int lane = 0; lane < 32; ++lane) {
            CAPTURE(warp);
            CAPTURE(lane);
            const d::thread_place p = d::place<grid_x>(32 * warp + lane);
            CHECK(p.ty == d::place<grid_x>(32 * warp + (lane ^ 1)).ty);
            CHECK(p.tx == d::place<grid_x>(32 * warp + (lane ^ 2)).tx);
            CHECK(p.ty - first.ty < 4);
            CHECK(p.tx - first.tx < 8);
            const int bits[3] = {1, 4, 8};  // row_sum's shuffles, tx bit 0, 1, 2
            for (int b = 0; b < 3; ++b) {
                const d::thread_place q = d::place<grid_x>(32 * warp + (lane ^ bits[b]));
                CHECK(q.ty == p.ty);
                CHECK((q.tx ^ p.tx) == (1 << b));
            }
        }
    }
}

TEST_CASE("cuda attention's thread placement: a grid covered once, lanes paired for shared-memory reads") {
    check_placement<gpu::attention_detail::tile_x>(gpu::attention_detail::threads);
    check_placement<gpu::attention_detail::wide::grid_x>(gpu::attention_detail::wide::threads);
}

}  // namespace
