// What every CUDA kernel file of strata shares: grid arithmetic and the launch check.
//
// Glossary of kernels/cuda/: B batch, T time, C channels, V vocab, NH heads, HS head size, N elements.
// Launchers take the stream last and return at once; they throw strata::error when the launch
// itself fails (bad configuration), never wait for the GPU.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <cuda_runtime.h>  // cudaGetLastError, cudaGetErrorString

#include <cstddef>  // std::size_t
#include <string>   // std::string

namespace strata::kernels::cuda {

constexpr unsigned ceil_div(std::size_t n, std::size_t d) { return static_cast<unsigned>((n + d - 1) / d); }

// After a <<<...>>> launch: a configuration error (too many threads, too much shared memory)
// surfaces here, named by the kernel.
inline void check_launch(const char* kernel) {
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess)
        throw error(std::string("CUDA kernel ") + kernel + " failed to launch: " + cudaGetErrorString(status),
                    "a kernel's launch configuration does not fit this GPU; report the shapes used");
}

}  // namespace strata::kernels::cuda
