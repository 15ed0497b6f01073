// GELU, tanh approximation, exactly GPT-2's (Hugging Face "gelu_new"):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//
// Glossary: N number of elements (B*T*4C in the GPT-2 MLP).
#pragma once

#include <cmath>     // std::tanh
#include <concepts>  // std::floating_point
#include <cstddef>   // std::size_t

namespace strata::kernels::cpu {

namespace detail {

inline constexpr double gelu_cubic = 0.044715;
// sqrt(2 / pi) as a literal: std::sqrt is not constexpr in C++20.
inline constexpr double gelu_sqrt_2_over_pi = 0.7978845608028654;

// tanh(sqrt(2/pi) (x + 0.044715 x^3)), rounded the same way in forward and backward.
template <class Real>
Real gelu_tanh(Real x) {
    const Real s = static_cast<Real>(gelu_sqrt_2_over_pi);
    const Real a = static_cast<Real>(gelu_cubic);
    return std::tanh(s * (x + a * (x * x * x)));
}

}  // namespace detail

template <std::floating_point Real>
void gelu_forward(Real* out,        // (N)
                  const Real* inp,  // (N)
                  std::size_t N) {
    for (std::size_t i = 0; i < N; ++i) {
        out[i] = Real(0.5) * inp[i] * (Real(1) + detail::gelu_tanh(inp[i]));
    }
}

// dinp += gelu'(inp) * dout.
template <std::floating_point Real>
void gelu_backward(Real* dinp,        // (N)
                   const Real* dout,  // (N)
                   const Real* inp,   // (N)
                   std::size_t N) {
    const Real s = static_cast<Real>(detail::gelu_sqrt_2_over_pi);
    const Real a = static_cast<Real>(detail::gelu_cubic);
    for (std::size_t i = 0; i < N; ++i) {
        const Real x = inp[i];
        const Real th = detail::gelu_tanh(x);
        // sech^2 = 1 - tanh^2: unlike 1/cosh^2 it cannot overflow for large |x|.
        const Real sech2 = Real(1) - th * th;
        const Real local_grad = Real(0.5) * (Real(1) + th) +
                                Real(0.5) * x * sech2 * s * (Real(1) + Real(3) * a * x * x);
        dinp[i] += local_grad * dout[i];
    }
}

}  // namespace strata::kernels::cpu
