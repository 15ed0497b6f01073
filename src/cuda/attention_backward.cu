// ops<cuda_backend> (nn/cuda_ops.hpp), attention's backward: the dk/dv and dq kernels (one
// instance each per padded head size), the largest part of strata's device code.
// Adding a kernel: the recipe at the top of src/cuda/elementwise.cu.
#include <strata/kernels/cuda/attention.cuh>  // attention_backward
#include <strata/nn/cuda_ops.hpp>             // ops<cuda_backend>

namespace strata {

namespace kernels::cuda {
// The one copy of each kernel launcher this file calls (the headers declare them extern).
STRATA_CUDA_ATTENTION_BACKWARD_INSTANCES(template)
}  // namespace kernels::cuda

void ops<cuda_backend>::attention_backward(stream& s, float* dqkv, const float* saved, const float* dout,
                                           const float* out, const float* qkv, size B, size T, size C, size NH) {
    cuda::trace_span span(s, "attention_backward");
    kernels::cuda::attention_backward(dqkv, saved, dout, out, qkv, B, T, C, NH, s.native());
}

}  // namespace strata
