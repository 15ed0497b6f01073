// Plans of a decoder_model (a model assembled from Layers) are what the trainers allocate, frozen
// tensors included: with budgets of exactly the plan's totals, a resident and a streamed step fit
// and every tier's peak is the plan's total to the byte. Freezing the embeddings saves exactly
// their gradients, m and v in the plan.
#include "support/placements.hpp"  // test::streamed_trainer
#include <strata/model/decoder.hpp>            // decoder_model, decoder_config
#include <strata/nn/cpu_ops.hpp>               // ops<cpu_backend>
#include "support/random_batch.hpp"  // test::counting_batches
#include <strata/nn/gpt2_block.hpp>            // gpt2_block
#include <strata/nn/layernorm_layer.hpp>       // layernorm_layer
#include <strata/plan/planner.hpp>             // plan, footprint_of
#include <strata/strata.hpp>                   // cpu_backend
#include <strata/train/tiered_trainer.hpp>   // tiered_trainer

#include <doctest/doctest.h>

#include <cstddef>  // std::size_t
#include <vector>   // std::vector

namespace decoder_plan_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

using model_t = decoder_model<gpt2_block<float, cpu_backend>, layernorm_layer<float, cpu_backend>>;
const gpt_config shape{.vocab_size = 96, .max_seq = 8, .n_layer = 3, .n_head = 2, .n_embd = 32};

model_t make_model(bool freeze_embeddings) {
    return model_t({.vocab_size = shape.vocab_size,
                    .max_seq = shape.max_seq,
                    .n_layer = shape.n_layer,
                    .n_embd = shape.n_embd,
                    .freeze_embeddings = freeze_embeddings},
                   shape, layernorm_config{.channels = shape.n_embd, .trainable = !freeze_embeddings});
}

std::vector<data::batch> micro_batches(std::size_t accum, std::size_t BT) {
    return test::counting_batches({.vocab = shape.vocab_size, .tokens = BT, .count = accum, .stride = 7, .offset = 1});
}

memory_plan plan_for(const model_t& model, placement where) {
    plan_request r{.model = footprint_of<cpu_backend>(model, 2, shape.max_seq), .accum = 2,
                   .activations = activation_policy::recompute, .where = where};
    r.budgets = {.device = std::size_t(1) << 30, .host = std::size_t(1) << 30, .storage = 0};
    return plan(r);
}

// Device (and host, streamed) budgets of exactly the plan's totals; the resident trainer's
// initialize() goes through a temporary host buffer the plan does not count, so its host use is
// checked right after construction instead.
template <class Trainer>
void check_exact(const model_t& model, const memory_plan& p) {
    const bool resident = p.where == placement::resident;
    cpu_backend backend(tier_options{.device_bytes = p.total(tier_id::device),
                                     .host_bytes = resident ? std::size_t(1) << 30 : p.total(tier_id::host)});
    {
        Trainer t(backend, model, train_options{.batch = 2, .seq = shape.max_seq, .accum = 2});
        CHECK(backend.budget(tier_id::device).used() == p.total(tier_id::device));
        CHECK(backend.budget(tier_id::host).used() == p.total(tier_id::host));
        t.initialize(3);
        t.step(micro_batches(2, 2 * shape.max_seq));
    }
    CHECK(backend.budget(tier_id::device).peak() == p.total(tier_id::device));
    if (!resident) CHECK(backend.budget(tier_id::host).peak() == p.total(tier_id::host));
}

}  // namespace

TEST_CASE("a decoder_model's plans are what the trainers allocate, frozen tensors included") {
    for (bool frozen : {false, true}) {
        CAPTURE(frozen);
        const model_t model = make_model(frozen);
        const memory_plan resident = plan_for(model, placement::resident);
        const memory_plan streamed = plan_for(model, placement::streamed);
        REQUIRE(streamed.slots == 3);
        check_exact<tiered_trainer<float, cpu_backend, model_t>>(model, resident);
        check_exact<test::streamed_trainer<tiered_trainer<float, cpu_backend, model_t>, 3, host_tier>>(model, streamed);
    }
}

TEST_CASE("freezing the embeddings and the final norm saves exactly their gradients, m and v") {
    const model_t trained = make_model(false), frozen = make_model(true);
    const std::size_t saved = trained.groups()[0].bytes() + trained.groups()[trained.final_group()].bytes();
    const memory_plan a = plan_for(trained, placement::streamed), b = plan_for(frozen, placement::streamed);
    CHECK(a.total(tier_id::host) - b.total(tier_id::host) == 3 * saved);       // grads, m, v on the host
    CHECK(a.total(tier_id::device) - b.total(tier_id::device) == saved);       // the pinned groups' grads
    CHECK(b.trainable_parameters < b.parameters);
    CHECK(plan_table(b).find("trainable") != std::string::npos);
    const memory_plan c = plan_for(trained, placement::resident), d = plan_for(frozen, placement::resident);
    CHECK(c.total(tier_id::device) - d.total(tier_id::device) == 3 * saved);
}

}  // namespace decoder_plan_test
