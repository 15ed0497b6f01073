// What happens to a block's forward activations before its backward: the activation policy.
//
// A block's backward needs what its forward computed (layernorm outputs, attention's saved
// statistics, the MLP's pre-activation...). A model keeps, for every block, at least the block's
// input (B x T x C); beyond that, per block, either
//   - keep: its forward activations stay in their own device buffer until its backward, or
//   - recompute: they are not kept; the backward runs the block's forward again from the saved
//     input into one buffer that all recomputing blocks share (activation checkpointing: one
//     extra forward of that block, and bitwise the same result, since forward is deterministic).
// The first `kept` blocks keep, the others recompute. A recomputing block may keep a part of its
// activations (keep_parts: selective recompute, for a block whose layer names such a part,
// nn/layer.hpp RecomputesPart): attention's output and statistics, ~1/17 of a GPT-2 block's
// activations, with which its recompute skips attention's forward, the costliest part of it at
// long contexts, and the MLP projection that backward does not read. A recomputing block's input may also leave
// the device (offload): it is copied to pinned host memory after the forward has produced it and
// back just before the backward recomputes from it, so the device holds the kept blocks' inputs,
// the final norm's and two staging slots instead of every block's. Losses, gradients and weights
// are the same bits whatever `kept` and offloading are (tests/model/, tests/stream/); only time
// and memory differ. The copies run on the compute stream, in order: at long contexts a block's
// input (B x T x C) moves in milliseconds while its forward takes seconds.
//
// The memory planner (plan/planner.hpp) turns a policy into `kept`: recompute -> 0, keep -> every
// block, automatic -> as many blocks as the device budget holds after everything else it plans
// (offloading the others' inputs only when the plan fits no other way), offload -> as many as
// the device holds with the recomputing blocks' inputs always offloaded. Kept parts are the
// step's cost model's choice (plan/planner.hpp: fastest_plan) under auto and offload.
#pragma once

#include <strata/backend/backend.hpp>       // Backend
#include <strata/core/error.hpp>            // strata::error
#include <strata/tensor/tiered_tensor.hpp>  // tiered_tensor

#include <algorithm>    // std::min
#include <cstddef>      // std::size_t
#include <limits>       // std::numeric_limits
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace strata {

enum class activation_policy { automatic, keep, recompute, offload };

constexpr std::string_view name_of(activation_policy p) {
    switch (p) {
        case activation_policy::automatic: return "auto";
        case activation_policy::keep: return "keep";
        case activation_policy::recompute: return "recompute";
        case activation_policy::offload: return "offload";
    }
    return "unknown";
}

// Every policy, in the order a command line lists them (name_of gives each one's name).
inline constexpr activation_policy activation_policies[] = {activation_policy::automatic, activation_policy::keep,
                                                            activation_policy::recompute, activation_policy::offload};

// "auto" | "keep" | "recompute" | "offload", as a command line writes it.
inline activation_policy activation_policy_from_string(std::string_view text) {
    for (activation_policy p : activation_policies)
        if (text == name_of(p)) return p;
    throw error("unknown activation policy '" + std::string(text) + "'", "use auto, keep, recompute or offload");
}

// How many blocks (the first ones) keep their forward activations for the backward, and whether
// the others' inputs wait for the backward in host memory. A type of its own so that neither a
// bool nor a stray integer can stand for it.
struct kept_activations {
    std::size_t count = 0;
    bool offload_inputs = false;  // the recomputing blocks' inputs live in pinned host memory
    // The recomputing blocks keep the part of their activations their layer names (selective
    // recompute: nn/layer.hpp, RecomputesPart; a transformer block's attention output and
    // statistics), each in a device buffer of its own, and recompute only the rest from it.
    bool keep_parts = false;

    static constexpr kept_activations none() { return {0}; }
    static constexpr kept_activations all() { return {std::numeric_limits<std::size_t>::max()}; }
    // Kept blocks of a model of `blocks` blocks.
    constexpr std::size_t of(std::size_t blocks) const { return std::min(count, blocks); }
    // Buffers of one block's activations that a model of `blocks` blocks allocates: one per kept
    // block, plus one shared by the recomputing blocks when there are any.
    constexpr std::size_t buffers(std::size_t blocks) const { return of(blocks) + (of(blocks) < blocks ? 1 : 0); }
    // Kept parts (keep_parts): one per recomputing block.
    constexpr std::size_t parts(std::size_t blocks) const { return keep_parts ? blocks - of(blocks) : 0; }

    // Block inputs: block l's is the input of its forward, input `blocks` is the final norm's.
    // Those whose block recomputes are offloaded when offload_inputs says so.
    constexpr std::size_t offloaded(std::size_t blocks) const { return offload_inputs ? blocks - of(blocks) : 0; }
    constexpr bool offloads(std::size_t layer, std::size_t blocks) const {
        return offload_inputs && layer >= of(blocks) && layer < blocks;
    }
    // Device slots for the inputs: one per input, or, offloading, one per kept block, the final
    // norm's, and two that the offloaded inputs take turns in (one when only one is offloaded).
    constexpr std::size_t input_slots(std::size_t blocks) const {
        return offloaded(blocks) ? of(blocks) + 1 + std::min<std::size_t>(offloaded(blocks), 2) : blocks + 1;
    }
    // The device slot of input `layer` (layer <= blocks).
    constexpr std::size_t input_slot(std::size_t layer, std::size_t blocks) const {
        if (!offloaded(blocks) || layer < of(blocks)) return layer;
        if (layer == blocks) return of(blocks);
        return of(blocks) + 1 + (layer - of(blocks)) % 2;
    }
    friend constexpr bool operator==(kept_activations, kept_activations) = default;
};

// The host side of offloaded block inputs: pinned host memory for each offloaded input of B x T x C
// elements, and the copies that move one between its device slot and there, on the compute stream.
template <class R, Backend B>
class offloaded_inputs {
public:
    offloaded_inputs(B& backend, std::size_t blocks, std::size_t BTC, kept_activations kept)
        : m_backend(&backend), m_blocks(blocks), m_kept(kept) {
        if (kept.offloaded(blocks) > 0)
            m_host.emplace(backend, shape{kept.offloaded(blocks) * BTC}, "act.offloaded_inputs");
    }

    // Enqueues on `s` the copy of input `layer` from `device` (its slot) to the host, when it is
    // offloaded (after the forward wrote it, before the slot's next input overwrites it).
    void save(std::size_t layer, const R* device, std::size_t BTC, typename B::stream& s) {
        if (m_kept.offloads(layer, m_blocks))
            m_backend->copy(host(layer, BTC), tier_id::host, device, tier_id::device, BTC * sizeof(R), s);
    }
    // Enqueues on `s` the copy of an offloaded input `layer` back into its slot `device`.
    void restore(std::size_t layer, R* device, std::size_t BTC, typename B::stream& s) {
        if (m_kept.offloads(layer, m_blocks))
            m_backend->copy(device, tier_id::device, host(layer, BTC), tier_id::host, BTC * sizeof(R), s);
    }

private:
    R* host(std::size_t layer, std::size_t BTC) { return m_host->data() + (layer - m_kept.of(m_blocks)) * BTC; }

    B* m_backend;
    std::size_t m_blocks;
    kept_activations m_kept;
    std::optional<tiered_tensor<R, host_tier, B>> m_host;
};

}  // namespace strata
