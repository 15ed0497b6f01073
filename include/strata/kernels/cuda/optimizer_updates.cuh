// The CUDA updates of the registered optimizers (each optimizer's cuda_update, declared in its
// optim/ header and called through optimizer_kernels<O, cuda_backend>, optim/cuda_update.hpp):
// launches of their kernels (kernels/cuda/adamw.cuh, sgd.cuh, adafactor.cuh) on the stream, each
// bitwise the optimizer's host update.
//
// Non-inline definitions: include this in exactly one CUDA translation unit of a program
// (src/cuda/optim.cu does). An optimizer added to the registry adds its cuda_update here.
#pragma once

#include <strata/backend/cuda/stream.hpp>       // cuda::stream, cuda::trace_span
#include <strata/kernels/cuda/adafactor.cuh>    // adafactor
#include <strata/kernels/cuda/adamw.cuh>        // adamw
#include <strata/kernels/cuda/sgd.cuh>          // sgd
#include <strata/optim/optimizers.hpp>          // adamw_optimizer, sgd_optimizer, adafactor_optimizer

#include <span>  // std::span

namespace strata {

void cuda_update(const adamw_optimizer& o, cuda::stream& s, float* p, const float* g, std::span<float* const> state,
                 const optimizer_step& k) {
    cuda::trace_span span(s, "adamw");
    kernels::cuda::adamw(p, g, state[0], state[1], k.shape.numel(),
                         adamw_constants_for<float>(o.hparams(), k.lr, k.step, k.decay), s.native());
}

void cuda_update(const sgd_optimizer& o, cuda::stream& s, float* p, const float* g, std::span<float* const> state,
                 const optimizer_step& k) {
    cuda::trace_span span(s, "sgd");
    kernels::cuda::sgd(p, g, state[0], k.shape.numel(), sgd_constants_for<float>(o.hparams(), k.lr, k.decay),
                       s.native());
}

void cuda_update(const adafactor_optimizer& o, cuda::stream& s, float* p, const float* g,
                 std::span<float* const> state, const optimizer_step& k) {
    cuda::trace_span span(s, "adafactor");
    const std::size_t n = k.shape.numel();
    kernels::cuda::adafactor(p, g, state[0], state[1], state[2], adafactor_view_of(k.shape, n),
                             adafactor_constants_for<float>(o.hparams(), k.lr, k.step, k.decay, n), s.native());
}

}  // namespace strata
