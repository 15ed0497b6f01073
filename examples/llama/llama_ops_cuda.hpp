// llama_ops<cuda_backend>: the Llama block's own kernels as asynchronous launches on a CUDA stream.
//
// Declarations only, in plain C++, as strata's nn/cuda_ops.hpp: the definitions (the kernels of
// kernels_cuda.cuh) are compiled once, by nvcc, in llama_ops_cuda.cu (the CMake target
// strata_llama_cuda_ops), so code that runs llama_block<float, cuda_backend> compiles with g++.
// Include this header where the block is instantiated for cuda_backend; a CPU-only program never
// includes it. It also brings strata's ops<cuda_backend>, the block's GEMMs and attention.
//
// Precision: float only (llama_block<double, cuda_backend> does not compile: no overload).
// Deterministic: the same inputs give the same bits. Backward ops accumulate (+=); rmsnorm's dinp
// may be null.
//
// Glossary: B batch, T time, C channels, NH heads, N number of elements.
#pragma once

#include "llama_ops.hpp"  // llama_ops (the primary template), llama_ops<cpu_backend>

#include <strata/backend/cuda_backend.hpp>  // strata::cuda_backend
#include <strata/nn/cuda_ops.hpp>             // strata::ops<cuda_backend> (definitions: strata_cuda_ops)

#include <cstddef>  // std::size_t

namespace llama {

template <>
struct llama_ops<strata::cuda_backend> {
    using stream = strata::cuda_backend::stream;
    using size = std::size_t;

    static void rmsnorm_forward(stream& s, float* out, float* rstd, const float* inp, const float* weight, size B,
                                size T, size C, double eps);
    static void rmsnorm_backward(stream& s, float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const float* rstd, size B, size T, size C);
    static void rope_forward(stream& s, float* out, const float* qkv, size B, size T, size C, size NH,
                             const kernels::rope_params& theta);
    static void rope_backward(stream& s, float* dqkv, const float* dout, size B, size T, size C, size NH,
                              const kernels::rope_params& theta);
    static void rope_rotate(stream& s, float* x, size rows, size stride, size heads, size HS, size first,
                            const kernels::rope_params& theta);
    static void expand_kv_forward(stream& s, float* out, const float* qkv, size B, size T, size NH, size NKV, size HS);
    static void expand_kv_backward(stream& s, float* dqkv, const float* dout, size B, size T, size NH, size NKV,
                                   size HS);
    static void swiglu_forward(stream& s, float* out, const float* gate, const float* up, size N);
    static void swiglu_backward(stream& s, float* dgate, float* dup, const float* dout, const float* gate,
                                const float* up, size N);
};

}  // namespace llama
