// gpt_model<R, B>: a GPT-2-architecture model written only with strata primitives.
//
// The model owns no weights. Its parameters are layer groups, each one contiguous page-aligned
// block (param_layout): group 0 = embeddings (wte, wpe), groups 1..L = transformer blocks,
// group L+1 = the final layernorm. The LM head is tied to wte (group 0). A `binder` hands the
// model device addresses of a group's weights and gradients just before it computes, and is told
// when the group is done: the resident trainer binds fixed tensors, the streaming pipeline binds
// device slots that it fills ahead of compute.
//
// Activations (model/activations.hpp): forward keeps each block's input, and the forward
// activations of the first `kept` blocks; the backward of any other block first recomputes its
// forward from the saved input (activation checkpointing: one extra forward), then runs. The LM
// head and cross-entropy run over chunks of positions (model/lm_head.hpp): the logits are never
// whole, and training takes each chunk's gradient right after its loss.
#pragma once

#include <strata/backend/backend.hpp>       // Backend
#include <strata/core/error.hpp>            // strata::error
#include <strata/core/rng.hpp>              // rng
#include <strata/model/activations.hpp>     // kept_activations
#include <strata/model/lm_head.hpp>         // lm_head_loss_forward, lm_head_loss_backward
#include <strata/nn/gpt2_config.hpp>        // gpt_config, gpt_*_params
#include <strata/nn/ops.hpp>                // ops
#include <strata/stream/group_binder.hpp>   // group_use, GroupBinder
#include <strata/tensor/param_layout.hpp>   // param_layout, param_spec
#include <strata/tensor/tiered_tensor.hpp>  // tiered_tensor

#include <algorithm>  // std::min
#include <cmath>    // std::sqrt
#include <cstddef>  // std::size_t
#include <cstdint>  // std::int32_t
#include <span>     // std::span
#include <string>   // std::string
#include <vector>   // std::vector

namespace strata {


template <class R, Backend B>
class gpt_model {
public:
    using stream = typename B::stream;
    using op = ops<B>;
    using value_type = R;

    explicit gpt_model(const gpt_config& config) : m_config(config) {
        config.validate();
        m_groups.push_back(param_layout::of<R>(gpt_embedding_params(config)));
        for (std::size_t l = 0; l < config.n_layer; ++l) m_groups.push_back(param_layout::of<R>(gpt_block_params(config)));
        m_groups.push_back(param_layout::of<R>(gpt_final_params(config)));
    }

    const gpt_config& config() const { return m_config; }
    const std::vector<param_layout>& groups() const { return m_groups; }
    std::size_t group_count() const { return m_groups.size(); }
    std::size_t block_group(std::size_t layer) const { return 1 + layer; }
    std::size_t final_group() const { return m_config.n_layer + 1; }
    std::size_t block_count() const { return m_config.n_layer; }
    std::size_t vocab_size() const { return m_config.vocab_size; }
    std::size_t max_seq() const { return m_config.max_seq; }

    // Hugging Face GPT2LMHeadModel name of a parameter ("transformer.h.3.attn.c_attn.weight").
    std::string hf_name(std::size_t group, const param_slot& slot) const {
        if (group == 0 || group == final_group()) return "transformer." + slot.spec.name;
        return "transformer.h." + std::to_string(group - 1) + "." + slot.spec.name;
    }

    // GPT-2's initialization into a host copy of one group: N(0, 0.02) weights, the residual
    // projections scaled by 1/sqrt(2 L), zero biases, unit layernorm gains. The trainers give
    // each group its own generator (initialize_groups: rng::stream(seed, group)).
    void initialize(std::size_t group, std::span<R> host_block, rng& gen) const {
        std::fill(host_block.begin(), host_block.end(), R(0));
        for (const auto& slot : m_groups[group].slots()) {
            R* p = host_block.data() + slot.offset;
            const std::size_t n = slot.spec.shape.numel();
            const std::string& name = slot.spec.name;
            if (name.ends_with(".bias")) continue;
            if (name.starts_with("ln_")) {
                std::fill(p, p + n, R(1));
                continue;
            }
            double stddev = 0.02;
            if (name == "attn.c_proj.weight" || name == "mlp.c_proj.weight")
                stddev /= std::sqrt(2.0 * static_cast<double>(m_config.n_layer));
            for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<R>(gen.normal(0.0, stddev));
        }
    }

    // ---- activations ----

    // The activations' device buffers of R for a B x T micro-batch, in elements, in the order
    // activations allocates them (each one allocation); besides them, two int32 buffers of B x T
    // (tokens, targets). The planner counts exactly these (footprint_of). The logits and their
    // gradient are one chunk of rows each (model/lm_head.hpp), not B x T.
    std::vector<std::size_t> activation_buffers(std::size_t batch, std::size_t seq, kept_activations kept) const {
        const auto& c = m_config;
        const std::size_t BT = batch * seq, C = c.n_embd, V = c.vocab_size, L = c.n_layer;
        const std::size_t chunk = lm_head_buffer_rows(BT, c.head_chunk_rows);
        return {kept.input_slots(L) * BT * C,                                        // 0 block inputs (the checkpoints)
                kept.buffers(L) * block_floats(c, batch, seq),           // 1 blocks' saved activations
                BT * C,                                                  // 2 lnf
                2 * BT,                                                  // 3 lnf_stats
                chunk * V,                                               // 4 logits of one chunk
                BT,                                                      // 5 losses
                BT,                                                      // 6 lse
                chunk * V,                                               // 7 dlogits of one chunk
                BT * C,                                                  // 8 dlnf
                2 * BT * C,                                              // 9 dx, two ping-pong buffers
                block_grad_floats(c, batch, seq)};                       // 10 dblock
    }

    // Device-tier buffers for micro-batches up to B x T. Blocks that keep their activations
    // (kept_activations: the first ones) each have their own; the others share one buffer, which
    // their backward refills by recomputing the forward (model/activations.hpp).
    class activations {
    public:
        activations(B& backend, const gpt_model& model, std::size_t batch, std::size_t seq, kept_activations kept)
            : m_batch(batch),
              m_seq(seq),
              m_kept(kept.of(model.config().n_layer)),
              m_blocks(model.config().n_layer),
              m_offload_inputs(kept.offload_inputs),
              m_offloaded(backend, model.config().n_layer, batch * seq * model.config().n_embd, kept),
              m_vocab(model.config().vocab_size),
              m_head_chunk_rows(model.config().head_chunk_rows) {
            const std::size_t BT = batch * seq;
            m_block_floats = block_floats(model.config(), batch, seq);
            m_tokens.emplace_back(backend, shape{BT}, "act.tokens");
            m_tokens.emplace_back(backend, shape{BT}, "act.targets");
            static constexpr const char* names[] = {"block_inputs", "block", "lnf",  "lnf_stats", "logits", "losses",
                                                    "lse",          "dlogits", "dlnf", "dx",        "dblock"};
            const auto sizes = model.activation_buffers(batch, seq, kept);
            for (std::size_t i = 0; i < sizes.size(); ++i)
                m_buffers.emplace_back(backend, shape{sizes[i]}, std::string("act.") + names[i]);
        }

        std::size_t batch() const { return m_batch; }
        std::size_t seq() const { return m_seq; }
        kept_activations kept() const { return {m_kept, m_offload_inputs}; }
        bool keeps(std::size_t layer) const { return layer < m_kept; }
        std::size_t head_chunk_rows() const { return m_head_chunk_rows; }

        // The logits (rows, V) of rows [first_row, first_row + rows) after a forward (or
        // forward_backward) over batch x seq: only its last chunk of rows is still held
        // (model/lm_head.hpp), other rows are a strata::error. The last position always is.
        const R* logits(std::size_t batch, std::size_t seq, std::size_t first_row, std::size_t rows = 1) {
            return logits_chunk() + held_logits_row(batch, seq, m_head_chunk_rows, first_row, rows) * m_vocab;
        }

        std::int32_t* tokens() { return m_tokens[0].device_data().get(); }
        std::int32_t* targets() { return m_tokens[1].device_data().get(); }
        tiered_tensor<std::int32_t, device_tier, B>& tokens_tensor() { return m_tokens[0]; }
        tiered_tensor<std::int32_t, device_tier, B>& targets_tensor() { return m_tokens[1]; }
        tiered_tensor<R, device_tier, B>& losses_tensor() { return m_buffers[5]; }

        // Block `layer`'s input (layer n_layer: the final norm's), in its device slot.
        R* block_input(std::size_t layer, std::size_t BTC) { return data(0) + kept().input_slot(layer, m_blocks) * BTC; }
        // Offloaded inputs (model/activations.hpp): to the host once written, back before recompute.
        void save_input(std::size_t layer, std::size_t BTC, stream& s) {
            m_offloaded.save(layer, block_input(layer, BTC), BTC, s);
        }
        void restore_input(std::size_t layer, std::size_t BTC, stream& s) {
            m_offloaded.restore(layer, block_input(layer, BTC), BTC, s);
        }
        R* block(std::size_t layer) { return data(1) + std::min(layer, m_kept) * m_block_floats; }
        R* lnf() { return data(2); }
        R* lnf_stats() { return data(3); }
        R* logits_chunk() { return data(4); }
        R* losses() { return data(5); }
        R* lse() { return data(6); }
        R* dlogits_chunk() { return data(7); }
        R* dlnf() { return data(8); }
        R* dx(int which, std::size_t BTC) { return data(9) + which * BTC; }
        R* dblock() { return data(10); }

    private:
        R* data(std::size_t i) { return m_buffers[i].device_data().get(); }
        std::size_t m_batch, m_seq, m_kept, m_blocks;
        bool m_offload_inputs;
        offloaded_inputs<R, B> m_offloaded;
        std::size_t m_vocab, m_head_chunk_rows, m_block_floats = 0;
        std::vector<tiered_tensor<std::int32_t, device_tier, B>> m_tokens;
        std::vector<tiered_tensor<R, device_tier, B>> m_buffers;
    };

    // Floats of one block's forward activations for a B x T micro-batch.
    static std::size_t block_floats(const gpt_config& c, std::size_t batch, std::size_t seq) {
        const std::size_t BT = batch * seq, C = c.n_embd;
        return BT * C * 7 + BT * 4 + BT * 3 * C + BT * 4 * C * 2 + op::attention_saved(batch, seq, c.n_head);
    }
    // Floats of one block's backward scratch.
    static std::size_t block_grad_floats(const gpt_config& c, std::size_t batch, std::size_t seq) {
        const std::size_t BT = batch * seq, C = c.n_embd;
        return BT * 4 * C * 2 + BT * C * 2 + BT * 3 * C;
    }

    // ---- forward and backward of one micro-batch (tokens and targets already in `act`) ----

    // Enqueues the forward pass on `s`; the per-token losses end in act.losses().
    template <GroupBinder<R, stream> Binder>
    void forward(Binder& bind, activations& act, std::size_t batch, std::size_t seq, stream& s) const {
        blocks_forward(bind, act, batch, seq, s, false);
        const auto& c = m_config;
        const std::size_t fg = final_group();
        const R* pf = bind.params(fg, s, group_use::forward);
        const R* p0 = bind.params(0, s, group_use::forward);
        lnf_forward(s, pf, act, batch, seq);
        lm_head_loss_forward<B>(s, act.losses(), act.lse(), act.logits_chunk(), act.lnf(), wte(p0), act.targets(), batch,
                                seq, c.n_embd, c.vocab_size, c.head_chunk_rows);
        bind.done(0, s, group_use::forward);
        bind.done(fg, s, group_use::forward);
    }

    // Enqueues forward + backward on `s`. Gradients accumulate (+=) into the binder's gradient
    // buffers; `loss_scale` multiplies dloss (1 / counted tokens of the whole effective batch, so
    // that accumulation over micro-batches gives the mean over the effective batch). The head's
    // forward runs with its backward, chunk by chunk (model/lm_head.hpp); act.losses() ends as
    // forward leaves it.
    template <GroupBinder<R, stream> Binder>
    void forward_backward(Binder& bind, activations& act, std::size_t batch, std::size_t seq, double loss_scale,
                          stream& s) const {
        blocks_forward(bind, act, batch, seq, s, true);
        const auto& c = m_config;
        const std::size_t BT = batch * seq, C = c.n_embd, BTC = BT * C;
        const std::size_t L = c.n_layer;
        // the head: final layernorm, then the tied LM head with cross-entropy, and back
        {
            const std::size_t fg = final_group();
            const R* pf = bind.params(fg, s, group_use::backward);
            const R* p0 = bind.params(0, s, group_use::backward);
            R* g0 = bind.grads(0, s);
            R* gf = bind.grads(fg, s);
            lnf_forward(s, pf, act, batch, seq);
            op::zero(s, act.dlnf(), BTC);
            lm_head_loss_backward<B>(s, act.dlnf(), wte(g0), act.losses(), act.lse(), act.logits_chunk(),
                                     act.dlogits_chunk(), act.lnf(), wte(p0), act.targets(), loss_scale, batch, seq, C,
                                     c.vocab_size, c.head_chunk_rows);
            R* dx = act.dx(static_cast<int>(L % 2), BTC);
            op::zero(s, dx, BTC);
            const auto& fl = m_groups[fg].slots();
            op::layernorm_backward(s, dx, gf + fl[0].offset, gf + fl[1].offset, act.lnf_stats(), act.lnf_stats() + BT,
                                   act.dlnf(), act.block_input(L, BTC), pf + fl[0].offset, batch, seq, C);
            bind.done(fg, s, group_use::backward);
            bind.done(0, s, group_use::backward);
        }
        for (std::size_t l = L; l-- > 0;) {
            const std::size_t g = block_group(l);
            const R* p = bind.params(g, s, group_use::backward);
            R* grad = bind.grads(g, s);
            if (!act.keeps(l)) {  // recompute from the saved input (offloaded: brought back first)
                act.restore_input(l, BTC, s);
                block_forward(s, p, act, l, batch, seq);
            }
            block_backward(s, p, grad, act, l, batch, seq);
            bind.done(g, s, group_use::backward);
        }
        {
            const R* p0 = bind.params(0, s, group_use::backward);
            (void)p0;
            R* g0 = bind.grads(0, s);
            op::embedding_backward(s, wte(g0), wpe(g0), act.dx(0, BTC), act.tokens(), batch, seq, C, c.vocab_size,
                                   c.max_seq);
            bind.done(0, s, group_use::backward);
        }
    }

private:
    // The embeddings and every block's forward: the input of the final layernorm ends in
    // act.block_input(n_layer).
    template <GroupBinder<R, stream> Binder>
    void blocks_forward(Binder& bind, activations& act, std::size_t batch, std::size_t seq, stream& s,
                        bool training) const {
        check_size(act, batch, seq);
        const auto& c = m_config;
        const std::size_t BT = batch * seq, C = c.n_embd, BTC = BT * C;
        {
            const R* p = bind.params(0, s, group_use::forward);
            op::embedding_forward(s, act.block_input(0, BTC), act.tokens(), wte(p), wpe(p), batch, seq, C, c.vocab_size,
                                  c.max_seq);
            bind.done(0, s, group_use::forward);
        }
        for (std::size_t l = 0; l < c.n_layer; ++l) {
            const std::size_t g = block_group(l);
            const R* p = bind.params(g, s, group_use::forward);
            if (training) act.save_input(l, BTC, s);  // offloaded: to the host before its slot is reused
            block_forward(s, p, act, l, batch, seq);
            bind.done(g, s, group_use::forward);
        }
    }

    const R* wte(const R* group0) const { return group0 + m_groups[0].slots()[0].offset; }
    const R* wpe(const R* group0) const { return group0 + m_groups[0].slots()[1].offset; }
    R* wte(R* group0) const { return group0 + m_groups[0].slots()[0].offset; }
    R* wpe(R* group0) const { return group0 + m_groups[0].slots()[1].offset; }

    void check_size(const activations& act, std::size_t batch, std::size_t seq) const {
        if (batch > act.batch() || seq > act.seq() || seq > m_config.max_seq)
            throw error("micro-batch " + std::to_string(batch) + " x " + std::to_string(seq) +
                            " is larger than the activations (" + std::to_string(act.batch()) + " x " +
                            std::to_string(act.seq()) + ") or the model's context " + std::to_string(m_config.max_seq));
        check_head_chunk_rows(act.head_chunk_rows(), m_config.head_chunk_rows);
    }

    // Views of one block's forward activations, carved from the block workspace.
    struct block_acts {
        R *ln1, *ln1_stats, *qkv, *att_saved, *atty, *attproj, *res2, *ln2, *ln2_stats, *fch, *fch_gelu, *fcproj;
    };
    block_acts carve(activations& act, std::size_t l, std::size_t batch, std::size_t seq) const {
        const auto& c = m_config;
        const std::size_t BT = batch * seq, C = c.n_embd;
        R* p = act.block(l);
        block_acts a{};
        auto take = [&](std::size_t n) {
            R* q = p;
            p += n;
            return q;
        };
        a.ln1 = take(BT * C);
        a.ln1_stats = take(2 * BT);
        a.qkv = take(BT * 3 * C);
        a.att_saved = take(op::attention_saved(batch, seq, c.n_head));
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

    void block_forward(stream& s, const R* p, activations& act, std::size_t l, std::size_t batch, std::size_t seq) const {
        const auto& c = m_config;
        const std::size_t BT = batch * seq, C = c.n_embd, BTC = BT * C, NH = c.n_head;
        const auto& w = m_groups[block_group(l)].slots();
        auto P = [&](int i) { return p + w[i].offset; };
        block_acts a = carve(act, l, batch, seq);
        const R* x = act.block_input(l, BTC);
        R* out = act.block_input(l + 1, BTC);
        op::layernorm_forward(s, a.ln1, a.ln1_stats, a.ln1_stats + BT, x, P(0), P(1), batch, seq, C);
        op::matmul_forward(s, a.qkv, a.ln1, P(2), P(3), batch, seq, C, 3 * C);
        op::attention_forward(s, a.atty, a.att_saved, a.qkv, batch, seq, C, NH);
        op::matmul_forward(s, a.attproj, a.atty, P(4), P(5), batch, seq, C, C);
        op::residual_forward(s, a.res2, x, a.attproj, BTC);
        op::layernorm_forward(s, a.ln2, a.ln2_stats, a.ln2_stats + BT, a.res2, P(6), P(7), batch, seq, C);
        op::matmul_forward(s, a.fch, a.ln2, P(8), P(9), batch, seq, C, 4 * C);
        op::gelu_forward(s, a.fch_gelu, a.fch, BT * 4 * C);
        op::matmul_forward(s, a.fcproj, a.fch_gelu, P(10), P(11), batch, seq, 4 * C, C);
        op::residual_forward(s, out, a.res2, a.fcproj, BTC);
    }

    // dout = act.dx((l + 1) % 2): gradient w.r.t. the block's output; writes dx(l % 2) w.r.t. its input.
    void block_backward(stream& s, const R* p, R* grad, activations& act, std::size_t l, std::size_t batch,
                        std::size_t seq) const {
        const auto& c = m_config;
        const std::size_t BT = batch * seq, C = c.n_embd, BTC = BT * C, NH = c.n_head;
        const auto& w = m_groups[block_group(l)].slots();
        auto P = [&](int i) { return p + w[i].offset; };
        auto G = [&](int i) { return grad + w[i].offset; };
        block_acts a = carve(act, l, batch, seq);
        const R* x = act.block_input(l, BTC);
        const R* dout = act.dx(static_cast<int>((l + 1) % 2), BTC);
        R* dx = act.dx(static_cast<int>(l % 2), BTC);
        R* d = act.dblock();
        R* dfch_gelu = d;
        R* dfch = d + BT * 4 * C;
        R* dln2 = d + BT * 8 * C;
        R* datty = dln2 + BTC;
        R* dqkv = datty + BTC;
        R* dln1 = dln2;  // dln2 is dead by the time dln1 is needed

        // out = res2 + fcproj: both branches receive dout
        op::zero(s, dfch_gelu, BT * 4 * C);
        op::matmul_backward(s, dfch_gelu, G(10), G(11), dout, a.fch_gelu, P(10), batch, seq, 4 * C, C);
        op::zero(s, dfch, BT * 4 * C);
        op::gelu_backward(s, dfch, dfch_gelu, a.fch, BT * 4 * C);
        op::zero(s, dln2, BTC);
        op::matmul_backward(s, dln2, G(8), G(9), dfch, a.ln2, P(8), batch, seq, C, 4 * C);
        op::copy(s, dx, dout, BTC);  // dres2 = dout + layernorm_2's input gradient
        op::layernorm_backward(s, dx, G(6), G(7), a.ln2_stats, a.ln2_stats + BT, dln2, a.res2, P(6), batch, seq, C);
        // res2 = x + attproj: dx (now dres2) flows to both
        op::zero(s, datty, BTC);
        op::matmul_backward(s, datty, G(4), G(5), dx, a.atty, P(4), batch, seq, C, C);
        op::zero(s, dqkv, BT * 3 * C);
        op::attention_backward(s, dqkv, a.att_saved, datty, a.atty, a.qkv, batch, seq, C, NH);
        op::zero(s, dln1, BTC);
        op::matmul_backward(s, dln1, G(2), G(3), dqkv, a.ln1, P(2), batch, seq, C, 3 * C);
        op::layernorm_backward(s, dx, G(0), G(1), a.ln1_stats, a.ln1_stats + BT, dln1, x, P(0), batch, seq, C);
    }

    // The final layernorm: act.lnf() from the last block's output.
    void lnf_forward(stream& s, const R* pf, activations& act, std::size_t batch, std::size_t seq) const {
        const auto& c = m_config;
        const std::size_t BT = batch * seq, C = c.n_embd;
        const auto& fl = m_groups[final_group()].slots();
        op::layernorm_forward(s, act.lnf(), act.lnf_stats(), act.lnf_stats() + BT, act.block_input(c.n_layer, BT * C),
                              pf + fl[0].offset, pf + fl[1].offset, batch, seq, C);
    }

    gpt_config m_config;
    std::vector<param_layout> m_groups;
};

}  // namespace strata
