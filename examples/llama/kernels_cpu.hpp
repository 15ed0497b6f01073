// The Llama block's own kernels on the CPU, written outside strata in strata's (llm.c's) style:
// plain loops, one shape comment per pointer, backward functions accumulate (+=).
//
// Glossary: B batch, T time, C channels, NH heads, HS head size (C / NH), H hidden size of the
// MLP, N number of elements.
//
// rmsnorm: y = x / sqrt(mean(x^2) + eps) * weight (Llama's RMSNorm: a gain, no bias, no mean).
// rope:    rotary position embedding of q and k inside the fused (B, T, 3C) qkv, "rotate half"
//          convention of Hugging Face Llama: for head vector x (HS even), i < HS/2,
//            y[i]        = x[i] cos(t f_i) - x[i + HS/2] sin(t f_i)
//            y[i + HS/2] = x[i + HS/2] cos(t f_i) + x[i] sin(t f_i),   f_i = theta^(-2i / HS)
//          v is copied unchanged. f_i is rope_params::inv_freq: theta^(-2i / HS), or with Llama 3.1's
//          "llama3" scaling the same frequency divided by `factor` for long wavelengths and smoothly
//          interpolated in between (transformers' _compute_llama3_parameters). rope_rotate is the
//          same rotation in place, at positions from a given one, for decoding with a KV cache.
// kv heads (grouped-query attention): expand_kv copies a (B, T, (NH + 2 NKV) HS) q|k|v into the
//          (B, T, 3 NH HS) layout of the attention kernel, key/value head g serving the query heads
//          [g NH/NKV, (g+1) NH/NKV); reduce_kv is its adjoint, summing each group's gradients in
//          head order (deterministic, no atomics).
// swiglu:  out = silu(gate) * up, silu(g) = g * sigmoid(g).
#pragma once

#include <cmath>     // std::sqrt, std::exp, std::cos, std::sin, std::pow
#include <concepts>  // std::floating_point
#include <cstddef>   // std::size_t
#include <string>    // std::to_string
#include <type_traits>  // std::type_identity_t

#include <strata/core/error.hpp>  // strata::error

// __host__ __device__ where nvcc compiles this file (kernels_cuda.cuh includes it): rope_params's
// frequency is the same expression on both sides.
#if defined(__CUDACC__)
#define LLAMA_HOST_DEVICE __host__ __device__
#else
#define LLAMA_HOST_DEVICE
#endif

namespace llama::kernels {

// The rotary frequencies: the base, and Llama 3.1's "llama3" scaling when factor > 0. Implicit
// from a base alone (plain RoPE), so rope_forward(..., 10000.0) reads as before.
struct rope_params {
    double theta = 10000.0;
    double factor = 0.0;  // 0: no scaling; else rope_scaling.factor of rope_type "llama3"
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    double original_max_position_embeddings = 8192.0;

    constexpr rope_params() = default;
    constexpr rope_params(double base) : theta(base) {}  // NOLINT(google-explicit-constructor): a base is plain RoPE
    constexpr rope_params(double base, double f, double low, double high, double original)
        : theta(base), factor(f), low_freq_factor(low), high_freq_factor(high), original_max_position_embeddings(original) {}
    constexpr bool scaled() const { return factor > 0.0; }
    constexpr bool operator==(const rope_params&) const = default;

    // f_i of pair i of a head of HS channels, in double.
    LLAMA_HOST_DEVICE double inv_freq(std::size_t i, std::size_t HS) const {
        const double freq = ::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(HS));
        if (!(factor > 0.0)) return freq;
        const double two_pi = 6.283185307179586476925286766559;
        const double wavelen = two_pi / freq;
        const double original = original_max_position_embeddings;
        if (wavelen < original / high_freq_factor) return freq;  // high frequencies: kept
        if (wavelen > original / low_freq_factor) return freq / factor;  // low frequencies: scaled
        const double smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
        return (1.0 - smooth) * freq / factor + smooth * freq;
    }
};

}  // namespace llama::kernels

namespace llama::kernels::cpu {

template <std::floating_point Real>
void rmsnorm_forward(Real* out,           // (B, T, C)
                     Real* rstd,          // (B, T) saved for backward: 1 / sqrt(mean(x^2) + eps)
                     const Real* inp,     // (B, T, C)
                     const Real* weight,  // (C)
                     std::size_t B, std::size_t T, std::size_t C, double eps) {
    for (std::size_t row = 0; row < B * T; ++row) {
        const Real* x = inp + row * C;
        double sum_sq = 0.0;  // the row statistic in double, as strata's layernorm
        for (std::size_t c = 0; c < C; ++c) sum_sq += static_cast<double>(x[c]) * x[c];
        const Real r = static_cast<Real>(1.0 / std::sqrt(sum_sq / static_cast<double>(C) + eps));
        Real* y = out + row * C;
        for (std::size_t c = 0; c < C; ++c) y[c] = x[c] * r * weight[c];
        rstd[row] = r;
    }
}

// With n = x * rstd: dweight += sum over rows of dout * n;
// dinp += rstd * (weight * dout - n * mean(weight * dout * n)). dinp may be null.
template <std::floating_point Real>
void rmsnorm_backward(std::type_identity_t<Real>* dinp,  // (B, T, C) or null
                      Real* dweight,                     // (C)
                      const Real* dout,                  // (B, T, C)
                      const Real* inp,                   // (B, T, C)
                      const Real* weight,                // (C)
                      const Real* rstd,                  // (B, T)
                      std::size_t B, std::size_t T, std::size_t C) {
    for (std::size_t row = 0; row < B * T; ++row) {
        const Real* x = inp + row * C;
        const Real* dy = dout + row * C;
        const Real r = rstd[row];
        double dot = 0.0;  // sum over c of weight * dout * n
        for (std::size_t c = 0; c < C; ++c) {
            const Real n = x[c] * r;
            dweight[c] += dy[c] * n;
            dot += static_cast<double>(weight[c]) * dy[c] * n;
        }
        if (dinp == nullptr) continue;
        const Real mean_dot = static_cast<Real>(dot / static_cast<double>(C));
        Real* dx = dinp + row * C;
        for (std::size_t c = 0; c < C; ++c) dx[c] += r * (weight[c] * dy[c] - x[c] * r * mean_dot);
    }
}

namespace detail {

inline void check_rope_heads(std::size_t C, std::size_t NH) {
    if (NH == 0 || C % NH != 0 || (C / NH) % 2 != 0) {
        throw strata::error("rope: C=" + std::to_string(C) + " channels do not split into NH=" + std::to_string(NH) +
                                " heads of an even size",
                            "rotary embedding rotates pairs of channels: choose NH so that C / NH is even");
    }
}

// The angle of position t and pair i, in double, then the cos/sin rounded once to Real.
inline double rope_angle(std::size_t t, std::size_t i, std::size_t HS, const rope_params& rope) {
    return static_cast<double>(t) * rope.inv_freq(i, HS);
}

}  // namespace detail

template <std::floating_point Real>
void rope_forward(Real* out,        // (B, T, 3C) q and k rotated, v copied
                  const Real* qkv,  // (B, T, 3C)
                  std::size_t B, std::size_t T, std::size_t C, std::size_t NH, const rope_params& theta) {
    detail::check_rope_heads(C, NH);
    const std::size_t HS = C / NH, half = HS / 2;
    for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t t = 0; t < T; ++t) {
            const Real* x = qkv + (b * T + t) * 3 * C;
            Real* y = out + (b * T + t) * 3 * C;
            for (std::size_t i = 0; i < half; ++i) {
                const double angle = detail::rope_angle(t, i, HS, theta);
                const Real cos = static_cast<Real>(std::cos(angle)), sin = static_cast<Real>(std::sin(angle));
                for (std::size_t h = 0; h < 2 * NH; ++h) {  // q heads then k heads: channels [0, 2C)
                    const std::size_t lo = h * HS + i, hi = lo + half;
                    y[lo] = x[lo] * cos - x[hi] * sin;
                    y[hi] = x[hi] * cos + x[lo] * sin;
                }
            }
            for (std::size_t c = 2 * C; c < 3 * C; ++c) y[c] = x[c];
        }
    }
}

// The rotation is orthogonal: dqkv += R^T dout (the rotation by -angle) for q and k, dv += dout.
template <std::floating_point Real>
void rope_backward(Real* dqkv,        // (B, T, 3C)
                   const Real* dout,  // (B, T, 3C)
                   std::size_t B, std::size_t T, std::size_t C, std::size_t NH, const rope_params& theta) {
    detail::check_rope_heads(C, NH);
    const std::size_t HS = C / NH, half = HS / 2;
    for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t t = 0; t < T; ++t) {
            const Real* dy = dout + (b * T + t) * 3 * C;
            Real* dx = dqkv + (b * T + t) * 3 * C;
            for (std::size_t i = 0; i < half; ++i) {
                const double angle = detail::rope_angle(t, i, HS, theta);
                const Real cos = static_cast<Real>(std::cos(angle)), sin = static_cast<Real>(std::sin(angle));
                for (std::size_t h = 0; h < 2 * NH; ++h) {
                    const std::size_t lo = h * HS + i, hi = lo + half;
                    dx[lo] += dy[lo] * cos + dy[hi] * sin;
                    dx[hi] += dy[hi] * cos - dy[lo] * sin;
                }
            }
            for (std::size_t c = 2 * C; c < 3 * C; ++c) dx[c] += dy[c];
        }
    }
}

// Rope for decoding (generation), in place and in any row layout: the first `heads` heads of HS
// channels of each of `rows` rows, `stride` apart, row r at position first + r, rotated with
// rope_forward's angle, cos, sin and products (so the same bits as rope_forward at that position).
// The compact q|k|v of grouped-query attention rotates its NH query and NKV key heads, v stays.
template <std::floating_point Real>
void rope_rotate(Real* x,  // (rows, stride): heads [0, heads) rotated in place
                 std::size_t rows, std::size_t stride, std::size_t heads, std::size_t HS, std::size_t first,
                 const rope_params& theta) {
    detail::check_rope_heads(heads * HS, heads);
    if (stride < heads * HS)
        throw strata::error("rope_rotate: rows of stride " + std::to_string(stride) + " hold fewer than the " +
                                std::to_string(heads * HS) + " channels to rotate",
                            "pass the row stride of the buffer the heads live in");
    const std::size_t half = HS / 2;
    for (std::size_t r = 0; r < rows; ++r) {
        Real* y = x + r * stride;
        for (std::size_t i = 0; i < half; ++i) {
            const double angle = detail::rope_angle(first + r, i, HS, theta);
            const Real cos = static_cast<Real>(std::cos(angle)), sin = static_cast<Real>(std::sin(angle));
            for (std::size_t h = 0; h < heads; ++h) {
                const std::size_t lo = h * HS + i, hi = lo + half;
                const Real a = y[lo], b = y[hi];
                y[lo] = a * cos - b * sin;
                y[hi] = b * cos + a * sin;
            }
        }
    }
}

template <std::floating_point Real>
void swiglu_forward(Real* out,         // (N)
                    const Real* gate,  // (N) x @ w1
                    const Real* up,    // (N) x @ w3
                    std::size_t N) {
    for (std::size_t i = 0; i < N; ++i) {
        const Real g = gate[i];
        const Real sigmoid = Real(1) / (Real(1) + std::exp(-g));
        out[i] = g * sigmoid * up[i];
    }
}

// dup += dout * silu(gate); dgate += dout * up * silu'(gate), silu'(g) = s (1 + g (1 - s)).
template <std::floating_point Real>
void swiglu_backward(Real* dgate,       // (N)
                     Real* dup,         // (N)
                     const Real* dout,  // (N)
                     const Real* gate,  // (N)
                     const Real* up,    // (N)
                     std::size_t N) {
    for (std::size_t i = 0; i < N; ++i) {
        const Real g = gate[i];
        const Real sigmoid = Real(1) / (Real(1) + std::exp(-g));
        dup[i] += dout[i] * g * sigmoid;
        dgate[i] += dout[i] * up[i] * sigmoid * (Real(1) + g * (Real(1) - sigmoid));
    }
}

namespace detail {

inline void check_kv_heads(std::size_t NH, std::size_t NKV) {
    if (NH == 0 || NKV == 0 || NH % NKV != 0)
        throw strata::error("kv heads: NKV=" + std::to_string(NKV) + " key/value heads do not divide NH=" +
                                std::to_string(NH) + " query heads",
                            "num_key_value_heads must divide num_attention_heads");
}

}  // namespace detail

template <std::floating_point Real>
void expand_kv_forward(Real* out,        // (B, T, 3 NH HS)
                       const Real* qkv,  // (B, T, (NH + 2 NKV) HS)
                       std::size_t B, std::size_t T, std::size_t NH, std::size_t NKV, std::size_t HS) {
    detail::check_kv_heads(NH, NKV);
    const std::size_t A = NH * HS, KV = NKV * HS, in_row = A + 2 * KV, group = NH / NKV;
    for (std::size_t row = 0; row < B * T; ++row) {
        const Real* x = qkv + row * in_row;
        Real* y = out + row * 3 * A;
        for (std::size_t c = 0; c < A; ++c) y[c] = x[c];
        for (std::size_t part = 0; part < 2; ++part)  // k, then v
            for (std::size_t h = 0; h < NH; ++h)
                for (std::size_t d = 0; d < HS; ++d)
                    y[(1 + part) * A + h * HS + d] = x[A + part * KV + (h / group) * HS + d];
    }
}

// dqkv += the adjoint of expand_kv_forward: dq += dout's q; each key/value head gets the sum of its
// group's NH/NKV expanded heads, added in head order.
template <std::floating_point Real>
void expand_kv_backward(Real* dqkv,        // (B, T, (NH + 2 NKV) HS)
                        const Real* dout,  // (B, T, 3 NH HS)
                        std::size_t B, std::size_t T, std::size_t NH, std::size_t NKV, std::size_t HS) {
    detail::check_kv_heads(NH, NKV);
    const std::size_t A = NH * HS, KV = NKV * HS, in_row = A + 2 * KV, group = NH / NKV;
    for (std::size_t row = 0; row < B * T; ++row) {
        const Real* dy = dout + row * 3 * A;
        Real* dx = dqkv + row * in_row;
        for (std::size_t c = 0; c < A; ++c) dx[c] += dy[c];
        for (std::size_t part = 0; part < 2; ++part)
            for (std::size_t g = 0; g < NKV; ++g)
                for (std::size_t d = 0; d < HS; ++d) {
                    Real sum = Real(0);
                    for (std::size_t h = g * group; h < (g + 1) * group; ++h) sum += dy[(1 + part) * A + h * HS + d];
                    dx[A + part * KV + g * HS + d] += sum;
                }
    }
}

}  // namespace llama::kernels::cpu

#undef LLAMA_HOST_DEVICE  // an annotation of this header only
