// The cost model's prediction of a plan's step (plan/cost_model.hpp) as the lines the example
// programs print under the plan's table (plan/plan_table.hpp):
//
//   predicted step: 6.41 s, 1278 tokens/s, bound by storage
//   busy: compute 34.0 %, PCIe up (H2D) 12.1 %, PCIe down (D2H) 6.0 %, storage 100.0 %, host optimizer 20.3 %
//   advice: with accum 8 the step is compute-bound: 4021 tokens/s (the run's accum stays as given)
#pragma once

#include <strata/core/format.hpp>      // fmt::format (host only)
#include <strata/plan/cost_model.hpp>  // step_prediction, step_resource, all_step_resources, name_of

#include <string>  // std::string

namespace strata {

inline std::string prediction_table(const step_prediction& p) {
    std::string out = fmt::format("predicted step: {:.3g} s, {:.0f} tokens/s, bound by {}\n", p.seconds,
                                  p.tokens_per_second, name_of(p.bottleneck));
    std::string busy;
    for (step_resource r : all_step_resources) {
        if (p.busy(r) <= 0) continue;  // a resource the plan does not use (no link, no disk)
        busy += fmt::format("{}{} {:.1f} %", busy.empty() ? "" : ", ", name_of(r), 100.0 * p.busy_fraction(r));
    }
    if (!busy.empty()) out += "busy: " + busy + "\n";
    if (p.compute_bound_accum > 0 && p.bottleneck != step_resource::compute)
        out += fmt::format("advice: with accum {} the step is compute-bound: {:.0f} tokens/s (the run's accum stays as given)\n",
                           p.compute_bound_accum, p.compute_bound_tokens_per_second);
    return out;
}

}  // namespace strata
