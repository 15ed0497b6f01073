// kernels/cuda/elementwise.cuh against the CPU kernels: the flat ops and sum_of_squares bit for bit,
// column_sum_accumulate against the column sums in double.
#include "cuda/cuda_test_util.cuh"  // skip_without_gpu, device_buffer, test_stream, comparisons

#include <strata/kernels/cpu/elementwise.hpp>   // add_inplace, scale_inplace, sum_of_squares (the oracle)
#include <strata/kernels/cpu/residual.hpp>      // residual_forward (the oracle)
#include <strata/kernels/cuda/elementwise.cuh>  // the kernels under test

#include <doctest/doctest.h>  // TEST_CASE, CHECK, CAPTURE

#include <cmath>    // std::ldexp
#include <cstddef>  // std::size_t
#include <random>   // std::mt19937, std::uniform_int_distribution
#include <vector>   // std::vector

namespace {

using namespace strata::test;
namespace cpu = strata::kernels::cpu;
namespace gpu = strata::kernels::cuda;

// Sizes around every boundary of the kernels: below a float4, odd tails, several grid-stride turns.
const std::vector<std::size_t> flat_sizes{1, 3, 7, 1001, (std::size_t{1} << 20) + 3, 5'000'011};

TEST_CASE("cuda add_inplace, scale_inplace and residual_forward equal the CPU bit for bit") {
    if (skip_without_gpu()) return;
    // Threshold: none. Each element is one IEEE add or multiply, the same on both sides.
    test_stream stream;
    for (const std::size_t N : flat_sizes) {
        for (const std::size_t offset : {0, 1}) {  // 1: misaligned, the scalar fallback
            CAPTURE(N);
            CAPTURE(offset);
            const auto a = random_floats(N, 11), b = random_floats(N, 12);

            std::vector<float> expected = a;
            cpu::add_inplace(expected.data(), b.data(), N);
            device_buffer<float> dst(a, offset), src(b, offset);
            gpu::add_inplace(dst.get(), src.get(), N, stream);
            CHECK_MESSAGE(first_difference(dst.download(), expected, "add_inplace").empty(),
                          first_difference(dst.download(), expected, "add_inplace"));

            expected = a;
            cpu::scale_inplace(expected.data(), 0.3712f, N);
            dst.upload(a);
            gpu::scale_inplace(dst.get(), 0.3712f, N, stream);
            CHECK_MESSAGE(first_difference(dst.download(), expected, "scale_inplace").empty(),
                          first_difference(dst.download(), expected, "scale_inplace"));

            cpu::residual_forward(expected.data(), a.data(), b.data(), N);
            device_buffer<float> out(N, offset);
            dst.upload(a);
            gpu::residual_forward(out.get(), dst.get(), src.get(), N, stream);
            CHECK_MESSAGE(first_difference(out.download(), expected, "residual_forward").empty(),
                          first_difference(out.download(), expected, "residual_forward"));
        }
    }
}

TEST_CASE("cuda column_sum_accumulate adds the column sums, in the same bits on every run") {
    if (skip_without_gpu()) return;
    // The CPU's counterpart is matmul_backward's dbias (an Eigen colwise sum, not compiled by nvcc
    // here); the reference is the same column sums in double. Threshold 1e-6 normalized: each thread
    // adds up to 64 rows in float, then a 128-way tree; the rounding of ~70 float adds at the scale
    // of the sums stays below 1e-6 of the largest sum. A missed or doubled row is off by O(1e-2).
    test_stream stream;
    const std::vector<std::pair<std::size_t, std::size_t>> shapes{{1, 36},     {7, 40},     {300, 48},   {300, 37},
                                                                  {129, 1600}, {8192, 768}, {8192, 2304}};
    for (const auto [rows, OC] : shapes) {
        CAPTURE(rows);
        CAPTURE(OC);
        const auto dout = random_floats(rows * OC, 21);
        const auto dbias0 = random_floats(OC, 22);
        std::vector<double> expected(dbias0.begin(), dbias0.end());
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t c = 0; c < OC; ++c) expected[c] += dout[r * OC + c];

        device_buffer<float> d_dout(dout), d_dbias(dbias0);
        gpu::column_sum_accumulate(d_dbias.get(), d_dout.get(), rows, OC, stream);
        const auto first = d_dbias.download();
        const auto err = normalized_error(first, expected);
        CHECK_MESSAGE(err.error < 1e-6, err.describe("dbias"));

        d_dbias.upload(dbias0);
        gpu::column_sum_accumulate(d_dbias.get(), d_dout.get(), rows, OC, stream);
        CHECK_MESSAGE(first_difference(d_dbias.download(), first, "dbias, second run").empty(),
                      first_difference(d_dbias.download(), first, "dbias, second run"));
    }
}

// Values spread over 2^-20 .. 2^20, so the partial sums round at every add and a different order
// would give different bits.
std::vector<float> wide_range_floats(std::size_t n, std::uint32_t seed) {
    std::vector<float> x = random_floats(n, seed);
    std::mt19937 engine(seed + 1);
    std::uniform_int_distribution<int> exponent(-20, 20);
    for (auto& v : x) v = std::ldexp(v, exponent(engine));
    return x;
}

TEST_CASE("cuda sum_of_squares equals the CPU's chunked order bit for bit") {
    static_assert(gpu::sum_of_squares_workspace(0) == 0);
    static_assert(gpu::sum_of_squares_workspace(1) == 1);
    static_assert(gpu::sum_of_squares_workspace(4096) == 1);
    static_assert(gpu::sum_of_squares_workspace(4097) == 2);
    if (skip_without_gpu()) return;
    // Threshold: none. Both sides add the same double products in the same canonical order.
    test_stream stream;
    for (const std::size_t N : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{4097},
                                std::size_t{3 * 4096 + 17}, std::size_t{10'000'000}}) {
        for (const std::size_t offset : {0, 1}) {
            CAPTURE(N);
            CAPTURE(offset);
            const auto x = wide_range_floats(N, 31 + static_cast<std::uint32_t>(N % 1000));
            const double expected = cpu::sum_of_squares(x.data(), N);
            device_buffer<float> d_x(x, offset);
            device_buffer<double> out(1), workspace(gpu::sum_of_squares_workspace(N));
            out.upload({-1.0});
            gpu::sum_of_squares(out.get(), workspace.get(), d_x.get(), N, stream);
            const double got = out.download()[0];
            CHECK_MESSAGE(bits_of(got) == bits_of(expected), "gpu " << got << " vs cpu " << expected);
        }
    }
}

TEST_CASE("the canonical order is not the plain sequential sum: the test above can tell orders apart") {
    // Guards the previous test's data: with these values, a kernel that summed in another order
    // (here: one sequential pass) would not reproduce the CPU's bits.
    const auto x = wide_range_floats(10'000'000, 31);
    double sequential = 0.0;
    for (const float v : x) sequential += static_cast<double>(v) * static_cast<double>(v);
    CHECK(bits_of(sequential) != bits_of(cpu::sum_of_squares(x.data(), x.size())));
}

}  // namespace

namespace {

TEST_CASE("cuda elementwise speed at GPT-2 124M sizes; sum_of_squares keeps the CPU's bits") {
    if (skip_without_gpu()) return;
    test_stream stream;
    const std::size_t params = 124'439'808, wte = 50257 * 768, rows = 8192, OC = 3072;
    device_buffer<float> a(params), b(params), dbias(OC);
    fill_pattern(a.get(), params, 1);
    fill_pattern(b.get(), params, 2);
    fill_pattern(dbias.get(), OC, 3);
    device_buffer<double> out(1), workspace(gpu::sum_of_squares_workspace(params));

    const double add = time_ms(stream, 20, [&] { gpu::add_inplace(a.get(), b.get(), params, stream); });
    const double scale = time_ms(stream, 20, [&] { gpu::scale_inplace(a.get(), 0.5f, params, stream); });
    const double ssq_wte =
        time_ms(stream, 20, [&] { gpu::sum_of_squares(out.get(), workspace.get(), b.get(), wte, stream); });
    const double ssq_all =
        time_ms(stream, 5, [&] { gpu::sum_of_squares(out.get(), workspace.get(), b.get(), params, stream); });
    const double colsum =
        time_ms(stream, 20, [&] { gpu::column_sum_accumulate(dbias.get(), b.get(), rows, OC, stream); });
    MESSAGE("add_inplace N=124M: " << add << " ms, " << gigabytes_per_second(12.0 * params, add) << " GB/s");
    MESSAGE("scale_inplace N=124M: " << scale << " ms, " << gigabytes_per_second(8.0 * params, scale) << " GB/s");
    MESSAGE("sum_of_squares N=" << wte << " (wte): " << ssq_wte << " ms, " << gigabytes_per_second(4.0 * wte, ssq_wte)
                                << " GB/s");
    MESSAGE("sum_of_squares N=124M: " << ssq_all << " ms, " << gigabytes_per_second(4.0 * params, ssq_all) << " GB/s");
    MESSAGE("column_sum_accumulate rows=8192 OC=3072: " << colsum << " ms, "
                                                        << gigabytes_per_second(4.0 * rows * OC, colsum) << " GB/s");

    // The last timed run is the whole 124M buffer: the CPU gives the same bits.
    const auto host_b = b.download();
    CHECK(bits_of(out.download()[0]) == bits_of(cpu::sum_of_squares(host_b.data(), params)));
}

}  // namespace
