// GELU on the GPU, the tanh approximation of GPT-2 ("gelu_new"); a CUDA port of kernels/cpu/gelu.hpp
// (the oracle), with its constants and the same expression order:
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//
// Glossary: N number of elements (B*T*4C in the GPT-2 MLP).
//
// tanhf is CUDA's (max 2 ulp), not glibc's, and nvcc contracts a*b + c into FMAs: results differ
// from the CPU's in the last bits, not more.
#pragma once

#include <strata/kernels/cpu/gelu.hpp>          // detail::gelu_cubic, detail::gelu_sqrt_2_over_pi
#include <strata/kernels/cuda/elementwise.cuh>  // detail::aligned16, load_pack, store_pack, flat grids
#include <strata/kernels/cuda/launch.cuh>       // check_launch

#include <cuda_runtime.h>  // cudaStream_t, tanhf

#include <cstddef>      // std::size_t
#include <type_traits>  // std::is_same_v

namespace strata::kernels::cuda {

namespace detail {

inline constexpr float gelu_s = static_cast<float>(cpu::detail::gelu_sqrt_2_over_pi);
inline constexpr float gelu_a = static_cast<float>(cpu::detail::gelu_cubic);

// tanh(sqrt(2/pi) (x + 0.044715 x^3)), the same expression in forward and backward.
__device__ inline float gelu_tanh(float x) { return tanhf(gelu_s * (x + gelu_a * (x * x * x))); }

__device__ inline float gelu(float x) { return 0.5f * x * (1.0f + gelu_tanh(x)); }

// gelu'(x): sech^2 = 1 - tanh^2 (unlike 1/cosh^2 it cannot overflow for large |x|).
__device__ inline float gelu_grad(float x) {
    const float th = gelu_tanh(x);
    const float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * gelu_s * (1.0f + 3.0f * gelu_a * x * x);
}

}  // namespace detail

template <class Real, int Width>
__global__ void gelu_forward_kernel(Real* out,        // (N)
                                    const Real* inp,  // (N)
                                    std::size_t N) {
    const std::size_t packs = N / Width;
    for (std::size_t i = detail::thread_index(); i < packs; i += detail::thread_count()) {
        auto p = detail::load_pack<Width>(inp + i * Width);
        for (int j = 0; j < Width; ++j) p.v[j] = detail::gelu(p.v[j]);
        detail::store_pack<Width>(out + i * Width, p);
    }
    for (std::size_t i = packs * Width + detail::thread_index(); i < N; i += detail::thread_count())
        out[i] = detail::gelu(inp[i]);
}

template <class Real, int Width>
__global__ void gelu_backward_kernel(Real* dinp,        // (N)
                                     const Real* dout,  // (N)
                                     const Real* inp,   // (N)
                                     std::size_t N) {
    const std::size_t packs = N / Width;
    for (std::size_t i = detail::thread_index(); i < packs; i += detail::thread_count()) {
        auto d = detail::load_pack<Width>(dinp + i * Width);
        const auto dy = detail::load_pack<Width>(dout + i * Width);
        const auto x = detail::load_pack<Width>(inp + i * Width);
        for (int j = 0; j < Width; ++j) d.v[j] += detail::gelu_grad(x.v[j]) * dy.v[j];
        detail::store_pack<Width>(dinp + i * Width, d);
    }
    for (std::size_t i = packs * Width + detail::thread_index(); i < N; i += detail::thread_count())
        dinp[i] += detail::gelu_grad(inp[i]) * dout[i];
}

// pre += bias (when bias is not null), out = gelu(pre): the bias of the GEMM before the GELU and
// the GELU in one pass; grid detail::row_grid(rows, OC / Width).
template <class Real, int Width>
__global__ void bias_gelu_forward_kernel(Real* pre,         // (rows, OC)
                                         Real* out,         // (rows, OC)
                                         const Real* bias,  // (OC) or null
                                         std::size_t rows, std::size_t OC) {
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= OC / Width) return;
    detail::pack<Width> b{};
    if (bias) b = detail::load_pack<Width>(bias + i * Width);
    for (std::size_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const std::size_t at = r * OC + i * Width;
        auto p = detail::load_pack<Width>(pre + at);
        if (bias) {
            for (int j = 0; j < Width; ++j) p.v[j] += b.v[j];
            detail::store_pack<Width>(pre + at, p);
        }
        for (int j = 0; j < Width; ++j) p.v[j] = detail::gelu(p.v[j]);
        detail::store_pack<Width>(out + at, p);
    }
}

// dinp = gelu'(inp) * dout (written), dbias += the column sums of that dinp: the GELU's backward
// and the bias gradient of the linear layer before it in one pass; one block per column tile
// (grid.x = ceil(OC / column_tile_width)), rows in column_sum_accumulate's order and tree.
template <class Real>
__global__ void __launch_bounds__(detail::column_tile_width* detail::column_tile_rows)
    gelu_backward_bias_kernel(Real* dinp,        // (rows, OC)
                              Real* dbias,       // (OC)
                              const Real* dout,  // (rows, OC)
                              const Real* inp,   // (rows, OC)
                              std::size_t rows, std::size_t OC) {
    __shared__ float partials[detail::column_tile_rows * detail::column_tile_width];
    const std::size_t c = static_cast<std::size_t>(blockIdx.x) * detail::column_tile_width + threadIdx.x;
    float sum = 0.0f;
    if (c < OC) {
#pragma unroll 4
        for (std::size_t r = threadIdx.y; r < rows; r += detail::column_tile_rows) {
            const std::size_t at = r * OC + c;
            // + 0.0f: the bits of gelu_backward adding into a zeroed buffer, -0 included.
            const float d = detail::gelu_grad(inp[at]) * dout[at] + 0.0f;
            dinp[at] = d;
            sum += d;
        }
    }
    sum = detail::column_tile_sum(sum, partials);
    if (threadIdx.y == 0 && c < OC) dbias[c] += sum;
}

template <class Real>
void gelu_forward(Real* out,        // (N)
                  const Real* inp,  // (N)
                  std::size_t N, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (N == 0) return;
    if (detail::aligned16(out, inp))
        gelu_forward_kernel<Real, 4><<<detail::flat_blocks(N / 4), detail::flat_threads, 0, stream>>>(out, inp, N);
    else
        gelu_forward_kernel<Real, 1><<<detail::flat_blocks(N), detail::flat_threads, 0, stream>>>(out, inp, N);
    check_launch("gelu_forward");
}

// pre (rows, OC) += bias (OC) on every row, then out = gelu(pre): the bits of add_bias then
// gelu_forward (the same float add, the same gelu of the stored sum), in one pass instead of two
// (pre is read once, not twice). bias may be null (out = gelu(pre), pre unchanged). out must not
// overlap pre.
template <class Real>
void bias_gelu_forward(Real* pre,         // (rows, OC)
                       Real* out,         // (rows, OC)
                       const Real* bias,  // (OC) or null
                       std::size_t rows, std::size_t OC, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (rows == 0 || OC == 0) return;
    if (OC % 4 == 0 && detail::aligned16(pre, out, bias))
        bias_gelu_forward_kernel<Real, 4>
            <<<detail::row_grid(rows, OC / 4), detail::flat_threads, 0, stream>>>(pre, out, bias, rows, OC);
    else
        bias_gelu_forward_kernel<Real, 1>
            <<<detail::row_grid(rows, OC), detail::flat_threads, 0, stream>>>(pre, out, bias, rows, OC);
    check_launch("bias_gelu_forward");
}

// dinp += gelu'(inp) * dout.
template <class Real>
void gelu_backward(Real* dinp,        // (N)
                   const Real* dout,  // (N)
                   const Real* inp,   // (N)
                   std::size_t N, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (N == 0) return;
    if (detail::aligned16(dinp, dout, inp))
        gelu_backward_kernel<Real, 4>
            <<<detail::flat_blocks(N / 4), detail::flat_threads, 0, stream>>>(dinp, dout, inp, N);
    else
        gelu_backward_kernel<Real, 1><<<detail::flat_blocks(N), detail::flat_threads, 0, stream>>>(dinp, dout, inp, N);
    check_launch("gelu_backward");
}

// dinp = gelu'(inp) * dout, overwriting dinp (no zero-fill first), and dbias += the column sums of
// that dinp: the MLP's GELU backward and its first linear layer's bias gradient in one pass, the
// bits of zero, gelu_backward and column_sum_accumulate one after the other (matmul_backward's
// dbias), without reading dinp back.
template <class Real>
void gelu_backward_bias(Real* dinp,        // (rows, OC)
                        Real* dbias,       // (OC)
                        const Real* dout,  // (rows, OC)
                        const Real* inp,   // (rows, OC)
                        std::size_t rows, std::size_t OC, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (OC == 0) return;
    const dim3 block(detail::column_tile_width, detail::column_tile_rows);
    gelu_backward_bias_kernel<Real>
        <<<ceil_div(OC, detail::column_tile_width), block, 0, stream>>>(dinp, dbias, dout, inp, rows, OC);
    check_launch("gelu_backward_bias");
}

// The float instances are compiled once, in strata's src/cuda/elementwise.cu (strata::cuda,
// strata_cuda_ops): a unit that includes this header links them instead of compiling the kernels
// again.
#define STRATA_CUDA_GELU_INSTANCES(prefix) \
    prefix void gelu_forward<float>(float*, const float*, std::size_t, cudaStream_t); \
    prefix void bias_gelu_forward<float>(float*, float*, const float*, std::size_t, std::size_t, cudaStream_t); \
    prefix void gelu_backward<float>(float*, const float*, const float*, std::size_t, cudaStream_t); \
    prefix void gelu_backward_bias<float>(float*, float*, const float*, const float*, std::size_t, std::size_t, \
                                          cudaStream_t);
STRATA_CUDA_GELU_INSTANCES(extern template)

}  // namespace strata::kernels::cuda
