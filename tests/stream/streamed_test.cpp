// Streamed training == resident training, bitwise: the same losses and final weights after 20
// steps with gradient accumulation and clipping, with AdamW moments in the host tier and in the
// storage tier; and device memory that does not grow with the number of layers. Instantiated for
// every backend: on the GPU, the CUDA kernels must be as deterministic as the CPU's.
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, make_backend
#include "support/placements.hpp"  // streamed_options

#include <strata/nn/cpu_ops.hpp>
#include <strata/strata.hpp>
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model
#include <strata/train/checkpoint.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <vector>

namespace streamed_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

const gpt_config config{.vocab_size = 29, .max_seq = 8, .n_layer = 4, .n_head = 2, .n_embd = 16};

// o streamed through `slots` device slots; without homes of its own, every group at `home`.
train_options placed(const train_options& o, std::size_t slots, group_home home = group_home::host()) {
    return test::streamed_options(o, config.n_layer + 2, slots, home);  // groups: embeddings, blocks, final norm
}

std::vector<data::batch> micro_batches(int step, std::size_t accum, std::size_t B, std::size_t T) {
    std::vector<data::batch> out;
    rng gen(1000 + step);
    for (std::size_t k = 0; k < accum; ++k) {
        data::batch b;
        for (std::size_t i = 0; i < B * T; ++i) {
            b.inputs.push_back(static_cast<token_id>(gen.next_u64() % config.vocab_size));
            b.targets.push_back(i % 7 == 3 ? kernels::cpu::ignore_index
                                           : static_cast<token_id>((b.inputs.back() * 3 + 1) % config.vocab_size));
        }
        out.push_back(std::move(b));
    }
    return out;
}

struct run_result {
    std::vector<double> losses, norms;
    host_blocks<float> params, m, v;
};

template <class Trainer, class B>
run_result run(B& backend, const train_options& o, int steps) {
    gpt_model<float, B> model(config);
    Trainer t(backend, model, o);
    t.initialize(21);
    run_result r;
    for (int s = 0; s < steps; ++s) {
        auto micro = micro_batches(s, o.accum, o.batch, o.seq);
        auto res = t.step(micro);
        r.losses.push_back(res.loss);
        r.norms.push_back(res.grad_norm);
    }
    using kind = typename Trainer::state_kind;
    r.params = download_blocks(t, kind::params);
    r.m = download_blocks(t, kind::adam_m);
    r.v = download_blocks(t, kind::adam_v);
    return r;
}

bool same_bits(const host_blocks<float>& a, const host_blocks<float>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t g = 0; g < a.size(); ++g)
        if (a[g].size() != b[g].size() || std::memcmp(a[g].data(), b[g].data(), a[g].size() * sizeof(float)) != 0)
            return false;
    return true;
}

void check_equal(const run_result& resident, const run_result& streamed) {
    REQUIRE(resident.losses.size() == streamed.losses.size());
    for (std::size_t i = 0; i < resident.losses.size(); ++i) {
        INFO("step " << i + 1);
        CHECK(resident.losses[i] == streamed.losses[i]);  // bitwise, not approximately
        CHECK(resident.norms[i] == streamed.norms[i]);
    }
    CHECK(same_bits(resident.params, streamed.params));
    CHECK(same_bits(resident.m, streamed.m));
    CHECK(same_bits(resident.v, streamed.v));
}

tier_options tiers() {
    return {.device_bytes = 256 << 20,
            .host_bytes = 256 << 20,
            .storage_bytes = 256 << 20,
            .storage_dir = std::filesystem::temp_directory_path() / ("strata-test-stream-" + std::to_string(::getpid()))};
}

}  // namespace

TEST_CASE_TEMPLATE("streamed training equals resident training bitwise (accumulation and clipping on)", B,
                   STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    B& backend = *made;
    train_options o{.batch = 2, .seq = 8, .accum = 3, .clip = 0.05};  // a small max norm: clipping really happens
    o.schedule = {.kind = lr_kind::cosine, .lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 3, .total_steps = 20};
    const auto resident = run<gpt_trainer<float, B>>(backend, o, 20);
    CHECK(resident.losses.back() < resident.losses.front());
    bool clipped = false;
    for (double n : resident.norms) clipped |= n > o.clip;
    CHECK(clipped);

    SUBCASE("moments in the host tier") {
        check_equal(resident, run<gpt_trainer<float, B>>(backend, placed(o, 2, group_home::host()), 20));
    }
    SUBCASE("moments in the storage tier") {
        check_equal(resident, run<gpt_trainer<float, B>>(backend, placed(o, 3, group_home::storage()), 20));
    }
    // Per-group homes (issue 13): any mix of device, host and storage, not only the planner's
    // prefixes: device groups between streamed ones, storage groups apart and side by side.
    SUBCASE("mixed homes: device, host and storage groups interleaved") {
        train_options mixed = o;
        mixed.homes = {group_home::host(),    group_home::device(), group_home::storage(),
                       group_home::host(),    group_home::device(), group_home::storage()};
        check_equal(resident, run<gpt_trainer<float, B>>(backend, placed(mixed, 2, group_home::host()), 20));
    }
    SUBCASE("mixed homes: the planner's shape (device prefix, host, storage suffix)") {
        train_options mixed = o;
        mixed.homes = {group_home::device(), group_home::device(),  group_home::host(),
                       group_home::storage(), group_home::storage(), group_home::device()};
        check_equal(resident, run<gpt_trainer<float, B>>(backend, placed(mixed, 3, group_home::host()), 20));
    }
    // What the planner's search (plan/planner.hpp: detail::fastest_plan) may choose beyond the
    // fixed rules: the embeddings on the host beside device-homed blocks, the state of the first
    // host groups on storage (not the last ones'), some blocks keeping their activations while the
    // others recompute from inputs offloaded to the host, with 3 slots and with 2.
    SUBCASE("the search's placements: host embeddings, the first host groups on storage, kept + offloaded") {
        train_options searched = o;
        searched.homes = {group_home::host(),    group_home::device(), group_home::storage(),
                          group_home::storage(), group_home::host(),   group_home::device()};
        searched.activations = kept_activations{1, true};
        check_equal(resident, run<gpt_trainer<float, B>>(backend, placed(searched, 3, group_home::host()), 20));
        searched.activations = kept_activations{2};
        searched.homes[0] = group_home::device();
        check_equal(resident, run<gpt_trainer<float, B>>(backend, placed(searched, 2, group_home::host()), 20));
    }
    SUBCASE("every group on the device: the resident plan in the streamed trainer") {
        train_options all = o;
        all.homes.assign(6, group_home::device());
        check_equal(resident, run<gpt_trainer<float, B>>(backend, placed(all, 2, group_home::host()), 20));
    }
}

TEST_CASE("homes the trainers cannot build are refused with the group named") {
    cpu_backend backend(tiers());
    gpt_model<float, cpu_backend> model(config);
    train_options o{.batch = 2, .seq = 8};
    o.homes = {group_home::host(), group_home::host()};
    using streamed = gpt_trainer<float, cpu_backend>;
    CHECK_THROWS_WITH_AS(streamed(backend, model, o), doctest::Contains("2 entries for a model of 6 layer groups"),
                         error);
    o.homes.assign(6, group_home::host());
    o.homes[3] = {tier_id::device, tier_id::host};
    CHECK_THROWS_WITH_AS(streamed(backend, model, o), doctest::Contains("group 3: weights in the device tier"), error);
}

TEST_CASE_TEMPLATE("without clipping, the overlapped AdamW still equals resident bitwise", B,
                   STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    B& backend = *made;
    train_options o{.batch = 2, .seq = 8, .accum = 1, .clip = 0};
    o.schedule = {.kind = lr_kind::constant, .lr = 2e-3, .min_lr = 2e-3, .warmup_steps = 0, .total_steps = 10};
    const auto resident = run<gpt_trainer<float, B>>(backend, o, 10);
    check_equal(resident, run<gpt_trainer<float, B>>(backend, placed(o, 3, group_home::host()), 10));
}

TEST_CASE_TEMPLATE("streamed device memory is slots + activations, independent of the number of layers", B,
                   STRATA_TEST_BACKENDS) {
    if (!test::backend_available<B>()) {
        test::skip(std::string(B::name) + ": no GPU on this machine");
        return;
    }
    auto device_peak = [](std::size_t layers, bool streamed) {
        B backend(tiers());
        gpt_config c = config;
        c.n_layer = layers;
        gpt_model<float, B> model(c);
        train_options o{.batch = 2, .seq = 8, .accum = 1};
        std::size_t peak = 0;
        auto micro = micro_batches(0, 1, 2, 8);
        if (streamed) {
            gpt_trainer<float, B> t(backend, model, test::streamed_options(o, layers + 2, 2));
            t.initialize(1);
            t.step(micro);
        } else {
            gpt_trainer<float, B> t(backend, model, o);
            t.initialize(1);
            t.step(micro);
        }
        peak = backend.budget(tier_id::device).peak();
        return peak;
    };
    const std::size_t s4 = device_peak(4, true), s12 = device_peak(12, true);
    const std::size_t r4 = device_peak(4, false), r12 = device_peak(12, false);
    // Going from 4 to 12 layers adds 8 activation checkpoints (B*T*C floats, a page each here)
    // to the streamed footprint and nothing else; resident grows by 8 layers of 16 B/param too.
    const std::size_t checkpoint_bytes = 8 * round_up(2 * 8 * 16 * sizeof(float), page_size);
    MESSAGE("device peak, streamed: 4 layers " << s4 << " B, 12 layers " << s12 << " B; resident: " << r4 << " B, " << r12 << " B");
    CHECK(s12 - s4 <= checkpoint_bytes);
    CHECK(r12 - r4 > 4 * (s12 - s4));
    CHECK(s12 < r12);
}

// The optimizer overlaps the next step: step() returns before the updates finish, and the next
// step waits per group. Saving at any step, evaluating between steps, and resuming (streamed or
// resident) must all see the complete update: the run equals an uninterrupted resident run bit
// for bit, whatever the activation policy of either trainer.
TEST_CASE_TEMPLATE("the overlapped optimizer: save and resume at any step, evaluate between steps, == resident", B,
                   STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    B& backend = *made;
    const auto dir = std::filesystem::temp_directory_path() / ("strata-test-overlap-" + std::to_string(::getpid()));
    struct cleanup {
        std::filesystem::path p;
        ~cleanup() { std::filesystem::remove_all(p); }
    } at_end{dir};
    train_options o{.batch = 2, .seq = 8, .accum = 2, .clip = 0.05};
    o.schedule = {.kind = lr_kind::cosine, .lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 2, .total_steps = 6};
    const int steps = 6;
    const auto resident = run<gpt_trainer<float, B>>(backend, o, steps);
    gpt_model<float, B> model(config);
    using streamed = gpt_trainer<float, B>;  // with placed(options, 2)
    for (int stop : {1, 2, 5}) {
        CAPTURE(stop);
        std::filesystem::remove_all(dir);
        std::vector<double> losses;
        std::filesystem::path saved;
        {
            train_options keep = o;
            // some blocks keep, the others recompute (stop 5: from inputs offloaded to the host)
            keep.activations = stop == 5 ? kept_activations{1, true} : kept_activations{2};
            if (stop == 2)  // saved from three tiers
                keep.homes = {group_home::storage(), group_home::device(), group_home::host(),
                              group_home::storage(), group_home::host(),   group_home::device()};
            streamed first(backend, model, placed(keep, 2));
            first.initialize(21);
            for (int s = 0; s < stop; ++s) {
                losses.push_back(first.step(micro_batches(s, o.accum, o.batch, o.seq)).loss);
                if (s == 0) (void)first.evaluate(micro_batches(100, 1, o.batch, o.seq));  // drains, changes nothing
            }
            saved = save_checkpoint(first, dir, {});
        }  // destroyed right after the save: the destructor drains nothing left
        auto continue_in = [&]<class Trainer>(train_options options) {
            Trainer t(backend, model, options);
            t.initialize(999);  // overwritten by the checkpoint
            (void)load_checkpoint(t, saved);
            std::vector<double> tail = losses;
            for (int s = stop; s < steps; ++s) tail.push_back(t.step(micro_batches(s, o.accum, o.batch, o.seq)).loss);
            using kind = typename Trainer::state_kind;
            CHECK(same_bits(download_blocks(t, kind::params), resident.params));
            CHECK(same_bits(download_blocks(t, kind::adam_m), resident.m));
            CHECK(same_bits(download_blocks(t, kind::adam_v), resident.v));
            return tail;
        };
        train_options all = o;
        all.activations = kept_activations::all();
        CHECK(continue_in.template operator()<streamed>(placed(all, 2)) == resident.losses);
        CHECK(continue_in.template operator()<gpt_trainer<float, B>>(o) == resident.losses);
        train_options mixed = o;  // resumed with the state spread over three tiers
        mixed.homes = {group_home::device(), group_home::host(),   group_home::storage(),
                       group_home::device(), group_home::storage(), group_home::host()};
        CHECK(continue_in.template operator()<streamed>(placed(mixed, 2)) == resident.losses);
    }
}

}  // namespace streamed_test
