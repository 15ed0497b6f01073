// The plain streamed placements the tests compare with the resident one, written by hand (a
// plan gives its own: memory_plan::trainer_homes() and memory_plan::slots).
#pragma once

#include <strata/tier/group_home.hpp>      // group_home, every_group
#include <strata/tier/tier.hpp>            // Tier, id_of, host_tier
#include <strata/train/train_options.hpp>  // train_options

#include <cstddef>  // std::size_t
#include <utility>  // std::forward

namespace strata::test {

// o with `slots` device slots for the streamed blocks and, unless o has homes of its own, every
// one of the model's `groups` layer groups at `home` (host: streamed, the optimizer's state on
// the host; storage: its state in files).
inline train_options streamed_options(train_options o, std::size_t groups, std::size_t slots,
                                      group_home home = group_home::host()) {
    if (o.homes.empty()) o.homes = every_group(groups, home);
    o.slots = slots;
    return o;
}

// Trainer on the plain streamed placement with `Slots` device slots and the optimizer's state in
// the Moments tier (host_tier or storage_tier), where its options name no homes: for the tests
// that take a trainer type as a template parameter (the placement itself is data:
// streamed_options).
template <class Trainer, std::size_t Slots, Tier Moments = host_tier>
struct streamed_trainer : Trainer {
    template <class B, class Model, class... Rest>
    streamed_trainer(B& backend, const Model& model, const train_options& o, Rest&&... rest)
        : Trainer(backend, model, streamed_options(o, model.groups().size(), Slots, {tier_id::host, id_of<Moments>}),
                  std::forward<Rest>(rest)...) {}
};

}  // namespace strata::test
