// Softmax cross-entropy of next-token logits against target ids (torch.nn.functional.cross_entropy
// with ignore_index, before the reduction).
//
// Glossary: B batch, T time, V vocab.
//
// Saved for backward: lse (B, T), the log-sum-exp of each logits row. Backward recomputes the
// probabilities exp(logit - lse) from it instead of keeping a (B, T, V) probability tensor, which
// for GPT-2 is as large as the logits themselves.
#pragma once

#include <cmath>                  // std::exp, std::log
#include <concepts>               // std::floating_point
#include <cstddef>                // std::size_t
#include <cstdint>                // std::int32_t
#include <string>                 // std::to_string
#include <type_traits>            // std::type_identity_t
#include <strata/core/error.hpp>  // strata::error

namespace strata::kernels::cpu {

// A target equal to this contributes no loss and no gradient (padding, document boundaries).
inline constexpr std::int32_t ignore_index = -100;

namespace detail {

// True when the target counts; throws for an id that is neither ignore_index nor in [0, V).
inline bool counted_target(std::int32_t target, std::size_t position, std::size_t T,
                           std::size_t V) {
    if (target == ignore_index) return false;
    if (target < 0 || static_cast<std::size_t>(target) >= V) {
        throw error("cross_entropy: target id " + std::to_string(target) + " at position " +
                        std::to_string(position) + " (b=" + std::to_string(position / T) +
                        ", t=" + std::to_string(position % T) +
                        ") is outside [0, V=" + std::to_string(V) + ")",
                    "targets are token ids below V, or ignore_index (" +
                        std::to_string(ignore_index) + ") for positions without a target");
    }
    return true;
}

}  // namespace detail

// losses[b, t] = lse - logits[b, t, target], 0 where the target is ignore_index.
// Returns the number of counted (not ignored) targets, the denominator of the mean loss.
template <std::floating_point Real>
std::size_t cross_entropy_forward(Real* losses,                 // (B, T)
                                  Real* lse,                    // (B, T)
                                  const Real* logits,           // (B, T, V)
                                  const std::int32_t* targets,  // (B, T)
                                  std::size_t B, std::size_t T, std::size_t V) {
    std::size_t counted = 0;
    for (std::size_t row = 0; row < B * T; ++row) {
        const Real* z = logits + row * V;
        // Shifting by the row maximum keeps every exp() <= 1; the sum is exact enough in double.
        Real max_logit = z[0];
        for (std::size_t i = 1; i < V; ++i) max_logit = z[i] > max_logit ? z[i] : max_logit;
        double sum = 0.0;
        for (std::size_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(z[i] - max_logit));
        lse[row] = static_cast<Real>(static_cast<double>(max_logit) + std::log(sum));
        if (detail::counted_target(targets[row], row, T, V)) {
            losses[row] = lse[row] - z[targets[row]];
            ++counted;
        } else {
            losses[row] = Real(0);
        }
    }
    return counted;
}

// dlogits += scale * (softmax(logits) - onehot(target)) on counted rows; ignored rows get nothing.
// This is the gradient of scale * sum(losses): the trainer passes scale = 1 / (counted targets of
// the whole effective batch), so summing micro-batches gives exactly the gradient of the mean.
// scale does not take part in deducing Real, so a double scale works for float logits.
template <std::floating_point Real>
void cross_entropy_backward(Real* dlogits,                // (B, T, V)
                            const Real* lse,              // (B, T)
                            const Real* logits,           // (B, T, V)
                            const std::int32_t* targets,  // (B, T)
                            std::type_identity_t<Real> scale, std::size_t B, std::size_t T,
                            std::size_t V) {
    for (std::size_t row = 0; row < B * T; ++row) {
        if (!detail::counted_target(targets[row], row, T, V)) continue;
        const Real* z = logits + row * V;
        Real* dz = dlogits + row * V;
        for (std::size_t i = 0; i < V; ++i) dz[i] += scale * std::exp(z[i] - lse[row]);
        dz[targets[row]] -= scale;
    }
}

}  // namespace strata::kernels::cpu
