// The built-in GPT-2 block (model/gpt.hpp) restated as a Layer: the contract fits the model strata
// already trains. Same parameter table (gpt_block_params), same ops, same order of operations as
// gpt_model's block_forward/block_backward, with the buffers the contract hands in; then the
// harness on it, on every backend this build has.
#include "support/backends.hpp"  // STRATA_TESTS_WITH_CUDA

#include <strata/model/gpt.hpp>              // gpt_config, gpt_block_params
#include <strata/nn/cpu_ops.hpp>             // ops<cpu_backend>
#include <strata/nn/layer.hpp>               // check_layer, sizes_of
#include <strata/testing/layer_harness.hpp>  // check_gradients, check_checkpointing, check_backend_parity

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE

#include <algorithm>  // std::max
#include <cstddef>    // std::size_t
#include <vector>     // std::vector

using namespace strata;

namespace {

// Glossary: B batch, T time, C channels, NH heads.
template <class R, Backend Bk>
class gpt2_block {
public:
    using config_type = gpt_config;
    using value_type = R;
    using backend_type = Bk;
    using stream = typename Bk::stream;
    using size = std::size_t;

    static std::vector<param_spec> params(const gpt_config& c) { return gpt_block_params(c); }
    static size in_features(const gpt_config& c) { return c.n_embd; }
    static size out_features(const gpt_config& c) { return c.n_embd; }
    static size activation_floats(const gpt_config& c, size B, size T) {
        const size BT = B * T, C = c.n_embd;
        return 6 * BT * C + 4 * BT + BT * 3 * C + 2 * BT * 4 * C + op::attention_saved(B, T, c.n_head);
    }
    static size workspace_floats(const gpt_config& c, size B, size T) {
        const size BT = B * T, C = c.n_embd;
        return 2 * BT * 4 * C + BT * 3 * C + 4 * BT * C;
    }
    static double flops(const gpt_config& c, size B, size T) {
        const double BT = double(B) * double(T), C = double(c.n_embd);
        return 2.0 * BT * 12.0 * C * C + 4.0 * double(B) * double(T) * double(T) * C;
    }

    explicit gpt2_block(const gpt_config& c) : m_c(c), m_layout(param_layout::of<R>(params(c))) { c.validate(); }

    void forward(stream& s, const R* p, R* out, R* acts, const R* x, R*, size B, size T) const {
        const size BT = B * T, C = m_c.n_embd, NH = m_c.n_head;
        auto P = [&](int i) { return p + m_layout.slots()[i].offset; };
        const saved a = carve(acts, B, T);
        op::layernorm_forward(s, a.ln1, a.ln1_stats, a.ln1_stats + BT, x, P(0), P(1), B, T, C);
        op::matmul_forward(s, a.qkv, a.ln1, P(2), P(3), B, T, C, 3 * C);
        op::attention_forward(s, a.atty, a.att_saved, a.qkv, B, T, C, NH);
        op::matmul_forward(s, a.attproj, a.atty, P(4), P(5), B, T, C, C);
        op::residual_forward(s, a.res2, x, a.attproj, BT * C);
        op::layernorm_forward(s, a.ln2, a.ln2_stats, a.ln2_stats + BT, a.res2, P(6), P(7), B, T, C);
        op::matmul_forward(s, a.fch, a.ln2, P(8), P(9), B, T, C, 4 * C);
        op::gelu_forward(s, a.fch_gelu, a.fch, BT * 4 * C);
        op::matmul_forward(s, a.fcproj, a.fch_gelu, P(10), P(11), B, T, 4 * C, C);
        op::residual_forward(s, out, a.res2, a.fcproj, BT * C);
    }

    void backward(stream& s, const R* p, R* g, R* dinp, const R* dout, const R* acts, const R* x, R* w, size B,
                  size T) const {
        const size BT = B * T, C = m_c.n_embd, NH = m_c.n_head;
        auto P = [&](int i) { return p + m_layout.slots()[i].offset; };
        auto G = [&](int i) { return g + m_layout.slots()[i].offset; };
        const saved a = carve(const_cast<R*>(acts), B, T);  // read only below
        R* dfch_gelu = w;
        R* dfch = dfch_gelu + BT * 4 * C;
        R* dqkv = dfch + BT * 4 * C;
        R* dln = dqkv + BT * 3 * C;  // dln2, then dln1
        R* datty = dln + BT * C;
        R* dres2 = datty + BT * C;
        R* dx = dres2 + BT * C;  // the input gradient when the caller does not want it

        op::zero(s, dfch_gelu, BT * 4 * C);
        op::matmul_backward(s, dfch_gelu, G(10), G(11), dout, a.fch_gelu, P(10), B, T, 4 * C, C);
        op::zero(s, dfch, BT * 4 * C);
        op::gelu_backward(s, dfch, dfch_gelu, a.fch, BT * 4 * C);
        op::zero(s, dln, BT * C);
        op::matmul_backward(s, dln, G(8), G(9), dfch, a.ln2, P(8), B, T, C, 4 * C);
        op::copy(s, dres2, dout, BT * C);
        op::layernorm_backward(s, dres2, G(6), G(7), a.ln2_stats, a.ln2_stats + BT, dln, a.res2, P(6), B, T, C);
        op::zero(s, datty, BT * C);
        op::matmul_backward(s, datty, G(4), G(5), dres2, a.atty, P(4), B, T, C, C);
        op::zero(s, dqkv, BT * 3 * C);
        op::attention_backward(s, dqkv, a.att_saved, datty, a.atty, a.qkv, B, T, C, NH);
        op::zero(s, dln, BT * C);
        op::matmul_backward(s, dln, G(2), G(3), dqkv, a.ln1, P(2), B, T, C, 3 * C);
        R* into = dinp;
        if (into == nullptr) {
            into = dx;
            op::zero(s, dx, BT * C);
        } else {
            op::add_inplace(s, dinp, dres2, BT * C);
        }
        op::layernorm_backward(s, into, G(0), G(1), a.ln1_stats, a.ln1_stats + BT, dln, x, P(0), B, T, C);
    }

private:
    using op = ops<Bk>;
    struct saved {
        R *ln1, *ln1_stats, *qkv, *att_saved, *atty, *attproj, *res2, *ln2, *ln2_stats, *fch, *fch_gelu, *fcproj;
    };
    saved carve(R* p, size B, size T) const {
        const size BT = B * T, C = m_c.n_embd;
        auto take = [&](size n) {
            R* q = p;
            p += n;
            return q;
        };
        saved a{};
        a.ln1 = take(BT * C);
        a.ln1_stats = take(2 * BT);
        a.qkv = take(BT * 3 * C);
        a.att_saved = take(op::attention_saved(B, T, m_c.n_head));
        a.atty = take(BT * C);
        a.attproj = take(BT * C);
        a.res2 = take(BT * C);
        a.ln2 = take(BT * C);
        a.ln2_stats = take(2 * BT);
        a.fch = take(BT * 4 * C);
        a.fch_gelu = take(BT * 4 * C);
        a.fcproj = take(BT * C);
        return a;
    }

    gpt_config m_c;
    param_layout m_layout;
};

static_assert(check_layer<gpt2_block<float, cpu_backend>>());

const gpt_config tiny{.vocab_size = 11, .max_seq = 8, .n_layer = 1, .n_head = 2, .n_embd = 6};

TEST_CASE("GPT-2 block as a Layer: every gradient matches FP64 central differences") {
    const auto r = testing::check_gradients<gpt2_block>(tiny, 2, 5);
    CHECK_MESSAGE(r.ok(), r.describe());
    CHECK(r.tensors.size() == 13);  // 12 parameter tensors and the input
}

TEST_CASE("GPT-2 block as a Layer: checkpointed == plain bitwise, dinp = null leaves the parameter gradients") {
    const auto f = testing::check_checkpointing<gpt2_block>(tiny, 2, 5);
    CHECK_MESSAGE(f.ok(), f.describe());
}

TEST_CASE("GPT-2 block as a Layer: the same parameter block as gpt_model's block groups") {
    gpt_model<float, cpu_backend> model(tiny);
    const auto layout = param_layout::of<float>(gpt2_block<float, cpu_backend>::params(tiny));
    CHECK(layout.numel() == model.groups()[model.block_group(0)].numel());
    CHECK(sizes_of<gpt2_block<float, cpu_backend>>(tiny, 2, 5).params == layout.numel());
}

#ifdef STRATA_TESTS_WITH_CUDA
TEST_CASE("GPT-2 block as a Layer: CUDA against the CPU, and checkpointing on CUDA") {
    const auto p = testing::check_backend_parity<gpt2_block, cuda_backend>(tiny, 2, 5);
    if (p.skipped) MESSAGE(p.describe());
    CHECK_MESSAGE(p.ok(), p.describe());
    const auto c = testing::check_checkpointing<gpt2_block, float, cuda_backend>(tiny, 2, 5);
    if (c.skipped) MESSAGE(c.describe());
    CHECK_MESSAGE(c.ok(), c.describe());
}
#endif

}  // namespace
