// gpt2_lora_block<R, Backend>: the GPT-2 block of strata's model (nn/gpt2_block.hpp: same math, same
// parameter names as gpt_block_params) with LoRA adapters on a chosen set of its projections,
// written as a strata Layer from outside the library:
//
//   h   = x + c_proj(attention(c_attn(ln_1(x))))          attn.*
//   out = h + c_proj(gelu(c_fc(ln_2(h))))                 mlp.*
//   each targeted projection: y = x W + b + (alpha / r) (x A) B           (lora_linear.hpp)
//
// Every base tensor (the twelve of gpt_block_params) is frozen (trainable = false): no gradient,
// no AdamW moments. The adapters are the trainable tensors, named "<projection>.lora_A" (in, r)
// and "<projection>.lora_B" (r, out), e.g. "attn.c_attn.lora_A" (C, r), "attn.c_attn.lora_B"
// (r, 3C). The layout puts them first, so the gradient block holds only them.
//
// Backward computes only what some adapter or the caller needs: with dinp = null it stops below
// the lowest targeted projection (only the MLP targeted: attention's backward never runs).
// forward writes everything backward reads from the parameters and the input alone, so it can be
// recomputed (activation checkpointing) with the same bits; like the plain block it also recomputes
// from a kept part (attention's output: strata's RecomputesPart, selective recompute). With no
// targets the block is a frozen plain GPT-2 block.
//
// Glossary: B batch, T time, C channels (n_embd), NH heads, r the adapters' rank.
#pragma once

#include "lora_linear.hpp"  // lora_forward, lora_xa, lora_backward, init_lora_adapters

#include <strata/backend/backend.hpp>      // strata::Backend
#include <strata/core/error.hpp>           // strata::error
#include <strata/core/rng.hpp>             // strata::rng
#include <strata/model/gpt.hpp>            // strata::gpt_config, strata::gpt_block_params
#include <strata/nn/gpt2_block.hpp>        // strata::gpt2_block (its initialization of the base, its kept part)
#include <strata/nn/layer.hpp>             // strata::Layer, strata::activation_part, strata::layer_flops
#include <strata/nn/ops.hpp>               // strata::ops
#include <strata/tensor/param_layout.hpp>  // strata::param_spec, strata::param_layout

#include <algorithm>    // std::find
#include <array>        // std::array
#include <cmath>        // std::isfinite
#include <cstddef>      // std::size_t
#include <span>         // std::span
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace lora {

// The projections of a GPT-2 block an adapter can target, in the order the block runs them.
inline constexpr std::array<std::string_view, 4> gpt2_projections{"attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                                  "mlp.c_proj"};

struct projection_shape {
    std::size_t in = 0, out = 0;
};

// (in, out) of a projection's weight for n_embd = C; throws for a name that is not one of them.
inline projection_shape gpt2_projection_shape(std::string_view projection, std::size_t C) {
    if (projection == "attn.c_attn") return {C, 3 * C};
    if (projection == "attn.c_proj") return {C, C};
    if (projection == "mlp.c_fc") return {C, 4 * C};
    if (projection == "mlp.c_proj") return {4 * C, C};
    throw strata::error("gpt2 LoRA: '" + std::string(projection) + "' is not a projection of a GPT-2 block",
                        "target any of attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj");
}

struct gpt2_lora_config {
    std::size_t n_embd = 0;  // C, as in gpt_config
    std::size_t n_head = 0;  // NH, as in gpt_config
    std::size_t n_layer = 1; // the model's depth, as in gpt_config: only initialize() uses it (GPT-2
                             // scales the residual projections' initial weights by 1 / sqrt(2 n_layer))
    std::size_t rank = 8;    // r
    double alpha = 16.0;     // adapters' outputs are scaled by alpha / rank (PEFT's lora_alpha)
    // The projections that get an adapter (names of gpt2_projections, in any order); PEFT's
    // default for GPT-2 is attn.c_attn alone. Empty: a frozen plain block.
    std::vector<std::string> targets{"attn.c_attn"};

    double scaling() const { return alpha / static_cast<double>(rank); }

    bool targets_projection(std::string_view projection) const {
        return std::find(targets.begin(), targets.end(), projection) != targets.end();
    }

    // The targets in the block's order (gpt2_projections), whatever order they were given in.
    std::vector<std::string> ordered_targets() const {
        std::vector<std::string> ordered;
        for (std::string_view p : gpt2_projections)
            if (targets_projection(p)) ordered.emplace_back(p);
        return ordered;
    }

    // The plain block's configuration: strata::gpt2_block<R, B>(base()) is this block without
    // adapters, and gpt_block_params(base()) its parameter table.
    strata::gpt_config base() const {
        return {.vocab_size = 1, .max_seq = 1, .n_layer = n_layer, .n_head = n_head, .n_embd = n_embd};
    }

    void validate() const {
        base().validate();
        if (rank == 0 || !std::isfinite(alpha))
            throw strata::error("gpt2 LoRA: rank " + std::to_string(rank) + ", alpha " + std::to_string(alpha) +
                                    " is not a valid adapter",
                                "rank must be positive and alpha finite (usually alpha = rank or 2 * rank)");
        for (std::size_t i = 0; i < targets.size(); ++i) {
            (void)gpt2_projection_shape(targets[i], n_embd);  // a known name
            if (std::find(targets.begin(), targets.begin() + static_cast<std::ptrdiff_t>(i), targets[i]) !=
                targets.begin() + static_cast<std::ptrdiff_t>(i))
                throw strata::error("gpt2 LoRA: '" + targets[i] + "' is targeted twice", "name each projection once");
        }
    }
};

template <class R, strata::Backend Bk>
class gpt2_lora_block {
public:
    using config_type = gpt2_lora_config;
    using value_type = R;
    using backend_type = Bk;
    using stream = typename Bk::stream;
    using size = std::size_t;

    // gpt_block_params, all frozen, then the adapters of the targeted projections in block order.
    static std::vector<strata::param_spec> params(const config_type& c) {
        std::vector<strata::param_spec> p = strata::gpt_block_params(c.base());
        for (auto& spec : p) spec.trainable = false;
        for (const std::string& proj : c.ordered_targets()) {
            const projection_shape shape = gpt2_projection_shape(proj, c.n_embd);
            p.push_back({proj + ".lora_A", {shape.in, c.rank}, true, true});
            p.push_back({proj + ".lora_B", {c.rank, shape.out}, true, true});
        }
        return p;
    }
    static size in_features(const config_type& c) { return c.n_embd; }
    static size out_features(const config_type& c) { return c.n_embd; }
    static size activation_floats(const config_type& c, size B, size T) {
        const size BT = B * T, C = c.n_embd;
        // the plain block's (see carve) + each adapter's xa
        return 6 * BT * C + 4 * BT + BT * 3 * C + 2 * BT * 4 * C + op::attention_saved(B, T, c.n_head) +
               c.targets.size() * BT * c.rank;
    }
    static size workspace_floats(const config_type& c, size B, size T) {
        // backward (see backward); forward needs only one projection's low-rank product, BT * 4C at most
        const size BT = B * T, C = c.n_embd;
        return 2 * BT * 4 * C + BT * 3 * C + 3 * BT * C + BT * c.rank + 2 * C +
               op::attention_workspace(B, T, C, c.n_head);
    }
    static double flops(const config_type& c, size B, size T) {
        const double BT = double(B) * double(T), C = double(c.n_embd);
        return 2.0 * BT * 12.0 * C * C + attention_flops(c, B, T) + adapter_flops(c, B, T, false);
    }
    static double attention_flops(const config_type& c, size B, size T) {
        return 4.0 * double(B) * double(T) * double(T) * double(c.n_embd);
    }

    // For a model built from these blocks (strata::decoder_model calls it when present): the base
    // as strata::gpt2_block initializes it (the same draws for the same generator: the base tensors
    // come first in params), then the standard LoRA initialization (B = 0), so the fresh model
    // computes what the plain one does. In fine-tuning the base comes from a checkpoint instead.
    static void initialize(const config_type& c, const strata::param_layout& layout, std::span<R> block,
                           strata::rng& gen) {
        strata::gpt2_block<R, Bk>::initialize(c.base(), layout, block, gen);
        init_lora_adapters(layout, block, gen);
    }

    explicit gpt2_lora_block(const config_type& c) : m_c(c), m_layout(strata::param_layout::of<R>(params(c))) {
        c.validate();
        m_ln1_w = m_layout.find("ln_1.weight").offset;
        m_ln1_b = m_layout.find("ln_1.bias").offset;
        m_ln2_w = m_layout.find("ln_2.weight").offset;
        m_ln2_b = m_layout.find("ln_2.bias").offset;
        size adapter = 0;
        for (size k = 0; k < gpt2_projections.size(); ++k) {
            const std::string name(gpt2_projections[k]);
            projection& p = m_proj[k];
            const projection_shape shape = gpt2_projection_shape(name, c.n_embd);
            p.in = shape.in;
            p.out = shape.out;
            p.W = m_layout.find(name + ".weight").offset;
            p.b = m_layout.find(name + ".bias").offset;
            p.lora = c.targets_projection(name);
            if (!p.lora) continue;
            p.A = m_layout.find(name + ".lora_A").offset;
            p.B = m_layout.find(name + ".lora_B").offset;
            p.xa_index = adapter++;
        }
    }

    void forward(stream& s, const R* p, R* out, R* acts, const R* x, R* work, size B, size T) const {
        const saved a = carve(acts, B, T);
        qkv_forward(s, p, a, x, work, B, T);
        op::attention_forward(s, a.atty, a.att_saved, a.qkv, B, T, m_c.n_embd, m_c.n_head);
        after_attention(s, p, a, x, work, B, T);
        project(s, 3, a.fcproj, a.fch_gelu, p, a, work, B, T);
        op::residual_forward(s, out, a.res2, a.fcproj, B * T * m_c.n_embd);
    }

    // Selective recompute (strata's RecomputesPart, nn/layer.hpp), as strata::gpt2_block: a
    // recomputing caller keeps attention's statistics and output (att_saved, atty: adjacent in
    // acts, where the plain block has them); recompute runs the rest of forward but attention and
    // the MLP projection, whose output backward does not read. Backward does read that projection's
    // adapter product x A where it is targeted: recompute redoes that thin GEMM alone.
    static strata::activation_part kept_part(const config_type& c, size B, size T) {
        return strata::gpt2_block<R, Bk>::kept_part(c.base(), B, T);
    }
    static strata::layer_flops recompute_flops(const config_type& c, size B, size T) {
        const strata::layer_flops plain = strata::gpt2_block<R, Bk>::recompute_flops(c.base(), B, T);
        return {.gemm = plain.gemm + adapter_flops(c, B, T, true), .attention = plain.attention};
    }
    void recompute(stream& s, const R* p, R* acts, const R* x, R* work, size B, size T) const {
        const saved a = carve(acts, B, T);
        qkv_forward(s, p, a, x, work, B, T);
        after_attention(s, p, a, x, work, B, T);
        if (const projection& pr = m_proj[3]; pr.lora)
            lora_xa<Bk>(s, xa_of(a, pr, B, T), a.fch_gelu, p + pr.A, B, T, pr.in, m_c.rank, m_c.scaling());
    }

    void backward(stream& s, const R* p, R* g, R* dinp, const R* dout, const R* acts, const R* x, R* w, size B,
                  size T) const {
        const size BT = B * T, C = m_c.n_embd, NH = m_c.n_head;
        const saved a = carve(const_cast<R*>(acts), B, T);  // read only below
        R* dfch_gelu = w;                     // (B, T, 4C)
        R* dfch = dfch_gelu + BT * 4 * C;     // (B, T, 4C)
        R* dqkv = dfch + BT * 4 * C;          // (B, T, 3C)
        R* dln = dqkv + BT * 3 * C;           // (B, T, C): dln2, then dln1
        R* datty = dln + BT * C;              // (B, T, C)
        R* dres2 = datty + BT * C;            // (B, T, C)
        R* dxa = dres2 + BT * C;              // (B, T, r): the adapters' scratch
        R* dln_params = dxa + BT * m_c.rank;  // (2C): the frozen layernorms' parameter gradients, discarded
                                              // (ops<B>::layernorm_backward always writes them)
        R* attention_scratch = dln_params + 2 * C;  // ops<B>::attention_workspace(B, T, C, NH)
        // Is the gradient below projection k wanted: by the caller, or by an adapter further down?
        auto wanted_below = [&](size k) {
            if (dinp != nullptr) return true;
            for (size j = 0; j < k; ++j)
                if (m_proj[j].lora) return true;
            return false;
        };

        if (wanted_below(3)) op::zero(s, dfch_gelu, BT * 4 * C);
        project_backward(s, 3, wanted_below(3) ? dfch_gelu : nullptr, g, dout, a.fch_gelu, p, a, dxa, B, T);
        if (!wanted_below(3)) return;
        op::zero(s, dfch, BT * 4 * C);
        op::gelu_backward(s, dfch, dfch_gelu, a.fch, BT * 4 * C);
        if (wanted_below(2)) op::zero(s, dln, BT * C);
        project_backward(s, 2, wanted_below(2) ? dln : nullptr, g, dfch, a.ln2, p, a, dxa, B, T);
        if (!wanted_below(2)) return;
        op::copy(s, dres2, dout, BT * C);
        op::layernorm_backward(s, dres2, dln_params, dln_params + C, a.ln2_stats, a.ln2_stats + BT, dln, a.res2,
                               p + m_ln2_w, B, T, C);
        if (wanted_below(1)) op::zero(s, datty, BT * C);
        project_backward(s, 1, wanted_below(1) ? datty : nullptr, g, dres2, a.atty, p, a, dxa, B, T);
        if (!wanted_below(1)) return;
        op::zero(s, dqkv, BT * 3 * C);
        op::attention_backward(s, dqkv, attention_scratch, a.att_saved, datty, a.atty, a.qkv, B, T, C, NH);
        if (wanted_below(0)) op::zero(s, dln, BT * C);
        project_backward(s, 0, wanted_below(0) ? dln : nullptr, g, dqkv, a.ln1, p, a, dxa, B, T);
        if (dinp == nullptr) return;
        op::add_inplace(s, dinp, dres2, BT * C);
        op::layernorm_backward(s, dinp, dln_params, dln_params + C, a.ln1_stats, a.ln1_stats + BT, dln, x,
                               p + m_ln1_w, B, T, C);
    }

private:
    using op = strata::ops<Bk>;

    struct projection {
        size in = 0, out = 0;
        size W = 0, b = 0;  // offsets of the frozen base
        bool lora = false;
        size A = 0, B = 0;  // offsets of the adapter
        size xa_index = 0;  // which of the adapters' saved xa
    };

    struct saved {
        R *ln1, *ln1_stats, *qkv, *att_saved, *atty, *attproj, *res2, *ln2, *ln2_stats, *fch, *fch_gelu, *fcproj;
        R* xa;  // (targets, B, T, r)
    };

    // acts: the plain GPT-2 block's saved tensors (as gpt2_block keeps them), then each adapter's xa.
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
        a.xa = take(m_c.targets.size() * BT * m_c.rank);
        return a;
    }

    // forward up to attention: ln_1, then q|k|v
    void qkv_forward(stream& s, const R* p, const saved& a, const R* x, R* work, size B, size T) const {
        const size BT = B * T, C = m_c.n_embd;
        op::layernorm_forward(s, a.ln1, a.ln1_stats, a.ln1_stats + BT, x, p + m_ln1_w, p + m_ln1_b, B, T, C);
        project(s, 0, a.qkv, a.ln1, p, a, work, B, T);
    }
    // forward from attention's output to the MLP's activation (fch_gelu)
    void after_attention(stream& s, const R* p, const saved& a, const R* x, R* work, size B, size T) const {
        const size BT = B * T, C = m_c.n_embd;
        project(s, 1, a.attproj, a.atty, p, a, work, B, T);
        op::residual_forward(s, a.res2, x, a.attproj, BT * C);
        op::layernorm_forward(s, a.ln2, a.ln2_stats, a.ln2_stats + BT, a.res2, p + m_ln2_w, p + m_ln2_b, B, T, C);
        project(s, 2, a.fch, a.ln2, p, a, work, B, T);
        op::gelu_forward(s, a.fch_gelu, a.fch, BT * 4 * C);
    }

    // The adapters' thin GEMMs, x A (in r) and xa B (r out) each; in a recompute from the kept part
    // the MLP projection's output is not recomputed, so its adapter runs x A alone.
    static double adapter_flops(const config_type& c, size B, size T, bool recompute) {
        const double BT = double(B) * double(T), r = double(c.rank);
        double adapters = 0.0;
        for (const std::string& proj : c.targets) {
            const projection_shape shape = gpt2_projection_shape(proj, c.n_embd);
            const bool output_skipped = recompute && proj == gpt2_projections[3];
            adapters += 2.0 * BT * r * double(output_skipped ? shape.in : shape.in + shape.out);
        }
        return adapters;
    }

    // A targeted projection's saved x A (B, T, r).
    R* xa_of(const saved& a, const projection& pr, size B, size T) const { return a.xa + pr.xa_index * B * T * m_c.rank; }

    // y = x W + b (+ the adapter's term when targeted); `low` is scratch.
    void project(stream& s, size k, R* y, const R* x, const R* p, const saved& a, R* low, size B, size T) const {
        const projection& pr = m_proj[k];
        if (pr.lora)
            lora_forward<Bk>(s, y, xa_of(a, pr, B, T), low, x, p + pr.W, p + pr.b, p + pr.A,
                             p + pr.B, B, T, pr.in, pr.out, m_c.rank, m_c.scaling());
        else
            op::matmul_forward(s, y, x, p + pr.W, p + pr.b, B, T, pr.in, pr.out);
    }

    // dx += the input gradient (dx may be null: not wanted); the adapter's gradients when targeted.
    void project_backward(stream& s, size k, R* dx, R* g, const R* dy, const R* x, const R* p, const saved& a,
                          R* dxa, size B, size T) const {
        const projection& pr = m_proj[k];
        if (pr.lora)
            lora_backward<Bk>(s, dx, g + pr.A, g + pr.B, dxa, dy, x, xa_of(a, pr, B, T), p + pr.W,
                              p + pr.A, p + pr.B, B, T, pr.in, pr.out, m_c.rank, m_c.scaling());
        else if (dx != nullptr)  // frozen: the input gradient only
            op::matmul_backward(s, dx, static_cast<R*>(nullptr), static_cast<R*>(nullptr), dy, x, p + pr.W, B, T,
                                pr.in, pr.out);
    }

    gpt2_lora_config m_c;
    strata::param_layout m_layout;
    size m_ln1_w = 0, m_ln1_b = 0, m_ln2_w = 0, m_ln2_b = 0;
    std::array<projection, 4> m_proj{};
};

}  // namespace lora
