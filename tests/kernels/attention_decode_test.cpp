// attention_decode (generation with a KV cache): new query rows against a cache, multi-head and
// grouped-query, against a textbook double-precision reference and against attention_forward's
// rows; the query stride; large scores; the errors it throws.
//
// Glossary: n new rows, pos the first one's position, NH query heads, NKV key/value heads, HS head
// size, A = NH HS, KV = NKV HS. Odd sizes (HS = 3, 5) so that an offset off by one cannot pass.
#include <doctest/doctest.h>                      // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE, CAPTURE
#include <strata/core/error.hpp>                  // strata::error
#include <strata/kernels/cpu/attention.hpp>       // attention_forward, attention_saved
#include <strata/kernels/cpu/attention_decode.hpp>  // attention_decode
#include <strata/kernels/cpu/gradient_check.hpp>  // compare, random_vector

#include <cmath>        // std::exp, std::sqrt, std::isfinite
#include <cstddef>      // std::size_t
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

namespace attention_decode_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using namespace strata::kernels::cpu;

struct decode_shape {
    std::size_t pos, n, NH, NKV, HS, q_stride;  // q_stride 0: A (packed queries)
};

// The textbook definition in double: softmax(q k^T / sqrt(HS)) v over positions 0 .. pos + i.
template <class Real>
std::vector<double> reference(const std::vector<Real>& q, std::size_t q_stride, const std::vector<Real>& kv,
                              const decode_shape& s) {
    const std::size_t A = s.NH * s.HS, KV = s.NKV * s.HS, group = s.NH / s.NKV;
    std::vector<double> out(s.n * A);
    for (std::size_t i = 0; i < s.n; ++i)
        for (std::size_t h = 0; h < s.NH; ++h) {
            const std::size_t T = s.pos + i + 1, g = h / group;
            std::vector<double> p(T);
            double top = -1e300, sum = 0;
            for (std::size_t u = 0; u < T; ++u) {
                double dot = 0;
                for (std::size_t d = 0; d < s.HS; ++d)
                    dot += double(q[i * q_stride + h * s.HS + d]) * double(kv[u * 2 * KV + g * s.HS + d]);
                p[u] = dot / std::sqrt(double(s.HS));
                top = std::max(top, p[u]);
            }
            for (double& x : p) sum += x = std::exp(x - top);
            for (std::size_t d = 0; d < s.HS; ++d) {
                double o = 0;
                for (std::size_t u = 0; u < T; ++u) o += p[u] / sum * double(kv[u * 2 * KV + KV + g * s.HS + d]);
                out[i * A + h * s.HS + d] = o;
            }
        }
    return out;
}

}  // namespace

TEST_CASE_TEMPLATE("attention_decode matches the textbook softmax over the cached positions, MHA and GQA", Real,
                   float, double) {
    // one row (a generation step), a prompt (pos 0), rows after a prompt, grouped heads, a strided q
    for (const decode_shape s : {decode_shape{6, 1, 3, 3, 3, 0}, decode_shape{0, 7, 2, 2, 5, 0},
                                 decode_shape{4, 3, 6, 2, 3, 0}, decode_shape{9, 2, 4, 1, 4, 0},
                                 decode_shape{2, 3, 6, 3, 2, 6 * 2 + 2 * 3 * 2}}) {
        CAPTURE(s.pos);
        CAPTURE(s.n);
        CAPTURE(s.NH);
        CAPTURE(s.NKV);
        const std::size_t A = s.NH * s.HS, KV = s.NKV * s.HS, stride = s.q_stride ? s.q_stride : A;
        const auto q = random_vector<Real>(s.n * stride, 41);
        const auto kv = random_vector<Real>((s.pos + s.n) * 2 * KV, 42);
        std::vector<Real> out(s.n * A);
        attention_decode(out.data(), q.data(), stride, kv.data(), s.pos, s.n, s.NH, s.NKV, s.HS);
        const double tolerance = std::is_same_v<Real, float> ? 1e-6 : 1e-14;
        const auto e = compare(out, reference(q, stride, kv, s), 1.0);
        CHECK_MESSAGE(e.error < tolerance, e.describe("out"));
    }
}

TEST_CASE_TEMPLATE("attention_decode over a cache is attention_forward's rows at those positions", Real, float, double) {
    // The full causal attention over T positions (B = 1); the cache holds its k and v, the queries
    // are its q rows pos .. T - 1.
    const std::size_t T = 11, NH = 3, HS = 5, C = NH * HS, pos = 6, n = T - pos;
    const auto qkv = random_vector<Real>(T * 3 * C, 43);
    std::vector<Real> full(T * C), lse(attention_saved(1, T, NH));
    attention_forward(full.data(), lse.data(), qkv.data(), 1, T, C, NH);
    std::vector<Real> kv(T * 2 * C);
    for (std::size_t t = 0; t < T; ++t)
        for (std::size_t c = 0; c < 2 * C; ++c) kv[t * 2 * C + c] = qkv[t * 3 * C + C + c];
    std::vector<Real> out(n * C);
    attention_decode(out.data(), qkv.data() + pos * 3 * C, 3 * C, kv.data(), pos, n, NH, NH, HS);
    const std::vector<Real> expected(full.begin() + static_cast<std::ptrdiff_t>(pos * C), full.end());
    const auto e = compare(out, expected, 1.0);
    // the same roundings in another order (GEMMs vs loops): a few ulps
    CHECK_MESSAGE(e.error < (std::is_same_v<Real, float> ? 1e-6 : 1e-14), e.describe("out vs attention_forward"));
}

TEST_CASE("attention_decode stays finite and within the values' range when scores are huge") {
    const decode_shape s{5, 2, 2, 1, 3, 0};
    auto q = random_vector<float>(s.n * 6, 44);
    for (float& x : q) x *= 300;  // scores ~1e5: exp() overflows without the max shift
    const auto kv = random_vector<float>((s.pos + s.n) * 2 * 3, 45);
    std::vector<float> out(s.n * 6);
    attention_decode(out.data(), q.data(), 6, kv.data(), s.pos, s.n, s.NH, s.NKV, s.HS);
    for (const float x : out) {
        CHECK(std::isfinite(x));
        CHECK(std::abs(x) <= 1.0f);  // a weighted average of values in [-1, 1)
    }
}

TEST_CASE("attention_decode refuses heads that do not group, and a query stride below the heads") {
    std::vector<float> buf(64);
    CHECK_THROWS_WITH_AS(attention_decode(buf.data(), buf.data(), 12, buf.data(), 0, 1, 6, 4, 2),
                         doctest::Contains("key/value heads must divide the query heads"), strata::error);
    CHECK_THROWS_WITH_AS(attention_decode(buf.data(), buf.data(), 5, buf.data(), 0, 1, 3, 3, 2),
                         doctest::Contains("stride 5 hold fewer than the 6 channels"), strata::error);
}

}  // namespace attention_decode_test
