// embedding: forward against naive loops, dwte and dwpe against finite differences, id and
// length validation, float against double.
#include <cstddef>                                // std::size_t
#include <cstdint>                                // std::int32_t
#include <numeric>                                // std::inner_product
#include <vector>                                 // std::vector
#include <doctest/doctest.h>                      // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE
#include <strata/core/error.hpp>                  // strata::error
#include <strata/kernels/cpu/embedding.hpp>       // embedding_forward, embedding_backward
#include <strata/kernels/cpu/gradient_check.hpp>  // gradient_error, compare, random_vector, ...

namespace embedding_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using namespace strata::kernels::cpu;

// Glossary: B batch, T time, C channels, V vocab, maxT rows of wpe. maxT > T leaves wpe rows
// that no position uses; their gradient must stay zero.
constexpr std::size_t B = 2, T = 5, C = 7, V = 11, maxT = 8;

template <class Real>
struct problem {
    // Repeated ids (3, 7) must accumulate into one wte row; ids 4, 5, 6, 8, 9 are never used.
    std::vector<std::int32_t> tokens = {3, 7, 3, 0, 10, 7, 7, 1, 2, 3};
    std::vector<Real> wte = random_vector<Real>(V * C, 41);
    std::vector<Real> wpe = random_vector<Real>(maxT * C, 42);
    std::vector<Real> out = std::vector<Real>(B * T * C);
    // dout doubles as the weights of the scalar loss sum(out * dout), so every output counts.
    std::vector<Real> dout = random_vector<Real>(B * T * C, 43);
    // Gradients start random: backward must add to them.
    std::vector<Real> dwte = random_vector<Real>(V * C, 44);
    std::vector<Real> dwpe = random_vector<Real>(maxT * C, 45);

    double forward() {
        embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V, maxT);
        return std::inner_product(out.begin(), out.end(), dout.begin(), 0.0);
    }
    void backward() {
        embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, V, maxT);
    }
};

TEST_CASE_TEMPLATE("embedding forward is wte[token] + wpe[t]", Real, float, double) {
    problem<Real> p;
    p.forward();
    for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t t = 0; t < T; ++t) {
            for (std::size_t c = 0; c < C; ++c) {
                const std::size_t token = static_cast<std::size_t>(p.tokens[b * T + t]);
                // One addition in Real: exactly what the kernel computes.
                CHECK(p.out[(b * T + t) * C + c] == p.wte[token * C + c] + p.wpe[t * C + c]);
            }
        }
    }
}

TEST_CASE("embedding backward matches central differences of wte and wpe") {
    using P = problem<double>;
    // Threshold: the loss is linear, so differences are exact up to rounding (~1e-10); a
    // dropped repeat or a wrong row is off by O(1). Unused rows are 0 in both.
    const auto dwte = gradient_error(P{}, &P::wte, &P::dwte);
    CHECK_MESSAGE(dwte.error < 1e-6, dwte.describe("dwte"));
    const auto dwpe = gradient_error(P{}, &P::wpe, &P::dwpe);
    CHECK_MESSAGE(dwpe.error < 1e-6, dwpe.describe("dwpe"));
}

TEST_CASE("embedding in float agrees with double on the same inputs") {
    const auto [f, d] = solve_in_float_and_double<problem>();
    // Absolute error for values below 1, relative above: at most four float additions.
    constexpr double tolerance = 1e-6;
    const auto out = compare(f.out, d.out, 1.0);
    CHECK_MESSAGE(out.error < tolerance, out.describe("out"));
    const auto dwte = compare(f.dwte, d.dwte, 1.0);
    CHECK_MESSAGE(dwte.error < tolerance, dwte.describe("dwte"));
    const auto dwpe = compare(f.dwpe, d.dwpe, 1.0);
    CHECK_MESSAGE(dwpe.error < tolerance, dwpe.describe("dwpe"));
}

TEST_CASE("embedding refuses token ids outside the vocabulary and sequences longer than maxT") {
    problem<double> p;
    p.tokens[6] = static_cast<std::int32_t>(V);  // b=1, t=1
    CHECK_THROWS_WITH_AS(p.forward(),
                         "embedding: token id 11 at position 6 (b=1, t=1) is outside "
                         "[0, V=11) (hint: the tokenizer and the model must agree on "
                         "the vocabulary size)",
                         strata::error);
    CHECK_THROWS_AS(p.backward(), strata::error);
    p.tokens[6] = -1;
    CHECK_THROWS_WITH_AS(p.forward(), doctest::Contains("token id -1"), strata::error);

    problem<double> q;
    CHECK_THROWS_WITH_AS(embedding_forward(q.out.data(), q.tokens.data(), q.wte.data(),
                                           q.wpe.data(), 1, 2 * T, C, V, maxT),
                         doctest::Contains("T=10"), strata::error);
}

}  // namespace

}  // namespace embedding_test
