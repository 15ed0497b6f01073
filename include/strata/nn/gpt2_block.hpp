// gpt2_block<R, B>: the GPT-2 transformer block as a Layer (nn/layer.hpp): pre-LayerNorm causal
// self-attention and a GELU MLP, each with a residual connection; parameters gpt_block_params
// (Hugging Face names). The one definition of GPT-2's block:
//   gpt_model<R, B> = decoder_model<gpt2_block<R, B>, layernorm_layer<R, B>>   (model/gpt.hpp)
// Its backward runs llm.c's ops in llm.c's order and keeps the residual stream's gradient in the
// caller's dinp (overwrites_dinp, nn/layer.hpp): no zero-fill of dinp, no add into it. It is the
// base to copy for a variant of the block. It decodes
// incrementally with a KV cache (Decodes, nn/layer.hpp) for generation (model/generator.hpp), and
// recomputes from its kept attention output (RecomputesPart, nn/layer.hpp) for selective recompute.
#pragma once

#include <strata/backend/backend.hpp>      // Backend
#include <strata/core/rng.hpp>             // rng
#include <strata/nn/gpt2_config.hpp>       // gpt_config, gpt_block_params
#include <strata/nn/layer.hpp>             // activation_part, layer_flops
#include <strata/nn/ops.hpp>               // ops
#include <strata/tensor/param_layout.hpp>  // param_layout, param_spec

#include <algorithm>  // std::fill
#include <cmath>      // std::sqrt
#include <cstddef>    // std::size_t
#include <span>       // std::span
#include <string>     // std::string
#include <vector>     // std::vector

namespace strata {

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
    // Backward's gradients below the output: dfch_gelu, dfch (4C each), dqkv (3C), dln, datty (C);
    // then the attention backward's scratch (ops<B>::attention_workspace).
    static size workspace_floats(const gpt_config& c, size B, size T) {
        const size BT = B * T, C = c.n_embd;
        return 2 * BT * 4 * C + BT * 3 * C + 2 * BT * C + op::attention_workspace(B, T, C, c.n_head);
    }
    // backward writes dinp (nn/layer.hpp): dinp is the residual stream's gradient, as in llm.c, so
    // the caller does not zero it and nothing is added to it afterwards.
    static constexpr bool overwrites_dinp = true;
    static double flops(const gpt_config& c, size B, size T) {
        const double BT = double(B) * double(T), C = double(c.n_embd);
        return 2.0 * BT * 12.0 * C * C + attention_flops(c, B, T);
    }
    // Of flops(), attention's two (T x T) products, counted whole (nn/layer.hpp: flops_split).
    static double attention_flops(const gpt_config& c, size B, size T) {
        return 4.0 * double(B) * double(T) * double(T) * double(c.n_embd);
    }

    explicit gpt2_block(const gpt_config& c) : m_c(c), m_layout(param_layout::of<R>(params(c))) { c.validate(); }

    // GPT-2's initialization (draw for draw the hand-written model's that this block replaced;
    // tests/train/initialize_test.cpp): N(0, 0.02) weights, the residual projections scaled by
    // 1 / sqrt(2 n_layer), zero biases, unit layernorm gains.
    static void initialize(const gpt_config& c, const param_layout& layout, std::span<R> block, rng& gen) {
        for (const auto& entry : layout.entries()) {
            R* p = block.data() + entry.offset;
            const size n = entry.spec.shape.numel();
            const std::string& name = entry.spec.name;
            if (name.ends_with(".bias")) {
                std::fill(p, p + n, R(0));
            } else if (name.starts_with("ln_")) {
                std::fill(p, p + n, R(1));
            } else {
                double stddev = 0.02;
                if (name == "attn.c_proj.weight" || name == "mlp.c_proj.weight")
                    stddev /= std::sqrt(2.0 * static_cast<double>(c.n_layer));
                for (size i = 0; i < n; ++i) p[i] = static_cast<R>(gen.normal(0.0, stddev));
            }
        }
    }

    void forward(stream& s, const R* p, R* out, R* acts, const R* x, R*, size B, size T) const {
        const saved a = carve(acts, B, T);
        qkv_forward(s, p, a, x, B, T);
        op::attention_forward(s, a.atty, a.att_saved, a.qkv, B, T, m_c.n_embd, m_c.n_head);
        after_attention(s, p, a, x, B, T);
        op::matmul_forward(s, a.fcproj, a.fch_gelu, param(p, 10), param(p, 11), B, T, 4 * m_c.n_embd, m_c.n_embd);
        op::residual_forward(s, out, a.res2, a.fcproj, B * T * m_c.n_embd);
    }

    // Selective recompute (nn/layer.hpp, RecomputesPart): a recomputing caller keeps attention's
    // statistics and output (att_saved, atty: adjacent in acts), and recompute runs the rest of
    // forward but the MLP projection and the residual add, which backward does not read.
    static activation_part kept_part(const gpt_config& c, size B, size T) {
        const size BT = B * T, C = c.n_embd;
        return {.offset = BT * C + 2 * BT + BT * 3 * C, .floats = op::attention_saved(B, T, c.n_head) + BT * C};
    }
    static layer_flops recompute_flops(const gpt_config& c, size B, size T) {
        const double BT = double(B) * double(T), C = double(c.n_embd);
        return {.gemm = 2.0 * BT * (3.0 + 1.0 + 4.0) * C * C, .attention = 0.0};  // qkv, attention proj, c_fc
    }
    void recompute(stream& s, const R* p, R* acts, const R* x, R*, size B, size T) const {
        const saved a = carve(acts, B, T);
        qkv_forward(s, p, a, x, B, T);
        after_attention(s, p, a, x, B, T);
    }

    // Incremental decoding (nn/layer.hpp, Decodes). The cache row of position t is its key | value,
    // (max_seq, 2C); decode runs forward's ops on the n new rows, stores their keys and values and
    // attends with ops<B>::attention_decode. Learned positions are the model's (embedding), not the
    // block's: the block itself only needs pos for the cache.
    static size cache_floats(const gpt_config& c, size max_seq) { return max_seq * 2 * c.n_embd; }
    static size decode_workspace_floats(const gpt_config& c, size n) {
        const size C = c.n_embd;
        return n * (C + 2 + 3 * C + C + C + C + C + 2 + 4 * C + 4 * C + C);  // see decode
    }

    void decode(stream& s, const R* p, R* out, const R* x, R* cache, R* w, size pos, size n) const {
        const size C = m_c.n_embd, NH = m_c.n_head;
        auto P = [&](int i) { return p + m_layout.entries()[i].offset; };
        auto take = [&](size count) {
            R* q = w;
            w += count;
            return q;
        };
        R* ln1 = take(n * C);
        R* ln1_stats = take(2 * n);
        R* qkv = take(n * 3 * C);
        R* atty = take(n * C);
        R* attproj = take(n * C);
        R* res2 = take(n * C);
        R* ln2 = take(n * C);
        R* ln2_stats = take(2 * n);
        R* fch = take(n * 4 * C);
        R* fch_gelu = take(n * 4 * C);
        R* fcproj = take(n * C);
        op::layernorm_forward(s, ln1, ln1_stats, ln1_stats + n, x, P(0), P(1), 1, n, C);
        op::matmul_forward(s, qkv, ln1, P(2), P(3), 1, n, C, 3 * C);
        op::copy_rows(s, cache + pos * 2 * C, 2 * C, qkv + C, 3 * C, n, 2 * C);  // k | v of the new rows
        op::attention_decode(s, atty, qkv, 3 * C, static_cast<const R*>(cache), pos, n, NH, NH, C / NH);
        op::matmul_forward(s, attproj, atty, P(4), P(5), 1, n, C, C);
        op::residual_layernorm_forward(s, res2, ln2, ln2_stats, ln2_stats + n, x, attproj, P(6), P(7), 1, n, C);
        op::matmul_gelu_forward(s, fch, fch_gelu, ln2, P(8), P(9), 1, n, C, 4 * C);
        op::matmul_forward(s, fcproj, fch_gelu, P(10), P(11), 1, n, 4 * C, C);
        op::residual_forward(s, out, res2, fcproj, n * C);
    }

    void backward(stream& s, const R* p, R* g, R* dinp, const R* dout, const R* acts, const R* x, R* w, size B,
                  size T) const {
        const size BT = B * T, C = m_c.n_embd, NH = m_c.n_head;
        auto P = [&](int i) { return p + m_layout.entries()[i].offset; };
        auto G = [&](int i) { return g + m_layout.entries()[i].offset; };
        const saved a = carve(const_cast<R*>(acts), B, T);  // read only below
        R* dfch_gelu = w;                  // (B, T, 4C)
        R* dfch = dfch_gelu + BT * 4 * C;  // (B, T, 4C)
        R* dqkv = dfch + BT * 4 * C;       // (B, T, 3C)
        R* dln = dqkv + BT * 3 * C;        // (B, T, C): dln2, then dln1
        R* datty = dln + BT * C;           // (B, T, C)
        R* attention_scratch = datty + BT * C;  // ops<B>::attention_workspace(B, T, C, NH)
        // The residual stream's gradient (B, T, C), dres2 and then the input's: dinp itself, or when
        // the caller wants no input gradient, scratch where dfch_gelu was (dead by then).
        R* dres = dinp != nullptr ? dinp : dfch_gelu;

        op::zero(s, dfch_gelu, BT * 4 * C);
        op::matmul_backward(s, dfch_gelu, G(10), G(11), dout, a.fch_gelu, P(10), B, T, 4 * C, C);
        op::gelu_backward_bias(s, dfch, G(9), dfch_gelu, a.fch, BT, 4 * C);  // dfch written; c_fc's bias gradient
        op::zero(s, dln, BT * C);
        op::matmul_backward(s, dln, G(8), nullptr, dfch, a.ln2, P(8), B, T, C, 4 * C);
        // out = res2 + fcproj: dres2 = dout + layernorm_2's input gradient
        op::copy(s, dres, dout, BT * C);
        op::layernorm_backward(s, dres, G(6), G(7), a.ln2_stats, a.ln2_stats + BT, dln, a.res2, P(6), B, T, C);
        // res2 = x + attproj: dres2 flows to both
        op::zero(s, datty, BT * C);
        op::matmul_backward(s, datty, G(4), G(5), dres, a.atty, P(4), B, T, C, C);
        op::zero(s, dqkv, BT * 3 * C);
        op::attention_backward(s, dqkv, attention_scratch, a.att_saved, datty, a.atty, a.qkv, B, T, C, NH);
        op::zero(s, dln, BT * C);
        op::matmul_backward(s, dln, G(2), G(3), dqkv, a.ln1, P(2), B, T, C, 3 * C);
        // dx = dres2 + layernorm_1's input gradient
        op::layernorm_backward(s, dres, G(0), G(1), a.ln1_stats, a.ln1_stats + BT, dln, x, P(0), B, T, C);
    }

private:
    using op = ops<Bk>;
    struct saved {
        R *ln1, *ln1_stats, *qkv, *att_saved, *atty, *attproj, *res2, *ln2, *ln2_stats, *fch, *fch_gelu, *fcproj;
    };
    const R* param(const R* p, int i) const { return p + m_layout.entries()[i].offset; }

    // forward up to attention: ln1 = layernorm(x), qkv = ln1 W + b
    void qkv_forward(stream& s, const R* p, const saved& a, const R* x, size B, size T) const {
        const size BT = B * T, C = m_c.n_embd;
        op::layernorm_forward(s, a.ln1, a.ln1_stats, a.ln1_stats + BT, x, param(p, 0), param(p, 1), B, T, C);
        op::matmul_forward(s, a.qkv, a.ln1, param(p, 2), param(p, 3), B, T, C, 3 * C);
    }
    // forward from attention's output to the MLP's activation
    void after_attention(stream& s, const R* p, const saved& a, const R* x, size B, size T) const {
        const size BT = B * T, C = m_c.n_embd;
        op::matmul_forward(s, a.attproj, a.atty, param(p, 4), param(p, 5), B, T, C, C);
        op::residual_layernorm_forward(s, a.res2, a.ln2, a.ln2_stats, a.ln2_stats + BT, x, a.attproj, param(p, 6), param(p, 7), B,
                                       T, C);  // res2 = x + attproj; ln2 = layernorm(res2)
        op::matmul_gelu_forward(s, a.fch, a.fch_gelu, a.ln2, param(p, 8), param(p, 9), B, T, C, 4 * C);  // fch_gelu = gelu(fch)
    }
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

}  // namespace strata
