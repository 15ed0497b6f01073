// Micro-batches for the tests, written once: random ones drawn from strata's rng (the same bits on
// every machine), and counting ones (a learnable pattern, no generator). A test's expectations
// often depend on the exact tokens (bitwise comparisons, golden values): each recipe field is one
// way the tests' own generators differed, so a test keeps its sequence by its recipe.
//
//   random_batches(1000 + step, {.vocab = 29, .tokens = B * T, .count = accum, .scale = 3, .shift = 1,
//                                .ignore_every = 7, .ignore_at = 3});
//   counting_batches({.vocab = V, .tokens = B * T, .count = accum, .stride = 5, .offset = 1});
#pragma once

#include <strata/core/rng.hpp>                  // rng
#include <strata/data/loader.hpp>               // data::batch
#include <strata/kernels/cpu/cross_entropy.hpp>  // kernels::cpu::ignore_index
#include <strata/text/tokenizer.hpp>            // token_id

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint64_t
#include <utility>  // std::move
#include <vector>   // std::vector

namespace strata::test {

// What random_batches draws: `count` micro-batches of `tokens` tokens (B x T) each, inputs in
// [0, vocab); each target follows from its input as (scale x + shift) % vocab, or with scale 0 is
// a second draw (after the input's) of the generator; the target of every token i with
// i % ignore_every == ignore_at is ignore_index (ignore_every 0: none ignored).
struct batch_recipe {
    std::size_t vocab = 0;
    std::size_t tokens = 0;
    std::size_t count = 1;
    std::size_t scale = 1, shift = 1;
    std::size_t ignore_every = 0, ignore_at = 0;
};

// The micro-batches of `r`, from one rng(seed) drawn in order: batch by batch, token by token.
inline std::vector<data::batch> random_batches(std::uint64_t seed, const batch_recipe& r) {
    rng gen(seed);
    std::vector<data::batch> out;
    for (std::size_t k = 0; k < r.count; ++k) {
        data::batch b;
        for (std::size_t i = 0; i < r.tokens; ++i) {
            const auto x = static_cast<token_id>(gen.next_u64() % r.vocab);
            b.inputs.push_back(x);
            const auto target = r.scale == 0 ? static_cast<token_id>(gen.next_u64() % r.vocab)
                                             : static_cast<token_id>((x * r.scale + r.shift) % r.vocab);
            const bool ignored = r.ignore_every > 0 && i % r.ignore_every == r.ignore_at;
            b.targets.push_back(ignored ? static_cast<token_id>(kernels::cpu::ignore_index) : target);
        }
        out.push_back(std::move(b));
    }
    return out;
}

// What counting_batches writes: `count` micro-batches of `tokens` tokens; token i of batch k is
// (stride i + offset k) % vocab, and its target the next value, + 1 (mod vocab).
struct counting_recipe {
    std::size_t vocab = 0;
    std::size_t tokens = 0;
    std::size_t count = 1;
    std::size_t stride = 1, offset = 0;
};

inline std::vector<data::batch> counting_batches(const counting_recipe& r) {
    std::vector<data::batch> out(r.count);
    for (std::size_t k = 0; k < r.count; ++k)
        for (std::size_t i = 0; i < r.tokens; ++i) {
            const std::size_t x = i * r.stride + k * r.offset;
            out[k].inputs.push_back(static_cast<token_id>(x % r.vocab));
            out[k].targets.push_back(static_cast<token_id>((x + 1) % r.vocab));
        }
    return out;
}

}  // namespace strata::test
