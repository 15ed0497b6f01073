// Compiles one SIMD body file once per x86 instruction set (see optim/simd_lanes.hpp for why):
//
//   #define STRATA_SIMD_BODY <strata/optim/detail/adamw_kernel.inl>
//   #include <strata/optim/detail/for_each_isa.inl>
//
// inside namespace strata::detail gives the body's functions in detail::avx512f and
// detail::avx2_fma. The body names the instruction set's traits `lanes` and marks each of its
// functions STRATA_SIMD_TARGET. No include guard: it is meant to be included several times;
// STRATA_SIMD_BODY is undefined again at the end.
#ifndef STRATA_SIMD_BODY
#error "define STRATA_SIMD_BODY as the body file to compile per instruction set before including for_each_isa.inl"
#endif

namespace avx512f {
using lanes = avx512f_lanes;
#define STRATA_SIMD_TARGET __attribute__((target("avx512f")))
#include STRATA_SIMD_BODY
#undef STRATA_SIMD_TARGET
}  // namespace avx512f

namespace avx2_fma {
using lanes = avx2_fma_lanes;
#define STRATA_SIMD_TARGET __attribute__((target("avx2,fma")))
#include STRATA_SIMD_BODY
#undef STRATA_SIMD_TARGET
}  // namespace avx2_fma

#undef STRATA_SIMD_BODY
