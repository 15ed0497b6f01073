// ops<cuda_backend> (nn/cuda_ops.hpp), the row-wise family: kernels that work one (B, T) row at a
// time: the embeddings, layernorm and the cross-entropy loss, each forward and backward.
// Adding a kernel: the recipe at the top of src/cuda/elementwise.cu.
#include <strata/kernels/cuda/cross_entropy.cuh>  // cross_entropy_forward, _backward, _forward_backward
#include <strata/kernels/cuda/embedding.cuh>      // embedding_forward, embedding_backward
#include <strata/kernels/cuda/layernorm.cuh>      // layernorm_*, residual_layernorm_forward
#include <strata/nn/cuda_ops.hpp>                 // ops<cuda_backend>

namespace strata {

namespace kernels::cuda {
// The one copy of each kernel launcher this file calls (the headers declare them extern).
STRATA_CUDA_EMBEDDING_INSTANCES(template)
STRATA_CUDA_LAYERNORM_INSTANCES(template)
STRATA_CUDA_CROSS_ENTROPY_INSTANCES(template)
}  // namespace kernels::cuda

void ops<cuda_backend>::embedding_forward(stream& s, float* out, const std::int32_t* tokens, const float* wte,
                                          const float* wpe, size B, size T, size C, size V, size maxT) {
    cuda::trace_span span(s, "embedding_forward");
    kernels::cuda::embedding_forward(out, tokens, wte, wpe, B, T, C, V, maxT, s.native());
}
void ops<cuda_backend>::embedding_backward(stream& s, float* dwte, float* dwpe, const float* dout,
                                           const std::int32_t* tokens, size B, size T, size C, size V, size maxT) {
    cuda::trace_span span(s, "embedding_backward");
    kernels::cuda::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, V, maxT, s.native());
}

void ops<cuda_backend>::layernorm_forward(stream& s, float* out, float* mean, float* rstd, const float* inp,
                                          const float* w, const float* b, size B, size T, size C) {
    cuda::trace_span span(s, "layernorm_forward");
    kernels::cuda::layernorm_forward(out, mean, rstd, inp, w, b, B, T, C, s.native());
}
void ops<cuda_backend>::residual_layernorm_forward(stream& s, float* res, float* out, float* mean, float* rstd,
                                                   const float* a, const float* b, const float* w, const float* bias,
                                                   size B, size T, size C) {
    cuda::trace_span span(s, "residual_layernorm_forward");
    kernels::cuda::residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, B, T, C, s.native());
}
void ops<cuda_backend>::layernorm_backward(stream& s, float* dinp, float* dw, float* db, const float* mean,
                                           const float* rstd, const float* dout, const float* inp, const float* w,
                                           size B, size T, size C) {
    cuda::trace_span span(s, "layernorm_backward");
    kernels::cuda::layernorm_backward(dinp, dw, db, mean, rstd, dout, inp, w, B, T, C, s.native());
}

void ops<cuda_backend>::cross_entropy_forward(stream& s, float* losses, float* lse, const float* logits,
                                              const std::int32_t* targets, size B, size T, size V) {
    cuda::trace_span span(s, "cross_entropy_forward");
    kernels::cuda::cross_entropy_forward(losses, lse, logits, targets, B, T, V, s.native());
}
void ops<cuda_backend>::cross_entropy_forward_backward(stream& s, float* losses, float* lse, float* dlogits,
                                                       const float* logits, const std::int32_t* targets,
                                                       double scale, size B, size T, size V) {
    cuda::trace_span span(s, "cross_entropy_forward_backward");
    kernels::cuda::cross_entropy_forward_backward(losses, lse, dlogits, logits, targets, static_cast<float>(scale), B,
                                                  T, V, s.native());
}
void ops<cuda_backend>::cross_entropy_backward(stream& s, float* dlogits, const float* lse, const float* logits,
                                               const std::int32_t* targets, double scale, size B, size T, size V) {
    cuda::trace_span span(s, "cross_entropy_backward");
    kernels::cuda::cross_entropy_backward(dlogits, lse, logits, targets, static_cast<float>(scale), B, T, V,
                                          s.native());
}

}  // namespace strata
