// Attention of new query rows against a KV cache: the attention step of incremental decoding
// (generation), for multi-head and grouped-query attention alike.
//
// Glossary: n new rows, pos the position of the first, NH query heads, NKV key/value heads (NKV
// divides NH), HS head size, A = NH HS, KV = NKV HS.
//
// The cache of one layer holds a row per position, key then value: row t = k(t) | v(t), 2 KV
// channels, key/value head g at channels [g HS, (g+1) HS) of each half. The caller stores the new
// rows' keys and values (positions pos .. pos + n - 1) before the call. Query row i sits at position
// pos + i and attends to positions 0 .. pos + i (attention_forward's causal mask); query head h
// reads key/value head h / (NH / NKV). Scores are q.k / sqrt(HS).
//
// Arithmetic: attention_forward's, row by row: the products q.k in Real, the row maximum subtracted
// and the 1/sqrt(HS) folded into the exponent (exp_inplace), the sum in double, the probabilities
// rounded to Real and multiplied by the values. attention_forward forms its products with Eigen
// GEMMs, so the two agree to float rounding, not bit for bit.
#pragma once

#include <strata/core/error.hpp>             // strata::error
#include <strata/kernels/cpu/attention.hpp>  // detail::sum_in_double
#include <strata/kernels/cpu/exp.hpp>        // exp_inplace

#include <Eigen/Core>  // Eigen::nbThreads

#include <algorithm>  // std::max, std::fill
#include <cmath>      // std::sqrt
#include <concepts>   // std::floating_point
#include <cstddef>    // std::size_t, std::ptrdiff_t
#include <limits>     // std::numeric_limits
#include <string>     // std::to_string
#include <vector>     // std::vector

namespace strata::kernels::cpu {

namespace detail {

inline void check_decode_heads(std::size_t NH, std::size_t NKV, std::size_t HS) {
    if (NH == 0 || NKV == 0 || HS == 0 || NH % NKV != 0)
        throw error("attention_decode: NH=" + std::to_string(NH) + " query heads, NKV=" + std::to_string(NKV) +
                        " key/value heads of HS=" + std::to_string(HS) + " channels",
                    "the key/value heads must divide the query heads (NKV = NH: multi-head attention)");
}

}  // namespace detail

// Rows and heads are independent: with OpenMP they are shared among Eigen::nbThreads() threads,
// each (row, head) computed start to end by one thread, so the bits do not depend on the threads.
template <std::floating_point Real>
void attention_decode(Real* out,             // (n, A)
                      const Real* q,         // (n, q_stride): query head h = channels [h HS, (h+1) HS)
                      std::size_t q_stride,  // elements from one query row to the next (>= A)
                      const Real* kv,        // (pos + n, 2 KV): the cache, the new rows stored
                      std::size_t pos, std::size_t n, std::size_t NH, std::size_t NKV, std::size_t HS) {
    detail::check_decode_heads(NH, NKV, HS);
    const std::size_t A = NH * HS, KV = NKV * HS, group = NH / NKV;
    if (q_stride < A)
        throw error("attention_decode: query rows of stride " + std::to_string(q_stride) + " hold fewer than the " +
                        std::to_string(A) + " channels of " + std::to_string(NH) + " heads",
                    "pass the row stride of the buffer the queries live in");
    const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(HS)));
    const auto tasks = static_cast<std::ptrdiff_t>(n * NH);
#ifdef _OPENMP
#pragma omp parallel num_threads(Eigen::nbThreads())
#endif
    {
        std::vector<Real> score(pos + n);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (std::ptrdiff_t task = 0; task < tasks; ++task) {
            const std::size_t i = static_cast<std::size_t>(task) / NH, h = static_cast<std::size_t>(task) % NH;
            const std::size_t T = pos + i + 1;  // the positions row i sees
            const Real* query = q + i * q_stride + h * HS;
            const Real* keys = kv + (h / group) * HS;        // row u at keys + u * 2 KV
            const Real* values = kv + KV + (h / group) * HS;  // row u at values + u * 2 KV
            Real max_product = -std::numeric_limits<Real>::infinity();
            for (std::size_t u = 0; u < T; ++u) {
                const Real* key = keys + u * 2 * KV;
                Real dot = 0;
                for (std::size_t d = 0; d < HS; ++d) dot += query[d] * key[d];
                score[u] = dot;
                max_product = std::max(max_product, dot);
            }
            // Subtracting the row maximum keeps exp() <= 1: no overflow whatever the scores.
            for (std::size_t u = 0; u < T; ++u) score[u] = (score[u] - max_product) * scale;
            exp_inplace(score.data(), T);
            const double sum = detail::sum_in_double(score.data(), static_cast<const Real*>(nullptr), T);
            const Real inv_sum = static_cast<Real>(1.0 / sum);
            Real* y = out + i * A + h * HS;
            std::fill(y, y + HS, Real(0));
            for (std::size_t u = 0; u < T; ++u) {
                const Real p = score[u] * inv_sum;
                const Real* value = values + u * 2 * KV;
                for (std::size_t d = 0; d < HS; ++d) y[d] += p * value[d];
            }
        }
    }
}

}  // namespace strata::kernels::cpu
