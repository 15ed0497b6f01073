// The open optimizer seam (optim/optimizer.hpp, optim/device_update.hpp): an optimizer defined in
// this file alone (no library edit) trains resident and streamed, bitwise alike, through
// tiered_trainer's Optimizer parameter; Adafactor (registered, with state tensors of their own
// sizes) trains bitwise alike resident, streamed with its state on the host and on storage, and in
// mixed homes, and a checkpoint holds its factored state by name and shape and resumes bitwise.
#include "support/backends.hpp"            // STRATA_TEST_BACKENDS, make_backend
#include "stream/stream_test_support.hpp"  // tiny_gpt, micro_batches, same_bits, scratch_tiers

#include <strata/nn/cpu_ops.hpp>
#include <strata/strata.hpp>
#include <strata/train/checkpoint.hpp>        // save_checkpoint, load_checkpoint, download_blocks
#include <strata/train/tiered_trainer.hpp>  // tiered_trainer
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model
#include "support/placements.hpp"  // test::streamed_trainer

#include <doctest/doctest.h>

#include <array>        // std::array
#include <filesystem>   // std::filesystem
#include <span>         // std::span
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace optimizer_seam_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
using test::same_bits;

// A toy optimizer: p += step, step = g * (-lr), keeping the last step as its state ("step").
struct toy_optimizer {
    static constexpr std::array<std::string_view, 1> states{"step"};
    static std::string_view name() { return "toy"; }
    static std::string_view display_name() { return "Toy"; }
    static std::span<const std::string_view> state_names() { return states; }
    static shape state_shape(std::size_t, const shape& parameter) { return parameter; }
    static nlohmann::json hparams_json() { return nlohmann::json::object(); }
    template <class R>
    void update(host_thread_pool&, std::span<R> p, std::span<const R> g, optimizer_state<R> state,
                const optimizer_step& k, R grad_scale = R(1)) const {
        const R neg_lr = static_cast<R>(-k.lr);
        for (std::size_t i = 0; i < p.size(); ++i) {
            R grad = g[i];
            if (grad_scale != R(1)) grad = grad * grad_scale;
            state[0][i] = grad * neg_lr;
            p[i] = p[i] + state[0][i];
        }
    }
};
static_assert(Optimizer<toy_optimizer>);

}  // namespace optimizer_seam_test

#ifdef STRATA_TESTS_WITH_CUDA
// The toy on CUDA: the same operations with ops<cuda_backend>'s element-wise ops (copy, then
// g * T(-lr), then p + step), bitwise its host update.
template <>
struct strata::optimizer_kernels<optimizer_seam_test::toy_optimizer, strata::cuda_backend> {
    static void update(cuda_backend::stream& s, const optimizer_seam_test::toy_optimizer&, float* p, const float* g,
                       std::size_t n, std::span<float* const> state, const optimizer_step& k) {
        ops<cuda_backend>::copy(s, state[0], g, n);
        ops<cuda_backend>::scale_inplace(s, state[0], -k.lr, n);
        ops<cuda_backend>::add_inplace(s, p, state[0], n);
    }
};
#endif

namespace optimizer_seam_test {

namespace {

struct a_run {
    std::vector<double> losses;
    host_blocks<float> params;
    std::vector<host_blocks<float>> state;
};

train_options options_of(const any_optimizer& o) {
    train_options t{.batch = 2, .seq = 8, .accum = 2, .clip = 0.05};  // a small max norm: clipping happens
    t.schedule = {.kind = lr_kind::cosine, .lr = 3e-2, .min_lr = 3e-3, .warmup_steps = 2, .total_steps = 10};
    t.optimizer = o;
    return t;
}

template <class Trainer>
a_run record(Trainer& t, a_run r) {
    using kind = typename Trainer::state_kind;
    r.params = download_blocks(t, kind::params);
    for (std::size_t i = 0; i < t.optimizer().state_names().size(); ++i)
        r.state.push_back(download_blocks(t, kind::optimizer_state(i)));
    return r;
}

template <class Trainer, class B, class... Opt>
a_run run(B& backend, const train_options& o, int steps, Opt... optimizer) {
    gpt_model<float, B> model(test::tiny_gpt);
    Trainer t(backend, model, o, optimizer...);
    t.initialize(21);
    a_run r;
    for (int s = 0; s < steps; ++s) r.losses.push_back(t.step(test::micro_batches(s, o.accum, o.batch, o.seq)).loss);
    return record(t, std::move(r));
}

void check_equal(const a_run& a, const a_run& b) {
    REQUIRE(a.losses.size() == b.losses.size());
    for (std::size_t i = 0; i < a.losses.size(); ++i) {
        INFO("step " << i + 1);
        CHECK(a.losses[i] == b.losses[i]);  // bitwise, not approximately
    }
    CHECK(same_bits(a.params, b.params));
    REQUIRE(a.state.size() == b.state.size());
    for (std::size_t i = 0; i < a.state.size(); ++i) CHECK(same_bits(a.state[i], b.state[i]));
}

}  // namespace

TEST_CASE_TEMPLATE("an optimizer defined in a test file trains resident and streamed, bitwise alike", B,
                   STRATA_TEST_BACKENDS) {
    test::scratch_tiers tiers("toy_optimizer");
    auto made = test::make_backend<B>(tiers.options());
    if (!made) return;
    const train_options o = options_of(adamw_optimizer());  // not read: the toy is given
    using model = gpt_model<float, B>;
    const a_run resident = run<tiered_trainer<float, B, model, toy_optimizer>>(*made, o, 6, toy_optimizer{});
    CHECK(resident.losses.back() < resident.losses.front());
    check_equal(resident, run<test::streamed_trainer<tiered_trainer<float, B, model, toy_optimizer>, 2, host_tier>>(*made, o, 6, toy_optimizer{}));
    check_equal(resident, run<test::streamed_trainer<tiered_trainer<float, B, model, toy_optimizer>, 3, storage_tier>>(*made, o, 6, toy_optimizer{}));
}

TEST_CASE_TEMPLATE("Adafactor trains bitwise alike resident, streamed with its state on the host or on storage, "
                   "and in mixed homes; its factored state is smaller than the gradients",
                   B, STRATA_TEST_BACKENDS) {
    test::scratch_tiers tiers("adafactor");
    auto made = test::make_backend<B>(tiers.options());
    if (!made) return;
    const train_options o = options_of(adafactor_optimizer({.weight_decay = 0.01}));
    const a_run resident = run<gpt_trainer<float, B>>(*made, o, 8);
    CHECK(resident.losses.back() < resident.losses.front());
    REQUIRE(resident.state.size() == 3);
    // row_var + col_var + variance of a block: far fewer elements than its gradients
    CHECK(resident.state[0][1].size() + resident.state[1][1].size() + resident.state[2][1].size() <
          resident.params[1].size());
    check_equal(resident, run<test::streamed_trainer<gpt_trainer<float, B>, 2, host_tier>>(*made, o, 8));
    check_equal(resident, run<test::streamed_trainer<gpt_trainer<float, B>, 3, storage_tier>>(*made, o, 8));
    train_options mixed = o;
    mixed.homes = {group_home::storage(), group_home::device(), group_home::host(), group_home::storage(),
                   group_home::device()};
    check_equal(resident, run<test::streamed_trainer<gpt_trainer<float, B>, 2, host_tier>>(*made, mixed, 8));
}

TEST_CASE_TEMPLATE("an Adafactor checkpoint holds its factored state by name and shape, and resumes bitwise", B,
                   STRATA_TEST_BACKENDS) {
    test::scratch_tiers tiers("adafactor_checkpoint");
    auto made = test::make_backend<B>(tiers.options());
    if (!made) return;
    const train_options o = options_of(adafactor_optimizer());
    gpt_model<float, B> model(test::tiny_gpt);
    gpt_trainer<float, B> t(*made, model, o);
    t.initialize(21);
    for (int s = 0; s < 3; ++s) t.step(test::micro_batches(s, o.accum, o.batch, o.seq));
    const auto dir = save_checkpoint(t, tiers.dir / "out", nlohmann::json::object());
    const auto file = safetensors_file::open(dir / "optimizer.safetensors");
    CHECK(file.contains("row_var.transformer.h.0.attn.c_attn.weight"));
    CHECK(file.contains("variance.transformer.h.0.attn.c_attn.bias"));
    CHECK_FALSE(file.contains("variance.transformer.h.0.attn.c_attn.weight"));
    CHECK(std::filesystem::file_size(dir / "optimizer.safetensors") == optimizer_file_bytes(model, t.optimizer()));
    test::streamed_trainer<gpt_trainer<float, B>, 2, host_tier> resumed(*made, model, o);
    load_checkpoint(resumed, dir);
    a_run a, b;
    for (int s = 3; s < 6; ++s) {
        a.losses.push_back(t.step(test::micro_batches(s, o.accum, o.batch, o.seq)).loss);
        b.losses.push_back(resumed.step(test::micro_batches(s, o.accum, o.batch, o.seq)).loss);
    }
    check_equal(record(t, a), record(resumed, b));
}

}  // namespace optimizer_seam_test
