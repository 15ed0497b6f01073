// Causal multi-head self-attention of GPT-2, from the fused c_attn output.
//
// Glossary: B batch, T time, C channels, NH heads, HS head size (C / NH).
//
// qkv is Hugging Face's c_attn output: q = channels [0, C), k = [C, 2C), v = [2C, 3C); head h owns
// channels [h*HS, (h+1)*HS) of each. Scores are q.k / sqrt(HS), position t attends to t' <= t, and
// the output concatenates the heads back into (B, T, C) (before c_proj).
//
// Saved for backward: lse (B, NH, T), the log-sum-exp of each query row's scores, as the CUDA
// kernel saves (kernels/cuda/attention.cuh). Backward recomputes the probabilities
// P = exp(S - lse) from q, k and lse. No (T, T) matrix is ever allocated: both passes work on
// blocks of `block_rows` query rows, whose products with the keys [0, last row of the block] fill
// one (block_rows, T) buffer at most, so working memory is O(block_rows T) per call and saved
// state O(B NH T).
//
// A block's products are Eigen GEMMs over the keys before the block, and triangular products over
// its own (block_rows, block_rows) tile; keys after a query are never touched (the causal mask),
// so a pass does half the multiply-adds of a full (T, T) product. The 1/sqrt(HS) of the scores
// folds into the exponentials' arguments. Each head runs its row blocks in order on one thread:
// results depend on block_rows through the summation order of the GEMMs, and on nothing else (not
// on the number of threads; see attention_forward).
#pragma once

#include <algorithm>                           // std::min
#include <cmath>                               // std::log, std::sqrt
#include <concepts>                            // std::floating_point
#include <cstddef>                             // std::size_t, std::ptrdiff_t
#include <string>                              // std::to_string
#include <Eigen/Core>                          // Eigen::Lower, Eigen::nbThreads
#include <strata/core/error.hpp>               // strata::error
#include <strata/kernels/cpu/eigen_views.hpp>  // view, row_major_matrix
#include <strata/kernels/cpu/exp.hpp>          // exp_inplace

namespace strata::kernels::cpu {

// Elements of the forward's saved state: lse (B, NH, T).
constexpr std::size_t attention_saved(std::size_t B, std::size_t T, std::size_t NH) { return B * NH * T; }

// Query rows per block: 64 keeps backward's two (64, T) buffers in L2 up to T = 1024 in float
// (2 x 256 KiB), and was the fastest of 32, 64, 128 and 256 at T = 64 .. 1024 (GPT-2's HS = 64).
inline constexpr std::size_t attention_block_rows = 64;

namespace detail {

inline void check_heads(std::size_t C, std::size_t NH) {
    if (NH == 0 || C % NH != 0) {
        throw error("attention: C=" + std::to_string(C) + " channels do not split into NH=" +
                        std::to_string(NH) + " heads of equal size",
                    "choose NH so that it divides C (GPT-2: C=768, NH=12)");
    }
}

inline void check_block_rows(std::size_t block_rows) {
    if (block_rows == 0) {
        throw error("attention: block_rows=0", "process at least one query row per block (default 64)");
    }
}

// A row block's product with keys: m (n, r1) = a b[0, r1)^T for the query rows [r0, r1), a (n, HS),
// b (T, HS). The keys before the block are one GEMM; of the block's own (n, n) tile only the lower
// triangle (u <= t) is computed, and the strict upper triangle is left as it was. Forward and
// backward both compute the scores here, so backward's are the forward's bits.
template <class Real, class Rows, class Keys>
void causal_block_product(matrix_view<Real> m, const Rows& a, const Keys& b, std::size_t r0) {
    const std::size_t n = static_cast<std::size_t>(a.rows());
    m.leftCols(r0).noalias() = a * b.topRows(r0).transpose();
    m.middleCols(r0, n).template triangularView<Eigen::Lower>() = a * b.middleRows(r0, n).transpose();
}

// out (+)= m x[0, r1) for an m as above: the block's (n, n) tile counts only on and below its
// diagonal.
template <class Out, class Real, class Values>
void causal_block_times(Out&& out, const matrix_view<Real>& m, const Values& x, std::size_t r0, bool accumulate) {
    const std::size_t n = static_cast<std::size_t>(out.rows());
    if (accumulate) {
        out.noalias() += m.leftCols(r0) * x.topRows(r0);
    } else {
        out.noalias() = m.leftCols(r0) * x.topRows(r0);
    }
    out.noalias() += m.middleCols(r0, n).template triangularView<Eigen::Lower>() * x.middleRows(r0, n);
}

// out[0, r1) += m^T y for an m as above, y (n, HS): the gradient of the keys (or values) the row
// block saw.
template <class Out, class Real, class Rows>
void causal_block_transpose_times_add(Out&& out, const matrix_view<Real>& m, const Rows& y, std::size_t r0) {
    const std::size_t n = static_cast<std::size_t>(y.rows());
    out.topRows(r0).noalias() += m.leftCols(r0).transpose() * y;
    out.middleRows(r0, n).noalias() +=
        m.middleCols(r0, n).template triangularView<Eigen::Lower>().transpose() * y;
}

// sum_u a_u b_u over u < n (b = nullptr: sum_u a_u) in double, as four interleaved partial sums
// added in a fixed order: one running sum would wait on the latency of each addition.
template <class Real>
double sum_in_double(const Real* a, const Real* b, std::size_t n) {
    double partial[4] = {0.0, 0.0, 0.0, 0.0};
    std::size_t u = 0;
    for (; u + 4 <= n; u += 4) {
        for (std::size_t j = 0; j < 4; ++j) {
            partial[j] += static_cast<double>(a[u + j]) * (b ? static_cast<double>(b[u + j]) : 1.0);
        }
    }
    for (; u < n; ++u) partial[0] += static_cast<double>(a[u]) * (b ? static_cast<double>(b[u]) : 1.0);
    return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

// The first `count` elements at `data`, as an array for Eigen's vectorized arithmetic.
template <class Real>
Eigen::Map<Eigen::Array<Real, Eigen::Dynamic, 1>> as_array(Real* data, std::size_t count) {
    return {data, static_cast<Eigen::Index>(count)};
}

// One (b, h) head of the forward; scores is a (block_rows, T) buffer or larger.
template <class Real>
void attention_forward_head(Real* out, Real* lse, const Real* qkv, std::size_t b, std::size_t h, std::size_t T,
                            std::size_t C, std::size_t NH, std::size_t block_rows, row_major_matrix<Real>& scores) {
    const std::size_t HS = C / NH;
    const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(HS)));
    const Real* q_ptr = qkv + b * T * 3 * C + h * HS;
    const auto q = view(q_ptr, T, HS, 3 * C);
    const auto k = view(q_ptr + C, T, HS, 3 * C);
    const auto v = view(q_ptr + 2 * C, T, HS, 3 * C);
    Real* lse_bh = lse + (b * NH + h) * T;
    for (std::size_t r0 = 0; r0 < T; r0 += block_rows) {
        const std::size_t r1 = std::min(r0 + block_rows, T), n = r1 - r0;
        auto p = view(scores.data(), n, r1);  // row i against keys [0, r1), rows r1 apart
        causal_block_product(p, q.middleRows(r0, n), k, r0);
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t t = r0 + i;
            auto row = as_array(scores.data() + i * r1, t + 1);  // keys u <= t
            // Subtracting the row maximum keeps exp() <= 1: no overflow whatever the scores.
            const Real max_product = row.maxCoeff();
            row = (row - max_product) * scale;
            exp_inplace(row.data(), t + 1);
            const double sum = sum_in_double(row.data(), static_cast<const Real*>(nullptr), t + 1);
            row *= static_cast<Real>(1.0 / sum);
            lse_bh[t] = static_cast<Real>(static_cast<double>(max_product * scale) + std::log(sum));
        }
        causal_block_times(view(out + (b * T + r0) * C + h * HS, n, HS, C), p, v, r0, false);
    }
}

// One (b, h) head of the backward; probs and dscores are (block_rows, T) buffers or larger.
template <class Real>
void attention_backward_head(Real* dqkv, const Real* lse, const Real* dout, const Real* qkv, std::size_t b,
                             std::size_t h, std::size_t T, std::size_t C, std::size_t NH, std::size_t block_rows,
                             row_major_matrix<Real>& probs, row_major_matrix<Real>& dscores) {
    const std::size_t HS = C / NH;
    const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(HS)));
    const std::size_t offset = b * T * 3 * C + h * HS;
    const auto q = view(qkv + offset, T, HS, 3 * C);
    const auto k = view(qkv + offset + C, T, HS, 3 * C);
    const auto v = view(qkv + offset + 2 * C, T, HS, 3 * C);
    auto dq = view(dqkv + offset, T, HS, 3 * C);
    auto dk = view(dqkv + offset + C, T, HS, 3 * C);
    auto dv = view(dqkv + offset + 2 * C, T, HS, 3 * C);
    const auto dout_bh = view(dout + b * T * C + h * HS, T, HS, C);
    const Real* lse_bh = lse + (b * NH + h) * T;
    for (std::size_t r0 = 0; r0 < T; r0 += block_rows) {
        const std::size_t r1 = std::min(r0 + block_rows, T), n = r1 - r0;
        auto p = view(probs.data(), n, r1);  // P, then dP and dS in place: row i against keys [0, r1)
        auto ds = view(dscores.data(), n, r1);
        const auto q_rows = q.middleRows(r0, n);
        const auto dout_rows = dout_bh.middleRows(r0, n);
        causal_block_product(p, q_rows, k, r0);       // the forward's q.k
        causal_block_product(ds, dout_rows, v, r0);   // dP = d loss / d P
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t t = r0 + i;
            auto p_row = as_array(probs.data() + i * r1, t + 1);  // keys u <= t
            auto d_row = as_array(dscores.data() + i * r1, t + 1);
            p_row = p_row * scale - lse_bh[t];
            exp_inplace(p_row.data(), t + 1);
            const double dot = sum_in_double(p_row.data(), d_row.data(), t + 1);
            // The 1/sqrt(HS) of the scores folds in here, once, instead of into both GEMMs.
            for (std::size_t u = 0; u <= t; ++u) {
                d_row[u] = static_cast<Real>(static_cast<double>(scale) * p_row[u] * (d_row[u] - dot));
            }
        }
        causal_block_transpose_times_add(dv, p, dout_rows, r0);
        causal_block_times(dq.middleRows(r0, n), ds, k, r0, true);
        causal_block_transpose_times_add(dk, ds, q_rows, r0);
    }
}

}  // namespace detail

// Heads are independent: with OpenMP (a program built with -fopenmp, e.g. strata-gpt --threads)
// they are shared among Eigen::nbThreads() threads, and each head runs start to end on one thread
// with Eigen's GEMMs serial inside the parallel region. Eigen's own threaded GEMM would block the
// depth of the products by the thread count, so its bits would depend on it; these do not.
template <std::floating_point Real>
void attention_forward(Real* out,        // (B, T, C)
                       Real* lse,        // (B, NH, T)
                       const Real* qkv,  // (B, T, 3C)
                       std::size_t B, std::size_t T, std::size_t C, std::size_t NH,
                       std::size_t block_rows = attention_block_rows) {
    detail::check_heads(C, NH);
    detail::check_block_rows(block_rows);
    const auto heads = static_cast<std::ptrdiff_t>(B * NH);
#ifdef _OPENMP
#pragma omp parallel num_threads(Eigen::nbThreads())
#endif
    {
        row_major_matrix<Real> scores(std::min(block_rows, T), T);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (std::ptrdiff_t bh = 0; bh < heads; ++bh) {
            const auto head = static_cast<std::size_t>(bh);
            detail::attention_forward_head(out, lse, qkv, head / NH, head % NH, T, C, NH, block_rows, scores);
        }
    }
}

// Accumulates into dqkv: dq and dk through the scores, dv through out = P @ v. P is recomputed
// block by block as exp(S - lse) from the forward's q.k products (the same GEMMs, so the same
// bits); with dP = dout @ v^T, the softmax backward is dS = P * (dP - D), D_t = sum_u P_tu dP_tu
// in double, per row. A head's dq, dk and dv are its own channels of dqkv: no two threads write
// the same element.
template <std::floating_point Real>
void attention_backward(Real* dqkv,        // (B, T, 3C)
                        const Real* lse,   // (B, NH, T)
                        const Real* dout,  // (B, T, C)
                        const Real* qkv,   // (B, T, 3C)
                        std::size_t B, std::size_t T, std::size_t C, std::size_t NH,
                        std::size_t block_rows = attention_block_rows) {
    detail::check_heads(C, NH);
    detail::check_block_rows(block_rows);
    const auto heads = static_cast<std::ptrdiff_t>(B * NH);
#ifdef _OPENMP
#pragma omp parallel num_threads(Eigen::nbThreads())
#endif
    {
        row_major_matrix<Real> probs(std::min(block_rows, T), T), dscores(std::min(block_rows, T), T);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (std::ptrdiff_t bh = 0; bh < heads; ++bh) {
            const auto head = static_cast<std::size_t>(bh);
            detail::attention_backward_head(dqkv, lse, dout, qkv, head / NH, head % NH, T, C, NH, block_rows, probs,
                                            dscores);
        }
    }
}

}  // namespace strata::kernels::cpu
