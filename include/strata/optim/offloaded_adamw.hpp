// offloaded_adamw: the offloaded optimizer (optim/offloaded_optimizer.hpp) running AdamW, with
// AdamW's own step_block (m and v by name). Each call is bitwise equal to adamw_update<float> on
// the same block.
#pragma once

#include <strata/optim/adamw.hpp>                // adamw_hparams
#include <strata/optim/adamw_simd.hpp>           // adamw_path
#include <strata/optim/host_thread_pool.hpp>     // host_thread_pool
#include <strata/optim/offloaded_optimizer.hpp>  // offloaded_optimizer
#include <strata/optim/optimizers.hpp>           // adamw_optimizer

#include <array>    // std::array
#include <cstddef>  // std::size_t
#include <span>     // std::span

namespace strata {

class offloaded_adamw : public offloaded_optimizer<adamw_optimizer> {
public:
    // `threads` counts the calling thread too; `path` forces an implementation (tests, benchmarks).
    // Throws at construction for invalid hyperparameters or a forced path this CPU lacks.
    explicit offloaded_adamw(const adamw_hparams& hparams = {},
                             std::size_t threads = host_thread_pool::default_threads(),
                             adamw_path path = adamw_path::automatic)
        : offloaded_optimizer(adamw_optimizer(hparams, path), threads) {}

    using offloaded_optimizer::step_block;
    // One AdamW step of one parameter tensor: p, m, v updated in place from g. `step` is 1-based;
    // `decay` false skips weight decay (biases, layernorm gains). `grad_scale` (1: none) is a
    // gradient clip folded into the update: bitwise what scaling g in place first would give, but
    // without that pass over g (g is not written).
    void step_block(std::span<float> p, std::span<const float> g, std::span<float> m, std::span<float> v, double lr,
                    long step, bool decay, float grad_scale = 1.0f) {
        const std::array<std::span<float>, 2> state{m, v};
        step_block(p, g, optimizer_state<float>(state), {.lr = lr, .step = step, .decay = decay}, grad_scale);
    }

    const adamw_hparams& hparams() const noexcept { return optimizer().hparams(); }
    adamw_path path() const noexcept { return optimizer().path(); }  // the concrete path, never automatic
};

}  // namespace strata
