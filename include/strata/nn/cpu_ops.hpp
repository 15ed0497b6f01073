// ops<cpu_backend>: each op is a task on a CPU stream running the reference kernel, so the model
// code launches work exactly as it does on the GPU, and the host thread never computes.
#pragma once

#include <strata/backend/cpu_backend.hpp>  // cpu_backend, cpu::stream
#include <strata/kernels/cpu/kernels.hpp>  // kernels::cpu::*
#include <strata/nn/ops.hpp>               // ops

#include <cstddef>  // std::size_t
#include <cstdint>  // std::int32_t
#include <cstring>  // std::memset, std::memcpy
#include <type_traits>  // std::type_identity_t

namespace strata {

template <>
struct ops<cpu_backend> {
    using stream = cpu_backend::stream;
    using size = std::size_t;

    template <class R>
    static void zero(stream& s, R* x, size n) {
        s.enqueue([=] { std::memset(x, 0, n * sizeof(R)); }, "zero");
    }
    template <class R>
    static void copy(stream& s, R* dst, const R* src, size n) {
        s.enqueue([=] { std::memcpy(dst, src, n * sizeof(R)); }, "copy");
    }
    template <class R>
    static void add_inplace(stream& s, R* dst, const R* src, size n) {
        s.enqueue([=] { kernels::cpu::add_inplace(dst, src, n); }, "add_inplace");
    }
    template <class R>
    static void scale_inplace(stream& s, R* x, double factor, size n) {
        s.enqueue([=] { kernels::cpu::scale_inplace(x, static_cast<R>(factor), n); }, "scale_inplace");
    }
    // *out = sum of x[i]^2 in double, in a fixed order (deterministic). The CPU needs no workspace.
    static size sum_of_squares_workspace(size) { return 0; }
    template <class R>
    static void sum_of_squares(stream& s, double* out, double* /*workspace*/, const R* x, size n) {
        s.enqueue([=] { *out = kernels::cpu::sum_of_squares(x, n); }, "sum_of_squares");
    }

    template <class R>
    static void embedding_forward(stream& s, R* out, const std::int32_t* tokens, const R* wte, const R* wpe, size B,
                                  size T, size C, size V, size maxT) {
        s.enqueue([=] { kernels::cpu::embedding_forward(out, tokens, wte, wpe, B, T, C, V, maxT); }, "embedding_forward");
    }
    template <class R>
    static void embedding_backward(stream& s, R* dwte, R* dwpe, const R* dout, const std::int32_t* tokens, size B,
                                   size T, size C, size V, size maxT) {
        s.enqueue([=] { kernels::cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, V, maxT); }, "embedding_backward");
    }

    template <class R>
    static void layernorm_forward(stream& s, R* out, R* mean, R* rstd, const R* inp, const R* w, const R* b, size B,
                                  size T, size C) {
        s.enqueue([=] { kernels::cpu::layernorm_forward(out, mean, rstd, inp, w, b, B, T, C); }, "layernorm_forward");
    }
    // res = a + b, out = layernorm(res): the block's residual add and the LayerNorm after it as one
    // op (one kernel on the GPU). res must not overlap a or b.
    template <class R>
    static void residual_layernorm_forward(stream& s, R* res, R* out, R* mean, R* rstd, const R* a, const R* b,
                                           const R* w, const R* bias, size B, size T, size C) {
        s.enqueue([=] { kernels::cpu::residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, B, T, C); },
                  "residual_layernorm_forward");
    }
    template <class R>
    static void layernorm_backward(stream& s, R* dinp, R* dw, R* db, const R* mean, const R* rstd, const R* dout,
                                   const R* inp, const R* w, size B, size T, size C) {
        s.enqueue([=] { kernels::cpu::layernorm_backward(dinp, dw, db, mean, rstd, dout, inp, w, B, T, C); }, "layernorm_backward");
    }

    template <class R>
    static void matmul_forward(stream& s, R* out, const R* inp, const R* w, const std::type_identity_t<R>* bias, size B,
                               size T, size C, size OC) {
        s.enqueue([=] { kernels::cpu::matmul_forward(out, inp, w, bias, B, T, C, OC); }, "matmul_forward");
    }
    // pre = inp @ w + bias, out = gelu(pre): the MLP's first linear layer and its GELU as one op
    // (the GPU fuses the bias and the GELU into one pass after the GEMM); here the composition.
    // bias may be null; out must not overlap pre.
    template <class R>
    static void matmul_gelu_forward(stream& s, R* pre, R* out, const R* inp, const R* w,
                                    const std::type_identity_t<R>* bias, size B, size T, size C, size OC) {
        s.enqueue([=] {
            kernels::cpu::matmul_forward(pre, inp, w, bias, B, T, C, OC);
            kernels::cpu::gelu_forward(out, static_cast<const R*>(pre), B * T * OC);
        }, "matmul_gelu_forward");
    }
    // dinp, dw and dbias may be null (no input gradient wanted; a frozen weight; a layer without
    // bias or with a frozen one).
    template <class R>
    static void matmul_backward(stream& s, std::type_identity_t<R>* dinp, std::type_identity_t<R>* dw,
                                std::type_identity_t<R>* dbias,
                                const R* dout, const R* inp, const R* w, size B, size T, size C, size OC) {
        s.enqueue([=] { kernels::cpu::matmul_backward(dinp, dw, dbias, dout, inp, w, B, T, C, OC); }, "matmul_backward");
    }
    template <class R>
    static void lm_head_forward(stream& s, R* logits, const R* inp, const R* wte, size B, size T, size C, size V) {
        s.enqueue([=] { kernels::cpu::lm_head_forward(logits, inp, wte, B, T, C, V); }, "lm_head_forward");
    }
    template <class R>
    static void lm_head_backward(stream& s, R* dinp, R* dwte, const R* dlogits, const R* inp, const R* wte, size B,
                                 size T, size C, size V) {
        s.enqueue([=] { kernels::cpu::lm_head_backward(dinp, dwte, dlogits, inp, wte, B, T, C, V); }, "lm_head_backward");
    }

    // What attention keeps for its backward, in elements: one log-sum-exp per query row (B, NH, T),
    // as on the GPU; backward recomputes the probabilities. Backward also gets the forward's output
    // (the CUDA kernel reads it for D = dout . out; the CPU kernel sums D = P . dP instead). The CPU
    // backward needs no workspace (the CUDA one may: nn/cuda_ops.hpp).
    static size attention_saved(size B, size T, size NH) { return kernels::cpu::attention_saved(B, T, NH); }
    static size attention_workspace(size, size, size, size) { return 0; }
    template <class R>
    static void attention_forward(stream& s, R* out, R* saved, const R* qkv, size B, size T, size C, size NH) {
        s.enqueue([=] { kernels::cpu::attention_forward(out, saved, qkv, B, T, C, NH); }, "attention_forward");
    }
    template <class R>
    static void attention_backward(stream& s, R* dqkv, R* /*workspace*/, const R* saved, const R* dout,
                                   const R* /*out*/, const R* qkv, size B, size T, size C, size NH) {
        s.enqueue([=] { kernels::cpu::attention_backward(dqkv, saved, dout, qkv, B, T, C, NH); }, "attention_backward");
    }

    // Incremental decoding (generation): n new query rows at positions pos .. pos + n - 1 against a
    // KV cache whose row t is key(t) | value(t), 2 NKV HS channels (kernels/cpu/attention_decode.hpp).
    template <class R>
    static void attention_decode(stream& s, R* out, const R* q, size q_stride, const R* kv, size pos, size n, size NH,
                                 size NKV, size HS) {
        s.enqueue([=] { kernels::cpu::attention_decode(out, q, q_stride, kv, pos, n, NH, NKV, HS); }, "attention_decode");
    }
    // rows x cols elements from rows src_stride apart to rows dst_stride apart (e.g. the new keys and
    // values of a qkv buffer into a KV cache).
    template <class R>
    static void copy_rows(stream& s, R* dst, size dst_stride, const R* src, size src_stride, size rows, size cols) {
        s.enqueue([=] {
            for (size r = 0; r < rows; ++r) std::memcpy(dst + r * dst_stride, src + r * src_stride, cols * sizeof(R));
        }, "copy_rows");
    }

    template <class R>
    static void gelu_forward(stream& s, R* out, const R* inp, size N) {
        s.enqueue([=] { kernels::cpu::gelu_forward(out, inp, N); }, "gelu_forward");
    }
    template <class R>
    static void gelu_backward(stream& s, R* dinp, const R* dout, const R* inp, size N) {
        s.enqueue([=] { kernels::cpu::gelu_backward(dinp, dout, inp, N); }, "gelu_backward");
    }
    // dinp = gelu'(inp) * dout, written (dinp need not be zeroed), and dbias += the column sums of
    // that dinp: the GELU backward and the bias gradient of the linear layer before it as one op
    // (one pass on the GPU); here zero, gelu_backward and matmul_backward's dbias, so the bits are
    // those of the three.
    template <class R>
    static void gelu_backward_bias(stream& s, R* dinp, R* dbias, const R* dout, const R* inp, size rows, size OC) {
        s.enqueue([=] {
            std::memset(dinp, 0, rows * OC * sizeof(R));
            kernels::cpu::gelu_backward(dinp, dout, inp, rows * OC);
            kernels::cpu::matmul_backward<R>(nullptr, nullptr, dbias, dinp, nullptr, nullptr, 1, rows, 0, OC);
        }, "gelu_backward_bias");
    }
    template <class R>
    static void residual_forward(stream& s, R* out, const R* a, const R* b, size N) {
        s.enqueue([=] { kernels::cpu::residual_forward(out, a, b, N); }, "residual_forward");
    }

    template <class R>
    static void cross_entropy_forward(stream& s, R* losses, R* lse, const R* logits, const std::int32_t* targets,
                                      size B, size T, size V) {
        s.enqueue([=] { kernels::cpu::cross_entropy_forward(losses, lse, logits, targets, B, T, V); }, "cross_entropy_forward");
    }
    // The training step's loss and its gradient in one op: losses and lse as cross_entropy_forward,
    // dlogits = scale (softmax - onehot) written (no zero fill needed; 0 on ignored rows), as zero
    // then cross_entropy_backward (one pass over the rows on the GPU). dlogits must not overlap
    // logits.
    template <class R>
    static void cross_entropy_forward_backward(stream& s, R* losses, R* lse, R* dlogits, const R* logits,
                                               const std::int32_t* targets, double scale, size B, size T, size V) {
        s.enqueue([=] {
            kernels::cpu::cross_entropy_forward(losses, lse, logits, targets, B, T, V);
            std::memset(dlogits, 0, B * T * V * sizeof(R));
            kernels::cpu::cross_entropy_backward(dlogits, static_cast<const R*>(lse), logits, targets,
                                                 static_cast<R>(scale), B, T, V);
        }, "cross_entropy_forward_backward");
    }
    template <class R>
    static void cross_entropy_backward(stream& s, R* dlogits, const R* lse, const R* logits,
                                       const std::int32_t* targets, double scale, size B, size T, size V) {
        s.enqueue([=] {
            kernels::cpu::cross_entropy_backward(dlogits, lse, logits, targets, static_cast<R>(scale), B, T, V);
        }, "cross_entropy_backward");
    }
};

}  // namespace strata
