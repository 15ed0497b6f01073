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
#include <strata/optim/simd_lanes.hpp>        // avx512f_lanes, avx2_fma_lanes, for_each_vector
#include <strata/optim/sgd.hpp>               // sgd_hparams, sgd_constants, sgd_apply (the reference)

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uintptr_t
#include <span>         // std::span
#include <string_view>  // std::string_view
#include <type_traits>  // std::bool_constant

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
// sgd_kernel(s, p, g, b, n, grad_scale) in namespaces avx512f and avx2_fma: SGD's vector loop,
// written once over the lane traits and compiled for each instruction set.
#define STRATA_SIMD_BODY <strata/optim/detail/sgd_kernel.inl>
#include <strata/optim/detail/for_each_isa.inl>
#endif

// One step over n elements on a resolved path; grad_scale 1 skips the scale.
inline void sgd_range(adamw_path path, const sgd_constants<float>& s, float* p, const float* g, float* b,
                      std::size_t n, float grad_scale = 1.0f) {
#if defined(__x86_64__)
    if (path == adamw_path::avx512f) return avx512f::sgd_kernel(s, p, g, b, n, grad_scale);
    if (path == adamw_path::avx2_fma) return avx2_fma::sgd_kernel(s, p, g, b, n, grad_scale);
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
