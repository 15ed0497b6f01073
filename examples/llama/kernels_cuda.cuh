// The Llama block's own kernels on the GPU (sm_90), written outside strata: CUDA ports of
// kernels_cpu.hpp (the oracle), with its formulas and its expression order. Launchers take the
// stream last, return at once and never wait for the GPU; backward launchers accumulate (+=).
//
// Glossary: B batch, T time, C channels, NH heads, HS head size (C / NH), N number of elements.
//
// Deterministic, without atomics: every sum runs in an order fixed by the sizes alone, so the same
// inputs give the same bits on every run (what activation checkpointing relies on).
// - rmsnorm: one warp per row; the row statistics in double, as on the CPU, reduced by a fixed
//   butterfly. dweight: one block per tile of 32 channels, its 32 warps walking the rows in a fixed
//   stride, then one thread per channel adding the 32 partials in order. No scratch memory: the op
//   has no workspace to borrow from.
// - rope: one block per (b, t) row; the block computes the cos and sin of its position once per
//   pair (angles in double, as on the CPU) into shared memory, then rotates every q and k head.
//   Backward is the rotation by -angle, accumulated. rope_rotate (decoding) is the same rotation in
//   place, in any row layout, at positions from a given one.
// - swiglu: one thread per element.
// - expand_kv: one thread per element of the expanded (B, T, 3 NH HS) q|k|v; its backward one
//   thread per element of the grouped (B, T, (NH + 2 NKV) HS) gradient, summing its group's
//   NH / NKV heads in head order (the CPU's order).
//
// Precision: float only (a static_assert says so). Results differ from the CPU's in the last bits:
// CUDA's expf, pow, sin and cos are not glibc's, and nvcc contracts a * b + c into FMAs.
#pragma once

#include "kernels_cpu.hpp"  // cpu::detail::check_rope_heads (the same shape rule)

#include <strata/kernels/cuda/launch.cuh>  // strata::kernels::cuda::ceil_div, check_launch

#include <cuda_runtime.h>  // cudaStream_t, __shfl_xor_sync, expf, pow, sin, cos, sqrt

#include <cstddef>      // std::size_t
#include <string>       // std::to_string
#include <type_traits>  // std::is_same_v, std::type_identity_t

namespace llama::kernels::cuda {

using strata::kernels::cuda::ceil_div;
using strata::kernels::cuda::check_launch;

namespace detail {

// rmsnorm's row kernels: 8 warps per block, one row each.
inline constexpr unsigned rows_per_block = 8;
// rmsnorm's dweight kernel: a tile of 32 channels (a warp reads 128 contiguous bytes of a row) by
// 32 row phases. Llama widths (C >= 2048) give 64+ blocks of 1024 threads.
inline constexpr unsigned tile_channels = 32;
inline constexpr unsigned tile_row_phases = 32;
// rope's blocks and swiglu's.
inline constexpr unsigned rope_threads = 256;
inline constexpr unsigned flat_threads = 256;

// The sum over the 32 lanes of a warp by a butterfly: every lane gets the same bits, in an order
// that depends on nothing but the lane numbers.
template <class T>
__device__ inline T warp_sum(T value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

__device__ inline float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

}  // namespace detail

// ---- rmsnorm ----

template <class Real>
__global__ void rmsnorm_forward_kernel(Real* out,           // (B, T, C)
                                       Real* rstd,          // (B, T)
                                       const Real* inp,     // (B, T, C)
                                       const Real* weight,  // (C)
                                       std::size_t rows, std::size_t C, double eps) {
    const std::size_t row = static_cast<std::size_t>(blockIdx.x) * detail::rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;  // the whole warp leaves together
    const unsigned lane = threadIdx.x % 32;
    const Real* x = inp + row * C;
    double sum_sq = 0.0;
    for (std::size_t c = lane; c < C; c += 32) sum_sq += static_cast<double>(x[c]) * x[c];
    const Real r = static_cast<Real>(1.0 / sqrt(detail::warp_sum(sum_sq) / static_cast<double>(C) + eps));
    if (lane == 0) rstd[row] = r;
    Real* y = out + row * C;
    for (std::size_t c = lane; c < C; c += 32) y[c] = x[c] * r * weight[c];
}

// dinp += rstd * (weight * dout - n * mean(weight * dout * n)), n = x * rstd; the mean in double.
template <class Real>
__global__ void rmsnorm_backward_dinp_kernel(Real* dinp,          // (B, T, C)
                                             const Real* dout,    // (B, T, C)
                                             const Real* inp,     // (B, T, C)
                                             const Real* weight,  // (C)
                                             const Real* rstd,    // (B, T)
                                             std::size_t rows, std::size_t C) {
    const std::size_t row = static_cast<std::size_t>(blockIdx.x) * detail::rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;
    const unsigned lane = threadIdx.x % 32;
    const Real* x = inp + row * C;
    const Real* dy = dout + row * C;
    const Real r = rstd[row];
    double dot = 0.0;
    for (std::size_t c = lane; c < C; c += 32) {
        const Real n = x[c] * r;
        dot += static_cast<double>(weight[c]) * dy[c] * n;
    }
    const Real mean_dot = static_cast<Real>(detail::warp_sum(dot) / static_cast<double>(C));
    Real* dx = dinp + row * C;
    for (std::size_t c = lane; c < C; c += 32) dx[c] += r * (weight[c] * dy[c] - x[c] * r * mean_dot);
}

// dweight += sum over rows of dout * n. Grid: one block per tile of tile_channels channels; thread
// (x, y) adds rows y, y + tile_row_phases, ... of channel x, then thread (x, 0) adds the partials
// y = 0, 1, ... in that order.
template <class Real>
__global__ void __launch_bounds__(detail::tile_channels * detail::tile_row_phases)
    rmsnorm_backward_dweight_kernel(Real* dweight,     // (C)
                                    const Real* dout,  // (B, T, C)
                                    const Real* inp,   // (B, T, C)
                                    const Real* rstd,  // (B, T)
                                    std::size_t rows, std::size_t C) {
    __shared__ float partials[detail::tile_row_phases][detail::tile_channels];
    const std::size_t c = static_cast<std::size_t>(blockIdx.x) * detail::tile_channels + threadIdx.x;
    float sum = 0.0f;
    if (c < C) {
        for (std::size_t row = threadIdx.y; row < rows; row += detail::tile_row_phases)
            sum += dout[row * C + c] * (inp[row * C + c] * rstd[row]);
    }
    partials[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float total = 0.0f;
        for (unsigned y = 0; y < detail::tile_row_phases; ++y) total += partials[y][threadIdx.x];
        dweight[c] += total;
    }
}

// out = inp / sqrt(mean(inp^2) + eps) * weight, rstd = 1 / sqrt(mean(inp^2) + eps) per row.
template <class Real>
void rmsnorm_forward(Real* out,           // (B, T, C)
                     Real* rstd,          // (B, T)
                     const Real* inp,     // (B, T, C)
                     const Real* weight,  // (C)
                     std::size_t B, std::size_t T, std::size_t C, double eps, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the Llama CUDA kernels are instantiated for float only");
    const std::size_t rows = B * T;
    if (rows == 0 || C == 0) return;
    const unsigned blocks = ceil_div(rows, detail::rows_per_block);
    rmsnorm_forward_kernel<Real>
        <<<blocks, 32 * detail::rows_per_block, 0, stream>>>(out, rstd, inp, weight, rows, C, eps);
    check_launch("llama rmsnorm_forward");
}

// dinp += the input gradient (skipped when dinp is null); dweight += the gain's gradient.
template <class Real>
void rmsnorm_backward(std::type_identity_t<Real>* dinp,  // (B, T, C) or null
                      Real* dweight,                     // (C)
                      const Real* dout,                  // (B, T, C)
                      const Real* inp,                   // (B, T, C)
                      const Real* weight,                // (C)
                      const Real* rstd,                  // (B, T)
                      std::size_t B, std::size_t T, std::size_t C, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the Llama CUDA kernels are instantiated for float only");
    const std::size_t rows = B * T;
    if (rows == 0 || C == 0) return;
    if (dinp != nullptr) {
        const unsigned blocks = ceil_div(rows, detail::rows_per_block);
        rmsnorm_backward_dinp_kernel<Real>
            <<<blocks, 32 * detail::rows_per_block, 0, stream>>>(dinp, dout, inp, weight, rstd, rows, C);
        check_launch("llama rmsnorm_backward_dinp");
    }
    const dim3 tile(detail::tile_channels, detail::tile_row_phases);
    rmsnorm_backward_dweight_kernel<Real>
        <<<ceil_div(C, detail::tile_channels), tile, 0, stream>>>(dweight, dout, inp, rstd, rows, C);
    check_launch("llama rmsnorm_backward_dweight");
}

// ---- rope ----

// forward: out = R(t) qkv for q and k, out = qkv for v.
// backward: out += R(t)^T qkv = R(-t) qkv for q and k, out += qkv for v (qkv holds dout here).
enum class rope_pass { forward, backward };

// One block per (b, t) row. Dynamic shared memory: HS floats, the cos of the HS / 2 pairs, then
// their sin (negated for backward: -sin is exact, so the CPU's dy_lo cos + dy_hi sin is the same
// float expression as x_lo cos - x_hi (-sin)).
// Channels within a row are 32-bit (the launcher checks 3C fits): 64-bit division is slow on the GPU.
template <class Real, rope_pass Pass>
__global__ void rope_kernel(Real* out,       // (B, T, 3C)
                            const Real* in,  // (B, T, 3C)
                            std::size_t T, unsigned C, unsigned NH, rope_params rope) {
    extern __shared__ float rotation[];
    const std::size_t row = blockIdx.x, t = row % T;
    const unsigned HS = C / NH, half = HS / 2;
    float* cosines = rotation;
    float* sines = rotation + half;
    for (unsigned i = threadIdx.x; i < half; i += blockDim.x) {
        // the same angle as cpu::detail::rope_angle: t * f_i (rope_params::inv_freq) in double, then
        // cos and sin rounded once to float
        const double angle = static_cast<double>(t) * rope.inv_freq(i, HS);
        cosines[i] = static_cast<float>(cos(angle));
        const float s = static_cast<float>(sin(angle));
        sines[i] = Pass == rope_pass::forward ? s : -s;
    }
    __syncthreads();
    const Real* x = in + row * 3 * C;
    Real* y = out + row * 3 * C;
    // q heads then k heads: channels [0, 2C) hold 2 NH heads of `half` pairs each, C pairs in all;
    // pair p of head h = p / half rotates channels lo = h * HS + p % half and hi = lo + half.
    for (unsigned p = threadIdx.x; p < C; p += blockDim.x) {
        const unsigned i = p % half, lo = (p / half) * HS + i, hi = lo + half;
        const Real rotated_lo = x[lo] * cosines[i] - x[hi] * sines[i];
        const Real rotated_hi = x[hi] * cosines[i] + x[lo] * sines[i];
        if constexpr (Pass == rope_pass::forward) {
            y[lo] = rotated_lo;
            y[hi] = rotated_hi;
        } else {
            y[lo] += rotated_lo;
            y[hi] += rotated_hi;
        }
    }
    for (unsigned c = 2 * C + threadIdx.x; c < 3 * C; c += blockDim.x) {
        if constexpr (Pass == rope_pass::forward)
            y[c] = x[c];
        else
            y[c] += x[c];
    }
}

namespace detail {

template <rope_pass Pass, class Real>
void launch_rope(Real* out, const Real* in, std::size_t B, std::size_t T, std::size_t C, std::size_t NH,
                 const rope_params& theta, cudaStream_t stream, const char* name) {
    static_assert(std::is_same_v<Real, float>, "the Llama CUDA kernels are instantiated for float only");
    cpu::detail::check_rope_heads(C, NH);
    if (3 * C > 0xffffffffu)
        throw strata::error("rope (cuda): C=" + std::to_string(C) + " is beyond the kernel's 32-bit channel index",
                            "3C must stay below 2^32");
    const std::size_t rows = B * T;
    if (rows == 0 || C == 0) return;
    const unsigned blocks = static_cast<unsigned>(rows);      // one per (b, t)
    const std::size_t shared_bytes = C / NH * sizeof(float);  // cos and sin of HS / 2 pairs
    rope_kernel<Real, Pass><<<blocks, rope_threads, shared_bytes, stream>>>(
        out, in, T, static_cast<unsigned>(C), static_cast<unsigned>(NH), theta);
    check_launch(name);
}

}  // namespace detail

template <class Real>
void rope_forward(Real* out,        // (B, T, 3C) q and k rotated, v copied
                  const Real* qkv,  // (B, T, 3C)
                  std::size_t B, std::size_t T, std::size_t C, std::size_t NH, const rope_params& theta, cudaStream_t stream) {
    detail::launch_rope<rope_pass::forward>(out, qkv, B, T, C, NH, theta, stream, "llama rope_forward");
}

// dqkv += R^T dout for q and k, dv += dout.
template <class Real>
void rope_backward(Real* dqkv,        // (B, T, 3C)
                   const Real* dout,  // (B, T, 3C)
                   std::size_t B, std::size_t T, std::size_t C, std::size_t NH, const rope_params& theta, cudaStream_t stream) {
    detail::launch_rope<rope_pass::backward>(dqkv, dout, B, T, C, NH, theta, stream, "llama rope_backward");
}

// rope_rotate (decoding): one block per row, rotating heads [0, heads) of it in place at position
// first + row, with rope_kernel's cos, sin and products (so its bits at that position).
template <class Real>
__global__ void rope_rotate_kernel(Real* x,  // (rows, stride)
                                   std::size_t stride, unsigned heads, unsigned HS, std::size_t first,
                                   rope_params rope) {
    extern __shared__ float rotation[];
    const std::size_t row = blockIdx.x, t = first + row;
    const unsigned half = HS / 2;
    float* cosines = rotation;
    float* sines = rotation + half;
    for (unsigned i = threadIdx.x; i < half; i += blockDim.x) {
        const double angle = static_cast<double>(t) * rope.inv_freq(i, HS);
        cosines[i] = static_cast<float>(cos(angle));
        sines[i] = static_cast<float>(sin(angle));
    }
    __syncthreads();
    Real* y = x + row * stride;
    for (unsigned p = threadIdx.x; p < heads * half; p += blockDim.x) {
        const unsigned i = p % half, lo = (p / half) * HS + i, hi = lo + half;
        const Real a = y[lo], b = y[hi];
        y[lo] = a * cosines[i] - b * sines[i];
        y[hi] = b * cosines[i] + a * sines[i];
    }
}

// Heads [0, heads) of HS channels of `rows` rows `stride` apart, row r at position first + r,
// rotated in place (kernels_cpu.hpp's rope_rotate).
template <class Real>
void rope_rotate(Real* x,  // (rows, stride)
                 std::size_t rows, std::size_t stride, std::size_t heads, std::size_t HS, std::size_t first,
                 const rope_params& theta, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the Llama CUDA kernels are instantiated for float only");
    cpu::detail::check_rope_heads(heads * HS, heads);
    if (stride < heads * HS)
        throw strata::error("rope_rotate (cuda): rows of stride " + std::to_string(stride) + " hold fewer than the " +
                                std::to_string(heads * HS) + " channels to rotate",
                            "pass the row stride of the buffer the heads live in");
    if (heads * HS > 0xffffffffu || rows > 0x7fffffffu)
        throw strata::error("rope_rotate (cuda): " + std::to_string(rows) + " rows of " + std::to_string(heads * HS) +
                                " channels are beyond the kernel's 32-bit indices",
                            "rotate fewer rows per call");
    if (rows == 0) return;
    rope_rotate_kernel<Real><<<static_cast<unsigned>(rows), detail::rope_threads, HS * sizeof(float), stream>>>(
        x, stride, static_cast<unsigned>(heads), static_cast<unsigned>(HS), first, theta);
    check_launch("llama rope_rotate");
}

// ---- swiglu ----

template <class Real>
__global__ void swiglu_forward_kernel(Real* out,         // (N)
                                      const Real* gate,  // (N)
                                      const Real* up,    // (N)
                                      std::size_t N) {
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const Real g = gate[i];
    out[i] = g * detail::sigmoid(g) * up[i];
}

template <class Real>
__global__ void swiglu_backward_kernel(Real* dgate,       // (N)
                                       Real* dup,         // (N)
                                       const Real* dout,  // (N)
                                       const Real* gate,  // (N)
                                       const Real* up,    // (N)
                                       std::size_t N) {
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const Real g = gate[i];
    const Real s = detail::sigmoid(g);
    dup[i] += dout[i] * g * s;
    dgate[i] += dout[i] * up[i] * s * (Real(1) + g * (Real(1) - s));
}

// out = silu(gate) * up.
template <class Real>
void swiglu_forward(Real* out,         // (N)
                    const Real* gate,  // (N)
                    const Real* up,    // (N)
                    std::size_t N, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the Llama CUDA kernels are instantiated for float only");
    if (N == 0) return;
    swiglu_forward_kernel<Real>
        <<<ceil_div(N, detail::flat_threads), detail::flat_threads, 0, stream>>>(out, gate, up, N);
    check_launch("llama swiglu_forward");
}

// dup += dout * silu(gate); dgate += dout * up * silu'(gate).
template <class Real>
void swiglu_backward(Real* dgate,       // (N)
                     Real* dup,         // (N)
                     const Real* dout,  // (N)
                     const Real* gate,  // (N)
                     const Real* up,    // (N)
                     std::size_t N, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the Llama CUDA kernels are instantiated for float only");
    if (N == 0) return;
    swiglu_backward_kernel<Real>
        <<<ceil_div(N, detail::flat_threads), detail::flat_threads, 0, stream>>>(dgate, dup, dout, gate, up, N);
    check_launch("llama swiglu_backward");
}

// ---- expand_kv (grouped-query attention) ----

template <class Real>
__global__ void expand_kv_forward_kernel(Real* out,        // (B, T, 3 NH HS)
                                         const Real* qkv,  // (B, T, (NH + 2 NKV) HS)
                                         std::size_t rows, std::size_t NH, std::size_t NKV, std::size_t HS) {
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t A = NH * HS, KV = NKV * HS, out_row = 3 * A, in_row = A + 2 * KV;
    if (i >= rows * out_row) return;
    const std::size_t row = i / out_row, c = i % out_row;
    const Real* x = qkv + row * in_row;
    if (c < A) {
        out[i] = x[c];
        return;
    }
    const std::size_t part = (c - A) / A, h = (c - A - part * A) / HS, d = (c - A) % HS;
    out[i] = x[A + part * KV + (h / (NH / NKV)) * HS + d];
}

template <class Real>
__global__ void expand_kv_backward_kernel(Real* dqkv,        // (B, T, (NH + 2 NKV) HS)
                                          const Real* dout,  // (B, T, 3 NH HS)
                                          std::size_t rows, std::size_t NH, std::size_t NKV, std::size_t HS) {
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t A = NH * HS, KV = NKV * HS, out_row = 3 * A, in_row = A + 2 * KV, group = NH / NKV;
    if (i >= rows * in_row) return;
    const std::size_t row = i / in_row, c = i % in_row;
    const Real* dy = dout + row * out_row;
    if (c < A) {
        dqkv[i] += dy[c];
        return;
    }
    const std::size_t part = (c - A) / KV, g = (c - A - part * KV) / HS, d = (c - A) % HS;
    Real sum = Real(0);
    for (std::size_t h = g * group; h < (g + 1) * group; ++h) sum += dy[(1 + part) * A + h * HS + d];
    dqkv[i] += sum;
}

// out = q, then k and v with key/value head g copied to query heads [g NH/NKV, (g+1) NH/NKV).
template <class Real>
void expand_kv_forward(Real* out,        // (B, T, 3 NH HS)
                       const Real* qkv,  // (B, T, (NH + 2 NKV) HS)
                       std::size_t B, std::size_t T, std::size_t NH, std::size_t NKV, std::size_t HS,
                       cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the Llama CUDA kernels are instantiated for float only");
    cpu::detail::check_kv_heads(NH, NKV);
    const std::size_t N = B * T * 3 * NH * HS;
    if (N == 0) return;
    expand_kv_forward_kernel<Real>
        <<<ceil_div(N, detail::flat_threads), detail::flat_threads, 0, stream>>>(out, qkv, B * T, NH, NKV, HS);
    check_launch("llama expand_kv_forward");
}

// dqkv += the adjoint: dq += dout's q, each key/value head += the sum of its group's heads.
template <class Real>
void expand_kv_backward(Real* dqkv,        // (B, T, (NH + 2 NKV) HS)
                        const Real* dout,  // (B, T, 3 NH HS)
                        std::size_t B, std::size_t T, std::size_t NH, std::size_t NKV, std::size_t HS,
                        cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the Llama CUDA kernels are instantiated for float only");
    cpu::detail::check_kv_heads(NH, NKV);
    const std::size_t N = B * T * (NH + 2 * NKV) * HS;
    if (N == 0) return;
    expand_kv_backward_kernel<Real>
        <<<ceil_div(N, detail::flat_threads), detail::flat_threads, 0, stream>>>(dqkv, dout, B * T, NH, NKV, HS);
    check_launch("llama expand_kv_backward");
}

}  // namespace llama::kernels::cuda
