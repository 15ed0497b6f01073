// kernels/cuda/cross_entropy.cuh against kernels/cpu/cross_entropy.hpp.
#include "cuda/cuda_test_util.cuh"  // skip_without_gpu, device_buffer, test_stream, comparisons

#include <strata/kernels/cpu/cross_entropy.hpp>   // cross_entropy_forward/backward, ignore_index (the oracle)
#include <strata/kernels/cuda/cross_entropy.cuh>  // the kernels under test

#include <doctest/doctest.h>  // TEST_CASE, CHECK, CHECK_MESSAGE, CAPTURE

#include <cmath>    // std::isnan
#include <cstddef>  // std::size_t
#include <cstdint>  // std::int32_t
#include <random>   // std::mt19937, std::uniform_int_distribution
#include <vector>   // std::vector

namespace {

using namespace strata::test;
namespace cpu = strata::kernels::cpu;
namespace gpu = strata::kernels::cuda;

struct shape {
    std::size_t B, T, V;
};

// Small odd vocabularies (67, 101: fewer tokens than threads in a block), GPT-2's 50257 (no multiple
// of 4) and its padded 50304; B*T of 1, 7 and 300.
const std::vector<shape> shapes{{1, 1, 67},    {1, 7, 101},   {3, 100, 67},   {2, 150, 101},
                                {1, 1, 50257}, {1, 7, 50304}, {3, 100, 50257}};

// Targets in [0, V), every seventh position ignore_index.
std::vector<std::int32_t> random_targets(std::size_t n, std::size_t V, std::uint32_t seed) {
    std::mt19937 engine(seed);
    std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(V) - 1);
    std::vector<std::int32_t> targets(n);
    for (std::size_t i = 0; i < n; ++i) targets[i] = i % 7 == 3 ? cpu::ignore_index : id(engine);
    return targets;
}

TEST_CASE("cuda cross_entropy forward matches the CPU's losses and lse, the same bits on every run") {
    if (skip_without_gpu()) return;
    // Threshold 1e-6 normalized: the CPU adds exp() in double of each shifted logit, the GPU adds
    // CUDA's expf (<= 2 ulp) in double and rescales per thread; the sums agree to ~1e-7 relative,
    // so lse (~11 for V = 50257) agrees to about one float ulp (~1e-6 absolute, 1e-7 normalized).
    test_stream stream;
    for (const auto [B, T, V] : shapes) {
        CAPTURE(B);
        CAPTURE(T);
        CAPTURE(V);
        const std::size_t rows = B * T;
        const auto logits = random_floats(rows * V, 71, -4.0, 4.0);
        const auto targets = random_targets(rows, V, 72);
        std::vector<float> losses(rows), lse(rows);
        cpu::cross_entropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), B, T, V);

        device_buffer<float> d_logits(logits), d_losses(rows), d_lse(rows);
        device_buffer<std::int32_t> d_targets(targets);
        gpu::cross_entropy_forward(d_losses.get(), d_lse.get(), d_logits.get(), d_targets.get(), B, T, V, stream);
        const auto first_lse = d_lse.download(), first_losses = d_losses.download();
        const auto e_lse = normalized_error(first_lse, lse);
        const auto e_losses = normalized_error(first_losses, losses);
        CHECK_MESSAGE(e_lse.error < 1e-6, e_lse.describe("lse"));
        CHECK_MESSAGE(e_losses.error < 1e-6, e_losses.describe("losses"));
        for (std::size_t row = 0; row < rows; ++row)
            if (targets[row] == cpu::ignore_index) CHECK(first_losses[row] == 0.0f);

        gpu::cross_entropy_forward(d_losses.get(), d_lse.get(), d_logits.get(), d_targets.get(), B, T, V, stream);
        CHECK(first_difference(d_lse.download(), first_lse, "lse, second run").empty());
        CHECK(first_difference(d_losses.download(), first_losses, "losses, second run").empty());
    }
}

TEST_CASE("cuda cross_entropy backward matches the CPU element by element and accumulates") {
    if (skip_without_gpu()) return;
    // Both sides get the CPU's lse, so each element is scale * exp(z - lse) from the same float
    // argument: CUDA's expf vs glibc's (<= 2 ulp), the product and the sum rounded separately on both.
    // - From zero with scale 1 (every probability visible): per-element relative error 1e-6.
    // - From random gradients with scale 1/counted: normalized error 1e-6. A kernel that overwrote
    //   instead of adding is off by O(1); one that forgot the target's -scale by ~scale (>= 3e-3).
    test_stream stream;
    for (const auto [B, T, V] : shapes) {
        CAPTURE(B);
        CAPTURE(T);
        CAPTURE(V);
        const std::size_t rows = B * T;
        const auto logits = random_floats(rows * V, 81, -4.0, 4.0);
        const auto targets = random_targets(rows, V, 82);
        std::vector<float> losses(rows), lse(rows);
        const std::size_t counted =
            cpu::cross_entropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), B, T, V);
        device_buffer<float> d_logits(logits), d_lse(lse);
        device_buffer<std::int32_t> d_targets(targets);

        std::vector<float> dlogits(rows * V, 0.0f);
        cpu::cross_entropy_backward(dlogits.data(), lse.data(), logits.data(), targets.data(), 1.0f, B, T, V);
        device_buffer<float> d_dlogits(std::vector<float>(rows * V, 0.0f));
        gpu::cross_entropy_backward(d_dlogits.get(), d_lse.get(), d_logits.get(), d_targets.get(), 1.0f, B, T, V,
                                    stream);
        const auto e_fresh = relative_error(d_dlogits.download(), dlogits);
        CHECK_MESSAGE(e_fresh.error < 1e-6, e_fresh.describe("dlogits from zero, scale 1"));

        const auto dlogits0 = random_floats(rows * V, 83);
        const float scale = 1.0f / static_cast<float>(counted == 0 ? 1 : counted);
        dlogits = dlogits0;
        cpu::cross_entropy_backward(dlogits.data(), lse.data(), logits.data(), targets.data(), scale, B, T, V);
        d_dlogits.upload(dlogits0);
        gpu::cross_entropy_backward(d_dlogits.get(), d_lse.get(), d_logits.get(), d_targets.get(), scale, B, T, V,
                                    stream);
        const auto e_acc = normalized_error(d_dlogits.download(), dlogits);
        CHECK_MESSAGE(e_acc.error < 1e-6, e_acc.describe("dlogits accumulated, scale 1/counted"));
    }
}

TEST_CASE("cuda cross_entropy: a target outside [0, V) gets a NaN loss and no gradient, nothing else changes") {
    if (skip_without_gpu()) return;
    // The CPU throws for such a target; the GPU cannot, so it poisons that row's loss (the trainer
    // sees a NaN loss) and skips its gradient. Compared with the CPU run where those rows are ignored.
    test_stream stream;
    const std::size_t B = 2, T = 5, V = 101, rows = B * T;
    const auto logits = random_floats(rows * V, 91, -4.0, 4.0);
    auto targets = random_targets(rows, V, 92);
    targets[2] = static_cast<std::int32_t>(V);  // one past the end
    targets[6] = -7;                            // negative, not ignore_index
    auto as_ignored = targets;
    as_ignored[2] = as_ignored[6] = cpu::ignore_index;
    std::vector<float> losses(rows), lse(rows);
    cpu::cross_entropy_forward(losses.data(), lse.data(), logits.data(), as_ignored.data(), B, T, V);
    const auto dlogits0 = random_floats(rows * V, 93);
    std::vector<float> dlogits = dlogits0;
    cpu::cross_entropy_backward(dlogits.data(), lse.data(), logits.data(), as_ignored.data(), 0.25f, B, T, V);

    device_buffer<float> d_logits(logits), d_losses(rows), d_lse(rows), d_dlogits(dlogits0);
    device_buffer<std::int32_t> d_targets(targets);
    gpu::cross_entropy_forward(d_losses.get(), d_lse.get(), d_logits.get(), d_targets.get(), B, T, V, stream);
    auto got_losses = d_losses.download();
    const auto got_lse = d_lse.download();
    CHECK(std::isnan(got_losses[2]));
    CHECK(std::isnan(got_losses[6]));
    got_losses[2] = got_losses[6] = 0.0f;  // the CPU's ignored rows; every other row must match
    const auto e_losses = normalized_error(got_losses, losses);
    CHECK_MESSAGE(e_losses.error < 1e-6, e_losses.describe("losses"));
    const auto e_lse = normalized_error(got_lse, lse);
    CHECK_MESSAGE(e_lse.error < 1e-6, e_lse.describe("lse"));

    gpu::cross_entropy_backward(d_dlogits.get(), d_lse.get(), d_logits.get(), d_targets.get(), 0.25f, B, T, V, stream);
    const auto got = d_dlogits.download();
    for (const std::size_t row : {std::size_t{2}, std::size_t{6}}) {
        const std::vector<float> got_row(got.begin() + row * V, got.begin() + (row + 1) * V);
        const std::vector<float> start_row(dlogits0.begin() + row * V, dlogits0.begin() + (row + 1) * V);
        CHECK_MESSAGE(first_difference(got_row, start_row, "invalid row").empty(),
                      first_difference(got_row, start_row, "invalid row"));
    }
    const auto e = normalized_error(got, dlogits);
    CHECK_MESSAGE(e.error < 1e-6, e.describe("dlogits"));
}

}  // namespace

namespace {

TEST_CASE("cuda cross_entropy speed at the GPT-2 124M shape (B*T = 8192, V = 50257); lse repeats its bits") {
    if (skip_without_gpu()) return;
    test_stream stream;
    const std::size_t B = 8, T = 1024, V = 50257, rows = B * T;
    device_buffer<float> logits(rows * V), dlogits(rows * V), losses(rows), lse(rows);
    fill_pattern(logits.get(), rows * V, 1);
    gpu::scale_inplace(logits.get(), 4.0f, rows * V, stream);  // logits in [-4, 4]
    fill_pattern(dlogits.get(), rows * V, 2);
    device_buffer<std::int32_t> targets(random_targets(rows, V, 3));
    const double fwd = time_ms(stream, 10, [&] {
        gpu::cross_entropy_forward(losses.get(), lse.get(), logits.get(), targets.get(), B, T, V, stream);
    });
    const auto first = lse.download();
    gpu::cross_entropy_forward(losses.get(), lse.get(), logits.get(), targets.get(), B, T, V, stream);
    CHECK(first_difference(lse.download(), first, "lse").empty());
    const double bwd = time_ms(stream, 10, [&] {
        gpu::cross_entropy_backward(dlogits.get(), lse.get(), logits.get(), targets.get(), 1.0f / 8192, B, T, V,
                                    stream);
    });
    const double n = static_cast<double>(rows * V);
    MESSAGE("cross_entropy B*T=8192 V=50257: forward " << fwd << " ms (" << gigabytes_per_second(4 * n, fwd)
                                                       << " GB/s), backward " << bwd << " ms ("
                                                       << gigabytes_per_second(12 * n, bwd) << " GB/s)");
}

}  // namespace

namespace {

TEST_CASE("cuda cross_entropy_forward_backward: the bits of forward, zero and backward, and the CPU's") {
    if (skip_without_gpu()) return;
    // The fused kernel against the unfused CUDA kernels, bit for bit: losses, lse, and dlogits
    // written over garbage (the unfused path zero-fills first); ignored rows (every seventh) get
    // zeros, and an out-of-range target a NaN loss and zeros. Then against the CPU composition
    // within the unfused tests' thresholds: losses and lse 1e-6 normalized, dlogits 1e-6
    // normalized (scale 1/counted).
    test_stream stream;
    for (const auto [B, T, V] : shapes) {
        CAPTURE(B);
        CAPTURE(T);
        CAPTURE(V);
        const std::size_t rows = B * T;
        const auto logits = random_floats(rows * V, 101, -4.0, 4.0);
        auto targets = random_targets(rows, V, 102);
        if (rows > 5) targets[5] = static_cast<std::int32_t>(V);  // invalid: NaN loss, no gradient
        const auto garbage = random_floats(rows * V, 103);
        const float scale = 1.0f / static_cast<float>(rows);

        device_buffer<float> d_logits(logits), f_losses(rows), f_lse(rows), f_dlogits(garbage), u_losses(rows),
            u_lse(rows), u_dlogits(rows * V);
        device_buffer<std::int32_t> d_targets(targets);
        gpu::cross_entropy_forward_backward(f_losses.get(), f_lse.get(), f_dlogits.get(), d_logits.get(),
                                            d_targets.get(), scale, B, T, V, stream);
        gpu::cross_entropy_forward(u_losses.get(), u_lse.get(), d_logits.get(), d_targets.get(), B, T, V, stream);
        cudaMemsetAsync(u_dlogits.get(), 0, rows * V * sizeof(float), stream);
        gpu::cross_entropy_backward(u_dlogits.get(), u_lse.get(), d_logits.get(), d_targets.get(), scale, B, T, V,
                                    stream);
        const auto g_losses = f_losses.download(), g_lse = f_lse.download(), g_dlogits = f_dlogits.download();
        CHECK(first_difference(g_losses, u_losses.download(), "losses").empty());
        CHECK(first_difference(g_lse, u_lse.download(), "lse").empty());
        CHECK(first_difference(g_dlogits, u_dlogits.download(), "dlogits").empty());

        // The CPU with the invalid row as ignored (the CPU throws on it); that row's loss is NaN here.
        auto as_ignored = targets;
        if (rows > 5) as_ignored[5] = cpu::ignore_index;
        std::vector<float> losses(rows), lse(rows), dlogits(rows * V, 0.0f);
        cpu::cross_entropy_forward(losses.data(), lse.data(), logits.data(), as_ignored.data(), B, T, V);
        cpu::cross_entropy_backward(dlogits.data(), lse.data(), logits.data(), as_ignored.data(), scale, B, T, V);
        auto got_losses = g_losses;
        if (rows > 5) {
            CHECK(std::isnan(got_losses[5]));
            got_losses[5] = 0.0f;
        }
        const auto e_losses = normalized_error(got_losses, losses);
        const auto e_lse = normalized_error(g_lse, lse);
        const auto e_dlogits = normalized_error(g_dlogits, dlogits);
        CHECK_MESSAGE(e_losses.error < 1e-6, e_losses.describe("losses"));
        CHECK_MESSAGE(e_lse.error < 1e-6, e_lse.describe("lse"));
        CHECK_MESSAGE(e_dlogits.error < 1e-6, e_dlogits.describe("dlogits"));
    }
}

TEST_CASE("cuda cross_entropy_forward_backward speed against forward + zero + backward (B*T = 8192, V = 50257)") {
    if (skip_without_gpu()) return;
    test_stream stream;
    const std::size_t rows = 8192, V = 50257, N = rows * V;
    device_buffer<float> logits(N), dlogits(N), losses(rows), lse(rows);
    fill_pattern(logits.get(), N, 1);
    device_buffer<std::int32_t> targets(random_targets(rows, V, 111));
    const float scale = 1.0f / static_cast<float>(rows);
    const double fused = time_ms(stream, 5, [&] {
        gpu::cross_entropy_forward_backward(losses.get(), lse.get(), dlogits.get(), logits.get(), targets.get(), scale,
                                            1, rows, V, stream);
    });
    const double apart = time_ms(stream, 5, [&] {
        gpu::cross_entropy_forward(losses.get(), lse.get(), logits.get(), targets.get(), 1, rows, V, stream);
        cudaMemsetAsync(dlogits.get(), 0, N * sizeof(float), stream);
        gpu::cross_entropy_backward(dlogits.get(), lse.get(), logits.get(), targets.get(), scale, 1, rows, V, stream);
    });
    // Bytes from DRAM at least: fused reads the logits and writes dlogits (its second read may hit L2).
    MESSAGE("cross entropy forward + backward 8192 x 50257: fused " << fused << " ms ("
                                                                    << gigabytes_per_second(8.0 * static_cast<double>(N), fused)
                                                                    << " GB/s counting one read), apart " << apart
                                                                    << " ms");
}

}  // namespace
