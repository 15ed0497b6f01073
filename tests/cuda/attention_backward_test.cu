// cuda attention backward by key tiles (kernels/cuda/attention_backward.cuh): both dq orders
// (partials, ordered) against the CPU kernel (the oracle) and against attention.cuh's two-kernel
// backward, at T = 1 .. 8192, odd lengths, every padded head size, grouped-query heads; bitwise
// reproducibility, the two orders' identical bits, at head size 64 the wide and the 128-thread
// blocks' identical bits, and the errors it throws.
//
// Glossary: B batch, T time, NH query heads, NKV key/value heads, HS head size, A = NH HS,
// KV = NKV HS. GQA's reference: k and v expanded to NH heads (head h reads kv head h / (NH / NKV)),
// the multi-head kernels run on that, and dk, dv summed back over each group's heads.
#include <algorithm>  // std::max
#include <cmath>      // std::abs, std::isfinite
#include <cstddef>    // std::size_t, std::byte
#include <cstdint>    // std::uintptr_t
#include <cstring>    // std::memcmp
#include <string>     // std::string
#include <vector>     // std::vector

#include <doctest/doctest.h>  // TEST_CASE, CHECK, MESSAGE, INFO

#include "cuda_test_util.cuh"  // device_buffer, random_floats, skip_without_gpu

#include <strata/core/error.hpp>                      // strata::error
#include <strata/kernels/cpu/attention.hpp>           // cpu::attention_forward, cpu::attention_backward
#include <strata/kernels/cuda/attention_backward.cuh> // cuda::attention_backward_key_tiles


namespace attention_backward_test {

namespace cpu = strata::kernels::cpu;
namespace gpu = strata::kernels::cuda;
using gpu::attention_backward_algo;

using strata::test::device_buffer;
using strata::test::random_floats;
using strata::test::skip_without_gpu;

struct shape {
    std::size_t B, T, NH, NKV, HS;
    std::size_t A() const { return NH * HS; }
    std::size_t KV() const { return NKV * HS; }
    std::size_t row() const { return A() + 2 * KV(); }  // compact q|k|v channels
};

// The compact (B, T, A + 2 KV) rows expanded to multi-head (B, T, 3A): kv head h / group for head h.
std::vector<float> expand_kv(const std::vector<float>& qkv, const shape& s) {
    const std::size_t A = s.A(), KV = s.KV(), group = s.NH / s.NKV;
    std::vector<float> out(s.B * s.T * 3 * A);
    for (std::size_t r = 0; r < s.B * s.T; ++r) {
        const float* x = &qkv[r * s.row()];
        float* y = &out[r * 3 * A];
        for (std::size_t c = 0; c < A; ++c) y[c] = x[c];
        for (std::size_t part = 0; part < 2; ++part)
            for (std::size_t h = 0; h < s.NH; ++h)
                for (std::size_t d = 0; d < s.HS; ++d)
                    y[(1 + part) * A + h * s.HS + d] = x[A + part * KV + (h / group) * s.HS + d];
    }
    return out;
}

// The multi-head gradient (B, T, 3A) summed back to compact rows (in double), plus start.
std::vector<double> reduce_kv(const std::vector<float>& g, const std::vector<float>& start, const shape& s) {
    const std::size_t A = s.A(), KV = s.KV(), group = s.NH / s.NKV;
    std::vector<double> out(start.begin(), start.end());
    for (std::size_t r = 0; r < s.B * s.T; ++r) {
        const float* x = &g[r * 3 * A];
        double* y = &out[r * s.row()];
        for (std::size_t c = 0; c < A; ++c) y[c] += x[c];
        for (std::size_t part = 0; part < 2; ++part)
            for (std::size_t h = 0; h < s.NH; ++h)
                for (std::size_t d = 0; d < s.HS; ++d)
                    y[A + part * KV + (h / group) * s.HS + d] += x[(1 + part) * A + h * s.HS + d];
    }
    return out;
}

// Normalized error of each part (dq, dk, dv) of compact rows: max |got - expected| over the part,
// divided by the largest |expected - start| of that part (its gradient's size; 1% of the largest
// part's when a part vanishes, as T = 1's dq, dk). Non-finite got: infinite error.
struct part_errors {
    double dq, dk, dv;
};
part_errors compare(const std::vector<float>& got, const std::vector<double>& expected, const std::vector<float>& start,
                    const shape& s) {
    const std::size_t A = s.A(), KV = s.KV();
    double worst[3] = {}, size[3] = {};
    for (std::size_t r = 0; r < s.B * s.T; ++r)
        for (std::size_t c = 0; c < s.row(); ++c) {
            const std::size_t i = r * s.row() + c, part = c < A ? 0 : c < A + KV ? 1 : 2;
            const double error = std::isfinite(got[i]) ? std::abs(got[i] - expected[i]) : INFINITY;
            worst[part] = std::max(worst[part], error);
            size[part] = std::max(size[part], std::abs(expected[i] - start[i]));
        }
    const double largest = std::max({size[0], size[1], size[2]});
    double e[3];
    for (int p = 0; p < 3; ++p) e[p] = worst[p] / std::max({size[p], 0.01 * largest, 1e-30});
    return {e[0], e[1], e[2]};
}

// Bound on the normalized errors: attention_test.cu's for unit-sized scores (qkv in [-1, 1]),
// 5e-5, measured <= 2.4e-6 for the two-kernel backward up to T = 2048. The key-tile backward does
// the same products in the same channel order, summing dq over key tiles in another order.
constexpr double tolerance = 5e-5;

void check_errors(const part_errors& e, const char* against) {
    INFO("against " << against);
    CHECK(e.dq < tolerance);
    CHECK(e.dk < tolerance);
    CHECK(e.dv < tolerance);
}

// One shape's inputs on the device (every buffer shifted by offset floats), the forward's out and
// lse of every query head (multi-head kernels on the expanded rows), and the two-kernel backward on
// the expanded rows reduced to compact rows: what the key-tile backward is compared with.
struct backward_case {
    std::size_t BT, A;
    std::vector<float> qkv, dout, dqkv_start, qkv_mh;  // dqkv_start != 0 proves +=
    device_buffer<float> d_qkv, d_qkv_mh, d_dout, d_out, d_lse;
    std::vector<double> expected_gpu;

    backward_case(const shape& s, unsigned seed, std::size_t offset)
        : BT(s.B * s.T), A(s.A()), qkv(random_floats(BT * s.row(), seed)), dout(random_floats(BT * A, seed + 1)),
          dqkv_start(random_floats(BT * s.row(), seed + 2)), qkv_mh(expand_kv(qkv, s)), d_qkv(qkv, offset),
          d_qkv_mh(qkv_mh, offset), d_dout(dout, offset), d_out(std::vector<float>(BT * A), offset),
          d_lse(std::vector<float>(s.B * s.NH * s.T), offset) {
        gpu::attention_forward(d_out.get(), d_lse.get(), d_qkv_mh.get(), s.B, s.T, A, s.NH, nullptr);
        device_buffer<float> d_g_mh(std::vector<float>(BT * 3 * A, 0.f), offset);
        gpu::attention_backward(d_g_mh.get(), d_lse.get(), d_dout.get(), d_out.get(), d_qkv_mh.get(), s.B, s.T, A,
                                s.NH, nullptr);
        expected_gpu = reduce_kv(d_g_mh.download(), dqkv_start, s);
    }
};

// Runs partials and ordered (each twice) on one shape and compares them with the CPU kernel (when
// with_cpu) and with the two-kernel backward; offset shifts every buffer (1: 4-byte copies).
void compare_backward(const shape& s, unsigned seed, bool with_cpu = true, std::size_t offset = 0) {
    INFO("B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV << " HS=" << s.HS << " offset " << offset);
    const backward_case c(s, seed, offset);
    const std::size_t BT = c.BT, A = c.A;

    std::vector<float> results[2];
    for (const attention_backward_algo algo : {attention_backward_algo::partials, attention_backward_algo::ordered}) {
        INFO("algo " << std::string(gpu::to_string(algo)));
        const std::size_t bytes = gpu::attention_backward_workspace(algo, s.B, s.T, s.NH, s.HS);
        device_buffer<std::byte> workspace(bytes);
        device_buffer<float> d_dqkv(c.dqkv_start, offset), d_dqkv_again(c.dqkv_start, offset);
        for (device_buffer<float>* target : {&d_dqkv, &d_dqkv_again})
            gpu::attention_backward_key_tiles(target->get(), c.d_lse.get(), c.d_dout.get(), c.d_out.get(),
                                              c.d_qkv.get(), s.B, s.T, s.NH, s.NKV, s.HS, algo, workspace.get(), bytes,
                                              nullptr);
        const std::vector<float> got = d_dqkv.download(), again = d_dqkv_again.download();
        CHECK_MESSAGE(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)) == 0,
                      "two backward runs on the same inputs differ");
        if (gpu::attention_detail::padded_head_size(s.HS) == gpu::attention_detail::wide::D) {
            // The wide blocks (the choice at head size 64) and the 128-thread ones: the same bits.
            device_buffer<float> d_narrow(c.dqkv_start, offset);
            gpu::attention_backward_key_tiles(d_narrow.get(), c.d_lse.get(), c.d_dout.get(), c.d_out.get(),
                                              c.d_qkv.get(), s.B, s.T, s.NH, s.NKV, s.HS, algo, workspace.get(), bytes,
                                              nullptr, gpu::attention_partials_limit_bytes, 128);
            const std::vector<float> narrow = d_narrow.download();
            CHECK_MESSAGE(std::memcmp(got.data(), narrow.data(), got.size() * sizeof(float)) == 0,
                          "the wide (256-thread) and 128-thread blocks must give the same bits");
        }
        const part_errors vs_gpu = compare(got, c.expected_gpu, c.dqkv_start, s);
        check_errors(vs_gpu, "the two-kernel backward");
        MESSAGE("B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV << " HS=" << s.HS
                     << std::string(offset ? " misaligned" : "") << " " << std::string(gpu::to_string(algo))
                     << ": vs two-kernel dq " << vs_gpu.dq << ", dk " << vs_gpu.dk << ", dv " << vs_gpu.dv);
        results[algo == attention_backward_algo::ordered] = got;
    }
    CHECK_MESSAGE(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0,
                  "partials and ordered add the same contributions in the same order: their bits must agree");

    if (with_cpu) {
        std::vector<float> out_cpu(BT * A), lse_cpu(s.B * s.NH * s.T), g_cpu(BT * 3 * A, 0.f);
        cpu::attention_forward(out_cpu.data(), lse_cpu.data(), c.qkv_mh.data(), s.B, s.T, A, s.NH);
        cpu::attention_backward(g_cpu.data(), lse_cpu.data(), c.dout.data(), c.qkv_mh.data(), s.B, s.T, A, s.NH);
        const part_errors vs_cpu = compare(results[1], reduce_kv(g_cpu, c.dqkv_start, s), c.dqkv_start, s);
        check_errors(vs_cpu, "the CPU kernel");
        MESSAGE("  vs CPU: dq " << vs_cpu.dq << ", dk " << vs_cpu.dk << ", dv " << vs_cpu.dv);
    }
}

TEST_CASE("cuda attention backward by key tiles matches the CPU kernel and the two-kernel backward (multi-head)") {
    if (skip_without_gpu()) return;
    // T = 1, odd T, T a multiple of 64, GPT-2's heads (HS 64), HS 128, and the padded head sizes 16
    // (HS 1, 12), 32 (24) and 128 (100).
    const shape shapes[] = {{3, 1, 4, 4, 10},  {2, 7, 4, 4, 10},   {1, 33, 3, 3, 12}, {2, 64, 2, 2, 24},
                            {2, 65, 4, 4, 16}, {1, 97, 4, 4, 32},  {1, 300, 12, 12, 64}, {1, 200, 4, 4, 100},
                            {1, 130, 2, 2, 128}, {2, 1024, 12, 12, 64}, {1, 5, 3, 3, 1}};
    unsigned seed = 300;
    for (const shape& s : shapes) compare_backward(s, seed += 10);
}

TEST_CASE("cuda attention backward by key tiles with grouped-query heads: dk, dv summed over each group") {
    if (skip_without_gpu()) return;
    const shape shapes[] = {{2, 65, 4, 2, 64}, {1, 130, 8, 2, 128}, {1, 257, 6, 3, 64}, {2, 100, 4, 1, 32},
                            {1, 1000, 8, 1, 64}};
    unsigned seed = 500;
    for (const shape& s : shapes) compare_backward(s, seed += 10);
}

TEST_CASE("cuda attention backward by key tiles at long T (2048 .. 8192, odd lengths)") {
    if (skip_without_gpu()) return;
    compare_backward({1, 2048, 2, 2, 64}, 700);
    compare_backward({1, 4097, 4, 2, 128}, 710);
    compare_backward({1, 8192, 2, 1, 64}, 720);
    compare_backward({1, 8191, 8, 8, 64}, 730, /*with_cpu=*/false);  // the two-kernel backward only
}

// partials with a workspace bound below the whole triangle: the query tiles run in bands. dq is the
// same sum in the same order as one band (the same bits); dk and dv are summed per band, then the
// bands in order (another rounding, within the tolerance of the two-kernel backward); repeatable.
void compare_bands(const shape& s, unsigned seed) {
    INFO("B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV << " HS=" << s.HS);
    const backward_case c(s, seed, 0);
    const std::size_t BT = c.BT, A = c.A, n = (s.T + 63) / 64;

    const auto partials = attention_backward_algo::partials;
    auto run = [&](std::size_t limit) {
        const std::size_t bytes = gpu::attention_backward_workspace(partials, s.B, s.T, s.NH, s.HS, limit);
        device_buffer<std::byte> workspace(bytes);
        device_buffer<float> d_dqkv(c.dqkv_start);
        gpu::attention_backward_key_tiles(d_dqkv.get(), c.d_lse.get(), c.d_dout.get(), c.d_out.get(), c.d_qkv.get(),
                                          s.B, s.T, s.NH, s.NKV, s.HS, partials, workspace.get(), bytes, nullptr,
                                          limit);
        return d_dqkv.download();
    };
    const std::size_t whole = gpu::attention_backward_workspace(partials, s.B, s.T, s.NH, s.HS, ~std::size_t{0});
    REQUIRE(gpu::attention_partials_bands(s.B, s.T, s.NH, s.HS, whole) == 1);
    const std::vector<float> one_band = run(whole);
    // The smallest bound bands take: Dsum's part (where the partials start), then the last query
    // tile's n tiles per (b, h).
    const std::size_t D = static_cast<std::size_t>(gpu::attention_detail::padded_head_size(s.HS));
    const std::size_t tile_bytes = s.B * s.NH * 64 * D * sizeof(float);
    const std::size_t dsum_bytes = gpu::attention_detail::key_tile_layout(partials, s.B, s.T, s.NH, s.HS, whole).partials;
    const std::size_t smallest = dsum_bytes + n * tile_bytes;
    for (const std::size_t limit : {smallest, std::max(smallest + tile_bytes, dsum_bytes + (whole - dsum_bytes) / 3)}) {
        const std::size_t bands = gpu::attention_partials_bands(s.B, s.T, s.NH, s.HS, limit);
        INFO("limit " << limit << " bytes: " << bands << " bands");
        CHECK(bands > 1);
        CHECK(gpu::attention_backward_workspace(partials, s.B, s.T, s.NH, s.HS, limit) <= limit);
        // The pick: bands at head size 128; in order at 64 (narrow bands are slower there), two kernels below.
        CHECK(gpu::attention_backward_pick(s.B, s.T, s.NH, s.HS, limit) ==
              (D > 64 ? partials : D == 64 ? attention_backward_algo::ordered : attention_backward_algo::recompute));
        const std::vector<float> got = run(limit), again = run(limit);
        CHECK_MESSAGE(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)) == 0,
                      "two banded runs on the same inputs differ");
        bool dq_same = true;
        for (std::size_t r = 0; r < BT; ++r)
            dq_same = dq_same && std::memcmp(&got[r * s.row()], &one_band[r * s.row()], A * sizeof(float)) == 0;
        CHECK_MESSAGE(dq_same, "dq in bands must be the one band's bits (the same sum in the same order)");
        const part_errors e = compare(got, c.expected_gpu, c.dqkv_start, s);
        check_errors(e, "the two-kernel backward");
        MESSAGE("B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV << " HS=" << s.HS << ", " << bands
                     << " bands: vs two-kernel dq " << e.dq << ", dk " << e.dk << ", dv " << e.dv);
    }
    // Below the smallest bound partials cannot run: the pick falls back, the launch refuses.
    CHECK(gpu::attention_backward_pick(s.B, s.T, s.NH, s.HS, smallest - 1) != partials);
    CHECK(gpu::attention_backward_workspace(partials, s.B, s.T, s.NH, s.HS, smallest - 1) == whole);
}

// Small enough for compute-sanitizer (scripts/gpu-attention-check.sh): both dq orders, GQA, odd T,
// the diagonal and off-diagonal tiles, HS 64 and 128, partials in bands.
TEST_CASE("cuda attention backward by key tiles on small shapes (sanitizer case)") {
    if (skip_without_gpu()) return;
    compare_backward({1, 130, 4, 2, 64}, 200);
    compare_backward({1, 70, 2, 1, 128}, 210);
    compare_bands({1, 200, 2, 1, 128}, 220);
}

TEST_CASE("cuda attention backward by key tiles: partials in bands of query tiles under a workspace bound") {
    if (skip_without_gpu()) return;
    compare_bands({1, 1000, 4, 4, 64}, 900);
    compare_bands({2, 777, 8, 2, 128}, 910);
    compare_bands({1, 2049, 3, 1, 24}, 920);
}

TEST_CASE("cuda attention backward by key tiles takes buffers off 16-byte alignment (4-byte copies)") {
    if (skip_without_gpu()) return;
    compare_backward({1, 33, 3, 3, 16}, 800, true, 1);
    compare_backward({1, 300, 12, 4, 64}, 810, true, 1);
    compare_backward({1, 130, 2, 1, 128}, 820, true, 1);
}

TEST_CASE("cuda attention backward by key tiles refuses bad heads, a small workspace and algo recompute") {
    if (skip_without_gpu()) return;
    // Sizes are checked before any launch, so null pointers never reach a kernel.
    float* none = nullptr;
    const auto ordered = attention_backward_algo::ordered;
    CHECK_THROWS_AS(gpu::attention_backward_key_tiles(none, none, none, none, none, 1, 8, 6, 4, 64, ordered, none, 1 << 20,
                                                      nullptr),
                    strata::error);  // NKV does not divide NH
    CHECK_THROWS_AS(gpu::attention_backward_key_tiles(none, none, none, none, none, 1, 8, 2, 2, 129, ordered, none,
                                                      1 << 20, nullptr),
                    strata::error);  // HS 129
    CHECK_THROWS_AS(gpu::attention_backward_key_tiles(none, none, none, none, none, 1, 8, 2, 2, 64,
                                                      attention_backward_algo::recompute, none, 0, nullptr),
                    strata::error);
    // Blocks of 256 threads exist at head size 64 only; other sizes are refused.
    CHECK_THROWS_AS(gpu::attention_backward_key_tiles(none, none, none, none, none, 1, 8, 2, 2, 128, ordered, none,
                                                      1 << 20, nullptr, gpu::attention_partials_limit_bytes, 256),
                    strata::error);
    CHECK_THROWS_AS(gpu::attention_backward_key_tiles(none, none, none, none, none, 1, 8, 2, 2, 64, ordered, none,
                                                      1 << 20, nullptr, gpu::attention_partials_limit_bytes, 64),
                    strata::error);
    // Wide ordered blocks add dq four floats at a time: dqkv rows 16-byte aligned, or 128 threads.
    std::vector<float> host_rows(8);
    float* misaligned = host_rows.data() + (reinterpret_cast<std::uintptr_t>(host_rows.data()) % 16 == 0 ? 1 : 0);
    CHECK_THROWS_AS(gpu::attention_backward_key_tiles(misaligned, none, none, none, none, 1, 8, 2, 2, 64, ordered, none,
                                                      1 << 20, nullptr, gpu::attention_partials_limit_bytes, 256),
                    strata::error);
    const std::size_t needed = gpu::attention_backward_workspace(attention_backward_algo::partials, 1, 640, 2, 64);
    device_buffer<std::byte> workspace(needed);
    CHECK_THROWS_AS(gpu::attention_backward_key_tiles(none, none, none, none, none, 1, 640, 2, 2, 64,
                                                      attention_backward_algo::partials, workspace.get(), needed - 1,
                                                      nullptr),
                    strata::error);
    // Workspace: partials grows with T^2 (the causal triangle of 64-row tiles), ordered with T.
    CHECK(needed >= 2 * (10 * 11 / 2) * 64 * 64 * sizeof(float));
    CHECK(gpu::attention_backward_workspace(ordered, 1, 640, 2, 64) < 8192);
    CHECK(gpu::attention_backward_pick(1, 640, 2, 64, needed) == attention_backward_algo::partials);
    // Below the whole triangle: in order at head size 64, bands at 128, the two kernels at 32.
    CHECK(gpu::attention_backward_pick(1, 640, 2, 64, needed - 1) == ordered);
    CHECK(gpu::attention_backward_pick(1, 640, 2, 128, needed - 1) == attention_backward_algo::partials);
    CHECK(gpu::attention_backward_pick(1, 640, 2, 32, needed / 2 - 1) == attention_backward_algo::recompute);
    // The library's bound: partials at GPT-2 124M's B=8 T=1024 (214 MB, one band); at B=1 T=32768
    // (26 GB of triangle) bands of at most 2 GiB would do, ordered is picked (head size 64).
    CHECK(gpu::attention_backward_pick(8, 1024, 12, 64) == attention_backward_algo::partials);
    CHECK(gpu::attention_backward_pick(1, 32768, 12, 64) == ordered);
    CHECK(gpu::attention_partials_bands(8, 1024, 12, 64) == 1);
    CHECK(gpu::attention_partials_bands(1, 32768, 12, 64) > 1);
    CHECK(gpu::attention_backward_workspace(attention_backward_algo::partials, 1, 32768, 12, 64) <=
          gpu::attention_partials_limit_bytes);
}

}  // namespace attention_backward_test
