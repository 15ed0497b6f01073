// lora_linear<R, Backend>: a linear layer with a LoRA adapter (Hu et al. 2021, "LoRA: Low-Rank
// Adaptation of Large Language Models"), written as a strata Layer from outside the library:
//
//   y = x W + b + (alpha / r) (x A) B        W (in, out) and b frozen; A (in, r) and B (r, out) trained
//
// The base weight never changes and has no gradient (param_spec::trainable = false); only the two
// thin matrices are trained, so gradients and AdamW moments cost r (in + out) floats instead of
// in * out. Weights are (in, out) as strata's matmul expects (PEFT stores lora_A.weight (r, in)
// and lora_B.weight (out, r): transpose when converting).
//
// Also here, for every LoRA layer of this example (gpt2_lora_block.hpp uses them too):
// - lora_forward / lora_backward: the adapted projection as ops<B> calls, on any backend.
// - init_lora_adapters: the standard initialization (A random, B = 0) on a host block.
//
// Only ops<B> is used, so the layer runs on cpu_backend (any R) and on cuda_backend (float).
//
// Glossary: B batch, T time, C input features, OC output features, r the adapter's rank.
#pragma once

#include <strata/backend/backend.hpp>      // strata::Backend
#include <strata/core/error.hpp>           // strata::error
#include <strata/core/rng.hpp>             // strata::rng
#include <strata/nn/layer.hpp>             // strata::Layer, strata::check_layer
#include <strata/nn/ops.hpp>               // strata::ops
#include <strata/tensor/param_layout.hpp>  // strata::param_spec, strata::param_layout

#include <algorithm>  // std::max, std::fill
#include <cmath>      // std::isfinite, std::sqrt
#include <cstddef>    // std::size_t
#include <span>       // std::span
#include <string>     // std::string, std::to_string
#include <vector>     // std::vector

namespace lora {

// ---- the adapted projection, as ops<B> calls ---------------------------------------------------

// xa = scaling * (x A): what lora_forward saves for backward, alone (a recompute that skips the
// projection's output still owes backward its xa: the same calls, the same bits).
template <strata::Backend Bk, class R>
void lora_xa(typename Bk::stream& s,
             R* xa,       // (B, T, r)
             const R* x,  // (B, T, C)
             const R* A,  // (C, r)
             std::size_t B, std::size_t T, std::size_t C, std::size_t r, double scaling) {
    using op = strata::ops<Bk>;
    op::matmul_forward(s, xa, x, A, static_cast<const R*>(nullptr), B, T, C, r);
    op::scale_inplace(s, xa, scaling, B * T * r);
}

// out = x W + b + xa B, where xa = scaling * (x A) is kept for backward. bias may be null.
// `low` is scratch for the low-rank product. Scaling xa (r wide) rather than the product (OC wide)
// is the cheaper of the two equal forms; with B = 0 the added term is exactly zero, so the output
// has the bits of the base projection alone.
template <strata::Backend Bk, class R>
void lora_forward(typename Bk::stream& s,
                  R* out,          // (B, T, OC)
                  R* xa,           // (B, T, r): saved for backward
                  R* low,          // (B, T, OC): scratch
                  const R* x,      // (B, T, C)
                  const R* W,      // (C, OC), frozen
                  const R* bias,   // (OC), frozen, or null
                  const R* A,      // (C, r)
                  const R* Bw,     // (r, OC)
                  std::size_t B, std::size_t T, std::size_t C, std::size_t OC, std::size_t r, double scaling) {
    using op = strata::ops<Bk>;
    op::matmul_forward(s, out, x, W, bias, B, T, C, OC);
    lora_xa<Bk>(s, xa, x, A, B, T, C, r, scaling);
    op::matmul_forward(s, low, xa, Bw, static_cast<const R*>(nullptr), B, T, r, OC);
    op::add_inplace(s, out, low, B * T * OC);
}

// dB += xa^T dout; dA += x^T (scaling * dout B^T); dinp += (scaling * dout B^T) A^T + dout W^T.
// No gradient for W and b (frozen). dinp may be null; dA and dB are accumulated either way, with
// the same bits. `dxa` is scratch.
template <strata::Backend Bk, class R>
void lora_backward(typename Bk::stream& s,
                   R* dinp,         // (B, T, C) or null
                   R* dA,           // (C, r)
                   R* dB,           // (r, OC)
                   R* dxa,          // (B, T, r): scratch
                   const R* dout,   // (B, T, OC)
                   const R* x,      // (B, T, C)
                   const R* xa,     // (B, T, r): from forward
                   const R* W,      // (C, OC)
                   const R* A,      // (C, r)
                   const R* Bw,     // (r, OC)
                   std::size_t B, std::size_t T, std::size_t C, std::size_t OC, std::size_t r, double scaling) {
    using op = strata::ops<Bk>;
    op::zero(s, dxa, B * T * r);
    op::matmul_backward(s, dxa, dB, static_cast<R*>(nullptr), dout, xa, Bw, B, T, r, OC);
    op::scale_inplace(s, dxa, scaling, B * T * r);
    op::matmul_backward(s, dinp, dA, static_cast<R*>(nullptr), dxa, x, A, B, T, C, r);
    if (dinp != nullptr)  // the frozen base: its input gradient only
        op::matmul_backward(s, dinp, static_cast<R*>(nullptr), static_cast<R*>(nullptr), dout, x, W, B, T, C, OC);
}

// ---- initialization ----------------------------------------------------------------------------

enum class lora_init {
    kaiming_uniform,  // PEFT's default: A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_, a = sqrt(5))
    gaussian,         // PEFT's init_lora_weights="gaussian": A ~ N(0, (1/r)^2)
};

// The standard LoRA initialization of every adapter in a host copy of a parameter block: B = 0,
// so a fresh adapter leaves the base model's output unchanged (bitwise, see lora_forward), and A
// random so that B's first gradient is not zero. Touches only the tensors named "lora_A" /
// "<prefix>.lora_A" (shape (in, r)) and "lora_B" / "<prefix>.lora_B"; the base weights stay as
// they are. Adapters are drawn in layout order from `gen`, so a seed fixes them.
template <class R>
void init_lora_adapters(const strata::param_layout& layout, std::span<R> host_block, strata::rng& gen,
                        lora_init how = lora_init::kaiming_uniform) {
    if (host_block.size() < layout.numel())
        throw strata::error("init_lora_adapters: the host block holds " + std::to_string(host_block.size()) +
                                " elements, the layout " + std::to_string(layout.numel()),
                            "pass the whole parameter block of the layer the layout describes");
    for (const auto& entry : layout.entries()) {
        const std::string& name = entry.spec.name;
        R* p = host_block.data() + entry.offset;
        const std::size_t n = entry.spec.shape.numel();
        if (name == "lora_B" || name.ends_with(".lora_B")) {
            std::fill(p, p + n, R(0));
        } else if (name == "lora_A" || name.ends_with(".lora_A")) {
            const double in = static_cast<double>(entry.spec.shape[0]), rank = static_cast<double>(entry.spec.shape[1]);
            const double bound = 1.0 / std::sqrt(in);
            for (std::size_t i = 0; i < n; ++i)
                p[i] = static_cast<R>(how == lora_init::gaussian ? gen.normal(0.0, 1.0 / rank)
                                                                 : (2.0 * gen.uniform() - 1.0) * bound);
        }
    }
}

// ---- the layer ---------------------------------------------------------------------------------

struct lora_linear_config {
    std::size_t in = 0;    // C
    std::size_t out = 0;   // OC
    std::size_t rank = 0;  // r
    double alpha = 0.0;    // the adapter's output is scaled by alpha / rank (PEFT's lora_alpha)
    bool bias = true;      // the base has a (frozen) bias

    double scaling() const { return alpha / static_cast<double>(rank); }

    void validate() const {
        if (in == 0 || out == 0 || rank == 0 || !std::isfinite(alpha))
            throw strata::error("lora_linear: in=" + std::to_string(in) + ", out=" + std::to_string(out) +
                                    ", rank=" + std::to_string(rank) + ", alpha=" + std::to_string(alpha) +
                                    " is not a valid adapter",
                                "in, out and rank must be positive and alpha finite (usually rank <= 64 and "
                                "alpha = rank or 2 * rank)");
    }
};

template <class R, strata::Backend B>
class lora_linear {
public:
    using config_type = lora_linear_config;
    using value_type = R;
    using backend_type = B;
    using stream = typename B::stream;
    using size = std::size_t;

    // Base first in declaration order; the layout puts the trainable adapters first in the block,
    // so the gradient block is just A and B.
    static std::vector<strata::param_spec> params(const config_type& c) {
        std::vector<strata::param_spec> p{{"weight", {c.in, c.out}, true, false}};
        if (c.bias) p.push_back({"bias", {c.out}, false, false});
        p.push_back({"lora_A", {c.in, c.rank}, true, true});
        p.push_back({"lora_B", {c.rank, c.out}, true, true});
        return p;
    }
    static size in_features(const config_type& c) { return c.in; }
    static size out_features(const config_type& c) { return c.out; }
    static size activation_floats(const config_type& c, size Bn, size T) { return Bn * T * c.rank; }  // xa
    static size workspace_floats(const config_type& c, size Bn, size T) {
        return Bn * T * std::max(c.out, c.rank);  // forward: the low-rank product; backward: dxa
    }
    static double flops(const config_type& c, size Bn, size T) {
        return 2.0 * double(Bn) * double(T) * double(c.in * c.out + c.in * c.rank + c.rank * c.out);
    }

    explicit lora_linear(const config_type& c) : m_c(c), m_layout(strata::param_layout::of<R>(params(c))) {
        c.validate();
        m_weight = m_layout.find("weight").offset;
        m_bias = c.bias ? m_layout.find("bias").offset : 0;
        m_A = m_layout.find("lora_A").offset;
        m_B = m_layout.find("lora_B").offset;
    }

    void forward(stream& s, const R* p, R* out, R* acts, const R* x, R* work, size Bn, size T) const {
        lora_forward<B>(s, out, acts, work, x, p + m_weight, m_c.bias ? p + m_bias : nullptr, p + m_A, p + m_B, Bn, T,
                        m_c.in, m_c.out, m_c.rank, m_c.scaling());
    }

    void backward(stream& s, const R* p, R* g, R* dinp, const R* dout, const R* acts, const R* x, R* work, size Bn,
                  size T) const {
        lora_backward<B>(s, dinp, g + m_A, g + m_B, work, dout, x, acts, p + m_weight, p + m_A, p + m_B, Bn, T, m_c.in,
                         m_c.out, m_c.rank, m_c.scaling());
    }

private:
    lora_linear_config m_c;
    strata::param_layout m_layout;
    size m_weight = 0, m_bias = 0, m_A = 0, m_B = 0;
};

}  // namespace lora
