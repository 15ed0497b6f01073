// offloaded_optimizer: the host side of streamed training's optimizer. It owns an Optimizer (its
// hyperparameters) and a pool of host threads; the trainer calls step_block once per parameter
// tensor as soon as that tensor's gradients have landed in host memory, while the GPU runs ahead.
// Each call gives the optimizer's own bits (AdamW: adamw_update<float>'s), whatever the thread
// count, so a streamed run reproduces the resident one bit for bit.
#pragma once

#include <strata/optim/host_thread_pool.hpp>  // host_thread_pool
#include <strata/optim/optimizer.hpp>         // Optimizer, optimizer_state, optimizer_step

#include <cstddef>  // std::size_t
#include <span>     // std::span
#include <utility>  // std::move

namespace strata {

template <Optimizer O>
class offloaded_optimizer {
public:
    // `threads` counts the calling thread too.
    explicit offloaded_optimizer(O optimizer, std::size_t threads = host_thread_pool::default_threads())
        : m_optimizer(std::move(optimizer)), m_pool(threads) {}

    // One update of one parameter tensor: p and each state tensor updated in place from g (not
    // written). `grad_scale` (1: none) is a gradient clip folded into the update. Calls from
    // several threads are safe and run one after another.
    template <class R>
    void step_block(std::span<R> p, std::span<const R> g, optimizer_state<R> state, const optimizer_step& k,
                    R grad_scale = R(1)) {
        m_optimizer.update(m_pool, p, g, state, k, grad_scale);
    }

    const O& optimizer() const noexcept { return m_optimizer; }
    std::size_t threads() const noexcept { return m_pool.size(); }

private:
    O m_optimizer;
    host_thread_pool m_pool;
};

}  // namespace strata
