// Attention of new query rows against a KV cache on the GPU: the attention step of incremental
// decoding (generation), multi-head and grouped-query. A CUDA port of kernels/cpu/attention_decode.hpp
// (the oracle): same layout, same causal mask, same scores.
//
// Glossary: n new rows, pos the position of the first, NH query heads, NKV key/value heads (NKV
// divides NH), HS head size, A = NH HS, KV = NKV HS.
//
// Cache row t = k(t) | v(t), 2 KV channels; query row i (position pos + i) attends to positions
// 0 .. pos + i; query head h reads key/value head h / (NH / NKV); scores q.k / sqrt(HS).
//
// Generation is latency-bound (one row per step), so the kernel is plain: one block per (head,
// row). The block walks the keys in chunks of `threads`, one key per thread: the thread's product
// q.k (q in shared memory), the chunk's maximum and sum of exponentials by a fixed butterfly and
// a fixed order over the warps, and a running maximum, sum and output (online softmax, as flash
// attention) rescaled per chunk; each output channel is one thread's, summed over the chunk's keys
// in key order. No atomics, no workspace: the same inputs give the same bits. Float only.
#pragma once

#include <strata/core/error.hpp>           // strata::error
#include <strata/kernels/cuda/launch.cuh>  // check_launch

#include <cuda_runtime.h>  // cudaStream_t, __shfl_xor_sync, expf, fmaxf

#include <cmath>        // std::sqrt
#include <cstddef>      // std::size_t
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v

namespace strata::kernels::cuda {

namespace decode_detail {

constexpr unsigned threads = 128;  // keys per chunk, one per thread
constexpr unsigned warps = threads / 32;

// The maximum (max = true) or sum of one value per thread over the block, in an order fixed by
// the thread numbers; every thread gets the same bits. `partial` holds a value per warp.
template <bool Max>
__device__ inline float block_reduce(float value, float* partial) {
    for (int offset = 16; offset > 0; offset /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, value, offset);
        value = Max ? fmaxf(value, other) : value + other;
    }
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = value;
    __syncthreads();
    float total = partial[0];
    for (unsigned w = 1; w < warps; ++w) total = Max ? fmaxf(total, partial[w]) : total + partial[w];
    __syncthreads();  // partial is reused by the next reduction
    return total;
}

// Grid (NH, n): block (h, i) computes head h of query row i. Dynamic shared memory: the query
// head (HS), the output accumulator (HS), the chunk's probabilities (threads).
template <class Real>
__global__ void __launch_bounds__(threads)
    attention_decode_kernel(Real* out,             // (n, A)
                            const Real* q,         // (n, q_stride)
                            std::size_t q_stride,  //
                            const Real* kv,        // (pos + n, 2 KV)
                            std::size_t pos, unsigned group, unsigned HS, unsigned KV, unsigned A, float scale) {
    extern __shared__ float shared[];
    float* query = shared;
    float* acc = query + HS;
    float* p = acc + HS;
    __shared__ float partial[warps];
    const unsigned h = blockIdx.x;
    const std::size_t i = blockIdx.y, T = pos + i + 1, row = 2 * static_cast<std::size_t>(KV);
    const Real* keys = kv + (h / group) * HS;
    const Real* values = keys + KV;
    for (unsigned d = threadIdx.x; d < HS; d += blockDim.x) {
        query[d] = q[i * q_stride + h * HS + d];
        acc[d] = 0.0f;
    }
    __syncthreads();
    float m = -INFINITY, l = 0.0f;  // running maximum of the products, running sum of exponentials
    for (std::size_t u0 = 0; u0 < T; u0 += threads) {
        const std::size_t u = u0 + threadIdx.x;
        float product = -INFINITY;
        if (u < T) {
            const Real* key = keys + u * row;
            float dot = 0.0f;
            for (unsigned d = 0; d < HS; ++d) dot += query[d] * key[d];
            product = dot;
        }
        const float m_new = fmaxf(m, block_reduce<true>(product, partial));  // finite: the chunk has a key
        const float e = u < T ? expf((product - m_new) * scale) : 0.0f;
        const float correction = expf((m - m_new) * scale);  // 0 for the first chunk (m = -inf)
        p[threadIdx.x] = e;
        l = l * correction + block_reduce<false>(e, partial);  // its __syncthreads publish p
        const unsigned count = T - u0 < threads ? static_cast<unsigned>(T - u0) : threads;
        for (unsigned d = threadIdx.x; d < HS; d += blockDim.x) {
            float a = acc[d] * correction;
            for (unsigned j = 0; j < count; ++j) a += p[j] * values[(u0 + j) * row + d];
            acc[d] = a;
        }
        m = m_new;
        __syncthreads();  // p is rewritten by the next chunk
    }
    for (unsigned d = threadIdx.x; d < HS; d += blockDim.x) out[i * A + h * HS + d] = acc[d] / l;
}

}  // namespace decode_detail

template <class Real>
void attention_decode(Real* out,             // (n, A)
                      const Real* q,         // (n, q_stride): query head h = channels [h HS, (h+1) HS)
                      std::size_t q_stride,  // elements from one query row to the next (>= A)
                      const Real* kv,        // (pos + n, 2 KV): the cache, the new rows stored
                      std::size_t pos, std::size_t n, std::size_t NH, std::size_t NKV, std::size_t HS,
                      cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "attention_decode (cuda) is instantiated for float only");
    if (NH == 0 || NKV == 0 || HS == 0 || NH % NKV != 0)
        throw error("attention_decode (cuda): NH=" + std::to_string(NH) + " query heads, NKV=" + std::to_string(NKV) +
                        " key/value heads of HS=" + std::to_string(HS) + " channels",
                    "the key/value heads must divide the query heads (NKV = NH: multi-head attention)");
    if (q_stride < NH * HS)
        throw error("attention_decode (cuda): query rows of stride " + std::to_string(q_stride) +
                        " hold fewer than the " + std::to_string(NH * HS) + " channels of the heads",
                    "pass the row stride of the buffer the queries live in");
    if (n > 65535 || NH > 0x7fffffffu || 2 * NKV * HS > 0xffffffffu || NH * HS > 0xffffffffu)
        throw error("attention_decode (cuda): n=" + std::to_string(n) + " rows of NH=" + std::to_string(NH) +
                        " heads of HS=" + std::to_string(HS) + " exceed the kernel's grid or 32-bit channel index",
                    "decode at most 65535 rows per call");
    if (n == 0) return;
    const std::size_t shared_bytes = (2 * HS + decode_detail::threads) * sizeof(float);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(HS)));
    const dim3 grid(static_cast<unsigned>(NH), static_cast<unsigned>(n));
    decode_detail::attention_decode_kernel<Real><<<grid, decode_detail::threads, shared_bytes, stream>>>(
        out, q, q_stride, kv, pos, static_cast<unsigned>(NH / NKV), static_cast<unsigned>(HS),
        static_cast<unsigned>(NKV * HS), static_cast<unsigned>(NH * HS), scale);
    check_launch("attention_decode");
}

// The float instances are compiled once, in strata's src/cuda/attention_forward.cu (strata::cuda,
// strata_cuda_ops): a unit that includes this header links them instead of compiling the kernels
// again.
#define STRATA_CUDA_ATTENTION_DECODE_INSTANCES(prefix) \
    prefix void attention_decode<float>(float*, const float*, std::size_t, const float*, std::size_t, \
                                        std::size_t, std::size_t, std::size_t, std::size_t, cudaStream_t);
STRATA_CUDA_ATTENTION_DECODE_INSTANCES(extern template)

}  // namespace strata::kernels::cuda
