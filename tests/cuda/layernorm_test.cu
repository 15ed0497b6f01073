// kernels/cuda/layernorm.cuh against kernels/cpu/layernorm.hpp.
#include "cuda/cuda_test_util.cuh"  // skip_without_gpu, device_buffer, test_stream, comparisons

#include <strata/kernels/cpu/layernorm.hpp>   // layernorm_*, residual_layernorm_forward (the oracle)
#include <strata/kernels/cuda/layernorm.cuh>  // the kernels under test

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE, CAPTURE

#include <cstddef>  // std::size_t
#include <vector>   // std::vector

namespace {

using namespace strata::test;
namespace cpu = strata::kernels::cpu;
namespace gpu = strata::kernels::cuda;

struct shape {
    std::size_t B, T, C;
};

// Odd channel counts (36, 40, 48, and 37 for the scalar path), GPT-2 small's 768 and XL's 1600,
// B*T of 1, 7 and 300 (T not a power of two), and one full GPT-2 batch.
const std::vector<shape> shapes{{1, 1, 36},   {1, 7, 40},    {3, 100, 48},  {2, 150, 37},
                                {1, 7, 1600}, {3, 100, 768}, {8, 1024, 768}};

TEST_CASE("cuda layernorm forward and backward match the CPU, and backward repeats bit for bit") {
    if (skip_without_gpu()) return;
    // Thresholds (max |gpu - cpu| / max(1, max |cpu|)):
    // - mean, rstd 1e-6: both sides take the row statistics in double and round them to float;
    //   the sums run in different orders, so a value can land one float ulp apart (~1e-7).
    // - out 1e-6: the same float expression on the same saved statistics; nvcc's FMAs differ by
    //   an ulp or two of the outputs (|out| up to ~5).
    // - dinp 1e-6: the same double expressions per row, summed in another order, rounded to float.
    // - dweight, dbias 1e-5: the CPU adds up to 8192 rows one by one in float, the GPU in 128
    //   strided partials and a tree; both round, differently, by ~sqrt(rows) ulps of the sums.
    // A wrong term in any formula is off by > 1e-3.
    test_stream stream;
    for (const auto [B, T, C] : shapes) {
        CAPTURE(B);
        CAPTURE(T);
        CAPTURE(C);
        const std::size_t rows = B * T;
        // Inputs off zero (mean ~3), so the mean matters and a one-pass variance would show.
        const auto inp = random_floats(rows * C, 1, 2.0, 4.0);
        const auto weight = random_floats(C, 2, 0.5, 1.5);
        const auto bias = random_floats(C, 3);
        const auto dout = random_floats(rows * C, 4);
        // Gradients start random: backward must add to them.
        const auto dinp0 = random_floats(rows * C, 5);
        const auto dweight0 = random_floats(C, 6);
        const auto dbias0 = random_floats(C, 7);

        std::vector<float> out(rows * C), mean(rows), rstd(rows), dinp = dinp0, dweight = dweight0, dbias = dbias0;
        cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), B, T, C);
        cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), mean.data(), rstd.data(), dout.data(),
                                inp.data(), weight.data(), B, T, C);

        device_buffer<float> d_inp(inp), d_weight(weight), d_bias(bias), d_dout(dout), d_out(rows * C), d_mean(rows),
            d_rstd(rows), d_dinp(dinp0), d_dweight(dweight0), d_dbias(dbias0);
        gpu::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_weight.get(), d_bias.get(), B, T,
                               C, stream);
        const auto e_out = normalized_error(d_out.download(), out);
        const auto e_mean = normalized_error(d_mean.download(), mean);
        const auto e_rstd = normalized_error(d_rstd.download(), rstd);
        CHECK_MESSAGE(e_out.error < 1e-6, e_out.describe("out"));
        CHECK_MESSAGE(e_mean.error < 1e-6, e_mean.describe("mean"));
        CHECK_MESSAGE(e_rstd.error < 1e-6, e_rstd.describe("rstd"));

        // Backward from the CPU's saved statistics, so it is compared on the same inputs.
        d_mean.upload(mean);
        d_rstd.upload(rstd);
        gpu::layernorm_backward(d_dinp.get(), d_dweight.get(), d_dbias.get(), d_mean.get(), d_rstd.get(), d_dout.get(),
                                d_inp.get(), d_weight.get(), B, T, C, stream);
        const auto first_dinp = d_dinp.download(), first_dweight = d_dweight.download(),
                   first_dbias = d_dbias.download();
        const auto e_dinp = normalized_error(first_dinp, dinp);
        const auto e_dweight = normalized_error(first_dweight, dweight);
        const auto e_dbias = normalized_error(first_dbias, dbias);
        CHECK_MESSAGE(e_dinp.error < 1e-6, e_dinp.describe("dinp"));
        CHECK_MESSAGE(e_dweight.error < 1e-5, e_dweight.describe("dweight"));
        CHECK_MESSAGE(e_dbias.error < 1e-5, e_dbias.describe("dbias"));

        // Deterministic: the same inputs give the same bits.
        d_dinp.upload(dinp0);
        d_dweight.upload(dweight0);
        d_dbias.upload(dbias0);
        gpu::layernorm_backward(d_dinp.get(), d_dweight.get(), d_dbias.get(), d_mean.get(), d_rstd.get(), d_dout.get(),
                                d_inp.get(), d_weight.get(), B, T, C, stream);
        CHECK(first_difference(d_dinp.download(), first_dinp, "dinp").empty());
        CHECK(first_difference(d_dweight.download(), first_dweight, "dweight").empty());
        CHECK(first_difference(d_dbias.download(), first_dbias, "dbias").empty());
    }
}

}  // namespace

namespace {

TEST_CASE("cuda layernorm speed at GPT-2 shapes; forward repeats its bits") {
    if (skip_without_gpu()) return;
    test_stream stream;
    for (const std::size_t C : {std::size_t{768}, std::size_t{1600}}) {
        const std::size_t B = 8, T = 1024, rows = B * T;
        device_buffer<float> inp(rows * C), weight(C), bias(C), out(rows * C), mean(rows), rstd(rows), dout(rows * C),
            dinp(rows * C), dweight(C), dbias(C);
        fill_pattern(inp.get(), rows * C, 1);
        fill_pattern(weight.get(), C, 2);
        fill_pattern(bias.get(), C, 3);
        fill_pattern(dout.get(), rows * C, 4);
        const double fwd = time_ms(stream, 20, [&] {
            gpu::layernorm_forward(out.get(), mean.get(), rstd.get(), inp.get(), weight.get(), bias.get(), B, T, C,
                                   stream);
        });
        const auto first = out.download();
        gpu::layernorm_forward(out.get(), mean.get(), rstd.get(), inp.get(), weight.get(), bias.get(), B, T, C, stream);
        CHECK(first_difference(out.download(), first, "out").empty());
        const double bwd = time_ms(stream, 20, [&] {
            gpu::layernorm_backward(dinp.get(), dweight.get(), dbias.get(), mean.get(), rstd.get(), dout.get(),
                                    inp.get(), weight.get(), B, T, C, stream);
        });
        // Bytes from DRAM: forward reads x, writes out; backward reads x, dout, dinp and writes dinp
        // (row kernel), then reads x and dout again (channel-tile kernel).
        const double n = static_cast<double>(rows * C);
        MESSAGE("layernorm B*T=8192 C=" << C << ": forward " << fwd << " ms (" << gigabytes_per_second(8 * n, fwd)
                                        << " GB/s), backward " << bwd << " ms (" << gigabytes_per_second(24 * n, bwd)
                                        << " GB/s)");
    }
}

}  // namespace

namespace {

TEST_CASE("cuda residual_layernorm_forward: the bits of residual_forward then layernorm_forward, and the CPU's") {
    if (skip_without_gpu()) return;
    // The fused kernel against the two CUDA kernels it replaces, bit for bit (the same float adds,
    // the same double sums in the same lane order), and against the CPU composition within the
    // layernorm forward's thresholds above (1e-6; res itself is one float add on both sides: equal).
    // Same shapes as above: the float4 path, the scalar path (C = 37), and a full GPT-2 batch.
    test_stream stream;
    for (const auto [B, T, C] : shapes) {
        CAPTURE(B);
        CAPTURE(T);
        CAPTURE(C);
        const std::size_t rows = B * T;
        const auto a = random_floats(rows * C, 21, 1.0, 3.0);
        const auto b = random_floats(rows * C, 22);
        const auto weight = random_floats(C, 23, 0.5, 1.5);
        const auto bias = random_floats(C, 24);

        std::vector<float> res(rows * C), out(rows * C), mean(rows), rstd(rows);
        cpu::residual_layernorm_forward(res.data(), out.data(), mean.data(), rstd.data(), a.data(), b.data(),
                                        weight.data(), bias.data(), B, T, C);

        device_buffer<float> d_a(a), d_b(b), d_weight(weight), d_bias(bias), d_res(rows * C), d_out(rows * C),
            d_mean(rows), d_rstd(rows), u_res(rows * C), u_out(rows * C), u_mean(rows), u_rstd(rows);
        gpu::residual_layernorm_forward(d_res.get(), d_out.get(), d_mean.get(), d_rstd.get(), d_a.get(), d_b.get(),
                                        d_weight.get(), d_bias.get(), B, T, C, stream);
        gpu::residual_forward(u_res.get(), d_a.get(), d_b.get(), rows * C, stream);
        gpu::layernorm_forward(u_out.get(), u_mean.get(), u_rstd.get(), u_res.get(), d_weight.get(), d_bias.get(), B, T,
                               C, stream);
        const auto g_res = d_res.download(), g_out = d_out.download(), g_mean = d_mean.download(),
                   g_rstd = d_rstd.download();
        CHECK(first_difference(g_res, u_res.download(), "res").empty());
        CHECK(first_difference(g_out, u_out.download(), "out").empty());
        CHECK(first_difference(g_mean, u_mean.download(), "mean").empty());
        CHECK(first_difference(g_rstd, u_rstd.download(), "rstd").empty());

        CHECK(first_difference(g_res, res, "res").empty());
        const auto e_out = normalized_error(g_out, out);
        const auto e_mean = normalized_error(g_mean, mean);
        const auto e_rstd = normalized_error(g_rstd, rstd);
        CHECK_MESSAGE(e_out.error < 1e-6, e_out.describe("out"));
        CHECK_MESSAGE(e_mean.error < 1e-6, e_mean.describe("mean"));
        CHECK_MESSAGE(e_rstd.error < 1e-6, e_rstd.describe("rstd"));
    }
}

TEST_CASE("cuda residual_layernorm_forward speed against residual_forward + layernorm_forward") {
    if (skip_without_gpu()) return;
    test_stream stream;
    for (const std::size_t C : {std::size_t{768}, std::size_t{1600}}) {
        const std::size_t B = 8, T = 1024, rows = B * T;
        device_buffer<float> a(rows * C), b(rows * C), weight(C), bias(C), res(rows * C), out(rows * C), mean(rows),
            rstd(rows);
        fill_pattern(a.get(), rows * C, 1);
        fill_pattern(b.get(), rows * C, 2);
        fill_pattern(weight.get(), C, 3);
        fill_pattern(bias.get(), C, 4);
        const double fused = time_ms(stream, 20, [&] {
            gpu::residual_layernorm_forward(res.get(), out.get(), mean.get(), rstd.get(), a.get(), b.get(),
                                            weight.get(), bias.get(), B, T, C, stream);
        });
        const double apart = time_ms(stream, 20, [&] {
            gpu::residual_forward(res.get(), a.get(), b.get(), rows * C, stream);
            gpu::layernorm_forward(out.get(), mean.get(), rstd.get(), res.get(), weight.get(), bias.get(), B, T, C,
                                   stream);
        });
        // Bytes from DRAM: fused reads a, b and writes res, out; apart also reads res once more.
        const double n = static_cast<double>(rows * C);
        MESSAGE("residual + layernorm B*T=8192 C=" << C << ": fused " << fused << " ms ("
                                                   << gigabytes_per_second(16 * n, fused) << " GB/s), apart " << apart
                                                   << " ms");
    }
}

}  // namespace
