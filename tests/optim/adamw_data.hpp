// Test data for the optimizer tests: AdamW state with awkward values at awkward addresses, a
// bitwise comparison that names the first differing element, and the paths to compare.
#pragma once

#include <strata/optim/adamw.hpp>       // adamw_hparams
#include <strata/optim/adamw_simd.hpp>  // adamw_path, adamw_path_available, name_of

#include <doctest/doctest.h>  // MESSAGE

#include <bit>      // std::bit_cast
#include <cmath>    // std::pow, std::fabs
#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint32_t, std::uintptr_t
#include <cstdio>   // std::snprintf
#include <random>   // std::mt19937_64, std::uniform_real_distribution, std::uniform_int_distribution
#include <span>     // std::span
#include <string>   // std::string
#include <vector>   // std::vector

namespace strata_test {

// A float array whose first element sits `offset` floats past a 64-byte boundary, so tests choose
// the misalignment of each of p, g, m, v independently.
class offset_array {
public:
    offset_array(std::size_t n, std::size_t offset) : m_storage(n + offset + 16), m_size(n) {
        const auto address = reinterpret_cast<std::uintptr_t>(m_storage.data());
        m_begin = (64 - address % 64) % 64 / sizeof(float) + offset;
    }
    std::span<float> span() { return {m_storage.data() + m_begin, m_size}; }
    std::span<const float> cspan() const { return {m_storage.data() + m_begin, m_size}; }

private:
    std::vector<float> m_storage;
    std::size_t m_begin = 0;
    std::size_t m_size;
};

// Values an optimizer meets, and the ones that break sloppy arithmetic: ordinary magnitudes over
// eight decades, subnormals and values just above them, huge values whose squares are near or
// past FLT_MAX (v overflows to inf), and signed zeros.
inline float awkward_value(std::mt19937_64& rng, bool non_negative) {
    std::uniform_int_distribution<int> kind(0, 15);
    std::uniform_real_distribution<double> unit(0.5, 1.0);
    const double sign = (!non_negative && (rng() & 1)) ? -1.0 : 1.0;
    switch (kind(rng)) {
        case 0: return static_cast<float>(sign * unit(rng) * 1e-40);  // subnormal
        case 1: return static_cast<float>(sign * unit(rng) * 1e-44);  // a few ulps of the smallest subnormal
        case 2: return static_cast<float>(sign * unit(rng) * 2e-38);  // just above FLT_MIN
        case 3: return static_cast<float>(sign * unit(rng) * 1e18);   // square near 1e36
        case 4: return static_cast<float>(sign * unit(rng) * 3e19);   // square overflows float
        case 5: return static_cast<float>(sign * 0.0);
        default: {
            std::uniform_real_distribution<double> decade(-7.0, 1.0);
            return static_cast<float>(sign * unit(rng) * std::pow(10.0, decade(rng)));
        }
    }
}

// Draws from a fixed table of awkward values (drawing each through std::pow would dominate the
// run time of the million-element tests).
inline void fill(std::span<float> x, std::mt19937_64& rng, bool non_negative = false) {
    static const std::vector<float> table = [] {
        std::mt19937_64 table_rng(20240601);
        std::vector<float> values(1 << 16);
        for (float& e : values) e = awkward_value(table_rng, false);
        return values;
    }();
    for (float& e : x) {
        const float value = table[rng() % table.size()];
        e = non_negative ? std::fabs(value) : value;
    }
}

// Empty when a and b hold the same bits; otherwise the first differing index and both values.
inline std::string first_bit_difference(std::span<const float> a, std::span<const float> b) {
    if (a.size() != b.size()) return "sizes differ: " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) {
            char text[160];
            std::snprintf(text, sizeof text, "element %zu: %a (0x%08x) vs %a (0x%08x)", i, static_cast<double>(a[i]),
                          std::bit_cast<std::uint32_t>(a[i]), static_cast<double>(b[i]),
                          std::bit_cast<std::uint32_t>(b[i]));
            return text;
        }
    }
    return {};
}

// The forced paths this CPU has, announcing each one it lacks (a visible skip, not a silent pass).
inline std::vector<strata::adamw_path> available_paths() {
    std::vector<strata::adamw_path> paths;
    for (const auto path : {strata::adamw_path::scalar, strata::adamw_path::avx2_fma, strata::adamw_path::avx512f}) {
        if (strata::adamw_path_available(path))
            paths.push_back(path);
        else
            MESSAGE("skipped: this CPU has no " << strata::name_of(path) << " path");
    }
    return paths;
}

// The hyperparameter sets every test walks through: GPT-2's; torch's defaults; a beta1 below 0.5,
// which sends torch's lerp down its other formula; no weight decay; eps 0.
inline std::vector<strata::adamw_hparams> hparam_sets() {
    return {{0.9, 0.95, 1e-8, 0.1}, {0.9, 0.999, 1e-8, 0.01}, {0.3, 0.95, 1e-6, 0.1}, {0.9, 0.95, 1e-8, 0.0},
            {0.9, 0.95, 0.0, 0.1}};
}

}  // namespace strata_test
