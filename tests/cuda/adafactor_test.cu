// kernels/cuda/adafactor.cuh against the reference strata::adafactor_update<float>, bit for bit:
// the kernel sums in the reference's canonical order with IEEE double intrinsics, so the host and
// the device agree exactly (what lets a group's home choose where its update runs).
#include "cuda/cuda_test_util.cuh"  // skip_without_gpu, device_buffer, test_stream, comparisons

#include <strata/kernels/cuda/adafactor.cuh>  // the kernel under test
#include <strata/optim/adafactor.hpp>         // adafactor_update, adafactor_constants_for (the oracle)

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE, CAPTURE

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint32_t
#include <string>   // std::string
#include <vector>   // std::vector

namespace {

using namespace strata::test;
namespace gpu = strata::kernels::cuda;

// Threshold: none.
void check_adafactor_trajectory(const strata::adafactor_hparams& h, const strata::shape& s, bool decay) {
    test_stream stream;
    const std::size_t n = s.numel();
    using O = strata::adafactor_optimizer;
    std::vector<float> p = random_floats(n, 71), row(O::state_shape(0, s).numel()), col(O::state_shape(1, s).numel()),
                       var(O::state_shape(2, s).numel());
    // the state this tensor does not keep (empty on the host): one unused element on the device
    const auto at_least_one = [](const std::vector<float>& x) { return x.empty() ? std::vector<float>(1) : x; };
    device_buffer<float> d_p(p, 0), d_g(n, 0), d_row(at_least_one(row), 0), d_col(at_least_one(col), 0),
        d_var(at_least_one(var), 0);
    const double lrs[] = {1e-2, 0.5, 5e-2, 2.5e-3, 0.3, 7e-3};
    const strata::adafactor_view v = strata::adafactor_view_of(s, n);
    for (long step = 1; step <= 6; ++step) {
        CAPTURE(step);
        const auto g = random_floats(n, 80 + static_cast<std::uint32_t>(step), -1.0 / step, 1.0 / step);
        strata::adafactor_update<float>(p, g, row, col, var, s, h, lrs[step - 1], step, decay);
        d_g.upload(g);
        gpu::adafactor(d_p.get(), d_g.get(), d_row.get(), d_col.get(), d_var.get(), v,
                       strata::adafactor_constants_for<float>(h, lrs[step - 1], step, decay, n), stream);
        const std::string dp = first_difference(d_p.download(), p, "p");
        CHECK_MESSAGE(dp.empty(), dp);
        if (v.factored) {
            const std::string dr = first_difference(d_row.download(), row, "row_var");
            const std::string dc = first_difference(d_col.download(), col, "col_var");
            CHECK_MESSAGE(dr.empty(), dr);
            CHECK_MESSAGE(dc.empty(), dc);
        } else {
            const std::string dv = first_difference(d_var.download(), var, "variance");
            CHECK_MESSAGE(dv.empty(), dv);
        }
    }
}

TEST_CASE("cuda adafactor equals adafactor_update<float> bit for bit over six steps") {
    if (skip_without_gpu()) return;
    const strata::adafactor_hparams plain{};
    const strata::adafactor_hparams decayed{.d = 2.0, .weight_decay = 0.1};
    for (const strata::shape& s : {strata::shape{1}, strata::shape{1001}, strata::shape{100'003}, strata::shape{3, 5},
                                   strata::shape{768, 2304}, strata::shape{2, 7, 9}}) {
        for (const bool decay : {true, false}) {
            CAPTURE(s.to_string());
            CAPTURE(decay);
            for (const auto& h : {plain, decayed}) check_adafactor_trajectory(h, s, decay);
        }
    }
}

}  // namespace
