// The planner counts the optimizer's state tensors: SGD with momentum keeps one (half of AdamW's
// m and v bytes), its table row and homes say "SGD momentum", its storage traffic is one read and
// one write of the momentum per step; and an SGD plan is what the trainer running SGD allocates,
// to the byte, resident and streamed with the momentum on the host and on storage.
#include "support/placements.hpp"  // test::streamed_trainer
#include <strata/nn/cpu_ops.hpp>              // ops<cpu_backend> (before the model is instantiated)
#include "support/random_batch.hpp"  // test::counting_batches
#include <strata/plan/planner.hpp>            // plan, memory_plan, plan_request
#include <strata/strata.hpp>                  // cpu_backend, tier_options, tier_id
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE, SUBCASE

#include <unistd.h>  // getpid

#include <cmath>        // std::isfinite
#include <cstddef>      // std::size_t
#include <filesystem>   // std::filesystem
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

namespace sgd_plan_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

const gpt_config config{.vocab_size = 64, .max_seq = 16, .n_layer = 4, .n_head = 4, .n_embd = 64};
constexpr std::size_t generous = std::size_t(256) << 20;

plan_request request(const any_optimizer& optimizer, placement where, bool on_storage) {
    plan_request r{.model = footprint_of<cpu_backend>(gpt_model<float, cpu_backend>(config), 2, config.max_seq),
                   .accum = 2,
                   .budgets = {.device = generous, .host = generous, .storage = generous}};
    r.where = where;
    r.state_on_storage = on_storage;
    r.optimizer = optimizer;
    return r;
}

std::vector<data::batch> micro_batches(std::size_t accum, std::size_t BT) {
    return test::counting_batches({.vocab = config.vocab_size, .tokens = BT, .count = accum, .stride = 1, .offset = 3});
}

// The trainer of plan p, running SGD in exactly the plan's budgets: every tier's peak over a step
// is the plan's total.
template <class Trainer>
void check_exact(const memory_plan& p, const plan_request& r) {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("strata-sgd-plan-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    const tier_options exact{.device_bytes = p.total(tier_id::device),
                             .host_bytes = p.total(tier_id::host),
                             .storage_bytes = p.total(tier_id::storage),
                             .storage_dir = dir};
    gpt_model<float, cpu_backend> model(config);
    train_options o{.batch = r.model.batch, .seq = r.model.seq, .accum = r.accum, .activations = p.kept()};
    o.homes = p.trainer_homes();
    o.optimizer = sgd_optimizer();
    {
        cpu_backend backend(exact);
        Trainer t(backend, model, o);
        CHECK(backend.budget(tier_id::device).used() == p.total(tier_id::device));
        CHECK(backend.budget(tier_id::host).used() == p.total(tier_id::host));
        CHECK(backend.budget(tier_id::storage).used() == p.total(tier_id::storage));
        t.initialize(1);
        const step_result res = t.step(micro_batches(r.accum, r.model.batch * r.model.seq));
        CHECK(std::isfinite(res.loss));
        for (tier_id tier : all_tiers) CHECK(backend.budget(tier).peak() == p.total(tier));
        if (p.where == placement::streamed) {  // the momentum of storage groups, read and written once
            CHECK(t.counters().storage_read_bytes == p.per_step.storage_read);
            CHECK(t.counters().storage_write_bytes == p.per_step.storage_write);
        }
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
}

}  // namespace

TEST_CASE("the planner counts one state tensor for SGD: half of AdamW's moment bytes, named in the table") {
    for (const auto where : {placement::resident, placement::streamed}) {
        for (const bool on_storage : {false, true}) {
            if (where == placement::resident && on_storage) continue;
            CAPTURE(name_of(where));
            CAPTURE(on_storage);
            const memory_plan adamw = plan(request(adamw_optimizer(), where, on_storage));
            const memory_plan sgd = plan(request(sgd_optimizer(), where, on_storage));
            REQUIRE(sgd.where == where);
            CHECK(sgd.optimizer.state_names().size() == 1);
            CHECK(adamw.optimizer.state_names().size() == 2);
            const tier_id home = where == placement::resident ? tier_id::device
                                 : on_storage                 ? tier_id::storage
                                                              : tier_id::host;
            CHECK(sgd.state_home == home);
            CHECK(sgd.bytes_of(plan_category::moments, home) == sgd.trainable_state_bytes);
            CHECK(2 * sgd.bytes_of(plan_category::moments, home) == adamw.bytes_of(plan_category::moments, home));
            // everything else is the same
            for (plan_category c : all_plan_categories)
                if (c != plan_category::moments && c != plan_category::staging)
                    for (tier_id t : all_tiers) CHECK(sgd.bytes_of(c, t) == adamw.bytes_of(c, t));
            if (on_storage) {  // one staging buffer per state tensor and set (two sets), and one read per step
                CHECK(adamw.bytes_of(plan_category::staging, tier_id::host) -
                          sgd.bytes_of(plan_category::staging, tier_id::host) ==
                      2 * sgd.largest_group_bytes);
                CHECK(sgd.per_step.storage_read == sgd.trainable_state_bytes);
                CHECK(2 * sgd.per_step.storage_read == adamw.per_step.storage_read);
            }
            const std::string table = plan_table(sgd);
            CHECK(table.find("\nSGD momentum") != std::string::npos);
            CHECK(table.find("AdamW") == std::string::npos);
            CHECK(plan_table(adamw).find("\nAdamW m, v") != std::string::npos);
            if (on_storage) CHECK(table.find("host, SGD momentum on storage") != std::string::npos);
        }
    }
}

TEST_CASE("an SGD plan is what the trainer running SGD allocates: resident, streamed on the host and on storage") {
    SUBCASE("resident") {
        const plan_request r = request(sgd_optimizer(), placement::resident, false);
        check_exact<gpt_trainer<float, cpu_backend>>(plan(r), r);
    }
    SUBCASE("streamed, momentum on the host") {
        const plan_request r = request(sgd_optimizer(), placement::streamed, false);
        const memory_plan p = plan(r);
        REQUIRE(p.slots == 3);
        check_exact<test::streamed_trainer<gpt_trainer<float, cpu_backend>, 3, host_tier>>(p, r);
    }
    SUBCASE("streamed, momentum on storage") {
        const plan_request r = request(sgd_optimizer(), placement::streamed, true);
        const memory_plan p = plan(r);
        REQUIRE(p.slots == 3);
        REQUIRE(p.state_home == tier_id::storage);
        check_exact<test::streamed_trainer<gpt_trainer<float, cpu_backend>, 3, storage_tier>>(p, r);
    }
}

}  // namespace sgd_plan_test
