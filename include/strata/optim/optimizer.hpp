// What an optimizer is, to the trainers, the planner and checkpoints: the seam between them and
// the update's math. An Optimizer
//   - names itself (name(): "adamw", what checkpoints record and a command line writes;
//     display_name(): "AdamW", what tables print);
//   - names its per-parameter state tensors (state_names(): AdamW {"m", "v"}, SGD {"momentum"},
//     Adafactor {"row_var", "col_var", "variance"}) and gives each one's shape for a parameter
//     tensor of a given shape (state_shape(i, shape): AdamW's m and v are the parameter's shape;
//     Adafactor's row_var of a matrix (R, C) is (R, 1), its variance of a matrix is empty: 0
//     elements). The trainers lay each state tensor out per group from these shapes
//     (optim/state_layout.hpp), the planner counts their bytes, checkpoints save one tensor per
//     name and parameter ("<state>.<parameter name>", empty ones skipped);
//   - holds its hyperparameters (hparams_json() writes them for trainer_state.json);
//   - updates one parameter tensor on the host (update(pool, p, g, state, step, grad_scale), for
//     float and double; it may split the work over the pool's threads) and on a backend's device
//     through optimizer_kernels<O, B>::update(stream, o, p, g, state, step) (optim/device_update.hpp:
//     on the CPU backend every optimizer's host update runs as a task on the stream; on CUDA each
//     optimizer declares its own cuda_update, defined with its kernel under kernels/cuda/).
//     OptimizerOn<O, B> is Optimizer<O> with that device update.
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

#include <strata/core/error.hpp>              // strata::error
#include <strata/core/shape.hpp>              // shape
#include <strata/optim/host_thread_pool.hpp>  // host_thread_pool

#include <nlohmann/json.hpp>  // nlohmann::json

#include <concepts>     // std::convertible_to, std::copyable, std::same_as
#include <cstddef>      // std::size_t
#include <initializer_list>  // std::initializer_list
#include <span>         // std::span
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace strata {

// What one update of one parameter tensor needs besides its tensors.
struct optimizer_step {
    double lr = 0;      // this step's learning rate
    long step = 1;      // 1-based number of this update, the trainer's count (AdamW's bias corrections)
    bool decay = true;  // weight decay on this tensor (param_spec::decay: 2-D weights and embeddings)
    // The parameter tensor's shape (param_spec::shape): an optimizer that factors its state
    // (Adafactor) reads it; a scalar shape (the default) stands for a vector of the span's length.
    strata::shape shape{};
};

// One parameter tensor's state on the host: one span per state tensor, in state_names() order,
// each as long as state_shape(i, the parameter's shape) says.
template <class R>
using optimizer_state = std::span<const std::span<R>>;

template <class O>
concept Optimizer = std::copyable<O> &&
                    requires(const O& o, host_thread_pool& pool, std::span<float> pf, std::span<const float> gf,
                             optimizer_state<float> sf, std::span<double> pd, std::span<const double> gd,
                             optimizer_state<double> sd, const optimizer_step& k, const shape& s, std::size_t i) {
                        { o.name() } -> std::convertible_to<std::string_view>;
                        { o.display_name() } -> std::convertible_to<std::string_view>;
                        { o.state_names() } -> std::convertible_to<std::span<const std::string_view>>;
                        { o.state_shape(i, s) } -> std::same_as<shape>;
                        { o.hparams_json() } -> std::same_as<nlohmann::json>;
                        o.update(pool, pf, gf, sf, k, 1.0f);
                        o.update(pool, pd, gd, sd, k, 1.0);
                    };

namespace detail {
// A hyperparameter object's keys, each one of `known`, or a refusal naming the optimizer.
inline void check_hparam_keys(std::string_view optimizer, const nlohmann::json& h,
                              std::initializer_list<std::string_view> known) {
    if (h.is_null()) return;
    if (!h.is_object())
        throw error(std::string(optimizer) + ": hyperparameters must be an object of name: value, got " + h.dump());
    for (const auto& [key, value] : h.items()) {
        bool ok = false;
        std::string names;
        for (std::string_view k : known) {
            ok = ok || key == k;
            names += (names.empty() ? "" : ", ") + std::string(k);
        }
        if (!ok)
            throw error(std::string(optimizer) + " has no hyperparameter '" + key + "'", "its hyperparameters: " + names);
    }
}
// h[key] as T, or `fallback` where h has no such key.
template <class T>
T hparam_or(const nlohmann::json& h, std::string_view key, T fallback) {
    if (h.is_null() || !h.contains(key)) return fallback;
    return h.at(key).template get<T>();
}
}  // namespace detail

// "AdamW m, v", "SGD momentum": the optimizer's state as tables and messages name it.
inline std::string state_label(std::string_view display_name, std::span<const std::string_view> states) {
    std::string out(display_name);
    for (std::size_t i = 0; i < states.size(); ++i) out += (i == 0 ? " " : ", ") + std::string(states[i]);
    return out;
}

}  // namespace strata
