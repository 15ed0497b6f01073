// layernorm: forward against the textbook formula, every gradient against finite differences,
// float against double.
#include <cmath>                                  // std::sqrt
#include <cstddef>                                // std::size_t
#include <numeric>                                // std::inner_product
#include <type_traits>                            // std::is_same_v
#include <vector>                                 // std::vector
#include <doctest/doctest.h>                      // TEST_CASE, TEST_CASE_TEMPLATE, CHECK, INFO
#include <strata/kernels/cpu/gradient_check.hpp>  // gradient_error, compare, random_vector, ...
#include <strata/kernels/cpu/layernorm.hpp>       // layernorm_*, residual_layernorm_forward

namespace layernorm_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using namespace strata::kernels::cpu;

// Glossary: B batch, T time, C channels. Odd sizes so no loop bound hides behind a symmetry.
constexpr std::size_t B = 2, T = 5, C = 7;

// One random problem in precision Real. The inputs sit off zero (mean ~3) so the mean matters.
template <class Real>
struct problem {
    std::vector<Real> inp = random_vector<Real>(B * T * C, 1, 2.0, 4.0);
    std::vector<Real> weight = random_vector<Real>(C, 2, 0.5, 1.5);
    std::vector<Real> bias = random_vector<Real>(C, 3);
    std::vector<Real> out = std::vector<Real>(B * T * C);
    std::vector<Real> mean = std::vector<Real>(B * T);
    std::vector<Real> rstd = std::vector<Real>(B * T);
    // dout doubles as the weights of the scalar loss sum(out * dout), so every output counts.
    std::vector<Real> dout = random_vector<Real>(B * T * C, 4);
    // Gradients start random: backward must add to them.
    std::vector<Real> dinp = random_vector<Real>(B * T * C, 5);
    std::vector<Real> dweight = random_vector<Real>(C, 6);
    std::vector<Real> dbias = random_vector<Real>(C, 7);

    double forward() {
        layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                          bias.data(), B, T, C);
        return std::inner_product(out.begin(), out.end(), dout.begin(), 0.0);
    }
    void backward() {
        layernorm_backward(dinp.data(), dweight.data(), dbias.data(), mean.data(), rstd.data(),
                           dout.data(), inp.data(), weight.data(), B, T, C);
    }
};

TEST_CASE_TEMPLATE("layernorm forward is (x - mean) / sqrt(biased var + 1e-5) * w + b", Real, float,
                   double) {
    problem<Real> p;
    p.forward();
    std::vector<double> expected(B * T * C);
    for (std::size_t row = 0; row < B * T; ++row) {
        double mean = 0.0, var = 0.0;
        for (std::size_t c = 0; c < C; ++c) mean += p.inp[row * C + c] / double(C);
        for (std::size_t c = 0; c < C; ++c) {
            var += (p.inp[row * C + c] - mean) * (p.inp[row * C + c] - mean) / double(C);
        }
        CHECK(p.mean[row] == doctest::Approx(mean).epsilon(1e-6));
        CHECK(p.rstd[row] == doctest::Approx(1.0 / std::sqrt(var + 1e-5)).epsilon(1e-6));
        for (std::size_t c = 0; c < C; ++c) {
            expected[row * C + c] =
                (p.inp[row * C + c] - mean) / std::sqrt(var + 1e-5) * p.weight[c] + p.bias[c];
        }
    }
    // floor 1.0: absolute error for outputs below 1, relative above; a few roundings of Real.
    const double tolerance = std::is_same_v<Real, float> ? 1e-6 : 1e-13;
    const auto out = compare(p.out, expected, 1.0);
    CHECK_MESSAGE(out.error < tolerance, out.describe("out"));
}

TEST_CASE("layernorm backward matches central differences of every input and weight") {
    using P = problem<double>;
    // Threshold: central differences in double agree to ~1e-9 relative here; a dropped term
    // (e.g. the path through rstd) is off by O(1).
    const auto dinp = gradient_error(P{}, &P::inp, &P::dinp);
    CHECK_MESSAGE(dinp.error < 1e-6, dinp.describe("dinp"));
    const auto dweight = gradient_error(P{}, &P::weight, &P::dweight);
    CHECK_MESSAGE(dweight.error < 1e-6, dweight.describe("dweight"));
    const auto dbias = gradient_error(P{}, &P::bias, &P::dbias);
    CHECK_MESSAGE(dbias.error < 1e-6, dbias.describe("dbias"));
}

TEST_CASE("layernorm in float agrees with double on the same inputs") {
    const auto [f, d] = solve_in_float_and_double<problem>();
    // Absolute error for values below 1, relative above: float rounding of a few C-term sums.
    constexpr double tolerance = 1e-5;
    const auto out = compare(f.out, d.out, 1.0);
    CHECK_MESSAGE(out.error < tolerance, out.describe("out"));
    const auto dinp = compare(f.dinp, d.dinp, 1.0);
    CHECK_MESSAGE(dinp.error < tolerance, dinp.describe("dinp"));
    const auto dweight = compare(f.dweight, d.dweight, 1.0);
    CHECK_MESSAGE(dweight.error < tolerance, dweight.describe("dweight"));
    const auto dbias = compare(f.dbias, d.dbias, 1.0);
    CHECK_MESSAGE(dbias.error < tolerance, dbias.describe("dbias"));
}

TEST_CASE_TEMPLATE("residual_layernorm_forward writes x + y and the layernorm of it, bit for bit", Real, float,
                   double) {
    // The fused op against its composition spelled out here: res = x + y element by element, then
    // layernorm_forward of res. Bitwise: the reference is that composition, so any other input
    // order, a dropped add or stats from x alone differ.
    const auto x = random_vector<Real>(B * T * C, 11, 1.0, 3.0);
    const auto y = random_vector<Real>(B * T * C, 12);
    const auto weight = random_vector<Real>(C, 13, 0.5, 1.5);
    const auto bias = random_vector<Real>(C, 14);
    std::vector<Real> res(B * T * C), out(B * T * C), mean(B * T), rstd(B * T);
    residual_layernorm_forward(res.data(), out.data(), mean.data(), rstd.data(), x.data(), y.data(), weight.data(),
                               bias.data(), B, T, C);
    std::vector<Real> want_res(B * T * C), want_out(B * T * C), want_mean(B * T), want_rstd(B * T);
    for (std::size_t i = 0; i < B * T * C; ++i) want_res[i] = x[i] + y[i];
    layernorm_forward(want_out.data(), want_mean.data(), want_rstd.data(), want_res.data(), weight.data(), bias.data(),
                      B, T, C);
    CHECK(res == want_res);
    CHECK(out == want_out);
    CHECK(mean == want_mean);
    CHECK(rstd == want_rstd);
}

}  // namespace

}  // namespace layernorm_test
