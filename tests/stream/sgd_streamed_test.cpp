// A second optimizer through the trainers' seam: SGD with momentum (train_options::optimizer) trains
// bitwise alike resident, streamed with its momentum in the host tier and in the storage tier, and
// in mixed homes (same losses, norms, weights and momentum), with accumulation and clipping, on
// every backend; a checkpoint of an SGD run holds its momentum by name, records the optimizer,
// resumes bitwise (in another placement too), and a trainer of another optimizer refuses it.
#include "support/backends.hpp"     // STRATA_TEST_BACKENDS, make_backend
#include "stream/stream_test_support.hpp"  // tiny_gpt, micro_batches, same_bits, scratch_tiers
#include "support/placements.hpp"  // streamed_options

#include <strata/nn/cpu_ops.hpp>
#include <strata/strata.hpp>
#include <strata/train/checkpoint.hpp>        // save_checkpoint, load_checkpoint, download_blocks
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>

#include <filesystem>  // std::filesystem
#include <string>      // std::string
#include <vector>      // std::vector

namespace sgd_streamed_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
using test::same_bits;

namespace {

// o streamed through `slots` device slots; without homes of its own, every group at `home`.
train_options placed(const train_options& o, std::size_t slots, group_home home = group_home::host()) {
    return test::streamed_options(o, test::tiny_gpt.n_layer + 2, slots, home);  // embeddings, blocks, final norm
}

train_options sgd_options() {
    train_options o{.batch = 2, .seq = 8, .accum = 2, .clip = 0.05};  // a small max norm: clipping happens
    o.schedule = {.kind = lr_kind::cosine, .lr = 3e-2, .min_lr = 3e-3, .warmup_steps = 2, .total_steps = 10};
    o.optimizer = sgd_optimizer({.momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
    return o;
}

struct sgd_run {
    std::vector<double> losses, norms;
    host_blocks<float> params, momentum;
};

template <class Trainer>
void record_state(Trainer& t, sgd_run& r) {
    using kind = typename Trainer::state_kind;
    r.params = download_blocks(t, kind::params);
    r.momentum = download_blocks(t, kind::optimizer_state(0));
}

template <class Trainer>
void train_steps(Trainer& t, const train_options& o, int from, int to, sgd_run& r) {
    for (int s = from; s < to; ++s) {
        const step_result res = t.step(test::micro_batches(s, o.accum, o.batch, o.seq));
        r.losses.push_back(res.loss);
        r.norms.push_back(res.grad_norm);
    }
}

template <class Trainer, class B>
sgd_run run(B& backend, const train_options& o, int steps) {
    gpt_model<float, B> model(test::tiny_gpt);
    Trainer t(backend, model, o);
    t.initialize(21);
    sgd_run r;
    train_steps(t, o, 0, steps, r);
    record_state(t, r);
    return r;
}

void check_equal(const sgd_run& a, const sgd_run& b) {
    REQUIRE(a.losses.size() == b.losses.size());
    for (std::size_t i = 0; i < a.losses.size(); ++i) {
        INFO("step " << i + 1);
        CHECK(a.losses[i] == b.losses[i]);  // bitwise, not approximately
        CHECK(a.norms[i] == b.norms[i]);
    }
    CHECK(same_bits(a.params, b.params));
    CHECK(same_bits(a.momentum, b.momentum));
}

}  // namespace

TEST_CASE_TEMPLATE("SGD with momentum trains bitwise alike resident, streamed with its momentum on the host or on "
                   "storage, and in mixed homes",
                   B, STRATA_TEST_BACKENDS) {
    test::scratch_tiers tiers("sgd");
    auto made = test::make_backend<B>(tiers.options());
    if (!made) return;
    B& backend = *made;
    const train_options o = sgd_options();
    const sgd_run resident = run<gpt_trainer<float, B>>(backend, o, 10);
    CHECK(resident.losses.back() < resident.losses.front());
    bool clipped = false;
    for (double n : resident.norms) clipped |= n > o.clip;
    CHECK(clipped);
    std::size_t moving = 0;  // the momentum is really kept
    for (const auto& block : resident.momentum)
        for (float x : block) moving += x != 0.0f;
    CHECK(moving > 0);

    SUBCASE("momentum in the host tier") {
        check_equal(resident, run<gpt_trainer<float, B>>(backend, placed(o, 2, group_home::host()), 10));
    }
    SUBCASE("momentum in the storage tier") {
        check_equal(resident, run<gpt_trainer<float, B>>(backend, placed(o, 3, group_home::storage()), 10));
    }
    SUBCASE("mixed homes: device, host and storage groups interleaved") {
        train_options mixed = o;
        mixed.homes = {group_home::storage(), group_home::device(), group_home::host(), group_home::storage(),
                       group_home::device()};
        check_equal(resident, run<gpt_trainer<float, B>>(backend, placed(mixed, 2, group_home::host()), 10));
    }
    SUBCASE("the optimizer is SGD's, not AdamW's") {
        train_options adamw = o;
        adamw.optimizer = adamw_optimizer();
        gpt_model<float, B> model(test::tiny_gpt);
        gpt_trainer<float, B> t(backend, model, adamw);
        t.initialize(21);
        sgd_run r;
        train_steps(t, adamw, 0, 10, r);
        CHECK(r.losses[0] == resident.losses[0]);  // the same first forward
        CHECK(r.losses.back() != resident.losses.back());
        CHECK(t.optimizer().state_names().size() == 2);
    }
}

TEST_CASE_TEMPLATE("a checkpoint of an SGD run holds its momentum by name, records the optimizer, and resumes bitwise "
                   "in another placement",
                   B, STRATA_TEST_BACKENDS) {
    test::scratch_tiers tiers("sgd-checkpoint");
    auto made = test::make_backend<B>(tiers.options());
    if (!made) return;
    B& backend = *made;
    const train_options o = sgd_options();
    gpt_model<float, B> model(test::tiny_gpt);
    const sgd_run uninterrupted = run<gpt_trainer<float, B>>(backend, o, 6);

    // 3 steps streamed with the momentum on storage, saved; 3 more on the resident trainer
    const std::filesystem::path out = tiers.dir / "checkpoints";
    std::filesystem::path saved;
    sgd_run resumed_run;
    {
        gpt_trainer<float, B> first(backend, model, placed(o, 3, group_home::storage()));
        first.initialize(21);
        train_steps(first, o, 0, 3, resumed_run);
        saved = save_checkpoint(first, out, {{"data_cursor", 3}});
    }
    const auto file = safetensors_file::open(saved / "optimizer.safetensors");
    std::size_t trainable_tensors = 0;
    for (const auto& layout : model.groups())
        for (const auto& entry : layout.entries()) trainable_tensors += entry.spec.trainable;
    CHECK(file.names().size() == trainable_tensors);
    for (const auto& name : file.names()) CHECK(name.starts_with("momentum."));
    CHECK(std::filesystem::file_size(saved / "optimizer.safetensors") ==
          optimizer_file_bytes(model, sgd_optimizer()));
    CHECK(optimizer_file_bytes(model, sgd_optimizer()) < optimizer_file_bytes(model));  // AdamW's: m, v
    const auto state = read_json_file(saved / "trainer_state.json");
    CHECK(checkpoint_optimizer(state) == "sgd");
    CHECK(state.at("optimizer") ==
          nlohmann::json{{"name", "sgd"}, {"momentum", 0.9}, {"weight_decay", 0.01}, {"nesterov", true}});

    gpt_trainer<float, B> resumed(backend, model, o);
    resumed.initialize(999);
    load_checkpoint(resumed, saved);
    CHECK(resumed.step_count() == 3);
    train_steps(resumed, o, 3, 6, resumed_run);
    record_state(resumed, resumed_run);
    check_equal(uninterrupted, resumed_run);

    // a trainer of another optimizer refuses the checkpoint, and an SGD trainer an AdamW one
    train_options adamw = o;
    adamw.optimizer = adamw_optimizer();
    gpt_trainer<float, B> other(backend, model, adamw);
    CHECK_THROWS_WITH_AS(load_checkpoint(other, saved),
                         doctest::Contains("was trained with the optimizer 'sgd', this trainer runs 'adamw'"), error);
    const std::filesystem::path adamw_saved = save_checkpoint(other, tiers.dir / "adamw", {});
    auto old_state = read_json_file(adamw_saved / "trainer_state.json");
    old_state.erase("optimizer");  // as checkpoints written before the field: AdamW's
    write_json_file(adamw_saved / "trainer_state.json", old_state);
    CHECK_NOTHROW(load_checkpoint(other, adamw_saved));
    CHECK_THROWS_WITH_AS(load_checkpoint(resumed, adamw_saved),
                         doctest::Contains("was trained with the optimizer 'adamw', this trainer runs 'sgd'"), error);
}

}  // namespace sgd_streamed_test
