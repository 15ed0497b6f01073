// The step's cost model: what it predicts of one optimizer step of a plan on a machine.
//
// PLACEHOLDER of branch i27-machine: only the result struct, as agreed with branch i27-cost, which
// writes the model itself (predict(memory_plan, plan_request, machine_rates) -> step_prediction).
// Merge: take i27-cost's file; plan/prediction_table.hpp prints this struct.
#pragma once

#include <cstddef>  // std::size_t
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

namespace strata {

struct step_prediction {
    double step_seconds = 0, tokens_per_second = 0;
    std::string bottleneck;  // "compute", "PCIe up", "PCIe down", "storage", "host optimizer"
    std::vector<std::pair<std::string, double>> busy;  // each resource's busy fraction of the step
    std::size_t compute_bound_accum = 0;  // where a link or the disk bounds the step: the accum at which compute does (0: none)
    double compute_bound_tokens_per_second = 0;  // tokens/s at that accum
};

}  // namespace strata
