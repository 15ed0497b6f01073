// The step's cost model (plan/cost_model.hpp) and the planner's search for the fastest plan that
// fits: the search finds the best plan of an exhaustive enumeration; a plan the fixed rules fit is
// never refused; a storage directory alone moves no state the host can hold; and the model's
// ordering of two placements is the CPU backend's measured ordering, with rates measured here.
#include "support/placements.hpp"  // test::streamed_trainer
#include "support/skip.hpp"        // test::skip, test::address_sanitizer_build
#include <strata/nn/cpu_ops.hpp>              // ops<cpu_backend> (before the model is instantiated)
#include "support/random_batch.hpp"  // test::counting_batches
#include <strata/optim/offloaded_optimizer.hpp>  // offloaded_optimizer (the calibration's host optimizer)
#include <strata/plan/cost_model.hpp>         // predict, step_prediction
#include <strata/plan/plan_table.hpp>         // plan_table
#include <strata/plan/planner.hpp>            // plan, plan_request, detail::streamed_plan
#include <strata/strata.hpp>                  // cpu_backend, gpt_model, tiered_tensor
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>

#include <unistd.h>  // getpid

#include <algorithm>   // std::min
#include <array>       // std::array
#include <chrono>      // std::chrono::steady_clock
#include <cstddef>     // std::size_t
#include <cstring>     // std::memcpy
#include <filesystem>  // std::filesystem
#include <limits>      // std::numeric_limits
#include <string>      // std::string
#include <utility>     // std::as_const
#include <vector>      // std::vector

namespace cost_model_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

constexpr std::size_t big = std::size_t(1) << 40;

model_footprint footprint(const gpt_config& c, std::size_t B, std::size_t T) {
    return footprint_of<cpu_backend>(gpt_model<float, cpu_backend>(c), B, T);
}

// Rates of a made-up machine whose links, disk and host optimizer are slow next to its compute
// at this test's tiny sizes, so that placements really differ in time.
machine_rates slow_links() {
    machine_rates m;
    m.gemm_flops = 2e9;
    m.attention_flops = 1e9;
    m.device_memory = 2e10;
    m.h2d = m.d2h = 2e8;
    m.duplex = 3e8;
    m.storage_read = 4e7;
    m.storage_write = 3e7;
    m.host_optimizer = {{"adamw", 2e7}, {"sgd", 3e7}};
    return m;
}
// ... and one whose compute is slow: streaming costs little.
machine_rates slow_compute() {
    machine_rates m = slow_links();
    m.gemm_flops = 1e8;
    m.attention_flops = 5e7;
    return m;
}

double seconds_of(const memory_plan& p, const plan_request& r, const machine_rates& m) {
    return detail::cost::simulate(p, r, detail::cost::times_of(p, r, m), r.accum).seconds;
}

// Every plan of the search's space (planner.hpp: detail::fastest_plan), enumerated without its
// shortcuts: resident or streamed, any slots, embeddings home, device prefix, kept blocks,
// offloading, kept parts, and spills of any length in either order. The least predicted time of those that fit.
double exhaustive_best(const plan_request& r, const machine_rates& m) {
    const detail::plan_inputs in = detail::inputs_of(r);
    const std::size_t L = in.model.blocks, G = in.model.group_bytes.size();
    double best = std::numeric_limits<double>::infinity();
    auto consider = [&](const memory_plan& p) {
        if (p.fits()) best = std::min(best, seconds_of(p, r, m));
    };
    for (bool offload : {false, true})
        for (bool parts : {false, true})
        for (std::size_t kept = 0; kept <= L; ++kept) {
            const kept_activations k{kept, offload, parts};
            consider(detail::resident_plan(r, in, k));
            for (std::size_t slots : {2, 3})
                for (bool embeddings_on_device : {false, true})
                    for (std::size_t d = 0; d <= L; ++d) {
                        std::vector<group_home> homes = detail::uniform_homes(G, tier_id::host);
                        if (embeddings_on_device) homes[0] = group_home::device();
                        homes[G - 1] = group_home::device();
                        for (std::size_t l = 0; l < d; ++l) homes[1 + l] = group_home::device();
                        std::vector<std::size_t> late;
                        for (std::size_t g = G; g-- > 0;)
                            if (homes[g].weights == tier_id::host) late.push_back(g);
                        const std::vector<std::size_t> early(late.rbegin(), late.rend());
                        for (const std::vector<std::size_t>* order : std::array{&std::as_const(late), &early})
                            for (std::size_t spilled = 0; spilled <= order->size(); ++spilled) {
                                auto h = homes;
                                for (std::size_t i = 0; i < spilled; ++i) h[(*order)[i]].moments = tier_id::storage;
                                consider(detail::streamed_plan(r, in, slots, h, k));
                            }
                    }
        }
    return best;
}

}  // namespace

TEST_CASE("the search returns the best plan of an exhaustive enumeration, for several budgets and machines") {
    const gpt_config c{.vocab_size = 64, .max_seq = 16, .n_layer = 5, .n_head = 4, .n_embd = 64};
    plan_request r{.model = footprint(c, 2, 16), .budgets = {.device = big, .host = big, .storage = big}};
    const memory_plan resident = plan(r);
    REQUIRE(resident.where == placement::resident);
    const std::size_t everything = resident.total(tier_id::device);
    const std::size_t state = resident.state_bytes;  // one kind of every group
    int streamed = 0, spilled = 0, overruled = 0;
    for (const machine_rates& m : {slow_links(), slow_compute()})
        for (std::size_t accum : {1, 3})
            for (double device_share : {1.1, 0.8, 0.55, 0.35})
                for (double host_share : {10.0, 2.5, 1.6}) {
                    CAPTURE(accum);
                    CAPTURE(device_share);
                    CAPTURE(host_share);
                    plan_request q = r;
                    q.accum = accum;
                    q.budgets = {.device = static_cast<std::size_t>(device_share * static_cast<double>(everything)),
                                 .host = static_cast<std::size_t>(host_share * static_cast<double>(state)),
                                 .storage = 4 * state};
                    const double best = exhaustive_best(q, m);
                    q.rates = m;
                    if (best == std::numeric_limits<double>::infinity()) {
                        CHECK_THROWS_AS((void)plan(q), error);
                        continue;
                    }
                    const memory_plan p = plan(q);
                    REQUIRE(p.fits());
                    const double found = seconds_of(p, q, m);
                    // the best; or the fixed rules' plan, within the margin of it
                    plan_request fixed = q;
                    fixed.rates.reset();
                    const bool ruled = found == seconds_of(plan(fixed), q, m);
                    CHECK(found >= best * (1 - 1e-9));
                    CHECK(found <= best * (1 + (ruled ? detail::fastest_plan_margin : 0.0) + 1e-9));
                    overruled += !ruled;
                    streamed += p.where == placement::streamed;
                    spilled += p.state_home == tier_id::storage;
                }
    // the budgets reach every kind of plan: resident, streamed, and three tiers; and the search
    // finds plans the fixed rules do not
    CHECK(streamed > 0);
    CHECK(spilled > 0);
    CHECK(overruled > 0);
}

TEST_CASE("a plan the fixed rules fit is never refused, and never predicted slower than theirs") {
    const gpt_config c{.vocab_size = 64, .max_seq = 16, .n_layer = 6, .n_head = 4, .n_embd = 64};
    const plan_request base{.model = footprint(c, 2, 16), .budgets = {.device = big, .host = big, .storage = big}};
    const std::size_t everything = plan(base).total(tier_id::device), state = plan(base).state_bytes;
    int fitted = 0;
    for (activation_policy policy :
         {activation_policy::automatic, activation_policy::keep, activation_policy::recompute, activation_policy::offload})
        for (placement where : {placement::automatic, placement::streamed})
            for (double device_share : {1.2, 0.7, 0.4, 0.25, 0.1})
                for (double host_share : {8.0, 2.0, 1.2})
                    for (bool all_on_storage : {false, true}) {
                        plan_request r = base;
                        r.activations = policy;
                        r.where = where;
                        r.state_on_storage = all_on_storage;
                        r.budgets = {.device = static_cast<std::size_t>(device_share * static_cast<double>(everything)),
                                     .host = static_cast<std::size_t>(host_share * static_cast<double>(state)),
                                     .storage = 3 * state};
                        memory_plan fixed;
                        try {
                            fixed = plan(r);
                        } catch (const error&) {
                            continue;
                        }
                        ++fitted;
                        r.rates = slow_links();
                        const memory_plan searched = plan(r);  // does not throw
                        CHECK(searched.fits());
                        CHECK(seconds_of(searched, r, *r.rates) <= seconds_of(fixed, r, *r.rates));
                        // what the user fixed stays fixed
                        CHECK(searched.where == (where == placement::streamed ? placement::streamed : searched.where));
                        if (policy == activation_policy::keep) CHECK(searched.kept_blocks == c.n_layer);
                        if (policy == activation_policy::recompute) CHECK(searched.kept_blocks == 0);
                        if (policy == activation_policy::recompute) CHECK(searched.offloaded_inputs == 0);
                        // kept parts are the search's choice only where the policy leaves it one
                        if (policy == activation_policy::recompute || policy == activation_policy::keep)
                            CHECK(searched.kept_parts == 0);
                        if (all_on_storage && searched.where == placement::streamed)
                            for (const group_home& h : searched.homes)
                                if (h.weights == tier_id::host) CHECK(h.moments == tier_id::storage);
                        if (where == placement::streamed)
                            for (const group_home& h : searched.homes) CHECK(h.weights == tier_id::host);
                    }
    CHECK(fitted > 20);
}

TEST_CASE("kept parts: where attention dominates the recompute and not every block's activations fit, the "
          "recomputing blocks keep attention's output") {
    // A long context for its width: attention's T x T products are most of a block's forward.
    const gpt_config c{.vocab_size = 64, .max_seq = 512, .n_layer = 6, .n_head = 4, .n_embd = 32};
    plan_request r{.model = footprint(c, 1, 512), .budgets = {.device = big, .host = big, .storage = big}};
    REQUIRE(r.model.block_part_bytes > 0);
    CHECK(r.model.block_part_bytes < r.model.block_activation_bytes / 8);
    CHECK(r.model.block_part_recompute_attention_flops == 0.0);
    CHECK(r.model.block_part_recompute_gemm_flops < r.model.block_gemm_flops);
    r.activations = activation_policy::recompute;
    const std::size_t fewest = plan(r).total(tier_id::device);
    r.activations = activation_policy::automatic;
    // room for every recomputing block's part and two blocks' activations, not all six
    r.budgets.device = fewest + 2 * r.model.block_activation_bytes + 6 * r.model.block_part_bytes + (1 << 20);
    machine_rates m = slow_links();
    m.attention_flops = 1e8;  // attention 20x slower than the GEMMs
    r.rates = m;
    const memory_plan searched = plan(r);
    CHECK(searched.fits());
    CHECK(searched.kept_blocks < c.n_layer);
    CHECK(searched.kept_parts == c.n_layer - searched.kept_blocks);
    CHECK(searched.kept().keep_parts);
    CHECK(plan_table(searched).find("keeping part of theirs") != std::string::npos);
    // the same plan without parts is predicted slower, by about the recomputed attention forwards
    const detail::plan_inputs in = detail::inputs_of(r);
    const memory_plan whole = detail::resident_plan(r, in, {searched.kept_blocks, searched.kept().offload_inputs});
    const detail::cost::work_times with_parts = detail::cost::times_of(searched, r, m);
    CHECK(with_parts.block_recompute < with_parts.block_forward / 2);
    CHECK(detail::cost::times_of(whole, r, m).block_recompute == with_parts.block_forward);
    CHECK(seconds_of(searched, r, m) < seconds_of(whole, r, m));
    // the fixed rules (no rates) and the recompute policy keep no parts
    r.rates.reset();
    CHECK(plan(r).kept_parts == 0);
    r.rates = m;
    r.activations = activation_policy::recompute;
    CHECK(plan(r).kept_parts == 0);
}

TEST_CASE("a storage budget alone moves no optimizer state that the host can hold") {
    const gpt_config c{.vocab_size = 64, .max_seq = 16, .n_layer = 6, .n_head = 4, .n_embd = 64};
    plan_request r{.model = footprint(c, 2, 16), .budgets = {.device = big, .host = big, .storage = big}};
    const memory_plan resident = plan(r);
    r.where = placement::streamed;  // every group on the host, which holds them all
    r.budgets.device = resident.total(tier_id::device) / 3;
    for (bool rates : {false, true}) {
        CAPTURE(rates);
        if (rates) r.rates = slow_links();
        const memory_plan p = plan(r);
        CHECK(p.state_home == tier_id::host);
        CHECK(p.total(tier_id::storage) == 0);
        plan_request asked = r;
        asked.state_on_storage = true;  // what --moments storage asks
        CHECK(plan(asked).state_home == tier_id::storage);
    }
}

TEST_CASE("the prediction: the bottleneck, busy fractions, and the accum at which compute bounds the step") {
    const gpt_config c{.vocab_size = 64, .max_seq = 16, .n_layer = 6, .n_head = 4, .n_embd = 64};
    plan_request r{.model = footprint(c, 2, 16), .budgets = {.device = big, .host = big, .storage = big}};
    const machine_rates m = slow_links();
    const memory_plan resident = plan(r);
    const step_prediction fast = predict(resident, r, m);
    CHECK(fast.bottleneck == step_resource::compute);
    CHECK(fast.compute_bound_accum == 0);
    CHECK(fast.tokens == 2 * 16);
    CHECK(fast.tokens_per_second == doctest::Approx(32 / fast.seconds));
    CHECK(fast.busy_fraction(step_resource::compute) > 0.9);
    CHECK(fast.busy(step_resource::pcie_up) == 0);

    // every state tensor on storage: the disk bounds the step, until enough micro-batches share it
    r.where = placement::streamed;
    r.state_on_storage = true;
    const memory_plan stored = plan(r);
    const step_prediction slow = predict(stored, r, m);
    CHECK(slow.bottleneck == step_resource::storage);
    CHECK(slow.seconds > fast.seconds);
    CHECK(slow.busy(step_resource::storage) > 0);
    CHECK(slow.busy_fraction(step_resource::storage) <= 1.0 + 1e-9);
    REQUIRE(slow.compute_bound_accum > 1);
    plan_request more = r;
    more.accum = slow.compute_bound_accum;
    const step_prediction then = predict(stored, more, m);
    CHECK(then.bottleneck == step_resource::compute);
    CHECK(then.tokens_per_second == doctest::Approx(slow.compute_bound_tokens_per_second));
    CHECK(then.tokens_per_second > slow.tokens_per_second);
    more.accum = slow.compute_bound_accum - 1;  // the least such accum
    CHECK(predict(stored, more, m).bottleneck != step_resource::compute);

    // a rate the plan needs and the machine lacks is named
    machine_rates no_disk = m;
    no_disk.storage_read = 0;
    CHECK_THROWS_WITH_AS((void)predict(stored, r, no_disk), doctest::Contains("storage_read"), error);
    CHECK_NOTHROW((void)predict(resident, plan_request{.model = r.model}, no_disk));  // needs no disk
}

namespace {

// This machine's rates, measured the way the trainer's work runs on the CPU backend: a block's
// GEMM and attention through ops<cpu_backend>, a copy for memory bandwidth and the links, storage
// files through the backend, the host optimizer through offloaded_optimizer. Best of three.
machine_rates measure_cpu(cpu_backend& backend, const gpt_config& c, std::size_t B, std::size_t T) {
    using op = ops<cpu_backend>;
    auto s = backend.make_stream("calibration");
    auto best_of = [](auto&& f) {
        double best = std::numeric_limits<double>::infinity();
        for (int i = 0; i < 3; ++i) {
            const auto start = std::chrono::steady_clock::now();
            f();
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        return best;
    };
    machine_rates m;
    const std::size_t BT = B * T, C = c.n_embd;
    {
        tiered_tensor<float, device_tier, cpu_backend> x(backend, shape{BT * C}, "x"), w(backend, shape{4 * C * C}, "w"),
            y(backend, shape{BT * 4 * C}, "y");
        for (auto* t : {&x, &w}) op::zero(s, t->device_data().get(), t->numel());
        m.gemm_flops = 2.0 * static_cast<double>(BT * C * 4 * C) / best_of([&] {
            op::matmul_forward(s, y.device_data().get(), x.device_data().get(), w.device_data().get(),
                               static_cast<const float*>(nullptr), B, T, C, 4 * C);
            s.synchronize();
        });
    }
    {
        tiered_tensor<float, device_tier, cpu_backend> qkv(backend, shape{BT * 3 * C}, "qkv"),
            dqkv(backend, shape{BT * 3 * C}, "dqkv"), out(backend, shape{BT * C}, "out"), dout(backend, shape{BT * C}, "dout"),
            saved(backend, shape{std::max<std::size_t>(op::attention_saved(B, T, c.n_head), 1)}, "saved"),
            scratch(backend, shape{std::max<std::size_t>(op::attention_workspace(B, T, C, c.n_head), 1)}, "scratch");
        for (auto* t : {&qkv, &dout, &dqkv}) op::zero(s, t->device_data().get(), t->numel());
        m.attention_flops = 12.0 * static_cast<double>(B * T * T * C) / best_of([&] {
            op::attention_forward(s, out.device_data().get(), saved.device_data().get(), qkv.device_data().get(), B, T, C,
                                  c.n_head);
            op::attention_backward(s, dqkv.device_data().get(), scratch.device_data().get(), saved.device_data().get(),
                                   dout.device_data().get(), out.device_data().get(), qkv.device_data().get(), B, T, C,
                                   c.n_head);
            s.synchronize();
        });
    }
    const std::size_t bytes = std::size_t(16) << 20;
    {
        std::vector<char> a(bytes, 1), b(bytes);
        m.device_memory = 2.0 * static_cast<double>(bytes) / best_of([&] { std::memcpy(b.data(), a.data(), bytes); });
    }
    const link_bandwidths links = measure_links(backend, bytes);
    m.h2d = links.h2d;
    m.d2h = links.d2h;
    {
        tiered_tensor<std::byte, host_tier, cpu_backend> host(backend, shape{bytes}, "calibration.host");
        tiered_tensor<std::byte, storage_tier, cpu_backend> file(backend, shape{bytes}, "calibration.file");
        m.storage_write = static_cast<double>(bytes) / best_of([&] { copy_async(backend, file.view(), host.view(), s).wait(); });
        m.storage_read = static_cast<double>(bytes) / best_of([&] { copy_async(backend, host.view(), file.view(), s).wait(); });
    }
    {
        const std::size_t n = std::size_t(1) << 20;
        std::vector<float> p(n, 0.5f), g(n, 0.01f), m1(n, 0.f), v(n, 0.f);
        offloaded_optimizer<any_optimizer> opt(any_optimizer(adamw_optimizer{}));
        const std::span<float> state[] = {m1, v};
        m.host_optimizer["adamw"] = static_cast<double>(n) / best_of([&] {
            opt.step_block(std::span<float>(p), std::span<const float>(g), optimizer_state<float>(state),
                           {.lr = 1e-3, .step = 1, .decay = true});
        });
    }
    return m;
}

std::vector<data::batch> micro_batches(const gpt_config& c, std::size_t accum, std::size_t BT) {
    return test::counting_batches({.vocab = c.vocab_size, .tokens = BT, .count = accum, .stride = 5, .offset = 1});
}

// The measured step of plan p: the fastest of four after one warm-up step.
double measured_step(cpu_backend& backend, const gpt_config& c, const plan_request& r, const memory_plan& p) {
    gpt_model<float, cpu_backend> model(c);
    const train_options o{.batch = r.model.batch, .seq = r.model.seq, .accum = r.accum, .activations = p.kept(),
                          .homes = p.trainer_homes()};
    auto time_steps = [&](auto& t) {
        t.initialize(5);
        const auto micro = micro_batches(c, r.accum, r.model.batch * r.model.seq);
        (void)t.step(micro);
        double best = std::numeric_limits<double>::infinity();
        for (int i = 0; i < 4; ++i) {
            const auto start = std::chrono::steady_clock::now();
            (void)t.step(micro);
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        t.finish_updates();
        return best;
    };
    if (p.where == placement::resident) {
        gpt_trainer<float, cpu_backend> t(backend, model, o);
        return time_steps(t);
    }
    REQUIRE(p.slots == 2);
    test::streamed_trainer<gpt_trainer<float, cpu_backend>, 2, storage_tier> t(backend, model, o);
    return time_steps(t);
}

}  // namespace

TEST_CASE("the model orders two placements as the CPU backend measures them, with rates measured the same way") {
    if (test::address_sanitizer_build) {  // 117 s of meaningless timings in CI's -O0 ASan stage
        test::skip("a comparison of measured step times: not under AddressSanitizer (the release build runs it)");
        return;
    }
    const gpt_config c{.vocab_size = 256, .max_seq = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
    const std::size_t B = 4, T = 64;
    const auto dir = std::filesystem::temp_directory_path() / ("strata-cost-model-" + std::to_string(::getpid()));
    struct cleanup {
        std::filesystem::path p;
        ~cleanup() { std::filesystem::remove_all(p); }
    } at_end{dir};
    cpu_backend backend(tier_options{.device_bytes = std::size_t(1) << 30, .host_bytes = std::size_t(1) << 30,
                                     .storage_bytes = std::size_t(1) << 30, .storage_dir = dir});
    const machine_rates m = measure_cpu(backend, c, B, T);
    MESSAGE("CPU rates: GEMM " << m.gemm_flops / 1e9 << " GFLOP/s, attention " << m.attention_flops / 1e9
                               << " GFLOP/s, memory " << m.device_memory / 1e9 << " GB/s, links " << m.h2d / 1e9 << " / "
                               << m.d2h / 1e9 << " GB/s, storage " << m.storage_read / 1e9 << " / "
                               << m.storage_write / 1e9 << " GB/s, AdamW " << m.host_optimizer.at("adamw") / 1e6
                               << " M params/s");
    plan_request r{.model = footprint(c, B, T), .budgets = {.device = big, .host = big, .storage = big}};
    // A: resident, every block keeping its activations. B: streamed through two slots, every block
    // recomputing, the optimizer state on storage.
    const memory_plan a = plan(r);
    REQUIRE(a.where == placement::resident);
    REQUIRE(a.kept_blocks == c.n_layer);
    plan_request rb = r;
    rb.where = placement::streamed;
    rb.activations = activation_policy::recompute;
    rb.state_on_storage = true;
    rb.slots = 2;
    const memory_plan b = plan(rb);
    const double predicted_a = predict(a, r, m).seconds, predicted_b = predict(b, rb, m).seconds;
    const double measured_a = measured_step(backend, c, r, a), measured_b = measured_step(backend, c, rb, b);
    MESSAGE("resident, kept: predicted " << predicted_a << " s, measured " << measured_a
                                         << " s; streamed, recomputed, state on storage: predicted " << predicted_b
                                         << " s, measured " << measured_b << " s");
    // the two differ by more than the noise of a shared machine, in the model
    REQUIRE(predicted_b > 1.25 * predicted_a);
    CHECK(measured_b > measured_a);
}

}  // namespace cost_model_test
