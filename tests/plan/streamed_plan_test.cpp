// A streamed plan is what the streamed trainer really allocates: for prefetch depth 1 and 2 and
// AdamW moments in the host and the storage tier, one step with accumulation on a backend whose
// budgets are exactly the plan's totals fits, and each tier's peak is the plan's total, to the byte.
#include <strata/nn/cpu_ops.hpp>               // ops<cpu_backend> (before the model is instantiated)
#include <strata/plan/planner.hpp>             // plan, memory_plan, plan_request
#include <strata/strata.hpp>                   // cpu_backend, tier_options, tier_id
#include <strata/train/streamed_trainer.hpp>   // streamed_trainer, prefetch_pipeline, trainer_t

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE

#include <unistd.h>  // getpid

#include <cmath>        // std::isfinite
#include <cstddef>      // std::size_t
#include <filesystem>   // std::filesystem
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

using namespace strata;

namespace {

// A block is the largest group: the slots and the optimizer's staging are the same size.
const gpt_config blocks_largest{.vocab_size = 64, .max_seq = 16, .n_layer = 8, .n_head = 4, .n_embd = 64};
// The embeddings ((512 + 8) x 16 floats) outweigh a block (12 C^2 + 13 C): slots stay block-sized.
const gpt_config embeddings_largest{.vocab_size = 512, .max_seq = 8, .n_layer = 3, .n_head = 2, .n_embd = 16};

std::vector<data::batch> micro_batches(const gpt_config& c, std::size_t accum, std::size_t BT) {
    std::vector<data::batch> micro(accum);
    for (std::size_t k = 0; k < accum; ++k)
        for (std::size_t i = 0; i < BT; ++i) {
            micro[k].inputs.push_back(static_cast<token_id>((i + 3 * k) % c.vocab_size));
            micro[k].targets.push_back(static_cast<token_id>((i + 3 * k + 1) % c.vocab_size));
        }
    return micro;
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

template <std::size_t Depth, class Moments>
void check_streamed_plan(const gpt_config& c, double clip) {
    constexpr bool on_storage = std::is_same_v<Moments, storage_tier>;
    constexpr std::size_t generous = std::size_t(256) << 20;
    plan_request r{.model = c, .batch = 2, .seq = c.max_seq, .accum = 2,
                   .budgets = {.device = generous, .host = generous, .storage = generous}};
    r.where = placement::streamed;
    r.slots = Depth + 1;
    r.moments_on_storage = on_storage;
    const memory_plan p = plan<cpu_backend>(r);
    REQUIRE(p.where == placement::streamed);
    REQUIRE(p.slots == Depth + 1);
    REQUIRE(p.m_home == id_of<Moments>);
    REQUIRE(p.v_home == id_of<Moments>);
    CHECK((p.total(tier_id::storage) > 0) == on_storage);

    // The trainer runs in exactly the plan's budgets.
    temp_dir dir(std::to_string(Depth) + (on_storage ? "-storage" : "-host"));
    const tier_options exact{.device_bytes = p.total(tier_id::device),
                             .host_bytes = p.total(tier_id::host),
                             .storage_bytes = p.total(tier_id::storage),
                             .storage_dir = dir.path};
    gpt_model<float, cpu_backend> model(c);
    const train_options o{.batch = r.batch, .seq = r.seq, .accum = r.accum, .clip = clip, .activations = p.kept()};
    {
        cpu_backend backend(exact);
        trainer_t<float, cpu_backend, prefetch_pipeline<Depth>, moments_in<Moments>> t(backend, model, o);
        // every device and host byte and every storage file is allocated up front
        CHECK(backend.budget(tier_id::device).used() == p.total(tier_id::device));
        CHECK(backend.budget(tier_id::host).used() == p.total(tier_id::host));
        CHECK(backend.budget(tier_id::storage).used() == p.total(tier_id::storage));
        t.initialize(1);
        const step_result res = t.step(micro_batches(c, r.accum, r.batch * r.seq));
        CHECK(std::isfinite(res.loss));
        CHECK(res.loss > 0);
        CHECK(res.tokens == r.accum * r.batch * r.seq);
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
    using streamed_t = trainer_t<float, cpu_backend, prefetch_pipeline<Depth>, moments_in<Moments>>;
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
    plan_request r{.model = c, .batch = 2, .seq = c.max_seq, .accum = 2,
                   .budgets = {.device = std::size_t(256) << 20, .host = std::size_t(256) << 20, .storage = 0}};
    const memory_plan resident = plan<cpu_backend>(r);
    REQUIRE(resident.where == placement::resident);
    r.budgets.device = resident.total(tier_id::device) / 3;
    const memory_plan p = plan<cpu_backend>(r);
    REQUIRE(p.where == placement::streamed);
    REQUIRE(p.m_home == tier_id::host);
    REQUIRE((p.slots == 2 || p.slots == 3));
    cpu_backend backend({.device_bytes = r.budgets.device, .host_bytes = r.budgets.host, .storage_bytes = 0});
    gpt_model<float, cpu_backend> model(c);
    // auto activations: the blocks the rest of the device budget holds keep theirs
    CHECK(p.kept_blocks > 0);
    const train_options o{.batch = r.batch, .seq = r.seq, .accum = r.accum, .activations = p.kept()};
    auto run = [&]<std::size_t Depth>(prefetch_pipeline<Depth>) {
        trainer_t<float, cpu_backend, prefetch_pipeline<Depth>, moments_in<host_tier>> t(backend, model, o);
        t.initialize(2);
        (void)t.step(micro_batches(c, r.accum, r.batch * r.seq));
    };
    if (p.slots == 3)
        run(prefetch_pipeline<2>{});
    else
        run(prefetch_pipeline<1>{});
    CHECK(backend.budget(tier_id::device).peak() == p.total(tier_id::device));
    CHECK(backend.budget(tier_id::device).peak() <= r.budgets.device);
    CHECK(backend.budget(tier_id::host).peak() == p.total(tier_id::host));
}
