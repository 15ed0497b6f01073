// llama_block<R, Backend>: a Llama-style decoder block written as a strata Layer, from outside the
// library (public headers only):
//
//   h   = x + o_proj(attention(rope(qkv_proj(rmsnorm_1(x)))))      causal, rotary q and k
//   out = h + down_proj(silu(gate_proj(rmsnorm_2(h))) * up_proj(rmsnorm_2(h)))   SwiGLU MLP
//
// Weights are stored (in, out) as strata's matmul expects (Hugging Face's nn.Linear stores (out, in):
// transpose when loading), and q|k|v are fused into one (C, QKV) matrix, QKV = (NH + 2 NKV) HS:
// qkv is (B, T, QKV), q = channels [0, A), k = [A, A + KV), v = [A + KV, A + 2 KV), A = NH HS,
// KV = NKV HS, head h owns channels [h*HS, (h+1)*HS) of each. Optional biases on q|k|v (Qwen2),
// none elsewhere. Grouped-query attention (NKV < NH) expands k and v to NH heads (expand_kv) into
// the (B, T, 3A) layout of strata's attention and sums the gradients back per group in backward;
// with NKV == NH the expansion is skipped and the block computes what the multi-head block did,
// bit for bit. HS need not be C / NH (head_dim).

// Backends: cpu_backend (any R) with this header alone; cuda_backend (float) where
// llama_ops_cuda.hpp is included too and strata_llama_cuda_ops is linked.
//
// Glossary: B batch, T time, C channels, NH query heads, NKV key/value heads, HS head size, H hidden
// size of the MLP.
#pragma once

#include "llama_ops.hpp"  // llama_ops

#include <strata/backend/backend.hpp>      // strata::Backend
#include <strata/core/error.hpp>           // strata::error
#include <strata/nn/layer.hpp>             // strata::Layer, strata::check_layer
#include <strata/nn/ops.hpp>               // strata::ops
#include <strata/tensor/param_layout.hpp>  // strata::param_spec, strata::param_layout

#include <algorithm>  // std::max
#include <cstddef>    // std::size_t
#include <string>     // std::to_string
#include <vector>     // std::vector

namespace llama {

struct llama_block_config {
    std::size_t n_embd = 0;    // C
    std::size_t n_head = 0;    // NH query heads
    std::size_t hidden = 0;    // H, the SwiGLU width (Llama: about 8/3 C rounded)
    double norm_eps = 1e-5;    // RMSNorm epsilon (Llama 2: 1e-5; some checkpoints 1e-6)
    kernels::rope_params rope_theta = 10000.0;  // the base, and Llama 3.1's scaling if any
    std::size_t n_kv_head = 0;  // NKV key/value heads (grouped-query attention); 0: NH
    std::size_t head_dim = 0;   // HS, even; 0: C / NH
    bool qkv_bias = false;      // biases on q, k and v (Qwen2); o_proj has none

    bool operator==(const llama_block_config&) const = default;

    std::size_t kv_heads() const { return n_kv_head == 0 ? n_head : n_kv_head; }
    std::size_t head_size() const { return head_dim == 0 ? (n_head == 0 ? 0 : n_embd / n_head) : head_dim; }
    std::size_t attn_channels() const { return n_head * head_size(); }                    // A = NH HS
    std::size_t qkv_channels() const { return (n_head + 2 * kv_heads()) * head_size(); }  // (NH + 2 NKV) HS
    bool grouped() const { return kv_heads() != n_head; }

    void validate() const {
        if (n_embd == 0 || hidden == 0 || n_head == 0 || (head_dim == 0 && n_embd % n_head != 0) || head_size() == 0 ||
            head_size() % 2 != 0)
            throw strata::error("llama block: n_embd=" + std::to_string(n_embd) + ", n_head=" + std::to_string(n_head) +
                                    ", head_dim=" + std::to_string(head_dim) + ", hidden=" + std::to_string(hidden) +
                                    " is not a valid shape",
                                "n_embd must split into n_head heads of an even size (or head_dim be given, even), and hidden must be > 0");
        if (n_head % kv_heads() != 0)
            throw strata::error("llama block: n_kv_head=" + std::to_string(kv_heads()) + " does not divide n_head=" +
                                    std::to_string(n_head),
                                "each key/value head serves n_head / n_kv_head query heads");
        if (rope_theta.scaled() && !(rope_theta.high_freq_factor > rope_theta.low_freq_factor &&
                                     rope_theta.low_freq_factor > 0 && rope_theta.original_max_position_embeddings > 0))
            throw strata::error("llama block: llama3 rope scaling needs high_freq_factor > low_freq_factor > 0 and "
                                "original_max_position_embeddings > 0",
                                "use the values of the checkpoint's rope_scaling");
    }
};

template <class R, strata::Backend B>
class llama_block {
public:
    using config_type = llama_block_config;
    using value_type = R;
    using backend_type = B;
    using stream = typename B::stream;
    using size = std::size_t;

    // The parameter block, in this order (the indices below name them); the bias only with qkv_bias.
    static std::vector<strata::param_spec> params(const config_type& c) {
        const size C = c.n_embd, H = c.hidden, A = c.attn_channels(), QKV = c.qkv_channels();
        std::vector<strata::param_spec> p{{"input_layernorm.weight", {C}, false},
                                          {"self_attn.qkv_proj.weight", {C, QKV}, true}};
        if (c.qkv_bias) p.push_back({"self_attn.qkv_proj.bias", {QKV}, false});
        p.insert(p.end(), {{"self_attn.o_proj.weight", {A, C}, true},
                           {"post_attention_layernorm.weight", {C}, false},
                           {"mlp.gate_proj.weight", {C, H}, true},
                           {"mlp.up_proj.weight", {C, H}, true},
                           {"mlp.down_proj.weight", {H, C}, true}});
        return p;
    }
    static size in_features(const config_type& c) { return c.n_embd; }
    static size out_features(const config_type& c) { return c.n_embd; }

    static size activation_floats(const config_type& c, size Bn, size T) {
        const size BT = Bn * T, C = c.n_embd, H = c.hidden, A = c.attn_channels(), QKV = c.qkv_channels();
        // h1, res2, h2 (3 BTC) + atty (BTA) + rstd1, rstd2 + qkv, [expanded qkv], qkv_rope + attention's saved
        // + gate, up, act
        return 3 * BT * C + BT * A + 2 * BT + BT * QKV + (c.grouped() ? BT * 3 * A : 0) + BT * 3 * A +
               op::attention_saved(Bn, T, c.n_head) + 3 * BT * H;
    }
    static size workspace_floats(const config_type& c, size Bn, size T) {
        const size BT = Bn * T, C = c.n_embd, H = c.hidden, A = c.attn_channels(), QKV = c.qkv_channels();
        const size forward = 2 * BT * C;  // o_proj and down_proj outputs
        const size backward = 3 * BT * H + 3 * BT * C + BT * A + BT * 3 * A + (c.grouped() ? BT * 3 * A : 0) +
                              BT * QKV;  // see backward
        return std::max(forward, backward);
    }
    // Forward FLOPs: the five GEMMs, and attention's two (T x T) products counted whole, the
    // usual convention (6N + 12 L T C per token for a step); elementwise work is not counted.
    static double flops(const config_type& c, size Bn, size T) {
        const double BT = double(Bn) * double(T), C = double(c.n_embd), H = double(c.hidden);
        const double A = double(c.attn_channels()), QKV = double(c.qkv_channels());
        return 2.0 * BT * (C * QKV + A * C + 3.0 * C * H) + 4.0 * double(Bn) * double(T) * double(T) * A;
    }

    explicit llama_block(const config_type& c) : m_config(c) {
        c.validate();
        const auto layout = strata::param_layout::of<R>(params(c));
        static constexpr const char* names[param_count] = {
            "input_layernorm.weight",          "self_attn.qkv_proj.weight", "self_attn.qkv_proj.bias",
            "self_attn.o_proj.weight",         "post_attention_layernorm.weight", "mlp.gate_proj.weight",
            "mlp.up_proj.weight",              "mlp.down_proj.weight"};
        for (size i = 0; i < param_count; ++i)
            for (const auto& slot : layout.slots())
                if (slot.spec.name == names[i]) m_offset[i] = slot.offset;
    }

    void forward(stream& s, const R* p, R* out, R* acts, const R* inp, R* workspace, size Bn, size T) const {
        const auto& c = m_config;
        const size BT = Bn * T, C = c.n_embd, H = c.hidden, NH = c.n_head, A = c.attn_channels(),
                   QKV = c.qkv_channels();
        const saved a = carve(acts, Bn, T);
        R* o = workspace;        // (B, T, C)
        R* down = o + BT * C;    // (B, T, C)
        lop::rmsnorm_forward(s, a.h1, a.rstd1, inp, p + m_offset[ln1], Bn, T, C, c.norm_eps);
        op::matmul_forward(s, a.qkv, a.h1, p + m_offset[wqkv], c.qkv_bias ? p + m_offset[bqkv] : no_bias, Bn, T, C, QKV);
        if (c.grouped())
            lop::expand_kv_forward(s, a.qkv_full, a.qkv, Bn, T, NH, c.kv_heads(), c.head_size());
        lop::rope_forward(s, a.qkv_rope, a.qkv_full, Bn, T, A, NH, c.rope_theta);
        op::attention_forward(s, a.atty, a.att_saved, a.qkv_rope, Bn, T, A, NH);
        op::matmul_forward(s, o, a.atty, p + m_offset[wo], no_bias, Bn, T, A, C);
        op::residual_forward(s, a.res2, inp, o, BT * C);
        lop::rmsnorm_forward(s, a.h2, a.rstd2, a.res2, p + m_offset[ln2], Bn, T, C, c.norm_eps);
        op::matmul_forward(s, a.gate, a.h2, p + m_offset[w1], no_bias, Bn, T, C, H);
        op::matmul_forward(s, a.up, a.h2, p + m_offset[w3], no_bias, Bn, T, C, H);
        lop::swiglu_forward(s, a.act, a.gate, a.up, BT * H);
        op::matmul_forward(s, down, a.act, p + m_offset[w2], no_bias, Bn, T, H, C);
        op::residual_forward(s, out, a.res2, down, BT * C);
    }

    void backward(stream& s, const R* p, R* g, R* dinp, const R* dout, const R* acts, const R* inp, R* workspace,
                  size Bn, size T) const {
        const auto& c = m_config;
        const size BT = Bn * T, C = c.n_embd, H = c.hidden, NH = c.n_head, A = c.attn_channels(),
                   QKV = c.qkv_channels();
        const saved a = carve(const_cast<R*>(acts), Bn, T);  // read only below
        R* w = workspace;
        auto take = [&](size n) {
            R* q = w;
            w += n;
            return q;
        };
        R* dact = take(BT * H);
        R* dgate = take(BT * H);
        R* dup = take(BT * H);
        R* dh2 = take(BT * C);
        R* dres2 = take(BT * C);
        R* datty = take(BT * A);
        R* dqkv_rope = take(BT * 3 * A);
        R* dqkv = take(BT * QKV);
        R* dqkv_full = c.grouped() ? take(BT * 3 * A) : dqkv;  // the expanded heads' gradient
        R* dh1 = take(BT * C);

        // out = res2 + down_proj(act): dout reaches both
        op::zero(s, dact, BT * H);
        op::matmul_backward(s, dact, g + m_offset[w2], no_dbias, dout, a.act, p + m_offset[w2], Bn, T, H, C);
        op::zero(s, dgate, BT * H);
        op::zero(s, dup, BT * H);
        lop::swiglu_backward(s, dgate, dup, dact, a.gate, a.up, BT * H);
        op::zero(s, dh2, BT * C);
        op::matmul_backward(s, dh2, g + m_offset[w1], no_dbias, dgate, a.h2, p + m_offset[w1], Bn, T, C, H);
        op::matmul_backward(s, dh2, g + m_offset[w3], no_dbias, dup, a.h2, p + m_offset[w3], Bn, T, C, H);
        op::copy(s, dres2, dout, BT * C);  // dres2 = dout + rmsnorm_2's input gradient
        lop::rmsnorm_backward(s, dres2, g + m_offset[ln2], dh2, a.res2, p + m_offset[ln2], a.rstd2, Bn, T, C);
        // res2 = x + o_proj(atty): dres2 reaches both
        op::zero(s, datty, BT * A);
        op::matmul_backward(s, datty, g + m_offset[wo], no_dbias, dres2, a.atty, p + m_offset[wo], Bn, T, A, C);
        op::zero(s, dqkv_rope, BT * 3 * A);
        op::attention_backward(s, dqkv_rope, a.att_saved, datty, a.atty, a.qkv_rope, Bn, T, A, NH);
        op::zero(s, dqkv_full, BT * 3 * A);
        lop::rope_backward(s, dqkv_full, dqkv_rope, Bn, T, A, NH, c.rope_theta);
        if (c.grouped()) {
            op::zero(s, dqkv, BT * QKV);
            lop::expand_kv_backward(s, dqkv, dqkv_full, Bn, T, NH, c.kv_heads(), c.head_size());
        }
        op::zero(s, dh1, BT * C);
        op::matmul_backward(s, dh1, g + m_offset[wqkv], c.qkv_bias ? g + m_offset[bqkv] : no_dbias, dqkv, a.h1,
                            p + m_offset[wqkv], Bn, T, C, QKV);
        // dinp may be null: rmsnorm_1's gain still gets its gradient
        if (dinp != nullptr) op::add_inplace(s, dinp, dres2, BT * C);
        lop::rmsnorm_backward(s, dinp, g + m_offset[ln1], dh1, inp, p + m_offset[ln1], a.rstd1, Bn, T, C);
    }

private:
    using op = strata::ops<B>;
    using lop = llama_ops<B>;
    // No biases. Typed null pointers: ops<B>'s templates deduce R from every pointer argument.
    static constexpr const R* no_bias = nullptr;
    static constexpr R* no_dbias = nullptr;
    enum param_index : size { ln1, wqkv, bqkv, wo, ln2, w1, w3, w2, param_count };

    // Views of the saved activations, carved in one fixed order from `acts`.
    struct saved {
        R *h1, *rstd1, *qkv, *qkv_full, *qkv_rope, *att_saved, *atty, *res2, *h2, *rstd2, *gate, *up, *act;
    };
    saved carve(R* p, size Bn, size T) const {
        const size BT = Bn * T, C = m_config.n_embd, H = m_config.hidden, A = m_config.attn_channels();
        auto take = [&](size n) {
            R* q = p;
            p += n;
            return q;
        };
        saved a{};
        a.h1 = take(BT * C);
        a.rstd1 = take(BT);
        a.qkv = take(BT * m_config.qkv_channels());
        a.qkv_full = m_config.grouped() ? take(BT * 3 * A) : a.qkv;  // q | k, v expanded to NH heads
        a.qkv_rope = take(BT * 3 * A);
        a.att_saved = take(op::attention_saved(Bn, T, m_config.n_head));
        a.atty = take(BT * A);
        a.res2 = take(BT * C);
        a.h2 = take(BT * C);
        a.rstd2 = take(BT);
        a.gate = take(BT * H);
        a.up = take(BT * H);
        a.act = take(BT * H);
        return a;
    }

    config_type m_config;
    size m_offset[param_count] = {};
};

}  // namespace llama
