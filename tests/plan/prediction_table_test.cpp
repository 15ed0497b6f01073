// The prediction's lines under the plan (plan/prediction_table.hpp): step time, tokens/s, the
// bottleneck, each resource's busy fraction, and the accum advice only where a link or the disk
// bounds the step.
#include <strata/plan/prediction_table.hpp>  // prediction_table, step_prediction

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include <string>  // std::string

namespace prediction_table_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

TEST_CASE("prediction table: a storage-bound step with its advice") {
    const step_prediction p{.step_seconds = 6.41,
                            .tokens_per_second = 1278,
                            .bottleneck = "storage",
                            .busy = {{"compute", 0.34}, {"PCIe up", 0.121}, {"storage", 1.0}},
                            .compute_bound_accum = 8,
                            .compute_bound_tokens_per_second = 4021};
    const std::string t = prediction_table(p);
    CHECK(t.find("predicted step: 6.41 s, 1278 tokens/s, bound by storage\n") != std::string::npos);
    CHECK(t.find("busy: compute 34.0 %, PCIe up 12.1 %, storage 100.0 %\n") != std::string::npos);
    CHECK(t.find("advice: with accum 8 the step is compute-bound: 4021 tokens/s") != std::string::npos);
}

TEST_CASE("prediction table: a compute-bound step gives no advice") {
    const step_prediction p{.step_seconds = 0.205, .tokens_per_second = 39960, .bottleneck = "compute",
                            .busy = {{"compute", 1.0}}, .compute_bound_accum = 0};
    const std::string t = prediction_table(p);
    CHECK(t.find("predicted step: 0.205 s, 39960 tokens/s, bound by compute") != std::string::npos);
    CHECK(t.find("advice") == std::string::npos);
}

}  // namespace prediction_table_test
