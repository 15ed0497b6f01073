// Global L2 gradient-norm clipping, as torch.nn.utils.clip_grad_norm_ (norm_type 2).
//
// The norm is accumulated in double, element by element in index order, span by span in list
// order, so one set of gradients gives one norm on every run and every thread count. The streamed
// optimizer can reproduce it exactly: add each layer's sum_of_squares in layer order, then sqrt.
//
// Differences from torch, on purpose: torch takes each tensor's norm in float32 and then the norm of
// those norms; here the sum of squares runs in double across all spans (more accurate, and exactly
// reproducible layer by layer). The coefficient is torch's: min(1, max_norm / (norm + 1e-6)).
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <cmath>        // std::isfinite, std::sqrt
#include <concepts>     // std::floating_point
#include <ranges>       // std::ranges::input_range, std::ranges::range_reference_t
#include <span>         // std::span
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::remove_const_t

namespace strata {

// A list of gradient blocks: any range whose elements view as a contiguous span of float or double
// (std::vector<std::span<float>>, std::array<std::vector<double>, N>, ...).
template <class R>
concept GradientList = std::ranges::input_range<R> && requires(std::ranges::range_reference_t<R> grad) {
    requires std::floating_point<std::remove_const_t<typename decltype(std::span(grad))::element_type>>;
};

template <class T>
    requires std::floating_point<std::remove_const_t<T>>
double sum_of_squares(std::span<T> grad) {
    double sum = 0;
    for (const auto x : grad) sum += static_cast<double>(x) * static_cast<double>(x);
    return sum;
}

template <GradientList R>
double global_grad_norm(const R& grads) {
    double sum = 0;
    for (const auto& grad : grads) sum += sum_of_squares(std::span(grad));
    return std::sqrt(sum);
}

// Throws when the norm is NaN or infinite: at that point the update would destroy the weights, so
// training must stop rather than clip (torch's error_if_nonfinite=True). `step` names the step in
// the message (a negative step leaves it out).
inline void require_finite_grad_norm(double norm, long step) {
    if (!std::isfinite(norm))
        throw error("non-finite gradient norm (" + std::to_string(norm) + ")" +
                        (step >= 0 ? " at step " + std::to_string(step) : std::string()) + ": the loss diverged",
                    "lower the learning rate, lengthen the warmup, or clip the gradients' norm; resume from the last checkpoint",
                    {"lr", "warmup", "clip"});
}

// The factor every gradient is multiplied by: 1 when the norm is within max_norm. The 1e-6 is
// torch's, so a norm just at max_norm scales by slightly less than 1, as it does there.
inline double clip_coefficient(double norm, double max_norm, long step = -1) {
    require_finite_grad_norm(norm, step);
    if (!(std::isfinite(max_norm) && max_norm > 0))
        throw error("gradient clipping: max_norm must be a positive finite number, got " + std::to_string(max_norm),
                    "the usual value is 1.0; to train without clipping, do not clip");
    const double coefficient = max_norm / (norm + 1e-6);
    return coefficient < 1 ? coefficient : 1.0;
}

template <std::floating_point T>
void scale_gradient(std::span<T> grad, double coefficient) {
    if (coefficient == 1) return;  // multiplying by 1 changes nothing; skip the pass over memory
    const T c = static_cast<T>(coefficient);
    for (T& x : grad) x *= c;
}

// torch.nn.utils.clip_grad_norm_ on a list of gradient spans: measures the global norm, scales every
// gradient when it exceeds max_norm, and returns the norm measured before clipping (what training
// logs as grad_norm). Throws, leaving the gradients untouched, when the norm is not finite.
template <GradientList R>
double clip_grad_norm(R&& grads, double max_norm, long step) {
    const double norm = global_grad_norm(grads);
    const double coefficient = clip_coefficient(norm, max_norm, step);
    for (auto&& grad : grads) scale_gradient(std::span(grad), coefficient);
    return norm;
}

}  // namespace strata
