// Flat-buffer helpers for the trainer: gradient accumulation across micro-batches, the global
// gradient norm and clipping.
//
// Glossary: N number of elements.
#pragma once

#include <concepts>     // std::floating_point
#include <cstddef>      // std::size_t
#include <type_traits>  // std::type_identity_t

namespace strata::kernels::cpu {

// dst += src.
template <std::floating_point Real>
void add_inplace(Real* dst,        // (N)
                 const Real* src,  // (N)
                 std::size_t N) {
    for (std::size_t i = 0; i < N; ++i) dst[i] += src[i];
}

// x *= factor. factor does not take part in deducing Real, so a double literal scales floats.
template <std::floating_point Real>
void scale_inplace(Real* x,  // (N)
                   std::type_identity_t<Real> factor, std::size_t N) {
    for (std::size_t i = 0; i < N; ++i) x[i] *= factor;
}

// sum of x_i^2, accumulated in double: the global norm over ~1e9 float gradients must not lose the
// small layers to rounding.
template <std::floating_point Real>
double sum_of_squares(const Real* x,  // (N)
                      std::size_t N) {
    double sum = 0.0;
    for (std::size_t i = 0; i < N; ++i) sum += static_cast<double>(x[i]) * x[i];
    return sum;
}

}  // namespace strata::kernels::cpu
