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
//
// The math lives in llama_block_body, with the five projections as its customization point:
// llama_block makes each a plain trainable matmul; llama_lora_block.hpp puts LoRA adapters on
// some of them over a frozen base, with the same forward and backward around them. Both decode
// incrementally with a KV cache (strata's Decodes, nn/layer.hpp) for strata::generator: rope at
// the absolute positions, a cache of the NKV key/value heads. llama_block also recomputes from its
// kept attention output (strata's RecomputesPart) for selective recompute.

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

#include <algorithm>    // std::max
#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <string>       // std::to_string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace llama {

// The block's five projections (y = x W, + b for qkv with qkv_bias), in the order forward runs
// them, and the stems of their parameter names ("<stem>.weight", "self_attn.qkv_proj.bias").
enum class llama_projection : std::size_t { qkv, o, gate, up, down };
inline constexpr std::array<std::string_view, 5> llama_projection_names{
    "self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
inline constexpr std::array<llama_projection, 5> llama_projections{
    llama_projection::qkv, llama_projection::o, llama_projection::gate, llama_projection::up, llama_projection::down};

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

    // (in, out) of a projection's weight.
    std::array<std::size_t, 2> projection_shape(llama_projection k) const {
        switch (k) {
            case llama_projection::qkv: return {n_embd, qkv_channels()};
            case llama_projection::o: return {attn_channels(), n_embd};
            case llama_projection::gate:
            case llama_projection::up: return {n_embd, hidden};
            case llama_projection::down: return {hidden, n_embd};
        }
        return {0, 0};
    }

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

// The block's forward and backward, given what each projection does:
//   project(k, y, x)              y = projection k of x                       (B, T, out) <- (B, T, in)
//   project_backward(k, dx, dy, x) dx += its input gradient (dx null: not wanted), and its
//                                 parameters' gradients, whatever it trains
//   wanted_below(k)               is any gradient below projection k (input side) still needed?
//                                 backward stops where nothing is: with every parameter trainable, never
// Offsets of the base tensors come from the caller's layout by name, so a layout with more tensors
// (adapters) works too. Activations and workspace are the first activation_floats /
// workspace_floats of what the caller passes.
template <class R, strata::Backend B>
class llama_block_body {
public:
    using stream = typename B::stream;
    using size = std::size_t;

    static size activation_floats(const llama_block_config& c, size Bn, size T) {
        const size BT = Bn * T, C = c.n_embd, H = c.hidden, A = c.attn_channels(), QKV = c.qkv_channels();
        // h1, res2, h2 (3 BTC) + atty (BTA) + rstd1, rstd2 + qkv, [expanded qkv], qkv_rope + attention's saved
        // + gate, up, act
        return 3 * BT * C + BT * A + 2 * BT + BT * QKV + (c.grouped() ? BT * 3 * A : 0) + BT * 3 * A +
               op::attention_saved(Bn, T, c.n_head) + 3 * BT * H;
    }
    static size forward_workspace_floats(const llama_block_config& c, size Bn, size T) {
        return 2 * Bn * T * c.n_embd;  // o_proj and down_proj outputs
    }
    static size backward_workspace_floats(const llama_block_config& c, size Bn, size T) {
        const size BT = Bn * T, C = c.n_embd, H = c.hidden, A = c.attn_channels(), QKV = c.qkv_channels();
        return 3 * BT * H + 3 * BT * C + BT * A + BT * 3 * A + (c.grouped() ? BT * 3 * A : 0) + BT * QKV +
               op::attention_workspace(Bn, T, A, c.n_head);  // see backward
    }

    llama_block_body(const llama_block_config& c, const strata::param_layout& layout) : m_config(c) {
        c.validate();
        static constexpr const char* names[param_count] = {
            "input_layernorm.weight",          "self_attn.qkv_proj.weight", "self_attn.qkv_proj.bias",
            "self_attn.o_proj.weight",         "post_attention_layernorm.weight", "mlp.gate_proj.weight",
            "mlp.up_proj.weight",              "mlp.down_proj.weight"};
        for (size i = 0; i < param_count; ++i)
            for (const auto& entry : layout.entries())
                if (entry.spec.name == names[i]) m_offset[i] = entry.offset;
    }

    const llama_block_config& config() const { return m_config; }
    // Offsets in the parameter block: a projection's weight, the two RMSNorm gains (1 and 2).
    size weight(llama_projection k) const { return m_offset[index_of(k)]; }
    size gain(int norm) const { return m_offset[norm == 1 ? ln1 : ln2]; }
    // A projection's bias in a parameter (or gradient) block, or null: only qkv has one, with qkv_bias.
    template <class P>
    P* bias(P* block, llama_projection k) const {
        return k == llama_projection::qkv && m_config.qkv_bias ? block + m_offset[bqkv] : nullptr;
    }

    template <class Project>
    void forward(stream& s, const R* p, R* out, R* acts, const R* inp, R* workspace, size Bn, size T,
                 Project&& project) const {
        const auto& c = m_config;
        const size BT = Bn * T, C = c.n_embd;
        const saved a = carve(acts, Bn, T);
        R* down = workspace + BT * C;  // (B, T, C), after o_proj's output
        qkv_forward(s, p, a, inp, Bn, T, project);
        op::attention_forward(s, a.atty, a.att_saved, a.qkv_rope, Bn, T, c.attn_channels(), c.n_head);
        after_attention(s, p, a, inp, workspace, Bn, T, project);
        project(llama_projection::down, down, a.act);
        op::residual_forward(s, out, a.res2, down, BT * C);
    }

    // Selective recompute (strata's RecomputesPart, nn/layer.hpp): a recomputing caller keeps
    // attention's statistics and output (att_saved, atty: adjacent in acts); recompute runs the
    // rest of forward but down_proj and the residual add, whose outputs backward does not read.
    // `skipped(down, act)` is told of the projection left out and its input (an adapter on it
    // redoes what its backward reads: llama_lora_block).
    static strata::activation_part kept_part(const llama_block_config& c, size Bn, size T) {
        const size BT = Bn * T, A = c.attn_channels();
        return {.offset = BT * c.n_embd + BT + BT * c.qkv_channels() + (c.grouped() ? BT * 3 * A : 0) + BT * 3 * A,
                .floats = op::attention_saved(Bn, T, c.n_head) + BT * A};
    }
    static strata::layer_flops recompute_flops(const llama_block_config& c, size Bn, size T) {
        const double BT = double(Bn) * double(T), C = double(c.n_embd), H = double(c.hidden);
        const double A = double(c.attn_channels()), QKV = double(c.qkv_channels());
        return {.gemm = 2.0 * BT * (C * QKV + A * C + 2.0 * C * H), .attention = 0.0};  // qkv, o, gate, up
    }
    template <class Project, class Skipped>
    void recompute(stream& s, const R* p, R* acts, const R* inp, R* workspace, size Bn, size T, Project&& project,
                   Skipped&& skipped) const {
        const saved a = carve(acts, Bn, T);
        qkv_forward(s, p, a, inp, Bn, T, project);
        after_attention(s, p, a, inp, workspace, Bn, T, project);
        skipped(llama_projection::down, static_cast<const R*>(a.act));
    }

    // Incremental decoding (strata's Decodes, nn/layer.hpp): the cache row of position t is its
    // rotated key | value, 2 KV channels (NKV heads: grouped-query attention keeps its small cache).
    static size cache_floats(const llama_block_config& c, size max_seq) {
        return max_seq * 2 * c.kv_heads() * c.head_size();
    }
    static size decode_workspace_floats(const llama_block_config& c, size n) {
        // h1, o, res2, h2, down (5 nC) + rstd1, rstd2 + qkv + atty + gate, up, act
        return n * (5 * c.n_embd + 2 + c.qkv_channels() + c.attn_channels() + 3 * c.hidden);
    }

    // forward's math on n new rows at positions pos .. pos + n - 1 (project as in forward, for n rows
    // of one sequence): q and k rotated at their absolute positions in the compact q|k|v (no
    // expansion of the key/value heads), the new keys and values stored in the cache, attention
    // against the cache by ops<B>::attention_decode.
    template <class Project>
    void decode(stream& s, const R* p, R* out, const R* inp, R* cache, R* workspace, size pos, size n,
                Project&& project) const {
        const auto& c = m_config;
        const size C = c.n_embd, H = c.hidden, NH = c.n_head, NKV = c.kv_heads(), HS = c.head_size(),
                   A = c.attn_channels(), KV = NKV * HS, QKV = c.qkv_channels();
        R* w = workspace;
        auto take = [&](size count) {
            R* q = w;
            w += count;
            return q;
        };
        R* h1 = take(n * C);
        R* rstd1 = take(n);
        R* qkv = take(n * QKV);
        R* atty = take(n * A);
        R* o = take(n * C);
        R* res2 = take(n * C);
        R* h2 = take(n * C);
        R* rstd2 = take(n);
        R* gate = take(n * H);
        R* up = take(n * H);
        R* act = take(n * H);
        R* down = take(n * C);
        lop::rmsnorm_forward(s, h1, rstd1, inp, p + m_offset[ln1], 1, n, C, c.norm_eps);
        project(llama_projection::qkv, qkv, h1);
        lop::rope_rotate(s, qkv, n, QKV, NH + NKV, HS, pos, c.rope_theta);        // q and k heads
        op::copy_rows(s, cache + pos * 2 * KV, 2 * KV, qkv + A, QKV, n, 2 * KV);  // k | v of the new rows
        op::attention_decode(s, atty, qkv, QKV, static_cast<const R*>(cache), pos, n, NH, NKV, HS);
        project(llama_projection::o, o, atty);
        op::residual_forward(s, res2, inp, o, n * C);
        lop::rmsnorm_forward(s, h2, rstd2, res2, p + m_offset[ln2], 1, n, C, c.norm_eps);
        project(llama_projection::gate, gate, h2);
        project(llama_projection::up, up, h2);
        lop::swiglu_forward(s, act, gate, up, n * H);
        project(llama_projection::down, down, act);
        op::residual_forward(s, out, res2, down, n * C);
    }

    // dgain1, dgain2: where the RMSNorm gains' gradients accumulate (C each; scratch when frozen).
    template <class ProjectBackward, class WantedBelow>
    void backward(stream& s, const R* p, R* dgain1, R* dgain2, R* dinp, const R* dout, const R* acts, const R* inp,
                  R* workspace, size Bn, size T, ProjectBackward&& project_backward, WantedBelow&& wanted_below) const {
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
        R* attention_scratch = take(op::attention_workspace(Bn, T, A, NH));

        // out = res2 + down_proj(act): dout reaches both
        bool below = wanted_below(llama_projection::down);
        if (below) op::zero(s, dact, BT * H);
        project_backward(llama_projection::down, below ? dact : nullptr, dout, a.act);
        if (!below) return;
        op::zero(s, dgate, BT * H);
        op::zero(s, dup, BT * H);
        lop::swiglu_backward(s, dgate, dup, dact, a.gate, a.up, BT * H);
        below = wanted_below(llama_projection::gate);  // gate and up read the same input
        if (below) op::zero(s, dh2, BT * C);
        project_backward(llama_projection::gate, below ? dh2 : nullptr, dgate, a.h2);
        project_backward(llama_projection::up, below ? dh2 : nullptr, dup, a.h2);
        if (!below) return;
        op::copy(s, dres2, dout, BT * C);  // dres2 = dout + rmsnorm_2's input gradient
        lop::rmsnorm_backward(s, dres2, dgain2, dh2, a.res2, p + m_offset[ln2], a.rstd2, Bn, T, C);
        // res2 = x + o_proj(atty): dres2 reaches both
        below = wanted_below(llama_projection::o);
        if (below) op::zero(s, datty, BT * A);
        project_backward(llama_projection::o, below ? datty : nullptr, dres2, a.atty);
        if (!below) return;
        op::zero(s, dqkv_rope, BT * 3 * A);
        op::attention_backward(s, dqkv_rope, attention_scratch, a.att_saved, datty, a.atty, a.qkv_rope, Bn, T, A, NH);
        op::zero(s, dqkv_full, BT * 3 * A);
        lop::rope_backward(s, dqkv_full, dqkv_rope, Bn, T, A, NH, c.rope_theta);
        if (c.grouped()) {
            op::zero(s, dqkv, BT * QKV);
            lop::expand_kv_backward(s, dqkv, dqkv_full, Bn, T, NH, c.kv_heads(), c.head_size());
        }
        below = wanted_below(llama_projection::qkv);
        if (below) op::zero(s, dh1, BT * C);
        project_backward(llama_projection::qkv, below ? dh1 : nullptr, dqkv, a.h1);
        if (!below) return;
        // dinp may be null: rmsnorm_1's gain still gets its gradient
        if (dinp != nullptr) op::add_inplace(s, dinp, dres2, BT * C);
        lop::rmsnorm_backward(s, dinp, dgain1, dh1, inp, p + m_offset[ln1], a.rstd1, Bn, T, C);
    }

private:
    using op = strata::ops<B>;
    using lop = llama_ops<B>;
    enum param_index : size { ln1, wqkv, bqkv, wo, ln2, w1, w3, w2, param_count };
    static constexpr param_index index_of(llama_projection k) {
        constexpr param_index of[] = {wqkv, wo, w1, w3, w2};
        return of[static_cast<size>(k)];
    }

    // Views of the saved activations, carved in one fixed order from `acts`.
    struct saved {
        R *h1, *rstd1, *qkv, *qkv_full, *qkv_rope, *att_saved, *atty, *res2, *h2, *rstd2, *gate, *up, *act;
    };
    // forward up to attention: h1 = rmsnorm(inp), q|k|v projected, expanded to every head, rotated
    template <class Project>
    void qkv_forward(stream& s, const R* p, const saved& a, const R* inp, size Bn, size T, Project&& project) const {
        const auto& c = m_config;
        lop::rmsnorm_forward(s, a.h1, a.rstd1, inp, p + m_offset[ln1], Bn, T, c.n_embd, c.norm_eps);
        project(llama_projection::qkv, a.qkv, a.h1);
        if (c.grouped())
            lop::expand_kv_forward(s, a.qkv_full, a.qkv, Bn, T, c.n_head, c.kv_heads(), c.head_size());
        lop::rope_forward(s, a.qkv_rope, a.qkv_full, Bn, T, c.attn_channels(), c.n_head, c.rope_theta);
    }
    // forward from attention's output to the MLP's activation (o_proj's output in workspace)
    template <class Project>
    void after_attention(stream& s, const R* p, const saved& a, const R* inp, R* workspace, size Bn, size T,
                         Project&& project) const {
        const auto& c = m_config;
        const size BT = Bn * T, C = c.n_embd;
        R* o = workspace;  // (B, T, C)
        project(llama_projection::o, o, a.atty);
        op::residual_forward(s, a.res2, inp, o, BT * C);
        lop::rmsnorm_forward(s, a.h2, a.rstd2, a.res2, p + m_offset[ln2], Bn, T, C, c.norm_eps);
        project(llama_projection::gate, a.gate, a.h2);
        project(llama_projection::up, a.up, a.h2);
        lop::swiglu_forward(s, a.act, a.gate, a.up, BT * c.hidden);
    }
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

    llama_block_config m_config;
    size m_offset[param_count] = {};
};

template <class R, strata::Backend B>
class llama_block {
public:
    using config_type = llama_block_config;
    using value_type = R;
    using backend_type = B;
    using stream = typename B::stream;
    using size = std::size_t;

    // The parameter block, in this order; the bias only with qkv_bias.
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

    static size activation_floats(const config_type& c, size Bn, size T) { return body::activation_floats(c, Bn, T); }
    static size workspace_floats(const config_type& c, size Bn, size T) {
        return std::max(body::forward_workspace_floats(c, Bn, T), body::backward_workspace_floats(c, Bn, T));
    }
    // Forward FLOPs: the five GEMMs, and attention's two (T x T) products counted whole, the
    // usual convention (6N + 12 L T C per token for a step); elementwise work is not counted.
    static double flops(const config_type& c, size Bn, size T) {
        const double BT = double(Bn) * double(T), C = double(c.n_embd), H = double(c.hidden);
        const double A = double(c.attn_channels()), QKV = double(c.qkv_channels());
        return 2.0 * BT * (C * QKV + A * C + 3.0 * C * H) + attention_flops(c, Bn, T);
    }
    // Of flops(), attention's two (T x T) products (strata::flops_split: the step's cost model).
    static double attention_flops(const config_type& c, size Bn, size T) {
        return 4.0 * double(Bn) * double(T) * double(T) * double(c.attn_channels());
    }

    explicit llama_block(const config_type& c) : m_body(c, strata::param_layout::of<R>(params(c))) {}

    void forward(stream& s, const R* p, R* out, R* acts, const R* inp, R* workspace, size Bn, size T) const {
        m_body.forward(s, p, out, acts, inp, workspace, Bn, T, projector(s, p, Bn, T));
    }

    // Selective recompute (strata's RecomputesPart): see llama_block_body::kept_part.
    static strata::activation_part kept_part(const config_type& c, size Bn, size T) { return body::kept_part(c, Bn, T); }
    static strata::layer_flops recompute_flops(const config_type& c, size Bn, size T) {
        return body::recompute_flops(c, Bn, T);
    }
    void recompute(stream& s, const R* p, R* acts, const R* inp, R* workspace, size Bn, size T) const {
        m_body.recompute(s, p, acts, inp, workspace, Bn, T, projector(s, p, Bn, T), [](llama_projection, const R*) {});
    }

    // Incremental decoding (strata's Decodes): see llama_block_body::decode.
    static size cache_floats(const config_type& c, size max_seq) { return body::cache_floats(c, max_seq); }
    static size decode_workspace_floats(const config_type& c, size n) { return body::decode_workspace_floats(c, n); }
    void decode(stream& s, const R* p, R* out, const R* inp, R* cache, R* workspace, size pos, size n) const {
        m_body.decode(s, p, out, inp, cache, workspace, pos, n, projector(s, p, 1, n));
    }

    void backward(stream& s, const R* p, R* g, R* dinp, const R* dout, const R* acts, const R* inp, R* workspace,
                  size Bn, size T) const {
        m_body.backward(
            s, p, g + m_body.gain(1), g + m_body.gain(2), dinp, dout, acts, inp, workspace, Bn, T,
            [&](llama_projection k, R* dx, const R* dy, const R* x) {
                const auto [in, out_features] = m_body.config().projection_shape(k);
                op::matmul_backward(s, dx, g + m_body.weight(k), m_body.bias(g, k), dy, x, p + m_body.weight(k), Bn, T,
                                    in, out_features);
            },
            [](llama_projection) { return true; });  // every gain and weight wants its gradient
    }

private:
    using op = strata::ops<B>;
    using body = llama_block_body<R, B>;

    // What each projection does in forward, recompute and decode: y = x W (+ b), over Bn x T rows.
    auto projector(stream& s, const R* p, size Bn, size T) const {
        return [this, &s, p, Bn, T](llama_projection k, R* y, const R* x) {
            const auto [in, out_features] = m_body.config().projection_shape(k);
            op::matmul_forward(s, y, x, p + m_body.weight(k), m_body.bias(p, k), Bn, T, in, out_features);
        };
    }

    body m_body;
};

}  // namespace llama
