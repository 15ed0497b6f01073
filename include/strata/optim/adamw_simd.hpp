// Vectorized and multi-threaded AdamW for float, bitwise equal to the scalar reference
// adamw_update<float> (strata/optim/adamw.hpp), which is itself torch's AdamW bit for bit.
//
// Each element goes through exactly the reference's IEEE operations in the reference's order: the
// same two fused multiply-adds (m's lerp, v's addcmul), separate multiplies, adds and divisions
// everywhere else, and a correctly rounded sqrt; the per-step scalars are computed in double and
// rounded to float exactly as the reference does. Vector lanes are independent, so the vector
// width, the alignment of the arrays and the thread count cannot change a single bit.
//
// The instruction set is picked at run time (__builtin_cpu_supports), per function with
// __attribute__((target(...))), so the library needs no -march flag: AVX-512F, else AVX2 + FMA,
// else the scalar reference. Heads and tails shorter than a vector use masked loads and stores,
// i.e. the same vector code, not a second scalar loop.
//
// Two compiler habits could break the equality, and are refused here:
// - contraction (-ffp-contract=fast, GCC's default in gnu++ modes): GCC's intrinsics are plain
//   vector arithmetic, so it may fuse the decay multiply into the final add. An empty asm makes
//   that product opaque; it costs no instruction.
// - -ffast-math (reciprocals, reassociation): this header refuses to compile under it.
// The same empty asm keeps the optional gradient scale (a clip folded into the update: g * scale,
// one rounding, as kernels::cpu::scale_inplace would store it) out of an FMA with `g - m`.
#pragma once

#include <strata/core/error.hpp>              // strata::error
#include <strata/optim/adamw.hpp>             // adamw_hparams, adamw_constants, adamw_apply (the reference)
#include <strata/optim/host_thread_pool.hpp>  // host_thread_pool, chunking

#include <cfenv>        // std::fenv_t, std::fegetenv, std::fesetenv
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uintptr_t
#include <span>         // std::span
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <type_traits>  // std::bool_constant

#if defined(__x86_64__)
#include <immintrin.h>  // AVX2, FMA and AVX-512F intrinsics
#endif

#ifdef __FAST_MATH__
#error "strata/optim/adamw_simd.hpp promises results bitwise equal to the reference AdamW, and -ffast-math lets the compiler reorder and approximate that arithmetic: compile this file without it"
#endif

namespace strata {

// Which implementation runs. `automatic` is the widest one this CPU supports; the others force a
// path (tests compare every path the machine has) and throw when the CPU lacks it.
enum class adamw_path { automatic, scalar, avx2_fma, avx512f };

constexpr std::string_view name_of(adamw_path path) {
    switch (path) {
        case adamw_path::automatic: return "automatic";
        case adamw_path::scalar: return "scalar";
        case adamw_path::avx2_fma: return "avx2_fma";
        case adamw_path::avx512f: return "avx512f";
    }
    return "unknown";
}

inline bool adamw_path_available(adamw_path path) noexcept {
    switch (path) {
        case adamw_path::automatic:
        case adamw_path::scalar: return true;
#if defined(__x86_64__)
        case adamw_path::avx2_fma:
            __builtin_cpu_init();
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        case adamw_path::avx512f:
            __builtin_cpu_init();
            return __builtin_cpu_supports("avx512f");  // libgcc also checks that the OS saves zmm state
#endif
        default: return false;
    }
}

inline adamw_path adamw_best_path() noexcept {
    static const adamw_path best = adamw_path_available(adamw_path::avx512f)    ? adamw_path::avx512f
                                   : adamw_path_available(adamw_path::avx2_fma) ? adamw_path::avx2_fma
                                                                                : adamw_path::scalar;
    return best;
}

// The concrete path `path` stands for on this CPU; throws when a forced path is not available.
inline adamw_path resolve(adamw_path path) {
    if (path == adamw_path::automatic) return adamw_best_path();
    if (!adamw_path_available(path)) {
        std::string available = "scalar";
        for (const adamw_path p : {adamw_path::avx2_fma, adamw_path::avx512f})
            if (adamw_path_available(p)) available += ", " + std::string(name_of(p));
        throw error("adamw: the " + std::string(name_of(path)) + " path is not available on this CPU",
                    "this CPU has: " + available + "; adamw_path::automatic picks the best of them");
    }
    return path;
}

namespace detail {

// Checks the arguments as adamw_update does (same conditions), naming the caller, and computes the
// step's float constants with the reference's own function.
inline adamw_constants<float> prepare_adamw_step(std::string_view who, std::size_t p, std::size_t g, std::size_t m,
                                                 std::size_t v, const adamw_hparams& h, double lr, long step,
                                                 bool decay, float grad_scale) {
    check_adamw_sizes(who, p, g, m, v);
    check_grad_scale(who, grad_scale);
    return adamw_constants_for<float>(h, lr, step, decay, who);
}

// Calls kernel(decay, small_weight, scaled) with each flag as a std::bool_constant, so the element
// loops are compiled once per combination and test none of them per element.
template <class Kernel>
inline void with_adamw_flags(const adamw_constants<float>& s, bool scaled, Kernel&& kernel) {
    const auto on_scale = [&](auto decay, auto small_weight) {
        scaled ? kernel(decay, small_weight, std::true_type{}) : kernel(decay, small_weight, std::false_type{});
    };
    const auto on_weight = [&](auto decay) {
        s.lerp_weight_small ? on_scale(decay, std::true_type{}) : on_scale(decay, std::false_type{});
    };
    s.apply_decay ? on_weight(std::true_type{}) : on_weight(std::false_type{});
}

#if defined(__x86_64__)

// Software prefetch this far ahead in each of p, g, m, v. With 16 threads on the H200 host (Xeon,
// 1 GiB of state) it lifted AdamW from ~0.9x to ~1.0x the bandwidth of a plain stream with the
// same traffic (4.9 -> 5.6 G params/s; 1 KiB ahead gave the same): the hardware prefetchers alone
// keep too few lines in flight while the core waits on divisions.
inline constexpr std::size_t adamw_prefetch_floats = 512 / sizeof(float);

// Prefetches of lines past the arrays' ends are harmless: a prefetch never faults.
__attribute__((always_inline)) inline void prefetch_four(const float* p, const float* g, const float* m,
                                                         const float* v) {
    _mm_prefetch(reinterpret_cast<const char*>(p + adamw_prefetch_floats), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(g + adamw_prefetch_floats), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(m + adamw_prefetch_floats), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(v + adamw_prefetch_floats), _MM_HINT_T0);
}

// ---- AVX-512F: 16 lanes, heads and tails through k-masks ----

struct adamw_avx512f_constants {
    __m512 decay_factor, lerp_weight, one_minus_lerp_weight, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
    __m512i sign_bit;
    __m512 grad_scale;
};

// One vector of elements: the reference's loop body, lane-wise.
template <bool Masked, bool Decay, bool SmallWeight, bool Scaled>
__attribute__((target("avx512f"), always_inline)) inline void adamw_lanes_avx512f(float* p, const float* g, float* m,
                                                                                  float* v, __mmask16 lanes,
                                                                                  const adamw_avx512f_constants& k) {
    __m512 param, grad, exp_avg, exp_avg_sq;
    if constexpr (Masked) {
        param = _mm512_maskz_loadu_ps(lanes, p);
        grad = _mm512_maskz_loadu_ps(lanes, g);
        exp_avg = _mm512_maskz_loadu_ps(lanes, m);
        exp_avg_sq = _mm512_maskz_loadu_ps(lanes, v);
    } else {
        param = _mm512_loadu_ps(p);
        grad = _mm512_loadu_ps(g);
        exp_avg = _mm512_loadu_ps(m);
        exp_avg_sq = _mm512_loadu_ps(v);
    }
    if constexpr (Scaled) {
        grad = _mm512_mul_ps(grad, k.grad_scale);
        asm("" : "+v"(grad));  // keeps this product out of an FMA with `grad - m`
    }
    if constexpr (Decay) {
        param = _mm512_mul_ps(param, k.decay_factor);
        asm("" : "+v"(param));  // keeps this product out of an FMA with the final add
    }
    const __m512 diff = _mm512_sub_ps(grad, exp_avg);
    if constexpr (SmallWeight) {
        exp_avg = _mm512_fmadd_ps(k.lerp_weight, diff, exp_avg);
    } else {  // fma(-(grad - m), 1 - w, grad): the negation is a sign flip, as in scalar code
        const __m512 neg_diff = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(diff), k.sign_bit));
        exp_avg = _mm512_fmadd_ps(neg_diff, k.one_minus_lerp_weight, grad);
    }
    exp_avg_sq = _mm512_mul_ps(exp_avg_sq, k.beta2);
    exp_avg_sq = _mm512_fmadd_ps(_mm512_mul_ps(k.one_minus_beta2, grad), grad, exp_avg_sq);
    // maskz with every lane set is plain vsqrtps; _mm512_sqrt_ps trips GCC 12's -Wmaybe-uninitialized
    const __m512 root = _mm512_maskz_sqrt_ps(static_cast<__mmask16>(0xFFFF), exp_avg_sq);
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(root, k.bc2_sqrt), k.eps);
    param = _mm512_add_ps(param, _mm512_div_ps(_mm512_mul_ps(k.neg_step_size, exp_avg), denom));
    if constexpr (Masked) {
        _mm512_mask_storeu_ps(p, lanes, param);
        _mm512_mask_storeu_ps(m, lanes, exp_avg);
        _mm512_mask_storeu_ps(v, lanes, exp_avg_sq);
    } else {
        _mm512_storeu_ps(p, param);
        _mm512_storeu_ps(m, exp_avg);
        _mm512_storeu_ps(v, exp_avg_sq);
    }
}

template <bool Decay, bool SmallWeight, bool Scaled>
__attribute__((target("avx512f"))) inline void adamw_kernel_avx512f(float* p, const float* g, float* m, float* v,
                                                                    std::size_t n, const adamw_constants<float>& s,
                                                                    float grad_scale) {
    // Copied into vectors before the first store: p, m, v are floats and could alias `s`.
    const adamw_avx512f_constants k{_mm512_set1_ps(s.decay_factor),    _mm512_set1_ps(s.lerp_weight),
                                    _mm512_set1_ps(1.0f - s.lerp_weight), _mm512_set1_ps(s.beta2),
                                    _mm512_set1_ps(s.one_minus_beta2), _mm512_set1_ps(s.bc2_sqrt),
                                    _mm512_set1_ps(s.eps),             _mm512_set1_ps(s.neg_step_size),
                                    _mm512_set1_epi32(static_cast<int>(0x80000000u)), _mm512_set1_ps(grad_scale)};
    constexpr std::size_t width = 16;
    const auto first_lanes = [](std::size_t count) { return static_cast<__mmask16>((1u << count) - 1); };
    // A masked head up to p's next cache line, so the full vectors store p on 64-byte boundaries.
    std::size_t head = (64 - reinterpret_cast<std::uintptr_t>(p) % 64) % 64 / sizeof(float);
    if (head > n) head = n;
    if (head > 0) adamw_lanes_avx512f<true, Decay, SmallWeight, Scaled>(p, g, m, v, first_lanes(head), k);
    std::size_t i = head;
    for (; i + width <= n; i += width) {
        prefetch_four(p + i, g + i, m + i, v + i);  // one cache line of each per iteration
        adamw_lanes_avx512f<false, Decay, SmallWeight, Scaled>(p + i, g + i, m + i, v + i, 0xFFFF, k);
    }
    if (i < n) adamw_lanes_avx512f<true, Decay, SmallWeight, Scaled>(p + i, g + i, m + i, v + i, first_lanes(n - i), k);
}

// ---- AVX2 + FMA: 8 lanes, heads and tails through maskload/maskstore ----

struct adamw_avx2_constants {
    __m256 decay_factor, lerp_weight, one_minus_lerp_weight, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
    __m256 sign_bit;
    __m256 grad_scale;
};

template <bool Masked, bool Decay, bool SmallWeight, bool Scaled>
__attribute__((target("avx2,fma"), always_inline)) inline void adamw_lanes_avx2(float* p, const float* g, float* m,
                                                                               float* v, __m256i lanes,
                                                                               const adamw_avx2_constants& k) {
    __m256 param, grad, exp_avg, exp_avg_sq;
    if constexpr (Masked) {
        param = _mm256_maskload_ps(p, lanes);
        grad = _mm256_maskload_ps(g, lanes);
        exp_avg = _mm256_maskload_ps(m, lanes);
        exp_avg_sq = _mm256_maskload_ps(v, lanes);
    } else {
        param = _mm256_loadu_ps(p);
        grad = _mm256_loadu_ps(g);
        exp_avg = _mm256_loadu_ps(m);
        exp_avg_sq = _mm256_loadu_ps(v);
    }
    if constexpr (Scaled) {
        grad = _mm256_mul_ps(grad, k.grad_scale);
        asm("" : "+v"(grad));  // keeps this product out of an FMA with `grad - m`
    }
    if constexpr (Decay) {
        param = _mm256_mul_ps(param, k.decay_factor);
        asm("" : "+v"(param));  // keeps this product out of an FMA with the final add
    }
    const __m256 diff = _mm256_sub_ps(grad, exp_avg);
    if constexpr (SmallWeight) {
        exp_avg = _mm256_fmadd_ps(k.lerp_weight, diff, exp_avg);
    } else {  // fma(-(grad - m), 1 - w, grad): the negation is a sign flip, as in scalar code
        exp_avg = _mm256_fmadd_ps(_mm256_xor_ps(diff, k.sign_bit), k.one_minus_lerp_weight, grad);
    }
    exp_avg_sq = _mm256_mul_ps(exp_avg_sq, k.beta2);
    exp_avg_sq = _mm256_fmadd_ps(_mm256_mul_ps(k.one_minus_beta2, grad), grad, exp_avg_sq);
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(exp_avg_sq), k.bc2_sqrt), k.eps);
    param = _mm256_add_ps(param, _mm256_div_ps(_mm256_mul_ps(k.neg_step_size, exp_avg), denom));
    if constexpr (Masked) {
        _mm256_maskstore_ps(p, lanes, param);
        _mm256_maskstore_ps(m, lanes, exp_avg);
        _mm256_maskstore_ps(v, lanes, exp_avg_sq);
    } else {
        _mm256_storeu_ps(p, param);
        _mm256_storeu_ps(m, exp_avg);
        _mm256_storeu_ps(v, exp_avg_sq);
    }
}

// The mask of lanes [0, count), count <= 8.
__attribute__((target("avx2"), always_inline)) inline __m256i first_lanes_avx2(std::size_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <bool Decay, bool SmallWeight, bool Scaled>
__attribute__((target("avx2,fma"))) inline void adamw_kernel_avx2(float* p, const float* g, float* m, float* v,
                                                                  std::size_t n, const adamw_constants<float>& s,
                                                                  float grad_scale) {
    const adamw_avx2_constants k{_mm256_set1_ps(s.decay_factor),    _mm256_set1_ps(s.lerp_weight),
                                 _mm256_set1_ps(1.0f - s.lerp_weight), _mm256_set1_ps(s.beta2),
                                 _mm256_set1_ps(s.one_minus_beta2), _mm256_set1_ps(s.bc2_sqrt),
                                 _mm256_set1_ps(s.eps),             _mm256_set1_ps(s.neg_step_size),
                                 _mm256_set1_ps(-0.0f),             _mm256_set1_ps(grad_scale)};
    constexpr std::size_t width = 8;
    // A masked head up to p's next 32-byte boundary: full vectors then never split a cache line.
    std::size_t head = (32 - reinterpret_cast<std::uintptr_t>(p) % 32) % 32 / sizeof(float);
    if (head > n) head = n;
    if (head > 0) adamw_lanes_avx2<true, Decay, SmallWeight, Scaled>(p, g, m, v, first_lanes_avx2(head), k);
    std::size_t i = head;
    const __m256i all_lanes = _mm256_set1_epi32(-1);
    for (; i + width <= n; i += width) {
        if ((i - head) % 16 == 0) prefetch_four(p + i, g + i, m + i, v + i);  // once per cache line of p
        adamw_lanes_avx2<false, Decay, SmallWeight, Scaled>(p + i, g + i, m + i, v + i, all_lanes, k);
    }
    if (i < n) adamw_lanes_avx2<true, Decay, SmallWeight, Scaled>(p + i, g + i, m + i, v + i, first_lanes_avx2(n - i), k);
}

#endif  // __x86_64__

// One step over n elements on a resolved (concrete, available) path; grad_scale 1 skips the scale.
inline void adamw_range(adamw_path path, const adamw_constants<float>& s, float* p, const float* g, float* m, float* v,
                        std::size_t n, float grad_scale = 1.0f) {
#if defined(__x86_64__)
    const bool scaled = grad_scale != 1.0f;
    if (path == adamw_path::avx512f) {
        with_adamw_flags(s, scaled, [&](auto decay, auto small_weight, auto scale) {
            adamw_kernel_avx512f<decltype(decay)::value, decltype(small_weight)::value, decltype(scale)::value>(
                p, g, m, v, n, s, grad_scale);
        });
        return;
    }
    if (path == adamw_path::avx2_fma) {
        with_adamw_flags(s, scaled, [&](auto decay, auto small_weight, auto scale) {
            adamw_kernel_avx2<decltype(decay)::value, decltype(small_weight)::value, decltype(scale)::value>(
                p, g, m, v, n, s, grad_scale);
        });
        return;
    }
#endif
    // The scalar path is the reference's own element loop.
    adamw_apply(p, g, m, v, n, s, grad_scale);
}

// Runs a chunk on a pool thread under the caller's floating-point environment (rounding mode,
// flush-to-zero and denormals-are-zero bits), so the thread count cannot change results even when
// the caller runs with FTZ/DAZ set; the thread's own environment is restored afterwards.
class scoped_fenv {
public:
    explicit scoped_fenv(const std::fenv_t& wanted) {
        std::fegetenv(&m_saved);
        std::fesetenv(&wanted);
    }
    scoped_fenv(const scoped_fenv&) = delete;
    scoped_fenv& operator=(const scoped_fenv&) = delete;
    ~scoped_fenv() { std::fesetenv(&m_saved); }

private:
    std::fenv_t m_saved;
};

}  // namespace detail

// One AdamW step over a flat block of float parameters on the calling thread: the same contract
// and the same bits as adamw_update<float>, vectorized (grad_scale included). `path` forces an
// implementation.
inline void adamw_update_fast(std::span<float> p, std::span<const float> g, std::span<float> m, std::span<float> v,
                              const adamw_hparams& h, double lr, long step, bool decay,
                              adamw_path path = adamw_path::automatic, float grad_scale = 1.0f) {
    const auto s = detail::prepare_adamw_step("adamw_update_fast", p.size(), g.size(), m.size(), v.size(), h, lr, step,
                                              decay, grad_scale);
    detail::adamw_range(resolve(path), s, p.data(), g.data(), m.data(), v.data(), p.size(), grad_scale);
}

// Blocks shorter than this run on the calling thread alone: waking the workers costs more.
inline constexpr std::size_t adamw_parallel_min_chunk = std::size_t{1} << 15;

namespace detail {
// Runs chunk(begin, end) over [0, p.size()) on the pool's threads in contiguous chunks whose
// boundaries fall on 64-byte lines of p (no two threads write one line), each under the caller's
// floating-point environment: the element-wise optimizers' parallel loop.
template <class Chunk>
void for_each_cache_line_chunk(host_thread_pool& pool, std::span<const float> p, Chunk&& chunk) {
    std::fenv_t caller_env;
    std::fegetenv(&caller_env);
    const chunking on_cache_lines{.multiple = 64 / sizeof(float),
                                  .phase = reinterpret_cast<std::uintptr_t>(p.data()) % 64 / sizeof(float),
                                  .min_chunk = adamw_parallel_min_chunk};
    pool.parallel_for(
        p.size(),
        [&](std::size_t begin, std::size_t end) {
            const scoped_fenv same_rounding_as_caller(caller_env);
            chunk(begin, end);
        },
        on_cache_lines);
}
}  // namespace detail

// adamw_update_fast split over the pool's threads in contiguous chunks whose boundaries fall on
// 64-byte lines of p. Bitwise equal to adamw_update<float> (same grad_scale) for every thread count.
inline void adamw_update_parallel(host_thread_pool& pool, std::span<float> p, std::span<const float> g,
                                  std::span<float> m, std::span<float> v, const adamw_hparams& h, double lr, long step,
                                  bool decay, adamw_path path = adamw_path::automatic, float grad_scale = 1.0f) {
    const auto s = detail::prepare_adamw_step("adamw_update_parallel", p.size(), g.size(), m.size(), v.size(), h, lr,
                                              step, decay, grad_scale);
    const adamw_path use = resolve(path);
    detail::for_each_cache_line_chunk(pool, p, [&](std::size_t begin, std::size_t end) {
        detail::adamw_range(use, s, p.data() + begin, g.data() + begin, m.data() + begin, v.data() + begin,
                            end - begin, grad_scale);
    });
}

}  // namespace strata
