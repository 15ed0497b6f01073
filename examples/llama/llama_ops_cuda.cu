// The one CUDA translation unit of the Llama example: llama_ops<cuda_backend>'s definitions
// (llama_ops_cuda.hpp), each a launch of a kernel of kernels_cuda.cuh on the op's stream, none of
// them waiting for the GPU. CMake: strata_llama_cuda_ops.
#include "kernels_cuda.cuh"     // llama::kernels::cuda::*
#include "llama_ops_cuda.hpp"  // llama_ops<cuda_backend>

#include <strata/backend/cuda/stream.hpp>  // strata::cuda::trace_span

namespace llama {

using cuda_ops = llama_ops<strata::cuda_backend>;
namespace gpu = kernels::cuda;
using strata::cuda::trace_span;

void cuda_ops::rmsnorm_forward(stream& s, float* out, float* rstd, const float* inp, const float* weight, size B,
                               size T, size C, double eps) {
    trace_span span(s, "rmsnorm_forward");
    gpu::rmsnorm_forward(out, rstd, inp, weight, B, T, C, eps, s.native());
}
void cuda_ops::rmsnorm_backward(stream& s, float* dinp, float* dweight, const float* dout, const float* inp,
                                const float* weight, const float* rstd, size B, size T, size C) {
    trace_span span(s, "rmsnorm_backward");
    gpu::rmsnorm_backward<float>(dinp, dweight, dout, inp, weight, rstd, B, T, C, s.native());
}

void cuda_ops::rope_forward(stream& s, float* out, const float* qkv, size B, size T, size C, size NH,
                            const kernels::rope_params& theta) {
    trace_span span(s, "rope_forward");
    gpu::rope_forward(out, qkv, B, T, C, NH, theta, s.native());
}
void cuda_ops::rope_backward(stream& s, float* dqkv, const float* dout, size B, size T, size C, size NH,
                            const kernels::rope_params& theta) {
    trace_span span(s, "rope_backward");
    gpu::rope_backward(dqkv, dout, B, T, C, NH, theta, s.native());
}

void cuda_ops::rope_rotate(stream& s, float* x, size rows, size stride, size heads, size HS, size first,
                           const kernels::rope_params& theta) {
    trace_span span(s, "rope_rotate");
    gpu::rope_rotate(x, rows, stride, heads, HS, first, theta, s.native());
}

void cuda_ops::expand_kv_forward(stream& s, float* out, const float* qkv, size B, size T, size NH, size NKV, size HS) {
    trace_span span(s, "expand_kv_forward");
    gpu::expand_kv_forward(out, qkv, B, T, NH, NKV, HS, s.native());
}
void cuda_ops::expand_kv_backward(stream& s, float* dqkv, const float* dout, size B, size T, size NH, size NKV,
                                  size HS) {
    trace_span span(s, "expand_kv_backward");
    gpu::expand_kv_backward(dqkv, dout, B, T, NH, NKV, HS, s.native());
}

void cuda_ops::swiglu_forward(stream& s, float* out, const float* gate, const float* up, size N) {
    trace_span span(s, "swiglu_forward");
    gpu::swiglu_forward(out, gate, up, N, s.native());
}
void cuda_ops::swiglu_backward(stream& s, float* dgate, float* dup, const float* dout, const float* gate,
                               const float* up, size N) {
    trace_span span(s, "swiglu_backward");
    gpu::swiglu_backward(dgate, dup, dout, gate, up, N, s.native());
}

}  // namespace llama
