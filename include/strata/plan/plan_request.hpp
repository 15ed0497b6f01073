// plan_request: what the memory planner (plan/planner.hpp) is asked to place: a model's footprint
// for one micro-batch, each tier's budget, the user's constraints (placement, activations, slots,
// the optimizer state on storage) and, when known, the machine's rates, with which the planner
// takes the fitting plan that trains fastest (plan/cost_model.hpp).
#pragma once

#include <strata/model/activations.hpp>  // activation_policy
#include <strata/optim/optimizers.hpp>   // any_optimizer
#include <strata/plan/footprint.hpp>     // model_footprint
#include <strata/plan/machine.hpp>       // machine_rates
#include <strata/plan/memory_plan.hpp>   // tier_bytes, placement, link_bandwidths
#include <strata/tier/resources.hpp>     // physical_memory_bytes, free_disk_bytes

#include <cstddef>     // std::size_t
#include <filesystem>  // std::filesystem::path, temp_directory_path
#include <optional>    // std::optional

namespace strata {

// The machine's budgets, as tier_resources would default them: host = 90 % of RAM, storage = the
// free disk at `storage_dir` (empty: the temp directory, where tier_resources puts its files).
// The device budget comes from the caller: only the backend knows its free memory.
inline tier_bytes default_budgets(std::size_t device_bytes, const std::filesystem::path& storage_dir = {}) {
    return {.device = device_bytes,
            .host = physical_memory_bytes() / 10 * 9,
            .storage = free_disk_bytes(storage_dir.empty() ? std::filesystem::temp_directory_path() : storage_dir)};
}

struct plan_request {
    // The model and its micro-batch B x T: footprint_of<B>(model, batch, seq) (plan/footprint.hpp).
    model_footprint model;
    std::size_t accum = 1;       // micro-batches per optimizer step
    // keep: every block keeps its activations; recompute: none does; offload: the recomputing
    // blocks' inputs wait in host memory; automatic: the planner decides (memory_plan::kept_blocks).
    activation_policy activations = activation_policy::automatic;
    tier_bytes budgets;
    placement where = placement::automatic;
    // Every host group's optimizer state on storage, because the user asked for it (strata-llama
    // --moments storage). Otherwise the planner decides how much goes there: a storage directory
    // only says where its files go.
    bool state_on_storage = false;
    std::optional<std::size_t> slots;  // device slots when streamed (>= 2); empty: the planner's choice
    link_bandwidths links;             // measured or told; 0: unknown (the table then gives bytes only)
    any_optimizer optimizer;  // whose state tensors to count (train_options::optimizer; AdamW by default)
    // Data-parallel ranks (devices) training the plan at once (train/data_parallel.hpp): each has
    // the device footprint planned here, and its own host staging; the host state exists once.
    std::size_t ranks = 1;
    // The machine's rates (measured by plan/calibrate.hpp or read from a machine file): with them
    // (and one rank) the planner searches the placements and takes the fitting one with the least
    // predicted time per token (plan/cost_model.hpp). Empty: the fixed rules (planner.hpp).
    std::optional<machine_rates> rates;
};

}  // namespace strata
