// Flat-buffer kernels of the trainer on the GPU: gradient accumulation, scaling, the residual add,
// the bias of a linear layer and its gradient, and the sum of squares behind the global gradient norm.
// CUDA ports of kernels/cpu/elementwise.hpp and residual.hpp (the oracle).
//
// Glossary: N number of elements, rows the B*T rows of a linear layer, OC its output channels.
//
// Deterministic: no atomics anywhere; every sum runs in an order fixed by the sizes alone, so a
// result is the same bits on every run. sum_of_squares goes further and uses the CPU kernel's own
// canonical order (chunks of cpu::sum_of_squares_chunk), so GPU and CPU agree bit for bit.
//
// This file also holds the small device helpers the other kernel files of kernels/cuda/ share:
// float4 packs with a scalar fallback, fixed-tree warp sums, and the column-tile reduction.
#pragma once

#include <strata/kernels/cpu/elementwise.hpp>  // sum_of_squares_chunk (the canonical order)
#include <strata/kernels/cuda/launch.cuh>      // ceil_div, check_launch

#include <cuda_runtime.h>  // cudaStream_t, float4, __shfl_xor_sync, __syncthreads

#include <algorithm>    // std::min, std::max
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uintptr_t
#include <type_traits>  // std::is_same_v, std::type_identity_t

namespace strata::kernels::cuda {

namespace detail {

// ---- grids of the flat kernels ----

// Threads per block of the flat (grid-stride) kernels, and the most blocks they launch: 4096
// blocks of 256 are ~4 full waves of an H200's 132 SMs; a grid-stride loop covers the rest.
inline constexpr unsigned flat_threads = 256;
inline constexpr unsigned flat_max_blocks = 4096;

inline unsigned flat_blocks(std::size_t work) {
    return std::max(1u, std::min(ceil_div(work, flat_threads), flat_max_blocks));
}

// Grids of the row-broadcast kernels (a bias over the rows of a (rows, OC) matrix): x covers the
// packs of one row, y the rows, each block walking rows gridDim.y apart (gridDim.y is at most
// 65535), so no thread divides by OC and each loads its bias pack once.
inline constexpr unsigned row_grid_max_y = 65535;

inline dim3 row_grid(std::size_t rows, std::size_t packs_per_row) {
    return dim3(std::max(1u, ceil_div(packs_per_row, flat_threads)),
                static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(rows, row_grid_max_y))));
}

__device__ inline std::size_t thread_index() { return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline std::size_t thread_count() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

// ---- packs: Width consecutive floats, one float4 access when Width is 4 ----

// True when every pointer is 16-byte aligned: float4 accesses are then legal. Flat kernels need no
// more (a scalar loop takes the N % 4 tail); row kernels also need C % 4 == 0, so rows start
// aligned too.
template <class... Pointers>
bool aligned16(const Pointers*... p) {
    return ((reinterpret_cast<std::uintptr_t>(p) % 16 == 0) && ...);
}

template <int Width>
struct pack {
    static_assert(Width == 1 || Width == 4, "a pack is one float or one float4");
    float v[Width];
};

template <int Width, class Real>
__device__ inline pack<Width> load_pack(const Real* p) {
    static_assert(std::is_same_v<Real, float>, "packs hold floats");
    pack<Width> r;
    if constexpr (Width == 4) {
        const float4 q = *reinterpret_cast<const float4*>(p);
        r.v[0] = q.x, r.v[1] = q.y, r.v[2] = q.z, r.v[3] = q.w;
    } else {
        r.v[0] = *p;
    }
    return r;
}

template <int Width, class Real>
__device__ inline void store_pack(Real* p, const pack<Width>& r) {
    static_assert(std::is_same_v<Real, float>, "packs hold floats");
    if constexpr (Width == 4)
        *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    else
        *p = r.v[0];
}

// ---- fixed-order reductions ----

// The sum over the 32 lanes by a butterfly: every lane ends with the same bits (a + b == b + a),
// and the order depends on nothing but the lane numbers.
template <class T>
__device__ inline T warp_sum(T value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

__device__ inline float warp_max(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
    return value;
}

// The column tile: a block of column_tile_width channels x column_tile_rows row phases, for sums
// over the rows of a (rows, C) matrix without atomics and without scratch. Thread (x, y) adds the
// rows y, y + column_tile_rows, ... of channel x in that order; column_tile_sum then adds the
// column_tile_rows partials of each channel in a fixed tree. A warp reads 4 rows x 8 channels,
// 32-byte sectors fully used; 8-wide tiles give C / 8 blocks (96 for C = 768), enough to spread
// over the SMs where 32-wide tiles would leave most idle.
inline constexpr unsigned column_tile_width = 8;
inline constexpr unsigned column_tile_rows = 128;

// `shared` holds column_tile_width * column_tile_rows floats, one buffer per concurrent sum.
// Returns, in every thread, the total of its channel threadIdx.x.
__device__ inline float column_tile_sum(float value, float* shared) {
    const unsigned x = threadIdx.x, y = threadIdx.y;
    shared[y * column_tile_width + x] = value;
    __syncthreads();
    for (unsigned stride = column_tile_rows / 2; stride > 0; stride /= 2) {
        if (y < stride) shared[y * column_tile_width + x] += shared[(y + stride) * column_tile_width + x];
        __syncthreads();
    }
    return shared[x];
}

// ---- sum_of_squares ----

// The chunk kernel's blocks: four warps, one chunk each. A warp stages its chunk in pieces of
// sum_of_squares_piece doubles (8 KiB); the total kernel reads the partials in pieces of that size.
inline constexpr unsigned sum_of_squares_warps = 4;
inline constexpr unsigned sum_of_squares_piece = 1024;

}  // namespace detail

// ---- dst += src, x *= factor, out = a + b ----

template <class Real, int Width>
__global__ void add_inplace_kernel(Real* dst,        // (N)
                                   const Real* src,  // (N)
                                   std::size_t N) {
    const std::size_t packs = N / Width;
    for (std::size_t i = detail::thread_index(); i < packs; i += detail::thread_count()) {
        auto d = detail::load_pack<Width>(dst + i * Width);
        const auto s = detail::load_pack<Width>(src + i * Width);
        for (int j = 0; j < Width; ++j) d.v[j] += s.v[j];
        detail::store_pack<Width>(dst + i * Width, d);
    }
    for (std::size_t i = packs * Width + detail::thread_index(); i < N; i += detail::thread_count()) dst[i] += src[i];
}

template <class Real, int Width>
__global__ void scale_inplace_kernel(Real* x,  // (N)
                                     Real factor, std::size_t N) {
    const std::size_t packs = N / Width;
    for (std::size_t i = detail::thread_index(); i < packs; i += detail::thread_count()) {
        auto p = detail::load_pack<Width>(x + i * Width);
        for (int j = 0; j < Width; ++j) p.v[j] *= factor;
        detail::store_pack<Width>(x + i * Width, p);
    }
    for (std::size_t i = packs * Width + detail::thread_index(); i < N; i += detail::thread_count()) x[i] *= factor;
}

template <class Real, int Width>
__global__ void residual_forward_kernel(Real* out,      // (N)
                                        const Real* a,  // (N)
                                        const Real* b,  // (N)
                                        std::size_t N) {
    const std::size_t packs = N / Width;
    for (std::size_t i = detail::thread_index(); i < packs; i += detail::thread_count()) {
        auto p = detail::load_pack<Width>(a + i * Width);
        const auto q = detail::load_pack<Width>(b + i * Width);
        for (int j = 0; j < Width; ++j) p.v[j] += q.v[j];
        detail::store_pack<Width>(out + i * Width, p);
    }
    for (std::size_t i = packs * Width + detail::thread_index(); i < N; i += detail::thread_count())
        out[i] = a[i] + b[i];
}

// dst += src.
template <class Real>
void add_inplace(Real* dst,        // (N)
                 const Real* src,  // (N)
                 std::size_t N, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (N == 0) return;
    if (detail::aligned16(dst, src))
        add_inplace_kernel<Real, 4><<<detail::flat_blocks(N / 4), detail::flat_threads, 0, stream>>>(dst, src, N);
    else
        add_inplace_kernel<Real, 1><<<detail::flat_blocks(N), detail::flat_threads, 0, stream>>>(dst, src, N);
    check_launch("add_inplace");
}

// x *= factor. factor does not take part in deducing Real (a double converts, as on the CPU).
template <class Real>
void scale_inplace(Real* x,  // (N)
                   std::type_identity_t<Real> factor, std::size_t N, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (N == 0) return;
    if (detail::aligned16(x))
        scale_inplace_kernel<Real, 4><<<detail::flat_blocks(N / 4), detail::flat_threads, 0, stream>>>(x, factor, N);
    else
        scale_inplace_kernel<Real, 1><<<detail::flat_blocks(N), detail::flat_threads, 0, stream>>>(x, factor, N);
    check_launch("scale_inplace");
}

// out = a + b (out may be a or b).
template <class Real>
void residual_forward(Real* out,      // (N)
                      const Real* a,  // (N)
                      const Real* b,  // (N)
                      std::size_t N, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (N == 0) return;
    if (detail::aligned16(out, a, b))
        residual_forward_kernel<Real, 4><<<detail::flat_blocks(N / 4), detail::flat_threads, 0, stream>>>(out, a, b, N);
    else
        residual_forward_kernel<Real, 1><<<detail::flat_blocks(N), detail::flat_threads, 0, stream>>>(out, a, b, N);
    check_launch("residual_forward");
}

// ---- out += bias, broadcast over rows ----

// grid: detail::row_grid(rows, OC / Width).
template <class Real, int Width>
__global__ void add_bias_kernel(Real* out,         // (rows, OC)
                                const Real* bias,  // (OC)
                                std::size_t rows, std::size_t OC) {
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= OC / Width) return;
    const auto b = detail::load_pack<Width>(bias + i * Width);
    for (std::size_t r = blockIdx.y; r < rows; r += gridDim.y) {
        Real* o = out + r * OC + i * Width;
        auto p = detail::load_pack<Width>(o);
        for (int j = 0; j < Width; ++j) p.v[j] += b.v[j];
        detail::store_pack<Width>(o, p);
    }
}

// out (rows, OC) += bias (OC) on every row: the bias of a linear layer after its GEMM. Float4
// accesses when OC % 4 == 0 and both pointers are 16-byte aligned; the same float adds either way.
template <class Real>
void add_bias(Real* out,         // (rows, OC)
              const Real* bias,  // (OC)
              std::size_t rows, std::size_t OC, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (rows == 0 || OC == 0) return;
    if (OC % 4 == 0 && detail::aligned16(out, bias))
        add_bias_kernel<Real, 4><<<detail::row_grid(rows, OC / 4), detail::flat_threads, 0, stream>>>(out, bias, rows, OC);
    else
        add_bias_kernel<Real, 1><<<detail::row_grid(rows, OC), detail::flat_threads, 0, stream>>>(out, bias, rows, OC);
    check_launch("add_bias");
}

// ---- dbias += column sums of dout ----

// One block per column tile (see detail::column_tile_sum); grid.x = ceil(OC / column_tile_width).
template <class Real>
__global__ void __launch_bounds__(detail::column_tile_width* detail::column_tile_rows)
    column_sum_accumulate_kernel(Real* dbias,       // (OC)
                                 const Real* dout,  // (rows, OC)
                                 std::size_t rows, std::size_t OC) {
    __shared__ float partials[detail::column_tile_rows * detail::column_tile_width];
    const std::size_t c = static_cast<std::size_t>(blockIdx.x) * detail::column_tile_width + threadIdx.x;
    float sum = 0.0f;
    if (c < OC) {
#pragma unroll 4
        for (std::size_t r = threadIdx.y; r < rows; r += detail::column_tile_rows) sum += dout[r * OC + c];
    }
    sum = detail::column_tile_sum(sum, partials);
    if (threadIdx.y == 0 && c < OC) dbias[c] += sum;
}

// dbias += the column sums of dout: the bias gradient of a linear layer (matmul_backward's dbias).
template <class Real>
void column_sum_accumulate(Real* dbias,       // (OC)
                           const Real* dout,  // (rows, OC)
                           std::size_t rows, std::size_t OC, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    if (OC == 0) return;
    const dim3 block(detail::column_tile_width, detail::column_tile_rows);
    column_sum_accumulate_kernel<Real>
        <<<ceil_div(OC, detail::column_tile_width), block, 0, stream>>>(dbias, dout, rows, OC);
    check_launch("column_sum_accumulate");
}

// ---- sum of squares, in the canonical chunk order of cpu::sum_of_squares ----

// Doubles of workspace sum_of_squares needs: one partial per chunk.
constexpr std::size_t sum_of_squares_workspace(std::size_t N) {
    return (N + cpu::sum_of_squares_chunk - 1) / cpu::sum_of_squares_chunk;
}

// One warp per chunk. The lanes form the squares double(x_i) * double(x_i) (exact: a float has 24
// significant bits, its square 48 of double's 53) and stage them in shared memory, a piece at a
// time; lane 0 adds them one by one in index order, the canonical order being sequential within a
// chunk. All 32 lanes convert and multiply; lane 0 only adds, reading two squares per load.
template <class Real>
__global__ void sum_of_squares_chunks_kernel(double* partials,  // (chunks)
                                             const Real* x,     // (N)
                                             std::size_t N) {
    constexpr std::size_t chunk = cpu::sum_of_squares_chunk;
    constexpr unsigned piece = detail::sum_of_squares_piece;
    static_assert(chunk % piece == 0 && piece % 2 == 0, "a chunk is a whole number of even pieces");
    __shared__ __align__(16) double squares[detail::sum_of_squares_warps][piece];
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const std::size_t c = static_cast<std::size_t>(blockIdx.x) * detail::sum_of_squares_warps + warp;
    const std::size_t begin = c * chunk;
    if (begin >= N) return;  // past the last chunk: the whole warp leaves together
    const std::size_t end = N - begin < chunk ? N : begin + chunk;
    double partial = 0.0;
    for (std::size_t p = begin; p < end; p += piece) {
        const std::size_t length = end - p < piece ? end - p : piece;
        for (std::size_t i = lane; i < length; i += 32) {
            const double value = x[p + i];
            squares[warp][i] = value * value;
        }
        __syncwarp();
        if (lane == 0) {
            const double2* pairs = reinterpret_cast<const double2*>(squares[warp]);
            std::size_t i = 0;
            for (; i + 1 < length; i += 2) {
                const double2 two = pairs[i / 2];
                partial += two.x;
                partial += two.y;
            }
            if (i < length) partial += squares[warp][i];
        }
        __syncwarp();  // the next piece overwrites the squares
    }
    if (lane == 0) partials[c] = partial;
}

// out = the partials added one by one in chunk order. One block of two warps: while warp 0 adds a
// piece of the partials, warp 1 loads the next piece into the other half of a double buffer, so
// the sequential sum does not wait on global memory latency. (Real only makes it a template, so
// every translation unit including this header may define it.)
template <class Real>
__global__ void sum_of_squares_total_kernel(double* out,             // (1)
                                            const double* partials,  // (chunks)
                                            std::size_t chunks) {
    constexpr unsigned piece = detail::sum_of_squares_piece;
    __shared__ __align__(16) double staged[2][piece];
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const std::size_t pieces = (chunks + piece - 1) / piece;
    const auto load = [&](std::size_t p) {
        const std::size_t begin = p * piece;
        const std::size_t length = chunks - begin < piece ? chunks - begin : piece;
        for (std::size_t i = lane; i < length; i += 32) staged[p % 2][i] = partials[begin + i];
    };
    if (warp == 1 && pieces > 0) load(0);
    __syncthreads();
    double total = 0.0;
    for (std::size_t p = 0; p < pieces; ++p) {
        if (warp == 1 && p + 1 < pieces) load(p + 1);
        if (warp == 0 && lane == 0) {
            const std::size_t length = chunks - p * piece < piece ? chunks - p * piece : piece;
            const double2* pairs = reinterpret_cast<const double2*>(staged[p % 2]);
            std::size_t i = 0;
            for (; i + 1 < length; i += 2) {
                const double2 two = pairs[i / 2];
                total += two.x;
                total += two.y;
            }
            if (i < length) total += staged[p % 2][i];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = total;
}

// *out = sum of x_i^2 in double, bitwise equal to cpu::sum_of_squares(x, N). workspace holds
// sum_of_squares_workspace(N) doubles; out and workspace are device memory.
template <class Real>
void sum_of_squares(double* out,        // (1)
                    double* workspace,  // (sum_of_squares_workspace(N))
                    const Real* x,      // (N)
                    std::size_t N, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    const std::size_t chunks = sum_of_squares_workspace(N);
    if (chunks > 0) {
        sum_of_squares_chunks_kernel<Real>
            <<<ceil_div(chunks, detail::sum_of_squares_warps), 32 * detail::sum_of_squares_warps, 0, stream>>>(
                workspace, x, N);
        check_launch("sum_of_squares_chunks");
    }
    sum_of_squares_total_kernel<Real><<<1, 64, 0, stream>>>(out, workspace, chunks);
    check_launch("sum_of_squares_total");
}

// The float instances are compiled once, in strata's src/cuda/elementwise.cu (strata::cuda,
// strata_cuda_ops): a unit that includes this header links them instead of compiling the kernels
// again.
#define STRATA_CUDA_ELEMENTWISE_INSTANCES(prefix) \
    prefix void add_inplace<float>(float*, const float*, std::size_t, cudaStream_t); \
    prefix void scale_inplace<float>(float*, float, std::size_t, cudaStream_t); \
    prefix void residual_forward<float>(float*, const float*, const float*, std::size_t, cudaStream_t); \
    prefix void add_bias<float>(float*, const float*, std::size_t, std::size_t, cudaStream_t); \
    prefix void column_sum_accumulate<float>(float*, const float*, std::size_t, std::size_t, cudaStream_t); \
    prefix void sum_of_squares<float>(double*, double*, const float*, std::size_t, cudaStream_t);
STRATA_CUDA_ELEMENTWISE_INSTANCES(extern template)

}  // namespace strata::kernels::cuda
