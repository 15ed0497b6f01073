// What happens to a block's forward activations before its backward: the activation policy.
//
// A block's backward needs what its forward computed (layernorm outputs, attention's saved
// statistics, the MLP's pre-activation...). A model keeps, for every block, at least the block's
// input (B x T x C); beyond that, per block, either
//   - keep: its forward activations stay in their own device buffer until its backward, or
//   - recompute: they are not kept; the backward runs the block's forward again from the saved
//     input into one buffer that all recomputing blocks share (activation checkpointing: one
//     extra forward of that block, and bitwise the same result, since forward is deterministic).
// The first `kept` blocks keep, the others recompute. Losses, gradients and weights are the same
// bits whatever `kept` is (tests/model/, tests/stream/); only time and memory differ.
//
// The memory planner (plan/planner.hpp) turns a policy into `kept`: recompute -> 0, keep -> every
// block, automatic -> as many blocks as the device budget holds after everything else it plans.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <algorithm>    // std::min
#include <cstddef>      // std::size_t
#include <limits>       // std::numeric_limits
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace strata {

enum class activation_policy { automatic, keep, recompute };

constexpr std::string_view name_of(activation_policy p) {
    switch (p) {
        case activation_policy::automatic: return "auto";
        case activation_policy::keep: return "keep";
        case activation_policy::recompute: return "recompute";
    }
    return "unknown";
}

// "auto" | "keep" | "recompute", as a command line writes it.
inline activation_policy activation_policy_from_string(std::string_view text) {
    for (activation_policy p : {activation_policy::automatic, activation_policy::keep, activation_policy::recompute})
        if (text == name_of(p)) return p;
    throw error("unknown activation policy '" + std::string(text) + "'", "use auto, keep or recompute");
}

// How many blocks (the first ones) keep their forward activations for the backward. A type of its
// own so that neither a bool nor a stray integer can stand for it.
struct kept_activations {
    std::size_t count = 0;

    static constexpr kept_activations none() { return {0}; }
    static constexpr kept_activations all() { return {std::numeric_limits<std::size_t>::max()}; }
    // Kept blocks of a model of `blocks` blocks.
    constexpr std::size_t of(std::size_t blocks) const { return std::min(count, blocks); }
    // Buffers of one block's activations that a model of `blocks` blocks allocates: one per kept
    // block, plus one shared by the recomputing blocks when there are any.
    constexpr std::size_t buffers(std::size_t blocks) const { return of(blocks) + (of(blocks) < blocks ? 1 : 0); }
    friend constexpr bool operator==(kept_activations, kept_activations) = default;
};

}  // namespace strata
