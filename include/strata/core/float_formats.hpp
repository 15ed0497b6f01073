// The 16-bit floating-point formats that published checkpoints are stored in, to and from float.
//
//   bfloat16  1 sign, 8 exponent, 7 mantissa bits: the upper half of an IEEE binary32
//   float16   IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits
//
// Widening to float is exact for every one of the 65536 bit patterns of either format: every
// bfloat16 and every float16 value (subnormals, infinities and signed zeros included) is a float.
// A NaN stays a NaN with its sign and payload bits (shifted into place), so nothing is quieted or
// invented. Narrowing float -> bfloat16 or float16 rounds to nearest, ties to even, as PyTorch's
// `tensor.to(torch.bfloat16)` and `.to(torch.float16)` do (float16: values from 65520 up become
// infinity, those below 2^-14 become subnormals, rounded once); a NaN stays a quiet NaN of the
// same sign.
#pragma once

#include <bit>      // std::bit_cast, std::countl_zero
#include <cstdint>  // std::uint16_t, std::uint32_t

namespace strata {

constexpr float bf16_to_float(std::uint16_t bits) noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

constexpr float f16_to_float(std::uint16_t bits) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
    const std::uint32_t exponent = (bits >> 10) & 0x1Fu;
    std::uint32_t mantissa = bits & 0x3FFu;
    if (exponent == 0x1F)  // infinity or NaN: all-ones exponent, the payload moved up 13 bits
        return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
    if (exponent != 0)  // normal: rebias 15 -> 127
        return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    if (mantissa == 0) return std::bit_cast<float>(sign);  // signed zero
    // Subnormal: mantissa x 2^-24. Normalize: shift the leading one into the implicit bit.
    const int shift = std::countl_zero(mantissa) - 21;  // 10-bit field: leading zeros past bit 31-10
    mantissa = (mantissa << shift) & 0x3FFu;
    const std::uint32_t biased = static_cast<std::uint32_t>(127 - 15 - shift + 1);
    return std::bit_cast<float>(sign | (biased << 23) | (mantissa << 13));
}

constexpr std::uint16_t float_to_bf16(float value) noexcept {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0)  // NaN: keep sign, make quiet
        return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
    const std::uint32_t round = 0x7FFFu + ((bits >> 16) & 1u);  // nearest, ties to even
    return static_cast<std::uint16_t>((bits + round) >> 16);
}

constexpr std::uint16_t float_to_f16(float value) noexcept {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
    const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u)  // NaN: quiet, the payload's top bits kept
        return static_cast<std::uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
    if (magnitude >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520: infinity
    if (magnitude >= 0x38800000u) {  // normal (>= 2^-14): rebias 127 -> 15, round 13 bits away
        const std::uint32_t rebiased = magnitude - (112u << 23);
        const std::uint32_t round = 0x0FFFu + ((rebiased >> 13) & 1u);  // nearest, ties to even
        return static_cast<std::uint16_t>(sign | ((rebiased + round) >> 13));
    }
    // Subnormal (or zero): in 0.5f + |x| the float's last bit is 2^-24, float16's subnormal step,
    // so the addition itself rounds to nearest even; its low bits are the float16 pattern (the
    // largest round up to 0x0400, the smallest normal, as they should).
    const float shifted = std::bit_cast<float>(magnitude) + 0.5f;
    return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(shifted) - 0x3F000000u));
}

}  // namespace strata
