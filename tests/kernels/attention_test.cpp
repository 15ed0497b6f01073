// attention: forward (out, lse) against naive loops, causality, large scores, dqkv against finite
// differences, float against double, one block or several, run-to-run bits.
#include <algorithm>                              // std::equal, std::min, std::max
#include <cmath>                                  // std::exp, std::log, std::sqrt, std::isfinite
#include <cstddef>                                // std::size_t
#include <numeric>                                // std::inner_product
#include <type_traits>                            // std::is_same_v
#include <utility>                                // std::pair
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

// block_rows: query rows per block (the kernels' default is larger than T, one block; 2 makes
// three blocks, the last one short).
template <class Real>
struct problem {
    std::size_t block_rows = attention_block_rows;
    std::vector<Real> qkv = random_vector<Real>(B * T * 3 * C, 31);
    std::vector<Real> out = std::vector<Real>(B * T * C);
    std::vector<Real> lse = std::vector<Real>(attention_saved(B, T, NH));
    // dout doubles as the weights of the scalar loss sum(out * dout), so every output counts.
    std::vector<Real> dout = random_vector<Real>(B * T * C, 32);
    // The gradient starts random: backward must add to it.
    std::vector<Real> dqkv = random_vector<Real>(B * T * 3 * C, 33);

    double forward() {
        attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, block_rows);
        return std::inner_product(out.begin(), out.end(), dout.begin(), 0.0);
    }
    void backward() {
        attention_backward(dqkv.data(), lse.data(), dout.data(), qkv.data(), B, T, C, NH, block_rows);
    }
};
template <class Real>
struct problem_in_blocks_of_2 : problem<Real> {
    problem_in_blocks_of_2() { this->block_rows = 2; }
};

// The textbook definition, one (b, h, t) at a time: no max shift (inputs are small), no GEMM.
struct naive_result {
    std::vector<double> out = std::vector<double>(B * T * C);
    std::vector<double> lse = std::vector<double>(B * NH * T);  // log sum_u exp(score_tu)
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
                double att_row[T] = {};
                double sum = 0.0;
                for (std::size_t u = 0; u <= t; ++u) {
                    double score = 0.0;
                    for (std::size_t i = 0; i < HS; ++i)
                        score += at(b, t, 0, h, i) * at(b, u, 1, h, i);
                    att_row[u] = std::exp(score / std::sqrt(double(HS)));
                    sum += att_row[u];
                }
                for (std::size_t u = 0; u <= t; ++u) att_row[u] /= sum;
                r.lse[(b * NH + h) * T + t] = std::log(sum);
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
    for (const std::size_t block_rows : {std::size_t{1}, std::size_t{2}, std::size_t{3}, T, attention_block_rows}) {
        CAPTURE(block_rows);
        problem<Real> p;
        p.block_rows = block_rows;
        p.forward();
        const naive_result expected = naive_attention(p.qkv);
        // Absolute error for values below 1, relative above: a few roundings of Real per element.
        const double tolerance = std::is_same_v<Real, float> ? 1e-6 : 1e-14;
        const auto out = compare(p.out, expected.out, 1.0);
        CHECK_MESSAGE(out.error < tolerance, out.describe("out"));
        const auto lse = compare(p.lse, expected.lse, 1.0);
        CHECK_MESSAGE(lse.error < tolerance, lse.describe("lse"));
    }
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

TEST_CASE_TEMPLATE("attention stays finite and normalized when scores are huge", Real, float, double) {
    problem<Real> p;
    p.block_rows = 2;
    // scores ~1e5 (double) or ~1e3 (float): exp() would overflow without the max shift
    const Real amplitude = std::is_same_v<Real, float> ? 100 : 1000;
    for (auto& x : p.qkv) x *= amplitude;
    p.forward();
    p.backward();
    for (const Real o : p.out) CHECK(std::isfinite(o));
    for (const Real l : p.lse) CHECK(std::isfinite(l));
    for (const Real g : p.dqkv) CHECK(std::isfinite(g));
    // out is a weighted average of the v rows the query sees: weights summing to 1 keep each
    // output channel within the range of that channel of v.
    for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t t = 0; t < T; ++t) {
            for (std::size_t c = 0; c < C; ++c) {
                double lo = 1e300, hi = -1e300;
                for (std::size_t u = 0; u <= t; ++u) {
                    lo = std::min<double>(lo, p.qkv[(b * T + u) * 3 * C + 2 * C + c]);
                    hi = std::max<double>(hi, p.qkv[(b * T + u) * 3 * C + 2 * C + c]);
                }
                const double o = p.out[(b * T + t) * C + c], slack = 1e-5 * amplitude;
                CHECK_MESSAGE((lo - slack <= o && o <= hi + slack), "b=" << b << " t=" << t << " c=" << c);
            }
        }
    }
}

TEST_CASE("attention backward matches central differences of qkv") {
    // Threshold: central differences in double agree to ~1e-8 here; dropping a path (through the
    // softmax normalization, through k, through v, through keys of an earlier block) is off by
    // O(1) on those channels.
    using P = problem<double>;
    const auto dqkv = gradient_error(P{}, &P::qkv, &P::dqkv);
    CHECK_MESSAGE(dqkv.error < 1e-6, dqkv.describe("dqkv, one block"));
    using P2 = problem_in_blocks_of_2<double>;
    const auto blocked = gradient_error<P2>(P2{}, &P2::qkv, &P2::dqkv);
    CHECK_MESSAGE(blocked.error < 1e-6, blocked.describe("dqkv, blocks of 2 rows"));
}

TEST_CASE("attention in float agrees with double on the same inputs") {
    const auto [f, d] = solve_in_float_and_double<problem>();
    // Absolute error for values below 1, relative above: float GEMMs of T and HS terms.
    constexpr double tolerance = 1e-5;
    const auto out = compare(f.out, d.out, 1.0);
    CHECK_MESSAGE(out.error < tolerance, out.describe("out"));
    const auto lse = compare(f.lse, d.lse, 1.0);
    CHECK_MESSAGE(lse.error < tolerance, lse.describe("lse"));
    const auto dqkv = compare(f.dqkv, d.dqkv, 1.0);
    CHECK_MESSAGE(dqkv.error < tolerance, dqkv.describe("dqkv"));
    const auto [f2, d2] = solve_in_float_and_double<problem_in_blocks_of_2>();
    const auto dqkv2 = compare(f2.dqkv, d2.dqkv, 1.0);
    CHECK_MESSAGE(dqkv2.error < tolerance, dqkv2.describe("dqkv, blocks of 2 rows"));
}

TEST_CASE("attention at a length of several default blocks: forward against the textbook, float against double") {
    // T = 150: blocks of 64, 64 and 22 rows, GPT-2's head size. The naive reference in double,
    // then float and double kernels on the same inputs.
    constexpr std::size_t b = 1, t = 150, nh = 2, c = 128, hs = c / nh;
    const std::vector<double> qkv = random_vector<double>(b * t * 3 * c, 41);
    const std::vector<double> dout = random_vector<double>(b * t * c, 42);
    std::vector<double> expected(b * t * c);
    for (std::size_t h = 0; h < nh; ++h) {
        for (std::size_t i = 0; i < t; ++i) {
            std::vector<double> w(i + 1);
            double sum = 0.0, max_score = -1e300;
            for (std::size_t u = 0; u <= i; ++u) {
                double s = 0.0;
                for (std::size_t j = 0; j < hs; ++j) s += qkv[i * 3 * c + h * hs + j] * qkv[u * 3 * c + c + h * hs + j];
                w[u] = s / std::sqrt(double(hs));
                max_score = std::max(max_score, w[u]);
            }
            for (auto& x : w) sum += (x = std::exp(x - max_score));
            for (std::size_t j = 0; j < hs; ++j) {
                double o = 0.0;
                for (std::size_t u = 0; u <= i; ++u) o += w[u] / sum * qkv[u * 3 * c + 2 * c + h * hs + j];
                expected[i * c + h * hs + j] = o;
            }
        }
    }
    auto run = [&]<class Real>(Real) {
        std::vector<Real> x(qkv.begin(), qkv.end()), d(dout.begin(), dout.end()), out(b * t * c),
            lse(attention_saved(b, t, nh)), dx(b * t * 3 * c, Real(0));
        attention_forward(out.data(), lse.data(), x.data(), b, t, c, nh);
        attention_backward(dx.data(), lse.data(), d.data(), x.data(), b, t, c, nh);
        return std::pair{out, dx};
    };
    const auto [out_f, dqkv_f] = run(0.0f);
    const auto [out_d, dqkv_d] = run(0.0);
    const auto forward_double = compare(out_d, expected, 1.0);
    CHECK_MESSAGE(forward_double.error < 1e-14, forward_double.describe("out, double"));
    const auto forward_float = compare(out_f, expected, 1.0);
    CHECK_MESSAGE(forward_float.error < 1e-5, forward_float.describe("out, float"));
    const auto backward_float = compare(dqkv_f, dqkv_d, 1.0);
    CHECK_MESSAGE(backward_float.error < 1e-5, backward_float.describe("dqkv, float against double"));
}

TEST_CASE_TEMPLATE("attention gives the same bits run after run", Real, float, double) {
    problem<Real> first, again;
    first.forward();
    first.backward();
    again.forward();
    again.backward();
    CHECK(first.out == again.out);
    CHECK(first.lse == again.lse);
    CHECK(first.dqkv == again.dqkv);
}

TEST_CASE("attention refuses channels that do not split into equal heads") {
    problem<double> p;
    CHECK_THROWS_WITH_AS(attention_forward(p.out.data(), p.lse.data(), p.qkv.data(), B, T, C, 4),
                         doctest::Contains("C=9"), strata::error);
    CHECK_THROWS_AS(
        attention_backward(p.dqkv.data(), p.lse.data(), p.dout.data(), p.qkv.data(), B, T, C, 0),
        strata::error);
    CHECK_THROWS_AS(attention_forward(p.out.data(), p.lse.data(), p.qkv.data(), B, T, C, NH, 0), strata::error);
}

}  // namespace

}  // namespace attention_test
