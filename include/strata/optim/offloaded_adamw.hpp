// offloaded_adamw: the host-side optimizer of streamed training. It owns the AdamW hyperparameters
// and a pool of host threads; the streaming trainer calls step_block once per parameter tensor as
// soon as that tensor's gradients have landed in host memory, while the GPU runs the backward
// pass of earlier layers. Each call is bitwise equal to adamw_update<float> on the same block, so
// a streamed run reproduces the resident one bit for bit.
#pragma once

#include <strata/optim/adamw.hpp>             // adamw_hparams, validate
#include <strata/optim/adamw_simd.hpp>        // adamw_update_parallel, adamw_path, resolve
#include <strata/optim/host_thread_pool.hpp>  // host_thread_pool

#include <cstddef>  // std::size_t
#include <span>     // std::span

namespace strata {

class offloaded_adamw {
public:
    // `threads` counts the calling thread too; `path` forces an implementation (tests, benchmarks).
    // Throws at construction for invalid hyperparameters or a forced path this CPU lacks.
    explicit offloaded_adamw(const adamw_hparams& hparams = {},
                             std::size_t threads = host_thread_pool::default_threads(),
                             adamw_path path = adamw_path::automatic)
        : m_hparams(checked(hparams)), m_path(resolve(path)), m_pool(threads) {}

    // One AdamW step of one parameter tensor: p, m, v updated in place from g. `step` is 1-based;
    // `decay` false skips weight decay (biases, layernorm gains). `grad_scale` (1: none) is a
    // gradient clip folded into the update: bitwise what scaling g in place first would give, but
    // without that pass over g (g is not written). Calls from several threads are safe and run one
    // after another.
    void step_block(std::span<float> p, std::span<const float> g, std::span<float> m, std::span<float> v, double lr,
                    long step, bool decay, float grad_scale = 1.0f) {
        adamw_update_parallel(m_pool, p, g, m, v, m_hparams, lr, step, decay, m_path, grad_scale);
    }

    const adamw_hparams& hparams() const noexcept { return m_hparams; }
    adamw_path path() const noexcept { return m_path; }  // the concrete path, never automatic
    std::size_t threads() const noexcept { return m_pool.size(); }

private:
    static const adamw_hparams& checked(const adamw_hparams& h) {
        validate(h);
        return h;
    }

    adamw_hparams m_hparams;
    adamw_path m_path;
    host_thread_pool m_pool;
};

}  // namespace strata
