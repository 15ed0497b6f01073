// Layer normalization over channels on the GPU (torch.nn.LayerNorm of GPT-2: eps = 1e-5, biased
// variance); a CUDA port of kernels/cpu/layernorm.hpp (the oracle), with the residual add that
// precedes it in a pre-LayerNorm block fused in front (residual_layernorm_forward).
//
// Glossary: B batch, T time, C channels.
//
// As on the CPU, the row statistics are taken in double, in two passes (mean, then the squared
// deviations from it), and the output is normalized with the saved float mean and rstd, so backward
// differentiates exactly what forward computed. One warp per row: its lanes read the row with
// float4 loads when C % 4 == 0 and the pointers are 16-byte aligned (a row of 768 or 1600 floats
// stays in L1 between the passes), and reduce with a fixed butterfly.
//
// Backward is two kernels, both deterministic without atomics or scratch: one warp per row for
// dinp; one block per tile of 8 channels for dweight and dbias, its threads walking the rows in a
// fixed order and adding their partials in a fixed shared-memory tree (detail::column_tile_sum).
#pragma once

#include <strata/kernels/cpu/layernorm.hpp>     // layernorm_eps
#include <strata/kernels/cuda/elementwise.cuh>  // detail::aligned16, load_pack, store_pack, warp_sum, column_tile_sum
#include <strata/kernels/cuda/launch.cuh>       // ceil_div, check_launch

#include <cuda_runtime.h>  // cudaStream_t, sqrt

#include <cstddef>      // std::size_t
#include <type_traits>  // std::is_same_v

namespace strata::kernels::cuda {

namespace detail {

// Rows per block of the row kernels: 8 warps of one row each.
inline constexpr unsigned layernorm_rows_per_block = 8;

}  // namespace detail

// One warp per row; Width 4 reads a row as float4s. Residual: the row is first formed as
// res = inp + inp_b and stored (the residual add fused in front: residual_layernorm_forward); the
// passes then read it back from res, which this warp alone wrote (L1/L2, not another HBM pass
// over two inputs). The sums run in the same order either way, so the fused kernel gives the bits
// of residual_forward followed by layernorm_forward.
template <class Real, int Width, bool Residual>
__global__ void layernorm_forward_kernel(Real* out,           // (B, T, C)
                                         Real* mean,          // (B, T)
                                         Real* rstd,          // (B, T)
                                         Real* res,           // (B, T, C) when Residual, else unused
                                         const Real* inp,     // (B, T, C)
                                         const Real* inp_b,   // (B, T, C) when Residual, else unused
                                         const Real* weight,  // (C)
                                         const Real* bias,    // (C)
                                         std::size_t rows, std::size_t C) {
    const std::size_t row = static_cast<std::size_t>(blockIdx.x) * detail::layernorm_rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;  // the whole warp leaves together
    const unsigned lane = threadIdx.x % 32;
    const std::size_t packs = C / Width;
    const Real* x = Residual ? res + row * C : inp + row * C;

    double sum = 0.0;
    for (std::size_t i = lane; i < packs; i += 32) {
        auto p = detail::load_pack<Width>(inp + row * C + i * Width);
        if constexpr (Residual) {
            const auto q = detail::load_pack<Width>(inp_b + row * C + i * Width);
            for (int j = 0; j < Width; ++j) p.v[j] += q.v[j];
            detail::store_pack<Width>(res + row * C + i * Width, p);
        }
        for (int j = 0; j < Width; ++j) sum += p.v[j];
    }
    const double m = detail::warp_sum(sum) / static_cast<double>(C);
    // Two passes, not E[x^2] - E[x]^2: the latter cancels badly when |mean| >> std.
    double sum_sq = 0.0;
    for (std::size_t i = lane; i < packs; i += 32) {
        const auto p = detail::load_pack<Width>(x + i * Width);
        for (int j = 0; j < Width; ++j) {
            const double d = p.v[j] - m;
            sum_sq += d * d;
        }
    }
    const double var = detail::warp_sum(sum_sq) / static_cast<double>(C);
    const float row_mean = static_cast<float>(m);
    const float row_rstd = static_cast<float>(1.0 / sqrt(var + cpu::layernorm_eps));
    if (lane == 0) {
        mean[row] = row_mean;
        rstd[row] = row_rstd;
    }
    Real* y = out + row * C;
    for (std::size_t i = lane; i < packs; i += 32) {
        auto p = detail::load_pack<Width>(x + i * Width);
        const auto w = detail::load_pack<Width>(weight + i * Width);
        const auto b = detail::load_pack<Width>(bias + i * Width);
        for (int j = 0; j < Width; ++j) p.v[j] = (p.v[j] - row_mean) * row_rstd * w.v[j] + b.v[j];
        detail::store_pack<Width>(y + i * Width, p);
    }
}

// dinp += the full Jacobian term through mean and rstd; one warp per row, the two row means in double.
template <class Real, int Width>
__global__ void layernorm_backward_dinp_kernel(Real* dinp,          // (B, T, C)
                                               const Real* mean,    // (B, T)
                                               const Real* rstd,    // (B, T)
                                               const Real* dout,    // (B, T, C)
                                               const Real* inp,     // (B, T, C)
                                               const Real* weight,  // (C)
                                               std::size_t rows, std::size_t C) {
    const std::size_t row = static_cast<std::size_t>(blockIdx.x) * detail::layernorm_rows_per_block + threadIdx.x / 32;
    if (row >= rows) return;
    const unsigned lane = threadIdx.x % 32;
    const std::size_t packs = C / Width;
    const Real* x = inp + row * C;
    const Real* dy = dout + row * C;
    const float m = mean[row], r = rstd[row];

    // dnorm = weight * dout; the two means are what d(mean) and d(rstd) feed back to dinp.
    double dnorm_sum = 0.0, dnorm_norm_sum = 0.0;
    for (std::size_t i = lane; i < packs; i += 32) {
        const auto xp = detail::load_pack<Width>(x + i * Width);
        const auto dyp = detail::load_pack<Width>(dy + i * Width);
        const auto wp = detail::load_pack<Width>(weight + i * Width);
        for (int j = 0; j < Width; ++j) {
            const double norm = static_cast<double>((xp.v[j] - m) * r);
            const double dnorm = static_cast<double>(wp.v[j]) * dyp.v[j];
            dnorm_sum += dnorm;
            dnorm_norm_sum += dnorm * norm;
        }
    }
    const double dnorm_mean = detail::warp_sum(dnorm_sum) / static_cast<double>(C);
    const double dnorm_norm_mean = detail::warp_sum(dnorm_norm_sum) / static_cast<double>(C);
    Real* dx = dinp + row * C;
    for (std::size_t i = lane; i < packs; i += 32) {
        const auto xp = detail::load_pack<Width>(x + i * Width);
        const auto dyp = detail::load_pack<Width>(dy + i * Width);
        const auto wp = detail::load_pack<Width>(weight + i * Width);
        auto dxp = detail::load_pack<Width>(dx + i * Width);
        for (int j = 0; j < Width; ++j) {
            const float norm = (xp.v[j] - m) * r;
            const float dnorm = wp.v[j] * dyp.v[j];
            dxp.v[j] += static_cast<float>((dnorm - dnorm_mean - norm * dnorm_norm_mean) * r);
        }
        detail::store_pack<Width>(dx + i * Width, dxp);
    }
}

// dweight += sum over rows of norm * dout, dbias += sum over rows of dout; one block per column tile
// (grid.x = ceil(C / column_tile_width)), rows in a fixed order, then a fixed tree.
template <class Real>
__global__ void __launch_bounds__(detail::column_tile_width* detail::column_tile_rows)
    layernorm_backward_params_kernel(Real* dweight,     // (C)
                                     Real* dbias,       // (C)
                                     const Real* mean,  // (B, T)
                                     const Real* rstd,  // (B, T)
                                     const Real* dout,  // (B, T, C)
                                     const Real* inp,   // (B, T, C)
                                     std::size_t rows, std::size_t C) {
    __shared__ float weight_partials[detail::column_tile_rows * detail::column_tile_width];
    __shared__ float bias_partials[detail::column_tile_rows * detail::column_tile_width];
    const std::size_t c = static_cast<std::size_t>(blockIdx.x) * detail::column_tile_width + threadIdx.x;
    float dw = 0.0f, db = 0.0f;
    if (c < C) {
#pragma unroll 4
        for (std::size_t r = threadIdx.y; r < rows; r += detail::column_tile_rows) {
            const float dy = dout[r * C + c];
            const float norm = (inp[r * C + c] - mean[r]) * rstd[r];
            dw += norm * dy;
            db += dy;
        }
    }
    dw = detail::column_tile_sum(dw, weight_partials);
    db = detail::column_tile_sum(db, bias_partials);
    if (threadIdx.y == 0 && c < C) {
        dweight[c] += dw;
        dbias[c] += db;
    }
}

namespace detail {
// layernorm_forward_kernel on the rows of (rows, C): float4 where C and every pointer allow it.
// with_residual: the input is a + b, also stored to res (residual_layernorm_forward).
template <bool with_residual, class Real>
void launch_layernorm_forward(Real* out, Real* mean, Real* rstd, Real* res, const Real* a, const Real* b,
                              const Real* weight, const Real* bias, std::size_t rows, std::size_t C,
                              cudaStream_t stream, const char* name) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (rows == 0 || C == 0) return;
    const unsigned blocks = ceil_div(rows, layernorm_rows_per_block);
    constexpr unsigned threads = 32 * layernorm_rows_per_block;
    if (C % 4 == 0 && aligned16(res, out, a, b, weight, bias))
        layernorm_forward_kernel<Real, 4, with_residual>
            <<<blocks, threads, 0, stream>>>(out, mean, rstd, res, a, b, weight, bias, rows, C);
    else
        layernorm_forward_kernel<Real, 1, with_residual>
            <<<blocks, threads, 0, stream>>>(out, mean, rstd, res, a, b, weight, bias, rows, C);
    check_launch(name);
}
}  // namespace detail

template <class Real>
void layernorm_forward(Real* out,           // (B, T, C)
                       Real* mean,          // (B, T)
                       Real* rstd,          // (B, T)
                       const Real* inp,     // (B, T, C)
                       const Real* weight,  // (C)
                       const Real* bias,    // (C)
                       std::size_t B, std::size_t T, std::size_t C, cudaStream_t stream) {
    detail::launch_layernorm_forward<false>(out, mean, rstd, static_cast<Real*>(nullptr), inp,
                                            static_cast<const Real*>(nullptr), weight, bias, B * T, C, stream,
                                            "layernorm_forward");
}

// res = a + b, then out = layernorm(res) with its statistics: residual_forward and
// layernorm_forward in one pass over the rows, the same bits as the two kernels one after the
// other. res must not overlap a or b (another warp's row would be overwritten under it: the
// two-kernel composition allows out == a, this one does not).
template <class Real>
void residual_layernorm_forward(Real* res,           // (B, T, C)
                                Real* out,           // (B, T, C)
                                Real* mean,          // (B, T)
                                Real* rstd,          // (B, T)
                                const Real* a,       // (B, T, C)
                                const Real* b,       // (B, T, C)
                                const Real* weight,  // (C)
                                const Real* bias,    // (C)
                                std::size_t B, std::size_t T, std::size_t C, cudaStream_t stream) {
    detail::launch_layernorm_forward<true>(out, mean, rstd, res, a, b, weight, bias, B * T, C, stream,
                                           "residual_layernorm_forward");
}

// dinp += the full Jacobian term through mean and rstd; dweight += norm * dout; dbias += dout.
template <class Real>
void layernorm_backward(Real* dinp,          // (B, T, C)
                        Real* dweight,       // (C)
                        Real* dbias,         // (C)
                        const Real* mean,    // (B, T)
                        const Real* rstd,    // (B, T)
                        const Real* dout,    // (B, T, C)
                        const Real* inp,     // (B, T, C)
                        const Real* weight,  // (C)
                        std::size_t B, std::size_t T, std::size_t C, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    const std::size_t rows = B * T;
    if (rows == 0 || C == 0) return;
    const unsigned blocks = ceil_div(rows, detail::layernorm_rows_per_block);
    constexpr unsigned threads = 32 * detail::layernorm_rows_per_block;
    if (C % 4 == 0 && detail::aligned16(dinp, dout, inp, weight))
        layernorm_backward_dinp_kernel<Real, 4>
            <<<blocks, threads, 0, stream>>>(dinp, mean, rstd, dout, inp, weight, rows, C);
    else
        layernorm_backward_dinp_kernel<Real, 1>
            <<<blocks, threads, 0, stream>>>(dinp, mean, rstd, dout, inp, weight, rows, C);
    check_launch("layernorm_backward_dinp");
    const dim3 tile(detail::column_tile_width, detail::column_tile_rows);
    layernorm_backward_params_kernel<Real>
        <<<ceil_div(C, detail::column_tile_width), tile, 0, stream>>>(dweight, dbias, mean, rstd, dout, inp, rows, C);
    check_launch("layernorm_backward_params");
}

// The float instances are compiled once, in strata's src/cuda/rowwise.cu (strata::cuda,
// strata_cuda_ops): a unit that includes this header links them instead of compiling the kernels
// again.
#define STRATA_CUDA_LAYERNORM_INSTANCES(prefix) \
    prefix void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, \
                                         std::size_t, std::size_t, std::size_t, cudaStream_t); \
    prefix void residual_layernorm_forward<float>(float*, float*, float*, float*, const float*, const float*, \
                                                  const float*, const float*, std::size_t, std::size_t, std::size_t, \
                                                  cudaStream_t); \
    prefix void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, \
                                          const float*, const float*, std::size_t, std::size_t, std::size_t, \
                                          cudaStream_t);
STRATA_CUDA_LAYERNORM_INSTANCES(extern template)

}  // namespace strata::kernels::cuda
