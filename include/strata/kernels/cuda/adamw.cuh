// AdamW on the GPU, bitwise equal to the CPU reference strata::adamw_update<float>
// (strata/optim/adamw.hpp), which is itself torch's AdamW bit for bit.
//
// Glossary: n number of parameters in the block.
//
// The per-step constants come in as adamw_constants<float> (adamw_constants_for computes them on
// the host, in double, rounded to float exactly as the reference does). Each element then goes
// through the reference's IEEE operations in its order, written with intrinsics that nvcc cannot
// contract or approximate: __fmaf_rn for the two fused multiply-adds the reference has (m's lerp,
// v's addcmul), and __fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn for everything else.
// Denormals are kept (nvcc's default without -ftz=true, like the CPU's). Elements are independent,
// so the grid, the float4 path and the alignment change no bit.
#pragma once

#include <strata/kernels/cuda/elementwise.cuh>  // detail::aligned16, load_pack, store_pack, flat grids
#include <strata/kernels/cuda/launch.cuh>       // check_launch
#include <strata/optim/adamw.hpp>               // adamw_constants, adamw_apply (the reference)

#include <cuda_runtime.h>  // cudaStream_t, __fmaf_rn, __fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn

#include <cstddef>      // std::size_t
#include <type_traits>  // std::is_same_v

namespace strata::kernels::cuda {

namespace detail {

// One element: adamw_apply's loop body, operation for operation.
__device__ inline void adamw_element(float& p, float grad, float& m, float& v, const adamw_constants<float>& k) {
    float param = p;
    if (k.apply_decay) param = __fmul_rn(param, k.decay_factor);
    float exp_avg = m;
    exp_avg = k.lerp_weight_small ? __fmaf_rn(k.lerp_weight, __fsub_rn(grad, exp_avg), exp_avg)
                                  : __fmaf_rn(-__fsub_rn(grad, exp_avg), __fsub_rn(1.0f, k.lerp_weight), grad);
    float exp_avg_sq = __fmul_rn(v, k.beta2);
    exp_avg_sq = __fmaf_rn(__fmul_rn(k.one_minus_beta2, grad), grad, exp_avg_sq);
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(exp_avg_sq), k.bc2_sqrt), k.eps);
    p = __fadd_rn(param, __fdiv_rn(__fmul_rn(k.neg_step_size, exp_avg), denom));
    m = exp_avg;
    v = exp_avg_sq;
}

}  // namespace detail

template <class Real, int Width>
__global__ void adamw_kernel(Real* p,        // (n)
                             const Real* g,  // (n)
                             Real* m,        // (n)
                             Real* v,        // (n)
                             std::size_t n, const adamw_constants<Real> k) {
    const std::size_t packs = n / Width;
    for (std::size_t i = detail::thread_index(); i < packs; i += detail::thread_count()) {
        auto param = detail::load_pack<Width>(p + i * Width);
        const auto grad = detail::load_pack<Width>(g + i * Width);
        auto exp_avg = detail::load_pack<Width>(m + i * Width);
        auto exp_avg_sq = detail::load_pack<Width>(v + i * Width);
        for (int j = 0; j < Width; ++j) detail::adamw_element(param.v[j], grad.v[j], exp_avg.v[j], exp_avg_sq.v[j], k);
        detail::store_pack<Width>(p + i * Width, param);
        detail::store_pack<Width>(m + i * Width, exp_avg);
        detail::store_pack<Width>(v + i * Width, exp_avg_sq);
    }
    for (std::size_t i = packs * Width + detail::thread_index(); i < n; i += detail::thread_count())
        detail::adamw_element(p[i], g[i], m[i], v[i], k);
}

// One AdamW step over a flat block: p, m, v updated in place, bitwise as adamw_update<float> with
// the hyperparameters, lr, step and decay that k was made from (adamw_constants_for).
template <class Real>
void adamw(Real* p,        // (n)
           const Real* g,  // (n)
           Real* m,        // (n)
           Real* v,        // (n)
           std::size_t n, const adamw_constants<Real>& k, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (n == 0) return;
    if (detail::aligned16(p, g, m, v))
        adamw_kernel<Real, 4><<<detail::flat_blocks(n / 4), detail::flat_threads, 0, stream>>>(p, g, m, v, n, k);
    else
        adamw_kernel<Real, 1><<<detail::flat_blocks(n), detail::flat_threads, 0, stream>>>(p, g, m, v, n, k);
    check_launch("adamw");
}

// The float instances are compiled once, in strata's src/cuda/elementwise.cu (strata::cuda,
// strata_cuda_ops): a unit that includes this header links them instead of compiling the kernels
// again.
#define STRATA_CUDA_ADAMW_INSTANCES(prefix) \
    prefix void adamw<float>(float*, const float*, float*, float*, std::size_t, const adamw_constants<float>&, \
                             cudaStream_t);
STRATA_CUDA_ADAMW_INSTANCES(extern template)

}  // namespace strata::kernels::cuda
