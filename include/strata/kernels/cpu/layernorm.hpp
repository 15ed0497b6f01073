// Layer normalization over channels, as torch.nn.LayerNorm in GPT-2: eps = 1e-5, biased variance.
//
// Glossary: B batch, T time, C channels.
//
// Saved for backward: mean and rstd = 1 / sqrt(var + eps) of every (b, t) row. Row statistics are
// summed in double whatever Real is, so the float kernel is a tight oracle for the CUDA one.
#pragma once

#include <strata/kernels/cpu/residual.hpp>  // residual_forward

#include <cmath>     // std::sqrt
#include <concepts>  // std::floating_point
#include <cstddef>   // std::size_t

namespace strata::kernels::cpu {

inline constexpr double layernorm_eps = 1e-5;

template <std::floating_point Real>
void layernorm_forward(Real* out,           // (B, T, C)
                       Real* mean,          // (B, T)
                       Real* rstd,          // (B, T)
                       const Real* inp,     // (B, T, C)
                       const Real* weight,  // (C)
                       const Real* bias,    // (C)
                       std::size_t B, std::size_t T, std::size_t C) {
    for (std::size_t row = 0; row < B * T; ++row) {
        const Real* x = inp + row * C;
        double sum = 0.0;
        for (std::size_t c = 0; c < C; ++c) sum += x[c];
        const double m = sum / static_cast<double>(C);
        // Two passes, not E[x^2] - E[x]^2: the latter cancels badly when |mean| >> std.
        double sum_sq = 0.0;
        for (std::size_t c = 0; c < C; ++c) {
            const double d = x[c] - m;
            sum_sq += d * d;
        }
        const double var = sum_sq / static_cast<double>(C);
        mean[row] = static_cast<Real>(m);
        rstd[row] = static_cast<Real>(1.0 / std::sqrt(var + layernorm_eps));
        // Normalize with the saved (rounded) statistics, so backward differentiates exactly this.
        Real* y = out + row * C;
        for (std::size_t c = 0; c < C; ++c) {
            y[c] = (x[c] - mean[row]) * rstd[row] * weight[c] + bias[c];
        }
    }
}

// res = a + b, then out = layernorm(res): the residual add and the LayerNorm after it in a
// pre-LayerNorm block, one op (the CUDA kernel fuses them into one pass over the rows; here the
// reference is the composition itself). res must not overlap a or b.
template <std::floating_point Real>
void residual_layernorm_forward(Real* res,           // (B, T, C)
                                Real* out,           // (B, T, C)
                                Real* mean,          // (B, T)
                                Real* rstd,          // (B, T)
                                const Real* a,       // (B, T, C)
                                const Real* b,       // (B, T, C)
                                const Real* weight,  // (C)
                                const Real* bias,    // (C)
                                std::size_t B, std::size_t T, std::size_t C) {
    residual_forward(res, a, b, B * T * C);
    layernorm_forward(out, mean, rstd, res, weight, bias, B, T, C);
}

// dinp += the full Jacobian term through mean and rstd; dweight += norm * dout; dbias += dout.
template <std::floating_point Real>
void layernorm_backward(Real* dinp,          // (B, T, C)
                        Real* dweight,       // (C)
                        Real* dbias,         // (C)
                        const Real* mean,    // (B, T)
                        const Real* rstd,    // (B, T)
                        const Real* dout,    // (B, T, C)
                        const Real* inp,     // (B, T, C)
                        const Real* weight,  // (C)
                        std::size_t B, std::size_t T, std::size_t C) {
    for (std::size_t row = 0; row < B * T; ++row) {
        const Real* x = inp + row * C;
        const Real* dy = dout + row * C;
        const Real m = mean[row];
        const Real r = rstd[row];
        // dnorm = weight * dout; the two means are what d(mean) and d(rstd) feed back to dinp.
        double dnorm_sum = 0.0;
        double dnorm_norm_sum = 0.0;
        for (std::size_t c = 0; c < C; ++c) {
            const double norm = static_cast<double>((x[c] - m) * r);
            const double dnorm = static_cast<double>(weight[c]) * dy[c];
            dnorm_sum += dnorm;
            dnorm_norm_sum += dnorm * norm;
        }
        const double dnorm_mean = dnorm_sum / static_cast<double>(C);
        const double dnorm_norm_mean = dnorm_norm_sum / static_cast<double>(C);
        Real* dx = dinp + row * C;
        for (std::size_t c = 0; c < C; ++c) {
            const Real norm = (x[c] - m) * r;
            const Real dnorm = weight[c] * dy[c];
            dbias[c] += dy[c];
            dweight[c] += norm * dy[c];
            dx[c] += static_cast<Real>((dnorm - dnorm_mean - norm * dnorm_norm_mean) * r);
        }
    }
}

}  // namespace strata::kernels::cpu
