// optimizer_kernels<O, cuda_backend> (optim/device_update.hpp): every optimizer's update on a CUDA
// stream through its own cuda_update(o, stream, p, g, state, step), found by argument-dependent
// lookup: declared in the optimizer's header (in plain C++), defined with its kernel under
// kernels/cuda/ and instantiated once, in src/cuda/optim.cu. float only, as every CUDA op.
// strata/cuda.hpp includes this header.
#pragma once

#include <strata/backend/cuda_backend.hpp>  // cuda_backend
#include <strata/optim/device_update.hpp>   // optimizer_kernels, parameter_shape
#include <strata/optim/optimizer.hpp>       // Optimizer, optimizer_step

#include <cstddef>  // std::size_t
#include <span>     // std::span

namespace strata {

template <Optimizer O>
struct optimizer_kernels<O, cuda_backend> {
    static void update(cuda_backend::stream& s, const O& o, float* p, const float* g, std::size_t n,
                       std::span<float* const> state, const optimizer_step& k) {
        optimizer_step step = k;
        step.shape = parameter_shape(k, n);
        cuda_update(o, s, p, g, state, step);
    }
};

}  // namespace strata
