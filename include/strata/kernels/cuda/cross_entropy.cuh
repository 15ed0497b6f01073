// Softmax cross-entropy of next-token logits against target ids on the GPU; a CUDA port of
// kernels/cpu/cross_entropy.hpp (the oracle), with its semantics: lse (B, T) is saved by forward and
// used by backward, targets equal to ignore_index (-100) count nothing.
//
// Glossary: B batch, T time, V vocab.
//
// One block per row. Forward reads the row once with an online softmax: each thread keeps its
// running maximum and its sum of exp(z - max) in double, rescaling the sum when the maximum grows;
// the block then combines the threads' (max, sum) pairs in a fixed tree, so lse is the same bits
// on every run. Rows are read with coalesced scalar loads: V (50257 for GPT-2) is rarely a multiple
// of 4, so rows are not 16-byte aligned.
//
// Differences from the CPU, on purpose: the GPU cannot throw, so a target outside [0, V) (other
// than ignore_index) gets a NaN loss in forward, where the trainer's loss shows it, and no gradient
// in backward; nothing outside the logits row is ever read. The trainers check targets on the host
// before they reach the GPU. forward does not return the count of targets: the host knows it.
#pragma once

#include <strata/kernels/cpu/cross_entropy.hpp>  // ignore_index
#include <strata/kernels/cuda/elementwise.cuh>   // detail::warp_sum, warp_max
#include <strata/kernels/cuda/launch.cuh>        // check_launch

#include <cuda_runtime.h>  // cudaStream_t, expf, exp, log, __fmul_rn, __fadd_rn, __fsub_rn

#include <cmath>        // INFINITY, NAN
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int32_t
#include <type_traits>  // std::is_same_v, std::type_identity_t

namespace strata::kernels::cuda {

namespace detail {

inline constexpr unsigned cross_entropy_threads = 512;
// Elements a thread loads before it uses the first of them: with one load in flight per thread, a
// row pass is bound by memory latency (1.6 TB/s on the H200), not bandwidth.
inline constexpr unsigned cross_entropy_unroll = 8;

// True when the target counts: neither ignore_index nor outside [0, V).
__device__ inline bool counted_target(std::int32_t target, std::size_t V) {
    return target != cpu::ignore_index && target >= 0 && static_cast<std::size_t>(target) < V;
}

// The block's maximum and the sum of the threads' sums rescaled to it, both reduced in a fixed
// order (warp butterflies, then warp 0 over the warps' results). Every thread gets both.
// shared_max and shared_sum hold one value per warp.
__device__ inline void block_max_and_sum(float& max_value, double& sum, float* shared_max, double* shared_sum) {
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    float block_max = warp_max(max_value);
    if (lane == 0) shared_max[warp] = block_max;
    __syncthreads();
    block_max = warp_max(lane < warps ? shared_max[lane] : -INFINITY);
    // A thread that saw no element (or only -inf) contributes nothing: exp(-inf) = 0 would do,
    // but -inf - -inf is NaN when the whole row is -inf.
    const double mine = max_value == -INFINITY ? 0.0 : sum * exp(static_cast<double>(max_value) - block_max);
    const double warp_total = warp_sum(mine);
    if (lane == 0) shared_sum[warp] = warp_total;
    __syncthreads();
    sum = warp_sum(lane < warps ? shared_sum[lane] : 0.0);
    max_value = block_max;
}

// The row's log-sum-exp, the same in every thread: one online-softmax pass over z[0, V) (a thread's
// elements are i = threadIdx.x + k blockDim.x in increasing k; its sum of exp(z - max) in double as
// on the CPU, rescaled when its maximum grows), then block_max_and_sum. The forward and the fused
// forward-backward both run it, so their lse are the same bits.
template <class Real>
__device__ inline float row_log_sum_exp(const Real* z, std::size_t V, float* shared_max, double* shared_sum) {
    constexpr unsigned unroll = cross_entropy_unroll;
    float max_logit = -INFINITY;
    double sum = 0.0;
    for (std::size_t base = threadIdx.x; base < V; base += unroll * blockDim.x) {
        float x[unroll];
#pragma unroll
        for (unsigned u = 0; u < unroll; ++u) {  // every load of the group before the first use
            const std::size_t i = base + u * blockDim.x;
            x[u] = i < V ? z[i] : 0.0f;
        }
#pragma unroll
        for (unsigned u = 0; u < unroll; ++u) {
            if (base + u * blockDim.x >= V) break;
            if (x[u] > max_logit) {
                sum *= exp(static_cast<double>(max_logit) - x[u]);  // 0 * exp(-inf) = 0 at the first element
                max_logit = x[u];
            }
            sum += expf(x[u] - max_logit);
        }
    }
    block_max_and_sum(max_logit, sum, shared_max, shared_sum);
    return static_cast<float>(static_cast<double>(max_logit) + log(sum));
}

// A row's loss: lse - z[target], 0 for ignore_index, NaN for a target outside [0, V).
template <class Real>
__device__ inline float row_loss(float row_lse, const Real* z, std::int32_t target, std::size_t V) {
    return target == cpu::ignore_index ? 0.0f : counted_target(target, V) ? row_lse - z[target] : NAN;
}

}  // namespace detail

// losses[row] = lse[row] - logits[row, target], 0 for ignore_index, NaN for an out-of-range target.
template <class Real>
__global__ void cross_entropy_forward_kernel(Real* losses,                 // (B, T)
                                             Real* lse,                    // (B, T)
                                             const Real* logits,           // (B, T, V)
                                             const std::int32_t* targets,  // (B, T)
                                             std::size_t V) {
    __shared__ float shared_max[32];
    __shared__ double shared_sum[32];
    const std::size_t row = blockIdx.x;
    const Real* z = logits + row * V;
    const float row_lse = detail::row_log_sum_exp(z, V, shared_max, shared_sum);
    if (threadIdx.x == 0) {
        lse[row] = row_lse;
        losses[row] = detail::row_loss(row_lse, z, targets[row], V);
    }
}

// dlogits += scale * (softmax - onehot(target)) on counted rows. The multiply and the add are
// rounded separately, as on the CPU, and the target's -scale comes after its softmax term.
template <class Real>
__global__ void cross_entropy_backward_kernel(Real* dlogits,                // (B, T, V)
                                              const Real* lse,              // (B, T)
                                              const Real* logits,           // (B, T, V)
                                              const std::int32_t* targets,  // (B, T)
                                              Real scale, std::size_t V) {
    const std::size_t row = blockIdx.x;
    const std::int32_t target = targets[row];
    if (!detail::counted_target(target, V)) return;  // the whole block: ignored or invalid row
    const Real* z = logits + row * V;
    Real* dz = dlogits + row * V;
    const float row_lse = lse[row];
    constexpr unsigned unroll = detail::cross_entropy_unroll;
    for (std::size_t base = threadIdx.x; base < V; base += unroll * blockDim.x) {
        float logit[unroll], grad[unroll];
#pragma unroll
        for (unsigned u = 0; u < unroll; ++u) {  // every load of the group before any store
            const std::size_t i = base + u * blockDim.x;
            logit[u] = i < V ? z[i] : 0.0f;
            grad[u] = i < V ? dz[i] : 0.0f;
        }
#pragma unroll
        for (unsigned u = 0; u < unroll; ++u) {
            const std::size_t i = base + u * blockDim.x;
            if (i >= V) break;
            float d = __fadd_rn(grad[u], __fmul_rn(scale, expf(logit[u] - row_lse)));
            if (i == static_cast<std::size_t>(target)) d = __fsub_rn(d, scale);
            dz[i] = d;
        }
    }
}

// forward and backward of one row in one block: losses and lse as cross_entropy_forward_kernel
// (the same code), then dlogits = scale * (softmax - onehot(target)) written over the whole row
// (0 on ignored and invalid rows), the bits of a zero-filled dlogits and
// cross_entropy_backward_kernel. The second pass re-reads the row, from L2 where it still is,
// instead of a forward pass, a zero fill and a backward pass that reads dlogits back.
template <class Real>
__global__ void cross_entropy_forward_backward_kernel(Real* losses,                 // (B, T)
                                                      Real* lse,                    // (B, T)
                                                      Real* dlogits,                // (B, T, V)
                                                      const Real* logits,           // (B, T, V)
                                                      const std::int32_t* targets,  // (B, T)
                                                      Real scale, std::size_t V) {
    __shared__ float shared_max[32];
    __shared__ double shared_sum[32];
    const std::size_t row = blockIdx.x;
    const Real* z = logits + row * V;
    const float row_lse = detail::row_log_sum_exp(z, V, shared_max, shared_sum);  // every thread's
    const std::int32_t target = targets[row];
    if (threadIdx.x == 0) {
        lse[row] = row_lse;
        losses[row] = detail::row_loss(row_lse, z, target, V);
    }
    constexpr unsigned unroll = detail::cross_entropy_unroll;
    const bool counted = detail::counted_target(target, V);
    Real* dz = dlogits + row * V;
    for (std::size_t base = threadIdx.x; base < V; base += unroll * blockDim.x) {
        float logit[unroll];
#pragma unroll
        for (unsigned u = 0; u < unroll; ++u) {
            const std::size_t i = base + u * blockDim.x;
            logit[u] = i < V && counted ? z[i] : 0.0f;
        }
#pragma unroll
        for (unsigned u = 0; u < unroll; ++u) {
            const std::size_t i = base + u * blockDim.x;
            if (i >= V) break;
            float d = 0.0f;
            if (counted) {
                d = __fadd_rn(0.0f, __fmul_rn(scale, expf(logit[u] - row_lse)));
                if (i == static_cast<std::size_t>(target)) d = __fsub_rn(d, scale);
            }
            dz[i] = d;
        }
    }
}

// losses and lse of every row; unlike the CPU kernel it returns nothing (the host counts targets).
template <class Real>
void cross_entropy_forward(Real* losses,                 // (B, T)
                           Real* lse,                    // (B, T)
                           const Real* logits,           // (B, T, V)
                           const std::int32_t* targets,  // (B, T)
                           std::size_t B, std::size_t T, std::size_t V, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (B * T == 0) return;
    if (V == 0) throw error("cross_entropy_forward: V = 0", "the vocabulary needs at least one token");
    cross_entropy_forward_kernel<Real>
        <<<static_cast<unsigned>(B * T), detail::cross_entropy_threads, 0, stream>>>(losses, lse, logits, targets, V);
    check_launch("cross_entropy_forward");
}

// dlogits += scale * (softmax(logits) - onehot(target)) on counted rows; ignored and invalid rows
// get nothing. scale does not take part in deducing Real (a double converts, as on the CPU).
template <class Real>
void cross_entropy_backward(Real* dlogits,                // (B, T, V)
                            const Real* lse,              // (B, T)
                            const Real* logits,           // (B, T, V)
                            const std::int32_t* targets,  // (B, T)
                            std::type_identity_t<Real> scale, std::size_t B, std::size_t T, std::size_t V,
                            cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (B * T == 0 || V == 0) return;
    cross_entropy_backward_kernel<Real><<<static_cast<unsigned>(B * T), detail::cross_entropy_threads, 0, stream>>>(
        dlogits, lse, logits, targets, scale, V);
    check_launch("cross_entropy_backward");
}

// losses and lse of every row, and dlogits = scale * (softmax(logits) - onehot(target)) written
// (not accumulated: dlogits needs no zero fill; 0 on ignored and invalid rows): the training step's
// cross_entropy_forward, zero and cross_entropy_backward in one pass over the rows, their bits.
// dlogits must not overlap logits.
template <class Real>
void cross_entropy_forward_backward(Real* losses,                 // (B, T)
                                    Real* lse,                    // (B, T)
                                    Real* dlogits,                // (B, T, V)
                                    const Real* logits,           // (B, T, V)
                                    const std::int32_t* targets,  // (B, T)
                                    std::type_identity_t<Real> scale, std::size_t B, std::size_t T, std::size_t V,
                                    cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (B * T == 0) return;
    if (V == 0) throw error("cross_entropy_forward_backward: V = 0", "the vocabulary needs at least one token");
    cross_entropy_forward_backward_kernel<Real>
        <<<static_cast<unsigned>(B * T), detail::cross_entropy_threads, 0, stream>>>(losses, lse, dlogits, logits,
                                                                                      targets, scale, V);
    check_launch("cross_entropy_forward_backward");
}

// The float instances are compiled once, in strata's src/cuda/rowwise.cu (strata::cuda,
// strata_cuda_ops): a unit that includes this header links them instead of compiling the kernels
// again.
#define STRATA_CUDA_CROSS_ENTROPY_INSTANCES(prefix) \
    prefix void cross_entropy_forward<float>(float*, float*, const float*, const std::int32_t*, std::size_t, \
                                             std::size_t, std::size_t, cudaStream_t); \
    prefix void cross_entropy_backward<float>(float*, const float*, const float*, const std::int32_t*, float, \
                                              std::size_t, std::size_t, std::size_t, cudaStream_t); \
    prefix void cross_entropy_forward_backward<float>(float*, float*, float*, const float*, const std::int32_t*, \
                                                      float, std::size_t, std::size_t, std::size_t, cudaStream_t);
STRATA_CUDA_CROSS_ENTROPY_INSTANCES(extern template)

}  // namespace strata::kernels::cuda
