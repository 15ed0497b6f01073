// What the trainer (train/tiered_trainer.hpp) takes and gives: train_options (its options, the
// planner's homes among them), trainer_state_kind (which block a checkpoint reads or writes),
// step_result, the checks of a step's micro-batches and the global norm of per-group partial sums.
//
// The optimizer is train_options::optimizer (AdamW by default, SGD with momentum, Adafactor: any of
// optim/optimizers.hpp's registered_optimizers): the trainer keeps one block per state tensor it
// names in each group's home, laid out from the optimizer's state shapes (optim/state_layout.hpp:
// AdamW's m and v like the gradients, Adafactor's factored row and column variances smaller), and
// runs its update where the group lives (the host's threads, or optimizer_kernels<O, B> on the device).
//
// Frozen tensors (param_spec::trainable = false) have no gradients and no optimizer state: each
// group's gradient and state blocks hold its trainable prefix (param_layout::trainable_numel),
// and a wholly frozen group has none (its binder gradients are null).
#pragma once

#include <strata/backend/backend.hpp>            // Backend
#include <strata/core/error.hpp>                 // strata::error
#include <strata/core/rng.hpp>                   // rng
#include <strata/data/loader.hpp>                // data::batch
#include <strata/kernels/cpu/cross_entropy.hpp>  // kernels::cpu::ignore_index
#include <strata/model/activations.hpp>          // kept_activations
#include <strata/model/decoder.hpp>              // decoder_model
#include <strata/nn/ops.hpp>                     // ops
#include <strata/optim/optimizers.hpp>           // any_optimizer, make_optimizer
#include <strata/tensor/tiered_tensor.hpp>       // tiered_tensor
#include <strata/tier/group_home.hpp>            // group_home
#include <strata/train/clip.hpp>                 // clip_coefficient, require_finite_grad_norm
#include <strata/train/initialize.hpp>           // initialize_groups
#include <strata/train/schedule.hpp>             // lr_schedule, lr_at

#include <algorithm>  // std::max
#include <cmath>    // std::sqrt, std::isfinite
#include <cstddef>  // std::size_t
#include <mutex>    // std::mutex, std::lock_guard
#include <optional> // std::optional
#include <span>     // std::span
#include <string>   // std::string
#include <vector>   // std::vector

namespace strata {

struct train_options {
    std::size_t batch = 4;       // micro-batch B
    std::size_t seq = 128;       // T
    std::size_t accum = 1;       // micro-batches per optimizer step
    lr_schedule schedule{};
    double clip = 1.0;           // max global gradient norm; 0 disables clipping
    // Blocks whose forward activations stay for the backward (the first ones); the others keep
    // only their input and recompute (model/activations.hpp). The planner's memory_plan::kept
    // says how many fit; none() keeps the least memory, all() recomputes nothing.
    kept_activations activations = kept_activations::none();
    // Where each layer group's state lives: the planner's memory_plan::trainer_homes(), or by
    // hand (every_group, tier/group_home.hpp). Empty: every group on the device (the resident plan).
    std::vector<group_home> homes;
    // Device slots of the streamed blocks (memory_plan::slots, 2 at least): one computes while
    // the others are filled, slots - 1 uses ahead. Unused when no block streams.
    std::size_t slots = 3;
    // The optimizer with its hyperparameters: AdamW (the default), sgd_optimizer, adafactor_optimizer,
    // or one made by name (make_optimizer("adafactor", {{"weight_decay", 0.1}})).
    any_optimizer optimizer = adamw_optimizer(adamw_hparams{});
};

// One group's block of a kind, for checkpoints (a trainer's download/upload): weights are the
// whole block; gradients and each optimizer state tensor the trainable prefix (nothing for a
// frozen group). optimizer_state(i) is the optimizer's i-th state tensor (state_names() order);
// adam_m and adam_v are AdamW's names of states 0 and 1. One kind for every trainer
// configuration, so that the state moves between them.
struct trainer_state_kind {
    enum class part : unsigned char { params, grads, optimizer };
    part of = part::params;
    std::size_t index = 0;  // part::optimizer: which state tensor

    static constexpr trainer_state_kind optimizer_state(std::size_t i) { return {part::optimizer, i}; }
    static const trainer_state_kind params, grads, adam_m, adam_v;
    friend constexpr bool operator==(const trainer_state_kind&, const trainer_state_kind&) = default;
};
inline constexpr trainer_state_kind trainer_state_kind::params{trainer_state_kind::part::params, 0};
inline constexpr trainer_state_kind trainer_state_kind::grads{trainer_state_kind::part::grads, 0};
inline constexpr trainer_state_kind trainer_state_kind::adam_m = trainer_state_kind::optimizer_state(0);
inline constexpr trainer_state_kind trainer_state_kind::adam_v = trainer_state_kind::optimizer_state(1);

struct step_result {
    long step = 0;           // 1-based number of this update
    double loss = 0;         // mean over the counted tokens of the effective batch
    double grad_norm = 0;    // global L2 norm before clipping
    double lr = 0;
    std::size_t tokens = 0;  // tokens processed (B * T * accum)
    std::size_t counted = 0; // tokens that counted in the loss
};

namespace detail {
// Token ids outside [0, V) are refused on the host: a GPU kernel cannot throw, and would skip them.
inline void check_token_ids(const data::batch& b, std::size_t vocab) {
    auto bad = [&](const char* what, std::size_t i, std::int32_t id) {
        throw error(std::string(what) + " id " + std::to_string(id) + " at position " + std::to_string(i) +
                        " is outside the model's vocabulary [0, " + std::to_string(vocab) + ")",
                    "the data was tokenized with a larger vocabulary than the model's: use the same tokenizer");
    };
    for (std::size_t i = 0; i < b.inputs.size(); ++i)
        if (b.inputs[i] < 0 || static_cast<std::size_t>(b.inputs[i]) >= vocab) bad("input token", i, b.inputs[i]);
    for (std::size_t i = 0; i < b.targets.size(); ++i)
        if (b.targets[i] != kernels::cpu::ignore_index && (b.targets[i] < 0 || static_cast<std::size_t>(b.targets[i]) >= vocab))
            bad("target token", i, b.targets[i]);
}

// Checks the micro-batches of one step and returns the targets that count in the loss.
inline std::size_t check_micro_batches(std::span<const data::batch> micro, const train_options& o, long update,
                                       std::size_t vocab) {
    if (micro.size() != o.accum)
        throw error("trainer::step got " + std::to_string(micro.size()) + " micro-batches, expected accum = " +
                    std::to_string(o.accum));
    const std::size_t BT = o.batch * o.seq;
    std::size_t counted = 0;
    for (const auto& b : micro) {
        if (b.inputs.size() != BT || b.targets.size() != BT)
            throw error("micro-batch has " + std::to_string(b.inputs.size()) + " tokens, expected B x T = " +
                        std::to_string(BT));
        check_token_ids(b, vocab);
        for (auto t : b.targets) counted += t != kernels::cpu::ignore_index;
    }
    if (counted == 0)
        throw error("step " + std::to_string(update) + ": no target token counts in the loss (all are ignored)",
                    "instruction data needs responses that fit in the sequence length", {"seq_len"});
    return counted;
}

// sqrt of the per-group sums of squares added in group order, frozen groups skipped: both trainers.
template <class Groups>
double global_norm(const Groups& groups, std::span<const double> partials) {
    double sum = 0;
    for (std::size_t g = 0; g < groups.size(); ++g)
        if (!groups[g].frozen()) sum += partials[g];
    return std::sqrt(sum);
}

// A NaN loss or gradient norm stops training before the update can destroy the weights.
inline void check_finite(const step_result& r, long update) {
    if (!std::isfinite(r.loss))
        throw error("loss is " + std::to_string(r.loss) + " at step " + std::to_string(update),
                    "training diverged: lower lr or lengthen the warmup, and resume from the last checkpoint", {"lr", "warmup"});
    require_finite_grad_norm(r.grad_norm, update);
}
}  // namespace detail

}  // namespace strata
