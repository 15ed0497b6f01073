// residual and the flat-buffer helpers: forward values, gradients against finite differences,
// both precisions.
#include <cstddef>                                // std::size_t
#include <numeric>                                // std::inner_product
#include <vector>                                 // std::vector
#include <doctest/doctest.h>                      // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE
#include <strata/kernels/cpu/elementwise.hpp>     // add_inplace, scale_inplace, sum_of_squares
#include <strata/kernels/cpu/gradient_check.hpp>  // gradient_error, compare, random_vector, ...
#include <strata/kernels/cpu/residual.hpp>        // residual_forward, residual_backward

namespace residual_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using namespace strata::kernels::cpu;

// Glossary: N elements.
constexpr std::size_t N = 23;

template <class Real>
struct problem {
    std::vector<Real> a = random_vector<Real>(N, 61);
    std::vector<Real> b = random_vector<Real>(N, 62);
    std::vector<Real> out = std::vector<Real>(N);
    // dout doubles as the weights of the scalar loss sum(out * dout), so every output counts.
    std::vector<Real> dout = random_vector<Real>(N, 63);
    // Gradients start random: backward must add to them.
    std::vector<Real> da = random_vector<Real>(N, 64);
    std::vector<Real> db = random_vector<Real>(N, 65);

    double forward() {
        residual_forward(out.data(), a.data(), b.data(), N);
        return std::inner_product(out.begin(), out.end(), dout.begin(), 0.0);
    }
    void backward() {
        residual_backward(da.data(), db.data(), dout.data(), N);
    }
};

TEST_CASE_TEMPLATE("residual forward is a + b", Real, float, double) {
    problem<Real> p;
    p.forward();
    for (std::size_t i = 0; i < N; ++i) CHECK(p.out[i] == p.a[i] + p.b[i]);
}

TEST_CASE("residual backward matches central differences of both branches") {
    using P = problem<double>;
    // Threshold: the loss is linear, so differences are exact up to rounding (~1e-10); a branch
    // that misses dout is off by O(1).
    const auto da = gradient_error(P{}, &P::a, &P::da);
    CHECK_MESSAGE(da.error < 1e-6, da.describe("da"));
    const auto db = gradient_error(P{}, &P::b, &P::db);
    CHECK_MESSAGE(db.error < 1e-6, db.describe("db"));
}

TEST_CASE_TEMPLATE("add_inplace, scale_inplace and sum_of_squares", Real, float, double) {
    std::vector<Real> x = {1, -2, 3};
    const std::vector<Real> y = {0.5, 0.25, -4};
    add_inplace(x.data(), y.data(), x.size());
    CHECK(x == std::vector<Real>{1.5, -1.75, -1});
    scale_inplace(x.data(), 2.0, x.size());  // a double factor, also for float buffers
    CHECK(x == std::vector<Real>{3, -3.5, -2});
    CHECK(sum_of_squares(x.data(), x.size()) == 9.0 + 12.25 + 4.0);
    CHECK(sum_of_squares(x.data(), 0) == 0.0);
}

TEST_CASE("sum_of_squares accumulates float values in double") {
    // 2^24 + 1 is not a float: a float accumulator would stop at 2^24 and lose every later 1.
    std::vector<float> ones(20'000'000, 1.0f);
    CHECK(sum_of_squares(ones.data(), ones.size()) == 20'000'000.0);
}

}  // namespace

}  // namespace residual_test
