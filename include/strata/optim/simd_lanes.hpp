// Lane traits: what the element-wise optimizers' vector loops need from an instruction set (load,
// store, broadcast, the four IEEE operations, fma, sqrt, a sign flip, a mask of the first lanes),
// one struct per x86 instruction set, and the one loop that walks an array with them.
//
// The loops themselves are written once per optimizer (optim/detail/adamw_kernel.inl,
// optim/detail/sgd_kernel.inl) and compiled once per instruction set by optim/detail/for_each_isa.inl.
// A template over the traits cannot do this alone: GCC and clang inline an intrinsic (always_inline,
// target-specific) only into a function compiled for its instruction set, and a template cannot
// take its target attribute from a template parameter. So each body file is included in a
// namespace per instruction set (avx512f, avx2_fma), after `lanes` names that set's traits and
// STRATA_SIMD_TARGET its target attribute; both are local to that inclusion.
//
// Every member is the one intrinsic it names, so a loop over the traits compiles to the
// instructions that a loop written with the intrinsics would: the traits change no bit.
#pragma once

#include <climits>  // INT_MIN
#include <cstddef>  // std::size_t
#include <cstdint>  // std::uintptr_t

#if defined(__x86_64__)
#include <immintrin.h>  // AVX2, FMA and AVX-512F intrinsics
#endif

namespace strata::detail {

#if defined(__x86_64__)

// Every lane of a vector: the unmasked load and store. A loop passes this or a traits' `mask`, and
// overload resolution picks the instruction.
struct full_vector {};

// Software prefetch this far ahead in each array. With 16 threads on the H200 host (Xeon, 1 GiB of
// AdamW state) it lifted AdamW from ~0.9x to ~1.0x the bandwidth of a plain stream with the same
// traffic (4.9 -> 5.6 G params/s; 1 KiB ahead gave the same): the hardware prefetchers alone keep
// too few lines in flight while the core waits on divisions.
inline constexpr std::size_t simd_prefetch_floats = 512 / sizeof(float);

// A prefetch of a line past an array's end is harmless: a prefetch never faults.
__attribute__((always_inline)) inline void prefetch_ahead(const float* a) {
    _mm_prefetch(reinterpret_cast<const char*>(a + simd_prefetch_floats), _MM_HINT_T0);
}

#define STRATA_LANE __attribute__((target("avx512f"), always_inline)) static

// AVX-512F: 16 lanes, heads and tails through k-masks.
struct avx512f_lanes {
    using vec = __m512;
    using mask = __mmask16;
    static constexpr std::size_t width = 16;
    static constexpr std::size_t align = 64;  // bytes: full vectors then store on cache-line boundaries

    STRATA_LANE mask first(std::size_t count) { return static_cast<mask>((1u << count) - 1); }  // count <= 16
    STRATA_LANE vec load(const float* a, full_vector) { return _mm512_loadu_ps(a); }
    STRATA_LANE vec load(const float* a, mask lanes) { return _mm512_maskz_loadu_ps(lanes, a); }
    STRATA_LANE void store(float* a, full_vector, vec x) { _mm512_storeu_ps(a, x); }
    STRATA_LANE void store(float* a, mask lanes, vec x) { _mm512_mask_storeu_ps(a, lanes, x); }
    STRATA_LANE vec broadcast(float x) { return _mm512_set1_ps(x); }
    STRATA_LANE vec add(vec a, vec b) { return _mm512_add_ps(a, b); }
    STRATA_LANE vec sub(vec a, vec b) { return _mm512_sub_ps(a, b); }
    STRATA_LANE vec mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
    STRATA_LANE vec div(vec a, vec b) { return _mm512_div_ps(a, b); }
    STRATA_LANE vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c, one rounding
    // maskz with every lane set is plain vsqrtps; _mm512_sqrt_ps trips GCC 12's -Wmaybe-uninitialized
    STRATA_LANE vec sqrt(vec x) { return _mm512_maskz_sqrt_ps(static_cast<mask>(0xFFFF), x); }
    // -x as scalar code does it, a flip of the sign bit (AVX-512F has no float xor: the integer one)
    STRATA_LANE vec negate(vec x) {
        return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT_MIN)));
    }
};

#undef STRATA_LANE
#define STRATA_LANE __attribute__((target("avx2,fma"), always_inline)) static

// AVX2 + FMA: 8 lanes, heads and tails through maskload/maskstore.
struct avx2_fma_lanes {
    using vec = __m256;
    using mask = __m256i;
    static constexpr std::size_t width = 8;
    static constexpr std::size_t align = 32;  // bytes: full vectors then never split a cache line

    STRATA_LANE mask first(std::size_t count) {  // count <= 8
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    STRATA_LANE vec load(const float* a, full_vector) { return _mm256_loadu_ps(a); }
    STRATA_LANE vec load(const float* a, mask lanes) { return _mm256_maskload_ps(a, lanes); }
    STRATA_LANE void store(float* a, full_vector, vec x) { _mm256_storeu_ps(a, x); }
    STRATA_LANE void store(float* a, mask lanes, vec x) { _mm256_maskstore_ps(a, lanes, x); }
    STRATA_LANE vec broadcast(float x) { return _mm256_set1_ps(x); }
    STRATA_LANE vec add(vec a, vec b) { return _mm256_add_ps(a, b); }
    STRATA_LANE vec sub(vec a, vec b) { return _mm256_sub_ps(a, b); }
    STRATA_LANE vec mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
    STRATA_LANE vec div(vec a, vec b) { return _mm256_div_ps(a, b); }
    STRATA_LANE vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c, one rounding
    STRATA_LANE vec sqrt(vec x) { return _mm256_sqrt_ps(x); }
    STRATA_LANE vec negate(vec x) { return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f)); }  // a flip of the sign bit
};

#undef STRATA_LANE

// for_each_vector(p, n, step, each_line) in namespaces avx512f and avx2_fma.
#define STRATA_SIMD_BODY <strata/optim/detail/vector_loop.inl>
#include <strata/optim/detail/for_each_isa.inl>

#endif  // __x86_64__

}  // namespace strata::detail
