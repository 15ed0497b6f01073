// ops<cuda_backend>: every op of the example GPT as an asynchronous launch on a CUDA stream.
//
// Declarations only, in plain C++: the definitions (kernels of kernels/cuda/, cuBLAS calls) are
// compiled once, by nvcc, in the CUDA sources src/cuda/*.cu (one per kernel family, so that they
// compile in parallel), which the CMake target strata::cuda adds to every target linking it. So
// model and trainer code that uses ops<cuda_backend> compiles with g++. This header names
// cuda_backend without defining it (include backend/cuda_backend.hpp or strata/cuda.hpp to use
// the backend), so that those CUDA sources, which include only it and their kernels, do not make
// nvcc parse the whole backend (its tiers, pinning, storage I/O) once per source.
//
// Precision: R = float only (a double model on the GPU does not compile: no overload). GEMMs run
// in strict FP32 unless TF32 is switched on with set_tf32(true) (strata-gpt --tf32); nothing
// else changes precision. Every op is deterministic: the same inputs give the same bits.
// Backward ops accumulate (+=) into their d-buffers, as on the CPU (the fused ones that write one
// say so).
#pragma once

#include <strata/backend/cuda/stream.hpp>  // cuda::stream, cuda::trace_span
#include <strata/nn/ops.hpp>                // ops

#include <cstddef>  // std::size_t
#include <cstdint>  // std::int32_t

namespace strata {

class cuda_backend;  // backend/cuda_backend.hpp

template <>
struct ops<cuda_backend> {
    using stream = cuda::stream;  // cuda_backend::stream
    using size = std::size_t;

    // GEMM math for the whole process: strict FP32 (false, the default) or TF32 tensor cores.
    static void set_tf32(bool on);
    static bool tf32();
    // matmul_backward and lm_head_backward run the weight gradient on a second stream beside the
    // input gradient (on, the default) or after it on the op's stream (off): the same bits either
    // way; a switch for the whole process, for benchmarks that compare the two.
    static void set_gradient_side_lane(bool on);
    static bool gradient_side_lane();

    static void zero(stream& s, float* x, size n);
    static void copy(stream& s, float* dst, const float* src, size n);
    static void add_inplace(stream& s, float* dst, const float* src, size n);
    static void scale_inplace(stream& s, float* x, double factor, size n);
    // *out = sum of x[i]^2 in double, in the canonical chunked order of kernels::cpu::sum_of_squares,
    // so the GPU and the CPU give the same bits. `workspace`: sum_of_squares_workspace(n) doubles.
    static size sum_of_squares_workspace(size n);
    static void sum_of_squares(stream& s, double* out, double* workspace, const float* x, size n);

    static void embedding_forward(stream& s, float* out, const std::int32_t* tokens, const float* wte,
                                  const float* wpe, size B, size T, size C, size V, size maxT);
    static void embedding_backward(stream& s, float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                                   size B, size T, size C, size V, size maxT);

    static void layernorm_forward(stream& s, float* out, float* mean, float* rstd, const float* inp, const float* w,
                                  const float* b, size B, size T, size C);
    // res = a + b, out = layernorm(res) in one pass (the bits of residual_forward then
    // layernorm_forward). res must not overlap a or b.
    static void residual_layernorm_forward(stream& s, float* res, float* out, float* mean, float* rstd, const float* a,
                                           const float* b, const float* w, const float* bias, size B, size T, size C);
    static void layernorm_backward(stream& s, float* dinp, float* dw, float* db, const float* mean, const float* rstd,
                                   const float* dout, const float* inp, const float* w, size B, size T, size C);

    static void matmul_forward(stream& s, float* out, const float* inp, const float* w, const float* bias, size B,
                               size T, size C, size OC);
    // pre = inp @ w + bias, out = gelu(pre): the MLP's first linear layer and its GELU, the bias and
    // the GELU in one pass after the GEMM (the bits of matmul_forward then gelu_forward). bias may
    // be null; out must not overlap pre.
    static void matmul_gelu_forward(stream& s, float* pre, float* out, const float* inp, const float* w,
                                    const float* bias, size B, size T, size C, size OC);
    // dinp, dw and dbias may be null (no input gradient wanted; a frozen weight; no or a frozen bias).
    static void matmul_backward(stream& s, float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                                const float* w, size B, size T, size C, size OC);
    static void lm_head_forward(stream& s, float* logits, const float* inp, const float* wte, size B, size T, size C,
                                size V);
    static void lm_head_backward(stream& s, float* dinp, float* dwte, const float* dlogits, const float* inp,
                                 const float* wte, size B, size T, size C, size V);

    // Flash-style attention keeps only the log-sum-exp of each query row for its backward.
    static size attention_saved(size B, size T, size NH) { return B * NH * T; }
    static void attention_forward(stream& s, float* out, float* saved, const float* qkv, size B, size T, size C,
                                  size NH);
    // The backward is kernels::cuda::attention_backward_pick's (kernels/cuda/attention_backward.cuh):
    // the key-tile backward with dq partials where their workspace (in bands of query tiles at head
    // size 128) takes at most kernels::cuda::attention_partials_limit_bytes, else the key-tile
    // backward with dq added in order (head size 64 and up; a workspace linear in T) or
    // the two-kernel backward (kernels/cuda/attention.cuh), which needs none: attention_workspace
    // floats of scratch (any alignment), a function of the shape alone that a Layer counts in its
    // workspace_floats. Either way the same bits on every run of a shape.
    static size attention_workspace(size B, size T, size C, size NH);
    static void attention_backward(stream& s, float* dqkv, float* workspace, const float* saved, const float* dout,
                                   const float* out, const float* qkv, size B, size T, size C, size NH);
    // From this call on, for the whole process, the two-kernel backward at every shape and
    // attention_workspace 0 (benchmarks compare the two; a workspace sized before stays valid,
    // unused). One way only: switching back could meet a workspace sized while it was off.
    static void use_two_kernel_attention_backward();
    static bool two_kernel_attention_backward();

    // Incremental decoding: n query rows at positions pos .. pos + n - 1 against a KV cache (row t =
    // key(t) | value(t), 2 NKV HS channels), as kernels::cpu::attention_decode; no workspace.
    static void attention_decode(stream& s, float* out, const float* q, size q_stride, const float* kv, size pos,
                                 size n, size NH, size NKV, size HS);
    // rows x cols floats from rows src_stride apart to rows dst_stride apart (one cudaMemcpy2DAsync).
    static void copy_rows(stream& s, float* dst, size dst_stride, const float* src, size src_stride, size rows,
                          size cols);

    static void gelu_forward(stream& s, float* out, const float* inp, size N);
    static void gelu_backward(stream& s, float* dinp, const float* dout, const float* inp, size N);
    // dinp = gelu'(inp) * dout, written (no zero-fill needed), and dbias += its column sums: the
    // GELU backward and the bias gradient of the linear layer before it in one pass (the bits of
    // zero, gelu_backward, then matmul_backward's dbias).
    static void gelu_backward_bias(stream& s, float* dinp, float* dbias, const float* dout, const float* inp,
                                   size rows, size OC);
    static void residual_forward(stream& s, float* out, const float* a, const float* b, size N);

    static void cross_entropy_forward(stream& s, float* losses, float* lse, const float* logits,
                                      const std::int32_t* targets, size B, size T, size V);
    // losses, lse and dlogits = scale (softmax - onehot) written (0 on ignored rows) in one pass over
    // the rows: the bits of cross_entropy_forward, zero and cross_entropy_backward. dlogits must not
    // overlap logits.
    static void cross_entropy_forward_backward(stream& s, float* losses, float* lse, float* dlogits,
                                               const float* logits, const std::int32_t* targets, double scale, size B,
                                               size T, size V);
    static void cross_entropy_backward(stream& s, float* dlogits, const float* lse, const float* logits,
                                       const std::int32_t* targets, double scale, size B, size T, size V);
};

}  // namespace strata
