// Data-parallel training on the CPU backend, ranks as threads (thread_communicator): 2 and 3 ranks
// train resident, streamed (optimizer state on the host or on storage) and with mixed homes like
// one device that accumulates the same global batch, within the stated bound; a run is bitwise
// repeatable; the host state exists once (rank 0's host budget holds it, the other ranks' hold
// only their staging); a non-finite step stops every rank and changes nothing.
//
// The bound. Both runs see the same weights at step 1 and compute the same per-token losses (the
// same kernels on the same micro-batches); they differ only in the order of sums: the loss's
// double sum (micro-batch by micro-batch vs rank by rank: ~1e-16 relative) and the gradients'
// FP32 sums (one device adds the micro-batches into one buffer in order; data parallel adds each
// rank's micro-batches, then the ranks 0, 1, ...: a few units in the last place of each element).
// So step 1's loss agrees to 1e-12 relative; its norm to 1e-6 relative (FP32 rounding of the
// gradients); the later steps carry that rounding through the updates (AdamW divides by sqrt(v),
// which magnifies it for near-zero gradients, by at most lr per element): we check 1e-6 relative
// on the losses of 6 steps and 1e-5 on the norms (measured on 2 and 3 ranks, every placement:
// at most 1e-8 and 7e-7), and print the measured worst. Without the gradients' sum over the
// ranks, step 1's norm is off by tens of percent.
#include "support/placements.hpp"  // test::streamed_trainer
#include "stream/stream_test_support.hpp"  // tiny_gpt, micro_batches, same_bits, scratch_tiers, state_of

#include <strata/comm/thread_communicator.hpp>  // thread_group, thread_communicator
#include <strata/core/bytes.hpp>                // round_up, page_size
#include <strata/nn/cpu_ops.hpp>
#include <strata/plan/planner.hpp>  // plan, plan_request, footprint_of
#include <strata/strata.hpp>
#include <strata/train/checkpoint.hpp>     // download_blocks
#include <strata/train/data_parallel.hpp>  // data_parallel_trainer

#include <doctest/doctest.h>

#include <algorithm>  // std::max
#include <cmath>      // std::abs, std::nan
#include <memory>     // std::unique_ptr
#include <string>     // std::string
#include <vector>     // std::vector

namespace data_parallel_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
using test::micro_batches;
using test::tiny_gpt;

namespace {

// One rank's options: micro-batch 2 x 8, 2 micro-batches per rank per step; a small max norm so
// that clipping happens.
train_options rank_options() {
    train_options o{.batch = 2, .seq = 8, .accum = 2, .clip = 0.05};
    o.schedule = {.kind = lr_kind::cosine, .lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 2, .total_steps = 10};
    return o;
}

// The placements every case runs: one trainer type each, and the homes of mixed plans.
using resident = gpt_trainer<float, cpu_backend>;
using streamed_host = test::streamed_trainer<gpt_trainer<float, cpu_backend>, 3, host_tier>;
using streamed_storage = test::streamed_trainer<gpt_trainer<float, cpu_backend>, 2, storage_tier>;

std::vector<group_home> mixed_homes() {  // tiny_gpt: embeddings, 3 blocks, final norm
    return {group_home::device(), group_home::host(), group_home::storage(), group_home::device(), group_home::host()};
}

using run_record = test::run_result<float>;  // losses, norms, and the state after them

// N CPU backends (the ranks' devices, each with its own tier budgets) and their thread group.
struct cpu_ranks {
    test::scratch_tiers tiers;
    std::vector<std::unique_ptr<cpu_backend>> owned;
    std::vector<cpu_backend*> backends;
    thread_group group;

    cpu_ranks(const std::string& name, std::size_t n) : tiers(name), group(n, std::chrono::seconds(60)) {
        for (std::size_t r = 0; r < n; ++r) {
            owned.push_back(std::make_unique<cpu_backend>(tiers.options()));
            backends.push_back(owned.back().get());
        }
    }
    std::vector<thread_communicator> comms() {
        std::vector<thread_communicator> out;
        for (std::size_t r = 0; r < backends.size(); ++r) out.emplace_back(group, r);
        return out;
    }
};

// `steps` global steps of ranks x accum micro-batches (step s: micro_batches(s, ranks x accum)).
template <class Trainer>
run_record run_data_parallel(std::size_t ranks, const train_options& o, int steps, std::vector<std::size_t>* host_used = nullptr) {
    cpu_ranks ranked("dp" + std::to_string(ranks), ranks);
    gpt_model<float, cpu_backend> model(tiny_gpt);
    data_parallel_trainer<Trainer, thread_communicator> dp(ranked.backends, ranked.comms(), model, o);
    dp.initialize(21);
    run_record rec;
    for (int s = 0; s < steps; ++s) {
        const step_result r = dp.step(micro_batches(s, ranks * o.accum, o.batch, o.seq));
        CHECK(r.tokens == ranks * o.accum * o.batch * o.seq);
        rec.losses.push_back(r.loss);
        rec.norms.push_back(r.grad_norm);
    }
    rec.state = test::state_of(dp);
    if (host_used)
        for (auto* b : ranked.backends) host_used->push_back(b->budget(tier_id::host).used());
    return rec;
}

// One device, accumulating the same global batch: accum = ranks x the rank's accum.
template <class Trainer>
run_record run_one_device(std::size_t ranks, train_options o, int steps) {
    test::scratch_tiers tiers("dp-one");
    cpu_backend backend(tiers.options());
    o.accum *= ranks;
    return test::run<Trainer>(backend, tiny_gpt, o, steps);
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

template <class Trainer>
void check_like_one_device(std::size_t ranks, const train_options& o) {
    const int steps = 6;
    const run_record one = run_one_device<Trainer>(ranks, o, steps);
    const run_record dp = run_data_parallel<Trainer>(ranks, o, steps);
    REQUIRE(dp.losses.size() == one.losses.size());
    double worst_loss = 0, worst_norm = 0;
    for (int s = 0; s < steps; ++s) {
        INFO("step " << s + 1 << ": loss " << dp.losses[s] << " vs " << one.losses[s] << ", norm " << dp.norms[s]
                     << " vs " << one.norms[s]);
        CHECK(relative(dp.losses[s], one.losses[s]) <= (s == 0 ? 1e-12 : 1e-6));
        CHECK(relative(dp.norms[s], one.norms[s]) <= (s == 0 ? 1e-6 : 1e-5));
        worst_loss = std::max(worst_loss, relative(dp.losses[s], one.losses[s]));
        worst_norm = std::max(worst_norm, relative(dp.norms[s], one.norms[s]));
    }
    MESSAGE(ranks << " ranks: worst relative difference to one device over " << steps << " steps: loss " << worst_loss
                  << ", norm " << worst_norm);
}

}  // namespace

TEST_CASE("data parallel: 2 and 3 ranks train like one device accumulating the same global batch, resident") {
    for (std::size_t ranks : {2, 3}) {
        CAPTURE(ranks);
        check_like_one_device<resident>(ranks, rank_options());
    }
}

TEST_CASE("data parallel: 2 and 3 ranks train like one device accumulating the same global batch, streamed") {
    for (std::size_t ranks : {2, 3}) {
        CAPTURE(ranks);
        check_like_one_device<streamed_host>(ranks, rank_options());
        check_like_one_device<streamed_storage>(ranks, rank_options());
    }
}

TEST_CASE("data parallel: mixed homes (device, host, storage) train like one device, and a run is bitwise repeatable") {
    train_options o = rank_options();
    o.homes = mixed_homes();
    check_like_one_device<streamed_host>(2, o);
    const run_record a = run_data_parallel<streamed_host>(3, o, 4), b = run_data_parallel<streamed_host>(3, o, 4);
    for (std::size_t s = 0; s < a.losses.size(); ++s) {
        CHECK(a.losses[s] == b.losses[s]);  // bitwise
        CHECK(a.norms[s] == b.norms[s]);
    }
    CHECK(a.state == b.state);
}

TEST_CASE("data parallel: one rank is the single-device trainer, bitwise") {
    train_options o = rank_options();
    o.homes = mixed_homes();
    const run_record one = run_one_device<streamed_host>(1, o, 4), dp = run_data_parallel<streamed_host>(1, o, 4);
    CHECK(one.losses == dp.losses);
    CHECK(one.norms == dp.norms);
    CHECK(one.state == dp.state);
}

TEST_CASE("data parallel: the host state exists once, in rank 0; the other ranks hold only their staging") {
    const train_options o = rank_options();  // every group on the host, AdamW moments too
    std::vector<std::size_t> used;
    run_data_parallel<streamed_host>(3, o, 1, &used);
    REQUIRE(used.size() == 3);
    // What one trainer alone allocates on the host with the rank's options.
    test::scratch_tiers tiers("dp-alone");
    cpu_backend alone(tiers.options());
    gpt_model<float, cpu_backend> model(tiny_gpt);
    std::size_t state = 0;  // weights, gradients, m and v of every group, as the backend charges them
    for (const auto& layout : model.groups())
        state += round_up(layout.numel() * sizeof(float), page_size) +
                 3 * round_up(layout.trainable_numel() * sizeof(float), page_size);
    {
        streamed_host t(alone, model, o);
        CHECK(used[0] == alone.budget(tier_id::host).used());  // rank 0: what one trainer holds
    }
    CHECK(used[1] + state == used[0]);  // the others: the same, less the state
    CHECK(used[2] == used[1]);
    // The plan for 3 ranks counts exactly that: the state once, the staging 3 times.
    plan_request request{.model = footprint_of<cpu_backend>(model, o.batch, o.seq), .accum = o.accum,
                         .activations = activation_policy::recompute,
                         .budgets = {.device = 256 << 20, .host = 256 << 20, .storage = 256 << 20},
                         .where = placement::streamed, .slots = 3};
    request.ranks = 3;
    const memory_plan p = plan(request);
    CHECK(p.total(tier_id::host) == used[0] + used[1] + used[2]);
    CHECK(plan_table(p).find("data parallel: 3 ranks") != std::string::npos);
    request.ranks = 1;
    CHECK(plan(request).total(tier_id::host) == used[0]);
}

TEST_CASE("data parallel: one rank keeps each device-homed group's optimizer state; the plan counts the fullest rank") {
    cpu_ranks ranked("dp-owners", 3);
    const std::vector<cpu_backend*>& pointers = ranked.backends;
    gpt_model<float, cpu_backend> model(tiny_gpt);
    const train_options o = rank_options();
    std::vector<std::size_t> before;  // device bytes the ranks' backends held before the trainers
    for (auto* b : pointers) before.push_back(b->budget(tier_id::device).used());
    data_parallel_trainer<resident, thread_communicator> dp(pointers, ranked.comms(), model, o);
    // tiny_gpt's 5 groups, all on the device: their state goes to ranks 0, 1, 2, 0, 1.
    const std::vector<std::size_t> owners{0, 1, 2, 0, 1};
    std::size_t fullest = 0, state_sum = 0;
    for (std::size_t r = 0; r < 3; ++r) fullest = std::max(fullest, pointers[r]->budget(tier_id::device).used() - before[r]);
    for (std::size_t g = 0; g < 5; ++g) {
        CHECK(dp.rank(0).state_owner(g) == owners[g]);
        state_sum += 2 * round_up(model.groups()[g].trainable_numel() * sizeof(float), page_size);
    }
    plan_request request{.model = footprint_of<cpu_backend>(model, o.batch, o.seq), .accum = o.accum,
                         .activations = activation_policy::recompute,
                         .budgets = {.device = 256 << 20, .host = 256 << 20, .storage = 256 << 20},
                         .where = placement::resident};
    const std::size_t one_device = plan(request).total(tier_id::device);
    request.ranks = 3;
    const memory_plan p = plan(request);
    CHECK(p.total(tier_id::device) == fullest);  // the plan counts what the fullest rank allocates
    CHECK(p.total(tier_id::device) < one_device);
    // Together the ranks hold the moments once: one device's bytes, less the state, per rank.
    std::size_t all = 0;
    for (std::size_t r = 0; r < 3; ++r) all += pointers[r]->budget(tier_id::device).used() - before[r];
    CHECK(all == 3 * (one_device - state_sum) + state_sum);
    // A rank asked for a group's state it does not keep says who does.
    std::vector<float> m(model.groups()[1].trainable_numel());
    CHECK_THROWS_WITH_AS(dp.rank(0).download(trainer_state_kind::adam_m, 1, m), doctest::Contains("rank 1 does"), error);
}

TEST_CASE("data parallel: the state read from a run and written into a new one continues it bitwise") {
    train_options o = rank_options();
    o.homes = mixed_homes();
    const run_record whole = run_data_parallel<streamed_host>(2, o, 4);
    test::scratch_tiers tiers("dp-resume");
    cpu_backend b0(tiers.options()), b1(tiers.options());
    gpt_model<float, cpu_backend> model(tiny_gpt);
    test::trainer_state<float> saved;
    {
        thread_group group(2, std::chrono::seconds(60));
        data_parallel_trainer<streamed_host, thread_communicator> dp({&b0, &b1}, {{group, 0}, {group, 1}}, model, o);
        dp.initialize(21);
        for (int s = 0; s < 2; ++s) dp.step(micro_batches(s, 2 * o.accum, o.batch, o.seq));
        saved = test::state_of(dp);
    }
    thread_group group(2, std::chrono::seconds(60));
    data_parallel_trainer<streamed_host, thread_communicator> dp({&b0, &b1}, {{group, 0}, {group, 1}}, model, o);
    for (std::size_t g = 0; g < model.groups().size(); ++g) {
        dp.upload(trainer_state_kind::params, g, saved.params[g]);
        dp.upload(trainer_state_kind::adam_m, g, saved.m[g]);
        dp.upload(trainer_state_kind::adam_v, g, saved.v[g]);
    }
    dp.set_step_count(2);
    std::vector<double> losses;
    for (int s = 2; s < 4; ++s) losses.push_back(dp.step(micro_batches(s, 2 * o.accum, o.batch, o.seq)).loss);
    CHECK(losses[0] == whole.losses[2]);  // bitwise
    CHECK(losses[1] == whole.losses[3]);
    CHECK(test::state_of(dp) == whole.state);
}

TEST_CASE("data parallel: a non-finite loss stops every rank with the same error and changes nothing") {
    test::scratch_tiers tiers("dp-nan");
    cpu_backend b0(tiers.options()), b1(tiers.options());
    thread_group group(2, std::chrono::seconds(60));
    std::vector<thread_communicator> comms{{group, 0}, {group, 1}};
    gpt_model<float, cpu_backend> model(tiny_gpt);
    train_options o = rank_options();
    o.homes = mixed_homes();
    data_parallel_trainer<streamed_host, thread_communicator> dp({&b0, &b1}, std::move(comms), model, o);
    dp.initialize(21);
    dp.step(micro_batches(0, 2 * o.accum, o.batch, o.seq));
    // A NaN in a device-homed group's weights (every rank's replica): every rank's loss is NaN.
    std::vector<float> block(model.groups()[0].numel());
    dp.download(trainer_state_kind::params, 0, block);
    block[0] = std::nanf("");
    dp.upload(trainer_state_kind::params, 0, block);
    const auto before = test::state_of(dp);
    CHECK_THROWS_WITH_AS(dp.step(micro_batches(1, 2 * o.accum, o.batch, o.seq)), doctest::Contains("loss is"), error);
    CHECK(dp.step_count() == 1);
    CHECK(test::state_of(dp) == before);
    // Rank 1's replica too: it took the same decision.
    std::vector<float> replica(block.size());
    dp.rank(1).download(trainer_state_kind::params, 0, replica);
    CHECK(std::memcmp(replica.data(), block.data(), block.size() * sizeof(float)) == 0);
}

}  // namespace data_parallel_test
