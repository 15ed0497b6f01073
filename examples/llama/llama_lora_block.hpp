// llama_lora_block<R, Backend>: the Llama block of llama_block.hpp (same math, same parameter
// names) with LoRA adapters on a chosen set of its five projections, written as a strata Layer:
//
//   each targeted projection: y = x W + b + (alpha / r) (x A) B           (../lora/lora_linear.hpp)
//
// Every base tensor of llama_block::params is frozen (trainable = false): no gradient, no AdamW
// moments. The adapters are the trainable tensors, "<projection>.lora_A" (in, r) and
// "<projection>.lora_B" (r, out), e.g. "mlp.down_proj.lora_A" (H, r); the layout puts them first,
// so the gradient block holds only them. The forward and backward are llama_block_body's, the
// plain block's, with the adapted projections plugged in; backward stops below the lowest
// targeted projection when the caller wants no input gradient. Like the plain block it recomputes
// from a kept part (attention's output: strata's RecomputesPart, selective recompute).
//
// Targets are the stems of llama_projection_names. PEFT's usual target_modules q_proj, k_proj,
// v_proj, o_proj, gate_proj, up_proj, down_proj map one to one, except that the block fuses q|k|v:
// "self_attn.qkv_proj" is one adapter on the fused (C, (NH + 2 NKV) HS) projection, A (C, r)
// shared by q, k and v and B (r, QKV) their output columns side by side (PEFT's three adapters
// have an A each: the same B columns, a rank-3r product instead of rank r).
//
// Glossary: B batch, T time, C channels, H hidden size of the MLP, r the adapters' rank.
#pragma once

#include "../lora/lora_linear.hpp"  // lora::lora_forward, lora_xa, lora_backward, init_lora_adapters
#include "llama_block.hpp"          // llama_block, llama_block_body, llama_projection

#include <strata/backend/backend.hpp>      // strata::Backend
#include <strata/core/error.hpp>           // strata::error
#include <strata/core/rng.hpp>             // strata::rng
#include <strata/model/decoder.hpp>        // strata::detail::default_initialize (the plain block's initialization)
#include <strata/nn/ops.hpp>               // strata::ops
#include <strata/tensor/param_layout.hpp>  // strata::param_spec, strata::param_layout

#include <algorithm>    // std::find, std::max
#include <array>        // std::array
#include <cmath>        // std::isfinite
#include <cstddef>      // std::size_t
#include <span>         // std::span
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace llama {

struct llama_lora_config {
    llama_block_config base;  // the plain block's shape
    std::size_t rank = 8;     // r
    double alpha = 16.0;      // adapters' outputs are scaled by alpha / rank (PEFT's lora_alpha)
    // Stems of llama_projection_names, in any order; empty: a frozen plain block.
    std::vector<std::string> targets{llama_projection_names.begin(), llama_projection_names.end()};

    double scaling() const { return alpha / static_cast<double>(rank); }
    bool targets_projection(std::string_view projection) const {
        return std::find(targets.begin(), targets.end(), projection) != targets.end();
    }
    // The targets in the block's order, whatever order they were given in.
    std::vector<std::string> ordered_targets() const {
        std::vector<std::string> ordered;
        for (std::string_view p : llama_projection_names)
            if (targets_projection(p)) ordered.emplace_back(p);
        return ordered;
    }

    void validate() const {
        base.validate();
        if (rank == 0 || !std::isfinite(alpha))
            throw strata::error("llama LoRA: rank " + std::to_string(rank) + ", alpha " + std::to_string(alpha) +
                                    " is not a valid adapter",
                                "rank must be positive and alpha finite (usually alpha = rank or 2 * rank)");
        for (std::size_t i = 0; i < targets.size(); ++i) {
            if (std::find(llama_projection_names.begin(), llama_projection_names.end(), targets[i]) ==
                llama_projection_names.end())
                throw strata::error("llama LoRA: '" + targets[i] + "' is not a projection of the Llama block",
                                    "target any of self_attn.qkv_proj, self_attn.o_proj, mlp.gate_proj, "
                                    "mlp.up_proj, mlp.down_proj");
            if (std::count(targets.begin(), targets.end(), targets[i]) > 1)
                throw strata::error("llama LoRA: '" + targets[i] + "' is targeted twice", "name each projection once");
        }
    }
};

// A comma list of targets as PEFT names them ("q_proj" ... "down_proj", or with "self_attn." /
// "mlp.") into the block's stems. q_proj, k_proj and v_proj are one fused projection here:
// naming any of them alone is refused (its adapter would touch the other two).
inline std::vector<std::string> parse_lora_targets(std::string_view list) {
    std::vector<std::string> out;
    for (std::size_t start = 0; start <= list.size();) {
        const std::size_t end = std::min(list.find(',', start), list.size());
        const std::string_view item = list.substr(start, end - start);
        start = end + 1;
        if (item.empty()) continue;
        std::string stem;
        for (std::string_view p : llama_projection_names)
            if (p == item || (p.ends_with(item) && p[p.size() - item.size() - 1] == '.')) stem = p;
        const std::string_view last = item.substr(item.rfind('.') == std::string_view::npos ? 0 : item.rfind('.') + 1);
        if (last == "q_proj" || last == "k_proj" || last == "v_proj")
            throw strata::error("LoRA target '" + std::string(item) + "': the block fuses q_proj, k_proj and v_proj",
                                "target qkv_proj: one adapter on the fused q|k|v projection");
        if (stem.empty())
            throw strata::error("LoRA target '" + std::string(item) + "' is not a projection of the Llama block",
                                "target any of qkv_proj, o_proj, gate_proj, up_proj, down_proj");
        out.push_back(stem);
    }
    return out;
}

template <class R, strata::Backend Bk>
class llama_lora_block {
public:
    using config_type = llama_lora_config;
    using value_type = R;
    using backend_type = Bk;
    using stream = typename Bk::stream;
    using size = std::size_t;

    // llama_block's tensors, all frozen, then the adapters of the targeted projections in block order.
    static std::vector<strata::param_spec> params(const config_type& c) {
        std::vector<strata::param_spec> p = llama_block<R, Bk>::params(c.base);
        for (auto& spec : p) spec.trainable = false;
        for (llama_projection k : llama_projections) {
            const std::string stem(llama_projection_names[index(k)]);
            if (!c.targets_projection(stem)) continue;
            const auto [in, out] = c.base.projection_shape(k);
            p.push_back({stem + ".lora_A", {in, c.rank}, true, true});
            p.push_back({stem + ".lora_B", {c.rank, out}, true, true});
        }
        return p;
    }
    static size in_features(const config_type& c) { return c.base.n_embd; }
    static size out_features(const config_type& c) { return c.base.n_embd; }
    // The plain block's, then each adapter's xa (B, T, r).
    static size activation_floats(const config_type& c, size Bn, size T) {
        return body::activation_floats(c.base, Bn, T) + c.targets.size() * Bn * T * c.rank;
    }
    // The plain block's, then forward: one projection's low-rank product (B, T, out); backward: the
    // adapters' dxa (B, T, r) and the frozen RMSNorm gains' gradients (2C, written and discarded).
    static size workspace_floats(const config_type& c, size Bn, size T) {
        const size widest = std::max({c.base.qkv_channels(), c.base.n_embd, c.base.hidden});
        return plain_workspace(c, Bn, T) + std::max(Bn * T * widest, Bn * T * c.rank + 2 * c.base.n_embd);
    }
    static double flops(const config_type& c, size Bn, size T) {
        return llama_block<R, Bk>::flops(c.base, Bn, T) + adapter_flops(c, Bn, T, false);
    }
    static double attention_flops(const config_type& c, size Bn, size T) {
        return llama_block<R, Bk>::attention_flops(c.base, Bn, T);
    }

    // For a model built from these blocks: the base as the plain block's model initializes it (the
    // same draws: the base tensors come first in params), then the standard LoRA initialization
    // (B = 0), so the fresh model computes what the plain one does.
    static void initialize(const config_type& c, const strata::param_layout& layout, std::span<R> block,
                           strata::rng& gen) {
        (void)c;
        strata::detail::default_initialize(layout, block, gen);
        lora::init_lora_adapters(layout, block, gen);
    }

    explicit llama_lora_block(const config_type& c)
        : m_c((c.validate(), c)), m_body(c.base, strata::param_layout::of<R>(params(c))) {
        const auto layout = strata::param_layout::of<R>(params(c));
        size saved = 0;
        for (llama_projection k : llama_projections) {
            const std::string stem(llama_projection_names[index(k)]);
            adapter& a = m_adapter[index(k)];
            if (!c.targets_projection(stem)) continue;
            a = {true, layout.find(stem + ".lora_A").offset, layout.find(stem + ".lora_B").offset, saved++};
        }
    }

    void forward(stream& s, const R* p, R* out, R* acts, const R* x, R* work, size Bn, size T) const {
        m_body.forward(s, p, out, acts, x, work, Bn, T, projector(s, p, acts, work, Bn, T));
    }

    // Selective recompute (strata's RecomputesPart): the plain block's kept part (attention's
    // output) and recompute (no attention, no down_proj), with the adapters' x A of every
    // projection backward reads: down_proj's is redone alone where it is targeted (lora_xa, one
    // thin GEMM: the same bits as forward's).
    static strata::activation_part kept_part(const config_type& c, size Bn, size T) {
        return body::kept_part(c.base, Bn, T);
    }
    static strata::layer_flops recompute_flops(const config_type& c, size Bn, size T) {
        const strata::layer_flops plain = body::recompute_flops(c.base, Bn, T);
        return {.gemm = plain.gemm + adapter_flops(c, Bn, T, true), .attention = plain.attention};
    }
    void recompute(stream& s, const R* p, R* acts, const R* x, R* work, size Bn, size T) const {
        m_body.recompute(s, p, acts, x, work, Bn, T, projector(s, p, acts, work, Bn, T),
                         [&](llama_projection k, const R* in) {
                             const adapter& a = m_adapter[index(k)];
                             if (!a.on) return;
                             lora::lora_xa<Bk>(s, xa(acts, a, Bn, T), in, p + a.A, Bn, T,
                                               m_c.base.projection_shape(k)[0], m_c.rank, m_c.scaling());
                         });
    }

    // Incremental decoding (strata's Decodes): the plain block's cache and decode, an adapted
    // projection computed as in forward with scratch after the body's: xa (n, r) and the low-rank
    // product (n, widest projection).
    static size cache_floats(const config_type& c, size max_seq) { return body::cache_floats(c.base, max_seq); }
    static size decode_workspace_floats(const config_type& c, size n) {
        const size widest = std::max({c.base.qkv_channels(), c.base.n_embd, c.base.hidden});
        return body::decode_workspace_floats(c.base, n) + n * (c.rank + widest);
    }
    void decode(stream& s, const R* p, R* out, const R* x, R* cache, R* work, size pos, size n) const {
        R* xa = work + body::decode_workspace_floats(m_c.base, n);  // (n, r)
        R* low = xa + n * m_c.rank;                                 // (n, widest)
        m_body.decode(s, p, out, x, cache, work, pos, n, [&](llama_projection k, R* y, const R* in) {
            const auto [n_in, n_out] = m_c.base.projection_shape(k);
            const adapter& a = m_adapter[index(k)];
            if (a.on)
                lora::lora_forward<Bk>(s, y, xa, low, in, p + m_body.weight(k), m_body.bias(p, k), p + a.A, p + a.B, 1,
                                       n, n_in, n_out, m_c.rank, m_c.scaling());
            else
                op::matmul_forward(s, y, in, p + m_body.weight(k), m_body.bias(p, k), 1, n, n_in, n_out);
        });
    }

    void backward(stream& s, const R* p, R* g, R* dinp, const R* dout, const R* acts, const R* x, R* work, size Bn,
                  size T) const {
        R* dxa = work + plain_workspace(m_c, Bn, T);    // (B, T, r)
        R* dgains = dxa + Bn * T * m_c.rank;             // (2C): frozen, discarded
        R* saved = const_cast<R*>(acts);                 // read only below
        m_body.backward(
            s, p, dgains, dgains + m_c.base.n_embd, dinp, dout, acts, x, work, Bn, T,
            [&](llama_projection k, R* dx, const R* dy, const R* in) {
                const auto [n_in, n_out] = m_c.base.projection_shape(k);
                const adapter& a = m_adapter[index(k)];
                if (a.on)
                    lora::lora_backward<Bk>(s, dx, g + a.A, g + a.B, dxa, dy, in, xa(saved, a, Bn, T),
                                            p + m_body.weight(k), p + a.A, p + a.B, Bn, T, n_in, n_out, m_c.rank,
                                            m_c.scaling());
                else if (dx != nullptr)  // frozen: the input gradient only
                    op::matmul_backward(s, dx, no_grad, no_grad, dy, in, p + m_body.weight(k), Bn, T, n_in, n_out);
            },
            [&](llama_projection k) {  // the caller's input gradient, or an adapter further down
                if (dinp != nullptr) return true;
                for (size j = 0; j < index(k); ++j)
                    if (m_adapter[j].on) return true;
                return false;
            });
    }

private:
    using op = strata::ops<Bk>;
    using body = llama_block_body<R, Bk>;
    static constexpr R* no_grad = nullptr;  // typed: ops<B>'s templates deduce R from every pointer

    struct adapter {
        bool on = false;
        size A = 0, B = 0;  // offsets in the parameter block
        size saved = 0;     // which of the adapters' xa
    };

    static constexpr size index(llama_projection k) { return static_cast<size>(k); }
    // The adapters' thin GEMMs, x A (in r) and xa B (r out) each; in a recompute from the kept part
    // down_proj's output is not recomputed, so its adapter runs x A alone.
    static double adapter_flops(const config_type& c, size Bn, size T, bool recompute) {
        double adapters = 0.0;
        for (llama_projection k : llama_projections)
            if (c.targets_projection(llama_projection_names[index(k)])) {
                const auto [in, out] = c.base.projection_shape(k);
                const bool output_skipped = recompute && k == llama_projection::down;
                adapters += 2.0 * double(Bn) * double(T) * double(c.rank) * double(output_skipped ? in : in + out);
            }
        return adapters;
    }
    static size plain_workspace(const config_type& c, size Bn, size T) {
        return llama_block<R, Bk>::workspace_floats(c.base, Bn, T);
    }
    R* xa(R* acts, const adapter& a, size Bn, size T) const {
        return acts + body::activation_floats(m_c.base, Bn, T) + a.saved * Bn * T * m_c.rank;
    }
    // What each projection does in forward and recompute: y = x W (+ b), plus the adapter's term
    // (its x A saved in acts) where targeted; the low-rank product in work after the body's.
    auto projector(stream& s, const R* p, R* acts, R* work, size Bn, size T) const {
        R* low = work + plain_workspace(m_c, Bn, T);
        return [this, &s, p, acts, low, Bn, T](llama_projection k, R* y, const R* in) {
            const auto [n_in, n_out] = m_c.base.projection_shape(k);
            const adapter& a = m_adapter[index(k)];
            if (a.on)
                lora::lora_forward<Bk>(s, y, xa(acts, a, Bn, T), low, in, p + m_body.weight(k), m_body.bias(p, k),
                                       p + a.A, p + a.B, Bn, T, n_in, n_out, m_c.rank, m_c.scaling());
            else
                op::matmul_forward(s, y, in, p + m_body.weight(k), m_body.bias(p, k), Bn, T, n_in, n_out);
        };
    }

    llama_lora_config m_c;
    body m_body;
    std::array<adapter, llama_projection_names.size()> m_adapter{};
};

}  // namespace llama
