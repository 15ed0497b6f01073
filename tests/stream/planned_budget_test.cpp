// The planner in use: a device budget of a third of the resident footprint trains, streamed;
// a budget below the streaming minimum is refused before anything is allocated.
#include "support/placements.hpp"  // test::streamed_trainer
#include <strata/nn/cpu_ops.hpp>
#include <strata/plan/planner.hpp>
#include <strata/strata.hpp>
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>

#include <filesystem>
#include <vector>

namespace planned_budget_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {
const gpt_config config{.vocab_size = 29, .max_seq = 8, .n_layer = 8, .n_head = 2, .n_embd = 64};

std::vector<data::batch> batch_of_pattern() {
    data::batch b;
    for (std::size_t i = 0; i < 8; ++i) {
        b.inputs.push_back(static_cast<token_id>(i % 5));
        b.targets.push_back(static_cast<token_id>((i + 1) % 5));
    }
    return {b};
}
}  // namespace

TEST_CASE("a device budget of a third of the resident footprint trains through the planner") {
    plan_request request{.model = footprint_of<cpu_backend>(gpt_model<float, cpu_backend>(config), 1, 8), .accum = 1,
                         .activations = activation_policy::recompute, .budgets = {std::size_t{1} << 40, std::size_t{1} << 30, 0}};
    request.where = placement::resident;
    const std::size_t resident_device = plan(request).total(tier_id::device);

    request.where = placement::automatic;
    request.budgets.device = resident_device / 3;
    const memory_plan p = plan(request);
    MESSAGE("resident footprint " << format_bytes(resident_device) << "; streamed plan with a third of it:\n"
                                  << plan_table(p));
    REQUIRE(p.where == placement::streamed);
    CHECK(p.total(tier_id::device) <= request.budgets.device);

    cpu_backend backend({.device_bytes = request.budgets.device, .host_bytes = request.budgets.host, .storage_bytes = 0});
    gpt_model<float, cpu_backend> model(config);
    train_options o{.batch = 1, .seq = 8, .accum = 1};
    o.schedule = {.kind = lr_kind::constant, .lr = 3e-3, .min_lr = 3e-3, .warmup_steps = 0, .total_steps = 30};
    REQUIRE(p.slots == 3);
    test::streamed_trainer<gpt_trainer<float, cpu_backend>, 3, host_tier> t(backend, model, o);
    t.initialize(4);
    const auto micro = batch_of_pattern();
    const double first = t.step(micro).loss;
    double last = first;
    for (int i = 0; i < 29; ++i) last = t.step(micro).loss;
    CHECK(last < 0.5 * first);
    CHECK(backend.budget(tier_id::device).peak() <= resident_device / 3);

    // and resident training with that budget is refused by the allocator, naming the tier
    cpu_backend small({.device_bytes = request.budgets.device, .host_bytes = request.budgets.host, .storage_bytes = 0});
    CHECK_THROWS_WITH_AS((gpt_trainer<float, cpu_backend>(small, model, o)), doctest::Contains("device tier over budget"),
                         strata::error);
}

TEST_CASE("a device budget below the streaming minimum is refused with the numbers, before allocating") {
    plan_request request{.model = footprint_of<cpu_backend>(gpt_model<float, cpu_backend>(config), 1, 8), .accum = 1,
                         .activations = activation_policy::recompute, .budgets = {std::size_t{1} << 40, std::size_t{1} << 30, 0}};
    request.where = placement::streamed;
    request.slots = 2;
    const std::size_t minimum = plan(request).total(tier_id::device);
    request.budgets.device = minimum - 1;
    request.where = placement::automatic;
    try {
        plan(request);
        FAIL("a budget below the minimum was accepted");
    } catch (const strata::error& e) {
        const std::string what = e.what();
        CHECK(what.find(std::to_string(minimum)) != std::string::npos);
        CHECK(what.find(std::to_string(minimum - 1)) != std::string::npos);
    }
}

}  // namespace planned_budget_test
