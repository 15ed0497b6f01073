// Flat-buffer helpers for the trainer: gradient accumulation across micro-batches, the global
// gradient norm and clipping.
//
// Glossary: N number of elements.
#pragma once

#include <algorithm>    // std::min
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

// sum_of_squares adds in one canonical order, shared with the CUDA kernel so both give the same
// bits: x is cut into chunks of this many elements (the last one shorter), each chunk is summed
// alone, then the chunk sums are added in chunk order. On the GPU a chunk is one thread's work.
inline constexpr std::size_t sum_of_squares_chunk = 4096;

// sum of x_i^2, accumulated in double: the global norm over ~1e9 float gradients must not lose the
// small layers to rounding. Chunk partial = sequential sum from 0.0 of double(x_i) * double(x_i)
// in index order; result = sequential sum from 0.0 of the partials in chunk order.
template <std::floating_point Real>
double sum_of_squares(const Real* x,  // (N)
                      std::size_t N) {
    double sum = 0.0;
    for (std::size_t begin = 0; begin < N; begin += sum_of_squares_chunk) {
        const std::size_t end = std::min(N, begin + sum_of_squares_chunk);
        double partial = 0.0;
        for (std::size_t i = begin; i < end; ++i) partial += static_cast<double>(x[i]) * static_cast<double>(x[i]);
        sum += partial;
    }
    return sum;
}

}  // namespace strata::kernels::cpu
