// exp_inplace: float within one float epsilon (relative) of exp over the range the softmaxes use,
// the clamped ends, NaN kept, infinities to ~0 and inf; double as std::exp.
#include <cmath>                        // std::exp, std::isnan, std::abs
#include <cstddef>                      // std::size_t
#include <limits>                       // std::numeric_limits
#include <vector>                       // std::vector
#include <doctest/doctest.h>            // TEST_CASE, CHECK, CHECK_MESSAGE
#include <strata/kernels/cpu/exp.hpp>   // exp_inplace

namespace exp_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using strata::kernels::cpu::exp_inplace;

TEST_CASE("float exp_inplace is within one float epsilon of exp on [-87, 88]") {
    // 4 million points spread evenly over the range, both ends included.
    constexpr std::size_t points = 4'000'000;
    std::vector<float> x(points + 1);
    for (std::size_t i = 0; i <= points; ++i) x[i] = static_cast<float>(-87.0 + 175.0 * double(i) / double(points));
    std::vector<float> e = x;
    exp_inplace(e.data(), e.size());
    double worst = 0.0;
    float worst_at = 0.0f;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double exact = std::exp(static_cast<double>(x[i]));
        // In units of float's epsilon (2^-23): one ulp is 0.5 to 1 of them. Measured: 0.68.
        const double error = std::abs(e[i] - exact) / (exact * std::numeric_limits<float>::epsilon());
        if (error > worst) {
            worst = error;
            worst_at = x[i];
        }
    }
    CHECK_MESSAGE(worst < 1.0, "worst relative error " << worst << " epsilon at x = " << worst_at);
}

TEST_CASE("float exp_inplace clamps below -87 and above 88, keeps NaN, and maps infinities to ~0 and inf") {
    std::vector<float> x = {-1e30f, -1000.0f, -88.0f, 0.0f, 1000.0f};
    exp_inplace(x.data(), x.size());
    for (std::size_t i : {0, 1, 2}) CHECK(std::abs(x[i] / std::exp(-87.0) - 1.0) < 1e-6);
    CHECK(x[3] == 1.0f);
    CHECK(std::abs(x[4] / std::exp(88.0) - 1.0) < 1e-6);

    constexpr float inf = std::numeric_limits<float>::infinity();
    std::vector<float> special = {0.0f, std::numeric_limits<float>::quiet_NaN(), -inf, inf, -1.0f};
    exp_inplace(special.data(), special.size());
    CHECK(special[0] == 1.0f);
    CHECK(std::isnan(special[1]));
    CHECK((special[2] >= 0.0f && special[2] < 1e-37f));  // Eigen's exp flushes -inf to ~3e-39, not 0
    CHECK(special[3] == inf);
    CHECK(special[4] == doctest::Approx(std::exp(-1.0)).epsilon(1e-6));
}

TEST_CASE("double exp_inplace agrees with std::exp") {
    std::vector<double> x = {-700.0, -100.0, -1.0, -1e-9, 0.0, 0.5, 700.0};
    std::vector<double> e = x;
    exp_inplace(e.data(), e.size());
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(std::abs(e[i] / std::exp(x[i]) - 1.0) < 1e-15);
}

}  // namespace

}  // namespace exp_test
