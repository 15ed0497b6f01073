// SGD with momentum on the GPU, bitwise equal to the CPU reference strata::sgd_update<float>
// (strata/optim/sgd.hpp).
//
// Glossary: n number of parameters in the block.
//
// The constants come in as sgd_constants<float> (sgd_constants_for, on the host). Each element
// goes through the reference's IEEE operations in its order with intrinsics nvcc can neither
// contract nor approximate: __fmaf_rn for the reference's fused multiply-adds (the decay term,
// Nesterov's look-ahead, the parameter update), __fmul_rn and __fadd_rn for the momentum's
// product and sum, each rounded. Elements are independent: the grid, the float4 path and the
// alignment change no bit.
#pragma once

#include <strata/kernels/cuda/elementwise.cuh>  // detail::aligned16, load_pack, store_pack, flat grids
#include <strata/kernels/cuda/launch.cuh>       // check_launch
#include <strata/optim/sgd.hpp>                 // sgd_constants, sgd_apply (the reference)

#include <cuda_runtime.h>  // cudaStream_t, __fmaf_rn, __fmul_rn, __fadd_rn

#include <cstddef>      // std::size_t
#include <type_traits>  // std::is_same_v

namespace strata::kernels::cuda {

namespace detail {

// One element: sgd_apply's loop body, operation for operation.
__device__ inline void sgd_element(float& p, float grad, float& b, const sgd_constants<float>& k) {
    if (k.apply_decay) grad = __fmaf_rn(p, k.weight_decay, grad);
    if (k.use_momentum) {
        const float buf = __fadd_rn(__fmul_rn(b, k.momentum), grad);
        b = buf;
        grad = k.nesterov ? __fmaf_rn(buf, k.momentum, grad) : buf;
    }
    p = __fmaf_rn(grad, k.neg_lr, p);
}

}  // namespace detail

template <class Real, int Width>
__global__ void sgd_kernel(Real* p,        // (n)
                           const Real* g,  // (n)
                           Real* b,        // (n) momentum buffer
                           std::size_t n, const sgd_constants<Real> k) {
    const std::size_t packs = n / Width;
    for (std::size_t i = detail::thread_index(); i < packs; i += detail::thread_count()) {
        auto param = detail::load_pack<Width>(p + i * Width);
        const auto grad = detail::load_pack<Width>(g + i * Width);
        auto buf = detail::load_pack<Width>(b + i * Width);
        for (int j = 0; j < Width; ++j) detail::sgd_element(param.v[j], grad.v[j], buf.v[j], k);
        detail::store_pack<Width>(p + i * Width, param);
        if (k.use_momentum) detail::store_pack<Width>(b + i * Width, buf);
    }
    for (std::size_t i = packs * Width + detail::thread_index(); i < n; i += detail::thread_count())
        detail::sgd_element(p[i], g[i], b[i], k);
}

// One SGD step over a flat block: p and b updated in place, bitwise as sgd_update<float> with the
// hyperparameters, lr and decay that k was made from (sgd_constants_for).
template <class Real>
void sgd(Real* p,        // (n)
         const Real* g,  // (n)
         Real* b,        // (n)
         std::size_t n, const sgd_constants<Real>& k, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (n == 0) return;
    if (detail::aligned16(p, g, b))
        sgd_kernel<Real, 4><<<detail::flat_blocks(n / 4), detail::flat_threads, 0, stream>>>(p, g, b, n, k);
    else
        sgd_kernel<Real, 1><<<detail::flat_blocks(n), detail::flat_threads, 0, stream>>>(p, g, b, n, k);
    check_launch("sgd");
}

// The float instances are compiled once, in strata's src/cuda/elementwise.cu (strata::cuda,
// strata_cuda_ops): a unit that includes this header links them instead of compiling the kernels
// again.
#define STRATA_CUDA_SGD_INSTANCES(prefix) \
    prefix void sgd<float>(float*, const float*, float*, std::size_t, const sgd_constants<float>&, cudaStream_t);
STRATA_CUDA_SGD_INSTANCES(extern template)

}  // namespace strata::kernels::cuda
