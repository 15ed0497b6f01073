// llama_ops<Backend>: the Llama block's own kernels as asynchronous launches on a backend stream,
// the same pattern as strata's ops<Backend>: the block is written once against this interface,
// and each backend supplies a specialization. Here: the CPU (each op is a task on a cpu::stream).
// The CUDA one is declared in llama_ops_cuda.hpp and defined in llama_ops_cuda.cu.
//
// Glossary: B batch, T time, C channels, NH heads, N number of elements. Backward ops accumulate.
#pragma once

#include "kernels_cpu.hpp"  // llama::kernels::cpu::*

#include <strata/backend/cpu_backend.hpp>  // strata::cpu_backend

#include <cstddef>  // std::size_t

namespace llama {

template <class Backend>
struct llama_ops;  // specialized per backend

template <>
struct llama_ops<strata::cpu_backend> {
    using stream = strata::cpu_backend::stream;
    using size = std::size_t;

    template <class R>
    static void rmsnorm_forward(stream& s, R* out, R* rstd, const R* inp, const R* weight, size B, size T, size C,
                                double eps) {
        s.enqueue([=] { kernels::cpu::rmsnorm_forward(out, rstd, inp, weight, B, T, C, eps); }, "rmsnorm_forward");
    }
    template <class R>
    static void rmsnorm_backward(stream& s, R* dinp, R* dweight, const R* dout, const R* inp, const R* weight,
                                 const R* rstd, size B, size T, size C) {
        s.enqueue([=] { kernels::cpu::rmsnorm_backward<R>(dinp, dweight, dout, inp, weight, rstd, B, T, C); },
                  "rmsnorm_backward");
    }
    template <class R>
    static void rope_forward(stream& s, R* out, const R* qkv, size B, size T, size C, size NH, const kernels::rope_params& theta) {
        s.enqueue([=] { kernels::cpu::rope_forward(out, qkv, B, T, C, NH, theta); }, "rope_forward");
    }
    template <class R>
    static void rope_backward(stream& s, R* dqkv, const R* dout, size B, size T, size C, size NH, const kernels::rope_params& theta) {
        s.enqueue([=] { kernels::cpu::rope_backward(dqkv, dout, B, T, C, NH, theta); }, "rope_backward");
    }
    // Decoding: heads [0, heads) of `rows` rows `stride` apart rotated in place, row r at position first + r.
    template <class R>
    static void rope_rotate(stream& s, R* x, size rows, size stride, size heads, size HS, size first,
                            const kernels::rope_params& theta) {
        s.enqueue([=] { kernels::cpu::rope_rotate(x, rows, stride, heads, HS, first, theta); }, "rope_rotate");
    }
    template <class R>
    static void expand_kv_forward(stream& s, R* out, const R* qkv, size B, size T, size NH, size NKV, size HS) {
        s.enqueue([=] { kernels::cpu::expand_kv_forward(out, qkv, B, T, NH, NKV, HS); }, "expand_kv_forward");
    }
    template <class R>
    static void expand_kv_backward(stream& s, R* dqkv, const R* dout, size B, size T, size NH, size NKV, size HS) {
        s.enqueue([=] { kernels::cpu::expand_kv_backward(dqkv, dout, B, T, NH, NKV, HS); }, "expand_kv_backward");
    }
    template <class R>
    static void swiglu_forward(stream& s, R* out, const R* gate, const R* up, size N) {
        s.enqueue([=] { kernels::cpu::swiglu_forward(out, gate, up, N); }, "swiglu_forward");
    }
    template <class R>
    static void swiglu_backward(stream& s, R* dgate, R* dup, const R* dout, const R* gate, const R* up, size N) {
        s.enqueue([=] { kernels::cpu::swiglu_backward(dgate, dup, dout, gate, up, N); }, "swiglu_backward");
    }
};

}  // namespace llama
