// kernels/cuda/sgd.cuh against the reference strata::sgd_update<float>, bit for bit, and
// ops<cuda_backend>::sgd (what the trainers launch) against the same.
#include "cuda/cuda_test_util.cuh"  // skip_without_gpu, device_buffer, test_stream, comparisons

#include <strata/kernels/cuda/sgd.cuh>  // the kernel under test
#include <strata/optim/sgd.hpp>         // sgd_update, sgd_constants_for (the oracle)

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE, CAPTURE

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint32_t
#include <string>   // std::string
#include <vector>   // std::vector

namespace {

using namespace strata::test;
namespace gpu = strata::kernels::cuda;

// Threshold: none. The kernel performs the reference's operations in its order with intrinsics
// that nvcc can neither contract nor approximate, so every step must give the same bits.
void check_sgd_trajectory(const strata::sgd_hparams& h, std::size_t n, std::size_t offset, bool decay) {
    test_stream stream;
    std::vector<float> p = random_floats(n, 71), b(n, 0.0f);
    device_buffer<float> d_p(p, offset), d_g(n, offset), d_b(b, offset);
    const double lrs[] = {3e-2, 1e-2, 5e-2, 2.5e-3, 1e-3, 7e-3};
    for (long step = 1; step <= 6; ++step) {
        CAPTURE(step);
        const auto g = random_floats(n, 80 + static_cast<std::uint32_t>(step), -1.0 / step, 1.0 / step);
        strata::sgd_update<float>(p, g, b, h, lrs[step - 1], decay);
        d_g.upload(g);
        gpu::sgd(d_p.get(), d_g.get(), d_b.get(), n, strata::sgd_constants_for<float>(h, lrs[step - 1], decay), stream);
        const std::string dp = first_difference(d_p.download(), p, "p");
        const std::string db = first_difference(d_b.download(), b, "momentum");
        CHECK_MESSAGE(dp.empty(), dp);
        CHECK_MESSAGE(db.empty(), db);
    }
}

TEST_CASE("cuda sgd equals sgd_update<float> bit for bit over six steps") {
    if (skip_without_gpu()) return;
    const strata::sgd_hparams momentum{.momentum = 0.9, .weight_decay = 0.0, .nesterov = false};
    const strata::sgd_hparams decayed{.momentum = 0.9, .weight_decay = 1e-2, .nesterov = false};
    const strata::sgd_hparams nesterov{.momentum = 0.9, .weight_decay = 0.1, .nesterov = true};
    const strata::sgd_hparams plain{.momentum = 0.0, .weight_decay = 1e-2, .nesterov = false};
    // n: below a float4, odd, and a million plus a tail that is no multiple of 4
    for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{1001}, std::size_t{1'000'003}}) {
        for (const std::size_t offset : {0, 1}) {  // 1: misaligned, the scalar path
            for (const bool decay : {true, false}) {
                CAPTURE(n);
                CAPTURE(offset);
                CAPTURE(decay);
                for (const auto& h : {momentum, decayed, nesterov, plain}) check_sgd_trajectory(h, n, offset, decay);
            }
        }
    }
}

}  // namespace
