// The one CUDA translation unit of strata: ops<cuda_backend>'s kernels and cuBLAS calls, and the
// optimizers' CUDA updates. strata::cuda adds this file to every target that links it; see
// nn/cuda_ops.hpp and optim/cuda_update.hpp.
#include <strata/kernels/cuda/optimizer_updates.cuh>  // cuda_update of every registered optimizer
#include <strata/nn/cuda_ops_impl.cuh>                // ops<cuda_backend> definitions
