// The scalar reference SGD with momentum on flat spans: the ground truth the vectorized,
// multi-threaded and CUDA updates are tested against. Clarity over speed; one element at a time.
//
// What it computes: torch.optim.SGD (torch 2.x, `_single_tensor_sgd`, foreach=False,
// dampening=0, maximize=False), with the tensor type's roundings of the Python scalars and the
// fused multiply-adds of torch's vectorized `add(other, alpha)` (vec::fmadd(other, alpha, self)).
// For one element, with b the momentum buffer:
//
//   g = fma(p, T(wd), g)          grad = grad.add(param, alpha=weight_decay)   [wd != 0 and decay]
//   b = b * T(mu) + g             buf.mul_(momentum).add_(grad)                 [two roundings]
//   g = fma(b, T(mu), g)          grad = grad.add(buf, alpha=momentum)          [nesterov]
//   g = b                                                                       [otherwise]
//   p = fma(g, T(-lr), p)         param.add_(grad, alpha=-lr)
//
// Weight decay is torch's coupled L2 term (added to the gradient, then carried by the momentum),
// not AdamW's decoupled decay; `decay` false skips it for a tensor (biases, layernorm gains), as a
// torch param group with weight_decay 0 does. Momentum 0 is plain SGD: the buffer is neither read
// nor written (torch keeps none; strata still allocates it, so the state layout does not depend on
// a hyperparameter). The buffer starts at zero, so the first step stores b = g, as torch's
// `buf = clone(grad)` does (up to the sign of a zero gradient: +0 here).
//
// `b * mu + g` is two IEEE operations: like adamw.hpp, this relies on no FMA contraction, which
// holds for x86-64 builds without -march (the vectorized paths keep the product opaque).
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <cmath>        // std::fma, std::isfinite
#include <concepts>     // std::floating_point
#include <cstddef>      // std::size_t
#include <span>         // std::span
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <type_traits>  // std::type_identity_t

namespace strata {

// Hyperparameters in double, as torch holds them (Python floats); the learning rate is not here:
// it changes every step.
struct sgd_hparams {
    double momentum = 0.9;
    double weight_decay = 0;  // coupled (L2): added to the gradient as weight_decay * p
    bool nesterov = false;
};

inline void validate(const sgd_hparams& h) {
    const auto bad = [](const std::string& what, const std::string& hint) { throw error("sgd: " + what, hint); };
    if (!(std::isfinite(h.momentum) && h.momentum >= 0))
        bad("momentum must be a finite number >= 0, got " + std::to_string(h.momentum),
            "the usual value is 0.9; 0 is plain SGD");
    if (!(std::isfinite(h.weight_decay) && h.weight_decay >= 0))
        bad("weight_decay must be a finite number >= 0, got " + std::to_string(h.weight_decay),
            "SGD's weight decay is an L2 term added to the gradient; 0 disables it");
    if (h.nesterov && h.momentum == 0)
        bad("Nesterov momentum needs a momentum > 0", "give a momentum (e.g. 0.9) or turn Nesterov off");
}

// The per-step constants of one SGD step in the tensor type T (torch's Python scalars rounded to
// T where torch rounds them), shared by the reference, the SIMD paths and the CUDA kernel.
template <std::floating_point T>
struct sgd_constants {
    T weight_decay{};            // T(weight_decay)
    bool apply_decay = false;    // decay && weight_decay != 0
    T momentum{};                // T(momentum)
    bool use_momentum = false;   // momentum != 0: the buffer is used
    bool nesterov = false;
    T neg_lr{};                  // T(-lr)
};

// Throws what sgd_update throws for mismatched span sizes, naming `who`.
inline void check_sgd_sizes(std::string_view who, std::size_t p, std::size_t g, std::size_t b) {
    if (g != p || b != p)
        throw error(std::string(who) + ": span sizes differ: params " + std::to_string(p) + ", grads " +
                        std::to_string(g) + ", momentum " + std::to_string(b),
                    "grads and the momentum buffer must use the parameters' layout");
}

// The constants of a step at learning rate lr; `decay` false turns weight decay off for the block.
// Throws for bad hyperparameters or a bad lr, naming `who`.
template <std::floating_point T>
sgd_constants<T> sgd_constants_for(const sgd_hparams& h, double lr, bool decay, std::string_view who = "sgd") {
    validate(h);
    if (!(std::isfinite(lr) && lr >= 0))
        throw error(std::string(who) + ": lr must be a finite number >= 0, got " + std::to_string(lr),
                    "check the learning-rate schedule");
    sgd_constants<T> k;
    k.weight_decay = static_cast<T>(h.weight_decay);
    k.apply_decay = decay && h.weight_decay != 0;
    k.momentum = static_cast<T>(h.momentum);
    k.use_momentum = h.momentum != 0;
    k.nesterov = h.nesterov;
    k.neg_lr = static_cast<T>(-lr);
    return k;
}

// The element loop on raw pointers: the operations every other implementation reproduces. k is
// taken by value: p, b could alias a T inside it. grad_scale folds a gradient clip in, as in
// adamw_apply: g * grad_scale, its own rounding (g is not written); 1 skips it.
template <std::floating_point T>
void sgd_apply(T* p,        // (n)
               const T* g,  // (n)
               T* b,        // (n) momentum buffer
               std::size_t n, const sgd_constants<T> k, const T grad_scale = T(1)) {
    const bool scaled = grad_scale != T(1);
    for (std::size_t i = 0; i < n; ++i) {
        T grad = g[i];
        if (scaled) grad = grad * grad_scale;
        if (k.apply_decay) grad = std::fma(p[i], k.weight_decay, grad);
        if (k.use_momentum) {
            const T buf = b[i] * k.momentum + grad;
            b[i] = buf;
            grad = k.nesterov ? std::fma(buf, k.momentum, grad) : buf;
        }
        p[i] = std::fma(grad, k.neg_lr, p[i]);
    }
}

// One SGD step over a flat block of parameters: p and the momentum buffer b updated in place from
// g. `decay` false skips weight decay for this block. `grad_scale` (1: none) multiplies each
// gradient first, as a separate scale_inplace pass would. No step count: SGD has no bias correction.
template <std::floating_point T>
void sgd_update(std::span<T> p, std::span<const std::type_identity_t<T>> g, std::span<std::type_identity_t<T>> b,
                const sgd_hparams& h, double lr, bool decay, std::type_identity_t<T> grad_scale = T(1)) {
    check_sgd_sizes("sgd", p.size(), g.size(), b.size());
    if (!(std::isfinite(grad_scale) && grad_scale >= 0))
        throw error("sgd: grad_scale must be a finite number >= 0, got " + std::to_string(grad_scale),
                    "pass the clip coefficient, or 1 for no scaling");
    sgd_apply(p.data(), g.data(), b.data(), p.size(), sgd_constants_for<T>(h, lr, decay), grad_scale);
}

}  // namespace strata
