// attention: forward against naive loops, causality, large scores, dqkv against finite
// differences, float against double.
#include <algorithm>                              // std::equal
#include <cmath>                                  // std::exp, std::sqrt, std::isfinite
#include <cstddef>                                // std::size_t
#include <numeric>                                // std::inner_product, std::accumulate
#include <type_traits>                            // std::is_same_v
#include <vector>                                 // std::vector
#include <doctest/doctest.h>                      // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE
#include <strata/core/error.hpp>                  // strata::error
#include <strata/kernels/cpu/attention.hpp>       // attention_forward, attention_backward
#include <strata/kernels/cpu/gradient_check.hpp>  // gradient_error, compare, random_vector, ...

namespace attention_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using namespace strata::kernels::cpu;

// Glossary: B batch, T time, C channels, NH heads, HS head size. Odd sizes (HS = 3) so a head
// offset or a q/k/v offset that is off by one cannot pass.
constexpr std::size_t B = 2, T = 5, C = 9, NH = 3, HS = C / NH;

template <class Real>
struct problem {
    std::vector<Real> qkv = random_vector<Real>(B * T * 3 * C, 31);
    std::vector<Real> out = std::vector<Real>(B * T * C);
    std::vector<Real> att = std::vector<Real>(B * NH * T * T);
    // dout doubles as the weights of the scalar loss sum(out * dout), so every output counts.
    std::vector<Real> dout = random_vector<Real>(B * T * C, 32);
    // The gradient starts random: backward must add to it.
    std::vector<Real> dqkv = random_vector<Real>(B * T * 3 * C, 33);

    double forward() {
        attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        return std::inner_product(out.begin(), out.end(), dout.begin(), 0.0);
    }
    void backward() {
        attention_backward(dqkv.data(), att.data(), dout.data(), qkv.data(), B, T, C, NH);
    }
};

// The textbook definition, one (b, h, t) at a time: no max shift (inputs are small), no GEMM.
struct naive_result {
    std::vector<double> out = std::vector<double>(B * T * C);
    std::vector<double> att = std::vector<double>(B * NH * T * T);  // zero above the diagonal
};
template <class Real>
naive_result naive_attention(const std::vector<Real>& qkv) {
    naive_result r;
    auto at = [&](std::size_t b, std::size_t t, std::size_t part, std::size_t h, std::size_t i) {
        return static_cast<double>(qkv[(b * T + t) * 3 * C + part * C + h * HS + i]);
    };
    for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t h = 0; h < NH; ++h) {
            for (std::size_t t = 0; t < T; ++t) {
                double* att_row = &r.att[((b * NH + h) * T + t) * T];
                double sum = 0.0;
                for (std::size_t u = 0; u <= t; ++u) {
                    double score = 0.0;
                    for (std::size_t i = 0; i < HS; ++i)
                        score += at(b, t, 0, h, i) * at(b, u, 1, h, i);
                    att_row[u] = std::exp(score / std::sqrt(double(HS)));
                    sum += att_row[u];
                }
                for (std::size_t u = 0; u <= t; ++u) att_row[u] /= sum;
                for (std::size_t i = 0; i < HS; ++i) {
                    double o = 0.0;
                    for (std::size_t u = 0; u <= t; ++u) o += att_row[u] * at(b, u, 2, h, i);
                    r.out[(b * T + t) * C + h * HS + i] = o;
                }
            }
        }
    }
    return r;
}

TEST_CASE_TEMPLATE("attention forward matches the textbook causal softmax(q k^T / sqrt(HS)) v",
                   Real, float, double) {
    problem<Real> p;
    p.forward();
    const naive_result expected = naive_attention(p.qkv);
    // Absolute error for values below 1, relative above: a few roundings of Real per element.
    const double tolerance = std::is_same_v<Real, float> ? 1e-6 : 1e-14;
    const auto out = compare(p.out, expected.out, 1.0);
    CHECK_MESSAGE(out.error < tolerance, out.describe("out"));
    const auto att = compare(p.att, expected.att, 1.0);
    CHECK_MESSAGE(att.error < tolerance, att.describe("att"));
}

TEST_CASE("attention is causal: changing position t0 leaves every earlier output unchanged") {
    constexpr std::size_t t0 = 3;
    problem<double> p;
    p.forward();
    const std::vector<double> original = p.out;
    for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t c = 0; c < 3 * C; ++c) p.qkv[(b * T + t0) * 3 * C + c] += 0.5;
    }
    p.forward();
    for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t t = 0; t < T; ++t) {
            const std::size_t row = (b * T + t) * C;
            const bool unchanged =
                std::equal(p.out.begin() + row, p.out.begin() + row + C, original.begin() + row);
            CHECK_MESSAGE(unchanged == (t < t0), "b=" << b << " t=" << t);
        }
    }
}

TEST_CASE("attention stays finite and normalized when scores are huge") {
    problem<double> p;
    for (auto& x : p.qkv) x *= 1000.0;  // scores ~1e5: exp() would overflow without the max shift
    p.forward();
    for (const double o : p.out) CHECK(std::isfinite(o));
    for (std::size_t row = 0; row < B * NH * T; ++row) {
        const double sum =
            std::accumulate(p.att.begin() + row * T, p.att.begin() + (row + 1) * T, 0.0);
        CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
    }
}

TEST_CASE("attention backward matches central differences of qkv") {
    using P = problem<double>;
    // Threshold: central differences in double agree to ~1e-8 here; dropping a path (through the
    // softmax normalization, through k, through v) is off by O(1) on those channels.
    const auto dqkv = gradient_error(P{}, &P::qkv, &P::dqkv);
    CHECK_MESSAGE(dqkv.error < 1e-6, dqkv.describe("dqkv"));
}

TEST_CASE("attention in float agrees with double on the same inputs") {
    const auto [f, d] = solve_in_float_and_double<problem>();
    // Absolute error for values below 1, relative above: float GEMMs of T and HS terms.
    constexpr double tolerance = 1e-5;
    const auto out = compare(f.out, d.out, 1.0);
    CHECK_MESSAGE(out.error < tolerance, out.describe("out"));
    const auto att = compare(f.att, d.att, 1.0);
    CHECK_MESSAGE(att.error < tolerance, att.describe("att"));
    const auto dqkv = compare(f.dqkv, d.dqkv, 1.0);
    CHECK_MESSAGE(dqkv.error < tolerance, dqkv.describe("dqkv"));
}

TEST_CASE("attention refuses channels that do not split into equal heads") {
    problem<double> p;
    CHECK_THROWS_WITH_AS(attention_forward(p.out.data(), p.att.data(), p.qkv.data(), B, T, C, 4),
                         doctest::Contains("C=9"), strata::error);
    CHECK_THROWS_AS(
        attention_backward(p.dqkv.data(), p.att.data(), p.dout.data(), p.qkv.data(), B, T, C, 0),
        strata::error);
}

}  // namespace

}  // namespace attention_test
