// Residual connection: out = a + b. Backward hands dout to both branches.
//
// Glossary: N number of elements (B*T*C in GPT-2).
#pragma once

#include <concepts>  // std::floating_point
#include <cstddef>   // std::size_t

namespace strata::kernels::cpu {

template <std::floating_point Real>
void residual_forward(Real* out,      // (N)
                      const Real* a,  // (N)
                      const Real* b,  // (N)
                      std::size_t N) {
    for (std::size_t i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

// da += dout, db += dout. da and db must be different buffers.
template <std::floating_point Real>
void residual_backward(Real* da,          // (N)
                       Real* db,          // (N)
                       const Real* dout,  // (N)
                       std::size_t N) {
    for (std::size_t i = 0; i < N; ++i) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

}  // namespace strata::kernels::cpu
