// An optimizer's update on a backend's device: optimizer_kernels<O, B>::update(stream, o, p, g, n,
// state, step) queues the update of one parameter tensor of n elements (p, g and the state
// tensors' device addresses, one per state_names() entry, each as long as state_shape says) on
// the stream. The trainers call it for device-homed groups; the host-homed ones go through
// O::update on the host threads.
//
// - The CPU backend (any backend whose streams are cpu::stream): one definition for every
//   optimizer, its host update on one thread as a task of the stream (below). Bitwise the host update's, since an Optimizer's bits do not depend on
//   its thread count.
// - CUDA: one definition for every optimizer too (optim/cuda_update.hpp), calling the
//   optimizer's own cuda_update(o, stream, p, g, state, step), which its header declares and its
//   kernel header under kernels/cuda/ defines (instantiated once, in src/cuda/optim.cu).
// - A backend or an optimizer with other needs specializes optimizer_kernels<O, B> fully (a test's
//   toy optimizer does, on CUDA, with ops<cuda_backend>'s element-wise ops).
#pragma once

#include <strata/backend/cpu_backend.hpp>    // cpu_backend, cpu::stream
#include <strata/core/shape.hpp>             // shape
#include <strata/optim/host_thread_pool.hpp> // host_thread_pool
#include <strata/optim/optimizer.hpp>        // Optimizer, optimizer_step, optimizer_state

#include <concepts>  // std::same_as
#include <cstddef>  // std::size_t
#include <span>     // std::span
#include <vector>   // std::vector

namespace strata {

// The shape an update is for: optimizer_step::shape, or a vector of n where that is a scalar shape.
inline shape parameter_shape(const optimizer_step& k, std::size_t n) {
    return k.shape.rank() == 0 ? shape{n} : k.shape;
}

// Every optimizer on a backend whose streams are CPU streams (cpu_backend, and backends built on
// it): its host update, on one thread, as a task of the stream. Other backends specialize this
// (optim/cuda_update.hpp).
template <class O, class B>
struct optimizer_kernels {
    template <class R>
        requires std::same_as<typename B::stream, cpu::stream>
    static void update(cpu::stream& s, const O& o, R* p, const R* g, std::size_t n, std::span<R* const> state,
                       const optimizer_step& k) {
        s.enqueue([o, p, g, n, k, state = std::vector<R*>(state.begin(), state.end())] {
            thread_local host_thread_pool one_thread(1);
            const shape param = parameter_shape(k, n);
            std::vector<std::span<R>> parts(state.size());
            for (std::size_t i = 0; i < state.size(); ++i) parts[i] = {state[i], o.state_shape(i, param).numel()};
            optimizer_step step = k;
            step.shape = param;
            o.update(one_thread, std::span<R>(p, n), std::span<const R>(g, n), optimizer_state<R>(parts), step);
        }, "optimizer");
    }
};

// The update of one parameter tensor by optimizer o on backend B's stream s.
template <class B, Optimizer O, class R>
void device_update(typename B::stream& s, const O& o, R* p, const R* g, std::size_t n, std::span<R* const> state,
                   const optimizer_step& k) {
    optimizer_kernels<O, B>::update(s, o, p, g, n, state, k);
}

}  // namespace strata
