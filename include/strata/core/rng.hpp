// strata::rng: a small deterministic random generator whose state can be saved in a checkpoint.
//
// xoshiro256** (Blackman and Vigna, 2018), seeded by expanding one 64-bit seed through four
// outputs of splitmix64, the seeding its authors recommend. Only integer arithmetic on fixed-width
// types, so next_u64(), uniform(), uniform_float() and below() give the same sequence on every
// platform and compiler. normal() goes through std::log, std::cos and std::sin, which the C++
// standard does not pin to the last bit; glibc, macOS and MSVC agree in practice, but only the
// integer and uniform streams are promised bitwise.
//
// Not for cryptography. Not thread-safe: give each thread its own generator (seed + thread index).
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <nlohmann/json.hpp>  // nlohmann::json

#include <array>        // std::array
#include <cmath>        // std::cos, std::log, std::sin, std::sqrt
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t, std::uint64_t
#include <limits>       // std::numeric_limits
#include <numbers>      // std::numbers::pi
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view

namespace strata {

// One step of splitmix64 (Vigna's splitmix64.c): advances `state` and returns the next output.
constexpr std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

class rng {
public:
    using state_type = std::array<std::uint64_t, 4>;
    static constexpr std::string_view algorithm = "xoshiro256**";

    explicit rng(std::uint64_t seed = 0) {
        // splitmix64 never yields four zeros in a row, so the state is valid for every seed.
        for (std::uint64_t& word : m_s) word = splitmix64(seed);
    }

    // Generator number `index` of `seed`: independent streams (one per layer group, say) that
    // threads can draw from at once. The index is mixed through splitmix64 before it meets the
    // seed, so neighbouring seeds and indices give unrelated streams.
    static rng stream(std::uint64_t seed, std::uint64_t index) {
        std::uint64_t s = seed, i = ~index;
        return rng(splitmix64(s) ^ splitmix64(i));
    }

    // The all-zero state is the one state xoshiro never leaves (it outputs zeros forever).
    static rng from_state(const state_type& state) {
        if (state[0] == 0 && state[1] == 0 && state[2] == 0 && state[3] == 0)
            throw error("rng: the all-zero state is invalid for xoshiro256**",
                        "the state was not produced by strata::rng; seed the generator instead");
        rng r;
        r.m_s = state;
        return r;
    }

    std::uint64_t next_u64() {
        const std::uint64_t result = rotl(m_s[1] * 5, 7) * 9;
        const std::uint64_t t = m_s[1] << 17;
        m_s[2] ^= m_s[0];
        m_s[3] ^= m_s[1];
        m_s[1] ^= m_s[2];
        m_s[0] ^= m_s[3];
        m_s[2] ^= t;
        m_s[3] = rotl(m_s[3], 45);
        return result;
    }

    // The top 53 bits as a multiple of 2^-53: every value is exact, and 1.0 is impossible.
    double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

    // The top 24 bits as a multiple of 2^-24 (computing in double and rounding could give 1.0f).
    float uniform_float() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }

    // Uniform integer in [0, n), without modulo bias: draws below 2^64 mod n are rejected, so every
    // residue has the same number of sources. Portable (no 128-bit multiply), at most ~2 draws.
    std::uint64_t below(std::uint64_t n) {
        if (n == 0) throw error("rng: below(0) has no value to return", "the range [0, n) needs n >= 1");
        const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
        for (;;) {
            const std::uint64_t r = next_u64();
            if (r >= threshold) return r % n;
        }
    }

    // Standard normal by Box-Muller. Each pair of uniforms gives two normals; the second is kept
    // for the next call (and saved with the state, so a restored generator continues exactly).
    double normal() {
        if (m_has_spare) {
            m_has_spare = false;
            return m_spare;
        }
        const double u1 = 1.0 - uniform();  // (0, 1]: log(0) impossible
        const double u2 = uniform();
        const double radius = std::sqrt(-2.0 * std::log(u1));
        const double angle = 2.0 * std::numbers::pi * u2;
        m_spare = radius * std::sin(angle);
        m_has_spare = true;
        return radius * std::cos(angle);
    }

    double normal(double mean, double stddev) { return mean + stddev * normal(); }

    const state_type& state() const { return m_s; }

    // UniformRandomBitGenerator, for std algorithms (whose own use of the bits is not portable).
    using result_type = std::uint64_t;
    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }
    result_type operator()() { return next_u64(); }

    friend bool operator==(const rng& a, const rng& b) {
        return a.m_s == b.m_s && a.m_has_spare == b.m_has_spare && (!a.m_has_spare || a.m_spare == b.m_spare);
    }

    friend void to_json(nlohmann::json& j, const rng& r) {
        j = nlohmann::json{{"algorithm", algorithm}, {"state", r.m_s}};
        j["spare_normal"] = r.m_has_spare ? nlohmann::json(r.m_spare) : nlohmann::json(nullptr);
    }

    friend void from_json(const nlohmann::json& j, rng& r) {
        const auto bad = [](const std::string& what) {
            throw error("rng: cannot restore the generator from JSON: " + what,
                        "the checkpoint's rng entry is damaged or from another program");
        };
        if (!j.is_object()) bad("expected an object, got " + std::string(j.type_name()));
        if (!j.contains("algorithm") || !j["algorithm"].is_string() || j["algorithm"].get<std::string>() != algorithm)
            bad("'algorithm' must be \"" + std::string(algorithm) + "\"");
        const nlohmann::json& words = j.contains("state") ? j["state"] : nlohmann::json();
        if (!words.is_array() || words.size() != 4) bad("'state' must be an array of 4 unsigned 64-bit integers");
        state_type state{};
        for (std::size_t i = 0; i < 4; ++i) {
            if (!words[i].is_number_unsigned() && !(words[i].is_number_integer() && words[i].get<std::int64_t>() >= 0))
                bad("'state' entry " + std::to_string(i) + " is not an unsigned integer: " + words[i].dump());
            state[i] = words[i].get<std::uint64_t>();
        }
        rng restored = from_state(state);
        if (j.contains("spare_normal") && !j["spare_normal"].is_null()) {
            if (!j["spare_normal"].is_number()) bad("'spare_normal' must be a number or null");
            restored.m_has_spare = true;
            restored.m_spare = j["spare_normal"].get<double>();
        }
        r = restored;
    }

private:
    static constexpr std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

    state_type m_s{};
    bool m_has_spare = false;
    double m_spare = 0;
};

}  // namespace strata
