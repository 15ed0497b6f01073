// Causal multi-head self-attention of GPT-2 on the GPU: flash-style, strict FP32, for sm_90.
//
// Glossary: B batch, T time, C channels, NH heads, HS head size (C / NH), D the head size padded
// to the kernels' template size (16, 32, 64 or 128; channels HS..D-1 are zero in shared memory).
//
// Layout as kernels/cpu/attention.hpp (the oracle): qkv row (b, t) holds q in channels [0, C),
// k in [C, 2C), v in [2C, 3C); head h owns channels [h*HS, (h+1)*HS) of each; scores are
// q.k / sqrt(HS), position t attends to t' <= t; out concatenates the heads into (B, T, C).
//
// No (T, T) matrix ever reaches global memory: a block holds a 64-query tile and streams 64-key
// tiles through shared memory, keeping a running maximum and sum per query row (online softmax).
// All the forward saves for backward is lse, one log-sum-exp per query row (B, NH, T); backward
// recomputes the probabilities P = exp(S - lse) tile by tile.
//
// Backward is two kernels and no atomics, so dqkv is bitwise reproducible run to run: one block
// per key tile accumulates dk, dv over the query tiles that see it; one block per query tile
// accumulates dq over the key tiles it sees. Each element of dqkv is read-modify-written (+=) by
// exactly one thread. D_i = dout_i . out_i is recomputed per query row inside each kernel, from
// the dout and out tiles in shared memory (out borrows the dS tile's space until dS is written).
//
// Arithmetic is FP32 FMA on the CUDA cores (no TF32, no tensor cores); exponentials are 2^x of
// scores pre-scaled by log2(e) / sqrt(HS), on the multi-function unit with results below 2^-126
// flushed to zero (exp2_ftz).
//
// Speed on an H200 at GPT-2 124M's shape (B=8, T=1024, C=768, NH=12), tests/cuda/attention_test.cu:
// forward 0.38 ms (33.7 TFLOP/s counting S and PV over the lower triangle); backward 1.55 ms
// (dk/dv 0.90, dq 0.61), 4.0x the forward: without atomics it executes seven (64, 64, 64) products
// per tile pair to the forward's two (S and dP are recomputed by both kernels), at 29 TFLOP/s.
#pragma once

#include <strata/core/error.hpp>            // strata::error
#include <strata/kernels/cuda/launch.cuh>   // ceil_div, check_launch

#include <cuda_runtime.h>  // cudaStream_t, cudaFuncSetAttribute, float4, __shfl_xor_sync

#include <cmath>             // std::sqrt
#include <cstddef>           // std::size_t
#include <cstdint>           // std::uintptr_t
#include <initializer_list>  // std::initializer_list
#include <string>            // std::string, std::to_string
#include <type_traits>       // std::is_same_v, std::integral_constant

namespace strata::kernels::cuda {

// Elements of the forward's saved state: lse (B, NH, T).
constexpr std::size_t attention_saved(std::size_t B, std::size_t T, std::size_t NH) { return B * NH * T; }

namespace attention_detail {

// Tiling shared by the three kernels. A block of 128 threads is a 16 x 8 grid (ty, tx); for a
// (64, 64) score tile, thread (ty, tx) owns rows ty + 16*i (i < 4) and columns tx + 8*j (j < 8).
// The strided ownership makes every shared-memory read below bank-conflict free (see tile_dot),
// and place() puts the threads of a warp where each read costs the fewest wavefronts.
constexpr int tile = 64;          // queries per query tile = keys per key tile
constexpr int threads = 128;
constexpr int tile_x = 8;         // threads along a score row; they reduce with __shfl_xor 1, 4, 8 (place)
constexpr int rows_per_thread = 4;
constexpr int cols_per_thread = 8;
// Occupancy at D = 64 (nvcc 13, plain __launch_bounds__(128), no spills): the forward gets 168
// registers and 69 KB of shared memory, 3 blocks per multiprocessor; dk/dv 220 registers and
// 107 KB, dq 198 and 88 KB, 2 blocks. A minimum-blocks hint of 2 makes ptxas take 255 registers
// and spill instead. (D = 128: the forward runs 2 blocks with P in K's buffer, below; dk/dv and dq
// 1 block, and dk/dv spills 80 bytes.)
constexpr float log2e = 1.4426950408889634f;
constexpr float ln2 = 0.6931471805599453f;

// Where thread `thread` of a block sits in a grid of grid_x threads per row: (ty, tx). A warp is
// 4 ty x 8 tx, lane bits 0, 2, 3 giving tx and bits 1, 4 giving ty. Shared memory returns 128
// bytes a cycle to the registers, so a warp's float4 read takes 4 wavefronts, or 2 where lanes n
// and n^1 (or n and n^2) read the same address. Every product reads one factor's rows by ty and
// the other's by tx: lanes n, n^1 share ty (their row of the first factor) and lanes n, n^2 share
// tx (their row of the second), so both reads take 2. (Lanes 0-7 along tx, as before, shared
// only the ty side: 4 wavefronts for every tx-side read.) Which thread owns which elements does
// not change any sum or its order: the same bits whatever the placement.
struct thread_place {
    int ty, tx;
};
// Thread bits 0, 2, 3 are tx bits 0, 1, 2 and bits 1, 4 ty bits 0, 1; then the warp: with 16 tx
// per row its bit 0 is tx bit 3, the rest are ty's higher bits. (Masks of the thread index:
// ptxas recomputes them where lane and warp arithmetic cost the wide ordered kernel 16 bytes of
// spills.)
template <int grid_x>
__host__ __device__ constexpr thread_place place(int thread) {
    static_assert(grid_x == 8 || grid_x == 16, "attention: 8 or 16 threads along a score row");
    constexpr int warp_shift = grid_x == 16 ? 4 : 3;  // ty bit 2 from thread bit 5 or 6
    return {((thread >> 1) & 1) | ((thread >> 3) & 2) | ((thread >> warp_shift) & ~3),
            (thread & 1) | ((thread >> 1) & 6) | (grid_x == 16 ? (thread >> 2) & 8 : 0)};
}

// A (64, D) tile of q, k, v, dout in shared memory, rows D + 4 floats apart: 16-byte aligned rows
// whose float4 groups start in different banks for consecutive rows.
template <int D>
struct head_tile {
    static_assert(D == 16 || D == 32 || D == 64 || D == 128, "attention: D is 16, 32, 64 or 128");
    static constexpr int ld = D + 4;
    static constexpr int size = tile * ld;  // floats
    // A (64, 64) score tile (P, dS) in shared memory has rows score_ld floats apart: 72 makes the
    // per-element stores of a warp hit 32 distinct banks and its float4 row reads 4 distinct bank
    // groups. D + 8 when larger, so that the tile can also hold a (64, D) tile of out.
    static constexpr int score_ld = D + 8 > tile + 8 ? D + 8 : tile + 8;
    static constexpr int score_size = tile * score_ld;
    // The (rows, D) products O += P V: thread (ty, tx) owns out_cols columns of each of its rows,
    // in groups of vec contiguous columns (float4 reads of a V row, float2 when D = 16).
    static constexpr int vec = D >= 32 ? 4 : 2;
    static constexpr int out_cols = D / tile_x;
    __device__ static constexpr int column(int n, int tx) {
        return (n / vec) * (tile_x * vec) + tx * vec + n % vec;
    }
};

// Shared memory of each kernel, in floats.
// The forward's P tile shares K's buffer where separate tiles would keep it at one block per
// multiprocessor: at D = 128, Q, K, V and P take 133 KB (one block of 4 warps per SM, 17 TFLOP/s
// measured), Q, V and K|P 102 KB (two blocks; the next K tile is then copied after O += P V instead
// of during the softmax, and the other block hides that copy). Same products in the same order:
// the same bits either way.
template <int D>
constexpr bool forward_p_in_k = D >= 128;
template <int D>
constexpr int forward_k_floats =  // K's buffer, which holds P too where forward_p_in_k
    forward_p_in_k<D> && head_tile<D>::score_size > head_tile<D>::size ? head_tile<D>::score_size
                                                                       : head_tile<D>::size;
template <int D>
constexpr int forward_smem = forward_p_in_k<D> ? 2 * head_tile<D>::size + forward_k_floats<D>  // Q, V, K|P
                                               : 3 * head_tile<D>::size + head_tile<D>::score_size;  // Q, K, V, P
template <int D>
constexpr int dkdv_smem = 4 * head_tile<D>::size + 2 * head_tile<D>::score_size + 2 * tile;  // K V Q dO, P dS, lse D
template <int D>
constexpr int dq_smem = 4 * head_tile<D>::size + head_tile<D>::score_size + 2 * tile;  // Q dO K V, dS, lse D

// 4-byte asynchronous copy global -> shared; src_bytes = 0 writes a zero and reads nothing.
__device__ inline void copy_async4(float* dst, const float* src, int src_bytes) {
    const unsigned dst_shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst_shared), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
// 16-byte asynchronous copy global -> shared through L2 only; src_bytes = 0 writes zeros.
__device__ inline void copy_async16(float* dst, const float* src, int src_bytes) {
    const unsigned dst_shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_shared), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ inline void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `pending` of this thread's committed groups are still in flight.
template <int pending>
__device__ inline void copy_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

// Starts copying rows [0, rows) x channels [0, HS) of a head's (T, HS) slice into a (64, D) tile;
// rows >= rows and channels >= HS become zero, so padded lanes add nothing to any product.
// vector16 (HS and ld multiples of 4, src 16-byte aligned: GPT-2's shapes) copies 16 bytes per
// instruction, else 4 (any HS): a thread copies one piece of every row_step-th row, coalesced
// along channels, with only a pointer and a row index live across the loop.
// block_threads: the block's size (the key-tile backward's wide blocks have 256).
template <int D, int smem_ld = head_tile<D>::ld, int block_threads = threads>
__device__ void load_tile_async(float* tile_smem,  // (64, D), rows smem_ld apart
                                const float* src,  // (rows, HS), rows ld apart
                                std::size_t ld, int rows, int HS, bool vector16) {
    if (vector16) {
        constexpr int pieces = D / 4;  // 16-byte pieces per row
        static_assert(block_threads % pieces == 0, "attention: a block copies whole rows per step");
        constexpr int row_step = block_threads / pieces;
        const int d = static_cast<int>(threadIdx.x) % pieces * 4, r0 = static_cast<int>(threadIdx.x) / pieces;
        const bool channel_inside = d < HS;  // HS % 4 == 0: a piece is wholly inside or outside
#pragma unroll 4
        for (int step = 0; step < tile / row_step; ++step) {
            const int r = r0 + step * row_step;
            const bool inside = channel_inside && r < rows;
            copy_async16(tile_smem + r * smem_ld + d, inside ? src + r * ld + d : src, inside ? 16 : 0);
        }
    } else {
        static_assert(block_threads % D == 0, "attention: a block copies whole rows per step");
        constexpr int row_step = block_threads / D;
        const int d = static_cast<int>(threadIdx.x) % D, r0 = static_cast<int>(threadIdx.x) / D;
        const bool channel_inside = d < HS;
#pragma unroll 4
        for (int step = 0; step < tile / row_step; ++step) {
            const int r = r0 + step * row_step;
            const bool inside = channel_inside && r < rows;
            copy_async4(tile_smem + r * smem_ld + d, inside ? src + r * ld + d : src, inside ? 4 : 0);
        }
    }
}

// Starts copying lse[q0, q0 + 64) (zeros past T).
__device__ inline void load_lse_async(float* lse_smem,   // (64)
                                      const float* lse,  // (T): one (b, h)
                                      int q0, int T) {
    const int r = static_cast<int>(threadIdx.x);
    if (r < tile) copy_async4(lse_smem + r, q0 + r < T ? lse + q0 + r : lse, q0 + r < T ? 4 : 0);
}

// 2^x by one ex2.approx.ftz: the value of exp2f (the same instruction) wherever that is a normal
// float, +0 where it is below 2^-126 (a probability under 1.2e-38, next to the row's maximum of 1:
// below every sum's last bit). exp2f returns that subnormal at the cost of three more instructions
// per exponential (a compare and two scalings around the same ex2). Measured (H100, 2026-12-07):
// the forward 1.018x, the wide ordered backward 1.014x at T = 65536, 1.02-1.03x at head size 128;
// the outputs' hashes unchanged at every shape of bench/attention_backward_bench.cu.
__device__ inline float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <int n>
__device__ inline void load_vec(float (&dst)[n], const float* src) {
    if constexpr (n == 4) {
        const float4 v = *reinterpret_cast<const float4*>(src);
        dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
    } else {
        static_assert(n == 2, "attention: vector loads are float2 or float4");
        const float2 v = *reinterpret_cast<const float2*>(src);
        dst[0] = v.x, dst[1] = v.y;
    }
}

// acc[i][j] = A[ty + 16i] . B[tx + 8j] over D channels, channel order 0, 1, ..., D-1 (the same
// order, hence the same bits, in the forward and both backward kernels).
// Per 4 channels a thread reads 4 float4 of A and 8 of B for 128 FMAs; a warp's reads touch 4
// distinct rows of A and 8 of B, which a row stride of D + 4 floats puts in distinct 16-byte bank
// groups (D/4 + 1 is odd): no conflict, and 2 wavefronts per read with place()'s lane pairs.
template <int D>
__device__ inline void tile_dot(float (&acc)[rows_per_thread][cols_per_thread],
                                const float* A,  // (64, D + 4): rows of the score tile
                                const float* B,  // (64, D + 4): columns of the score tile
                                int ty, int tx) {
    constexpr int ld = head_tile<D>::ld;
#pragma unroll
    for (int i = 0; i < rows_per_thread; ++i)
#pragma unroll
        for (int j = 0; j < cols_per_thread; ++j) acc[i][j] = 0.f;
#pragma unroll
    for (int d = 0; d < D; d += 4) {
        float4 a[rows_per_thread], b[cols_per_thread];
#pragma unroll
        for (int i = 0; i < rows_per_thread; ++i)
            a[i] = *reinterpret_cast<const float4*>(A + (ty + 16 * i) * ld + d);
#pragma unroll
        for (int j = 0; j < cols_per_thread; ++j)
            b[j] = *reinterpret_cast<const float4*>(B + (tx + tile_x * j) * ld + d);
#pragma unroll
        for (int i = 0; i < rows_per_thread; ++i)
#pragma unroll
            for (int j = 0; j < cols_per_thread; ++j) {
                acc[i][j] = fmaf(a[i].x, b[j].x, acc[i][j]);
                acc[i][j] = fmaf(a[i].y, b[j].y, acc[i][j]);
                acc[i][j] = fmaf(a[i].z, b[j].z, acc[i][j]);
                acc[i][j] = fmaf(a[i].w, b[j].w, acc[i][j]);
            }
    }
}

// acc[i][n] += sum_c P[ty + 16i][c] * V[c][column(n)], c = 0, 1, ..., 63 in order.
// P rows are read as float4 (4 distinct rows per warp; stride 72 puts them in bank groups 0, 2,
// 4, 6; so does D + 8 = 136), V rows as float4 (8 lanes tx read one contiguous 128-byte run):
// 12 reads of 2 wavefronts each (place) per 128 FMAs.
template <int D>
__device__ inline void tile_mma(float (&acc)[rows_per_thread][head_tile<D>::out_cols],
                                const float* P,  // (64, score_ld): the score-shaped left factor
                                const float* V,  // (64, D + 4)
                                int ty, int tx) {
    using shape = head_tile<D>;
    constexpr int vec = shape::vec;
#pragma unroll 2
    for (int c = 0; c < tile; c += 4) {
        float4 p[rows_per_thread];
#pragma unroll
        for (int i = 0; i < rows_per_thread; ++i)
            p[i] = *reinterpret_cast<const float4*>(P + (ty + 16 * i) * shape::score_ld + c);
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
            float v[shape::out_cols];
#pragma unroll
            for (int g = 0; g < shape::out_cols / vec; ++g) {
                float part[vec];
                load_vec<vec>(part, V + (c + cc) * shape::ld + shape::column(g * vec, tx));
#pragma unroll
                for (int e = 0; e < vec; ++e) v[g * vec + e] = part[e];
            }
#pragma unroll
            for (int i = 0; i < rows_per_thread; ++i) {
                const float pc = cc == 0 ? p[i].x : cc == 1 ? p[i].y : cc == 2 ? p[i].z : p[i].w;
#pragma unroll
                for (int n = 0; n < shape::out_cols; ++n) acc[i][n] = fmaf(pc, v[n], acc[i][n]);
            }
        }
    }
}

// Sum over the 8 threads tx of one score row: lanes that differ in bits 0, 2, 3 (place), tx bit 0,
// then 1, then 2, as the sums have always run.
__device__ inline float row_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 4);
    return x + __shfl_xor_sync(0xffffffffu, x, 8);
}
__device__ inline float row_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
}

// Dsum[r] = dout[r] . out[r] for the 64 rows of a query tile (the softmax backward's row term),
// in a fixed order (channel groups, then a butterfly over the 8 threads of a row): reproducible.
// Rows past T are zero in both tiles, so their term is 0.
template <int D>
__device__ void row_dots(float* Dsum,      // (64)
                         const float* dOs, // (64, D), rows D + 4 apart
                         const float* Os,  // (64, D), rows score_ld apart
                         int ty, int tx) {
    using shape = head_tile<D>;
    constexpr int vec = shape::vec;
#pragma unroll
    for (int i = 0; i < rows_per_thread; ++i) {
        const int r = ty + 16 * i;
        float sum = 0.f;
#pragma unroll
        for (int g = 0; g < shape::out_cols / vec; ++g) {
            float a[vec], o[vec];
            load_vec<vec>(a, dOs + r * shape::ld + shape::column(g * vec, tx));
            load_vec<vec>(o, Os + r * shape::score_ld + shape::column(g * vec, tx));
#pragma unroll
            for (int e = 0; e < vec; ++e) sum = fmaf(a[e], o[e], sum);
        }
        sum = row_sum(sum);
        if (tx == 0) Dsum[r] = sum;
    }
}

// A key tile's dK and dV, accumulated in registers (thread (ty, tx): key rows ty + 16 i, columns
// column(n, tx)), added to dqkv: key row t's dK at dk_head + t * ld, its dV dv_offset further on.
// Rows at or past T are not written. Both backwards (the two kernels' dkdv, the key-tile kernel) end so.
template <int D>
__device__ inline void add_dk_dv(float* dk_head, std::size_t ld, std::size_t dv_offset, int k0, int T,
                                 int HS, const float (&dk)[rows_per_thread][head_tile<D>::out_cols],
                                 const float (&dv)[rows_per_thread][head_tile<D>::out_cols], int ty, int tx) {
    using shape = head_tile<D>;
#pragma unroll
    for (int i = 0; i < rows_per_thread; ++i) {
        const int t = k0 + ty + 16 * i;
        if (t >= T) continue;
        float* dk_row = dk_head + t * ld;  // (HS)
        float* dv_row = dk_row + dv_offset;  // (HS)
#pragma unroll
        for (int n = 0; n < shape::out_cols; ++n) {
            const int d = shape::column(n, tx);
            if (d < HS) {
                dk_row[d] += dk[i][n];
                dv_row[d] += dv[i][n];
            }
        }
    }
}

}  // namespace attention_detail

// One block per (64-query tile, b*NH + h); heaviest tiles (most keys) first.
// scale_log2 = log2(e) / sqrt(HS): scores in base 2, so each exponential is one exp2_ftz.
template <class Real, int D>
__global__ void __launch_bounds__(attention_detail::threads)
    attention_forward_kernel(Real* __restrict__ out,        // (B, T, C)
                             Real* __restrict__ lse,        // (B, NH, T)
                             const Real* __restrict__ qkv,  // (B, T, 3C)
                             int T, int C, int NH, int HS, float scale_log2, bool vector16) {
    using namespace attention_detail;
    static_assert(std::is_same_v<Real, float>, "attention: the CUDA kernels are FP32 only");
    using shape = head_tile<D>;
    extern __shared__ float4 smem_f4[];
    constexpr bool p_in_k = forward_p_in_k<D>;
    float* Qs = reinterpret_cast<float*>(smem_f4);  // (64, D + 4)
    float* Ks = Qs + shape::size;                   // (64, D + 4)
    float* Vs = Ks + forward_k_floats<D>;           // (64, D + 4)
    float* Ps = p_in_k ? Ks : Vs + shape::size;     // (64, score_ld)

    const thread_place at = place<tile_x>(static_cast<int>(threadIdx.x));
    const int ty = at.ty, tx = at.tx;
    const int n_tiles = static_cast<int>(gridDim.y);
    const int qt = n_tiles - 1 - static_cast<int>(blockIdx.y);
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int q0 = qt * tile;
    const std::size_t ld = 3 * static_cast<std::size_t>(C);
    const float* q = qkv + static_cast<std::size_t>(b) * T * ld + h * HS;  // (T, HS), rows ld apart
    const float* k = q + C;                                                // (T, HS)
    const float* v = q + 2 * C;                                            // (T, HS)

    // Copy groups, in commit order: {Q, K0}, {V0}, then per key tile {K next}, {V next} (where P
    // is in K's buffer, both after O += P V).
    load_tile_async<D>(Qs, q + q0 * ld, ld, min(tile, T - q0), HS, vector16);
    load_tile_async<D>(Ks, k, ld, min(tile, T), HS, vector16);
    copy_async_commit();
    load_tile_async<D>(Vs, v, ld, min(tile, T), HS, vector16);
    copy_async_commit();

    float o[rows_per_thread][shape::out_cols] = {};
    float m[rows_per_thread], l[rows_per_thread];  // running max (base-2 scores), running sum
#pragma unroll
    for (int i = 0; i < rows_per_thread; ++i) m[i] = -INFINITY, l[i] = 0.f;

    for (int kt = 0; kt <= qt; ++kt) {
        const bool last = kt == qt;  // the diagonal tile, the only one with masked keys
        copy_async_wait<1>();
        __syncthreads();  // K(kt) landed
        float s[rows_per_thread][cols_per_thread];
        tile_dot<D>(s, Qs, Ks, ty, tx);
        __syncthreads();  // everyone is done with Ks
        if (!p_in_k && !last) {
            load_tile_async<D>(Ks, k + (kt + 1) * tile * ld, ld, min(tile, T - (kt + 1) * tile), HS, vector16);
            copy_async_commit();
        }
        // Online softmax. Key 0 is in tile 0 and sees every query, so m is finite from tile 0 on.
#pragma unroll
        for (int i = 0; i < rows_per_thread; ++i) {
            const int r = ty + 16 * i;
            float tile_max = m[i];
#pragma unroll
            for (int j = 0; j < cols_per_thread; ++j) {
                const int c = tx + tile_x * j;
                s[i][j] = (last && c > r) ? -INFINITY : s[i][j] * scale_log2;
                tile_max = fmaxf(tile_max, s[i][j]);
            }
            const float new_max = row_max(tile_max);
            const float correction = exp2_ftz(m[i] - new_max);  // 0 on tile 0 (m = -inf)
            m[i] = new_max;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < cols_per_thread; ++j) {
                const float p = exp2_ftz(s[i][j] - new_max);
                sum += p;
                Ps[r * shape::score_ld + tx + tile_x * j] = p;
            }
            l[i] = l[i] * correction + row_sum(sum);
#pragma unroll
            for (int n = 0; n < shape::out_cols; ++n) o[i][n] *= correction;
        }
        if (!p_in_k && !last)
            copy_async_wait<1>();  // V(kt) landed; K(kt + 1) may still be in flight
        else
            copy_async_wait<0>();
        __syncthreads();  // P and V(kt) visible
        tile_mma<D>(o, Ps, Vs, ty, tx);
        __syncthreads();  // everyone is done with Vs and Ps
        if (!last) {
            if (p_in_k) {
                load_tile_async<D>(Ks, k + (kt + 1) * tile * ld, ld, min(tile, T - (kt + 1) * tile), HS, vector16);
                copy_async_commit();
            }
            load_tile_async<D>(Vs, v + (kt + 1) * tile * ld, ld, min(tile, T - (kt + 1) * tile), HS, vector16);
            copy_async_commit();
        }
    }

#pragma unroll
    for (int i = 0; i < rows_per_thread; ++i) {
        const int t = q0 + ty + 16 * i;
        if (t >= T) continue;
        const float inv_sum = 1.f / l[i];
        float* out_row = out + (static_cast<std::size_t>(b) * T + t) * C + h * HS;  // (HS)
#pragma unroll
        for (int n = 0; n < shape::out_cols; ++n) {
            const int d = shape::column(n, tx);
            if (d < HS) out_row[d] = o[i][n] * inv_sum;
        }
        if (tx == 0) lse[static_cast<std::size_t>(bh) * T + t] = m[i] * ln2 + logf(l[i]);
    }
}

// dk, dv: one block per (64-key tile, b*NH + h), looping over the query tiles at or after it;
// heaviest (key tile 0) first. Here score rows are keys and score columns are queries.
template <class Real, int D>
__global__ void __launch_bounds__(attention_detail::threads)
    attention_backward_dkdv_kernel(Real* __restrict__ dqkv,       // (B, T, 3C)
                                   const Real* __restrict__ lse,  // (B, NH, T)
                                   const Real* __restrict__ dout, // (B, T, C)
                                   const Real* __restrict__ out,  // (B, T, C)
                                   const Real* __restrict__ qkv,  // (B, T, 3C)
                                   int T, int C, int NH, int HS, float scale, float scale_log2,
                                   bool vector16) {
    using namespace attention_detail;
    static_assert(std::is_same_v<Real, float>, "attention: the CUDA kernels are FP32 only");
    using shape = head_tile<D>;
    extern __shared__ float4 smem_f4[];
    float* Ks = reinterpret_cast<float*>(smem_f4);  // (64, D + 4)
    float* Vs = Ks + shape::size;                   // (64, D + 4)
    float* Qs = Vs + shape::size;                   // (64, D + 4)
    float* dOs = Qs + shape::size;                  // (64, D + 4)
    float* Pts = dOs + shape::size;                 // (64 keys, score_ld): P^T
    float* dSts = Pts + shape::score_size;          // (64 keys, score_ld): dS^T / sqrt(HS); out before
    float* lse_s = dSts + shape::score_size;        // (64 queries)
    float* Dsum = lse_s + tile;                     // (64 queries)

    const thread_place at = place<tile_x>(static_cast<int>(threadIdx.x));
    const int ty = at.ty, tx = at.tx;
    const int n_tiles = static_cast<int>(gridDim.y);
    const int kt = static_cast<int>(blockIdx.y);
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int k0 = kt * tile;
    const std::size_t ld = 3 * static_cast<std::size_t>(C);
    const std::size_t row0 = static_cast<std::size_t>(b) * T;
    const float* q = qkv + row0 * ld + h * HS;  // (T, HS), rows ld apart
    const float* k = q + C;                     // (T, HS)
    const float* v = q + 2 * C;                 // (T, HS)
    const float* dout_bh = dout + row0 * C + h * HS;  // (T, HS), rows C apart
    const float* out_bh = out + row0 * C + h * HS;    // (T, HS), rows C apart
    const float* lse_bh = lse + static_cast<std::size_t>(bh) * T;  // (T)

    // Copy groups, in commit order: {K, V, Q(kt), lse(kt)}, {dO(kt), out(kt)}, then per query
    // tile {Q, lse next}, {dO, out next}.
    load_tile_async<D>(Ks, k + k0 * ld, ld, min(tile, T - k0), HS, vector16);
    load_tile_async<D>(Vs, v + k0 * ld, ld, min(tile, T - k0), HS, vector16);
    load_tile_async<D>(Qs, q + k0 * ld, ld, min(tile, T - k0), HS, vector16);
    load_lse_async(lse_s, lse_bh, k0, T);
    copy_async_commit();
    load_tile_async<D>(dOs, dout_bh + k0 * static_cast<std::size_t>(C), C, min(tile, T - k0), HS, vector16);
    load_tile_async<D, shape::score_ld>(dSts, out_bh + k0 * static_cast<std::size_t>(C), C, min(tile, T - k0), HS, vector16);
    copy_async_commit();

    float dk[rows_per_thread][shape::out_cols] = {};
    float dv[rows_per_thread][shape::out_cols] = {};
    for (int qt = kt; qt < n_tiles; ++qt) {
        const int q0 = qt * tile;
        const bool diagonal = qt == kt;
        const bool last = qt == n_tiles - 1;
        copy_async_wait<1>();
        __syncthreads();  // Q(qt), lse(qt) visible
        {
            float s[rows_per_thread][cols_per_thread];
            tile_dot<D>(s, Ks, Qs, ty, tx);  // S^T = K Q^T
            float lse2[cols_per_thread];  // this thread's queries' lse, base 2
#pragma unroll
            for (int j = 0; j < cols_per_thread; ++j) lse2[j] = lse_s[tx + tile_x * j] * log2e;
#pragma unroll
            for (int i = 0; i < rows_per_thread; ++i) {
                const int key = ty + 16 * i;
#pragma unroll
                for (int j = 0; j < cols_per_thread; ++j) {
                    const int query = tx + tile_x * j;
                    const bool seen = q0 + query < T && (!diagonal || key <= query);
                    Pts[key * shape::score_ld + query] = seen ? exp2_ftz(s[i][j] * scale_log2 - lse2[j]) : 0.f;
                }
            }
        }
        copy_async_wait<0>();
        __syncthreads();  // dO(qt), out(qt) visible
        row_dots<D>(Dsum, dOs, dSts, ty, tx);
        __syncthreads();  // Dsum visible; out(qt) consumed, dSts free
        {
            float dp[rows_per_thread][cols_per_thread];
            tile_dot<D>(dp, Vs, dOs, ty, tx);  // dP^T = V dO^T
            float row_term[cols_per_thread];
#pragma unroll
            for (int j = 0; j < cols_per_thread; ++j) row_term[j] = Dsum[tx + tile_x * j];
            // P^T comes back from shared memory (this thread's own elements): fewer live registers.
#pragma unroll
            for (int i = 0; i < rows_per_thread; ++i) {
                const int key = ty + 16 * i;
#pragma unroll
                for (int j = 0; j < cols_per_thread; ++j) {
                    const int query = tx + tile_x * j;
                    const float p = Pts[key * shape::score_ld + query];  // 0 where masked; dp finite
                    dSts[key * shape::score_ld + query] = p * (dp[i][j] - row_term[j]) * scale;
                }
            }
        }
        __syncthreads();  // P^T, dS^T visible
        tile_mma<D>(dk, dSts, Qs, ty, tx);  // dK += dS^T Q
        __syncthreads();  // everyone is done with Qs, dSts, lse_s
        if (!last) {
            const int next = q0 + tile;
            load_tile_async<D>(Qs, q + next * ld, ld, min(tile, T - next), HS, vector16);
            load_lse_async(lse_s, lse_bh, next, T);
            copy_async_commit();
        }
        tile_mma<D>(dv, Pts, dOs, ty, tx);  // dV += P^T dO
        __syncthreads();  // everyone is done with dOs, Pts
        if (!last) {
            const int next = q0 + tile;
            const std::size_t offset = next * static_cast<std::size_t>(C);
            load_tile_async<D>(dOs, dout_bh + offset, C, min(tile, T - next), HS, vector16);
            load_tile_async<D, shape::score_ld>(dSts, out_bh + offset, C, min(tile, T - next), HS, vector16);
            copy_async_commit();
        }
    }

    add_dk_dv<D>(dqkv + row0 * ld + C + h * HS, ld, C, k0, T, HS, dk, dv, ty, tx);
}

// dq: one block per (64-query tile, b*NH + h), looping over the key tiles it sees; heaviest first.
template <class Real, int D>
__global__ void __launch_bounds__(attention_detail::threads)
    attention_backward_dq_kernel(Real* __restrict__ dqkv,       // (B, T, 3C)
                                 const Real* __restrict__ lse,  // (B, NH, T)
                                 const Real* __restrict__ dout, // (B, T, C)
                                 const Real* __restrict__ out,  // (B, T, C)
                                 const Real* __restrict__ qkv,  // (B, T, 3C)
                                 int T, int C, int NH, int HS, float scale, float scale_log2,
                                 bool vector16) {
    using namespace attention_detail;
    static_assert(std::is_same_v<Real, float>, "attention: the CUDA kernels are FP32 only");
    using shape = head_tile<D>;
    extern __shared__ float4 smem_f4[];
    float* Qs = reinterpret_cast<float*>(smem_f4);  // (64, D + 4)
    float* dOs = Qs + shape::size;                  // (64, D + 4)
    float* Ks = dOs + shape::size;                  // (64, D + 4)
    float* Vs = Ks + shape::size;                   // (64, D + 4)
    float* dSs = Vs + shape::size;                  // (64 queries, score_ld): dS / sqrt(HS); out before
    float* lse_s = dSs + shape::score_size;         // (64 queries)
    float* Dsum = lse_s + tile;                     // (64 queries)

    const thread_place at = place<tile_x>(static_cast<int>(threadIdx.x));
    const int ty = at.ty, tx = at.tx;
    const int n_tiles = static_cast<int>(gridDim.y);
    const int qt = n_tiles - 1 - static_cast<int>(blockIdx.y);
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int q0 = qt * tile;
    const std::size_t ld = 3 * static_cast<std::size_t>(C);
    const std::size_t row0 = static_cast<std::size_t>(b) * T;
    const float* q = qkv + row0 * ld + h * HS;  // (T, HS), rows ld apart
    const float* k = q + C;                     // (T, HS)
    const float* v = q + 2 * C;                 // (T, HS)
    const std::size_t tile_offset = row0 * C + q0 * static_cast<std::size_t>(C) + h * HS;
    const int rows = min(tile, T - q0);

    // Copy groups, in commit order: {Q, dO, out, lse, V0}, {K0}, then per key tile {V next}, {K next}.
    load_tile_async<D>(Qs, q + q0 * ld, ld, rows, HS, vector16);
    load_tile_async<D>(dOs, dout + tile_offset, C, rows, HS, vector16);
    load_tile_async<D, shape::score_ld>(dSs, out + tile_offset, C, rows, HS, vector16);
    load_lse_async(lse_s, lse + static_cast<std::size_t>(bh) * T, q0, T);
    load_tile_async<D>(Vs, v, ld, min(tile, T), HS, vector16);
    copy_async_commit();
    load_tile_async<D>(Ks, k, ld, min(tile, T), HS, vector16);
    copy_async_commit();

    float dq[rows_per_thread][shape::out_cols] = {};
    for (int kt = 0; kt <= qt; ++kt) {
        const bool last = kt == qt;  // the diagonal tile
        copy_async_wait<1>();
        __syncthreads();  // V(kt) (and Q, dO, out, lse) visible
        if (kt == 0) row_dots<D>(Dsum, dOs, dSs, ty, tx);  // dSs holds out until the first dS
        float dp[rows_per_thread][cols_per_thread];
        tile_dot<D>(dp, dOs, Vs, ty, tx);  // dP = dO V^T
        __syncthreads();  // everyone is done with Vs (and with out in dSs); Dsum visible
        if (!last) {
            load_tile_async<D>(Vs, v + (kt + 1) * tile * ld, ld, min(tile, T - (kt + 1) * tile), HS, vector16);
            copy_async_commit();
            copy_async_wait<1>();  // K(kt) landed; V(kt + 1) may still be in flight
        } else {
            copy_async_wait<0>();
        }
        __syncthreads();  // K(kt) visible
        float s[rows_per_thread][cols_per_thread];
        tile_dot<D>(s, Qs, Ks, ty, tx);  // S = Q K^T
#pragma unroll
        for (int i = 0; i < rows_per_thread; ++i) {
            const int query = ty + 16 * i;
            const float row_lse2 = lse_s[query] * log2e, row_term = Dsum[query];
#pragma unroll
            for (int j = 0; j < cols_per_thread; ++j) {
                const int key = tx + tile_x * j;
                const bool seen = !last || key <= query;
                const float p = seen ? exp2_ftz(s[i][j] * scale_log2 - row_lse2) : 0.f;
                dSs[query * shape::score_ld + key] = p * (dp[i][j] - row_term) * scale;
            }
        }
        __syncthreads();  // dS visible
        tile_mma<D>(dq, dSs, Ks, ty, tx);  // dQ += dS K
        __syncthreads();  // everyone is done with Ks, dSs
        if (!last) {
            load_tile_async<D>(Ks, k + (kt + 1) * tile * ld, ld, min(tile, T - (kt + 1) * tile), HS, vector16);
            copy_async_commit();
        }
    }

#pragma unroll
    for (int i = 0; i < rows_per_thread; ++i) {
        const int t = q0 + ty + 16 * i;
        if (t >= T) continue;
        float* dq_row = dqkv + (row0 + t) * ld + h * HS;  // (HS)
#pragma unroll
        for (int n = 0; n < shape::out_cols; ++n) {
            const int d = shape::column(n, tx);
            if (d < HS) dq_row[d] += dq[i][n];
        }
    }
}

namespace attention_detail {

// HS = C / NH, or a strata::error naming the sizes when the kernels cannot take them.
inline std::size_t head_size(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
    if (NH == 0 || C % NH != 0)
        throw error("attention (cuda): C=" + std::to_string(C) + " channels do not split into NH=" +
                        std::to_string(NH) + " heads of equal size",
                    "choose NH so that it divides C (GPT-2: C=768, NH=12)");
    const std::size_t HS = C / NH;
    if (HS > 128)
        throw error("attention (cuda): head size HS=" + std::to_string(HS) + " (C=" + std::to_string(C) +
                        ", NH=" + std::to_string(NH) + ") is above the largest the kernels take, 128",
                    "use more heads so that C / NH <= 128, or add a D = 256 instance to "
                    "kernels/cuda/attention.cuh");
    // Grid y counts query tiles (at most 65535); the kernels index rows and channels with int.
    constexpr std::size_t int_max = 0x7fffffff;
    if ((T + tile - 1) / tile > 65535 || B * NH > int_max || 3 * C > int_max)
        throw error("attention (cuda): B=" + std::to_string(B) + ", T=" + std::to_string(T) + ", C=" +
                        std::to_string(C) + ", NH=" + std::to_string(NH) + " is beyond the kernels' grid",
                    "T is at most 65535 * 64, B * NH and 3C at most 2^31 - 1");
    return HS;
}

// Calls f(std::integral_constant<int, D>{}) with the padded head size D >= HS.
template <class F>
void with_padded_head_size(std::size_t HS, F&& f) {
    if (HS <= 16)
        f(std::integral_constant<int, 16>{});
    else if (HS <= 32)
        f(std::integral_constant<int, 32>{});
    else if (HS <= 64)
        f(std::integral_constant<int, 64>{});
    else
        f(std::integral_constant<int, 128>{});
}

// Lets kernel use `floats` of dynamic shared memory (beyond the default 48 KB).
template <class Kernel>
void allow_shared_memory(Kernel kernel, int floats, const char* name) {
    const cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    floats * static_cast<int>(sizeof(float)));
    if (status != cudaSuccess)
        throw error(std::string("CUDA kernel ") + name + " cannot get " + std::to_string(floats * sizeof(float)) +
                        " bytes of shared memory: " + cudaGetErrorString(status),
                    "the attention kernels need an sm_90-class GPU (up to 172 KB of shared memory per block)");
}

// Whether the kernels may copy 16 bytes at a time: every head row starts 16-byte aligned.
inline bool rows_16_byte_aligned(std::size_t C, std::size_t HS, std::initializer_list<const void*> pointers) {
    if (C % 4 != 0 || HS % 4 != 0) return false;
    for (const void* p : pointers)
        if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
    return true;
}

inline float score_scale(std::size_t HS) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(HS))); }
inline float score_scale_log2(std::size_t HS) {
    return static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(HS)));
}

}  // namespace attention_detail

// out = softmax(q k^T / sqrt(HS), causal) v per head; lse = log-sum-exp of each query row's
// scaled scores (natural log), all that attention_backward needs besides the inputs.
template <class Real>
void attention_forward(Real* out,        // (B, T, C)
                       Real* lse,        // (B, NH, T)
                       const Real* qkv,  // (B, T, 3C)
                       std::size_t B, std::size_t T, std::size_t C, std::size_t NH, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "attention (cuda): strict FP32 kernels; Real must be float");
    using namespace attention_detail;
    const std::size_t HS = head_size(B, T, C, NH);
    if (B == 0 || T == 0 || HS == 0) return;
    const dim3 grid(static_cast<unsigned>(B * NH), ceil_div(T, tile));
    with_padded_head_size(HS, [&]<int D>(std::integral_constant<int, D>) {
        const auto kernel = attention_forward_kernel<Real, D>;
        allow_shared_memory(kernel, forward_smem<D>, "attention_forward_kernel");
        kernel<<<grid, threads, forward_smem<D> * sizeof(float), stream>>>(
            out, lse, qkv, static_cast<int>(T), static_cast<int>(C), static_cast<int>(NH), static_cast<int>(HS),
            score_scale_log2(HS), rows_16_byte_aligned(C, HS, {qkv}));
        check_launch("attention_forward_kernel");
    });
}

// The two halves of attention_backward, for callers that want them on two streams: they read
// the same inputs and write disjoint channels of dqkv (dk, dv: [C, 3C); dq: [0, C)).
template <class Real>
void attention_backward_dkdv(Real* dqkv,        // (B, T, 3C): accumulates into dk, dv
                             const Real* lse,   // (B, NH, T)
                             const Real* dout,  // (B, T, C)
                             const Real* out,   // (B, T, C)
                             const Real* qkv,   // (B, T, 3C)
                             std::size_t B, std::size_t T, std::size_t C, std::size_t NH, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "attention (cuda): strict FP32 kernels; Real must be float");
    using namespace attention_detail;
    const std::size_t HS = head_size(B, T, C, NH);
    if (B == 0 || T == 0 || HS == 0) return;
    const dim3 grid(static_cast<unsigned>(B * NH), ceil_div(T, tile));
    with_padded_head_size(HS, [&]<int D>(std::integral_constant<int, D>) {
        const auto kernel = attention_backward_dkdv_kernel<Real, D>;
        allow_shared_memory(kernel, dkdv_smem<D>, "attention_backward_dkdv_kernel");
        kernel<<<grid, threads, dkdv_smem<D> * sizeof(float), stream>>>(
            dqkv, lse, dout, out, qkv, static_cast<int>(T), static_cast<int>(C), static_cast<int>(NH),
            static_cast<int>(HS), score_scale(HS), score_scale_log2(HS), rows_16_byte_aligned(C, HS, {qkv, dout, out}));
        check_launch("attention_backward_dkdv_kernel");
    });
}

template <class Real>
void attention_backward_dq(Real* dqkv,        // (B, T, 3C): accumulates into dq
                           const Real* lse,   // (B, NH, T)
                           const Real* dout,  // (B, T, C)
                           const Real* out,   // (B, T, C)
                           const Real* qkv,   // (B, T, 3C)
                           std::size_t B, std::size_t T, std::size_t C, std::size_t NH, cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "attention (cuda): strict FP32 kernels; Real must be float");
    using namespace attention_detail;
    const std::size_t HS = head_size(B, T, C, NH);
    if (B == 0 || T == 0 || HS == 0) return;
    const dim3 grid(static_cast<unsigned>(B * NH), ceil_div(T, tile));
    with_padded_head_size(HS, [&]<int D>(std::integral_constant<int, D>) {
        const auto kernel = attention_backward_dq_kernel<Real, D>;
        allow_shared_memory(kernel, dq_smem<D>, "attention_backward_dq_kernel");
        kernel<<<grid, threads, dq_smem<D> * sizeof(float), stream>>>(
            dqkv, lse, dout, out, qkv, static_cast<int>(T), static_cast<int>(C), static_cast<int>(NH),
            static_cast<int>(HS), score_scale(HS), score_scale_log2(HS), rows_16_byte_aligned(C, HS, {qkv, dout, out}));
        check_launch("attention_backward_dq_kernel");
    });
}

// Accumulates (+=) into dqkv: dq, dk, dv through out = softmax(q k^T / sqrt(HS)) v, given the
// forward's out and lse. Two kernels on `stream`, no atomics: bitwise reproducible.
template <class Real>
void attention_backward(Real* dqkv,        // (B, T, 3C)
                        const Real* lse,   // (B, NH, T)
                        const Real* dout,  // (B, T, C)
                        const Real* out,   // (B, T, C)
                        const Real* qkv,   // (B, T, 3C)
                        std::size_t B, std::size_t T, std::size_t C, std::size_t NH, cudaStream_t stream) {
    attention_backward_dkdv(dqkv, lse, dout, out, qkv, B, T, C, NH, stream);
    attention_backward_dq(dqkv, lse, dout, out, qkv, B, T, C, NH, stream);
}

// The float instances are compiled once, in strata's src/cuda/attention_forward.cu and
// attention_backward.cu (strata::cuda, strata_cuda_ops): a unit that includes this header links
// them instead of compiling the kernels again.
#define STRATA_CUDA_ATTENTION_FORWARD_INSTANCES(prefix) \
    prefix void attention_forward<float>(float*, float*, const float*, std::size_t, std::size_t, std::size_t, \
                                         std::size_t, cudaStream_t);
#define STRATA_CUDA_ATTENTION_BACKWARD_INSTANCES(prefix) \
    prefix void attention_backward_dkdv<float>(float*, const float*, const float*, const float*, const float*, \
                                               std::size_t, std::size_t, std::size_t, std::size_t, cudaStream_t); \
    prefix void attention_backward_dq<float>(float*, const float*, const float*, const float*, const float*, \
                                             std::size_t, std::size_t, std::size_t, std::size_t, cudaStream_t); \
    prefix void attention_backward<float>(float*, const float*, const float*, const float*, const float*, \
                                          std::size_t, std::size_t, std::size_t, std::size_t, cudaStream_t);
STRATA_CUDA_ATTENTION_FORWARD_INSTANCES(extern template)
STRATA_CUDA_ATTENTION_BACKWARD_INSTANCES(extern template)

}  // namespace strata::kernels::cuda
