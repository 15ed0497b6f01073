// strata with the CUDA backend. Link strata::cuda (CUDA::cudart, CUDA::cublas).
#pragma once

#include <strata/backend/cuda_backend.hpp>  // cuda_backend
#include <strata/nn/cuda_ops.hpp>             // ops<cuda_backend> (definitions: src/cuda/*.cu)
#include <strata/optim/cuda_update.hpp>       // optimizer_kernels<O, cuda_backend> (definitions: src/cuda/*.cu)
#include <strata/strata.hpp>                // everything backend-independent, cpu_backend
