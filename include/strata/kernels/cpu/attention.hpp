// Causal multi-head self-attention of GPT-2, from the fused c_attn output.
//
// Glossary: B batch, T time, C channels, NH heads, HS head size (C / NH).
//
// qkv is Hugging Face's c_attn output: q = channels [0, C), k = [C, 2C), v = [2C, 3C); head h owns
// channels [h*HS, (h+1)*HS) of each. Scores are q.k / sqrt(HS), position t attends to t' <= t, and
// the output concatenates the heads back into (B, T, C) (before c_proj).
//
// Saved for backward: att (B, NH, T, T), the softmax probabilities, zero above the diagonal. It is
// all backward needs besides qkv: B*NH*T*T values, acceptable on the CPU; a CUDA kernel may keep
// only the row statistics instead and recompute.
#pragma once

#include <algorithm>                           // std::max
#include <cmath>                               // std::exp, std::sqrt
#include <concepts>                            // std::floating_point
#include <cstddef>                             // std::size_t
#include <string>                              // std::to_string
#include <Eigen/Core>                          // Eigen::Lower
#include <strata/core/error.hpp>               // strata::error
#include <strata/kernels/cpu/eigen_views.hpp>  // view, row_major_matrix

namespace strata::kernels::cpu {

namespace detail {

inline void check_heads(std::size_t C, std::size_t NH) {
    if (NH == 0 || C % NH != 0) {
        throw error("attention: C=" + std::to_string(C) + " channels do not split into NH=" +
                        std::to_string(NH) + " heads of equal size",
                    "choose NH so that it divides C (GPT-2: C=768, NH=12)");
    }
}

}  // namespace detail

template <std::floating_point Real>
void attention_forward(Real* out,        // (B, T, C)
                       Real* att,        // (B, NH, T, T)
                       const Real* qkv,  // (B, T, 3C)
                       std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
    detail::check_heads(C, NH);
    const std::size_t HS = C / NH;
    const Real scale = static_cast<Real>(1.0 / std::sqrt(static_cast<double>(HS)));
    for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t h = 0; h < NH; ++h) {
            const Real* q_ptr = qkv + b * T * 3 * C + h * HS;
            const auto q = view(q_ptr, T, HS, 3 * C);
            const auto k = view(q_ptr + C, T, HS, 3 * C);
            const auto v = view(q_ptr + 2 * C, T, HS, 3 * C);
            Real* att_bh = att + (b * NH + h) * T * T;
            // The whole (T, T) product is computed; the upper half is overwritten by the mask.
            view(att_bh, T, T).noalias() = scale * (q * k.transpose());
            for (std::size_t t = 0; t < T; ++t) {
                Real* row = att_bh + t * T;
                // Subtracting the row maximum keeps exp() <= 1: no overflow whatever the scores.
                Real max_score = row[0];
                for (std::size_t u = 1; u <= t; ++u) max_score = std::max(max_score, row[u]);
                double sum = 0.0;
                for (std::size_t u = 0; u <= t; ++u) {
                    row[u] = std::exp(row[u] - max_score);
                    sum += row[u];
                }
                const Real inv_sum = static_cast<Real>(1.0 / sum);
                for (std::size_t u = 0; u <= t; ++u) row[u] *= inv_sum;
                for (std::size_t u = t + 1; u < T; ++u) row[u] = Real(0);
            }
            view(out + b * T * C + h * HS, T, HS, C).noalias() =
                view(att_bh, T, T).template triangularView<Eigen::Lower>() * v;
        }
    }
}

// Accumulates into dqkv: dq and dk through the scores, dv through out = att @ v.
template <std::floating_point Real>
void attention_backward(Real* dqkv,        // (B, T, 3C)
                        const Real* att,   // (B, NH, T, T)
                        const Real* dout,  // (B, T, C)
                        const Real* qkv,   // (B, T, 3C)
                        std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
    detail::check_heads(C, NH);
    const std::size_t HS = C / NH;
    const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
    row_major_matrix<Real> dscores(T, T);  // d loss / d (scaled scores) of one (b, h)
    for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t h = 0; h < NH; ++h) {
            const std::size_t offset = b * T * 3 * C + h * HS;
            const auto q = view(qkv + offset, T, HS, 3 * C);
            const auto k = view(qkv + offset + C, T, HS, 3 * C);
            const auto v = view(qkv + offset + 2 * C, T, HS, 3 * C);
            auto dq = view(dqkv + offset, T, HS, 3 * C);
            auto dk = view(dqkv + offset + C, T, HS, 3 * C);
            auto dv = view(dqkv + offset + 2 * C, T, HS, 3 * C);
            const auto dout_bh = view(dout + b * T * C + h * HS, T, HS, C);
            const Real* att_bh = att + (b * NH + h) * T * T;
            const auto a = view(att_bh, T, T);

            dv.noalias() += a.template triangularView<Eigen::Lower>().transpose() * dout_bh;
            dscores.noalias() = dout_bh * v.transpose();  // d loss / d att
            // Softmax backward, row by row: dpre = att * (datt - sum_u att_u * datt_u).
            for (std::size_t t = 0; t < T; ++t) {
                const Real* a_row = att_bh + t * T;
                Real* d_row = dscores.data() + t * T;
                double dot = 0.0;
                for (std::size_t u = 0; u <= t; ++u) {
                    dot += static_cast<double>(a_row[u]) * d_row[u];
                }
                // The 1/sqrt(HS) of the scores folds in here, once, instead of into both GEMMs.
                for (std::size_t u = 0; u <= t; ++u) {
                    d_row[u] = static_cast<Real>(scale * a_row[u] * (d_row[u] - dot));
                }
                for (std::size_t u = t + 1; u < T; ++u) d_row[u] = Real(0);
            }
            dq.noalias() += dscores.template triangularView<Eigen::Lower>() * k;
            dk.noalias() += dscores.template triangularView<Eigen::Lower>().transpose() * q;
        }
    }
}

}  // namespace strata::kernels::cpu
