// The planner counts the optimizer's state from the optimizer's own shapes (optim/state_layout.hpp):
// Adafactor's factored second moment (a matrix's row and column variances) takes far less than
// AdamW's m and v, so at the same budgets a model fits with Adafactor and not with AdamW; and the
// plan is what the trainer running Adafactor allocates, to the byte.
#include <strata/nn/cpu_ops.hpp>              // ops<cpu_backend> (before the model is instantiated)
#include <strata/plan/cost_model.hpp>         // predict, step_prediction
#include <strata/plan/planner.hpp>            // plan, memory_plan, plan_request
#include <strata/strata.hpp>                  // cpu_backend, tier_options, tier_id
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

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
    check_exact<gpt_trainer<float, cpu_backend>>(plan(request(adafactor_optimizer(), placement::resident, roomy)));
    check_exact<gpt_trainer<float, cpu_backend>>(plan(request(adafactor_optimizer(), placement::streamed, roomy)));
}

// The cost model runs a resident Adafactor step's device updates at the optimizer's own device
// rate (machine_rates::device_optimizer): Adafactor's sums and passes are not memory-bound as
// AdamW's kernel is, so without the rate its updates would be predicted at memory speed (the
// 16.6B run: 11.5 s predicted, 14.2 s measured). An optimizer without a rate stays memory-bound.
TEST_CASE("a resident Adafactor step is predicted at Adafactor's device rate") {
    const tier_bytes roomy{.device = generous, .host = generous, .storage = generous};
    const plan_request r = request(adafactor_optimizer(), placement::resident, roomy);
    const memory_plan p = plan(r);
    std::size_t parameters = 0;
    for (std::size_t bytes : r.model.trainable_bytes) parameters += bytes / r.model.element_bytes;
    machine_rates m;
    m.gemm_flops = 1e12;
    m.attention_flops = 1e12;
    m.device_memory = 1e12;
    m.host_optimizer = {{"adamw", 1e9}, {"sgd", 1e9}, {"adafactor", 1e9}};
    const step_prediction memory_bound = predict(p, r, m);
    m.device_optimizer = {{"adafactor", 1e7}};
    const step_prediction at_rate = predict(p, r, m);
    CHECK(at_rate.busy(step_resource::device_optimizer) == doctest::Approx(static_cast<double>(parameters) / 1e7));
    CHECK(memory_bound.busy(step_resource::device_optimizer) < at_rate.busy(step_resource::device_optimizer) / 10);
    CHECK(at_rate.seconds - memory_bound.seconds ==
          doctest::Approx(at_rate.busy(step_resource::device_optimizer) - memory_bound.busy(step_resource::device_optimizer)));
    CHECK(at_rate.bottleneck == step_resource::device_optimizer);
    // AdamW's prediction does not take Adafactor's rate.
    const plan_request a = request(adamw_optimizer(), placement::resident, roomy);
    const memory_plan ap = plan(a);
    machine_rates no_rates = m;
    no_rates.device_optimizer.clear();
    CHECK(predict(ap, a, m).busy(step_resource::device_optimizer) ==
          doctest::Approx(predict(ap, a, no_rates).busy(step_resource::device_optimizer)));
}

}  // namespace adafactor_plan_test
