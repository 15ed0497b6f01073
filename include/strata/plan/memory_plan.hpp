// memory_plan: what the memory planner (plan/planner.hpp) decided, as data: the placement, each
// group's home, and the bytes per category (the table's rows) and tier (its columns). Printed by
// plan/plan_table.hpp.
#pragma once

#include <strata/core/error.hpp>         // strata::error
#include <strata/model/activations.hpp>  // kept_activations
#include <strata/optim/optimizers.hpp>    // any_optimizer, state_label
#include <strata/tier/group_home.hpp>    // group_home
#include <strata/tier/tier.hpp>          // tier_id, name_of

#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace strata {

// Where the training state lives. `automatic` is only a request: a plan is resident or streamed.
enum class placement { automatic, resident, streamed };

constexpr std::string_view name_of(placement p) {
    switch (p) {
        case placement::automatic: return "auto";
        case placement::resident: return "resident";
        case placement::streamed: return "streamed";
    }
    return "unknown";
}

// Every placement, in the order a command line lists them (name_of gives each one's name).
inline constexpr placement placements[] = {placement::automatic, placement::resident, placement::streamed};

// "auto" | "resident" | "streamed", as a command line writes it.
inline placement placement_from_string(std::string_view text) {
    for (placement p : placements)
        if (text == name_of(p)) return p;
    throw error("unknown placement '" + std::string(text) + "'", "use auto, resident or streamed");
}

// Bytes per tier (a budget, or what one category takes in each tier).
struct tier_bytes {
    std::size_t device = 0;
    std::size_t host = 0;
    std::size_t storage = 0;

    std::size_t& operator[](tier_id t) { return t == tier_id::device ? device : t == tier_id::host ? host : storage; }
    std::size_t operator[](tier_id t) const {
        return t == tier_id::device ? device : t == tier_id::host ? host : storage;
    }
};

inline constexpr std::array<tier_id, 3> all_tiers{tier_id::device, tier_id::host, tier_id::storage};

// Bytes per second of each link the training state crosses; 0: unknown.
struct link_bandwidths {
    double h2d = 0, d2h = 0, storage_read = 0, storage_write = 0;
};

// Bytes one optimizer step moves over each link (what transfer_counters count in a step).
struct link_bytes {
    std::size_t h2d = 0, d2h = 0, storage_read = 0, storage_write = 0;
};

// What the bytes are for: the rows of the plan's table. `moments` is the optimizer's state (every
// state tensor; the table labels it with their names: memory_plan::label_of). `slots` and `pinned`
// are the device copies of streamed and pinned groups (weights + grads) whose homes are on the host.
enum class plan_category { weights, grads, moments, activations, slots, pinned, staging };
inline constexpr std::array<plan_category, 7> all_plan_categories{
    plan_category::weights, plan_category::grads,  plan_category::moments, plan_category::activations,
    plan_category::slots,   plan_category::pinned, plan_category::staging};

constexpr std::string_view name_of(plan_category c) {
    switch (c) {
        case plan_category::weights: return "weights";
        case plan_category::grads: return "grads";
        case plan_category::moments: return "optimizer state";
        case plan_category::activations: return "activations";
        case plan_category::slots: return "device slots";
        case plan_category::pinned: return "pinned groups";
        case plan_category::staging: return "staging";
    }
    return "unknown";
}

struct memory_plan {
    placement where = placement::resident;
    tier_id weights_home = tier_id::device;
    tier_id grads_home = tier_id::device;
    // The optimizer's state (every state tensor: AdamW's m and v, SGD's momentum): the slowest
    // tier any group's state uses.
    tier_id state_home = tier_id::device;
    tier_id activations_home = tier_id::device;  // block inputs and kept activations
    std::size_t block_count = 0;   // transformer blocks
    std::size_t kept_blocks = 0;   // of them, those that keep their activations (the first ones)
    std::size_t offloaded_inputs = 0;  // of the others, those whose inputs wait in pinned host memory
    std::size_t kept_parts = 0;  // of the others, those that keep part of theirs (kept_activations::keep_parts)
    std::size_t block_part_bytes = 0;  // one such part
    std::size_t block_input_bytes = 0;  // one block's input (B x T x C)
    std::size_t block_activation_bytes = 0;  // one block's saved activations
    // streamed: device buffers for block weights, and as many for their gradients (prefetch depth
    // + 1); resident: 0
    std::size_t slots = 0;
    // Each group's home (streamed plans; the trainer's train_options::homes): a prefix of groups
    // on the device (embeddings and final norm first, then blocks 0, 1, ...), the rest streamed
    // from the host, the last ones' optimizer state on storage when the host cannot hold them.
    // weights_home / state_home above are the slowest tier any group's weights / state use.
    std::vector<group_home> homes;
    // Streamed plans: the bytes a step moves per link, and the bandwidths the estimate uses.
    link_bytes per_step;
    link_bandwidths links;

    std::size_t parameters = 0;           // real parameters of the model
    std::size_t trainable_parameters = 0; // of them, the trainable ones (the rest is frozen)
    std::size_t trainable_state_bytes = 0;  // one kind of gradient/state blocks (the trainable prefixes)
    any_optimizer optimizer;                // whose state the moments row counts
    // By group: the bytes of its optimizer state (every state tensor's block, as the trainer lays
    // them out from the optimizer's state shapes: optim/state_layout.hpp); 0: frozen.
    std::vector<std::size_t> group_state_bytes;
    std::size_t group_count = 0;          // layer groups (embeddings, blocks, final layernorm)
    std::size_t state_bytes = 0;          // one kind (e.g. the weights) of every group, page-padded
    std::size_t largest_group_bytes = 0;  // the largest trainable prefix of any group (state staging)
    std::size_t largest_block_bytes = 0;  // weights of the largest transformer block: one weight slot
    std::size_t largest_block_grad_bytes = 0;  // its largest trainable prefix: one gradient slot
    std::size_t pinned_group_bytes = 0;   // weights of the pinned groups (embeddings + final norm)
    std::size_t pinned_grad_bytes = 0;    // their gradients (0 when frozen)
    std::size_t activation_bytes = 0;     // the model's activations on the device (kept_blocks kept)
    std::size_t fewest_activation_bytes = 0;  // ... with every block recomputing
    std::size_t device_staging_bytes = 0;  // the grad-norm partial sums and workspace (both placements)
    std::size_t norm_partials_bytes = 0;   // the grad-norm partial sums (on the device and the host)
    // Data parallel: the ranks (devices) the plan is for. The device column is the fullest rank's
    // (the device-homed groups' optimizer state is spread over the ranks: device_state_owners);
    // the host's holds the state once and rank_staging_bytes (tokens, targets, losses, norm
    // partials) once per rank.
    std::size_t ranks = 1;
    std::size_t rank_staging_bytes = 0;
    // The least device memory any streamed plan needs: 2 slots x (the largest block's weights +
    // gradients) + the pinned groups (weights + grads) + activations (every block recomputing) +
    // the grad norm's staging.
    std::size_t min_streamed_device_bytes = 0;

    tier_bytes budgets;
    std::array<tier_bytes, all_plan_categories.size()> bytes{};  // by plan_category

    tier_bytes& of(plan_category c) { return bytes[static_cast<std::size_t>(c)]; }
    const tier_bytes& of(plan_category c) const { return bytes[static_cast<std::size_t>(c)]; }
    std::size_t bytes_of(plan_category c, tier_id t) const { return of(c)[t]; }
    // "AdamW m, v", "SGD momentum": the optimizer's state, as the table and messages name it.
    std::string state_label() const {
        return strata::state_label(optimizer.display_name(), optimizer.state_names());
    }
    // A table row's label: the category's name, the optimizer's state for `moments`.
    std::string label_of(plan_category c) const {
        return c == plan_category::moments ? state_label() : std::string(name_of(c));
    }

    std::size_t total(tier_id t) const {
        std::size_t sum = 0;
        for (const auto& row : bytes) sum += row[t];
        return sum;
    }
    bool fits() const {
        for (tier_id t : all_tiers)
            if (total(t) > budgets[t]) return false;
        return true;
    }

    // What the trainers' train_options::activations must be for this plan.
    kept_activations kept() const { return {kept_blocks, offloaded_inputs > 0, kept_parts > 0}; }
    // What train_options::homes must be: the streamed plans' homes; resident: none (all device).
    std::vector<group_home> trainer_homes() const { return where == placement::resident ? std::vector<group_home>{} : homes; }
};

}  // namespace strata
