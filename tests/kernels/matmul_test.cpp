// matmul (Conv1D layout) and the tied LM head: forward against naive loops, every gradient
// against finite differences, float against double.
#include <cstddef>                                // std::size_t
#include <cstring>                                // std::memcmp
#include <numeric>                                // std::inner_product
#include <type_traits>                            // std::is_same_v
#include <vector>                                 // std::vector
#include <doctest/doctest.h>                      // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE
#include <strata/kernels/cpu/gradient_check.hpp>  // gradient_error, compare, random_vector, ...
#include <strata/kernels/cpu/matmul.hpp>          // matmul_*, lm_head_*

namespace matmul_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using namespace strata::kernels::cpu;

// Glossary: B batch, T time, C input channels, OC output channels, V vocab. Odd and distinct, so a
// swapped index or a transposed weight cannot pass by symmetry.
constexpr std::size_t B = 2, T = 5, C = 7, OC = 9, V = 11;

template <class Real>
struct linear_problem {
    std::vector<Real> inp = random_vector<Real>(B * T * C, 11);
    std::vector<Real> weight = random_vector<Real>(C * OC, 12);
    std::vector<Real> bias = random_vector<Real>(OC, 13);
    std::vector<Real> out = std::vector<Real>(B * T * OC);
    // dout doubles as the weights of the scalar loss sum(out * dout), so every output counts.
    std::vector<Real> dout = random_vector<Real>(B * T * OC, 14);
    // Gradients start random: backward must add to them.
    std::vector<Real> dinp = random_vector<Real>(B * T * C, 15);
    std::vector<Real> dweight = random_vector<Real>(C * OC, 16);
    std::vector<Real> dbias = random_vector<Real>(OC, 17);

    double forward() {
        matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), B, T, C, OC);
        return std::inner_product(out.begin(), out.end(), dout.begin(), 0.0);
    }
    void backward() {
        matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                        weight.data(), B, T, C, OC);
    }
};

template <class Real>
struct head_problem {
    std::vector<Real> inp = random_vector<Real>(B * T * C, 21);
    std::vector<Real> wte = random_vector<Real>(V * C, 22);
    std::vector<Real> logits = std::vector<Real>(B * T * V);
    std::vector<Real> dlogits = random_vector<Real>(B * T * V, 23);
    std::vector<Real> dinp = random_vector<Real>(B * T * C, 24);
    std::vector<Real> dwte = random_vector<Real>(V * C, 25);

    double forward() {
        lm_head_forward(logits.data(), inp.data(), wte.data(), B, T, C, V);
        return std::inner_product(logits.begin(), logits.end(), dlogits.begin(), 0.0);
    }
    void backward() {
        lm_head_backward(dinp.data(), dwte.data(), dlogits.data(), inp.data(), wte.data(), B, T, C,
                         V);
    }
};

// out[r, o] = sum_c inp[r, c] * w(c, o) + bias[o], with w read through a callback so one loop
// serves both weight layouts.
template <class Real, class Weight>
std::vector<double> naive_linear(const std::vector<Real>& inp, Weight w, const Real* bias,
                                 std::size_t rows, std::size_t in, std::size_t out) {
    std::vector<double> result(rows * out);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t o = 0; o < out; ++o) {
            double sum = bias != nullptr ? static_cast<double>(bias[o]) : 0.0;
            for (std::size_t c = 0; c < in; ++c) {
                sum += static_cast<double>(inp[r * in + c]) * w(c, o);
            }
            result[r * out + o] = sum;
        }
    }
    return result;
}

// Absolute error for values below 1, relative above: a float GEMM over C terms rounds ~C ulps.
template <class Real>
constexpr double forward_tolerance = std::is_same_v<Real, float> ? 1e-6 : 1e-14;

TEST_CASE_TEMPLATE("matmul forward is inp @ weight (C, OC) + bias, with or without bias", Real,
                   float, double) {
    linear_problem<Real> p;
    auto w = [&](std::size_t c, std::size_t o) {
        return static_cast<double>(p.weight[c * OC + o]);
    };

    p.forward();
    const auto with_bias = compare(p.out, naive_linear(p.inp, w, p.bias.data(), B * T, C, OC), 1.0);
    CHECK_MESSAGE(with_bias.error < forward_tolerance<Real>, with_bias.describe("out"));

    matmul_forward(p.out.data(), p.inp.data(), p.weight.data(), nullptr, B, T, C, OC);
    const auto no_bias = compare(
        p.out, naive_linear(p.inp, w, static_cast<const Real*>(nullptr), B * T, C, OC), 1.0);
    CHECK_MESSAGE(no_bias.error < forward_tolerance<Real>, no_bias.describe("out without bias"));
}

TEST_CASE("matmul backward matches central differences of every input and weight") {
    using P = linear_problem<double>;
    // Threshold: the loss is bilinear, so central differences are exact up to rounding (~1e-9);
    // a transposed or dropped GEMM is off by O(1).
    const auto dinp = gradient_error(P{}, &P::inp, &P::dinp);
    CHECK_MESSAGE(dinp.error < 1e-6, dinp.describe("dinp"));
    const auto dweight = gradient_error(P{}, &P::weight, &P::dweight);
    CHECK_MESSAGE(dweight.error < 1e-6, dweight.describe("dweight"));
    const auto dbias = gradient_error(P{}, &P::bias, &P::dbias);
    CHECK_MESSAGE(dbias.error < 1e-6, dbias.describe("dbias"));
}

TEST_CASE("matmul backward without dinp and without bias still accumulates dweight") {
    linear_problem<double> full;
    full.backward();
    linear_problem<double> p;
    // The weight gradient does not depend on the bias, so it must equal the full backward's.
    matmul_backward(nullptr, p.dweight.data(), nullptr, p.dout.data(), p.inp.data(),
                    p.weight.data(), B, T, C, OC);
    const auto dweight = compare(p.dweight, full.dweight);
    CHECK_MESSAGE(dweight.error < 1e-14, dweight.describe("dweight"));
    CHECK(p.dinp == linear_problem<double>{}.dinp);  // untouched
}

TEST_CASE_TEMPLATE("matmul backward with a null dweight (a frozen weight) gives the same dinp and dbias bits",
                   Real, float, double) {
    linear_problem<Real> full;
    full.backward();
    linear_problem<Real> p;
    matmul_backward(p.dinp.data(), nullptr, p.dbias.data(), p.dout.data(), p.inp.data(), p.weight.data(), B, T,
                    C, OC);
    CHECK(std::memcmp(p.dinp.data(), full.dinp.data(), p.dinp.size() * sizeof(Real)) == 0);
    CHECK(std::memcmp(p.dbias.data(), full.dbias.data(), p.dbias.size() * sizeof(Real)) == 0);
    CHECK(p.dweight == linear_problem<Real>{}.dweight);  // untouched
}

TEST_CASE_TEMPLATE("lm_head forward is inp @ wte^T with wte (V, C)", Real, float, double) {
    head_problem<Real> p;
    p.forward();
    auto w = [&](std::size_t c, std::size_t v) { return static_cast<double>(p.wte[v * C + c]); };
    const auto logits = compare(
        p.logits, naive_linear(p.inp, w, static_cast<const Real*>(nullptr), B * T, C, V), 1.0);
    CHECK_MESSAGE(logits.error < forward_tolerance<Real>, logits.describe("logits"));
}

TEST_CASE("lm_head backward matches central differences of inp and wte") {
    using P = head_problem<double>;
    // Threshold as for matmul: bilinear loss, differences exact up to rounding.
    const auto dinp = gradient_error(P{}, &P::inp, &P::dinp);
    CHECK_MESSAGE(dinp.error < 1e-6, dinp.describe("dinp"));
    const auto dwte = gradient_error(P{}, &P::wte, &P::dwte);
    CHECK_MESSAGE(dwte.error < 1e-6, dwte.describe("dwte"));
}

TEST_CASE("matmul and lm_head in float agree with double on the same inputs") {
    // Absolute error for values below 1, relative above: float GEMMs of 7 to 10 terms.
    constexpr double tolerance = 1e-5;
    const auto [lf, ld] = solve_in_float_and_double<linear_problem>();
    const auto out = compare(lf.out, ld.out, 1.0);
    CHECK_MESSAGE(out.error < tolerance, out.describe("out"));
    const auto dinp = compare(lf.dinp, ld.dinp, 1.0);
    CHECK_MESSAGE(dinp.error < tolerance, dinp.describe("dinp"));
    const auto dweight = compare(lf.dweight, ld.dweight, 1.0);
    CHECK_MESSAGE(dweight.error < tolerance, dweight.describe("dweight"));
    const auto dbias = compare(lf.dbias, ld.dbias, 1.0);
    CHECK_MESSAGE(dbias.error < tolerance, dbias.describe("dbias"));

    const auto [hf, hd] = solve_in_float_and_double<head_problem>();
    const auto logits = compare(hf.logits, hd.logits, 1.0);
    CHECK_MESSAGE(logits.error < tolerance, logits.describe("logits"));
    const auto head_dinp = compare(hf.dinp, hd.dinp, 1.0);
    CHECK_MESSAGE(head_dinp.error < tolerance, head_dinp.describe("head dinp"));
    const auto dwte = compare(hf.dwte, hd.dwte, 1.0);
    CHECK_MESSAGE(dwte.error < tolerance, dwte.describe("dwte"));
}

}  // namespace

}  // namespace matmul_test
