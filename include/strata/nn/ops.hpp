// ops<Backend>: every op of the example GPT as an asynchronous launch on a backend stream.
//
// Layers and models are written once against this interface; a backend supplies a
// specialization. Pointers are device-tier addresses (device_ptr::get()); sizes follow the
// kernels' glossary: B batch, T time, C channels, V vocab, NH heads, OC output channels.
// Backward ops accumulate (+=) into their d-buffers, as the CPU reference kernels do, except the
// fused ones that say they write one (gelu_backward_bias's dinp, cross_entropy_forward_backward's
// dlogits: no zero fill before them).
#pragma once

#include <algorithm>  // std::max
#include <cstddef>    // std::size_t

namespace strata {

template <class Backend>
struct ops;  // specialized by each backend: nn/cpu_ops.hpp, nn/cuda_ops.hpp

// Rows per chunk of the LM head and cross-entropy (model/lm_head.hpp) unless a model's config says
// otherwise: 8192 rows x V = 50257 x 4 B = 1.6 GiB per buffer (two of them), and GPT-2's benchmark
// micro-batches (8 x 1024 at 124M, 4 x 1024 at 1.5B) are one chunk.
inline constexpr std::size_t lm_head_chunk_rows = 8192;

namespace detail {
// Doubles of sum_of_squares workspace for the largest trainable block of any group (at least one):
// what the trainer allocates and the planner counts.
template <class B, class Groups>
std::size_t norm_workspace_doubles(const Groups& groups) {
    std::size_t n = 1;
    for (const auto& g : groups)
        if (!g.frozen()) n = std::max(n, ops<B>::sum_of_squares_workspace(g.trainable_numel()));
    return n;
}
}  // namespace detail

}  // namespace strata
