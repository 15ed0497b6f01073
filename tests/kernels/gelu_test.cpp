// gelu: forward against GPT-2's formula and known values, the derivative against finite
// differences, float against double.
#include <cmath>                                  // std::tanh, std::sqrt, std::pow, std::isfinite
#include <cstddef>                                // std::size_t
#include <numbers>                                // std::numbers::pi
#include <numeric>                                // std::inner_product
#include <type_traits>                            // std::is_same_v
#include <vector>                                 // std::vector
#include <doctest/doctest.h>                      // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE
#include <strata/kernels/cpu/gelu.hpp>            // gelu_forward, gelu_backward
#include <strata/kernels/cpu/gradient_check.hpp>  // gradient_error, compare, random_vector, ...

namespace gelu_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using namespace strata::kernels::cpu;

// Glossary: N elements. Inputs span [-5, 5]: both tails and the curved middle.
constexpr std::size_t N = 37;

template <class Real>
struct problem {
    std::vector<Real> inp = random_vector<Real>(N, 51, -5.0, 5.0);
    std::vector<Real> out = std::vector<Real>(N);
    // dout doubles as the weights of the scalar loss sum(out * dout), so every output counts.
    std::vector<Real> dout = random_vector<Real>(N, 52);
    // The gradient starts random: backward must add to it.
    std::vector<Real> dinp = random_vector<Real>(N, 53);

    double forward() {
        gelu_forward(out.data(), inp.data(), N);
        return std::inner_product(out.begin(), out.end(), dout.begin(), 0.0);
    }
    void backward() {
        gelu_backward(dinp.data(), dout.data(), inp.data(), N);
    }
};

TEST_CASE_TEMPLATE("gelu forward is 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))", Real, float,
                   double) {
    problem<Real> p;
    p.forward();
    std::vector<double> expected(N);
    for (std::size_t i = 0; i < N; ++i) {
        // Written as Hugging Face's NewGELUActivation writes it.
        const double x = p.inp[i];
        expected[i] = 0.5 * x *
                      (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) *
                                       (x + 0.044715 * std::pow(x, 3.0))));
    }
    // Absolute error for values below 1, relative above: a handful of roundings of Real.
    const double tolerance = std::is_same_v<Real, float> ? 1e-6 : 1e-15;
    const auto out = compare(p.out, expected, 1.0);
    CHECK_MESSAGE(out.error < tolerance, out.describe("out"));
}

TEST_CASE("gelu matches values of the tanh approximation computed independently") {
    // gelu_new(x) for x = -3, -1, 0, 0.5, 1, 3, from the formula in 60-digit decimal
    // arithmetic (Python decimal), rounded to double.
    const std::vector<double> x = {-3.0, -1.0, 0.0, 0.5, 1.0, 3.0};
    const std::vector<double> expected = {
        -0.003637392081773019, -0.1588080093917233, 0.0,
        0.34571400982514394,   0.8411919906082767,  2.996362607918227};
    std::vector<double> out(x.size());
    gelu_forward(out.data(), x.data(), x.size());
    const auto result = compare(out, expected);
    // A few ulps, times ~500 at x = -3 where 1 + tanh cancels.
    CHECK_MESSAGE(result.error < 1e-13, result.describe("out"));
}

TEST_CASE("gelu backward matches central differences, and stays finite far out") {
    using P = problem<double>;
    // Threshold: central differences in double agree to ~1e-7 here; dropping the tanh' term is
    // off by O(1) in the middle of the range.
    const auto dinp = gradient_error(P{}, &P::inp, &P::dinp);
    CHECK_MESSAGE(dinp.error < 1e-6, dinp.describe("dinp"));

    // Where tanh saturates the derivative is exactly 0 (x << 0) or 1 (x >> 0), never NaN.
    const std::vector<double> far = {-1e4, 1e4};
    const std::vector<double> ones = {1.0, 1.0};
    std::vector<double> dfar = {0.0, 0.0};
    gelu_backward(dfar.data(), ones.data(), far.data(), far.size());
    CHECK(dfar[0] == 0.0);
    CHECK(dfar[1] == 1.0);
}

TEST_CASE("gelu in float agrees with double on the same inputs") {
    const auto [f, d] = solve_in_float_and_double<problem>();
    // Absolute error for values below 1, relative above: tanh and a few products in float.
    constexpr double tolerance = 1e-6;
    const auto out = compare(f.out, d.out, 1.0);
    CHECK_MESSAGE(out.error < tolerance, out.describe("out"));
    const auto dinp = compare(f.dinp, d.dinp, 1.0);
    CHECK_MESSAGE(dinp.error < tolerance, dinp.describe("dinp"));
}

}  // namespace

}  // namespace gelu_test
