// The prediction's lines under the plan (plan/prediction_table.hpp): step time, tokens/s, the
// bottleneck, each resource's busy fraction, and the accum advice only where a link or the disk
// bounds the step.
#include <strata/plan/prediction_table.hpp>  // prediction_table, step_prediction

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include <string>  // std::string

namespace prediction_table_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

step_prediction with_busy(double seconds, std::initializer_list<std::pair<step_resource, double>> busy) {
    step_prediction p;
    p.seconds = seconds;
    for (auto [r, s] : busy) p.busy_seconds[static_cast<std::size_t>(r)] = s;
    return p;
}

TEST_CASE("prediction table: a storage-bound step with its advice") {
    step_prediction p = with_busy(6.41, {{step_resource::compute, 0.34 * 6.41},
                                         {step_resource::pcie_up, 0.121 * 6.41},
                                         {step_resource::storage, 6.41}});
    p.tokens_per_second = 1278;
    p.bottleneck = step_resource::storage;
    p.compute_bound_accum = 8;
    p.compute_bound_tokens_per_second = 4021;
    const std::string t = prediction_table(p);
    CHECK(t.find("predicted step: 6.41 s, 1278 tokens/s, bound by storage\n") != std::string::npos);
    CHECK(t.find("busy: compute 34.0 %, PCIe up (H2D) 12.1 %, storage 100.0 %\n") != std::string::npos);
    CHECK(t.find("advice: with accum 8 the step is compute-bound: 4021 tokens/s") != std::string::npos);
}

TEST_CASE("prediction table: a compute-bound step gives no advice") {
    step_prediction p = with_busy(0.205, {{step_resource::compute, 0.205}});
    p.tokens_per_second = 39960;
    p.compute_bound_accum = 0;
    const std::string t = prediction_table(p);
    CHECK(t.find("predicted step: 0.205 s, 39960 tokens/s, bound by compute") != std::string::npos);
    CHECK(t.find("advice") == std::string::npos);
}

}  // namespace prediction_table_test
