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
// i.e. the same vector code, not a second scalar loop. The loop is written once
// (optim/detail/adamw_kernel.inl) over lane traits (optim/simd_lanes.hpp) and compiled once per
// instruction set.
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
#include <strata/optim/simd_lanes.hpp>        // avx512f_lanes, avx2_fma_lanes, for_each_vector

#include <cfenv>        // std::fenv_t, std::fegetenv, std::fesetenv
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uintptr_t
#include <span>         // std::span
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <type_traits>  // std::bool_constant

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
// adamw_kernel(s, p, g, m, v, n, grad_scale) in namespaces avx512f and avx2_fma: AdamW's vector
// loop, written once over the lane traits and compiled for each instruction set.
#define STRATA_SIMD_BODY <strata/optim/detail/adamw_kernel.inl>
#include <strata/optim/detail/for_each_isa.inl>
#endif

// One step over n elements on a resolved (concrete, available) path; grad_scale 1 skips the scale.
inline void adamw_range(adamw_path path, const adamw_constants<float>& s, float* p, const float* g, float* m, float* v,
                        std::size_t n, float grad_scale = 1.0f) {
#if defined(__x86_64__)
    if (path == adamw_path::avx512f) return avx512f::adamw_kernel(s, p, g, m, v, n, grad_scale);
    if (path == adamw_path::avx2_fma) return avx2_fma::adamw_kernel(s, p, g, m, v, n, grad_scale);
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
