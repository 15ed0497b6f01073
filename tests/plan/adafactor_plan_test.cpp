// The planner counts the optimizer's state from the optimizer's own shapes (optim/state_layout.hpp):
// Adafactor's factored second moment (a matrix's row and column variances) takes far less than
// AdamW's m and v, so at the same budgets a model fits with Adafactor and not with AdamW; and the
// plan is what the trainer running Adafactor allocates, to the byte.
#include <strata/nn/cpu_ops.hpp>              // ops<cpu_backend> (before the model is instantiated)
#include <strata/plan/planner.hpp>            // plan, memory_plan, plan_request
#include <strata/strata.hpp>                  // cpu_backend, tier_options, tier_id
#include <strata/train/tiered_trainer.hpp>  // tiered_trainer

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE

#include <algorithm>  // std::max
#include <cstddef>    // std::size_t

namespace adafactor_plan_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {
const gpt_config config{.vocab_size = 512, .max_seq = 16, .n_layer = 4, .n_head = 4, .n_embd = 256};
constexpr std::size_t generous = std::size_t(1) << 30;

plan_request request(const any_optimizer& optimizer, placement where, tier_bytes budgets) {
    plan_request r{.model = footprint_of<cpu_backend>(gpt_model<float, cpu_backend>(config), 2, config.max_seq),
                   .accum = 1, .budgets = budgets};
    r.where = where;
    if (where == placement::streamed) r.slots = 2;
    r.optimizer = optimizer;
    return r;
}
}  // namespace

TEST_CASE("a model that fits resident with Adafactor and not with AdamW at the same budgets") {
    const tier_bytes roomy{.device = generous, .host = generous, .storage = generous};
    const memory_plan adamw = plan(request(adamw_optimizer(), placement::resident, roomy));
    const memory_plan adafactor = plan(request(adafactor_optimizer(), placement::resident, roomy));
    const std::size_t adamw_state = adamw.bytes_of(plan_category::moments, tier_id::device);
    const std::size_t adafactor_state = adafactor.bytes_of(plan_category::moments, tier_id::device);
    MESSAGE("AdamW state " << adamw_state << " B, Adafactor state " << adafactor_state << " B, weights "
                           << adamw.bytes_of(plan_category::weights, tier_id::device) << " B");
    CHECK(adafactor_state * 4 < adamw_state);  // the blocks' matrices keep R + C per R x C
    CHECK(adafactor.state_label() == "Adafactor row_var, col_var, variance");
    // The device budget of Adafactor's plan: AdamW's resident plan does not fit it.
    const tier_bytes tight{.device = adafactor.total(tier_id::device), .host = generous, .storage = generous};
    CHECK(plan(request(adafactor_optimizer(), placement::resident, tight)).fits());
    CHECK_THROWS_AS(plan(request(adamw_optimizer(), placement::resident, tight)), error);
}

template <class Trainer>
void check_exact(const memory_plan& p) {
    const tier_options exact{.device_bytes = p.total(tier_id::device), .host_bytes = p.total(tier_id::host),
                             .storage_bytes = std::max<std::size_t>(p.total(tier_id::storage), 1)};
    gpt_model<float, cpu_backend> model(config);
    train_options o{.batch = 2, .seq = config.max_seq, .accum = 1, .activations = p.kept()};
    o.homes = p.trainer_homes();
    o.slots = p.slots;
    o.optimizer = adafactor_optimizer();
    cpu_backend backend(exact);
    Trainer t(backend, model, o);
    CHECK(backend.budget(tier_id::device).used() == p.total(tier_id::device));
    CHECK(backend.budget(tier_id::host).used() == p.total(tier_id::host));
}

TEST_CASE("an Adafactor plan is what the trainer allocates, resident and streamed") {
    const tier_bytes roomy{.device = generous, .host = generous, .storage = generous};
    check_exact<tiered_trainer<float, cpu_backend>>(plan(request(adafactor_optimizer(), placement::resident, roomy)));
    check_exact<tiered_trainer<float, cpu_backend>>(plan(request(adafactor_optimizer(), placement::streamed, roomy)));
}

}  // namespace adafactor_plan_test
