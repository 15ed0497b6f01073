// ops<cuda_backend> (nn/cuda_ops.hpp), attention's forward: the flash-style causal kernel (one
// instance per padded head size) and the decode kernel against a KV cache.
// Adding a kernel: the recipe at the top of src/cuda/elementwise.cu.
#include <strata/kernels/cuda/attention.cuh>         // attention_forward
#include <strata/kernels/cuda/attention_decode.cuh>  // attention_decode
#include <strata/nn/cuda_ops.hpp>                    // ops<cuda_backend>

namespace strata {

namespace kernels::cuda {
// The one copy of each kernel launcher this file calls (the headers declare them extern).
STRATA_CUDA_ATTENTION_FORWARD_INSTANCES(template)
STRATA_CUDA_ATTENTION_DECODE_INSTANCES(template)
}  // namespace kernels::cuda

void ops<cuda_backend>::attention_forward(stream& s, float* out, float* saved, const float* qkv, size B, size T,
                                          size C, size NH) {
    cuda::trace_span span(s, "attention_forward");
    kernels::cuda::attention_forward(out, saved, qkv, B, T, C, NH, s.native());
}

void ops<cuda_backend>::attention_decode(stream& s, float* out, const float* q, size q_stride, const float* kv,
                                         size pos, size n, size NH, size NKV, size HS) {
    cuda::trace_span span(s, "attention_decode");
    kernels::cuda::attention_decode(out, q, q_stride, kv, pos, n, NH, NKV, HS, s.native());
}

}  // namespace strata
