// The footprint of a model: what the memory planner (plan/planner.hpp) needs to know of it for
// one micro-batch shape, read from the model itself (footprint_of), not known per model type.
//
// The arithmetic is the model's own, not an estimate: parameter blocks come from its param_layouts
// (page-padded groups), activations from its one list of device buffers
// (decoder_model::activation_buffers) with each allocation padded to whole pages, as every backend
// charges its budget. Frozen tensors (param_spec::trainable = false) count as weights only: no
// gradients, no optimizer state, no gradient slots.
//
// footprint_of<B> sizes the activations with ops<B>::attention_saved, so the backend's ops header
// (nn/cpu_ops.hpp, nn/cuda_ops.hpp) must be included before it is used.
#pragma once

#include <strata/backend/backend.hpp>    // Backend
#include <strata/core/bytes.hpp>         // page_size, round_up
#include <strata/model/activations.hpp>  // kept_activations
#include <strata/nn/layer.hpp>            // layer_flops
#include <strata/nn/ops.hpp>             // detail::norm_workspace_doubles
#include <strata/tensor/param_layout.hpp> // param_layout

#include <algorithm>  // std::max
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int32_t
#include <vector>     // std::vector

namespace strata {

namespace detail {
// What a backend charges its budget for one allocation of `bytes`.
constexpr std::size_t charged(std::size_t bytes) { return round_up(bytes == 0 ? 1 : bytes, page_size); }
}  // namespace detail

// What the planner needs to know of a model and its micro-batch: the bytes of its groups and of
// its activations. Made by footprint_of<B>(model, batch, seq) from the model itself.
struct model_footprint {
    std::size_t batch = 0, seq = 0;  // the micro-batch B x T the activations are for
    std::size_t element_bytes = 0;   // sizeof the model's R
    std::size_t max_seq = 0;
    std::size_t parameters = 0, trainable_parameters = 0;
    std::vector<std::size_t> group_bytes;      // weights of each group, page-padded (group order)
    std::vector<std::size_t> trainable_bytes;  // its gradients: the trainable prefix; 0: frozen
    // Each group's layout (its tensors' shapes), from which the planner sizes the optimizer's state
    // (optim/state_layout.hpp). Empty in a footprint made by hand: each group's trainable prefix
    // then counts as one vector.
    std::vector<param_layout> layouts;
    // Activations: every allocation but the blocks' saved activations, page-padded (tokens and
    // targets included), and one block's saved activations in bytes (unpadded: kept blocks and the
    // shared recompute buffer are one allocation of kept_activations::buffers blocks).
    // The block inputs are apart: one input (B x T x C) in bytes, times kept_activations::input_slots.
    std::size_t activation_fixed_bytes = 0;
    std::size_t block_activation_bytes = 0;
    std::size_t block_input_bytes = 0;
    // One recomputing block's kept part in bytes (kept_activations::keep_parts; unpadded: the parts
    // are one allocation of kept_activations::parts); 0: the model's blocks cannot keep parts.
    std::size_t block_part_bytes = 0;
    std::size_t blocks = 0;                    // transformer blocks (groups 1 .. n-2)
    std::size_t norm_workspace_bytes = 0;      // sum_of_squares' workspace (the trainers')
    // The compute of one micro-batch, for the step's cost model (plan/cost_model.hpp): forward
    // FLOPs (2 per multiply-add) of one block (the blocks are alike), its GEMMs and attention's
    // T x T products apart, and of the final norm and LM head; and the logits' bytes (B x T x V
    // elements), which the head's cross-entropy writes and reads. 0: the model does not say.
    double block_gemm_flops = 0, block_attention_flops = 0, head_flops = 0;
    // A recomputing block's recompute from its kept part (keep_parts), GEMMs and attention apart.
    double block_part_recompute_gemm_flops = 0, block_part_recompute_attention_flops = 0;
    std::size_t logits_bytes = 0;

    // Device bytes of the activations when `kept` blocks keep theirs (block inputs included).
    std::size_t activation_bytes(kept_activations kept) const {
        return activation_fixed_bytes + round_up(std::max<std::size_t>(kept.input_slots(blocks) * block_input_bytes, 1),
                                                 page_size) +
               round_up(std::max<std::size_t>(kept.buffers(blocks) * block_activation_bytes, 1), page_size) +
               round_up(std::max<std::size_t>(kept.parts(blocks) * block_part_bytes, 1), page_size);
    }
    // Pinned host bytes of the offloaded block inputs.
    std::size_t offloaded_input_bytes(kept_activations kept) const {
        const std::size_t n = kept.offloaded(blocks);
        return n == 0 ? 0 : round_up(n * block_input_bytes, page_size);
    }
    // Groups 1 .. n-2 are the streamed blocks; 0 (embeddings) and n-1 (final norm) are pinned.
};

// The footprint of a model on backend B for B x T micro-batches: any model with groups(),
// block_count(), max_seq() and activation_buffers(batch, seq, kept_activations) (decoder_model,
// and so gpt_model); its compute too when it has block_flops and head_flops (decoder_model does).
template <Backend B, class Model>
model_footprint footprint_of(const Model& model, std::size_t batch, std::size_t seq) {
    using R = typename Model::value_type;
    model_footprint f;
    f.batch = batch;
    f.seq = seq;
    f.element_bytes = sizeof(R);
    f.max_seq = model.max_seq();
    for (const auto& g : model.groups()) {
        f.parameters += g.parameter_count();
        f.trainable_parameters += g.trainable_parameter_count();
        f.group_bytes.push_back(g.bytes());
        f.trainable_bytes.push_back(g.trainable_bytes());
        f.layouts.push_back(g);
    }
    f.blocks = model.block_count();
    // Entry 1 is the blocks' saved activations: with none kept, one block's (the shared buffer).
    const auto buffers = model.activation_buffers(batch, seq, kept_activations::none());
    f.activation_fixed_bytes = 2 * detail::charged(batch * seq * sizeof(std::int32_t));  // tokens, targets
    // The last entry is the recomputing blocks' kept parts (none here: counted by activation_bytes).
    for (std::size_t i = 2; i + 1 < buffers.size(); ++i) f.activation_fixed_bytes += detail::charged(buffers[i] * sizeof(R));
    // Entry 0 is the block inputs (every block's and the final norm's), entry 1 one block's saved activations.
    f.block_input_bytes = buffers[0] / (f.blocks + 1) * sizeof(R);
    f.block_activation_bytes = buffers[1] * sizeof(R);
    f.norm_workspace_bytes = detail::charged(detail::norm_workspace_doubles<B>(model.groups()) * sizeof(double));
    if constexpr (requires { model.block_flops(batch, seq); model.head_flops(batch, seq); }) {
        const layer_flops block = model.block_flops(batch, seq);
        f.block_gemm_flops = block.gemm;
        f.block_attention_flops = block.attention;
        f.head_flops = model.head_flops(batch, seq);
        f.logits_bytes = batch * seq * model.vocab_size() * sizeof(R);
    }
    if constexpr (requires { model.block_part_floats(batch, seq); model.block_part_recompute_flops(batch, seq); }) {
        f.block_part_bytes = model.block_part_floats(batch, seq) * sizeof(R);
        const layer_flops recompute = model.block_part_recompute_flops(batch, seq);
        f.block_part_recompute_gemm_flops = recompute.gemm;
        f.block_part_recompute_attention_flops = recompute.attention;
    }
    return f;
}

}  // namespace strata
