// The layer of docs/layers.md's tutorial, exactly as written there (steps 1 and 2), tested as in
// step 3: the tutorial compiles and passes.
#include <strata/nn/cpu_ops.hpp>             // ops<cpu_backend>
#include <strata/nn/layer.hpp>               // Layer, check_layer
#include <strata/testing/layer_harness.hpp>  // check_gradients, check_checkpointing

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

}  // namespace
