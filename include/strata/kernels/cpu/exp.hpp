// exp over a buffer, in place, for the softmaxes of the CPU kernels.
//
// Glossary: N number of elements.
//
// Built for the default x86-64 target (SSE2), Eigen's array exp() costs about 2.5 ns per float
// (its floor needs SSE4.1 to be one instruction), a tenth of the CPU attention's time. The float
// path below is Cephes' expf written as straight-line code that the compiler vectorizes (~1 ns per
// float): x = k ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 polynomial, 2^k written into the
// exponent bits. Its relative error is below float's epsilon on [-87, 88] (tests/kernels/
// exp_test.cpp); below -87 it returns exp(-87) ~ 1.6e-38 instead of a smaller value or 0, above 88
// exp(88). Doubles (the tests' precision), and buffers holding NaN or an infinity, use Eigen's exp.
#pragma once

#include <bit>          // std::bit_cast
#include <concepts>     // std::floating_point
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint32_t
#include <type_traits>  // std::is_same_v
#include <Eigen/Core>   // Eigen::Map, Eigen::Array

namespace strata::kernels::cpu {

namespace detail {

// exp(x) for x in [-87, 88]. No branch, no call and no float-to-int conversion (which would be
// undefined for NaN): k is read from the bits of x log2(e) + 1.5 * 2^23, whose low mantissa bits
// hold round(x log2(e)).
inline float exp_in_range(float x) {
    constexpr float round = 12582912.0f;  // 1.5 * 2^23
    const float biased = x * 1.44269504088896341f + round;
    const float k = biased - round;
    const float r = (x - k * 0.693359375f) + k * 2.12194440e-4f;  // ln2 in two parts: k * the first is exact
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    // biased's bits are 0x4B400000 + k; 2^k is (k + 127) in the exponent field.
    const std::uint32_t two_to_k = (std::bit_cast<std::uint32_t>(biased) - 0x4B400000u + 127u) << 23;
    return p * std::bit_cast<float>(two_to_k);
}

}  // namespace detail

// x_i = exp(x_i).
template <std::floating_point Real>
void exp_inplace(Real* x,  // (N)
                 std::size_t N) {
    auto values = Eigen::Map<Eigen::Array<Real, Eigen::Dynamic, 1>>(x, static_cast<Eigen::Index>(N));
    if constexpr (std::is_same_v<Real, float>) {
        // NaN and infinities take Eigen's exp below (NaN stays NaN, exp(-inf) ~ 0): the clamp would
        // lose them.
        if (values.allFinite()) {
            values = values.max(-87.0f).min(88.0f);
            for (std::size_t i = 0; i < N; ++i) x[i] = detail::exp_in_range(x[i]);
            return;
        }
    }
    values = values.exp();
}

}  // namespace strata::kernels::cpu
