// What an optimizer is, to the trainers, the planner and checkpoints: the seam between them and
// the update's math. An Optimizer
//   - names itself (name(): "adamw", what checkpoints record and a command line writes;
//     display_name(): "AdamW", what tables print);
//   - names its per-parameter state tensors (state_names(): AdamW {"m", "v"}, SGD {"momentum"}),
//     each laid out like the group's trainable parameters (param_layout's trainable prefix): the
//     trainers allocate one block per name and group in the group's home tier, the planner
//     counts one block per name, checkpoints save one tensor per name and parameter
//     ("<state>.<parameter name>");
//   - holds its hyperparameters (hparams(): a struct with validate(); hparams_json() writes them
//     for trainer_state.json);
//   - updates one parameter tensor on the host (update(pool, p, g, state, step, grad_scale), for
//     float and double; it may split the work over the pool's threads) and on the device
//     (update_device<Ops>(stream, p, g, state, n, step): launches ops<B> kernels on the stream;
//     Ops is ops<B>, given by the trainer, so this layer includes no backend).
// The step counter is the trainer's (optimizer_step::step, 1-based, restored from checkpoints):
// an optimizer with bias corrections reads it, others ignore it; an optimizer keeps no state of
// its own between calls, so every placement and a resume give the same bits.
//
// The host and device updates of one optimizer must give the same bits (tests/optim, tests/cuda):
// that is what lets a group's home decide where its update runs without changing the result.
// `grad_scale` (1: none) is a gradient clip folded into the host update: g * grad_scale as its own
// rounding, bitwise what scale_inplace would have stored in g; the device path gets gradients
// already scaled in place.
#pragma once

#include <strata/optim/host_thread_pool.hpp>  // host_thread_pool

#include <nlohmann/json.hpp>  // nlohmann::json

#include <concepts>     // std::convertible_to, std::copyable, std::same_as
#include <cstddef>      // std::size_t
#include <span>         // std::span
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace strata {

// What one update of one parameter tensor needs besides its tensors.
struct optimizer_step {
    double lr = 0;      // this step's learning rate
    long step = 1;      // 1-based number of this update, the trainer's count (AdamW's bias corrections)
    bool decay = true;  // weight decay on this tensor (param_spec::decay: 2-D weights and embeddings)
};

// One parameter tensor's state on the host: one span per state tensor, in state_names() order,
// each as long as the parameters.
template <class R>
using optimizer_state = std::span<const std::span<R>>;

template <class O>
concept Optimizer = std::copyable<O> &&
                    requires(const O& o, host_thread_pool& pool, std::span<float> pf, std::span<const float> gf,
                             optimizer_state<float> sf, std::span<double> pd, std::span<const double> gd,
                             optimizer_state<double> sd, const optimizer_step& k) {
                        { o.name() } -> std::convertible_to<std::string_view>;
                        { o.display_name() } -> std::convertible_to<std::string_view>;
                        { o.state_names() } -> std::convertible_to<std::span<const std::string_view>>;
                        { o.hparams_json() } -> std::same_as<nlohmann::json>;
                        o.update(pool, pf, gf, sf, k, 1.0f);
                        o.update(pool, pd, gd, sd, k, 1.0);
                    };

// "AdamW m, v", "SGD momentum": the optimizer's state as tables and messages name it.
inline std::string state_label(std::string_view display_name, std::span<const std::string_view> states) {
    std::string out(display_name);
    for (std::size_t i = 0; i < states.size(); ++i) out += (i == 0 ? " " : ", ") + std::string(states[i]);
    return out;
}

}  // namespace strata
