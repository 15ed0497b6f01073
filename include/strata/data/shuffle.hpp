// The data pipeline's own random numbers: splitmix64 and a Fisher-Yates shuffle built on it.
//
// std::shuffle and std::uniform_int_distribution are not specified bit for bit, so libstdc++ and
// libc++ shuffle differently; a run resumed on another machine must see the same batches, so the
// whole recipe is written here and pinned by tests.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint64_t
#include <numeric>  // std::iota
#include <utility>  // std::swap
#include <vector>   // std::vector

namespace strata::data {

// splitmix64's output function: a bijective mix of 64 bits.
constexpr std::uint64_t mix64(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

class shuffle_rng {
public:
    explicit constexpr shuffle_rng(std::uint64_t seed) : m_state(seed) {}

    constexpr std::uint64_t next() {
        m_state += 0x9E3779B97F4A7C15ULL;
        return mix64(m_state);
    }

    // Uniform in [0, bound). Rejection instead of a bare modulo, which favours small values.
    constexpr std::uint64_t below(std::uint64_t bound) {
        if (bound == 0) throw error("shuffle_rng::below(0): the range is empty", "this is a bug in the caller");
        const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
        for (;;) {
            std::uint64_t r = next();
            if (r >= threshold) return r % bound;
        }
    }

private:
    std::uint64_t m_state;
};

// The order in which epoch `epoch` visits `count` examples: a permutation of [0, count) that
// depends only on (seed, epoch), so any epoch can be recomputed without replaying earlier ones.
inline std::vector<std::size_t> epoch_order(std::size_t count, std::uint64_t seed, std::uint64_t epoch) {
    std::vector<std::size_t> order(count);
    std::iota(order.begin(), order.end(), std::size_t{0});
    shuffle_rng rng(mix64(seed ^ mix64(epoch + 0x243F6A8885A308D3ULL)));
    for (std::size_t i = count; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
    return order;
}

}  // namespace strata::data
