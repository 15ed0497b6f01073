// Causal attention backward that computes each (key tile, query tile) product once: FP32, sm_90,
// deterministic, grouped-query heads. The alternative to attention.cuh's two-kernel backward,
// chosen by attention_backward_algo. ops<cuda_backend>::attention_backward runs `partials` where
// its workspace takes at most attention_partials_limit_bytes, `ordered` at long context
// (attention_backward_pick says where): measured (bench/attention_backward_bench.cu, H100,
// 2026-12-06/07), partials is 1.31x the two-kernel backward at B=8 T=1024 NH=12 HS=64, `ordered`
// 1.26x at T = 16384 and 1.33x at 65536, and at head size 128 both 1.4x or more.
//
// Glossary: B batch, T time, NH query heads, NKV key/value heads (NKV divides NH; NKV == NH is
// multi-head attention), HS head size, A = NH HS, KV = NKV HS, D the head size padded to the
// template size (16, 32, 64 or 128), n = ceil(T / 64) tiles.
//
// Layout: a qkv row (b, t) holds q in channels [0, A), k in [A, A + KV), v in [A + KV, A + 2 KV);
// query head h owns channels [h HS, (h+1) HS) of q and reads key/value head g = h / (NH / NKV).
// With NKV == NH this is attention.cuh's (B, T, 3C) layout (C = A). dqkv has the layout of qkv;
// dout and out are (B, T, A); lse is the forward's (B, NH, T).
//
// The work of one (64-key tile kt, 64-query tile qt) pair, score rows being keys (as the dk/dv
// kernel of attention.cuh): S^T = K Q^T, P^T = exp(S^T - lse), dP^T = V dO^T,
// dS^T = P^T (dP^T - Dsum) / sqrt(HS), then dV += P^T dO, dK += dS^T Q, dQ(qt) += dS K: five
// (64, 64, D) products where the two-kernel backward executes seven. One block per (b, g, kt)
// walks the group's query heads and, for each, the query tiles qt = kt .. n-1, keeping dK and dV
// of its key tile in registers across all of them (so GQA's dk, dv come out summed over the group:
// no expand/reduce pass). Dsum = rowsum(dO * out) is computed once per query row beforehand
// (attention_row_dots_kernel) and read per tile.
//
// dQ(qt) receives a contribution from every key tile kt <= qt, computed by different blocks. So that
// no floating-point addition happens in an arbitrary order, dq(qt) = dq_start + c(qt) + c(qt-1) +
// ... + c(0): each query tile adds its key tiles' contributions in descending kt, always that
// order, by one of:
//   partials  each block stores its contribution c(kt, qt) in a workspace of B NH 64 n(n+1)/2 D
//             floats (the causal triangle of tile pairs); a second kernel adds them into dqkv in
//             the order above. The triangle grows with T^2 (214 MB at B=8, T=1024, NH=12, D=64);
//             where it is larger than the workspace bound, the query tiles run in bands (a
//             launch of both kernels each, every key tile kt < the band's end over the band's
//             query tiles), each band's partials within the bound: dq is the same sum in the same
//             order, dk and dv leave the blocks once per band.
//   ordered   each block adds its contribution into dqkv itself, once the block of key tile
//             kt+1 has added its own to that query tile: a counter per (b, h, qt) says how many
//             key tiles have added so far (release/acquire at GPU scope). Block kt reaches query
//             tile qt one tile after block kt+1 did, so with blocks of one head running side by
//             side nothing waits. Blocks take their (b, g, kt) from a global ticket in the order
//             they start (kt = n-1 first within each head), so the block a block waits for has
//             always started: no deadlock whatever order the hardware dispatches blocks in.
//             Workspace: Dsum and B NH n + 1 counters, linear in T. (Heaviest first, as partials'
//             grid runs, does not fit this order: key tile 0, the heaviest, waits on tile 1's
//             block, which might not have started, and the reverse order c(0) + c(1) + ... makes
//             block kt wait one step on block kt-1 at every tile: a head's blocks started together
//             idle 1, 2, ..., n-1 steps, half of their time. Within a head lightest first is
//             wait-free; only the grid's last head runs alone at the end.) The 128-thread blocks
//             add by a load and a store per element (all loads first), the wide ones by float4
//             additions performed in L2 (red.global.add: the same additions, no round trip).
// Both give the same bits (the same float additions in the same order), run to run.
//
// Arithmetic is FP32 FMA on the CUDA cores, the forward's (attention.cuh) tile products and
// shared-memory layout; no TF32. At head size 64 the blocks are wide (attention_detail::wide: 256
// threads of 4 x 4 elements instead of 128 of 4 x 8, twice the warps per multiprocessor): the same
// products and sums, so the same bits.
#pragma once

#include <strata/core/error.hpp>            // strata::error
#include <strata/kernels/cuda/attention.cuh>  // attention_detail (tiles, copies, products), attention_backward
#include <strata/kernels/cuda/launch.cuh>   // ceil_div, check_launch

#include <cuda_runtime.h>  // cudaStream_t, cudaMemsetAsync

#include <algorithm>    // std::max, std::min
#include <cstddef>      // std::size_t
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v, std::integral_constant

namespace strata::kernels::cuda {

enum class attention_backward_algo {
    recompute,  // attention.cuh: dk/dv per key tile and dq per query tile, each recomputing S and dP (7 products)
    partials,   // one pass per key tile (5 products), dq contributions summed in order from a workspace (T^2)
    ordered,    // one pass per key tile (5 products), dq contributions added in place in a fixed order (T)
};

inline const char* to_string(attention_backward_algo algo) {
    switch (algo) {
    case attention_backward_algo::recompute: return "recompute";
    case attention_backward_algo::partials: return "partials";
    case attention_backward_algo::ordered: return "ordered";
    }
    return "?";
}

namespace attention_detail {

// The padded head size D >= HS of the kernels' template.
inline int padded_head_size(std::size_t HS) { return HS <= 16 ? 16 : HS <= 32 ? 32 : HS <= 64 ? 64 : 128; }

// partials in bands of query tiles, so that the workspace stays bounded at any T. Band [q0, q_end)
// (W = q_end - q0 query tiles) runs every key tile kt < q_end over the band's query tiles
// max(kt, q0) .. q_end - 1: per (b, h) its partials are q0 W + W (W + 1) / 2 tiles of (64, D),
// key tile kt's first at tile kt W - m (m - 1) / 2 (m = max(0, kt - q0)), ordered by query tile
// after it. One band [0, n) is the whole causal triangle, n (n + 1) / 2 tiles.
__host__ __device__ inline std::size_t band_tiles(std::size_t q0, std::size_t W) { return q0 * W + W * (W + 1) / 2; }
__host__ __device__ inline std::size_t band_tile_index(int kt, int qt, int q0, int W) {
    const std::size_t m = kt > q0 ? static_cast<std::size_t>(kt - q0) : 0;
    return static_cast<std::size_t>(kt) * W - m * (m - 1) / 2 + static_cast<std::size_t>(qt - (kt > q0 ? kt : q0));
}

// The end of the band that starts at query tile q0: the largest q_end <= n whose partials take at
// most max_tiles per (b, h); q0 where not even one query tile fits.
inline std::size_t band_end(std::size_t q0, std::size_t n, std::size_t max_tiles) {
    std::size_t lo = q0, hi = n;
    while (lo < hi) {
        const std::size_t mid = lo + (hi - lo + 1) / 2;
        if (band_tiles(q0, mid - q0) <= max_tiles) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Where each part of the key-tile backward's workspace starts, in bytes (256-byte aligned parts).
struct key_tile_workspace {
    std::size_t dsum = 0;      // (B, NH, T) floats: dout . out per query row
    std::size_t counters = 0;  // ordered: (B, NH, n) ints, then the block ticket
    std::size_t partials = 0;  // partials: per (b, h): the largest band's tiles of (64, D) floats
    std::size_t band_room = 0;  // partials: the most tiles a band may take per (b, h); 0: one band [0, n)
    std::size_t bytes = 0;     // the whole workspace
};

// partials' bands follow from the shape and limit_bytes alone (so the same bits on every run of a
// shape): one band where the whole triangle fits the limit, or where not even the last query tile
// alone does (the workspace is then the whole triangle, above the limit: attention_backward_pick
// does not choose partials); else bands as wide as the limit allows, from query tile 0 on.
inline key_tile_workspace key_tile_layout(attention_backward_algo algo, std::size_t B, std::size_t T, std::size_t NH,
                                          std::size_t HS, std::size_t limit_bytes) {
    auto align = [](std::size_t bytes) { return (bytes + 255) / 256 * 256; };
    const std::size_t n = (T + tile - 1) / tile, D = static_cast<std::size_t>(padded_head_size(HS));
    key_tile_workspace w;
    if (algo == attention_backward_algo::recompute) return w;
    std::size_t end = align(B * NH * T * sizeof(float));
    if (algo == attention_backward_algo::ordered) {
        w.counters = end;
        end = align(end + (B * NH * n + 1) * sizeof(int));
    } else {
        w.partials = end;
        const std::size_t tile_bytes = B * NH * tile * D * sizeof(float);  // one tile of every (b, h)
        const std::size_t room = limit_bytes > end && tile_bytes > 0 ? (limit_bytes - end) / tile_bytes : 0;
        std::size_t largest = band_tiles(0, n);
        if (largest > room && n <= room) {  // bands: each fits, the last query tile alone (n tiles) too
            w.band_room = room;
            largest = 0;
            for (std::size_t q0 = 0; q0 < n;) {
                const std::size_t q_end = band_end(q0, n, room);
                largest = std::max(largest, band_tiles(q0, q_end - q0));
                q0 = q_end;
            }
        }
        end = align(end + largest * tile_bytes);
    }
    w.bytes = end;
    return w;
}

// How many bands partials runs in for a shape (1: the whole triangle at once).
inline std::size_t partials_band_count(const key_tile_workspace& w, std::size_t T) {
    const std::size_t n = (T + tile - 1) / tile;
    if (w.band_room == 0) return 1;
    std::size_t bands = 0;
    for (std::size_t q0 = 0; q0 < n; ++bands) q0 = band_end(q0, n, w.band_room);
    return bands;
}

// The dQ contribution dS K is computed in dq_parts parts of a thread's columns, one after the
// other, each stored (or added) before the next: fewer live registers than all of them at once,
// and each element is the same sum in the same order whatever the parts. A part is dq_groups
// groups of vec contiguous columns (shape::column). (ptxas, sm_90, 255 registers: spill stores
// 28 -> 24 bytes at D=64 for partials, 72 -> 60 at D=128; the peak is elsewhere, dk and dv (2 x 4
// x D/8 registers) live through tile_dot's fully unrolled loop.)
template <int D>
inline constexpr int dq_parts = head_tile<D>::out_cols / head_tile<D>::vec >= 2 ? 2 : 1;
template <int D>
inline constexpr int dq_groups = head_tile<D>::out_cols / head_tile<D>::vec / dq_parts<D>;
template <int D>
inline constexpr int dq_cols = dq_groups<D> * head_tile<D>::vec;  // a thread's columns of one part

// acc[i][n] += sum_c St[c][4 ty + i] * V[c][column(first_group vec + n)], c = 0, 1, ..., 63 in
// order: the product (S^T)^T V, for dq_groups<D> column groups from first_group on, with the left
// factor stored transposed (score rows are keys). Each thread owns 4 consecutive rows, read as one
// float4 of an St row (a warp's 4 ty read 64 contiguous bytes: one wavefront), and the columns of
// tile_mma.
template <int D>
__device__ inline void tile_mma_transposed(float (&acc)[rows_per_thread][dq_cols<D>],
                                           const float* St,  // (64, score_ld): the transposed left factor
                                           const float* V,   // (64, D + 4)
                                           int first_group, int ty, int tx) {
    using shape = head_tile<D>;
    constexpr int vec = shape::vec;
    static_assert(rows_per_thread == 4, "attention: one float4 of St per row group");
#pragma unroll 2
    for (int c = 0; c < tile; ++c) {
        const float4 p = *reinterpret_cast<const float4*>(St + c * shape::score_ld + 4 * ty);
        float v[dq_cols<D>];
#pragma unroll
        for (int g = 0; g < dq_groups<D>; ++g) {
            float part[vec];
            load_vec<vec>(part, V + c * shape::ld + shape::column((first_group + g) * vec, tx));
#pragma unroll
            for (int e = 0; e < vec; ++e) v[g * vec + e] = part[e];
        }
        const float pc[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
        for (int i = 0; i < rows_per_thread; ++i)
#pragma unroll
            for (int n = 0; n < dq_cols<D>; ++n) acc[i][n] = fmaf(pc[i], v[n], acc[i][n]);
    }
}

// ordered: dq[t][column] += acc for this thread's rows t = 4 ty + i < rows and its columns of one
// part, in place through L2 (__ldcg/__stcg: no stale L1 line of another block's addition). Every
// load is issued before any store, so their L2 latencies overlap; float4 where `vector` (rows
// 16-byte aligned, HS a multiple of 4: a group of 4 columns is then wholly inside HS or outside).
// The additions are old + acc, whatever the path: the same bits. Rows from one base by int
// offsets, as in wide::add_dq_in_place (ptxas: the head-size-128 ordered kernel's spill loads
// 272 -> 252 bytes, head size 64's 80 -> 44).
template <int D>
__device__ inline void add_dq_in_place(float* dq,  // (rows, HS), rows ld apart: one query tile of one head
                                       std::size_t ld, const float (&acc)[rows_per_thread][dq_cols<D>],
                                       int first_group, int rows, int HS, bool vector, int ty, int tx) {
    using shape = head_tile<D>;
    constexpr int vec = shape::vec;
    const int ld_rows = static_cast<int>(ld);  // 64 rows of a qkv row's width: within 2^31 (check_key_tile_shape)
    float* base = dq + static_cast<std::size_t>(4 * ty) * ld;
    float old[rows_per_thread][dq_cols<D>];
#pragma unroll
    for (int i = 0; i < rows_per_thread; ++i) {
        const float* row = base + i * ld_rows;
        const bool inside = 4 * ty + i < rows;
#pragma unroll
        for (int g = 0; g < dq_groups<D>; ++g) {
            const int d0 = shape::column((first_group + g) * vec, tx);
            if constexpr (vec == 4) {
                if (vector) {
                    const float4 o = inside && d0 < HS ? __ldcg(reinterpret_cast<const float4*>(row + d0))
                                                       : make_float4(0.f, 0.f, 0.f, 0.f);
                    old[i][g * vec] = o.x, old[i][g * vec + 1] = o.y, old[i][g * vec + 2] = o.z,
                    old[i][g * vec + 3] = o.w;
                    continue;
                }
            }
#pragma unroll
            for (int e = 0; e < vec; ++e) old[i][g * vec + e] = inside && d0 + e < HS ? __ldcg(row + d0 + e) : 0.f;
        }
    }
#pragma unroll
    for (int i = 0; i < rows_per_thread; ++i) {
        if (4 * ty + i >= rows) continue;
        float* row = base + i * ld_rows;
#pragma unroll
        for (int g = 0; g < dq_groups<D>; ++g) {
            const int d0 = shape::column((first_group + g) * vec, tx);
            const float* a = acc[i] + g * vec;
            const float* o = old[i] + g * vec;
            if constexpr (vec == 4) {
                if (vector) {
                    if (d0 < HS)
                        __stcg(reinterpret_cast<float4*>(row + d0),
                               make_float4(o[0] + a[0], o[1] + a[1], o[2] + a[2], o[3] + a[3]));
                    continue;
                }
            }
#pragma unroll
            for (int e = 0; e < vec; ++e)
                if (d0 + e < HS) __stcg(row + d0 + e, o[e] + a[e]);
        }
    }
}

__device__ inline int load_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ inline void store_release(int* p, int v) {
    asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// The key-tile backward at head size 64 in wide blocks: 256 threads, a 16 x 16 grid (ty, tx), each
// thread 4 x 4 elements of a (64, 64) tile where the 128-thread blocks take 4 x 8. The same tiles,
// products and summation orders, so the same bits; half the registers per thread (dk, dv 2 x 16,
// a score tile 16), so two blocks of 8 warps fit a multiprocessor where the 128-thread kernel
// (255 registers, spilling) ran two blocks of 4: its schedulers had ~2 warps each and issued on 53 %
// of cycles (Nsight Compute, H100, B=1 T=16384 NH=12, 2026-12-06), its FMA pipe 43 % busy.
// A warp is 4 ty x 8 tx placed by attention_detail::place: 8 float4 reads per 64 FMAs of a 4 x 4
// thread tile at 2 wavefronts each. (As 2 ty x 16 tx with tx in lane bits 0-3 the tx-side reads
// took 4: shared memory was 79 % busy at an FMA pipe 47.5 % busy; now 52 % at 54 %, 1.07x,
// Nsight Compute, H100, B=1 T=16384, 2026-12-06.)
namespace wide {
constexpr int threads = 256;
constexpr int grid_x = 16;  // tx: threads along a score row; ty: 16 rows of the grid
constexpr int rows = 4;     // a thread's score rows: ty + 16 i (keys)
constexpr int cols = 4;     // a thread's score columns: tx + 16 j (queries); its head channels 4 tx .. 4 tx + 3
constexpr int D = 64;
constexpr int ld = head_tile<D>::ld;  // 68: a warp's 8 tx rows (16 B each) fill 32 distinct banks
// P^T and dS^T rows 72 floats apart: a warp's four key rows (ty .. ty + 3, place) are 8 banks
// apart, so its scalar stores (4 keys x 8 queries) hit 32 distinct banks; 16-byte aligned rows.
constexpr int score_ld = 72;
constexpr int score_size = tile * score_ld;
constexpr int smem_floats = 4 * head_tile<D>::size + 2 * score_size + 2 * tile;  // K V Q dO, P^T dS^T, lse Dsum

// acc[i][j] = A[ty + 16 i] . B[tx + 16 j] over the 64 channels in order (tile_dot's sums).
__device__ inline void tile_dot(float (&acc)[rows][cols], const float* A, const float* B, int ty, int tx) {
#pragma unroll
    for (int i = 0; i < rows; ++i)
#pragma unroll
        for (int j = 0; j < cols; ++j) acc[i][j] = 0.f;
#pragma unroll
    for (int d = 0; d < D; d += 4) {
        float4 a[rows], b[cols];
#pragma unroll
        for (int i = 0; i < rows; ++i) a[i] = *reinterpret_cast<const float4*>(A + (ty + grid_x * i) * ld + d);
#pragma unroll
        for (int j = 0; j < cols; ++j) b[j] = *reinterpret_cast<const float4*>(B + (tx + grid_x * j) * ld + d);
#pragma unroll
        for (int i = 0; i < rows; ++i)
#pragma unroll
            for (int j = 0; j < cols; ++j) {
                acc[i][j] = fmaf(a[i].x, b[j].x, acc[i][j]);
                acc[i][j] = fmaf(a[i].y, b[j].y, acc[i][j]);
                acc[i][j] = fmaf(a[i].z, b[j].z, acc[i][j]);
                acc[i][j] = fmaf(a[i].w, b[j].w, acc[i][j]);
            }
    }
}

// acc[i][n] += sum_c P[ty + 16 i][c] * V[c][4 tx + n], c = 0 .. 63 in order (tile_mma's sums).
// Unrolled by 4 here and tile_mma_transposed by 8 (were 2 and 4): the wide ordered backward
// 1.018-1.022x (H100, 2026-12-07; partials, the same loops, not timed); fully unrolled, both
// 0.976-0.986x; the same bits.
__device__ inline void tile_mma(float (&acc)[rows][cols], const float* P, const float* V, int ty, int tx) {
#pragma unroll 4
    for (int c = 0; c < tile; c += 4) {
        float4 p[rows];
#pragma unroll
        for (int i = 0; i < rows; ++i) p[i] = *reinterpret_cast<const float4*>(P + (ty + grid_x * i) * score_ld + c);
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
            const float4 v = *reinterpret_cast<const float4*>(V + (c + cc) * ld + 4 * tx);
#pragma unroll
            for (int i = 0; i < rows; ++i) {
                const float pc = cc == 0 ? p[i].x : cc == 1 ? p[i].y : cc == 2 ? p[i].z : p[i].w;
                acc[i][0] = fmaf(pc, v.x, acc[i][0]);
                acc[i][1] = fmaf(pc, v.y, acc[i][1]);
                acc[i][2] = fmaf(pc, v.z, acc[i][2]);
                acc[i][3] = fmaf(pc, v.w, acc[i][3]);
            }
        }
    }
}

// acc[i][n] += sum_c St[c][4 ty + i] * K[c][4 tx + n], c = 0 .. 63 in order: dQ = dS K with dS
// stored transposed (tile_mma_transposed's sums); a thread owns query rows 4 ty .. 4 ty + 3.
__device__ inline void tile_mma_transposed(float (&acc)[rows][cols], const float* St, const float* K, int ty, int tx) {
#pragma unroll 8
    for (int c = 0; c < tile; ++c) {
        const float4 p = *reinterpret_cast<const float4*>(St + c * score_ld + 4 * ty);
        const float4 v = *reinterpret_cast<const float4*>(K + c * ld + 4 * tx);
        const float pc[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
        for (int i = 0; i < rows; ++i) {
            acc[i][0] = fmaf(pc[i], v.x, acc[i][0]);
            acc[i][1] = fmaf(pc[i], v.y, acc[i][1]);
            acc[i][2] = fmaf(pc[i], v.z, acc[i][2]);
            acc[i][3] = fmaf(pc[i], v.w, acc[i][3]);
        }
    }
}

// ordered: dq[4 ty + i][4 tx + n] += acc, four floats at a time as one addition performed in L2
// (red.global.add.v4.f32, sm_90), issued only after the block of key tile kt+1 has released the
// query tile: the additions old + acc that a load and a store made, in the same order, so the same
// bits (PTX: f32 additions in L2 round to nearest even and flush subnormals, so only a subnormal
// sum could differ), without the load's L2 round trip on the block's path. Rows 16-byte aligned,
// HS a multiple of 4 (attention_backward_key_tiles runs the 128-thread kernel where they are not).
// Measured against the load and store (H100, 2026-12-07, the same bits): the wide ordered backward
// 1.018x at B=8 T=1024, 1.007x at T = 16384, 1.008x at 65536; with the next dO tile's copy issued
// before the additions (one barrier fewer a step) 0.99x instead.
__device__ inline void add_dq_in_l2(float* dq, std::size_t ld_dq, const float (&acc)[rows][cols], int valid_rows,
                                    int HS, int ty, int tx) {
    const int d0 = 4 * tx;
    const int ld = static_cast<int>(ld_dq);
    float* base = dq + 4 * ty * static_cast<std::size_t>(ld) + d0;
#pragma unroll
    for (int i = 0; i < rows; ++i) {
        if (4 * ty + i >= valid_rows || d0 >= HS) continue;
        float* row = base + i * ld;
#if __CUDA_ARCH__ >= 900
        asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(row), "f"(acc[i][0]), "f"(acc[i][1]),
                     "f"(acc[i][2]), "f"(acc[i][3])
                     : "memory");
#else
#pragma unroll
        for (int n = 0; n < cols; ++n) atomicAdd(row + n, acc[i][n]);
#endif
    }
}

}  // namespace wide

}  // namespace attention_detail

// Dsum[b, h, t] = dout[b, t, h] . out[b, t, h], one warp per row, lanes over channels then a fixed
// butterfly: the same bits every run.
template <class Real>
__global__ void attention_row_dots_kernel(Real* __restrict__ Dsum,        // (B, NH, T)
                                          const Real* __restrict__ dout,  // (B, T, NH HS)
                                          const Real* __restrict__ out,   // (B, T, NH HS)
                                          std::size_t rows, int T, int NH, int HS) {
    static_assert(std::is_same_v<Real, float>, "attention: the CUDA kernels are FP32 only");
    const std::size_t row = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;  // (b, t, h)
    const int lane = static_cast<int>(threadIdx.x % 32);
    if (row >= rows) return;  // whole warps leave together: rows are per warp
    const float* a = dout + row * HS;
    const float* o = out + row * HS;
    float sum = 0.f;
    for (int d = lane; d < HS; d += 32) sum = fmaf(a[d], o[d], sum);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) {
        const std::size_t h = row % NH, bt = row / NH, t = bt % T, b = bt / T;
        Dsum[(b * NH + h) * T + t] = sum;
    }
}

// One block per (b, g, 64-key tile kt): see the file comment. `ordered` selects how dq leaves the
// block (added in place after the block of kt+1, or stored to dq_partials). partials runs one band
// of query tiles [q_first, q_end) per launch, key tiles kt < q_end (ordered: 0, n).
template <class Real, int D, bool ordered>
__global__ void __launch_bounds__(attention_detail::threads)
    attention_backward_key_tile_kernel(Real* __restrict__ dqkv,          // (B, T, A + 2 KV)
                                       Real* __restrict__ dq_partials,   // partials: (B NH, n(n+1)/2, 64, D)
                                       int* __restrict__ counters,       // ordered: (B NH, n), zero at launch
                                       int* __restrict__ ticket_counter, // ordered: zero at launch
                                       const Real* __restrict__ lse,     // (B, NH, T)
                                       const Real* __restrict__ Dsum,    // (B, NH, T)
                                       const Real* __restrict__ dout,    // (B, T, A)
                                       const Real* __restrict__ qkv,     // (B, T, A + 2 KV)
                                       int T, int NH, int NKV, int HS, float scale, float scale_log2,
                                       bool vector16, bool dq_vector16, int q_first, int q_end) {
    using namespace attention_detail;
    static_assert(std::is_same_v<Real, float>, "attention: the CUDA kernels are FP32 only");
    using shape = head_tile<D>;
    extern __shared__ float4 smem_f4[];
    float* Ks = reinterpret_cast<float*>(smem_f4);  // (64, D + 4)
    float* Vs = Ks + shape::size;                   // (64, D + 4)
    float* Qs = Vs + shape::size;                   // (64, D + 4)
    float* dOs = Qs + shape::size;                  // (64, D + 4)
    float* Pts = dOs + shape::size;                 // (64 keys, score_ld): P^T
    float* dSts = Pts + shape::score_size;          // (64 keys, score_ld): dS^T / sqrt(HS)
    float* lse_s = dSts + shape::score_size;        // (64 queries)
    float* Dsum_s = lse_s + tile;                   // (64 queries)
    __shared__ int ticket;

    const thread_place at = place<tile_x>(static_cast<int>(threadIdx.x));
    const int ty = at.ty, tx = at.tx;
    const int n_tiles = (T + tile - 1) / tile;
    int bg, kt;
    if constexpr (ordered) {
        // The order blocks start in: within a head, key tile n-1 first (see the file comment).
        if (threadIdx.x == 0) ticket = atomicAdd(ticket_counter, 1);
        __syncthreads();
        bg = ticket / n_tiles;
        kt = n_tiles - 1 - ticket % n_tiles;
    } else {
        bg = static_cast<int>(blockIdx.x);  // every head's key tile 0 (the most work) first
        kt = static_cast<int>(blockIdx.y);
    }
    const int b = bg / NKV, g = bg % NKV, group = NH / NKV;
    const int k0 = kt * tile;
    const int A = NH * HS, KV = NKV * HS;
    const std::size_t ld = static_cast<std::size_t>(A) + 2 * static_cast<std::size_t>(KV);
    const std::size_t row0 = static_cast<std::size_t>(b) * T;
    const float* k = qkv + row0 * ld + A + g * HS;  // (T, HS), rows ld apart
    const float* v = k + KV;                        // (T, HS)
    const int first_tile = kt > q_first ? kt : q_first;
    const int tiles_per_head = q_end - first_tile;  // query tiles first_tile .. q_end-1
    const int steps = group * tiles_per_head;

    // (query head, query tile) of step s, and the start of its q, dout, lse and Dsum.
    auto head_of = [&](int s) { return g * group + s / tiles_per_head; };
    auto tile_of = [&](int s) { return first_tile + s % tiles_per_head; };
    auto load_query_side = [&](int s) {
        const int h = head_of(s), q0 = tile_of(s) * tile, rows = min(tile, T - q0);
        const std::size_t bh = static_cast<std::size_t>(b) * NH + h;
        load_tile_async<D>(Qs, qkv + (row0 + q0) * ld + h * HS, ld, rows, HS, vector16);
        load_lse_async(lse_s, lse + bh * T, q0, T);
        load_lse_async(Dsum_s, Dsum + bh * T, q0, T);
    };
    auto load_dout = [&](int s) {
        const int h = head_of(s), q0 = tile_of(s) * tile;
        load_tile_async<D>(dOs, dout + (row0 + q0) * A + h * HS, A, min(tile, T - q0), HS, vector16);
    };

    // Copy groups, in commit order: {K, V, Q(0), lse(0), Dsum(0)}, {dO(0)}, then per step
    // {Q, lse, Dsum next}, {dO next}.
    load_tile_async<D>(Ks, k + k0 * ld, ld, min(tile, T - k0), HS, vector16);
    load_tile_async<D>(Vs, v + k0 * ld, ld, min(tile, T - k0), HS, vector16);
    load_query_side(0);
    copy_async_commit();
    load_dout(0);
    copy_async_commit();

    float dk[rows_per_thread][shape::out_cols] = {};
    float dv[rows_per_thread][shape::out_cols] = {};
    for (int s = 0; s < steps; ++s) {
        const int h = head_of(s), qt = tile_of(s), q0 = qt * tile;
        const bool diagonal = qt == kt, last = s == steps - 1;
        copy_async_wait<1>();
        __syncthreads();  // Q, lse, Dsum of step s visible
        {
            float st[rows_per_thread][cols_per_thread];
            tile_dot<D>(st, Ks, Qs, ty, tx);  // S^T = K Q^T
            float lse2[cols_per_thread];       // this thread's queries' lse, base 2
#pragma unroll
            for (int j = 0; j < cols_per_thread; ++j) lse2[j] = lse_s[tx + tile_x * j] * log2e;
#pragma unroll
            for (int i = 0; i < rows_per_thread; ++i) {
                const int key = ty + 16 * i;
#pragma unroll
                for (int j = 0; j < cols_per_thread; ++j) {
                    const int query = tx + tile_x * j;
                    const bool seen = q0 + query < T && (!diagonal || key <= query);
                    Pts[key * shape::score_ld + query] = seen ? exp2_ftz(st[i][j] * scale_log2 - lse2[j]) : 0.f;
                }
            }
        }
        copy_async_wait<0>();
        __syncthreads();  // dO of step s visible
        {
            float dpt[rows_per_thread][cols_per_thread];
            tile_dot<D>(dpt, Vs, dOs, ty, tx);  // dP^T = V dO^T
            float row_term[cols_per_thread];
#pragma unroll
            for (int j = 0; j < cols_per_thread; ++j) row_term[j] = Dsum_s[tx + tile_x * j];
            // P^T comes back from shared memory (this thread's own elements): fewer live registers.
#pragma unroll
            for (int i = 0; i < rows_per_thread; ++i) {
                const int key = ty + 16 * i;
#pragma unroll
                for (int j = 0; j < cols_per_thread; ++j) {
                    const int query = tx + tile_x * j;
                    const float p = Pts[key * shape::score_ld + query];  // 0 where masked; dP finite
                    dSts[key * shape::score_ld + query] = p * (dpt[i][j] - row_term[j]) * scale;
                }
            }
        }
        __syncthreads();  // P^T, dS^T visible
        tile_mma<D>(dk, dSts, Qs, ty, tx);  // dK += dS^T Q
        __syncthreads();  // everyone is done with Qs, lse_s, Dsum_s
        if (!last) {
            load_query_side(s + 1);
            copy_async_commit();
        }
        tile_mma<D>(dv, Pts, dOs, ty, tx);  // dV += P^T dO

        // dQ(qt)'s contribution dS K, part by part (dq_parts), each out of the block before the next.
        const std::size_t bh = static_cast<std::size_t>(b) * NH + h;
        int* turn = nullptr;
        if constexpr (ordered) turn = counters + bh * n_tiles + qt;
#pragma unroll
        for (int part = 0; part < dq_parts<D>; ++part) {
            float dq[rows_per_thread][dq_cols<D>] = {};
            tile_mma_transposed<D>(dq, dSts, Ks, part * dq_groups<D>, ty, tx);
            if constexpr (ordered) {
                if (part == 0) {
                    // Key tiles kt+1 .. qt add to query tile qt before this one.
                    if (threadIdx.x == 0)
                        while (load_acquire(turn) != qt - kt) __nanosleep(64);
                    __syncthreads();  // the earlier key tiles' additions are visible to the whole block
                }
                add_dq_in_place<D>(dqkv + (row0 + q0) * ld + h * HS, ld, dq, part * dq_groups<D>, min(tile, T - q0),
                                   HS, dq_vector16, ty, tx);
            } else {
                const int W = q_end - q_first;
                float* tile_rows = dq_partials + (bh * band_tiles(q_first, W) + band_tile_index(kt, qt, q_first, W)) *
                                                     tile * D;
#pragma unroll
                for (int i = 0; i < rows_per_thread; ++i) {
                    float* row = tile_rows + static_cast<std::size_t>(4 * ty + i) * D;
#pragma unroll
                    for (int g = 0; g < dq_groups<D>; ++g) {
                        const int n = g * shape::vec, column = shape::column((part * dq_groups<D> + g) * shape::vec, tx);
                        if constexpr (shape::vec == 4)
                            *reinterpret_cast<float4*>(row + column) =
                                make_float4(dq[i][n], dq[i][n + 1], dq[i][n + 2], dq[i][n + 3]);
                        else
                            *reinterpret_cast<float2*>(row + column) = make_float2(dq[i][n], dq[i][n + 1]);
                    }
                }
            }
        }
        if constexpr (ordered) __threadfence();  // this thread's additions, before the release below
        __syncthreads();  // everyone is done with dOs, Pts, dSts (ordered: and has added, fenced, its dq)
        if constexpr (ordered)
            if (threadIdx.x == 0) store_release(turn, qt - kt + 1);
        if (!last) {
            load_dout(s + 1);
            copy_async_commit();
        }
    }

    add_dk_dv<D>(dqkv + row0 * ld + A + g * HS, ld, KV, k0, T, HS, dk, dv, ty, tx);
}

// attention_backward_key_tile_kernel at head size 64 in wide blocks (attention_detail::wide): the
// same work, copies, synchronization and dq order, the same bits; 256 threads of 4 x 4 elements.
template <class Real, bool ordered>
__global__ void __launch_bounds__(attention_detail::wide::threads, 2)
    attention_backward_key_tile_wide_kernel(Real* __restrict__ dqkv, Real* __restrict__ dq_partials,
                                            int* __restrict__ counters, int* __restrict__ ticket_counter,
                                            const Real* __restrict__ lse, const Real* __restrict__ Dsum,
                                            const Real* __restrict__ dout, const Real* __restrict__ qkv, int T, int NH,
                                            int NKV, int HS, float scale, float scale_log2, bool vector16,
                                            bool /*dq_vector16: true wherever it runs ordered*/, int q_first,
                                            int q_end) {
    using namespace attention_detail;
    namespace w = attention_detail::wide;
    static_assert(std::is_same_v<Real, float>, "attention: the CUDA kernels are FP32 only");
    constexpr int D = w::D;
    using shape = head_tile<D>;
    extern __shared__ float4 smem_f4[];
    float* Ks = reinterpret_cast<float*>(smem_f4);  // (64, D + 4)
    float* Vs = Ks + shape::size;                   // (64, D + 4)
    float* Qs = Vs + shape::size;                   // (64, D + 4)
    float* dOs = Qs + shape::size;                  // (64, D + 4)
    float* Pts = dOs + shape::size;                 // (64 keys, w::score_ld): P^T
    float* dSts = Pts + w::score_size;              // (64 keys, w::score_ld): dS^T / sqrt(HS)
    float* lse_s = dSts + w::score_size;            // (64 queries)
    float* Dsum_s = lse_s + tile;                   // (64 queries)
    __shared__ int ticket;

    const thread_place at = place<w::grid_x>(static_cast<int>(threadIdx.x));
    const int ty = at.ty, tx = at.tx;
    const int n_tiles = (T + tile - 1) / tile;
    int bg, kt;
    if constexpr (ordered) {
        if (threadIdx.x == 0) ticket = atomicAdd(ticket_counter, 1);
        __syncthreads();
        bg = ticket / n_tiles;
        kt = n_tiles - 1 - ticket % n_tiles;
    } else {
        bg = static_cast<int>(blockIdx.x);
        kt = static_cast<int>(blockIdx.y);
    }
    const int b = bg / NKV, g = bg % NKV, group = NH / NKV;
    const int k0 = kt * tile;
    const int A = NH * HS, KV = NKV * HS;
    const std::size_t ld = static_cast<std::size_t>(A) + 2 * static_cast<std::size_t>(KV);
    const std::size_t row0 = static_cast<std::size_t>(b) * T;
    const float* k = qkv + row0 * ld + A + g * HS;
    const float* v = k + KV;
    const int first_tile = kt > q_first ? kt : q_first;
    const int tiles_per_head = q_end - first_tile;
    const int steps = group * tiles_per_head;

    auto head_of = [&](int s) { return g * group + s / tiles_per_head; };
    auto tile_of = [&](int s) { return first_tile + s % tiles_per_head; };
    auto load_query_side = [&](int s) {
        const int h = head_of(s), q0 = tile_of(s) * tile, rows = min(tile, T - q0);
        const std::size_t bh = static_cast<std::size_t>(b) * NH + h;
        load_tile_async<D, shape::ld, w::threads>(Qs, qkv + (row0 + q0) * ld + h * HS, ld, rows, HS, vector16);
        load_lse_async(lse_s, lse + bh * T, q0, T);
        load_lse_async(Dsum_s, Dsum + bh * T, q0, T);
    };
    auto load_dout = [&](int s) {
        const int h = head_of(s), q0 = tile_of(s) * tile;
        load_tile_async<D, shape::ld, w::threads>(dOs, dout + (row0 + q0) * A + h * HS, A, min(tile, T - q0), HS,
                                                  vector16);
    };
    // ordered: step s's dq additions are in dqkv, so the next key tile may add to its query tile.
    // Thread 0 fences and releases for the whole block after barriers have ordered every thread's
    // additions before it: the PTX memory model's causality order is cumulative (cooperative
    // groups' grid sync releases so on sm_70+: a barrier, then one thread's atom.add.release.gpu,
    // cooperative_groups/details/sync.h). It does so in the next step, after its second barrier,
    // so the fence's wait for L2 overlaps the other warps' dP^T product instead of holding the
    // block before a barrier; the block of key tile kt-1 needs the turn at its same step, three
    // products later. Measured (H100, 2026-12-07): 1.032-1.033x over a fence per thread before
    // the step's last barrier; loading the old dq rows before dS K as well took 1.5 % of that back.
    auto release = [&](int s) {
        const int qt = tile_of(s);
        __threadfence();
        store_release(counters + (static_cast<std::size_t>(b) * NH + head_of(s)) * n_tiles + qt, qt - kt + 1);
    };

    load_tile_async<D, shape::ld, w::threads>(Ks, k + k0 * ld, ld, min(tile, T - k0), HS, vector16);
    load_tile_async<D, shape::ld, w::threads>(Vs, v + k0 * ld, ld, min(tile, T - k0), HS, vector16);
    load_query_side(0);
    copy_async_commit();
    load_dout(0);
    copy_async_commit();

    float dk[w::rows][w::cols] = {};
    float dv[w::rows][w::cols] = {};
    for (int s = 0; s < steps; ++s) {
        const int h = head_of(s), qt = tile_of(s), q0 = qt * tile;
        const bool diagonal = qt == kt, last = s == steps - 1;
        copy_async_wait<1>();
        __syncthreads();  // Q, lse, Dsum of step s visible
        {
            float st[w::rows][w::cols];
            w::tile_dot(st, Ks, Qs, ty, tx);  // S^T = K Q^T
            float lse2[w::cols];
#pragma unroll
            for (int j = 0; j < w::cols; ++j) lse2[j] = lse_s[tx + w::grid_x * j] * log2e;
            // P^T; only the diagonal tile and a tile past T mask (the block's branch, uniform):
            // interior tiles skip the per-element compares and selects.
            auto store_p = [&](auto masked) {
#pragma unroll
                for (int i = 0; i < w::rows; ++i) {
                    const int key = ty + w::grid_x * i;
#pragma unroll
                    for (int j = 0; j < w::cols; ++j) {
                        const int query = tx + w::grid_x * j;
                        const float p = exp2_ftz(st[i][j] * scale_log2 - lse2[j]);
                        if constexpr (decltype(masked)::value) {
                            const bool seen = q0 + query < T && (!diagonal || key <= query);
                            Pts[key * w::score_ld + query] = seen ? p : 0.f;
                        } else {
                            Pts[key * w::score_ld + query] = p;
                        }
                    }
                }
            };
            if (diagonal || q0 + tile > T) store_p(std::true_type{});
            else store_p(std::false_type{});
        }
        copy_async_wait<0>();
        __syncthreads();  // dO of step s visible
        if constexpr (ordered)
            if (threadIdx.x == 0 && s > 0) release(s - 1);
        {
            float dpt[w::rows][w::cols];
            w::tile_dot(dpt, Vs, dOs, ty, tx);  // dP^T = V dO^T
            float row_term[w::cols];
#pragma unroll
            for (int j = 0; j < w::cols; ++j) row_term[j] = Dsum_s[tx + w::grid_x * j];
#pragma unroll
            for (int i = 0; i < w::rows; ++i) {
                const int key = ty + w::grid_x * i;
#pragma unroll
                for (int j = 0; j < w::cols; ++j) {
                    const int query = tx + w::grid_x * j;
                    const float p = Pts[key * w::score_ld + query];
                    dSts[key * w::score_ld + query] = p * (dpt[i][j] - row_term[j]) * scale;
                }
            }
        }
        __syncthreads();  // P^T, dS^T visible
        w::tile_mma(dk, dSts, Qs, ty, tx);  // dK += dS^T Q
        __syncthreads();  // everyone is done with Qs, lse_s, Dsum_s
        if (!last) {
            load_query_side(s + 1);
            copy_async_commit();
        }
        w::tile_mma(dv, Pts, dOs, ty, tx);  // dV += P^T dO

        const std::size_t bh = static_cast<std::size_t>(b) * NH + h;
        float dq[w::rows][w::cols] = {};
        w::tile_mma_transposed(dq, dSts, Ks, ty, tx);  // this key tile's dQ(qt) contribution dS K
        if constexpr (ordered) {
            if (threadIdx.x == 0)
                while (load_acquire(counters + bh * n_tiles + qt) != qt - kt) __nanosleep(64);
            __syncthreads();  // the earlier key tiles' additions performed before this block's
            w::add_dq_in_l2(dqkv + (row0 + q0) * ld + h * HS, ld, dq, min(tile, T - q0), HS, ty, tx);
        } else {
            const int W = q_end - q_first;
            float* tile_rows =
                dq_partials + (bh * band_tiles(q_first, W) + band_tile_index(kt, qt, q_first, W)) * tile * D;
#pragma unroll
            for (int i = 0; i < w::rows; ++i)
                *reinterpret_cast<float4*>(tile_rows + static_cast<std::size_t>(4 * ty + i) * D + 4 * tx) =
                    make_float4(dq[i][0], dq[i][1], dq[i][2], dq[i][3]);
        }
        __syncthreads();  // everyone is done with dOs, Pts, dSts (ordered: and has added its dq)
        if (!last) {
            load_dout(s + 1);
            copy_async_commit();
        }
    }

    if constexpr (ordered)
        if (threadIdx.x == 0) release(steps - 1);

    // dK, dV of the key tile: rows k0 + ty + 16 i, channels 4 tx .. 4 tx + 3 (this block alone writes them).
    float* dk_head = dqkv + row0 * ld + A + g * HS;
#pragma unroll
    for (int i = 0; i < w::rows; ++i) {
        const int t = k0 + ty + w::grid_x * i;
        if (t >= T) continue;
        float* dk_row = dk_head + t * ld;
        float* dv_row = dk_row + KV;
#pragma unroll
        for (int n = 0; n < w::cols; ++n) {
            const int d = 4 * tx + n;
            if (d < HS) {
                dk_row[d] += dk[i][n];
                dv_row[d] += dv[i][n];
            }
        }
    }
}

// partials: dq[b, t, h] += c(qt, qt) + c(qt-1, qt) + ... + c(0, qt), one thread per element of the
// band's rows [64 q_first, min(64 q_end, T)), in that order (ordered's order: the same bits).
template <class Real, int D>
__global__ void attention_dq_partials_sum_kernel(Real* __restrict__ dqkv,               // (B, T, A + 2 KV)
                                                 const Real* __restrict__ dq_partials,  // (B NH, band tiles, 64, D)
                                                 std::size_t elements, int T, int NH, int NKV, int HS, int q_first,
                                                 int q_end) {
    using namespace attention_detail;
    static_assert(std::is_same_v<Real, float>, "attention: the CUDA kernels are FP32 only");
    const std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // (b, t, h, d)
    if (e >= elements) return;
    const int t0 = q_first * tile, rows = min(q_end * tile, T) - t0, W = q_end - q_first;
    const int d = static_cast<int>(e % HS);
    const std::size_t bth = e / HS;
    const int h = static_cast<int>(bth % NH);
    const std::size_t bt = bth / NH;
    const int t = t0 + static_cast<int>(bt % rows);
    const std::size_t b = bt / rows;
    const int qt = t / tile, r = t % tile;
    const std::size_t ld = static_cast<std::size_t>(NH + 2 * NKV) * HS;
    const float* part = dq_partials + (b * NH + h) * band_tiles(q_first, W) * tile * D;
    float* dq = dqkv + (b * T + t) * ld + static_cast<std::size_t>(h) * HS + d;
    float sum = *dq;
    for (int kt = qt; kt >= 0; --kt) sum += part[(band_tile_index(kt, qt, q_first, W) * tile + r) * D + d];
    *dq = sum;
}

namespace attention_detail {

// The shapes the key-tile kernels take, or a strata::error naming the problem.
inline void check_key_tile_shape(std::size_t B, std::size_t T, std::size_t NH, std::size_t NKV, std::size_t HS) {
    if (NH == 0 || NKV == 0 || NH % NKV != 0)
        throw error("attention backward (cuda): NKV=" + std::to_string(NKV) + " key/value heads do not divide NH=" +
                        std::to_string(NH) + " query heads",
                    "the key/value heads must divide the query heads (NKV = NH: multi-head attention)");
    if (HS == 0 || HS > 128)
        throw error("attention backward (cuda): head size HS=" + std::to_string(HS) +
                        " is outside what the kernels take, 1 .. 128",
                    "use more heads so that the head size is at most 128");
    constexpr std::size_t int_max = 0x7fffffff;
    const std::size_t n = (T + tile - 1) / tile;
    // A tile's rows are int offsets apart in both key-tile kernels' dq additions: 64 qkv rows within 2^31.
    if (T > int_max || n > 65535 || B * NKV * n > int_max || tile * (NH + 2 * NKV) * HS > int_max || B * NH > int_max)
        throw error("attention backward (cuda): B=" + std::to_string(B) + ", T=" + std::to_string(T) +
                        ", NH=" + std::to_string(NH) + ", NKV=" + std::to_string(NKV) + ", HS=" + std::to_string(HS) +
                        " is beyond the kernels' grid",
                    "T is at most 65535 * 64, B * NKV * ceil(T / 64) at most 2^31 - 1, (NH + 2 NKV) HS at most "
                    "2^25 - 1");
}

}  // namespace attention_detail

namespace attention_detail {

// A key-tile kernel with its block size and shared memory (allowed on the way here).
template <class Real>
struct key_tile_launch {
    void (*kernel)(Real*, Real*, int*, int*, const Real*, const Real*, const Real*, const Real*, int, int, int, int,
                   float, float, bool, bool, int, int);
    unsigned threads;
    int smem_floats;
};
template <class Real, int D, bool ordered>
key_tile_launch<Real> key_tile_kernel(bool wide) {
    if constexpr (D == wide::D) {
        if (wide) {
            const key_tile_launch<Real> k{attention_backward_key_tile_wide_kernel<Real, ordered>, wide::threads,
                                          wide::smem_floats};
            allow_shared_memory(k.kernel, k.smem_floats, "attention_backward_key_tile_wide_kernel");
            return k;
        }
    }
    const key_tile_launch<Real> k{attention_backward_key_tile_kernel<Real, D, ordered>, threads, dkdv_smem<D>};
    allow_shared_memory(k.kernel, k.smem_floats, "attention_backward_key_tile_kernel");
    return k;
}

}  // namespace attention_detail

// The most device memory the library's multi-head attention backward takes as workspace (the one
// place this bound is stated): 2 GiB. partials' whole triangle is B NH T^2 D / 32 bytes, about
// T / 128 times attention's output (B, T, NH HS): at T <= 2048 no more than one GPT-2 block's saved
// activations; longer contexts run partials in bands of query tiles that fit the bound (24 GiB of
// triangle at B=1 T=32768 NH=12: 13 bands).
inline constexpr std::size_t attention_partials_limit_bytes = std::size_t{2} << 30;

// Bytes of workspace attention_backward_key_tiles needs for `algo` (0 for recompute); partials'
// bands are as wide as limit_bytes allows (the same limit_bytes must reach the launch).
inline std::size_t attention_backward_workspace(attention_backward_algo algo, std::size_t B, std::size_t T,
                                                std::size_t NH, std::size_t HS,
                                                std::size_t limit_bytes = attention_partials_limit_bytes) {
    return attention_detail::key_tile_layout(algo, B, T, NH, HS, limit_bytes).bytes;
}

// How many launches (bands of query tiles) partials takes for a shape at limit_bytes.
inline std::size_t attention_partials_bands(std::size_t B, std::size_t T, std::size_t NH, std::size_t HS,
                                            std::size_t limit_bytes = attention_partials_limit_bytes) {
    using namespace attention_detail;
    return partials_band_count(key_tile_layout(attention_backward_algo::partials, B, T, NH, HS, limit_bytes), T);
}

// The backward ops<cuda_backend>::attention_backward runs for a multi-head shape:
//   - partials in one band where the whole triangle fits limit_bytes (T <= 2048 at GPT-2's shapes);
//   - else at head sizes above 64 (D = 128), partials in bands where they fit, else ordered;
//   - else at D = 64 ordered, below it the two-kernel backward (recompute).
// Measured on an H100 (docs/benchmarks.md, 2026-12-06): at D = 128 banded partials are 1.15x
// ordered at T = 16384 and 1.10x at 32768 (GQA 32/8: a block walks 4 heads per band); at D = 64
// (wide blocks, ninth session) ordered is 1.22x recompute at T = 16384 and 1.29x at 65536, where
// it is 1.02x banded partials (50 bands; 1.12x them at 131072 before, 477 narrow bands: each key
// tile's block is set up and its dk, dv added once per band); partials in 4 bands are 1.06x
// ordered at T = 16384, not taken (a gain at middle lengths only, other dk, dv bits per band
// count). A function of the shape alone: the same choice, so the same bits, on every run of a shape.
inline attention_backward_algo attention_backward_pick(std::size_t B, std::size_t T, std::size_t NH, std::size_t HS,
                                                       std::size_t limit_bytes = attention_partials_limit_bytes) {
    const auto partials = attention_detail::key_tile_layout(attention_backward_algo::partials, B, T, NH, HS, limit_bytes);
    const int D = attention_detail::padded_head_size(HS);
    if (partials.bytes <= limit_bytes && (D > 64 || partials.band_room == 0)) return attention_backward_algo::partials;
    return D >= 64 ? attention_backward_algo::ordered : attention_backward_algo::recompute;
}

// Accumulates (+=) into dqkv the gradients of causal attention with NH query heads over NKV
// key/value heads (layout in the file comment), given the forward's out and lse. algo is partials
// or ordered; `workspace` holds attention_backward_workspace(algo, B, T, NH, HS, limit_bytes) bytes
// (device memory, contents irrelevant, used until the launches on `stream` finish). Bitwise
// reproducible; with partials in several bands, dk and dv are summed per band, then the bands in
// order (other bits than one band; dq's bits are the same). block_threads: 0 runs the kernels'
// choice (wide blocks of 256 threads at head size 64, 128 elsewhere); 128 or 256 (head size 64
// only) asks for one: both give the same bits (tests and bench/attention_backward_bench.cu compare them).
template <class Real>
void attention_backward_key_tiles(Real* dqkv,        // (B, T, (NH + 2 NKV) HS)
                                  const Real* lse,   // (B, NH, T)
                                  const Real* dout,  // (B, T, NH HS)
                                  const Real* out,   // (B, T, NH HS)
                                  const Real* qkv,   // (B, T, (NH + 2 NKV) HS)
                                  std::size_t B, std::size_t T, std::size_t NH, std::size_t NKV, std::size_t HS,
                                  attention_backward_algo algo, void* workspace, std::size_t workspace_bytes,
                                  cudaStream_t stream, std::size_t limit_bytes = attention_partials_limit_bytes,
                                  int block_threads = 0) {
    static_assert(std::is_same_v<Real, float>, "attention (cuda): strict FP32 kernels; Real must be float");
    using namespace attention_detail;
    if (algo == attention_backward_algo::recompute)
        throw error("attention_backward_key_tiles: algo 'recompute' is attention_backward (attention.cuh)",
                    "call attention_backward for it, or pass partials or ordered");
    const bool wide_possible = padded_head_size(HS) == wide::D;
    if (block_threads != 0 && block_threads != threads && !(block_threads == wide::threads && wide_possible))
        throw error("attention backward (cuda): blocks of " + std::to_string(block_threads) + " threads at head size " +
                        std::to_string(HS),
                    "pass 0 (the kernels' choice), 128, or 256 at head sizes 33 .. 64");
    // ordered's wide blocks add dq as float4 (wide::add_dq_in_l2): 16-byte aligned dq rows only.
    const bool dq_vector16 = rows_16_byte_aligned(HS, HS, {dqkv});
    if (block_threads == wide::threads && algo == attention_backward_algo::ordered && !dq_vector16)
        throw error("attention backward (cuda, ordered): blocks of 256 threads add dq four floats at a time, and "
                    "dqkv's rows are not 16-byte aligned",
                    "pass 0 (the kernels' choice: 128 threads for this layout) or 128");
    const bool wide = wide_possible && block_threads != threads &&
                      (algo != attention_backward_algo::ordered || dq_vector16);
    check_key_tile_shape(B, T, NH, NKV, HS);
    if (B == 0 || T == 0) return;
    const key_tile_workspace layout = key_tile_layout(algo, B, T, NH, HS, limit_bytes);
    if (workspace == nullptr || workspace_bytes < layout.bytes)
        throw error("attention backward (cuda, " + std::string(to_string(algo)) + "): the workspace has " +
                        std::to_string(workspace_bytes) + " bytes, it needs " + std::to_string(layout.bytes),
                    "allocate attention_backward_workspace(algo, B, T, NH, HS, limit_bytes) bytes, or use algo "
                    "'ordered' (workspace linear in T)");
    auto* bytes = static_cast<unsigned char*>(workspace);
    auto* Dsum = reinterpret_cast<Real*>(bytes + layout.dsum);
    const std::size_t n = (T + tile - 1) / tile;

    const std::size_t rows = B * T * NH;
    constexpr unsigned row_threads = 256;
    attention_row_dots_kernel<Real><<<ceil_div(rows * 32, row_threads), row_threads, 0, stream>>>(
        Dsum, dout, out, rows, static_cast<int>(T), static_cast<int>(NH), static_cast<int>(HS));
    check_launch("attention_row_dots_kernel");

    const bool vector16 = rows_16_byte_aligned(HS, HS, {qkv, dout});
    const int t = static_cast<int>(T), nh = static_cast<int>(NH), nkv = static_cast<int>(NKV), hs = static_cast<int>(HS);
    with_padded_head_size(HS, [&]<int D>(std::integral_constant<int, D>) {
        if (algo == attention_backward_algo::ordered) {
            int* counters = reinterpret_cast<int*>(bytes + layout.counters);
            if (cudaMemsetAsync(counters, 0, (B * NH * n + 1) * sizeof(int), stream) != cudaSuccess)
                throw error("attention backward (cuda): cudaMemsetAsync of the dq counters failed",
                            "check the workspace pointer: it must be device memory");
            const key_tile_launch<Real> k = key_tile_kernel<Real, D, true>(wide);
            const auto blocks = static_cast<unsigned>(B * NKV * n);
            k.kernel<<<blocks, k.threads, k.smem_floats * sizeof(float), stream>>>(
                dqkv, nullptr, counters, counters + B * NH * n, lse, Dsum, dout, qkv, t, nh, nkv, hs,
                score_scale(HS), score_scale_log2(HS), vector16, dq_vector16, 0, static_cast<int>(n));
            check_launch("attention_backward_key_tile_kernel");
        } else {
            Real* partials = reinterpret_cast<Real*>(bytes + layout.partials);
            const key_tile_launch<Real> k = key_tile_kernel<Real, D, false>(wide);
            for (std::size_t q0 = 0; q0 < n;) {  // one band of query tiles [q0, q_end) after another
                const std::size_t q_end = layout.band_room == 0 ? n : band_end(q0, n, layout.band_room);
                const dim3 grid(static_cast<unsigned>(B * NKV), static_cast<unsigned>(q_end));
                k.kernel<<<grid, k.threads, k.smem_floats * sizeof(float), stream>>>(
                    dqkv, partials, nullptr, nullptr, lse, Dsum, dout, qkv, t, nh, nkv, hs, score_scale(HS),
                    score_scale_log2(HS), vector16, dq_vector16, static_cast<int>(q0), static_cast<int>(q_end));
                check_launch("attention_backward_key_tile_kernel");
                const std::size_t elements = B * (std::min(q_end * tile, T) - q0 * tile) * NH * HS;
                constexpr unsigned sum_threads = 256;
                attention_dq_partials_sum_kernel<Real, D><<<ceil_div(elements, sum_threads), sum_threads, 0, stream>>>(
                    dqkv, partials, elements, t, nh, nkv, hs, static_cast<int>(q0), static_cast<int>(q_end));
                check_launch("attention_dq_partials_sum_kernel");
                q0 = q_end;
            }
        }
    });
}

// The one copy of the launcher is src/cuda/attention_backward.cu's (the recipe: src/cuda/elementwise.cu).
#define STRATA_CUDA_ATTENTION_KEY_TILES_INSTANCES(prefix)                                                          \
    prefix void attention_backward_key_tiles<float>(float*, const float*, const float*, const float*, const float*, \
                                                    std::size_t, std::size_t, std::size_t, std::size_t, std::size_t,  \
                                                    attention_backward_algo, void*, std::size_t, cudaStream_t,     \
                                                    std::size_t, int);
STRATA_CUDA_ATTENTION_KEY_TILES_INSTANCES(extern template)

}  // namespace strata::kernels::cuda
