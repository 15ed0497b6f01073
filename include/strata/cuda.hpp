// strata with the CUDA backend. Link strata::cuda (CUDA::cudart, CUDA::cublas).
#pragma once

#include <strata/backend/cuda_backend.hpp>  // cuda_backend
#include <strata/strata.hpp>                // everything backend-independent, cpu_backend
