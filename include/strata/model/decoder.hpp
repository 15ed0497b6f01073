// decoder_model<Block, Norm>: a decoder-only language model assembled from Layers
// (nn/layer.hpp): token embedding (+ learned positions, optional), n_layer Blocks, a final Norm,
// an LM head (tied to the token embedding, or its own (V, C) matrix), softmax cross-entropy. The trainer (train/tiered_trainer.hpp)
// trains it resident or streamed, through its groups and the binder
// protocol. GPT-2 is one: gpt_model<R, B> = decoder_model<gpt2_block<R, B>, layernorm_layer<R, B>>
// (model/gpt.hpp).
//
//   using llama = decoder_model<llama_block<float, B>, rmsnorm_layer<float, B>>;
//   llama model({.vocab_size = 257, .max_seq = 256, .n_layer = 4, .n_embd = 128,
//                .learned_positions = false}, block_config, norm_config);
//   gpt_model<float, B> gpt(gpt_config{...});  // a whole-model config that names the three (below)
//
// Groups: 0 = embeddings ("wte.weight" (V, C), "wpe.weight" (max_seq, C) if learned_positions),
// + "lm_head.weight" (V, C) when the head is untied, 1..L = the blocks (Block::params), L+1 = the
// final norm (Norm::params, each name after final_prefix: "ln_f.weight"). Both Layers map
// (B, T, C) -> (B, T, C), C = n_embd. A frozen group (every tensor trainable = false) has no
// gradients and no moments; with freeze_embeddings, the embeddings (and so the tied head) are
// frozen: the LoRA setting, where only adapters inside the blocks train.
//
// Activations (model/activations.hpp): forward keeps each block's input and the activations of the
// first `kept` blocks; any other block's backward recomputes its forward from the saved input
// first (the Layer contract makes that bitwise exact), or, keeping part of its activations
// (kept_activations::keep_parts, a Block that is RecomputesPart), runs only the Block's recompute
// from that part. The LM head and cross-entropy run over
// chunks of positions (model/lm_head.hpp). The activations' buffers are one list,
// activation_buffers(), which the planner reads (footprint_of).
//
// Initialization: a Layer may declare
//   static void initialize(const config_type&, const param_layout&, std::span<R> block, rng&);
// otherwise each tensor with weight decay is drawn from N(0, 0.02), tensors without decay are
// ones when their name ends in "weight" (norm gains) and zeros otherwise (biases).
#pragma once

#include <strata/backend/backend.hpp>       // Backend
#include <strata/core/error.hpp>            // strata::error
#include <strata/core/rng.hpp>              // rng
#include <strata/model/activations.hpp>     // kept_activations
#include <strata/model/lm_head.hpp>         // lm_head_loss_forward, lm_head_loss_backward
#include <strata/nn/layer.hpp>              // Layer, layer_flops, flops_split
#include <strata/nn/ops.hpp>                // ops
#include <strata/stream/group_binder.hpp>   // GroupBinder, group_use
#include <strata/tensor/param_layout.hpp>   // param_layout, param_spec
#include <strata/tensor/tiered_tensor.hpp>  // tiered_tensor

#include <algorithm>    // std::fill, std::max
#include <concepts>     // std::convertible_to
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int32_t
#include <span>         // std::span
#include <string>       // std::string
#include <type_traits>  // std::is_same_v
#include <utility>      // std::move
#include <vector>       // std::vector

namespace strata {

struct decoder_config {
    std::size_t vocab_size = 257;
    std::size_t max_seq = 256;
    std::size_t n_layer = 4;
    std::size_t n_embd = 128;
    bool learned_positions = true;   // a "wpe" table added to the token embedding (GPT-2); false: RoPE & co.
    bool freeze_embeddings = false;  // wte (the tied head), wpe and an untied head frozen
    // Positions per chunk of the LM head and cross-entropy (model/lm_head.hpp): the logits buffers
    // hold this many rows of V, whatever B x T is. Changes no number while B x T fits in one chunk.
    std::size_t head_chunk_rows = lm_head_chunk_rows;
    // Parameter names in checkpoints: root + "wte.weight", root + block_prefix + "<l>." + name,
    // root + final_prefix + name. GPT-2 (Hugging Face) by default. The final group's layout names
    // its tensors final_prefix + name ("ln_f.weight"), as the embeddings' are named below root.
    std::string root = "transformer.";
    std::string block_prefix = "h.";
    std::string final_prefix = "ln_f.";
    std::string token_embedding = "wte.weight";
    std::string position_embedding = "wpe.weight";
    // tied_head false: the LM head is its own (V, C) matrix in group 0 (after the embeddings),
    // named lm_head verbatim (not under root), as Hugging Face's untied heads are.
    bool tied_head = true;
    std::string lm_head = "lm_head.weight";

    void validate() const {
        if (vocab_size == 0 || max_seq == 0 || n_layer == 0 || n_embd == 0 || head_chunk_rows == 0)
            throw error("decoder config: vocab_size, max_seq, n_layer, n_embd and head_chunk_rows must be positive");
    }
};

// A decoder_model's three configs as one value. A whole-model config (gpt_config) builds its model
// when a function decoder_configs_of(config), found by argument-dependent lookup, returns them:
// then decoder_model(config) is the model (model/gpt.hpp does this for GPT-2).
template <class BlockConfig, class NormConfig>
struct decoder_configs {
    decoder_config model;
    BlockConfig block;
    NormConfig norm;
};

namespace detail {
template <class Config, class BlockConfig, class NormConfig>
concept names_decoder_configs = requires(const Config& c) {
    { decoder_configs_of(c) } -> std::convertible_to<decoder_configs<BlockConfig, NormConfig>>;
};

template <class L>
concept initializes_itself = requires(const typename L::config_type& c, const param_layout& layout,
                                      std::span<typename L::value_type> block, rng& gen) {
    L::initialize(c, layout, block, gen);
};

template <class R>
void default_initialize(const param_layout& layout, std::span<R> block, rng& gen) {
    for (const auto& entry : layout.entries()) {
        R* p = block.data() + entry.offset;
        const std::size_t n = entry.spec.shape.numel();
        if (entry.spec.decay)
            for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<R>(gen.normal(0.0, 0.02));
        else
            std::fill(p, p + n, entry.spec.name.ends_with("weight") ? R(1) : R(0));
    }
}
}  // namespace detail

template <Layer Block, Layer Norm>
class decoder_model {
    static_assert(std::is_same_v<typename Block::value_type, typename Norm::value_type> &&
                      std::is_same_v<typename Block::backend_type, typename Norm::backend_type>,
                  "decoder_model: Block and Norm must have the same value_type and backend_type");

public:
    using value_type = typename Block::value_type;
    using backend_type = typename Block::backend_type;
    using block_type = Block;
    using norm_type = Norm;
    using block_config = typename Block::config_type;
    using norm_config = typename Norm::config_type;
    using R = value_type;
    using stream = typename backend_type::stream;
    using op = ops<backend_type>;

    decoder_model(decoder_config config, block_config block, norm_config norm)
        : m_config(std::move(config)), m_block_config(block), m_norm_config(norm), m_block(block), m_norm(norm) {
        m_config.validate();
        const std::size_t C = m_config.n_embd;
        if (Block::in_features(block) != C || Block::out_features(block) != C)
            throw error("decoder_model: the block maps " + std::to_string(Block::in_features(block)) + " -> " +
                            std::to_string(Block::out_features(block)) + " channels, the model has n_embd " +
                            std::to_string(C),
                        "build the block's config with the model's n_embd");
        if (Norm::in_features(norm) != C || Norm::out_features(norm) != C)
            throw error("decoder_model: the final norm does not map n_embd " + std::to_string(C) + " -> " +
                        std::to_string(C));
        const bool train = !m_config.freeze_embeddings;
        std::vector<param_spec> embeddings{{m_config.token_embedding, {m_config.vocab_size, C}, true, train}};
        if (m_config.learned_positions)
            embeddings.push_back({m_config.position_embedding, {m_config.max_seq, C}, true, train});
        if (!m_config.tied_head) embeddings.push_back({m_config.lm_head, {m_config.vocab_size, C}, true, train});
        m_groups.push_back(param_layout::of<R>(std::move(embeddings)));
        for (std::size_t l = 0; l < m_config.n_layer; ++l) m_groups.push_back(param_layout::of<R>(Block::params(block)));
        std::vector<param_spec> final_norm = Norm::params(norm);
        for (param_spec& spec : final_norm) spec.name = m_config.final_prefix + spec.name;
        m_groups.push_back(param_layout::of<R>(std::move(final_norm)));
    }
    explicit decoder_model(decoder_configs<block_config, norm_config> c)
        : decoder_model(std::move(c.model), std::move(c.block), std::move(c.norm)) {}
    // From a whole-model config that names the three configs (decoder_configs_of, found by ADL).
    template <class Config>
        requires detail::names_decoder_configs<Config, block_config, norm_config>
    explicit decoder_model(const Config& config) : decoder_model(decoder_configs_of(config)) {}

    const decoder_config& config() const { return m_config; }
    const block_config& block_layer_config() const { return m_block_config; }
    const norm_config& norm_layer_config() const { return m_norm_config; }
    const std::vector<param_layout>& groups() const { return m_groups; }
    std::size_t group_count() const { return m_groups.size(); }
    std::size_t block_count() const { return m_config.n_layer; }
    std::size_t block_group(std::size_t layer) const { return 1 + layer; }
    std::size_t final_group() const { return m_config.n_layer + 1; }
    std::size_t vocab_size() const { return m_config.vocab_size; }
    std::size_t max_seq() const { return m_config.max_seq; }

    // The checkpoint name of a parameter ("transformer.h.3.attn.c_attn.weight" with the defaults).
    std::string hf_name(std::size_t group, const param_entry& entry) const {
        if (group == 0) return !m_config.tied_head && entry.spec.name == m_config.lm_head ? m_config.lm_head
                                                                                        : m_config.root + entry.spec.name;
        if (group == final_group()) return m_config.root + entry.spec.name;  // final_prefix + the norm's name
        return m_config.root + m_config.block_prefix + std::to_string(group - 1) + "." + entry.spec.name;
    }

    // Group by group from one generator (a seed fixes the model).
    void initialize(std::size_t group, std::span<R> host_block, rng& gen) const {
        std::fill(host_block.begin(), host_block.end(), R(0));
        const param_layout& layout = m_groups[group];
        if (group == 0) {
            detail::default_initialize(layout, host_block, gen);
        } else if (group == final_group()) {
            if constexpr (detail::initializes_itself<Norm>)
                Norm::initialize(m_norm_config, layout, host_block, gen);
            else
                detail::default_initialize(layout, host_block, gen);
        } else {
            if constexpr (detail::initializes_itself<Block>)
                Block::initialize(m_block_config, layout, host_block, gen);
            else
                detail::default_initialize(layout, host_block, gen);
        }
    }

    // Forward FLOPs of one B x T micro-batch (blocks, norm, head).
    double flops(std::size_t batch, std::size_t seq) const {
        return static_cast<double>(m_config.n_layer) * Block::flops(m_block_config, batch, seq) + head_flops(batch, seq);
    }
    // Of them, one block's, GEMMs and attention apart (nn/layer.hpp: flops_split); and the final
    // norm's with the LM head's (2 B T C V). The step's cost model reads both (footprint_of).
    layer_flops block_flops(std::size_t batch, std::size_t seq) const {
        return flops_split<Block>(m_block_config, batch, seq);
    }
    // A recomputing block's recompute from its kept part (the Block's recompute, RecomputesPart;
    // none when the Block names no part).
    layer_flops block_part_recompute_flops(std::size_t batch, std::size_t seq) const {
        if constexpr (RecomputesPart<Block>)
            return Block::recompute_flops(m_block_config, batch, seq);
        else
            return {};
    }
    // Elements of one recomputing block's kept part (0: the Block names none, it cannot keep parts).
    std::size_t block_part_floats(std::size_t batch, std::size_t seq) const { return kept_part(batch, seq).floats; }
    double head_flops(std::size_t batch, std::size_t seq) const {
        return Norm::flops(m_norm_config, batch, seq) +
               2.0 * static_cast<double>(batch * seq * m_config.n_embd * m_config.vocab_size);
    }

    // The activations' device buffers of R for a B x T micro-batch, in elements (each is one
    // allocation, at least one element); besides them, two int32 buffers of B x T (tokens,
    // targets). The planner counts exactly these. The logits and their gradient are one chunk of
    // rows each (model/lm_head.hpp), not B x T.
    std::vector<std::size_t> activation_buffers(std::size_t batch, std::size_t seq, kept_activations kept) const {
        const std::size_t BT = batch * seq, C = m_config.n_embd, V = m_config.vocab_size, L = m_config.n_layer;
        const std::size_t block = Block::activation_floats(m_block_config, batch, seq);
        const std::size_t chunk = lm_head_buffer_rows(BT, m_config.head_chunk_rows);
        std::vector<std::size_t> n{
            kept.input_slots(L) * BT * C,                        // 0 block inputs (the checkpoints)
            kept.buffers(L) * block,                 // 1 blocks' saved activations
            std::max(Block::workspace_floats(m_block_config, batch, seq),
                     Norm::workspace_floats(m_norm_config, batch, seq)),  // 2 workspace
            BT * C,                                  // 3 norm output
            Norm::activation_floats(m_norm_config, batch, seq),  // 4 norm's saved activations
            chunk * V,                               // 5 logits of one chunk
            BT,                                      // 6 losses
            BT,                                      // 7 lse
            chunk * V,                               // 8 dlogits of one chunk
            BT * C,                                  // 9 dnorm_out
            2 * BT * C,                              // 10 dx, two ping-pong buffers
            kept.parts(L) * block_part_floats(batch, seq)};  // 11 the recomputing blocks' kept parts
        for (auto& x : n) x = std::max<std::size_t>(x, 1);
        return n;
    }

    // ---- activations: device-tier buffers for micro-batches up to B x T ----
    class activations {
    public:
        activations(backend_type& backend, const decoder_model& m, std::size_t batch, std::size_t seq,
                    kept_activations kept)
            : m_batch(batch),
              m_seq(seq),
              m_kept(kept.of(m.m_config.n_layer)),
              m_blocks(m.m_config.n_layer),
              m_offload_inputs(kept.offload_inputs),
              m_keep_parts(kept.keep_parts),
              m_offloaded(backend, m.m_config.n_layer, batch * seq * m.m_config.n_embd, kept),
              m_vocab(m.m_config.vocab_size),
              m_head_chunk_rows(m.m_config.head_chunk_rows) {
            const std::size_t BT = batch * seq;
            m_tokens.emplace_back(backend, shape{BT}, "act.tokens");
            m_tokens.emplace_back(backend, shape{BT}, "act.targets");
            m_block_elements = Block::activation_floats(m.m_block_config, batch, seq);
            if (kept.parts(m_blocks) > 0) {
                if constexpr (!RecomputesPart<Block>)
                    throw error("the recomputing blocks cannot keep part of their activations: the block names no "
                                "such part",
                                "keep_parts needs a Block with kept_part and recompute (nn/layer.hpp, RecomputesPart)");
                m_part_room = m.block_part_floats(batch, seq);
            }
            static constexpr const char* names[] = {"block_inputs", "block",  "workspace", "norm_out",
                                                    "norm",         "logits", "losses",    "lse",
                                                    "dlogits",      "dnorm_out", "dx",     "parts"};
            const auto sizes = m.activation_buffers(batch, seq, kept);
            for (std::size_t i = 0; i < sizes.size(); ++i)
                m_buffers.emplace_back(backend, shape{sizes[i]}, std::string("act.") + names[i]);
        }

        std::size_t batch() const { return m_batch; }
        std::size_t seq() const { return m_seq; }
        kept_activations kept() const { return {m_kept, m_offload_inputs, m_keep_parts}; }
        bool keeps(std::size_t layer) const { return layer < m_kept; }
        // Whether recomputing block `layer` keeps its part (and recomputes from it).
        bool keeps_part(std::size_t layer) const { return m_keep_parts && !keeps(layer); }
        std::size_t head_chunk_rows() const { return m_head_chunk_rows; }

        // The logits (rows, V) of rows [first_row, first_row + rows) after a forward (or
        // forward_backward) over batch x seq: only its last chunk of rows is still held
        // (model/lm_head.hpp), other rows are a strata::error. The last position always is.
        const R* logits(std::size_t batch, std::size_t seq, std::size_t first_row, std::size_t rows = 1) {
            return logits_chunk() + held_logits_row(batch, seq, m_head_chunk_rows, first_row, rows) * m_vocab;
        }

        std::int32_t* tokens() { return m_tokens[0].device_data().get(); }
        std::int32_t* targets() { return m_tokens[1].device_data().get(); }
        tiered_tensor<std::int32_t, device_tier, backend_type>& tokens_tensor() { return m_tokens[0]; }
        tiered_tensor<std::int32_t, device_tier, backend_type>& targets_tensor() { return m_tokens[1]; }
        tiered_tensor<R, device_tier, backend_type>& losses_tensor() { return m_buffers[6]; }

        // Block `layer`'s input (layer n_layer: the final norm's), in its device slot.
        R* block_input(std::size_t layer, std::size_t BTC) { return data(0) + kept().input_slot(layer, m_blocks) * BTC; }
        // Offloaded inputs (model/activations.hpp): to the host once written, back before recompute.
        void save_input(std::size_t layer, std::size_t BTC, stream& s) {
            m_offloaded.save(layer, block_input(layer, BTC), BTC, s);
        }
        void restore_input(std::size_t layer, std::size_t BTC, stream& s) {
            m_offloaded.restore(layer, block_input(layer, BTC), BTC, s);
        }
        R* block(std::size_t layer) { return data(1) + std::min(layer, m_kept) * m_block_elements; }
        R* workspace() { return data(2); }
        R* norm_out() { return data(3); }
        R* norm() { return data(4); }
        R* logits_chunk() { return data(5); }
        R* losses() { return data(6); }
        R* lse() { return data(7); }
        R* dlogits_chunk() { return data(8); }
        R* dnorm_out() { return data(9); }
        R* dx(std::size_t which, std::size_t BTC) { return data(10) + which * BTC; }
        // Recomputing block `layer`'s kept part (keeps_part) for the micro-batch's shape, kept
        // apart from the shared buffer: saved after its forward, put back before its recompute.
        void save_part(std::size_t layer, activation_part part, stream& s) {
            ops<backend_type>::copy(s, part_buffer(layer), block(layer) + part.offset, part.floats);
        }
        void restore_part(std::size_t layer, activation_part part, stream& s) {
            ops<backend_type>::copy(s, block(layer) + part.offset, part_buffer(layer), part.floats);
        }

    private:
        R* data(std::size_t i) { return m_buffers[i].device_data().get(); }
        // Each part's room: its size at the activations' batch x seq (smaller micro-batches' fit).
        R* part_buffer(std::size_t layer) { return data(11) + (layer - m_kept) * m_part_room; }
        std::size_t m_batch, m_seq, m_kept, m_blocks;
        bool m_offload_inputs, m_keep_parts;
        std::size_t m_part_room = 0;
        offloaded_inputs<R, backend_type> m_offloaded;
        std::size_t m_vocab, m_head_chunk_rows, m_block_elements = 0;
        std::vector<tiered_tensor<std::int32_t, device_tier, backend_type>> m_tokens;
        std::vector<tiered_tensor<R, device_tier, backend_type>> m_buffers;
    };

    // Enqueues the forward pass on `s`; the per-token losses end in act.losses().
    template <GroupBinder<R, stream> Binder>
    void forward(Binder& bind, activations& act, std::size_t batch, std::size_t seq, stream& s) const {
        blocks_forward(bind, act, batch, seq, s, false);
        const std::size_t BTC = batch * seq * m_config.n_embd;
        const std::size_t fg = final_group();
        const R* pf = bind.params(fg, s, group_use::forward);
        const R* p0 = bind.params(0, s, group_use::forward);
        m_norm.forward(s, pf, act.norm_out(), act.norm(), act.block_input(m_config.n_layer, BTC), act.workspace(), batch,
                       seq);
        lm_head_loss_forward<backend_type>(s, act.losses(), act.lse(), act.logits_chunk(), act.norm_out(), head(p0),
                                           act.targets(), batch, seq, m_config.n_embd, m_config.vocab_size,
                                           m_config.head_chunk_rows);
        bind.done(0, s, group_use::forward);
        bind.done(fg, s, group_use::forward);
    }

    // Enqueues forward + backward on `s`; gradients of the trainable tensors accumulate into the
    // binder's gradient buffers (frozen groups: the binder hands out null), dloss scaled by
    // loss_scale. The head's forward runs with its backward, chunk by chunk (model/lm_head.hpp);
    // act.losses() ends as forward leaves it.
    template <GroupBinder<R, stream> Binder>
    void forward_backward(Binder& bind, activations& act, std::size_t batch, std::size_t seq, double loss_scale,
                          stream& s) const {
        blocks_forward(bind, act, batch, seq, s, true);
        const std::size_t C = m_config.n_embd, BTC = batch * seq * C;
        const std::size_t L = m_config.n_layer;
        {
            const std::size_t fg = final_group();
            const R* pf = bind.params(fg, s, group_use::backward);
            const R* p0 = bind.params(0, s, group_use::backward);
            R* g0 = bind.grads(0, s);
            R* gf = bind.grads(fg, s);
            m_norm.forward(s, pf, act.norm_out(), act.norm(), act.block_input(L, BTC), act.workspace(), batch, seq);
            op::zero(s, act.dnorm_out(), BTC);
            lm_head_loss_backward<backend_type>(s, act.dnorm_out(), g0 ? head(g0) : static_cast<R*>(nullptr), act.losses(),
                                                act.lse(), act.logits_chunk(), act.dlogits_chunk(), act.norm_out(),
                                                head(p0), act.targets(), loss_scale, batch, seq, C, m_config.vocab_size,
                                                m_config.head_chunk_rows);
            R* dx = act.dx(L % 2, BTC);
            op::zero(s, dx, BTC);
            m_norm.backward(s, pf, gf, dx, act.dnorm_out(), act.norm(), act.block_input(L, BTC), act.workspace(), batch,
                            seq);
            bind.done(fg, s, group_use::backward);
            bind.done(0, s, group_use::backward);
        }
        const bool embeddings_train = !m_groups[0].frozen();
        for (std::size_t l = L; l-- > 0;) {
            const std::size_t g = block_group(l);
            const R* p = bind.params(g, s, group_use::backward);
            R* grad = bind.grads(g, s);
            if (!act.keeps(l)) {  // recompute from the saved input (offloaded: brought back first)
                act.restore_input(l, BTC, s);
                if (act.keeps_part(l))
                    block_recompute(s, p, act, l, batch, seq);
                else
                    block_forward(s, p, act, l, batch, seq);
            }
            // the block's output gradient is dx((l + 1) % 2); its input gradient goes to dx(l % 2),
            // except for the first block when nothing upstream trains; zeroed unless the block
            // writes it (overwrites_dinp)
            R* dinp = nullptr;
            if (l > 0 || embeddings_train) {
                dinp = act.dx(l % 2, BTC);
                if constexpr (!overwrites_dinp_v<Block>) op::zero(s, dinp, BTC);
            }
            m_block.backward(s, p, grad, dinp, act.dx((l + 1) % 2, BTC), act.block(l), act.block_input(l, BTC),
                             act.workspace(), batch, seq);
            bind.done(g, s, group_use::backward);
        }
        {
            const R* p0 = bind.params(0, s, group_use::backward);
            (void)p0;
            R* g0 = bind.grads(0, s);
            if (embeddings_train)
                op::embedding_backward(s, wte(g0), m_config.learned_positions ? wpe(g0) : static_cast<R*>(nullptr),
                                       act.dx(0, BTC), act.tokens(), batch, seq, C, m_config.vocab_size,
                                       m_config.max_seq);
            bind.done(0, s, group_use::backward);
        }
    }

private:
    // The embeddings and every block's forward: the final norm's input ends in act.block_input(n_layer).
    template <GroupBinder<R, stream> Binder>
    void blocks_forward(Binder& bind, activations& act, std::size_t batch, std::size_t seq, stream& s,
                        bool training) const {
        check_size(act, batch, seq);
        const std::size_t C = m_config.n_embd, BTC = batch * seq * C;
        {
            const R* p = bind.params(0, s, group_use::forward);
            op::embedding_forward(s, act.block_input(0, BTC), act.tokens(), wte(p), wpe(p), batch, seq, C,
                                  m_config.vocab_size, m_config.max_seq);
            bind.done(0, s, group_use::forward);
        }
        for (std::size_t l = 0; l < m_config.n_layer; ++l) {
            const std::size_t g = block_group(l);
            const R* p = bind.params(g, s, group_use::forward);
            if (training) act.save_input(l, BTC, s);  // offloaded: to the host before its slot is reused
            block_forward(s, p, act, l, batch, seq);
            if (training && act.keeps_part(l)) act.save_part(l, kept_part(batch, seq), s);
            bind.done(g, s, group_use::forward);
        }
    }

    template <class P>
    P* wte(P* group0) const {
        return group0 + m_groups[0].entries()[0].offset;
    }
    // The LM head's (V, C) weights: the token embedding when tied.
    template <class P>
    P* head(P* group0) const {
        return m_config.tied_head ? wte(group0)
                                  : group0 + m_groups[0].entries()[m_config.learned_positions ? 2 : 1].offset;
    }
    template <class P>
    P* wpe(P* group0) const {
        return m_config.learned_positions ? group0 + m_groups[0].entries()[1].offset : static_cast<P*>(nullptr);
    }

    void check_size(const activations& act, std::size_t batch, std::size_t seq) const {
        if (batch > act.batch() || seq > act.seq() || seq > m_config.max_seq)
            throw error("micro-batch " + std::to_string(batch) + " x " + std::to_string(seq) +
                        " is larger than the activations (" + std::to_string(act.batch()) + " x " +
                        std::to_string(act.seq()) + ") or the model's context " + std::to_string(m_config.max_seq));
        check_head_chunk_rows(act.head_chunk_rows(), m_config.head_chunk_rows);
    }

    void block_forward(stream& s, const R* p, activations& act, std::size_t l, std::size_t batch, std::size_t seq) const {
        const std::size_t BTC = batch * seq * m_config.n_embd;
        m_block.forward(s, p, act.block_input(l + 1, BTC), act.block(l), act.block_input(l, BTC), act.workspace(), batch,
                        seq);
    }

    activation_part kept_part(std::size_t batch, std::size_t seq) const {
        if constexpr (RecomputesPart<Block>)
            return Block::kept_part(m_block_config, batch, seq);
        else
            return {};
    }
    // A recomputing block's recompute from its kept part (act.keeps_part(l)), at the micro-batch's shape.
    void block_recompute(stream& s, const R* p, activations& act, std::size_t l, std::size_t batch,
                         std::size_t seq) const {
        if constexpr (RecomputesPart<Block>) {
            act.restore_part(l, kept_part(batch, seq), s);
            m_block.recompute(s, p, act.block(l), act.block_input(l, batch * seq * m_config.n_embd), act.workspace(),
                              batch, seq);
        }
    }

    decoder_config m_config;
    block_config m_block_config;
    norm_config m_norm_config;
    Block m_block;
    Norm m_norm;
    std::vector<param_layout> m_groups;
};

}  // namespace strata
