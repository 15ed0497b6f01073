// cross_entropy: forward against -log softmax, ignored targets, huge logits, dlogits against finite
// differences, exact micro-batch accumulation, target validation, float against double.
#include <cmath>                                  // std::exp, std::log, std::isfinite
#include <cstddef>                                // std::size_t
#include <cstdint>                                // std::int32_t
#include <numeric>                                // std::accumulate
#include <type_traits>                            // std::is_same_v
#include <vector>                                 // std::vector
#include <doctest/doctest.h>                      // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE
#include <strata/core/error.hpp>                  // strata::error
#include <strata/kernels/cpu/cross_entropy.hpp>   // cross_entropy_forward/backward, ignore_index
#include <strata/kernels/cpu/gradient_check.hpp>  // gradient_error, compare, random_vector, ...

namespace cross_entropy_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using namespace strata::kernels::cpu;

// Glossary: B batch, T time, V vocab.
constexpr std::size_t B = 2, T = 5, V = 11;

template <class Real>
struct problem {
    // Two ignored positions, one in each sequence; 8 counted targets, including 0 and V-1.
    std::vector<std::int32_t> targets = {3, ignore_index, 10, 0, 7, 7, 1, ignore_index, 5, 2};
    std::vector<Real> logits = random_vector<Real>(B * T * V, 71, -3.0, 3.0);
    std::vector<Real> losses = std::vector<Real>(B * T);
    std::vector<Real> lse = std::vector<Real>(B * T);
    // The gradient starts random: backward must add to it.
    std::vector<Real> dlogits = random_vector<Real>(B * T * V, 72);
    // Any value: the trainer's 1 / counted targets is one case of it.
    Real scale = Real(0.37);

    // scale * sum(losses): the loss whose gradient backward computes.
    double forward() {
        counted = cross_entropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), B,
                                        T, V);
        return scale * std::accumulate(losses.begin(), losses.end(), 0.0);
    }
    void backward() {
        cross_entropy_backward(dlogits.data(), lse.data(), logits.data(), targets.data(), scale, B,
                               T, V);
    }
    std::size_t counted = 0;
};

TEST_CASE_TEMPLATE("cross_entropy forward is -log softmax(logits)[target], 0 where ignored", Real,
                   float, double) {
    problem<Real> p;
    p.forward();
    CHECK(p.counted == 8);
    std::vector<double> expected(B * T, 0.0);
    for (std::size_t row = 0; row < B * T; ++row) {
        if (p.targets[row] == ignore_index) continue;
        double sum = 0.0;  // no max shift: the logits are small here
        for (std::size_t i = 0; i < V; ++i) sum += std::exp(double(p.logits[row * V + i]));
        expected[row] = -std::log(std::exp(double(p.logits[row * V + p.targets[row]])) / sum);
    }
    // Absolute error for values below 1, relative above: float log-sum-exp of 11 terms.
    const double tolerance = std::is_same_v<Real, float> ? 1e-6 : 1e-14;
    const auto losses = compare(p.losses, expected, 1.0);
    CHECK_MESSAGE(losses.error < tolerance, losses.describe("losses"));
}

TEST_CASE("cross_entropy ignores ignore_index targets in the loss and in the gradient") {
    problem<double> p;
    const problem<double> before = p;
    const double loss = p.forward();
    // Whatever the logits of an ignored position, its loss stays 0 and its dlogits row untouched.
    for (std::size_t i = 0; i < V; ++i) p.logits[1 * V + i] += 5.0 * double(i);
    CHECK(p.forward() == loss);  // bit for bit
    CHECK(p.losses[1] == 0.0);
    CHECK(p.losses[7] == 0.0);
    p.backward();
    for (const std::size_t row : {std::size_t{1}, std::size_t{7}}) {
        for (std::size_t i = 0; i < V; ++i) {
            CHECK(p.dlogits[row * V + i] == before.dlogits[row * V + i]);
        }
    }
}

TEST_CASE("cross_entropy stays finite and exact with huge logits") {
    std::vector<double> logits = {1e4, 1e4 - 1.0, -1e4};  // exp(1e4) overflows without the shift
    const std::vector<std::int32_t> targets = {1};
    double loss = 0.0, lse = 0.0;
    CHECK(cross_entropy_forward(&loss, &lse, logits.data(), targets.data(), 1, 1, 3) == 1);
    // -log(e^-1 / (1 + e^-1)) = 1 + log(1 + e^-1)
    CHECK(loss == doctest::Approx(1.0 + std::log1p(std::exp(-1.0))).epsilon(1e-12));
    std::vector<double> dlogits(3, 0.0);
    cross_entropy_backward(dlogits.data(), &lse, logits.data(), targets.data(), 1.0, 1, 1, 3);
    for (const double d : dlogits) CHECK(std::isfinite(d));
    CHECK(dlogits[0] + dlogits[1] + dlogits[2] == doctest::Approx(0.0).epsilon(1e-12));
}

TEST_CASE("cross_entropy backward matches central differences of the logits") {
    using P = problem<double>;
    // Threshold: central differences in double agree to ~1e-7 here; a missing -onehot or a
    // missing scale is off by O(1). Ignored rows are 0 in both.
    const auto dlogits = gradient_error(P{}, &P::logits, &P::dlogits);
    CHECK_MESSAGE(dlogits.error < 1e-6, dlogits.describe("dlogits"));
}

TEST_CASE("cross_entropy micro-batches with scale 1/total counted add up to the full batch") {
    problem<double> full;
    full.forward();
    full.scale = 1.0 / double(full.counted);
    std::vector<double> whole(B * T * V, 0.0);
    cross_entropy_backward(whole.data(), full.lse.data(), full.logits.data(), full.targets.data(),
                           full.scale, B, T, V);

    // The same batch as B micro-batches of one sequence each, into one gradient buffer.
    std::vector<double> accumulated(B * T * V, 0.0);
    for (std::size_t b = 0; b < B; ++b) {
        std::vector<double> losses(T), lse(T);
        const double* logits = full.logits.data() + b * T * V;
        const std::int32_t* targets = full.targets.data() + b * T;
        cross_entropy_forward(losses.data(), lse.data(), logits, targets, 1, T, V);
        cross_entropy_backward(accumulated.data() + b * T * V, lse.data(), logits, targets,
                               full.scale, 1, T, V);
    }
    CHECK(accumulated == whole);  // bit for bit: each row sees the same numbers
}

TEST_CASE("cross_entropy refuses target ids outside [0, V) other than ignore_index") {
    problem<double> p;
    p.targets[6] = static_cast<std::int32_t>(V);  // b=1, t=1
    CHECK_THROWS_WITH_AS(p.forward(),
                         "cross_entropy: target id 11 at position 6 (b=1, t=1) is outside [0, "
                         "V=11) (hint: targets are token ids below V, or ignore_index (-100) for "
                         "positions without a target)",
                         strata::error);
    CHECK_THROWS_AS(p.backward(), strata::error);
    p.targets[6] = -1;
    CHECK_THROWS_WITH_AS(p.forward(), doctest::Contains("target id -1"), strata::error);
}

TEST_CASE("cross_entropy in float agrees with double on the same inputs") {
    const auto [f, d] = solve_in_float_and_double<problem>();
    CHECK(f.counted == d.counted);
    // Absolute error for values below 1, relative above: float log-sum-exp of 11 terms.
    constexpr double tolerance = 1e-6;
    const auto losses = compare(f.losses, d.losses, 1.0);
    CHECK_MESSAGE(losses.error < tolerance, losses.describe("losses"));
    const auto dlogits = compare(f.dlogits, d.dlogits, 1.0);
    CHECK_MESSAGE(dlogits.error < tolerance, dlogits.describe("dlogits"));
}

}  // namespace

}  // namespace cross_entropy_test
