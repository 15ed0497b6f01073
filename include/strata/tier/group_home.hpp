// group_home: where one layer group's training state lives, the planner's answer per group.
//
//   weights  device: weights, gradients and the optimizer's state (AdamW's moments m and v, or
//                    another optimizer's state tensors) all on the device; the group never
//                    moves and its update runs on the device (as in the resident trainer).
//            host:   weights and gradients in pinned host memory; the group streams to the device
//                    for each use (or, for the groups used at both ends of a pass, once per step)
//                    and its update runs on the host.
//   moments  with device weights: device. With host weights: host, or storage (read before the
//            group's update and written back after it).
#pragma once

#include <strata/core/error.hpp>  // strata::error
#include <strata/tier/tier.hpp>   // tier_id, name_of

#include <cstddef>  // std::size_t
#include <string>   // std::string, std::to_string
#include <vector>   // std::vector

namespace strata {

struct group_home {
    tier_id weights = tier_id::host;  // and the gradients
    tier_id moments = tier_id::host;  // the optimizer's state (AdamW m and v)

    static constexpr group_home device() { return {tier_id::device, tier_id::device}; }
    static constexpr group_home host() { return {tier_id::host, tier_id::host}; }
    static constexpr group_home storage() { return {tier_id::host, tier_id::storage}; }

    friend constexpr bool operator==(const group_home&, const group_home&) = default;
};

// `groups` homes, every one `home`: a uniform placement written by hand (a plan gives its own:
// memory_plan::trainer_homes()).
inline std::vector<group_home> every_group(std::size_t groups, group_home home) {
    return std::vector<group_home>(groups, home);
}

// Throws for a combination no trainer implements (group g's).
inline void validate(const group_home& h, std::size_t g) {
    const bool ok = h.weights == tier_id::device ? h.moments == tier_id::device
                                                 : h.weights == tier_id::host && h.moments != tier_id::device;
    if (!ok)
        throw error("group " + std::to_string(g) + ": weights in the " + std::string(name_of(h.weights)) +
                        " tier with the optimizer's state in the " + std::string(name_of(h.moments)) +
                        " tier is not a home any trainer implements",
                    "device weights keep their optimizer state on the device; host weights keep it on the host or storage");
}

// Data parallel: which rank keeps and updates the optimizer state of each device-homed group.
// Device-homed groups are on every rank (weights and gradients); their optimizer state is not
// copied: the k-th device-homed group with state (device_state[g]: device-homed and trainable)
// belongs to rank k mod ranks, which alone updates it and then broadcasts its weights. Groups
// without device state get rank 0 (their update, if any, is the host's). The trainer and the
// planner both ask this function, so the plan counts what the trainer allocates.
inline std::vector<std::size_t> device_state_owners(const std::vector<bool>& device_state, std::size_t ranks) {
    std::vector<std::size_t> owner(device_state.size(), 0);
    std::size_t k = 0;
    for (std::size_t g = 0; g < device_state.size(); ++g)
        if (device_state[g]) owner[g] = ranks == 0 ? 0 : k++ % ranks;
    return owner;
}

}  // namespace strata
