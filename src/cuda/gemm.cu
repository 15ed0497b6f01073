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
#include <vector>   // std::vector

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

std::atomic<bool> side_lane_on{true};

// The GEMMs' cuBLAS handles, one set per host thread and device: a cuBLAS handle belongs to the
// device current when it was made and must not be used by two host threads at once (the
// data-parallel trainer runs each rank on a thread of its own, on its own device). `main` runs an
// op's GEMMs on the op's stream (set before every call, with the math mode); `side`, with a stream
// of its own, runs a backward's weight gradient beside its input gradient (gradient_fork).
// Made on first use and kept for the thread's life.
struct gemm_lanes {
    cublasHandle_t main = nullptr;
    cublasHandle_t side = nullptr;
    cudaStream_t side_stream = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
};

gemm_lanes& lanes() {
    thread_local std::vector<gemm_lanes> per_device;
    int device = 0;
    cuda::check(cudaGetDevice(&device), "cudaGetDevice");
    if (per_device.size() <= static_cast<std::size_t>(device)) per_device.resize(static_cast<std::size_t>(device) + 1);
    gemm_lanes& l = per_device[static_cast<std::size_t>(device)];
    if (l.main == nullptr) check_cublas(cublasCreate(&l.main), "cublasCreate");
    return l;
}

cublasHandle_t configured(cublasHandle_t handle, cudaStream_t stream) {
    check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
    check_cublas(cublasSetMathMode(handle, tf32_on.load() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                 "cublasSetMathMode");
    return handle;
}
cublasHandle_t blas(cudaStream_t stream) { return configured(lanes().main, stream); }

// A backward's two gradients side by side: the weight gradient (and bias sums) on the side lane's
// stream, the input gradient on the op's, joined before the op's stream goes on. Both read only
// dout, inp and w and write different buffers; each GEMM runs the algorithm it runs alone, so the
// bits are those of the serial order. What it buys is the tails: a GEMM's last wave of tiles leaves
// multiprocessors idle that the other GEMM fills. The fork and join are two events recorded on
// the streams (reused: a wait takes the event's last record at the time it is enqueued).
class gradient_fork {
public:
    explicit gradient_fork(cudaStream_t stream) : m_stream(stream), m_lanes(lanes()) {
        gemm_lanes& l = m_lanes;
        if (l.side == nullptr) {
            check_cublas(cublasCreate(&l.side), "cublasCreate (side lane)");
            cuda::check(cudaStreamCreateWithFlags(&l.side_stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
            cuda::check(cudaEventCreateWithFlags(&l.fork, cudaEventDisableTiming), "cudaEventCreateWithFlags");
            cuda::check(cudaEventCreateWithFlags(&l.join, cudaEventDisableTiming), "cudaEventCreateWithFlags");
        }
        cuda::check(cudaEventRecord(l.fork, m_stream), "cudaEventRecord (gradient fork)");
        cuda::check(cudaStreamWaitEvent(l.side_stream, l.fork, 0), "cudaStreamWaitEvent (gradient fork)");
    }
    gradient_fork(const gradient_fork&) = delete;
    gradient_fork& operator=(const gradient_fork&) = delete;
    // Where an enqueue threw, the op's stream still waits for what the side lane has (the error
    // goes on up; the buffers the side lane reads stay alive at least as long as the op's stream
    // needs them).
    ~gradient_fork() {
        if (!m_joined) {
            cudaEventRecord(m_lanes.join, m_lanes.side_stream);
            cudaStreamWaitEvent(m_stream, m_lanes.join, 0);
        }
    }
    cudaStream_t side_stream() const { return m_lanes.side_stream; }
    cublasHandle_t side_blas() const { return configured(m_lanes.side, m_lanes.side_stream); }
    // The op's stream waits for the side lane's work.
    void join() {
        m_joined = true;
        cuda::check(cudaEventRecord(m_lanes.join, m_lanes.side_stream), "cudaEventRecord (gradient join)");
        cuda::check(cudaStreamWaitEvent(m_stream, m_lanes.join, 0), "cudaStreamWaitEvent (gradient join)");
    }

private:
    cudaStream_t m_stream;
    gemm_lanes& m_lanes;
    bool m_joined = false;
};

// A backward's input-gradient part (on the op's stream) and weight-gradient part (GEMMs on the
// handle, other kernels on the stream it is given): beside each other on the side lane where
// `both` says there are both to make and the side lane is on, else one after the other.
template <class InputPart, class WeightPart>
void both_gradients(cudaStream_t stream, bool both, InputPart input_part, WeightPart weight_part) {
    if (both && side_lane_on.load()) {
        gradient_fork fork(stream);
        weight_part(fork.side_blas(), fork.side_stream());
        input_part();
        fork.join();
        return;
    }
    input_part();
    weight_part(blas(stream), stream);
}

int gemm_dim(std::size_t n, const char* what) {
    if (n > static_cast<std::size_t>(INT_MAX))
        throw error(std::string("GEMM dimension ") + what + " = " + std::to_string(n) + " exceeds cuBLAS's int range",
                    "lower the micro-batch size or the sequence length");
    return static_cast<int>(n);
}

// Column-major SGEMM: C (m x n) = alpha * op(A) * op(B) + beta * C. Row-major callers pass their
// matrices transposed (a row-major (r, c) matrix is a column-major (c, r) one).
void sgemm(cublasHandle_t handle, bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
           const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc) {
    const float alpha = 1.0f;
    check_cublas(cublasSgemm(handle, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
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
    detail::cuda_ops::sgemm(detail::cuda_ops::blas(s.native()), false, false, OC, BT, C, w, OC, inp, C, 0.0f, out, OC);
    if (bias) kernels::cuda::add_bias(out, bias, BT, OC, s.native());
}
// pre = inp @ w + bias as matmul_forward, then out = gelu(pre): the bias and the GELU in one pass
// after the GEMM (kernels/cuda/gelu.cuh: bias_gelu_forward), the bits of matmul_forward then
// gelu_forward.
void ops<cuda_backend>::matmul_gelu_forward(stream& s, float* pre, float* out, const float* inp, const float* w,
                                            const float* bias, size B, size T, size C, size OC) {
    cuda::trace_span span(s, "matmul_gelu_forward");
    const size BT = B * T;
    detail::cuda_ops::sgemm(detail::cuda_ops::blas(s.native()), false, false, OC, BT, C, w, OC, inp, C, 0.0f, pre, OC);
    kernels::cuda::bias_gelu_forward(pre, out, bias, BT, OC, s.native());
}
// dinp (BT, C) += dout (BT, OC) @ w^T; dw (C, OC) += inp^T @ dout; dbias += column sums of dout.
// Each of dinp, dw (a frozen weight) and dbias may be null: its work is skipped. With both
// gradients to make, dw and dbias run on the side lane beside dinp (both_gradients).
void ops<cuda_backend>::matmul_backward(stream& s, float* dinp, float* dw, float* dbias, const float* dout,
                                        const float* inp, const float* w, size B, size T, size C, size OC) {
    using namespace detail::cuda_ops;
    cuda::trace_span span(s, "matmul_backward");
    const size BT = B * T;
    both_gradients(
        s.native(), dinp != nullptr && (dw || dbias),
        [&] {
            if (dinp) sgemm(blas(s.native()), true, false, C, BT, OC, w, OC, dout, OC, 1.0f, dinp, C);
        },
        [&](cublasHandle_t handle, cudaStream_t stream) {
            if (dw) sgemm(handle, false, true, OC, C, BT, dout, OC, inp, C, 1.0f, dw, OC);
            if (dbias) kernels::cuda::column_sum_accumulate(dbias, dout, BT, OC, stream);
        });
}
// logits (BT, V) = inp (BT, C) @ wte^T, wte (V, C).
void ops<cuda_backend>::lm_head_forward(stream& s, float* logits, const float* inp, const float* wte, size B, size T,
                                        size C, size V) {
    cuda::trace_span span(s, "lm_head_forward");
    detail::cuda_ops::sgemm(detail::cuda_ops::blas(s.native()), true, false, V, B * T, C, wte, C, inp, C, 0.0f, logits, V);
}
// dinp (BT, C) += dlogits (BT, V) @ wte; dwte (V, C) += dlogits^T @ inp (null: frozen), the two
// side by side as in matmul_backward.
void ops<cuda_backend>::lm_head_backward(stream& s, float* dinp, float* dwte, const float* dlogits, const float* inp,
                                         const float* wte, size B, size T, size C, size V) {
    using namespace detail::cuda_ops;
    cuda::trace_span span(s, "lm_head_backward");
    const size BT = B * T;
    both_gradients(
        s.native(), dwte != nullptr,
        [&] { sgemm(blas(s.native()), false, false, C, BT, V, wte, C, dlogits, V, 1.0f, dinp, C); },
        [&](cublasHandle_t handle, cudaStream_t) {
            if (dwte) sgemm(handle, false, true, C, V, BT, inp, C, dlogits, V, 1.0f, dwte, C);
        });
}

void ops<cuda_backend>::set_gradient_side_lane(bool on) { detail::cuda_ops::side_lane_on.store(on); }
bool ops<cuda_backend>::gradient_side_lane() { return detail::cuda_ops::side_lane_on.load(); }

}  // namespace strata
