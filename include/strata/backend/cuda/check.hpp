// cuda_check: turns a CUDA runtime status into a strata::error naming the call and the reason.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <cuda_runtime.h>  // cudaError_t, cudaGetErrorString

#include <string>  // std::string

namespace strata::cuda {

inline void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess)
        throw error(std::string("CUDA: ") + what + " failed: " + cudaGetErrorName(status) + " (" +
                        cudaGetErrorString(status) + ")",
                    status == cudaErrorMemoryAllocation ? "lower the device budget or the batch size"
                                                        : "check the GPU with nvidia-smi");
}

// Number of usable GPUs; 0 when there is no GPU or no driver (e.g. on a CI machine with nvcc).
inline int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no device" status
        return 0;
    }
    return n;
}

}  // namespace strata::cuda
