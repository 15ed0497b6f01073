// The one CUDA translation unit of strata: ops<cuda_backend>'s kernels and cuBLAS calls.
// strata::cuda adds this file to every target that links it; see nn/cuda_ops.hpp.
#include <strata/nn/cuda_ops_impl.cuh>  // ops<cuda_backend> definitions
