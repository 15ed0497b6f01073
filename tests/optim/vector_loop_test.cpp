// The element-wise optimizers' shared vector walk (strata/optim/detail/vector_loop.inl) on every
// instruction set this CPU has: each element of [0, n) visited once and nothing outside it written,
// for every length and every misalignment of the array; full vectors on aligned addresses; the
// per-line hook (AdamW's prefetch) once per 64-byte line of full vectors.
#include <strata/optim/adamw_simd.hpp>  // adamw_path, adamw_path_available, name_of
#include <strata/optim/simd_lanes.hpp>  // avx512f_lanes, avx2_fma_lanes, for_each_vector

#include "adamw_data.hpp"  // available_paths

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE, CAPTURE, MESSAGE

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uintptr_t
#include <vector>   // std::vector

#if defined(__x86_64__)
namespace strata::detail {
// test_count_visits(a, n, lines) in namespaces avx512f and avx2_fma.
#define STRATA_SIMD_BODY <optim/vector_loop_body.inl>
#include <strata/optim/detail/for_each_isa.inl>
}  // namespace strata::detail
#endif

namespace vector_loop_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

#if defined(__x86_64__)
// Walks [offset, offset + n) of a zeroed, 64-byte aligned buffer with 16 guard floats on each side
// and checks what `Lanes`' loop touched and where the per-line hook ran.
template <class Lanes>
void check_walk(void (*count_visits)(float*, std::size_t, std::vector<std::size_t>&), std::size_t n,
                std::size_t offset) {
    constexpr std::size_t guard = 16;
    std::vector<float> storage(n + offset + 2 * guard + 16, 0.0f);
    float* base = storage.data();
    while (reinterpret_cast<std::uintptr_t>(base) % 64 != 0) ++base;
    float* a = base + guard + offset;
    std::vector<std::size_t> lines;
    count_visits(a, n, lines);

    for (std::size_t i = 0; i < n + offset + 2 * guard; ++i) {
        const bool inside = i >= guard + offset && i < guard + offset + n;
        CAPTURE(i);
        REQUIRE(base[i] == (inside ? 1.0f : 0.0f));  // once each inside, never outside
    }
    // Full vectors start after a head up to the next Lanes::align bytes; the hook runs before every
    // 64 / sizeof(float)-th of them, starting with the first.
    std::size_t head = (Lanes::align - reinterpret_cast<std::uintptr_t>(a) % Lanes::align) % Lanes::align / sizeof(float);
    if (head > n) head = n;
    std::vector<std::size_t> expected;
    for (std::size_t i = head; i + Lanes::width <= n; i += Lanes::width)
        if ((i - head) % 16 == 0) expected.push_back(i);
    CHECK(lines == expected);
    for (const std::size_t i : lines) CHECK(reinterpret_cast<std::uintptr_t>(a + i) % Lanes::align == 0);
}
#endif

}  // namespace

TEST_CASE("the vector walk visits every element once on every length and misalignment, on every instruction set") {
    for (const strata::adamw_path path : strata_test::available_paths()) {  // announces the ones this CPU lacks
        if (path == strata::adamw_path::scalar) continue;                    // the scalar path has no vector walk
#if defined(__x86_64__)
        CAPTURE(strata::name_of(path));
        for (std::size_t n = 0; n <= 70; ++n) {
            for (std::size_t offset = 0; offset < 16; ++offset) {
                CAPTURE(n);
                CAPTURE(offset);
                if (path == strata::adamw_path::avx512f)
                    check_walk<strata::detail::avx512f_lanes>(strata::detail::avx512f::test_count_visits, n, offset);
                else
                    check_walk<strata::detail::avx2_fma_lanes>(strata::detail::avx2_fma::test_count_visits, n, offset);
            }
        }
#endif
    }
}

}  // namespace vector_loop_test
