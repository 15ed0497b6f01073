// The definitions of ops<cuda_backend> (nn/cuda_ops.hpp): launches of the kernels of
// kernels/cuda/ and cuBLAS GEMMs, each on the op's stream, none of them waiting for the GPU.
//
// Include this in exactly one CUDA translation unit of a program (src/cuda_ops.cu does, and
// strata::cuda compiles it into every target that links it).
#pragma once

#include <strata/backend/cuda/check.hpp>         // cuda::check
#include <strata/kernels/cuda/adamw.cuh>         // adamw
#include <strata/kernels/cuda/attention.cuh>     // attention_forward, attention_backward
#include <strata/kernels/cuda/attention_backward.cuh>  // attention_backward_key_tiles, attention_backward_pick
#include <strata/kernels/cuda/attention_decode.cuh>  // attention_decode
#include <strata/kernels/cuda/cross_entropy.cuh> // cross_entropy_forward, cross_entropy_backward
#include <strata/kernels/cuda/elementwise.cuh>   // add_inplace, scale_inplace, residual_forward, column_sum_accumulate, sum_of_squares
#include <strata/kernels/cuda/embedding.cuh>     // embedding_forward, embedding_backward
#include <strata/kernels/cuda/gelu.cuh>          // gelu_forward, gelu_backward
#include <strata/kernels/cuda/launch.cuh>        // check_launch, ceil_div
#include <strata/kernels/cuda/sgd.cuh>           // sgd
#include <strata/kernels/cuda/layernorm.cuh>     // layernorm_forward, layernorm_backward
#include <strata/nn/cuda_ops.hpp>                // ops<cuda_backend>

#include <cublas_v2.h>  // cublasSgemm, cublasSetMathMode

#include <atomic>   // std::atomic
#include <climits>  // INT_MAX
#include <cstdint>  // std::uintptr_t
#include <string>   // std::string

namespace strata {

namespace detail::cuda_ops {

inline std::atomic<bool>& tf32_flag() {
    static std::atomic<bool> on{false};
    return on;
}

inline std::atomic<bool>& two_kernel_attention_flag() {
    static std::atomic<bool> on{false};
    return on;
}

// The attention backward ops<cuda_backend> runs for a shape (nn/cuda_ops.hpp): partials where its
// workspace fits the library's bound, else recompute; recompute too for shapes the key-tile
// kernels do not take (attention_backward then refuses them with its own message).
inline kernels::cuda::attention_backward_algo attention_algo(std::size_t B, std::size_t T, std::size_t C,
                                                             std::size_t NH) {
    using kernels::cuda::attention_backward_algo;
    if (two_kernel_attention_flag().load() || NH == 0 || C % NH != 0 || C / NH == 0 || C / NH > 128)
        return attention_backward_algo::recompute;
    return kernels::cuda::attention_backward_pick(B, T, NH, C / NH);
}
// The key-tile kernels want their workspace 256-byte aligned; ops' callers carve it from a
// float buffer, so it is asked this much larger and aligned here.
inline constexpr std::size_t attention_workspace_alignment = 256;

inline void check_cublas(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw error(std::string("cuBLAS: ") + what + " failed: " + cublasGetStatusString(status),
                    status == CUBLAS_STATUS_ALLOC_FAILED ? "lower the device budget or the batch size"
                                                         : "report the shapes of the failing GEMM");
}

// One cuBLAS handle for the process (one GPU), created on first use. Its stream and math mode
// are set before every call, so ops on different streams each run in their own stream's order.
inline cublasHandle_t blas(cudaStream_t stream) {
    static cublasHandle_t handle = [] {
        cublasHandle_t h = nullptr;
        check_cublas(cublasCreate(&h), "cublasCreate");
        return h;
    }();
    check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
    check_cublas(cublasSetMathMode(handle, tf32_flag().load() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                 "cublasSetMathMode");
    return handle;
}

inline int gemm_dim(std::size_t n, const char* what) {
    if (n > static_cast<std::size_t>(INT_MAX))
        throw error(std::string("GEMM dimension ") + what + " = " + std::to_string(n) + " exceeds cuBLAS's int range",
                    "lower the micro-batch size or the sequence length");
    return static_cast<int>(n);
}

// Column-major SGEMM: C (m x n) = alpha * op(A) * op(B) + beta * C. Row-major callers pass their
// matrices transposed (a row-major (r, c) matrix is a column-major (c, r) one).
inline void sgemm(cudaStream_t stream, bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                  const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta, float* C,
                  std::size_t ldc) {
    const float alpha = 1.0f;
    check_cublas(cublasSgemm(blas(stream), trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                             gemm_dim(m, "m"), gemm_dim(n, "n"), gemm_dim(k, "k"), &alpha, A, gemm_dim(lda, "lda"),
                             B, gemm_dim(ldb, "ldb"), &beta, C, gemm_dim(ldc, "ldc")),
                 "cublasSgemm");
}

// out (rows, OC) += bias (OC), broadcast over rows.
template <class Real>
__global__ void add_bias_kernel(Real* out, const Real* bias, std::size_t rows, std::size_t OC) {
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < rows * OC) out[i] += bias[i % OC];
}

}  // namespace detail::cuda_ops

void ops<cuda_backend>::set_tf32(bool on) { detail::cuda_ops::tf32_flag().store(on); }
bool ops<cuda_backend>::tf32() { return detail::cuda_ops::tf32_flag().load(); }

void ops<cuda_backend>::zero(stream& s, float* x, size n) {
    cuda::trace_span span(s, "zero");
    if (n) cuda::check(cudaMemsetAsync(x, 0, n * sizeof(float), s.native()), "cudaMemsetAsync (zero)");
}
void ops<cuda_backend>::copy(stream& s, float* dst, const float* src, size n) {
    cuda::trace_span span(s, "copy");
    if (n)
        cuda::check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s.native()),
                    "cudaMemcpyAsync (copy)");
}
void ops<cuda_backend>::add_inplace(stream& s, float* dst, const float* src, size n) {
    cuda::trace_span span(s, "add_inplace");
    kernels::cuda::add_inplace(dst, src, n, s.native());
}
void ops<cuda_backend>::scale_inplace(stream& s, float* x, double factor, size n) {
    cuda::trace_span span(s, "scale_inplace");
    kernels::cuda::scale_inplace(x, static_cast<float>(factor), n, s.native());
}
ops<cuda_backend>::size ops<cuda_backend>::sum_of_squares_workspace(size n) {
    return kernels::cuda::sum_of_squares_workspace(n);
}
void ops<cuda_backend>::sum_of_squares(stream& s, double* out, double* workspace, const float* x, size n) {
    cuda::trace_span span(s, "sum_of_squares");
    kernels::cuda::sum_of_squares(out, workspace, x, n, s.native());
}

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
void ops<cuda_backend>::layernorm_backward(stream& s, float* dinp, float* dw, float* db, const float* mean,
                                           const float* rstd, const float* dout, const float* inp, const float* w,
                                           size B, size T, size C) {
    cuda::trace_span span(s, "layernorm_backward");
    kernels::cuda::layernorm_backward(dinp, dw, db, mean, rstd, dout, inp, w, B, T, C, s.native());
}

// Conv1D layout: out (BT, OC) = inp (BT, C) @ w (C, OC) + bias; column-major: out^T = w^T inp^T.
void ops<cuda_backend>::matmul_forward(stream& s, float* out, const float* inp, const float* w, const float* bias,
                                       size B, size T, size C, size OC) {
    cuda::trace_span span(s, "matmul_forward");
    const size BT = B * T;
    detail::cuda_ops::sgemm(s.native(), false, false, OC, BT, C, w, OC, inp, C, 0.0f, out, OC);
    if (bias) {
        const size n = BT * OC;
        detail::cuda_ops::add_bias_kernel<<<kernels::cuda::ceil_div(n, 256), 256, 0, s.native()>>>(out, bias, BT, OC);
        kernels::cuda::check_launch("add_bias");
    }
}
// dinp (BT, C) += dout (BT, OC) @ w^T; dw (C, OC) += inp^T @ dout; dbias += column sums of dout.
// Each of dinp, dw (a frozen weight) and dbias may be null: its work is skipped.
void ops<cuda_backend>::matmul_backward(stream& s, float* dinp, float* dw, float* dbias, const float* dout,
                                        const float* inp, const float* w, size B, size T, size C, size OC) {
    cuda::trace_span span(s, "matmul_backward");
    const size BT = B * T;
    if (dinp) detail::cuda_ops::sgemm(s.native(), true, false, C, BT, OC, w, OC, dout, OC, 1.0f, dinp, C);
    if (dw) detail::cuda_ops::sgemm(s.native(), false, true, OC, C, BT, dout, OC, inp, C, 1.0f, dw, OC);
    if (dbias) kernels::cuda::column_sum_accumulate(dbias, dout, BT, OC, s.native());
}
// logits (BT, V) = inp (BT, C) @ wte^T, wte (V, C).
void ops<cuda_backend>::lm_head_forward(stream& s, float* logits, const float* inp, const float* wte, size B, size T,
                                        size C, size V) {
    cuda::trace_span span(s, "lm_head_forward");
    detail::cuda_ops::sgemm(s.native(), true, false, V, B * T, C, wte, C, inp, C, 0.0f, logits, V);
}
// dinp (BT, C) += dlogits (BT, V) @ wte; dwte (V, C) += dlogits^T @ inp.
void ops<cuda_backend>::lm_head_backward(stream& s, float* dinp, float* dwte, const float* dlogits, const float* inp,
                                         const float* wte, size B, size T, size C, size V) {
    cuda::trace_span span(s, "lm_head_backward");
    const size BT = B * T;
    detail::cuda_ops::sgemm(s.native(), false, false, C, BT, V, wte, C, dlogits, V, 1.0f, dinp, C);
    if (dwte) detail::cuda_ops::sgemm(s.native(), false, true, C, V, BT, inp, C, dlogits, V, 1.0f, dwte, C);  // null: frozen
}

void ops<cuda_backend>::attention_forward(stream& s, float* out, float* saved, const float* qkv, size B, size T,
                                          size C, size NH) {
    cuda::trace_span span(s, "attention_forward");
    kernels::cuda::attention_forward(out, saved, qkv, B, T, C, NH, s.native());
}
ops<cuda_backend>::size ops<cuda_backend>::attention_workspace(size B, size T, size C, size NH) {
    using namespace detail::cuda_ops;
    const auto algo = attention_algo(B, T, C, NH);
    if (algo == kernels::cuda::attention_backward_algo::recompute) return 0;
    const size bytes = kernels::cuda::attention_backward_workspace(algo, B, T, NH, C / NH);
    return (bytes + attention_workspace_alignment) / sizeof(float) + 1;
}
void ops<cuda_backend>::attention_backward(stream& s, float* dqkv, float* workspace, const float* saved,
                                           const float* dout, const float* out, const float* qkv, size B, size T,
                                           size C, size NH) {
    using namespace detail::cuda_ops;
    cuda::trace_span span(s, "attention_backward");
    const auto algo = attention_algo(B, T, C, NH);
    if (algo == kernels::cuda::attention_backward_algo::recompute) {
        kernels::cuda::attention_backward(dqkv, saved, dout, out, qkv, B, T, C, NH, s.native());
        return;
    }
    if (workspace == nullptr)
        throw error("attention_backward (cuda): B=" + std::to_string(B) + ", T=" + std::to_string(T) + ", C=" +
                        std::to_string(C) + ", NH=" + std::to_string(NH) + " takes " +
                        std::to_string(attention_workspace(B, T, C, NH)) + " floats of workspace, none was given",
                    "pass ops<cuda_backend>::attention_workspace(B, T, C, NH) floats (a Layer counts them in its "
                    "workspace_floats)");
    const auto address = reinterpret_cast<std::uintptr_t>(workspace);
    const std::uintptr_t skip = (attention_workspace_alignment - address % attention_workspace_alignment) %
                                attention_workspace_alignment;
    const size bytes = attention_workspace(B, T, C, NH) * sizeof(float) - skip;
    kernels::cuda::attention_backward_key_tiles(dqkv, saved, dout, out, qkv, B, T, NH, NH, C / NH, algo,
                                                reinterpret_cast<unsigned char*>(workspace) + skip, bytes,
                                                s.native());
}
void ops<cuda_backend>::use_two_kernel_attention_backward() { detail::cuda_ops::two_kernel_attention_flag().store(true); }
bool ops<cuda_backend>::two_kernel_attention_backward() { return detail::cuda_ops::two_kernel_attention_flag().load(); }

void ops<cuda_backend>::attention_decode(stream& s, float* out, const float* q, size q_stride, const float* kv,
                                         size pos, size n, size NH, size NKV, size HS) {
    cuda::trace_span span(s, "attention_decode");
    kernels::cuda::attention_decode(out, q, q_stride, kv, pos, n, NH, NKV, HS, s.native());
}
void ops<cuda_backend>::copy_rows(stream& s, float* dst, size dst_stride, const float* src, size src_stride,
                                  size rows, size cols) {
    cuda::trace_span span(s, "copy_rows");
    if (rows && cols)
        cuda::check(cudaMemcpy2DAsync(dst, dst_stride * sizeof(float), src, src_stride * sizeof(float),
                                      cols * sizeof(float), rows, cudaMemcpyDeviceToDevice, s.native()),
                    "cudaMemcpy2DAsync (copy_rows)");
}

void ops<cuda_backend>::gelu_forward(stream& s, float* out, const float* inp, size N) {
    cuda::trace_span span(s, "gelu_forward");
    kernels::cuda::gelu_forward(out, inp, N, s.native());
}
void ops<cuda_backend>::gelu_backward(stream& s, float* dinp, const float* dout, const float* inp, size N) {
    cuda::trace_span span(s, "gelu_backward");
    kernels::cuda::gelu_backward(dinp, dout, inp, N, s.native());
}
void ops<cuda_backend>::residual_forward(stream& s, float* out, const float* a, const float* b, size N) {
    cuda::trace_span span(s, "residual_forward");
    kernels::cuda::residual_forward(out, a, b, N, s.native());
}

void ops<cuda_backend>::cross_entropy_forward(stream& s, float* losses, float* lse, const float* logits,
                                              const std::int32_t* targets, size B, size T, size V) {
    cuda::trace_span span(s, "cross_entropy_forward");
    kernels::cuda::cross_entropy_forward(losses, lse, logits, targets, B, T, V, s.native());
}
void ops<cuda_backend>::cross_entropy_backward(stream& s, float* dlogits, const float* lse, const float* logits,
                                               const std::int32_t* targets, double scale, size B, size T, size V) {
    cuda::trace_span span(s, "cross_entropy_backward");
    kernels::cuda::cross_entropy_backward(dlogits, lse, logits, targets, static_cast<float>(scale), B, T, V,
                                          s.native());
}

void ops<cuda_backend>::adamw(stream& s, float* p, const float* g, float* m, float* v, size n, adamw_hparams h,
                              double lr, long step, bool decay) {
    cuda::trace_span span(s, "adamw");
    kernels::cuda::adamw(p, g, m, v, n, adamw_constants_for<float>(h, lr, step, decay), s.native());
}

void ops<cuda_backend>::sgd(stream& s, float* p, const float* g, float* b, size n, sgd_hparams h, double lr,
                            bool decay) {
    cuda::trace_span span(s, "sgd");
    kernels::cuda::sgd(p, g, b, n, sgd_constants_for<float>(h, lr, decay), s.native());
}

}  // namespace strata
