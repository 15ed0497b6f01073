// The scalar reference AdamW on flat spans: the ground truth the vectorized, multi-threaded and
// offloaded optimizers are tested against. Clarity over speed; one element at a time.
//
// What it matches: torch.optim.AdamW (torch 2.x, `_single_tensor_adam` with
// decoupled_weight_decay=True, foreach=False, fused=False, amsgrad=False, maximize=False,
// capturable=False), operation for operation and in the same order, with the same roundings of
// the Python scalars to the tensor's type T. For one element, at 1-based step t:
//
//   p = p * T(1 - lr * wd)                        param.mul_(1 - lr * weight_decay)
//   m = fma(T(1 - b1), g - m, m)                  exp_avg.lerp_(grad, 1 - beta1)   [weight < 0.5]
//   v = v * T(b2)                                 exp_avg_sq.mul_(beta2)
//   v = fma(T(1 - b2) * g, g, v)                  .addcmul_(grad, grad, value=1 - beta2)
//   bc1 = 1 - b1^t,  bc2 = 1 - b2^t               (double, like Python floats)
//   step_size = lr / bc1,  bc2_sqrt = bc2^0.5     (double; Python's ** is C's pow)
//   denom = sqrt(v) / T(bc2_sqrt) + T(eps)        (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//   p = p + T(-step_size) * m / denom             param.addcdiv_(exp_avg, denom, value=-step_size)
//
// The two fused multiply-adds are torch's: its CPU lerp is an FMA (vec::fmadd), and its builds
// for AVX2/AVX-512 contract addcmul's `self + value * t1 * t2` into one. With them, a 5-step float
// trajectory equals torch 2.11's bit for bit (tests/train/adamw_test.cpp); without them m and v
// differed in the last bit. Algebraically this is the textbook p -= lr * (mhat / (sqrt(vhat) + eps)
// + wd * p_old): eps is added to sqrt(vhat), not sqrt(v), and the decay uses p before the step.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <cmath>        // std::fma, std::isfinite, std::pow, std::sqrt
#include <concepts>     // std::floating_point
#include <cstddef>      // std::size_t
#include <span>         // std::span
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <type_traits>  // std::type_identity_t

namespace strata {

// Defaults are GPT-2/nanoGPT's (torch's own defaults are betas (0.9, 0.999) and weight_decay 0.01).
// Hyperparameters are doubles because torch holds them as Python floats; each is rounded to the
// tensor type exactly where torch rounds it. The learning rate is not here: it changes every step.
struct adamw_hparams {
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.1;
};

inline void validate(const adamw_hparams& h) {
    const auto bad = [](const std::string& what, const std::string& hint) { throw error("adamw: " + what, hint); };
    if (!(h.beta1 >= 0 && h.beta1 < 1))
        bad("beta1 must be in [0, 1), got " + std::to_string(h.beta1), "the usual value is 0.9");
    if (!(h.beta2 >= 0 && h.beta2 < 1))
        bad("beta2 must be in [0, 1), got " + std::to_string(h.beta2), "GPT training uses 0.95 or 0.999");
    if (!(std::isfinite(h.eps) && h.eps >= 0))
        bad("eps must be a finite number >= 0, got " + std::to_string(h.eps), "the usual value is 1e-8");
    if (!(std::isfinite(h.weight_decay) && h.weight_decay >= 0))
        bad("weight_decay must be a finite number >= 0, got " + std::to_string(h.weight_decay),
            "GPT training uses 0.1; 0 disables it");
}

// The per-step constants of one AdamW step in the tensor type T: torch's Python scalars, computed
// in double and rounded to T exactly where torch rounds them. With these, the per-element
// arithmetic needs nothing else, so the scalar reference below, the SIMD paths
// (strata/optim/adamw_simd.hpp) and the CUDA kernel (strata/kernels/cuda/adamw.cuh) share them.
template <std::floating_point T>
struct adamw_constants {
    T decay_factor{};                // T(1 - lr * weight_decay)
    bool apply_decay = false;        // decay && weight_decay != 0: torch skips the multiply when wd == 0
    T lerp_weight{};                 // T(1 - beta1)
    bool lerp_weight_small = false;  // lerp_weight < 0.5: torch's lerp picks its formula on this
    T beta2{};                       // T(beta2)
    T one_minus_beta2{};             // T(1 - beta2)
    T bc2_sqrt{};                    // T((1 - beta2^t)^0.5)
    T eps{};                         // T(eps)
    T neg_step_size{};               // T(-lr / (1 - beta1^t))
};

// Throws what adamw_update throws for mismatched span sizes, naming `who`.
inline void check_adamw_sizes(std::string_view who, std::size_t p, std::size_t g, std::size_t m, std::size_t v) {
    if (g != p || m != p || v != p)
        throw error(std::string(who) + ": span sizes differ: params " + std::to_string(p) + ", grads " +
                        std::to_string(g) + ", m " + std::to_string(m) + ", v " + std::to_string(v),
                    "grads and both moments must use the parameters' layout");
}

// The constants of step `step` (1-based) at learning rate lr; `decay` false turns weight decay off
// for the block. Throws for bad hyperparameters, step < 1 or a bad lr, naming `who`.
template <std::floating_point T>
adamw_constants<T> adamw_constants_for(const adamw_hparams& h, double lr, long step, bool decay,
                                        std::string_view who = "adamw") {
    validate(h);
    if (step < 1)
        throw error(std::string(who) + ": step must be >= 1 (1-based), got " + std::to_string(step),
                    "pass the number of updates including this one");
    if (!(std::isfinite(lr) && lr >= 0))
        throw error(std::string(who) + ": lr must be a finite number >= 0, got " + std::to_string(lr),
                    "check the learning-rate schedule");

    const double t = static_cast<double>(step);
    const double bias_correction1 = 1 - std::pow(h.beta1, t);
    const double bias_correction2 = 1 - std::pow(h.beta2, t);
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);

    adamw_constants<T> k;
    k.decay_factor = static_cast<T>(1 - lr * h.weight_decay);
    k.apply_decay = decay && h.weight_decay != 0;
    k.lerp_weight = static_cast<T>(1 - h.beta1);
    k.lerp_weight_small = k.lerp_weight < T(0.5);
    k.beta2 = static_cast<T>(h.beta2);
    k.one_minus_beta2 = static_cast<T>(1 - h.beta2);
    k.bc2_sqrt = static_cast<T>(bias_correction2_sqrt);
    k.eps = static_cast<T>(h.eps);
    k.neg_step_size = static_cast<T>(-step_size);
    return k;
}

// The element loop of adamw_update on raw pointers, one element at a time: the operations every
// other implementation reproduces. k is taken by value: p, m, v could alias a T inside it.
//
// grad_scale folds a gradient clip into the update: each gradient is first multiplied by it, one
// rounding, exactly what kernels::cpu::scale_inplace(g, grad_scale) would have stored in g before
// a plain step (g itself is not written). 1 (the default) skips the multiply; x * 1 == x anyway.
template <std::floating_point T>
void adamw_apply(T* p,        // (n)
                 const T* g,  // (n)
                 T* m,        // (n)
                 T* v,        // (n)
                 std::size_t n, const adamw_constants<T> k, const T grad_scale = T(1)) {
    const bool scaled = grad_scale != T(1);
    for (std::size_t i = 0; i < n; ++i) {
        T param = p[i];
        T grad = g[i];
        if (scaled) grad = grad * grad_scale;  // its own rounding: no FMA contraction without -march (see adamw_simd.hpp)
        if (k.apply_decay) param = param * k.decay_factor;
        T exp_avg = m[i];
        exp_avg = k.lerp_weight_small ? std::fma(k.lerp_weight, grad - exp_avg, exp_avg)
                                      : std::fma(-(grad - exp_avg), T(1) - k.lerp_weight, grad);
        T exp_avg_sq = v[i] * k.beta2;
        exp_avg_sq = std::fma(k.one_minus_beta2 * grad, grad, exp_avg_sq);
        const T denom = std::sqrt(exp_avg_sq) / k.bc2_sqrt + k.eps;
        p[i] = param + k.neg_step_size * exp_avg / denom;
        m[i] = exp_avg;
        v[i] = exp_avg_sq;
    }
}

// A gradient scale must be a finite number >= 0 (a clip coefficient is in (0, 1]).
inline void check_grad_scale(std::string_view who, double grad_scale) {
    if (!(std::isfinite(grad_scale) && grad_scale >= 0))
        throw error(std::string(who) + ": grad_scale must be a finite number >= 0, got " + std::to_string(grad_scale),
                    "pass the clip coefficient, or 1 for no scaling");
}

// One AdamW step over a flat block of parameters. `step` is 1-based (the number of updates
// including this one, torch's state['step'] after its increment). `decay` false skips weight decay
// for this block (biases, layernorm gains), as torch does for a param group with weight_decay 0.
// p, m, v are updated in place; all four spans have the same length. `grad_scale` (1: none)
// multiplies each gradient first, as a separate scale_inplace pass would; g is left as it is.
template <std::floating_point T>
void adamw_update(std::span<T> p, std::span<const std::type_identity_t<T>> g,
                  std::span<std::type_identity_t<T>> m, std::span<std::type_identity_t<T>> v,
                  const adamw_hparams& h, double lr, long step, bool decay,
                  std::type_identity_t<T> grad_scale = T(1)) {
    check_adamw_sizes("adamw", p.size(), g.size(), m.size(), v.size());
    check_grad_scale("adamw", grad_scale);
    const adamw_constants<T> k = adamw_constants_for<T>(h, lr, step, decay);
    adamw_apply(p.data(), g.data(), m.data(), v.data(), p.size(), k, grad_scale);
}

}  // namespace strata
