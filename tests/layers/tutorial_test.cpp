// The layer of docs/layers.md's tutorial, exactly as written there (steps 1 and 2), tested as in
// step 3, and trained in a model as in step 4: the tutorial compiles and passes.
#include <strata/model/decoder.hpp>             // decoder_model (step 4)
#include <strata/nn/cpu_ops.hpp>                 // ops<cpu_backend>
#include <strata/nn/layer.hpp>                   // Layer, check_layer
#include <strata/nn/layernorm_layer.hpp>         // layernorm_layer (step 4)
#include <strata/testing/layer_harness.hpp>      // check_gradients, check_checkpointing
#include <strata/train/streamed_trainer.hpp>     // trainer_t, prefetch_pipeline (step 4)

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE

#include <cstddef>  // std::size_t
#include <vector>   // std::vector

namespace {

// ---- step 1 ----
struct my_mlp_config {
    std::size_t n_embd = 0, hidden = 0;
};

template <class R, strata::Backend B>
class my_mlp {
public:
    using config_type = my_mlp_config;
    using value_type = R;
    using backend_type = B;
    static std::vector<strata::param_spec> params(const config_type& c) {
        return {{"up.weight", {c.n_embd, c.hidden}, true}, {"down.weight", {c.hidden, c.n_embd}, true}};
    }
    static std::size_t in_features(const config_type& c) { return c.n_embd; }
    static std::size_t out_features(const config_type& c) { return c.n_embd; }
    static std::size_t activation_floats(const config_type& c, std::size_t B_, std::size_t T) {
        return 2 * B_ * T * c.hidden;  // up's output and the activation
    }
    static std::size_t workspace_floats(const config_type& c, std::size_t B_, std::size_t T) {
        return 2 * B_ * T * c.hidden;  // d(activation) and d(up) in backward
    }
    static double flops(const config_type& c, std::size_t B_, std::size_t T) {
        return 2.0 * double(B_) * double(T) * 2.0 * double(c.n_embd) * double(c.hidden);
    }
    explicit my_mlp(const config_type& c) : m_c(c), m_layout(strata::param_layout::of<R>(params(c))) {}

    // ---- step 2 ----
    void forward(typename B::stream& s, const R* p, R* out, R* acts, const R* inp, R*, std::size_t Bn,
                 std::size_t T) const {
        using op = strata::ops<B>;
        const std::size_t BT = Bn * T, C = m_c.n_embd, H = m_c.hidden;
        R* up = acts;            // (B, T, H)
        R* act = acts + BT * H;  // (B, T, H)
        const R* no_bias = nullptr;  // typed: ops<B> deduces R from every pointer
        op::matmul_forward(s, up, inp, p + m_layout.slots()[0].offset, no_bias, Bn, T, C, H);
        op::gelu_forward(s, act, up, BT * H);
        op::matmul_forward(s, out, act, p + m_layout.slots()[1].offset, no_bias, Bn, T, H, C);
    }
    void backward(typename B::stream& s, const R* p, R* g, R* dinp, const R* dout, const R* acts, const R* inp,
                  R* work, std::size_t Bn, std::size_t T) const {
        using op = strata::ops<B>;
        const std::size_t BT = Bn * T, C = m_c.n_embd, H = m_c.hidden;
        const R* up = acts;
        const R* act = acts + BT * H;
        R* dact = work;          // (B, T, H): garbage on entry, zeroed before accumulating
        R* dup = work + BT * H;  // (B, T, H)
        R* no_dbias = nullptr;
        const auto w_up = m_layout.slots()[0].offset, w_down = m_layout.slots()[1].offset;
        op::zero(s, dact, BT * H);
        op::matmul_backward(s, dact, g + w_down, no_dbias, dout, act, p + w_down, Bn, T, H, C);
        op::zero(s, dup, BT * H);
        op::gelu_backward(s, dup, dact, up, BT * H);
        op::matmul_backward(s, dinp, g + w_up, no_dbias, dup, inp, p + w_up, Bn, T, C, H);  // dinp may be null
    }

private:
    my_mlp_config m_c;
    strata::param_layout m_layout;
};

static_assert(strata::check_layer<my_mlp<float, strata::cpu_backend>>());

// ---- step 3 ----
TEST_CASE("my_mlp keeps the layer contract") {
    const my_mlp_config c{.n_embd = 6, .hidden = 10};
    auto g = strata::testing::check_gradients<my_mlp>(c, 2, 5);
    CHECK_MESSAGE(g.ok(), g.describe());
    auto k = strata::testing::check_checkpointing<my_mlp>(c, 2, 5);
    CHECK_MESSAGE(k.ok(), k.describe());
}

// ---- step 4 ----
using my_model = strata::decoder_model<my_mlp<float, strata::cpu_backend>, strata::layernorm_layer<float, strata::cpu_backend>>;

// Sequences that count up by one, modulo the vocabulary: learnable from the current token alone.
std::vector<strata::data::batch> counting(std::size_t B, std::size_t T, std::size_t V, int step) {
    strata::data::batch b;
    for (std::size_t i = 0; i < B; ++i)
        for (std::size_t t = 0; t < T; ++t) {
            const auto token = static_cast<strata::token_id>((i * 5 + t + static_cast<std::size_t>(step)) % V);
            b.inputs.push_back(token);
            b.targets.push_back(static_cast<strata::token_id>((token + 1) % V));
        }
    return {b};
}

template <class Trainer>
std::vector<double> train(const my_model& model, int steps) {
    strata::cpu_backend backend;
    strata::train_options o{.batch = 4, .seq = 8};
    o.schedule = {.kind = strata::lr_kind::constant, .lr = 3e-2, .min_lr = 3e-2, .warmup_steps = 0, .total_steps = steps};
    Trainer t(backend, model, o);
    t.initialize(1);
    std::vector<double> losses;
    for (int i = 0; i < steps; ++i) losses.push_back(t.step(counting(o.batch, o.seq, 16, i)).loss);
    return losses;
}

TEST_CASE("my_mlp trains in a model, resident and streamed, with the same numbers") {
    const my_model model({.vocab_size = 16, .max_seq = 8, .n_layer = 2, .n_embd = 8},
                         my_mlp_config{.n_embd = 8, .hidden = 24}, strata::layernorm_config{.channels = 8});
    using namespace strata;
    const auto resident = train<trainer_t<float, cpu_backend, resident_placement, moments_in<device_tier>, my_model>>(model, 60);
    const auto streamed = train<trainer_t<float, cpu_backend, prefetch_pipeline<1>, moments_in<host_tier>, my_model>>(model, 60);
    MESSAGE("loss " << resident.front() << " -> " << resident.back() << " in 60 steps");
    CHECK(resident.back() < 0.6 * resident.front());
    CHECK(resident == streamed);  // bitwise: the fourth check of the harness, through the trainers
}

}  // namespace
