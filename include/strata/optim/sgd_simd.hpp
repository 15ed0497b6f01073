// Vectorized and multi-threaded SGD with momentum for float, bitwise equal to the scalar reference
// sgd_update<float> (strata/optim/sgd.hpp), on the same terms as adamw_simd.hpp: every element goes
// through the reference's IEEE operations in its order (its three fused multiply-adds, the
// momentum product and sum as two roundings), lanes are independent, so the vector width, the
// alignment and the thread count change no bit. The instruction set is picked at run time with
// adamw_path (AVX-512F, else AVX2 + FMA, else the scalar reference); an empty asm keeps the
// products that the reference rounds on their own (b * mu, g * grad_scale) out of FMAs.
#pragma once

#include <strata/optim/adamw_simd.hpp>        // adamw_path, resolve, detail::for_each_cache_line_chunk
#include <strata/optim/host_thread_pool.hpp>  // host_thread_pool
#include <strata/optim/sgd.hpp>               // sgd_hparams, sgd_constants, sgd_apply (the reference)

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uintptr_t
#include <span>         // std::span
#include <string_view>  // std::string_view
#include <type_traits>  // std::bool_constant

#if defined(__x86_64__)
#include <immintrin.h>  // AVX2, FMA and AVX-512F intrinsics
#endif

#ifdef __FAST_MATH__
#error "strata/optim/sgd_simd.hpp promises results bitwise equal to the reference SGD, and -ffast-math lets the compiler reorder and approximate that arithmetic: compile this file without it"
#endif

namespace strata {

namespace detail {

inline sgd_constants<float> prepare_sgd_step(std::string_view who, std::size_t p, std::size_t g, std::size_t b,
                                             const sgd_hparams& h, double lr, bool decay, float grad_scale) {
    check_sgd_sizes(who, p, g, b);
    check_grad_scale(who, grad_scale);
    return sgd_constants_for<float>(h, lr, decay, who);
}

// Calls kernel(decay, momentum, nesterov, scaled) with each flag as a std::bool_constant.
template <class Kernel>
inline void with_sgd_flags(const sgd_constants<float>& s, bool scaled, Kernel&& kernel) {
    const auto on_scale = [&](auto decay, auto momentum, auto nesterov) {
        scaled ? kernel(decay, momentum, nesterov, std::true_type{})
               : kernel(decay, momentum, nesterov, std::false_type{});
    };
    const auto on_nesterov = [&](auto decay, auto momentum) {
        s.nesterov ? on_scale(decay, momentum, std::true_type{}) : on_scale(decay, momentum, std::false_type{});
    };
    const auto on_momentum = [&](auto decay) {
        s.use_momentum ? on_nesterov(decay, std::true_type{}) : on_scale(decay, std::false_type{}, std::false_type{});
    };
    s.apply_decay ? on_momentum(std::true_type{}) : on_momentum(std::false_type{});
}

#if defined(__x86_64__)

// ---- AVX-512F: 16 lanes, heads and tails through k-masks ----

struct sgd_avx512f_constants {
    __m512 weight_decay, momentum, neg_lr, grad_scale;
};

template <bool Masked, bool Decay, bool Momentum, bool Nesterov, bool Scaled>
__attribute__((target("avx512f"), always_inline)) inline void sgd_lanes_avx512f(float* p, const float* g, float* b,
                                                                                __mmask16 lanes,
                                                                                const sgd_avx512f_constants& k) {
    const __m512 param = Masked ? _mm512_maskz_loadu_ps(lanes, p) : _mm512_loadu_ps(p);
    __m512 grad = Masked ? _mm512_maskz_loadu_ps(lanes, g) : _mm512_loadu_ps(g);
    if constexpr (Scaled) {
        grad = _mm512_mul_ps(grad, k.grad_scale);
        asm("" : "+v"(grad));  // keeps this product out of an FMA with the decay
    }
    if constexpr (Decay) grad = _mm512_fmadd_ps(param, k.weight_decay, grad);
    if constexpr (Momentum) {
        __m512 buf = Masked ? _mm512_maskz_loadu_ps(lanes, b) : _mm512_loadu_ps(b);
        buf = _mm512_mul_ps(buf, k.momentum);
        asm("" : "+v"(buf));  // b * mu is rounded before g is added, as the reference does
        buf = _mm512_add_ps(buf, grad);
        if constexpr (Masked)
            _mm512_mask_storeu_ps(b, lanes, buf);
        else
            _mm512_storeu_ps(b, buf);
        grad = Nesterov ? _mm512_fmadd_ps(buf, k.momentum, grad) : buf;
    }
    const __m512 updated = _mm512_fmadd_ps(grad, k.neg_lr, param);
    if constexpr (Masked)
        _mm512_mask_storeu_ps(p, lanes, updated);
    else
        _mm512_storeu_ps(p, updated);
}

template <bool Decay, bool Momentum, bool Nesterov, bool Scaled>
__attribute__((target("avx512f"))) inline void sgd_kernel_avx512f(float* p, const float* g, float* b, std::size_t n,
                                                                  const sgd_constants<float>& s, float grad_scale) {
    const sgd_avx512f_constants k{_mm512_set1_ps(s.weight_decay), _mm512_set1_ps(s.momentum), _mm512_set1_ps(s.neg_lr),
                                  _mm512_set1_ps(grad_scale)};
    constexpr std::size_t width = 16;
    const auto first_lanes = [](std::size_t count) { return static_cast<__mmask16>((1u << count) - 1); };
    std::size_t head = (64 - reinterpret_cast<std::uintptr_t>(p) % 64) % 64 / sizeof(float);
    if (head > n) head = n;
    if (head > 0) sgd_lanes_avx512f<true, Decay, Momentum, Nesterov, Scaled>(p, g, b, first_lanes(head), k);
    std::size_t i = head;
    for (; i + width <= n; i += width)
        sgd_lanes_avx512f<false, Decay, Momentum, Nesterov, Scaled>(p + i, g + i, b + i, 0xFFFF, k);
    if (i < n) sgd_lanes_avx512f<true, Decay, Momentum, Nesterov, Scaled>(p + i, g + i, b + i, first_lanes(n - i), k);
}

// ---- AVX2 + FMA: 8 lanes, heads and tails through maskload/maskstore ----

struct sgd_avx2_constants {
    __m256 weight_decay, momentum, neg_lr, grad_scale;
};

template <bool Masked, bool Decay, bool Momentum, bool Nesterov, bool Scaled>
__attribute__((target("avx2,fma"), always_inline)) inline void sgd_lanes_avx2(float* p, const float* g, float* b,
                                                                             __m256i lanes,
                                                                             const sgd_avx2_constants& k) {
    const __m256 param = Masked ? _mm256_maskload_ps(p, lanes) : _mm256_loadu_ps(p);
    __m256 grad = Masked ? _mm256_maskload_ps(g, lanes) : _mm256_loadu_ps(g);
    if constexpr (Scaled) {
        grad = _mm256_mul_ps(grad, k.grad_scale);
        asm("" : "+v"(grad));  // keeps this product out of an FMA with the decay
    }
    if constexpr (Decay) grad = _mm256_fmadd_ps(param, k.weight_decay, grad);
    if constexpr (Momentum) {
        __m256 buf = Masked ? _mm256_maskload_ps(b, lanes) : _mm256_loadu_ps(b);
        buf = _mm256_mul_ps(buf, k.momentum);
        asm("" : "+v"(buf));  // b * mu is rounded before g is added, as the reference does
        buf = _mm256_add_ps(buf, grad);
        if constexpr (Masked)
            _mm256_maskstore_ps(b, lanes, buf);
        else
            _mm256_storeu_ps(b, buf);
        grad = Nesterov ? _mm256_fmadd_ps(buf, k.momentum, grad) : buf;
    }
    const __m256 updated = _mm256_fmadd_ps(grad, k.neg_lr, param);
    if constexpr (Masked)
        _mm256_maskstore_ps(p, lanes, updated);
    else
        _mm256_storeu_ps(p, updated);
}

template <bool Decay, bool Momentum, bool Nesterov, bool Scaled>
__attribute__((target("avx2,fma"))) inline void sgd_kernel_avx2(float* p, const float* g, float* b, std::size_t n,
                                                                const sgd_constants<float>& s, float grad_scale) {
    const sgd_avx2_constants k{_mm256_set1_ps(s.weight_decay), _mm256_set1_ps(s.momentum), _mm256_set1_ps(s.neg_lr),
                               _mm256_set1_ps(grad_scale)};
    constexpr std::size_t width = 8;
    std::size_t head = (32 - reinterpret_cast<std::uintptr_t>(p) % 32) % 32 / sizeof(float);
    if (head > n) head = n;
    if (head > 0) sgd_lanes_avx2<true, Decay, Momentum, Nesterov, Scaled>(p, g, b, first_lanes_avx2(head), k);
    std::size_t i = head;
    const __m256i all_lanes = _mm256_set1_epi32(-1);
    for (; i + width <= n; i += width)
        sgd_lanes_avx2<false, Decay, Momentum, Nesterov, Scaled>(p + i, g + i, b + i, all_lanes, k);
    if (i < n) sgd_lanes_avx2<true, Decay, Momentum, Nesterov, Scaled>(p + i, g + i, b + i, first_lanes_avx2(n - i), k);
}

#endif  // __x86_64__

// One step over n elements on a resolved path; grad_scale 1 skips the scale.
inline void sgd_range(adamw_path path, const sgd_constants<float>& s, float* p, const float* g, float* b,
                      std::size_t n, float grad_scale = 1.0f) {
#if defined(__x86_64__)
    const bool scaled = grad_scale != 1.0f;
    if (path == adamw_path::avx512f) {
        with_sgd_flags(s, scaled, [&](auto decay, auto momentum, auto nesterov, auto scale) {
            sgd_kernel_avx512f<decltype(decay)::value, decltype(momentum)::value, decltype(nesterov)::value,
                               decltype(scale)::value>(p, g, b, n, s, grad_scale);
        });
        return;
    }
    if (path == adamw_path::avx2_fma) {
        with_sgd_flags(s, scaled, [&](auto decay, auto momentum, auto nesterov, auto scale) {
            sgd_kernel_avx2<decltype(decay)::value, decltype(momentum)::value, decltype(nesterov)::value,
                            decltype(scale)::value>(p, g, b, n, s, grad_scale);
        });
        return;
    }
#endif
    sgd_apply(p, g, b, n, s, grad_scale);  // the scalar path is the reference's own loop
}

}  // namespace detail

// One SGD step over a flat block of float parameters on the calling thread: sgd_update<float>'s
// contract and bits, vectorized. `path` forces an implementation (adamw_path names the instruction
// sets).
inline void sgd_update_fast(std::span<float> p, std::span<const float> g, std::span<float> b, const sgd_hparams& h,
                            double lr, bool decay, adamw_path path = adamw_path::automatic, float grad_scale = 1.0f) {
    const auto s = detail::prepare_sgd_step("sgd_update_fast", p.size(), g.size(), b.size(), h, lr, decay, grad_scale);
    detail::sgd_range(resolve(path), s, p.data(), g.data(), b.data(), p.size(), grad_scale);
}

// sgd_update_fast split over the pool's threads in chunks whose boundaries fall on 64-byte lines
// of p. Bitwise equal to sgd_update<float> for every thread count.
inline void sgd_update_parallel(host_thread_pool& pool, std::span<float> p, std::span<const float> g,
                                std::span<float> b, const sgd_hparams& h, double lr, bool decay,
                                adamw_path path = adamw_path::automatic, float grad_scale = 1.0f) {
    const auto s =
        detail::prepare_sgd_step("sgd_update_parallel", p.size(), g.size(), b.size(), h, lr, decay, grad_scale);
    const adamw_path use = resolve(path);
    detail::for_each_cache_line_chunk(pool, p, [&](std::size_t begin, std::size_t end) {
        detail::sgd_range(use, s, p.data() + begin, g.data() + begin, b.data() + begin, end - begin, grad_scale);
    });
}

}  // namespace strata
