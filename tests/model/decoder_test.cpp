// decoder_model: a model assembled from Layers (GPT-2's gpt_model is one), trained by the trainers.
// - GPT-2 from its three Layer configs (gpt2_block + layernorm_layer) is gpt_model(gpt_config): the
//   same names, and it trains bit for bit alike, resident and streamed.
// - An untied LM head (tied_head = false): its own (V, C) tensor in group 0, named lm_head
//   verbatim; equal to the embedding it computes the tied model's loss bit for bit, then the two
//   move apart; streamed == resident.
// - Frozen tensors: frozen embeddings (the LoRA setting) and a wholly frozen block keep their
//   weights bitwise, have no gradients or moments, stream == resident, and cost exactly their
//   gradient and moment bytes less host memory.
#include "support/placements.hpp"  // test::streamed_trainer
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, make_backend
#include "support/policy_gradients.hpp"  // test::policy_gradients
#include "support/random_batch.hpp"  // test::random_batches

#include <strata/model/decoder.hpp>
#include <strata/nn/cpu_ops.hpp>
#include <strata/nn/gpt2_block.hpp>
#include <strata/nn/layernorm_layer.hpp>
#include <strata/strata.hpp>
#include <strata/train/checkpoint.hpp>
#include <strata/train/tiered_trainer.hpp>
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

namespace decoder_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

const gpt_config config{.vocab_size = 29, .max_seq = 8, .n_layer = 3, .n_head = 2, .n_embd = 16};

// A Layer with every parameter of Inner frozen: its backward hands Inner a scratch gradient block
// (from the workspace) and throws it away.
template <class Inner>
class frozen_layer {
public:
    using config_type = typename Inner::config_type;
    using value_type = typename Inner::value_type;
    using backend_type = typename Inner::backend_type;
    using R = value_type;
    using stream = typename backend_type::stream;

    explicit frozen_layer(const config_type& c) : m_inner(c), m_config(c) {}
    static std::vector<param_spec> params(const config_type& c) {
        auto specs = Inner::params(c);
        for (auto& s : specs) s.trainable = false;
        return specs;
    }
    static std::size_t in_features(const config_type& c) { return Inner::in_features(c); }
    static std::size_t out_features(const config_type& c) { return Inner::out_features(c); }
    static std::size_t activation_floats(const config_type& c, std::size_t B, std::size_t T) {
        return Inner::activation_floats(c, B, T);
    }
    static std::size_t workspace_floats(const config_type& c, std::size_t B, std::size_t T) {
        return Inner::workspace_floats(c, B, T) + param_layout::of<R>(Inner::params(c)).numel();
    }
    static double flops(const config_type& c, std::size_t B, std::size_t T) { return Inner::flops(c, B, T); }
    void forward(stream& s, const R* p, R* out, R* acts, const R* inp, R* w, std::size_t B, std::size_t T) const {
        m_inner.forward(s, p, out, acts, inp, w, B, T);
    }
    void backward(stream& s, const R* p, R* dparams, R* dinp, const R* dout, const R* acts, const R* inp, R* w,
                  std::size_t B, std::size_t T) const {
        CHECK(dparams == nullptr);  // a frozen group gets no gradients
        R* scratch = w + Inner::workspace_floats(m_config, B, T);
        m_inner.backward(s, p, scratch, dinp, dout, acts, inp, w, B, T);
    }

private:
    Inner m_inner;
    config_type m_config;
};

template <class B>
using gpt2_from_layers = decoder_model<gpt2_block<float, B>, layernorm_layer<float, B>>;
template <class B>
using frozen_blocks = decoder_model<frozen_layer<gpt2_block<float, B>>, layernorm_layer<float, B>>;

decoder_config decoder_shape(bool freeze_embeddings) {
    return {.vocab_size = config.vocab_size,
            .max_seq = config.max_seq,
            .n_layer = config.n_layer,
            .n_embd = config.n_embd,
            .freeze_embeddings = freeze_embeddings};
}

std::vector<data::batch> micro_batches(int step, std::size_t accum, std::size_t B, std::size_t T) {
    return test::random_batches(500 + step,
                                {.vocab = config.vocab_size, .tokens = B * T, .count = accum, .scale = 5, .shift = 2});
}

struct run_result {
    std::vector<double> losses, norms;
    host_blocks<float> initial, params, m, v;
    std::size_t host_peak = 0;
};

template <class Trainer, class B, class Model>
run_result run(B& backend, const Model& model, const train_options& o, int steps) {
    run_result r;
    {
        Trainer t(backend, model, o);
        t.initialize(7);
        using kind = typename Trainer::state_kind;
        r.initial = download_blocks(t, kind::params);
        for (int s = 0; s < steps; ++s) {
            const auto res = t.step(micro_batches(s, o.accum, o.batch, o.seq));
            r.losses.push_back(res.loss);
            r.norms.push_back(res.grad_norm);
        }
        r.params = download_blocks(t, kind::params);
        r.m = download_blocks(t, kind::adam_m);
        r.v = download_blocks(t, kind::adam_v);
    }
    r.host_peak = backend.budget(tier_id::host).peak();
    return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);  // memcmp of null is UB
}
bool same_bits(const host_blocks<float>& a, const host_blocks<float>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t g = 0; g < a.size(); ++g)
        if (!same_bits(a[g], b[g])) return false;
    return true;
}

void check_equal(const run_result& a, const run_result& b) {
    REQUIRE(a.losses.size() == b.losses.size());
    for (std::size_t i = 0; i < a.losses.size(); ++i) {
        INFO("step " << i + 1);
        CHECK(a.losses[i] == b.losses[i]);  // bitwise
        CHECK(a.norms[i] == b.norms[i]);
    }
    CHECK(same_bits(a.params, b.params));
    CHECK(same_bits(a.m, b.m));
    CHECK(same_bits(a.v, b.v));
}

tier_options tiers() {
    return {.device_bytes = 256 << 20,
            .host_bytes = 256 << 20,
            .storage_bytes = 256 << 20,
            .storage_dir = std::filesystem::temp_directory_path() / ("strata-test-decoder-" + std::to_string(::getpid()))};
}

train_options options() {
    train_options o{.batch = 2, .seq = 8, .accum = 2, .clip = 0.05};  // clipping really happens
    o.schedule = {.kind = lr_kind::constant, .lr = 3e-3, .min_lr = 3e-3, .warmup_steps = 0, .total_steps = 6};
    return o;
}

}  // namespace

TEST_CASE_TEMPLATE("GPT-2 assembled from its three configs trains bit for bit like gpt_model(gpt_config), resident and streamed", B,
                   STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    B& backend = *made;
    const auto o = options();
    const gpt_model<float, B> gpt(config);
    const gpt2_from_layers<B> layers(decoder_shape(false), config, layernorm_config{.channels = config.n_embd});
    REQUIRE(layers.group_count() == gpt.group_count());
    for (std::size_t g = 0; g < gpt.group_count(); ++g) {
        CHECK(layers.groups()[g].numel() == gpt.groups()[g].numel());
        for (std::size_t i = 0; i < gpt.groups()[g].entries().size(); ++i)
            CHECK(layers.hf_name(g, layers.groups()[g].entries()[i]) == gpt.hf_name(g, gpt.groups()[g].entries()[i]));
    }
    const auto reference = run<gpt_trainer<float, B>>(backend, gpt, o, 6);
    CHECK(reference.losses.back() < reference.losses.front());
    const auto resident = run<tiered_trainer<float, B, gpt2_from_layers<B>>>(
        backend, layers, o, 6);
    CHECK(same_bits(reference.initial, resident.initial));  // the same draws
    check_equal(reference, resident);
    check_equal(reference, run<test::streamed_trainer<tiered_trainer<float, B, gpt2_from_layers<B>>, 2, host_tier>>(
                               backend, layers, o, 6));
}

TEST_CASE_TEMPLATE("an untied LM head: its own tensor in group 0; equal to the embedding it gives the tied loss bit for "
                   "bit; streamed == resident",
                   B, STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    B& backend = *made;
    const auto o = options();
    auto untied_shape = decoder_shape(false);
    untied_shape.tied_head = false;
    const gpt2_from_layers<B> tied(decoder_shape(false), config, layernorm_config{.channels = config.n_embd});
    const gpt2_from_layers<B> untied(untied_shape, config, layernorm_config{.channels = config.n_embd});
    const auto& g0 = untied.groups()[0];
    REQUIRE(g0.entries().size() == 3);  // wte, wpe, lm_head
    CHECK(untied.hf_name(0, g0.entries()[2]) == "lm_head.weight");
    CHECK(g0.entries()[2].spec.shape.numel() == config.vocab_size * config.n_embd);

    using resident = tiered_trainer<float, B, gpt2_from_layers<B>>;
    resident a(backend, tied, o), b(backend, untied, o);
    a.initialize(7);
    using kind = typename resident::state_kind;
    const auto blocks = download_blocks(a, kind::params);
    std::vector<float> group0(g0.numel(), 0.0f);
    const auto& t0 = tied.groups()[0];
    for (std::size_t i = 0; i < 2; ++i)  // wte and wpe as they are
        std::copy_n(blocks[0].begin() + t0.entries()[i].offset, t0.entries()[i].spec.shape.numel(),
                    group0.begin() + g0.entries()[i].offset);
    std::copy_n(blocks[0].begin() + t0.entries()[0].offset, t0.entries()[0].spec.shape.numel(),
                group0.begin() + g0.entries()[2].offset);  // the head: a copy of wte
    for (std::size_t g = 0; g < blocks.size(); ++g) b.upload(kind::params, g, g == 0 ? group0 : blocks[g]);
    const auto batches = micro_batches(0, o.accum, o.batch, o.seq);
    CHECK(a.step(batches).loss == b.step(batches).loss);  // the same logits, bit for bit
    const auto after = download_blocks(b, kind::params);
    CHECK_FALSE(std::equal(after[0].begin() + g0.entries()[0].offset,
                           after[0].begin() + g0.entries()[0].offset + g0.entries()[0].spec.shape.numel(),
                           after[0].begin() + g0.entries()[2].offset));

    const auto r = run<resident>(backend, untied, o, 4);
    CHECK(r.losses.back() < r.losses.front());
    check_equal(r, run<test::streamed_trainer<tiered_trainer<float, B, gpt2_from_layers<B>>, 2, host_tier>>(
                       backend, untied, o, 4));
}

TEST_CASE_TEMPLATE("frozen embeddings: weights kept bitwise, no gradients or moments, streamed == resident", B,
                   STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    B& backend = *made;
    const auto o = options();
    const gpt2_from_layers<B> frozen(decoder_shape(true), config, layernorm_config{.channels = config.n_embd});
    CHECK(frozen.groups()[0].frozen());
    CHECK(frozen.groups()[0].trainable_numel() == 0);
    using resident_t = tiered_trainer<float, B, gpt2_from_layers<B>>;
    using streamed_t = test::streamed_trainer<tiered_trainer<float, B, gpt2_from_layers<B>>, 3, host_tier>;
    const auto resident = run<resident_t>(backend, frozen, o, 6);
    CHECK(resident.losses.back() < resident.losses.front());
    CHECK(same_bits(resident.params[0], resident.initial[0]));   // the embeddings did not move
    CHECK_FALSE(same_bits(resident.params[1], resident.initial[1]));  // the blocks did
    CHECK(resident.m[0].empty());
    const auto streamed = run<streamed_t>(backend, frozen, o, 6);
    check_equal(resident, streamed);

    // Host memory of the streamed trainer: exactly the embeddings' gradients, m and v less.
    const gpt2_from_layers<B> trained(decoder_shape(false), config, layernorm_config{.channels = config.n_embd});
    B fresh_frozen(tiers()), fresh_trained(tiers());
    const auto f = run<streamed_t>(fresh_frozen, frozen, o, 1);
    const auto t = run<streamed_t>(fresh_trained, trained, o, 1);
    CHECK(t.host_peak - f.host_peak == 3 * trained.groups()[0].bytes());

    // Asking a frozen group for its moments is an error that says so.
    resident_t trainer(backend, frozen, o);
    std::vector<float> m(frozen.groups()[0].numel());
    CHECK_THROWS_WITH_AS(trainer.download(resident_t::state_kind::adam_m, 0, m), doctest::Contains("frozen"), error);
}

TEST_CASE_TEMPLATE("a wholly frozen block streams to the device only and keeps its weights", B, STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    B& backend = *made;
    const auto o = options();
    const frozen_blocks<B> model(decoder_shape(false), config, layernorm_config{.channels = config.n_embd});
    const auto resident = run<tiered_trainer<float, B, frozen_blocks<B>>>(
        backend, model, o, 4);
    for (std::size_t l = 0; l < config.n_layer; ++l) CHECK(same_bits(resident.params[1 + l], resident.initial[1 + l]));
    CHECK_FALSE(same_bits(resident.params[0], resident.initial[0]));  // the embeddings trained
    CHECK(resident.losses.back() < resident.losses.front());
    check_equal(resident, run<test::streamed_trainer<tiered_trainer<float, B, frozen_blocks<B>>, 2, storage_tier>>(
                              backend, model, o, 4));
}

TEST_CASE_TEMPLATE("kept parts at a micro-batch smaller than the activations: the gradients of keeping every block, "
                   "bitwise", B, STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    if (!made) return;
    B& backend = *made;
    const gpt_config c{.vocab_size = 23, .max_seq = 16, .n_layer = 3, .n_head = 2, .n_embd = 8};
    gpt_model<float, B> model(c);
    test::policy_gradients<float, B, gpt_model<float, B>> gradients(backend, model, c.vocab_size, 5);
    const test::micro_batch_shape shape{.rows = 3, .cols = 16, .batch = 2, .seq = 11};  // 2 x 11 in 3 x 16
    gradients.check_every_policy(shape);
}

}  // namespace decoder_test
