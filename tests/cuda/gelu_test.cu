// kernels/cuda/gelu.cuh against kernels/cpu/gelu.hpp.
#include "cuda/cuda_test_util.cuh"  // skip_without_gpu, device_buffer, test_stream, comparisons

#include <strata/kernels/cpu/gelu.hpp>   // gelu_forward, gelu_backward (the oracle)
#include <strata/kernels/cuda/gelu.cuh>  // the kernels under test

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE, CAPTURE

#include <cstddef>  // std::size_t
#include <vector>   // std::vector

namespace {

using namespace strata::test;
namespace cpu = strata::kernels::cpu;
namespace gpu = strata::kernels::cuda;

TEST_CASE("cuda gelu forward and backward match the CPU's tanh approximation") {
    if (skip_without_gpu()) return;
    // Thresholds (max |gpu - cpu| / max(1, max |cpu|)):
    // - forward 1e-6: CUDA's tanhf and glibc's each err by <= 2 ulp (~2.4e-7 near |tanh| = 1), and
    //   nvcc's FMAs round once less; times 0.5 |x| <= 2 that stays below ~1e-6 absolute, and the
    //   outputs reach 4, so the normalized error is ~2e-7.
    // - backward 1e-5: 1 - tanh^2 turns those ulps into an absolute error of ~5e-7, multiplied by
    //   0.5 x s (1 + 3a x^2), up to ~9 at |x| = 4 (~4e-6 absolute, ~1e-6 normalized). A wrong
    //   derivative term is off by > 1e-2.
    test_stream stream;
    for (const std::size_t N :
         {std::size_t{1}, std::size_t{7}, std::size_t{300 * 36}, std::size_t{8192} * 4 * 768 + 3}) {
        for (const std::size_t offset : {0, 1}) {
            CAPTURE(N);
            CAPTURE(offset);
            const auto inp = random_floats(N, 41, -4.0, 4.0);
            const auto dout = random_floats(N, 42);
            const auto dinp0 = random_floats(N, 43);  // backward accumulates into it

            std::vector<float> out(N), dinp = dinp0;
            cpu::gelu_forward(out.data(), inp.data(), N);
            cpu::gelu_backward(dinp.data(), dout.data(), inp.data(), N);

            device_buffer<float> d_inp(inp, offset), d_dout(dout, offset), d_dinp(dinp0, offset), d_out(N, offset);
            gpu::gelu_forward(d_out.get(), d_inp.get(), N, stream);
            gpu::gelu_backward(d_dinp.get(), d_dout.get(), d_inp.get(), N, stream);
            const auto fwd = normalized_error(d_out.download(), out);
            CHECK_MESSAGE(fwd.error < 1e-6, fwd.describe("out"));
            const auto bwd = normalized_error(d_dinp.download(), dinp);
            CHECK_MESSAGE(bwd.error < 1e-5, bwd.describe("dinp"));
        }
    }
}

}  // namespace

namespace {

TEST_CASE("cuda gelu speed at the GPT-2 124M MLP size; forward repeats its bits") {
    if (skip_without_gpu()) return;
    test_stream stream;
    const std::size_t N = std::size_t{8192} * 3072;
    device_buffer<float> inp(N), out(N), dout(N), dinp(N);
    fill_pattern(inp.get(), N, 1);
    fill_pattern(dout.get(), N, 2);
    fill_pattern(dinp.get(), N, 3);
    const double fwd = time_ms(stream, 20, [&] { gpu::gelu_forward(out.get(), inp.get(), N, stream); });
    const auto first = out.download();
    gpu::gelu_forward(out.get(), inp.get(), N, stream);
    CHECK(first_difference(out.download(), first, "out").empty());
    const double bwd = time_ms(stream, 20, [&] { gpu::gelu_backward(dinp.get(), dout.get(), inp.get(), N, stream); });
    MESSAGE("gelu N=8192*3072: forward " << fwd << " ms (" << gigabytes_per_second(8.0 * N, fwd) << " GB/s), backward "
                                         << bwd << " ms (" << gigabytes_per_second(16.0 * N, bwd) << " GB/s)");
}

}  // namespace

namespace {

TEST_CASE("cuda add_bias and bias_gelu_forward: the bits of the composition, and the CPU's") {
    if (skip_without_gpu()) return;
    // add_bias is one float add per element: the CPU's bits exactly. bias_gelu_forward must give
    // the bits of add_bias then gelu_forward (the unfused CUDA path), pre included, and the CPU's
    // gelu within gelu forward's 1e-6 above. Shapes: float4 rows (OC = 36, 3072), the scalar path
    // (OC = 37, and offset 1: misaligned), more rows than a grid's y (65535) so rows repeat a block,
    // and no bias (pre left alone, out = gelu(pre)).
    struct shape {
        std::size_t rows, OC;
    };
    test_stream stream;
    for (const auto [rows, OC] : {shape{1, 8}, shape{7, 36}, shape{300, 37}, shape{70000, 4}, shape{8192, 3072}}) {
        for (const std::size_t offset : {0, 1}) {
            for (const bool with_bias : {true, false}) {
                CAPTURE(rows);
                CAPTURE(OC);
                CAPTURE(offset);
                CAPTURE(with_bias);
                const std::size_t N = rows * OC;
                const auto pre0 = random_floats(N, 51, -3.0, 3.0);
                const auto bias = random_floats(OC, 52);

                std::vector<float> pre = pre0, out(N);
                if (with_bias)
                    for (std::size_t r = 0; r < rows; ++r)
                        for (std::size_t c = 0; c < OC; ++c) pre[r * OC + c] += bias[c];
                cpu::gelu_forward(out.data(), pre.data(), N);

                device_buffer<float> d_bias(bias, offset), f_pre(pre0, offset), f_out(N, offset), u_pre(pre0, offset),
                    u_out(N, offset);
                const float* b = with_bias ? d_bias.get() : nullptr;
                gpu::bias_gelu_forward(f_pre.get(), f_out.get(), b, rows, OC, stream);
                if (with_bias) gpu::add_bias(u_pre.get(), b, rows, OC, stream);
                gpu::gelu_forward(u_out.get(), u_pre.get(), N, stream);
                const auto g_pre = f_pre.download(), g_out = f_out.download();
                CHECK(first_difference(u_pre.download(), pre, "add_bias").empty());
                CHECK(first_difference(g_pre, pre, "pre").empty());
                CHECK(first_difference(g_out, u_out.download(), "out (fused against unfused)").empty());
                const auto fwd = normalized_error(g_out, out);
                CHECK_MESSAGE(fwd.error < 1e-6, fwd.describe("out"));
            }
        }
    }
}

TEST_CASE("cuda bias_gelu_forward speed against add_bias + gelu_forward at the GPT-2 124M MLP size") {
    if (skip_without_gpu()) return;
    test_stream stream;
    const std::size_t rows = 8192, OC = 4 * 768, N = rows * OC;
    device_buffer<float> pre(N), out(N), bias(OC);
    fill_pattern(pre.get(), N, 1);
    fill_pattern(bias.get(), OC, 2);
    const double fused = time_ms(stream, 20, [&] { gpu::bias_gelu_forward(pre.get(), out.get(), bias.get(), rows, OC, stream); });
    const double apart = time_ms(stream, 20, [&] {
        gpu::add_bias(pre.get(), bias.get(), rows, OC, stream);
        gpu::gelu_forward(out.get(), pre.get(), N, stream);
    });
    // Bytes from DRAM: fused reads pre and writes pre and out; apart reads pre twice, writes twice.
    MESSAGE("bias + gelu " << rows << " x " << OC << ": fused " << fused << " ms ("
                           << gigabytes_per_second(12.0 * static_cast<double>(N), fused) << " GB/s), apart " << apart
                           << " ms");
}

}  // namespace

namespace {

TEST_CASE("cuda gelu_backward_bias: the bits of zero, gelu_backward and column_sum_accumulate, and the CPU's") {
    if (skip_without_gpu()) return;
    // The fused kernel writes dinp (whatever it held: here garbage) and adds the column sums to
    // dbias: bitwise the unfused CUDA kernels (the same products, the same tile order and tree),
    // and the CPU within gelu backward's 1e-5 above (dinp) and the column sums' 1e-5 of
    // tests/cuda/layernorm_test.cu (dbias: the CPU sums rows in another order). Shapes: one row,
    // odd OC (37: a partial column tile), more rows than a tile's 128 phases, the 124M MLP.
    struct shape {
        std::size_t rows, OC;
    };
    test_stream stream;
    for (const auto [rows, OC] : {shape{1, 8}, shape{7, 36}, shape{300, 37}, shape{8192, 3072}}) {
        CAPTURE(rows);
        CAPTURE(OC);
        const std::size_t N = rows * OC;
        const auto inp = random_floats(N, 61, -4.0, 4.0);
        const auto dout = random_floats(N, 62);
        const auto garbage = random_floats(N, 63);
        const auto dbias0 = random_floats(OC, 64);  // accumulated into

        std::vector<float> dinp(N, 0.0f), dbias = dbias0;
        cpu::gelu_backward(dinp.data(), dout.data(), inp.data(), N);
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t c = 0; c < OC; ++c) dbias[c] += dinp[r * OC + c];

        device_buffer<float> d_inp(inp), d_dout(dout), f_dinp(garbage), f_dbias(dbias0), u_dinp(N), u_dbias(dbias0);
        gpu::gelu_backward_bias(f_dinp.get(), f_dbias.get(), d_dout.get(), d_inp.get(), rows, OC, stream);
        cudaMemsetAsync(u_dinp.get(), 0, N * sizeof(float), stream);
        gpu::gelu_backward(u_dinp.get(), d_dout.get(), d_inp.get(), N, stream);
        gpu::column_sum_accumulate(u_dbias.get(), u_dinp.get(), rows, OC, stream);
        const auto g_dinp = f_dinp.download(), g_dbias = f_dbias.download();
        CHECK(first_difference(g_dinp, u_dinp.download(), "dinp (fused against unfused)").empty());
        CHECK(first_difference(g_dbias, u_dbias.download(), "dbias (fused against unfused)").empty());
        const auto e_dinp = normalized_error(g_dinp, dinp);
        const auto e_dbias = normalized_error(g_dbias, dbias);
        CHECK_MESSAGE(e_dinp.error < 1e-5, e_dinp.describe("dinp"));
        CHECK_MESSAGE(e_dbias.error < 1e-5, e_dbias.describe("dbias"));
    }
}

TEST_CASE("cuda gelu_backward_bias speed against zero + gelu_backward + column_sum_accumulate (124M MLP)") {
    if (skip_without_gpu()) return;
    test_stream stream;
    const std::size_t rows = 8192, OC = 4 * 768, N = rows * OC;
    device_buffer<float> inp(N), dout(N), dinp(N), dbias(OC);
    fill_pattern(inp.get(), N, 1);
    fill_pattern(dout.get(), N, 2);
    fill_pattern(dbias.get(), OC, 3);
    const double fused = time_ms(stream, 20, [&] {
        gpu::gelu_backward_bias(dinp.get(), dbias.get(), dout.get(), inp.get(), rows, OC, stream);
    });
    const double apart = time_ms(stream, 20, [&] {
        cudaMemsetAsync(dinp.get(), 0, N * sizeof(float), stream);
        gpu::gelu_backward(dinp.get(), dout.get(), inp.get(), N, stream);
        gpu::column_sum_accumulate(dbias.get(), dinp.get(), rows, OC, stream);
    });
    // Bytes from DRAM: fused reads inp and dout and writes dinp; apart writes dinp twice, reads
    // it twice more.
    MESSAGE("gelu backward + bias gradient " << rows << " x " << OC << ": fused " << fused << " ms ("
                                             << gigabytes_per_second(12.0 * static_cast<double>(N), fused)
                                             << " GB/s), apart " << apart << " ms");
}

}  // namespace
