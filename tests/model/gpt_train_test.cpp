// The example GPT on the CPU backend: a whole tiny model against central finite differences in
// double, checkpointed backward == plain backward bitwise, and a few steps that lower the loss.
// The last two run on every backend (float).
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, make_backend
#include "support/random_batch.hpp"  // test::random_batches

#include <strata/kernels/cpu/gradient_check.hpp>
#include <strata/nn/cpu_ops.hpp>
#include <strata/strata.hpp>
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace gpt_train_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

gpt_config tiny() { return {.vocab_size = 11, .max_seq = 6, .n_layer = 2, .n_head = 2, .n_embd = 6}; }

data::batch make_batch(std::size_t B, std::size_t T, std::size_t V, std::uint64_t seed, bool ignore_some) {
    data::batch b = test::random_batches(seed, {.vocab = V, .tokens = B * T, .scale = 0})[0];  // random targets
    if (ignore_some) b.targets[1] = b.targets[B * T - 2] = kernels::cpu::ignore_index;
    return b;
}

template <class R, class Backend>
std::vector<std::vector<R>> all_blocks(gpt_trainer<R, Backend>& t, typename gpt_trainer<R, Backend>::state_kind k) {
    std::vector<std::vector<R>> out;
    for (std::size_t g = 0; g < t.model().group_count(); ++g) {
        out.emplace_back(t.model().groups()[g].numel());
        t.download(k, g, out.back());
    }
    return out;
}

}  // namespace

TEST_CASE("a tiny GPT's gradients match central finite differences in double") {
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    const gpt_config c = tiny();
    gpt_model<double, cpu_backend> model(c);
    const std::size_t B = 2, T = 5;
    gpt_trainer<double, cpu_backend> t(backend, model, {.batch = B, .seq = T, .accum = 1, .clip = 0});
    t.initialize(3);
    // make the weights larger than GPT-2's init so every path carries signal
    using kind = gpt_trainer<double, cpu_backend>::state_kind;
    auto params = all_blocks(t, kind::params);
    rng gen(9);
    for (auto& block : params)
        for (auto& x : block) x = x != 0 ? x * 10 + gen.normal(0, 0.1) : x;
    for (std::size_t g = 0; g < params.size(); ++g) t.upload(kind::params, g, params[g]);

    std::vector<data::batch> micro{make_batch(B, T, c.vocab_size, 5, true)};
    // The loss as a function of the parameters, through the trainer's own forward (evaluate).
    auto loss_at = [&](const std::vector<std::vector<double>>& p) {
        for (std::size_t g = 0; g < p.size(); ++g) t.upload(kind::params, g, p[g]);
        return t.evaluate(micro);
    };
    // Analytic gradient: one step with lr = 0 leaves the weights and returns grads.
    const double loss0 = loss_at(params);
    auto result = t.step(micro);
    CHECK(result.loss == doctest::Approx(loss0).epsilon(1e-12));
    auto grads = all_blocks(t, kind::grads);

    double worst = 0;
    std::size_t checked = 0;
    for (std::size_t g = 0; g < params.size(); ++g) {
        for (const auto& entry : model.groups()[g].entries()) {
            const std::size_t n = entry.spec.shape.numel();
            for (std::size_t i = 0; i < n; i += (n > 40 ? 7 : 1)) {  // a spread sample of each tensor
                auto p = params;
                const double h = 1e-5;
                p[g][entry.offset + i] += h;
                const double up = loss_at(p);
                p[g][entry.offset + i] -= 2 * h;
                const double down = loss_at(p);
                const double numeric = (up - down) / (2 * h);
                const double analytic = grads[g][entry.offset + i];
                // Relative error, with a floor of 1e-5 on the scale: a central difference of a loss
                // L ~ 3 in double carries ~|L| eps / h ~ 1e-10 of rounding noise, so gradients that
                // are exactly zero (the key biases' under softmax) read as ~1e-10 numerically.
                const double err = std::abs(numeric - analytic) / std::max(1e-5, std::abs(numeric) + std::abs(analytic));
                if (err > worst) worst = err;
                INFO(model.hf_name(g, entry) << "[" << i << "]: numeric " << numeric << " analytic " << analytic);
                CHECK(err < 5e-5);
                ++checked;
            }
        }
    }
    MESSAGE("checked " << checked << " parameters, worst relative error " << worst);
}

TEST_CASE_TEMPLATE("every activation policy (0, some or all blocks kept; recomputing inputs offloaded or not, parts kept or not) trains bitwise alike",
                   B_, STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B_>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    if (!made) return;
    B_& backend = *made;
    const gpt_config c{.vocab_size = 19, .max_seq = 8, .n_layer = 3, .n_head = 2, .n_embd = 8};
    gpt_model<float, B_> model(c);
    const std::size_t B = 2, T = 8;
    std::vector<data::batch> micro{make_batch(B, T, c.vocab_size, 1, false), make_batch(B, T, c.vocab_size, 2, true)};
    using kind = typename gpt_trainer<float, B_>::state_kind;
    auto run = [&](kept_activations kept) {
        gpt_trainer<float, B_> t(backend, model, {.batch = B, .seq = T, .accum = 2, .activations = kept});
        t.initialize(17);
        std::vector<double> losses;
        for (int i = 0; i < 3; ++i) losses.push_back(t.step(micro).loss);
        return std::make_pair(losses, all_blocks(t, kind::params));
    };
    auto [loss_ckpt, params_ckpt] = run(kept_activations::none());
    // offloaded: 3, 2 and 1 inputs in host memory (the two staging slots taken in turn, and one);
    // kept parts (selective recompute): 3, 2 and 1 recomputing blocks keep attention's output
    for (kept_activations kept :
         {kept_activations{1}, kept_activations{2}, kept_activations::all(), kept_activations{0, true},
          kept_activations{1, true}, kept_activations{2, true}, kept_activations{0, false, true},
          kept_activations{1, false, true}, kept_activations{2, true, true}, kept_activations{0, true, true}}) {
        CAPTURE(kept.count);
        CAPTURE(kept.offload_inputs);
        CAPTURE(kept.keep_parts);
        auto [loss, params] = run(kept);
        CHECK(loss == loss_ckpt);
        for (std::size_t g = 0; g < params_ckpt.size(); ++g)
            CHECK(std::memcmp(params_ckpt[g].data(), params[g].data(), params_ckpt[g].size() * sizeof(float)) == 0);
    }
}

TEST_CASE_TEMPLATE("training a tiny GPT on a repeating pattern lowers the loss", B_, STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B_>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    if (!made) return;
    B_& backend = *made;
    const gpt_config c{.vocab_size = 7, .max_seq = 16, .n_layer = 2, .n_head = 2, .n_embd = 16};
    gpt_model<float, B_> model(c);
    train_options o{.batch = 4, .seq = 16, .accum = 1};
    o.schedule.lr = 1e-2;
    o.schedule.min_lr = 1e-2;
    gpt_trainer<float, B_> t(backend, model, o);
    t.initialize(1);
    data::batch b;
    for (std::size_t i = 0; i < 4 * 16; ++i) {
        b.inputs.push_back(static_cast<token_id>(i % 5));
        b.targets.push_back(static_cast<token_id>((i + 1) % 5));
    }
    std::vector<data::batch> micro{b};
    const double first = t.step(micro).loss;
    double last = first;
    for (int i = 0; i < 40; ++i) last = t.step(micro).loss;
    CHECK(first > 1.5);
    CHECK(last < 0.2 * first);
}

}  // namespace gpt_train_test
