// ops<cuda_backend> (nn/cuda_ops.hpp), the GEMM family: matmul and lm_head forward and backward
// through cuBLAS, the bias kernels around them (the MLP's GELU fused into its bias pass), and the
// process-wide TF32 switch.
// Adding a kernel: the recipe at the top of src/cuda/elementwise.cu.
#include <strata/backend/cuda/check.hpp>          // cuda::check
#include <strata/kernels/cuda/elementwise.cuh>    // add_bias, column_sum_accumulate
#include <strata/kernels/cuda/gelu.cuh>           // bias_gelu_forward
#include <strata/kernels/cuda/launch.cuh>         // check_launch, ceil_div
#include <strata/nn/cuda_ops.hpp>                 // ops<cuda_backend>

#include <cublas_v2.h>  // cublasSgemm, cublasSetMathMode

#include <atomic>   // std::atomic
#include <climits>  // INT_MAX
#include <string>   // std::string, std::to_string

namespace strata {

namespace detail::cuda_ops {
namespace {

std::atomic<bool> tf32_on{false};

void check_cublas(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw error(std::string("cuBLAS: ") + what + " failed: " + cublasGetStatusString(status),
                    status == CUBLAS_STATUS_ALLOC_FAILED ? "lower the device budget or the batch size"
                                                         : "report the shapes of the failing GEMM");
}

// One cuBLAS handle for the process (one GPU), created on first use. Its stream and math mode
// are set before every call, so ops on different streams each run in their own stream's order.
cublasHandle_t blas(cudaStream_t stream) {
    static cublasHandle_t handle = [] {
        cublasHandle_t h = nullptr;
        check_cublas(cublasCreate(&h), "cublasCreate");
        return h;
    }();
    check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
    check_cublas(cublasSetMathMode(handle, tf32_on.load() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                 "cublasSetMathMode");
    return handle;
}

int gemm_dim(std::size_t n, const char* what) {
    if (n > static_cast<std::size_t>(INT_MAX))
        throw error(std::string("GEMM dimension ") + what + " = " + std::to_string(n) + " exceeds cuBLAS's int range",
                    "lower the micro-batch size or the sequence length");
    return static_cast<int>(n);
}

// Column-major SGEMM: C (m x n) = alpha * op(A) * op(B) + beta * C. Row-major callers pass their
// matrices transposed (a row-major (r, c) matrix is a column-major (c, r) one).
void sgemm(cudaStream_t stream, bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
           const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc) {
    const float alpha = 1.0f;
    check_cublas(cublasSgemm(blas(stream), trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                             gemm_dim(m, "m"), gemm_dim(n, "n"), gemm_dim(k, "k"), &alpha, A, gemm_dim(lda, "lda"),
                             B, gemm_dim(ldb, "ldb"), &beta, C, gemm_dim(ldc, "ldc")),
                 "cublasSgemm");
}

}  // namespace
}  // namespace detail::cuda_ops

void ops<cuda_backend>::set_tf32(bool on) { detail::cuda_ops::tf32_on.store(on); }
bool ops<cuda_backend>::tf32() { return detail::cuda_ops::tf32_on.load(); }

// Conv1D layout: out (BT, OC) = inp (BT, C) @ w (C, OC) + bias; column-major: out^T = w^T inp^T.
void ops<cuda_backend>::matmul_forward(stream& s, float* out, const float* inp, const float* w, const float* bias,
                                       size B, size T, size C, size OC) {
    cuda::trace_span span(s, "matmul_forward");
    const size BT = B * T;
    detail::cuda_ops::sgemm(s.native(), false, false, OC, BT, C, w, OC, inp, C, 0.0f, out, OC);
    if (bias) kernels::cuda::add_bias(out, bias, BT, OC, s.native());
}
// pre = inp @ w + bias as matmul_forward, then out = gelu(pre): the bias and the GELU in one pass
// after the GEMM (kernels/cuda/gelu.cuh: bias_gelu_forward), the bits of matmul_forward then
// gelu_forward.
void ops<cuda_backend>::matmul_gelu_forward(stream& s, float* pre, float* out, const float* inp, const float* w,
                                            const float* bias, size B, size T, size C, size OC) {
    cuda::trace_span span(s, "matmul_gelu_forward");
    const size BT = B * T;
    detail::cuda_ops::sgemm(s.native(), false, false, OC, BT, C, w, OC, inp, C, 0.0f, pre, OC);
    kernels::cuda::bias_gelu_forward(pre, out, bias, BT, OC, s.native());
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

}  // namespace strata
