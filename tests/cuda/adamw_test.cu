// kernels/cuda/adamw.cuh against the reference strata::adamw_update<float>, bit for bit.
#include "cuda/cuda_test_util.cuh"  // skip_without_gpu, device_buffer, test_stream, comparisons

#include <strata/kernels/cuda/adamw.cuh>  // the kernel under test
#include <strata/optim/adamw.hpp>         // adamw_update, adamw_constants_for (the oracle)

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE, CAPTURE

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint32_t
#include <vector>   // std::vector

namespace {

using namespace strata::test;
namespace gpu = strata::kernels::cuda;

// Threshold: none. The kernel performs the reference's operations in its order with intrinsics
// that nvcc can neither contract nor approximate, so every step must give the same bits.
void check_trajectory(const strata::adamw_hparams& h, std::size_t n, std::size_t offset, bool decay) {
    test_stream stream;
    std::vector<float> p = random_floats(n, 51), m(n, 0.0f), v(n, 0.0f);
    device_buffer<float> d_p(p, offset), d_g(n, offset), d_m(m, offset), d_v(v, offset);
    const double lrs[] = {6e-4, 3e-4, 1e-3, 2.5e-4, 1e-4, 7e-4};
    for (long step = 1; step <= 6; ++step) {
        CAPTURE(step);
        // Gradients of several magnitudes, so m and v round differently at every step.
        const auto g = random_floats(n, 60 + static_cast<std::uint32_t>(step), -1.0 / step, 1.0 / step);
        strata::adamw_update<float>(p, g, m, v, h, lrs[step - 1], step, decay);
        d_g.upload(g);
        gpu::adamw(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n,
                   strata::adamw_constants_for<float>(h, lrs[step - 1], step, decay), stream);
        const std::string dp = first_difference(d_p.download(), p, "p");
        const std::string dm = first_difference(d_m.download(), m, "m");
        const std::string dv = first_difference(d_v.download(), v, "v");
        CHECK_MESSAGE(dp.empty(), dp);
        CHECK_MESSAGE(dm.empty(), dm);
        CHECK_MESSAGE(dv.empty(), dv);
    }
}

TEST_CASE("cuda adamw equals adamw_update<float> bit for bit over six steps") {
    if (skip_without_gpu()) return;
    strata::adamw_hparams gpt;  // 0.9, 0.95, 1e-8, 0.1: GPT-2's
    strata::adamw_hparams no_decay = gpt;
    no_decay.weight_decay = 0;
    strata::adamw_hparams large_lerp = gpt;  // beta1 < 0.5: torch's lerp takes its other formula
    large_lerp.beta1 = 0.3;
    large_lerp.beta2 = 0.999;
    // n: below a float4, odd, and a million plus a tail that is no multiple of 4, 8 or 16.
    for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{1001}, std::size_t{1'000'003}}) {
        for (const std::size_t offset : {0, 1}) {  // 1: misaligned, the scalar path
            for (const bool decay : {true, false}) {
                CAPTURE(n);
                CAPTURE(offset);
                CAPTURE(decay);
                check_trajectory(gpt, n, offset, decay);
                check_trajectory(no_decay, n, offset, decay);
                check_trajectory(large_lerp, n, offset, decay);
            }
        }
    }
}

}  // namespace

namespace {

TEST_CASE("cuda adamw speed over GPT-2 124M parameters; the first million elements keep the reference's bits") {
    if (skip_without_gpu()) return;
    test_stream stream;
    const std::size_t n = 124'439'808, checked = 1'000'003;
    device_buffer<float> p(n), g(n), m(n), v(n);
    fill_pattern(p.get(), n, 1);
    fill_pattern(g.get(), n, 2);
    strata::cuda::check(cudaMemset(m.get(), 0, n * sizeof(float)), "cudaMemset");
    strata::cuda::check(cudaMemset(v.get(), 0, n * sizeof(float)), "cudaMemset");
    std::vector<float> host_p = p.download(), host_g = g.download();
    host_p.resize(checked);
    host_g.resize(checked);
    std::vector<float> host_m(checked, 0.0f), host_v(checked, 0.0f);

    const strata::adamw_hparams h;
    const int reps = 20;
    long step = 0;  // time_ms makes one warm-up call, then reps calls: steps 1 .. reps + 1
    const double ms = time_ms(stream, reps, [&] {
        ++step;
        gpu::adamw(p.get(), g.get(), m.get(), v.get(), n, strata::adamw_constants_for<float>(h, 6e-4, step, true),
                   stream);
    });
    MESSAGE("adamw n=124M: " << ms << " ms per step, " << gigabytes_per_second(28.0 * n, ms) << " GB/s");

    // Elements are independent: the reference on a prefix reproduces the same steps.
    for (long s = 1; s <= step; ++s) strata::adamw_update<float>(host_p, host_g, host_m, host_v, h, 6e-4, s, true);
    auto got_p = p.download(), got_m = m.download(), got_v = v.download();
    got_p.resize(checked), got_m.resize(checked), got_v.resize(checked);
    CHECK(step == reps + 1);
    CHECK_MESSAGE(first_difference(got_p, host_p, "p").empty(), first_difference(got_p, host_p, "p"));
    CHECK_MESSAGE(first_difference(got_m, host_m, "m").empty(), first_difference(got_m, host_m, "m"));
    CHECK_MESSAGE(first_difference(got_v, host_v, "v").empty(), first_difference(got_v, host_v, "v"));
}

}  // namespace
