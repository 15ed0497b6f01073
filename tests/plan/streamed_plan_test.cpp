// A streamed plan is what the streamed trainer really allocates: for prefetch depth 1 and 2 and
// AdamW moments in the host and the storage tier, one step with accumulation on a backend whose
// budgets are exactly the plan's totals fits, and each tier's peak is the plan's total, to the byte.
#include "support/placements.hpp"  // test::streamed_trainer
#include <strata/nn/cpu_ops.hpp>               // ops<cpu_backend> (before the model is instantiated)
#include "support/random_batch.hpp"  // test::counting_batches
#include <strata/plan/planner.hpp>             // plan, memory_plan, plan_request
#include <strata/strata.hpp>                   // cpu_backend, tier_options, tier_id
#include <strata/train/checkpoint.hpp>         // download_blocks
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE

#include <unistd.h>  // getpid

#include <cmath>        // std::isfinite
#include <cstddef>      // std::size_t
#include <filesystem>   // std::filesystem
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

namespace streamed_plan_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

// A block is the largest group: the slots and the optimizer's staging are the same size.
const gpt_config blocks_largest{.vocab_size = 64, .max_seq = 16, .n_layer = 8, .n_head = 4, .n_embd = 64};
// The embeddings ((512 + 8) x 16 floats) outweigh a block (12 C^2 + 13 C): slots stay block-sized.
const gpt_config embeddings_largest{.vocab_size = 512, .max_seq = 8, .n_layer = 3, .n_head = 2, .n_embd = 16};

std::vector<data::batch> micro_batches(const gpt_config& c, std::size_t accum, std::size_t BT) {
    return test::counting_batches({.vocab = c.vocab_size, .tokens = BT, .count = accum, .stride = 1, .offset = 3});
}

// A fresh storage directory per run, removed at the end.
struct temp_dir {
    std::filesystem::path path;
    explicit temp_dir(const std::string& tag) {
        static int count = 0;
        path = std::filesystem::temp_directory_path() /
               ("strata-plan-test-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(count++));
        std::filesystem::remove_all(path);
    }
    ~temp_dir() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
};

// The GPT's footprint for B x T micro-batches: what the planner plans.
model_footprint footprint(const gpt_config& c, std::size_t B, std::size_t T) {
    return footprint_of<cpu_backend>(gpt_model<float, cpu_backend>(c), B, T);
}

template <std::size_t Depth, class Moments>
void check_streamed_plan(const gpt_config& c, double clip) {
    constexpr bool on_storage = std::is_same_v<Moments, storage_tier>;
    constexpr std::size_t generous = std::size_t(256) << 20;
    plan_request r{.model = footprint(c, 2, c.max_seq), .accum = 2,
                   .budgets = {.device = generous, .host = generous, .storage = generous}};
    r.where = placement::streamed;
    r.slots = Depth + 1;
    r.state_on_storage = on_storage;
    const memory_plan p = plan(r);
    REQUIRE(p.where == placement::streamed);
    REQUIRE(p.slots == Depth + 1);
    REQUIRE(p.state_home == id_of<Moments>);
    REQUIRE(p.state_home == id_of<Moments>);
    CHECK((p.total(tier_id::storage) > 0) == on_storage);

    // The trainer runs in exactly the plan's budgets.
    temp_dir dir(std::to_string(Depth) + (on_storage ? "-storage" : "-host"));
    const tier_options exact{.device_bytes = p.total(tier_id::device),
                             .host_bytes = p.total(tier_id::host),
                             .storage_bytes = p.total(tier_id::storage),
                             .storage_dir = dir.path};
    gpt_model<float, cpu_backend> model(c);
    const train_options o{.batch = r.model.batch, .seq = r.model.seq, .accum = r.accum, .clip = clip, .activations = p.kept()};
    {
        cpu_backend backend(exact);
        test::streamed_trainer<gpt_trainer<float, cpu_backend>, Depth + 1, Moments> t(backend, model, o);
        // every device and host byte and every storage file is allocated up front
        CHECK(backend.budget(tier_id::device).used() == p.total(tier_id::device));
        CHECK(backend.budget(tier_id::host).used() == p.total(tier_id::host));
        CHECK(backend.budget(tier_id::storage).used() == p.total(tier_id::storage));
        t.initialize(1);
        const step_result res = t.step(micro_batches(c, r.accum, r.model.batch * r.model.seq));
        CHECK(std::isfinite(res.loss));
        CHECK(res.loss > 0);
        CHECK(res.tokens == r.accum * r.model.batch * r.model.seq);
        CHECK(backend.budget(tier_id::device).peak() == p.total(tier_id::device));
        CHECK(backend.budget(tier_id::host).peak() == p.total(tier_id::host));
        CHECK(backend.budget(tier_id::storage).peak() == p.total(tier_id::storage));
        CHECK(backend.budget(tier_id::storage).used() == p.total(tier_id::storage));
        // the staging is the trainer's, allocated with it: nothing is given back after the step
        // (a pinned allocation or free inside a step would synchronize the device)
        CHECK(backend.budget(tier_id::device).used() == p.total(tier_id::device));
        CHECK(backend.budget(tier_id::host).used() == p.total(tier_id::host));
    }

    // One page less of device memory and the trainer cannot be built: the plan is tight.
    tier_options short_device = exact;
    short_device.device_bytes = p.total(tier_id::device) - 1;
    cpu_backend backend(short_device);
    using streamed_t = test::streamed_trainer<gpt_trainer<float, cpu_backend>, Depth + 1, Moments>;
    CHECK_THROWS_AS(streamed_t(backend, model, o), error);
}

template <std::size_t Depth, class Moments>
void check_configs() {
    for (const gpt_config& c : {blocks_largest, embeddings_largest})
        for (double clip : {1.0, 0.0}) {  // clip 0: no clip coefficient folded into AdamW
            CAPTURE(c.vocab_size);
            CAPTURE(c.n_embd);
            CAPTURE(clip);
            check_streamed_plan<Depth, Moments>(c, clip);
        }
}

}  // namespace

TEST_CASE("a streamed plan is what the streamed trainer allocates: prefetch depth 1, moments on the host") {
    check_configs<1, host_tier>();
}

TEST_CASE("a streamed plan is what the streamed trainer allocates: prefetch depth 2, moments on the host") {
    check_configs<2, host_tier>();
}

TEST_CASE("a streamed plan is what the streamed trainer allocates: prefetch depth 1, moments on storage") {
    check_configs<1, storage_tier>();
}

TEST_CASE("a streamed plan is what the streamed trainer allocates: prefetch depth 2, moments on storage") {
    check_configs<2, storage_tier>();
}

TEST_CASE("the planner's own choice builds: its slots and moments' home name a trainer that fits") {
    // auto placement on a device budget too small for resident: the planner picks 3 slots or 2
    const gpt_config c = blocks_largest;
    plan_request r{.model = footprint(c, 2, c.max_seq), .accum = 2,
                   .budgets = {.device = std::size_t(256) << 20, .host = std::size_t(256) << 20, .storage = 0}};
    const memory_plan resident = plan(r);
    REQUIRE(resident.where == placement::resident);
    // 4/11 of it (a third is exactly what keeping every block's activations takes with every group
    // streamed, so the embeddings would find no room)
    r.budgets.device = resident.total(tier_id::device) * 4 / 11;
    const memory_plan p = plan(r);
    REQUIRE(p.where == placement::streamed);
    REQUIRE(p.state_home == tier_id::host);
    REQUIRE((p.slots == 2 || p.slots == 3));
    // the device holds what it can: the embeddings and the final norm, and some first blocks
    const std::size_t G = c.n_layer + 2;
    REQUIRE(p.homes.size() == G);
    CHECK(p.homes[0] == group_home::device());
    CHECK(p.homes[G - 1] == group_home::device());
    CHECK(p.homes[G - 2] == group_home::host());
    CAPTURE(plan_table(p));
    cpu_backend backend({.device_bytes = r.budgets.device, .host_bytes = r.budgets.host, .storage_bytes = 0});
    gpt_model<float, cpu_backend> model(c);
    // auto activations: the blocks the rest of the device budget holds keep theirs
    CHECK(p.kept_blocks > 0);
    const train_options o{.batch = r.model.batch,
                          .seq = r.model.seq,
                          .accum = r.accum,
                          .activations = p.kept(),
                          .homes = p.trainer_homes(),
                          .slots = p.slots};
    {
        gpt_trainer<float, cpu_backend> t(backend, model, o);
        t.initialize(2);
        (void)t.step(micro_batches(c, r.accum, r.model.batch * r.model.seq));
    }
    CHECK(backend.budget(tier_id::device).peak() == p.total(tier_id::device));
    CHECK(backend.budget(tier_id::device).peak() <= r.budgets.device);
    CHECK(backend.budget(tier_id::host).peak() == p.total(tier_id::host));
}

// Placement is data: the slots are the options', and fewer than 2 cannot stream a block (one
// computes while the next is filled); with no block streaming they are not used.
TEST_CASE("train_options::slots below 2 is refused when a block streams, unused when none does") {
    const gpt_config c = blocks_largest;
    cpu_backend backend({.device_bytes = std::size_t(256) << 20, .host_bytes = std::size_t(256) << 20, .storage_bytes = 0});
    gpt_model<float, cpu_backend> model(c);
    train_options o{.batch = 2, .seq = 8};
    o.slots = 1;
    using trainer = gpt_trainer<float, cpu_backend>;
    CHECK_NOTHROW(trainer(backend, model, o));  // resident: no slots
    o.homes = every_group(model.groups().size(), group_home::host());
    CHECK_THROWS_WITH_AS(trainer(backend, model, o),
                         doctest::Contains("train_options::slots is 1: streaming a block needs at least 2 device slots"),
                         error);
    o.slots = 2;
    CHECK_NOTHROW(trainer(backend, model, o));
}

// Issue 13: with a device budget that holds some groups and a host budget that cannot hold every
// streamed group's moments, the planner spreads the state over all three tiers. The trainer
// allocates exactly the plan, and trains bitwise as the resident trainer (accumulation, clipping).
TEST_CASE("a plan across all three tiers is what the trainer allocates, and it trains bitwise as resident") {
    const gpt_config c = blocks_largest;
    constexpr std::size_t generous = std::size_t(256) << 20;
    plan_request r{.model = footprint(c, 2, c.max_seq), .accum = 2,
                   .activations = activation_policy::recompute,
                   .budgets = {.device = generous, .host = generous, .storage = generous}};
    const memory_plan resident = plan(r);
    REQUIRE(resident.where == placement::resident);
    r.budgets.device = resident.total(tier_id::device) / 2;
    const memory_plan roomy_host = plan(r);
    // two blocks' moments (and the storage staging) no longer fit the host
    r.budgets.host = roomy_host.total(tier_id::host) - 2 * roomy_host.largest_block_grad_bytes;
    const memory_plan p = plan(r);
    CAPTURE(plan_table(p));
    REQUIRE(p.where == placement::streamed);
    std::size_t on_device = 0, on_host = 0, on_storage = 0;
    for (const group_home& h : p.homes) {
        on_device += h.weights == tier_id::device;
        on_host += h.weights == tier_id::host && h.moments == tier_id::host;
        on_storage += h.moments == tier_id::storage;
    }
    CHECK(on_device >= 3);  // embeddings, final norm, block 0 at least
    CHECK(on_host >= 1);
    CHECK(on_storage >= 2);
    CHECK(p.homes[1] == group_home::device());                 // the first block
    CHECK(p.homes[c.n_layer] == group_home::storage());        // the last block
    CHECK(plan_table(p).find("blocks 0-") != std::string::npos);

    temp_dir dir("three-tiers");
    const tier_options exact{.device_bytes = p.total(tier_id::device),
                             .host_bytes = p.total(tier_id::host),
                             .storage_bytes = p.total(tier_id::storage),
                             .storage_dir = dir.path};
    gpt_model<float, cpu_backend> model(c);
    train_options o{.batch = r.model.batch, .seq = r.model.seq, .accum = r.accum, .clip = 0.05, .activations = p.kept(),
                    .homes = p.trainer_homes()};
    o.schedule = {.kind = lr_kind::cosine, .lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 1, .total_steps = 4};
    const int steps = 4;
    auto batches = [&](int s) {
        auto micro = micro_batches(c, r.accum, r.model.batch * r.model.seq);
        for (auto& b : micro)
            for (auto& t : b.inputs) t = static_cast<token_id>((t + 5 * s) % c.vocab_size);
        return micro;
    };
    std::vector<double> losses, norms;
    host_blocks<float> params, m, v;
    {
        cpu_backend backend(exact);
        using tiered_t = test::streamed_trainer<gpt_trainer<float, cpu_backend>, 3, host_tier>;
        REQUIRE(p.slots == 3);
        tiered_t t(backend, model, o);
        CHECK(backend.budget(tier_id::device).used() == p.total(tier_id::device));
        CHECK(backend.budget(tier_id::host).used() == p.total(tier_id::host));
        CHECK(backend.budget(tier_id::storage).used() == p.total(tier_id::storage));
        t.initialize(4);
        for (int s = 0; s < steps; ++s) {
            const transfer_counters before = t.counters();
            const step_result res = t.step(batches(s));
            losses.push_back(res.loss);
            norms.push_back(res.grad_norm);
            // the plan's traffic per step is what the step moves, link by link
            CHECK(t.counters().h2d_bytes - before.h2d_bytes == p.per_step.h2d);
            CHECK(t.counters().d2h_bytes - before.d2h_bytes == p.per_step.d2h);
            CHECK(t.counters().storage_read_bytes - before.storage_read_bytes == p.per_step.storage_read);
            CHECK(t.counters().storage_write_bytes - before.storage_write_bytes == p.per_step.storage_write);
        }
        CHECK(p.per_step.storage_read > 0);
        CHECK(plan_table(p).find("per step: H2D ") != std::string::npos);
        CHECK(backend.budget(tier_id::device).peak() == p.total(tier_id::device));
        CHECK(backend.budget(tier_id::host).peak() == p.total(tier_id::host));
        CHECK(backend.budget(tier_id::storage).peak() == p.total(tier_id::storage));
        using kind = tiered_t::state_kind;
        params = download_blocks(t, kind::params);
        m = download_blocks(t, kind::adam_m);
        v = download_blocks(t, kind::adam_v);
    }
    cpu_backend backend({.device_bytes = generous, .host_bytes = generous, .storage_bytes = 0});
    train_options resident_options = o;
    resident_options.homes.clear();
    gpt_trainer<float, cpu_backend> t(backend, model, resident_options);
    t.initialize(4);
    bool clipped = false;
    for (int s = 0; s < steps; ++s) {
        const step_result res = t.step(batches(s));
        CHECK(res.loss == losses[s]);  // bitwise
        CHECK(res.grad_norm == norms[s]);
        clipped |= res.grad_norm > o.clip;
    }
    CHECK(clipped);
    using kind = gpt_trainer<float, cpu_backend>::state_kind;
    CHECK(download_blocks(t, kind::params) == params);
    CHECK(download_blocks(t, kind::adam_m) == m);
    CHECK(download_blocks(t, kind::adam_v) == v);
}

}  // namespace streamed_plan_test
