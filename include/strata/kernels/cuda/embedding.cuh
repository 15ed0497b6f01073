// Token + position embedding of GPT-2 on the GPU; a CUDA port of kernels/cpu/embedding.hpp (the
// oracle). Backward is bitwise equal to the CPU kernel.
//
// Glossary: B batch, T time, C channels, V vocab, maxT the rows of wpe (GPT-2: 1024), BT = B*T.
//
// Backward without atomics, in the CPU's order. The CPU adds dout[bt] into dwte[tokens[bt]] and
// dwpe[t] for bt = 0, 1, ... one float add at a time, so for each (v, c) the adds come in
// increasing bt, and for each (t, c) in increasing b. The GPU keeps exactly those sequences:
// - dwpe: one block per position t; a thread owns channels and adds b = 0, 1, ... in order.
// - dwte: one block per range of dwte_rows_per_block vocab rows. In rounds of dwte_positions token
//   positions, the block lists the positions whose token falls in its range, in increasing order
//   (a block-wide prefix sum); warp 0 then sorts that list by row, stably (__match_any_sync over
//   32 entries at a time, in order), so each row's positions are one contiguous run, still in
//   increasing order. Each warp takes (row v, channel tile) items and adds its row's run into
//   registers, loading dwte once per round and storing once. It loads dwte_batch dout rows before
//   adding them, so a frequent token (' the' is ~4% of English text) waits on memory once per
//   batch, not once per occurrence; few rows per block spread the frequent ones over many SMs.
//
// Token ids outside [0, V): the CPU throws; the GPU cannot. forward writes NaN into that position's
// output row (the loss shows it rather than training on a made-up vector); backward skips the
// position for dwte (dwpe still gets its dout, as it does not depend on the id). Nothing outside
// wte or dwte is ever read or written. The trainers check ids on the host before they reach the GPU.
#pragma once

#include <strata/core/error.hpp>                // strata::error
#include <strata/kernels/cuda/elementwise.cuh>  // detail::aligned16, pack, load_pack, store_pack
#include <strata/kernels/cuda/launch.cuh>       // ceil_div, check_launch

#include <cuda_runtime.h>  // cudaStream_t, __match_any_sync, __shfl_up_sync, __popc

#include <cmath>        // NAN
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int32_t
#include <string>       // std::to_string
#include <type_traits>  // std::is_same_v

namespace strata::kernels::cuda {

namespace detail {

inline constexpr unsigned embedding_threads = 128;   // forward and dwpe: threads over one row's channels
inline constexpr unsigned dwte_rows_per_block = 16;  // vocab rows a dwte block owns (3142 blocks for GPT-2)
inline constexpr unsigned dwte_threads = 512;        // 16 warps
inline constexpr unsigned dwte_positions = 2048;     // token positions listed per round
inline constexpr unsigned dwte_batch = 8;            // dout rows loaded before they are added
static_assert(dwte_rows_per_block <= 32, "warp 0 keeps one row per lane while it sorts");

// The exclusive prefix sum of one count per thread, in thread order, and the block's total.
// warp_totals holds blockDim.x / 32 values.
__device__ inline unsigned block_exclusive_scan(unsigned value, unsigned* warp_totals, unsigned& total) {
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    unsigned inclusive = value;
    for (unsigned d = 1; d < 32; d *= 2) {
        const unsigned below = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) inclusive += below;
    }
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    unsigned offset = 0;
    total = 0;
    for (unsigned w = 0; w < warps; ++w) {
        if (w < warp) offset += warp_totals[w];
        total += warp_totals[w];
    }
    __syncthreads();  // warp_totals is free again for the next scan
    return offset + inclusive - value;
}

}  // namespace detail

// out[b, t] = wte[tokens[b, t]] + wpe[t]; one block per position bt (grid.x = BT).
template <class Real, int Width>
__global__ void embedding_forward_kernel(Real* out,                   // (B, T, C)
                                         const std::int32_t* tokens,  // (B, T)
                                         const Real* wte,             // (V, C)
                                         const Real* wpe,             // (maxT, C), or null (no learned positions)
                                         std::size_t T, std::size_t C, std::size_t V) {
    const std::size_t bt = blockIdx.x;
    const std::size_t t = bt % T;
    const std::int32_t token = tokens[bt];
    Real* out_bt = out + bt * C;
    if (token < 0 || static_cast<std::size_t>(token) >= V) {
        for (std::size_t c = threadIdx.x; c < C; c += blockDim.x) out_bt[c] = NAN;
        return;
    }
    const Real* wte_row = wte + static_cast<std::size_t>(token) * C;
    const Real* wpe_row = wpe ? wpe + t * C : nullptr;
    for (std::size_t i = threadIdx.x; i < C / Width; i += blockDim.x) {
        auto a = detail::load_pack<Width>(wte_row + i * Width);
        if (wpe_row) {
            const auto b = detail::load_pack<Width>(wpe_row + i * Width);
            for (int j = 0; j < Width; ++j) a.v[j] += b.v[j];
        }
        detail::store_pack<Width>(out_bt + i * Width, a);
    }
}

// dwpe[t] += dout[b, t] for b = 0, 1, ... in order; one block per position t (grid.x = T).
template <class Real, int Width>
__global__ void embedding_backward_dwpe_kernel(Real* dwpe,        // (maxT, C)
                                               const Real* dout,  // (B, T, C)
                                               std::size_t B, std::size_t T, std::size_t C) {
    const std::size_t t = blockIdx.x;
    for (std::size_t i = threadIdx.x; i < C / Width; i += blockDim.x) {
        auto acc = detail::load_pack<Width>(dwpe + t * C + i * Width);
#pragma unroll 4
        for (std::size_t b = 0; b < B; ++b) {
            const auto d = detail::load_pack<Width>(dout + (b * T + t) * C + i * Width);
            for (int j = 0; j < Width; ++j) acc.v[j] += d.v[j];
        }
        detail::store_pack<Width>(dwpe + t * C + i * Width, acc);
    }
}

// dwte[v] += dout[bt] for every bt with tokens[bt] == v, in increasing bt; one block per range of
// dwte_rows_per_block rows (grid.x = ceil(V / dwte_rows_per_block)). See the file comment.
template <class Real, int Width>
__global__ void __launch_bounds__(detail::dwte_threads, 2)
    embedding_backward_dwte_kernel(Real* dwte,                  // (V, C)
                                   const Real* dout,            // (B, T, C)
                                   const std::int32_t* tokens,  // (B, T)
                                   std::size_t BT, std::size_t C, std::size_t V) {
    constexpr unsigned rows = detail::dwte_rows_per_block;
    constexpr unsigned per_thread = detail::dwte_positions / detail::dwte_threads;
    __shared__ unsigned listed_position[detail::dwte_positions];  // in increasing order
    __shared__ unsigned listed_row[detail::dwte_positions];       // token - v_begin
    __shared__ unsigned sorted_position[detail::dwte_positions];  // by row, then increasing
    __shared__ unsigned warp_totals[detail::dwte_threads / 32];
    __shared__ unsigned row_count[rows], row_start[rows + 1], row_cursor[rows];
    const std::size_t v_begin = static_cast<std::size_t>(blockIdx.x) * rows;
    const std::size_t v_end = v_begin + rows < V ? v_begin + rows : V;
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const std::size_t tile_channels = 32 * Width;
    const std::size_t tiles = (C + tile_channels - 1) / tile_channels;
    const std::size_t items = (v_end - v_begin) * tiles;
    const auto in_block = [&](std::int32_t token) {
        return token >= 0 && static_cast<std::size_t>(token) >= v_begin && static_cast<std::size_t>(token) < v_end;
    };

    for (std::size_t round = 0; round < BT; round += detail::dwte_positions) {
        // 1. The positions of this round whose token is one of the block's rows, in order: each
        // thread takes per_thread consecutive positions; a prefix sum of the counts places them.
        const std::size_t first = round + static_cast<std::size_t>(threadIdx.x) * per_thread;
        std::int32_t token[per_thread];
        unsigned count = 0;
        for (unsigned k = 0; k < per_thread; ++k) {
            token[k] = first + k < BT ? tokens[first + k] : -1;
            count += in_block(token[k]) ? 1u : 0u;
        }
        unsigned listed = 0;
        unsigned slot = detail::block_exclusive_scan(count, warp_totals, listed);
        for (unsigned k = 0; k < per_thread; ++k) {
            if (in_block(token[k])) {
                listed_position[slot] = static_cast<unsigned>(first + k);
                listed_row[slot] = static_cast<unsigned>(token[k] - static_cast<std::int32_t>(v_begin));
                ++slot;
            }
        }
        __syncthreads();

        // 2. Warp 0 sorts the list by row, stably: 32 entries at a time in list order, each entry
        // ranked among the equal rows of its group (lower lanes first) after those of earlier groups.
        if (warp == 0) {
            const unsigned lower_lanes = (1u << lane) - 1;
            if (lane < rows) row_count[lane] = 0;
            __syncwarp();
            for (unsigned base = 0; base < listed; base += 32) {  // pass 1: entries per row
                const bool valid = base + lane < listed;
                const unsigned row = valid ? listed_row[base + lane] : rows + lane;  // unmatched sentinel
                const unsigned peers = __match_any_sync(0xffffffffu, row);
                if (valid && (peers & lower_lanes) == 0) row_count[row] += __popc(peers);
                __syncwarp();
            }
            if (lane <= rows) {
                unsigned start = 0;
                for (unsigned r = 0; r < lane; ++r) start += row_count[r];
                row_start[lane] = start;
                if (lane < rows) row_cursor[lane] = start;
            }
            __syncwarp();
            for (unsigned base = 0; base < listed; base += 32) {  // pass 2: place each entry
                const bool valid = base + lane < listed;
                const unsigned row = valid ? listed_row[base + lane] : rows + lane;
                const unsigned peers = __match_any_sync(0xffffffffu, row);
                if (valid)
                    sorted_position[row_cursor[row] + __popc(peers & lower_lanes)] = listed_position[base + lane];
                __syncwarp();
                if (valid && (peers & lower_lanes) == 0) row_cursor[row] += __popc(peers);
                __syncwarp();
            }
        }
        __syncthreads();

        // 3. Each warp adds a row's run of dout rows into its (row, channel tile) items, in order.
        for (std::size_t item = warp; item < items; item += warps) {
            const unsigned row = static_cast<unsigned>(item / tiles);
            const unsigned begin = row_start[row], end = row_start[row + 1];
            if (begin == end) continue;  // the same for the whole warp
            const std::size_t v = v_begin + row;
            const std::size_t c = (item % tiles) * tile_channels + lane * Width;
            if (c >= C) continue;  // lanes past the row's end (no warp-wide operation follows)
            auto acc = detail::load_pack<Width>(dwte + v * C + c);
            for (unsigned k = begin; k < end; k += detail::dwte_batch) {
                detail::pack<Width> batch[detail::dwte_batch];
#pragma unroll
                for (unsigned u = 0; u < detail::dwte_batch; ++u)
                    if (k + u < end) batch[u] = detail::load_pack<Width>(dout + sorted_position[k + u] * C + c);
#pragma unroll
                for (unsigned u = 0; u < detail::dwte_batch; ++u)
                    if (k + u < end)
                        for (int j = 0; j < Width; ++j) acc.v[j] += batch[u].v[j];
            }
            detail::store_pack<Width>(dwte + v * C + c, acc);
        }
        __syncthreads();  // the next round rewrites the lists
    }
}

namespace detail {

// The CPU kernel throws for T > maxT: a position past wpe's rows would read outside it.
inline void check_embedding_sizes(const char* who, std::size_t T, std::size_t maxT) {
    if (T > maxT)
        throw error(std::string(who) + ": sequence length T=" + std::to_string(T) +
                        " is longer than the position table maxT=" + std::to_string(maxT),
                    "cut sequences to at most maxT tokens");
}

}  // namespace detail

template <class Real>
void embedding_forward(Real* out,                   // (B, T, C)
                       const std::int32_t* tokens,  // (B, T)
                       const Real* wte,             // (V, C)
                       const Real* wpe,             // (maxT, C)
                       std::size_t B, std::size_t T, std::size_t C, std::size_t V, std::size_t maxT,
                       cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    detail::check_embedding_sizes("embedding_forward", T, maxT);
    if (B * T == 0 || C == 0) return;
    const unsigned blocks = static_cast<unsigned>(B * T);
    if (C % 4 == 0 && detail::aligned16(out, wte, wpe))
        embedding_forward_kernel<Real, 4>
            <<<blocks, detail::embedding_threads, 0, stream>>>(out, tokens, wte, wpe, T, C, V);
    else
        embedding_forward_kernel<Real, 1>
            <<<blocks, detail::embedding_threads, 0, stream>>>(out, tokens, wte, wpe, T, C, V);
    check_launch("embedding_forward");
}

// Accumulates, bitwise as the CPU kernel: with a tied LM head, dwte already holds the head's
// gradient when this runs.
template <class Real>
void embedding_backward(Real* dwte,                  // (V, C)
                        Real* dwpe,                  // (maxT, C)
                        const Real* dout,            // (B, T, C)
                        const std::int32_t* tokens,  // (B, T)
                        std::size_t B, std::size_t T, std::size_t C, std::size_t V, std::size_t maxT,
                        cudaStream_t stream) {
    static_assert(std::is_same_v<Real, float>, "the CUDA kernels are instantiated for float only");
    detail::check_embedding_sizes("embedding_backward", T, maxT);
    if (B * T == 0 || C == 0) return;
    const bool vectorized = C % 4 == 0 && detail::aligned16(dwte, dwpe, dout);
    const unsigned position_blocks = static_cast<unsigned>(T);
    if (!dwpe) {
        // no learned positions: only dwte
    } else if (vectorized)
        embedding_backward_dwpe_kernel<Real, 4>
            <<<position_blocks, detail::embedding_threads, 0, stream>>>(dwpe, dout, B, T, C);
    else
        embedding_backward_dwpe_kernel<Real, 1>
            <<<position_blocks, detail::embedding_threads, 0, stream>>>(dwpe, dout, B, T, C);
    check_launch("embedding_backward_dwpe");
    if (V == 0) return;
    const unsigned vocab_blocks = ceil_div(V, detail::dwte_rows_per_block);
    if (vectorized)
        embedding_backward_dwte_kernel<Real, 4>
            <<<vocab_blocks, detail::dwte_threads, 0, stream>>>(dwte, dout, tokens, B * T, C, V);
    else
        embedding_backward_dwte_kernel<Real, 1>
            <<<vocab_blocks, detail::dwte_threads, 0, stream>>>(dwte, dout, tokens, B * T, C, V);
    check_launch("embedding_backward_dwte");
}

// The float instances are compiled once, in strata's src/cuda/rowwise.cu (strata::cuda,
// strata_cuda_ops): a unit that includes this header links them instead of compiling the kernels
// again.
#define STRATA_CUDA_EMBEDDING_INSTANCES(prefix) \
    prefix void embedding_forward<float>(float*, const std::int32_t*, const float*, const float*, std::size_t, \
                                         std::size_t, std::size_t, std::size_t, std::size_t, cudaStream_t); \
    prefix void embedding_backward<float>(float*, float*, const float*, const std::int32_t*, std::size_t, \
                                          std::size_t, std::size_t, std::size_t, std::size_t, cudaStream_t);
STRATA_CUDA_EMBEDDING_INSTANCES(extern template)

}  // namespace strata::kernels::cuda
