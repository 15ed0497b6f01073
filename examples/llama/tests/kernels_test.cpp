// The Llama block's own CPU kernels: forwards against the textbook formulas, every gradient
// against central finite differences in double (strata's gradient_check tools), float against
// double. Odd sizes so that no loop bound hides behind a symmetry.
#include "../kernels_cpu.hpp"  // llama::kernels::cpu::*

#include <strata/kernels/cpu/gradient_check.hpp>  // gradient_error, compare, random_vector

#include <doctest/doctest.h>  // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE

#include <algorithm>  // std::copy_n
#include <cmath>    // std::sqrt, std::exp, std::cos, std::sin, std::pow
#include <cstddef>  // std::size_t
#include <numeric>  // std::inner_product
#include <tuple>    // std::tuple
#include <vector>   // std::vector

namespace kernels_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using namespace llama::kernels::cpu;
using strata::kernels::cpu::compare;
using strata::kernels::cpu::gradient_error;
using strata::kernels::cpu::random_vector;

// Glossary: B batch, T time, C channels, NH heads.
constexpr std::size_t B = 2, T = 5, C = 7;
constexpr double eps = 1e-5;

template <class Real>
struct rmsnorm_problem {
    std::vector<Real> inp = random_vector<Real>(B * T * C, 1, -2.0, 2.0);
    std::vector<Real> weight = random_vector<Real>(C, 2, 0.5, 1.5);
    std::vector<Real> out = std::vector<Real>(B * T * C);
    std::vector<Real> rstd = std::vector<Real>(B * T);
    std::vector<Real> dout = random_vector<Real>(B * T * C, 4);  // the weights of loss = sum(out * dout)
    std::vector<Real> dinp = random_vector<Real>(B * T * C, 5);  // start random: backward must add
    std::vector<Real> dweight = random_vector<Real>(C, 6);

    double forward() {
        rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), B, T, C, eps);
        return std::inner_product(out.begin(), out.end(), dout.begin(), 0.0);
    }
    void backward() {
        rmsnorm_backward<Real>(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), rstd.data(), B, T, C);
    }
};

TEST_CASE("rmsnorm forward is x / sqrt(mean(x^2) + eps) * w") {
    rmsnorm_problem<double> p;
    p.forward();
    std::vector<double> expected(B * T * C);
    for (std::size_t row = 0; row < B * T; ++row) {
        double ms = 0.0;
        for (std::size_t c = 0; c < C; ++c) ms += p.inp[row * C + c] * p.inp[row * C + c] / double(C);
        for (std::size_t c = 0; c < C; ++c) expected[row * C + c] = p.inp[row * C + c] / std::sqrt(ms + eps) * p.weight[c];
    }
    const auto out = compare(p.out, expected, 1.0);
    CHECK_MESSAGE(out.error < 1e-13, out.describe("out"));
}

TEST_CASE("rmsnorm backward matches central differences of the input and the gain") {
    using P = rmsnorm_problem<double>;
    // Central differences in double agree to ~1e-9 here; a dropped term (the path through rstd) is off by O(1).
    const auto dinp = gradient_error(P{}, &P::inp, &P::dinp);
    CHECK_MESSAGE(dinp.error < 1e-6, dinp.describe("dinp"));
    const auto dweight = gradient_error(P{}, &P::weight, &P::dweight);
    CHECK_MESSAGE(dweight.error < 1e-6, dweight.describe("dweight"));
}

TEST_CASE("rmsnorm backward with dinp = null still accumulates the gain's gradient") {
    rmsnorm_problem<double> with, without;
    with.forward();
    with.backward();
    without.forward();
    rmsnorm_backward<double>(nullptr, without.dweight.data(), without.dout.data(), without.inp.data(),
                             without.weight.data(), without.rstd.data(), B, T, C);
    CHECK(with.dweight == without.dweight);
}

// rope over a fused (B, T, 3C) qkv with NH heads of size C3 / NH (even).
constexpr std::size_t RC = 12, NH = 3;  // HS = 4
constexpr double theta = 10000.0;

template <class Real>
struct rope_problem {
    std::vector<Real> qkv = random_vector<Real>(B * T * 3 * RC, 11);
    std::vector<Real> out = std::vector<Real>(B * T * 3 * RC);
    std::vector<Real> dout = random_vector<Real>(B * T * 3 * RC, 12);
    std::vector<Real> dqkv = random_vector<Real>(B * T * 3 * RC, 13);

    double forward() {
        rope_forward(out.data(), qkv.data(), B, T, RC, NH, theta);
        return std::inner_product(out.begin(), out.end(), dout.begin(), 0.0);
    }
    void backward() { rope_backward(dqkv.data(), dout.data(), B, T, RC, NH, theta); }
};

TEST_CASE("rope forward rotates the two halves of each q and k head by t * theta^(-2i/HS); v passes") {
    rope_problem<double> p;
    p.forward();
    const std::size_t HS = RC / NH, half = HS / 2;
    std::vector<double> expected(p.out.size());
    for (std::size_t bt = 0; bt < B * T; ++bt) {
        const std::size_t t = bt % T;
        const double* x = p.qkv.data() + bt * 3 * RC;
        double* y = expected.data() + bt * 3 * RC;
        for (std::size_t h = 0; h < 2 * NH; ++h) {
            for (std::size_t i = 0; i < HS; ++i) {
                const std::size_t pair = i % half;
                const double angle = double(t) / std::pow(theta, 2.0 * double(pair) / double(HS));
                // rotate_half(x) = (-x2, x1): y = x cos + rotate_half(x) sin
                const double rotated = i < half ? -x[h * HS + i + half] : x[h * HS + i - half];
                y[h * HS + i] = x[h * HS + i] * std::cos(angle) + rotated * std::sin(angle);
            }
        }
        for (std::size_t c = 2 * RC; c < 3 * RC; ++c) y[c] = x[c];
    }
    const auto out = compare(p.out, expected, 1.0);
    CHECK_MESSAGE(out.error < 1e-14, out.describe("out"));
    // position 0 is not rotated at all
    for (std::size_t c = 0; c < 3 * RC; ++c) CHECK(p.out[c] == p.qkv[c]);
}

TEST_CASE("rope backward matches central differences") {
    using P = rope_problem<double>;
    const auto dqkv = gradient_error(P{}, &P::qkv, &P::dqkv);
    CHECK_MESSAGE(dqkv.error < 1e-6, dqkv.describe("dqkv"));
}

TEST_CASE("rope refuses heads of an odd size, with a hint") {
    std::vector<double> x(B * T * 3 * 9), y(x.size());
    CHECK_THROWS_WITH_AS(rope_forward(y.data(), x.data(), B, T, 9, 3, theta),
                         doctest::Contains("heads of an even size"), strata::error);
}

TEST_CASE_TEMPLATE("rope_rotate (decoding) gives rope_forward's bits at the same absolute positions, in place, in any "
                   "row layout", Real, float, double) {
    // One sequence of T2 positions (B = 1), 3 heads of 4, llama3 frequencies: rope_forward rotates
    // the whole (T2, 3C) qkv; rope_rotate rotates rows first .. T2 - 1 of a compact copy (the q and
    // k heads, then v, with one spare channel per row: stride 3C + 1) starting at position `first`.
    constexpr std::size_t T2 = 9, NH2 = 3, HS = 4, C2 = NH2 * HS, first = 4, stride = 3 * C2 + 1;
    const llama::kernels::rope_params rope(100.0, 8.0, 1.0, 4.0, 4.0);
    const auto qkv = random_vector<Real>(T2 * 3 * C2, 61);
    std::vector<Real> rotated(qkv.size());
    rope_forward(rotated.data(), qkv.data(), 1, T2, C2, NH2, rope);
    std::vector<Real> rows((T2 - first) * stride, Real(7));
    for (std::size_t r = 0; r < T2 - first; ++r)
        std::copy_n(qkv.begin() + static_cast<std::ptrdiff_t>((first + r) * 3 * C2), 3 * C2, rows.begin() + static_cast<std::ptrdiff_t>(r * stride));
    rope_rotate(rows.data(), T2 - first, stride, 2 * NH2, HS, first, rope);
    for (std::size_t r = 0; r < T2 - first; ++r) {
        for (std::size_t c = 0; c < 3 * C2; ++c) {
            INFO("row " << first + r << ", channel " << c);
            CHECK(rows[r * stride + c] == rotated[(first + r) * 3 * C2 + c]);  // bitwise: q, k rotated, v kept
        }
        CHECK(rows[r * stride + 3 * C2] == Real(7));  // the spare channel untouched
    }
    CHECK_THROWS_WITH_AS(rope_rotate(rows.data(), 1, 5, 2, 3, 0, rope), doctest::Contains("heads of an even size"),
                         strata::error);
    CHECK_THROWS_WITH_AS(rope_rotate(rows.data(), 1, 7, 2, 4, 0, rope), doctest::Contains("stride 7"), strata::error);
}

constexpr std::size_t N = 37;

template <class Real>
struct swiglu_problem {
    std::vector<Real> gate = random_vector<Real>(N, 21, -4.0, 4.0);
    std::vector<Real> up = random_vector<Real>(N, 22, -2.0, 2.0);
    std::vector<Real> out = std::vector<Real>(N);
    std::vector<Real> dout = random_vector<Real>(N, 23);
    std::vector<Real> dgate = random_vector<Real>(N, 24);
    std::vector<Real> dup = random_vector<Real>(N, 25);

    double forward() {
        swiglu_forward(out.data(), gate.data(), up.data(), N);
        return std::inner_product(out.begin(), out.end(), dout.begin(), 0.0);
    }
    void backward() { swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), N); }
};

TEST_CASE("swiglu forward is gate * sigmoid(gate) * up") {
    swiglu_problem<double> p;
    p.forward();
    std::vector<double> expected(N);
    for (std::size_t i = 0; i < N; ++i) expected[i] = p.gate[i] / (1.0 + std::exp(-p.gate[i])) * p.up[i];
    const auto out = compare(p.out, expected, 1.0);
    CHECK_MESSAGE(out.error < 1e-14, out.describe("out"));
}

TEST_CASE("swiglu backward matches central differences of gate and up") {
    using P = swiglu_problem<double>;
    const auto dgate = gradient_error(P{}, &P::gate, &P::dgate);
    CHECK_MESSAGE(dgate.error < 1e-6, dgate.describe("dgate"));
    const auto dup = gradient_error(P{}, &P::up, &P::dup);
    CHECK_MESSAGE(dup.error < 1e-6, dup.describe("dup"));
}

TEST_CASE("the kernels in float agree with double on the same inputs") {
    // Absolute error for values below 1, relative above: a few float roundings per element.
    constexpr double tolerance = 1e-5;
    {
        const auto [f, d] = strata::kernels::cpu::solve_in_float_and_double<rmsnorm_problem>();
        for (auto [name, x, y] : {std::tuple{"rmsnorm out", &f.out, &d.out}, std::tuple{"rmsnorm dinp", &f.dinp, &d.dinp},
                                  std::tuple{"rmsnorm dweight", &f.dweight, &d.dweight}}) {
            const auto e = compare(*x, *y, 1.0);
            CHECK_MESSAGE(e.error < tolerance, e.describe(name));
        }
    }
    {
        const auto [f, d] = strata::kernels::cpu::solve_in_float_and_double<rope_problem>();
        const auto out = compare(f.out, d.out, 1.0);
        CHECK_MESSAGE(out.error < tolerance, out.describe("rope out"));
        const auto dqkv = compare(f.dqkv, d.dqkv, 1.0);
        CHECK_MESSAGE(dqkv.error < tolerance, dqkv.describe("rope dqkv"));
    }
    {
        const auto [f, d] = strata::kernels::cpu::solve_in_float_and_double<swiglu_problem>();
        for (auto [name, x, y] : {std::tuple{"swiglu out", &f.out, &d.out}, std::tuple{"swiglu dgate", &f.dgate, &d.dgate},
                                  std::tuple{"swiglu dup", &f.dup, &d.dup}}) {
            const auto e = compare(*x, *y, 1.0);
            CHECK_MESSAGE(e.error < tolerance, e.describe(name));
        }
    }
}

}  // namespace

}  // namespace kernels_test
