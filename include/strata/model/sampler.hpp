// Sampling a next token from a model's logits: sample_options (what generate() takes), sample_token
// (greedy, temperature, top-k, one draw from a seeded rng), and the checks of ids and options the
// generator (model/generator.hpp) shares.
//
// Glossary: V vocab.
#pragma once

#include <strata/core/error.hpp>      // strata::error
#include <strata/core/rng.hpp>        // rng
#include <strata/text/tokenizer.hpp>  // token_id

#include <algorithm>  // std::nth_element, std::sort
#include <cmath>      // std::exp, std::isfinite
#include <concepts>   // std::floating_point
#include <cstddef>    // std::size_t, std::ptrdiff_t
#include <cstdint>    // std::uint64_t
#include <numeric>    // std::iota
#include <span>       // std::span
#include <string>     // std::string, std::to_string
#include <vector>     // std::vector

namespace strata {

struct sample_options {
    std::size_t max_new_tokens = 64;
    double temperature = 1.0;   // logits are divided by it; 0 = greedy (argmax, ties to the lower id)
    std::size_t top_k = 0;      // sample among the k largest logits (ties to the lower id); 0 = all V
    std::uint64_t seed = 0;     // strata::rng seed: the same seed gives the same tokens
    token_id stop_at_eot = -1;  // stop once this id is generated (it is returned too); -1 = never
    token_id bos = -1;          // an empty prompt starts from this id (the tokenizer's eot_id()); -1 = none
};

namespace detail {

inline void check_sampling(std::size_t V, double temperature, std::size_t top_k) {
    if (!std::isfinite(temperature) || temperature < 0)
        throw error("sampling: temperature " + std::to_string(temperature) + " is not a finite number >= 0",
                    "0 is greedy decoding, 1 samples the model's distribution, larger values flatten it");
    if (top_k > V)
        throw error("sampling: top_k " + std::to_string(top_k) + " is larger than the vocabulary (V=" +
                        std::to_string(V) + ")",
                    "use 0 to sample among all ids, or a k in [1, V]");
}

inline void check_token(token_id id, std::size_t V, const std::string& what) {
    if (id < 0 || static_cast<std::size_t>(id) >= V)
        throw error(what + " is id " + std::to_string(id) + ", outside [0, V=" + std::to_string(V) + ")",
                    "the tokenizer and the model must agree on the vocabulary size");
}

inline void check_tokens(std::span<const token_id> ids, std::size_t V, const std::string& what) {
    for (std::size_t i = 0; i < ids.size(); ++i) check_token(ids[i], V, what + " token " + std::to_string(i));
}

}  // namespace detail

// One draw from softmax(logits / temperature), restricted to the top_k largest logits (0 = all).
// temperature 0 is greedy: the argmax, the lowest id among equal maxima, and no draw. Otherwise
// the probabilities are computed in double and exactly one gen.uniform() is consumed, so a seed
// fixes the sequence. Ties at the top-k cut keep the lower ids.
template <std::floating_point R>
token_id sample_token(std::span<const R> logits,  // (V)
                      double temperature, std::size_t top_k, rng& gen) {
    const std::size_t V = logits.size();
    if (V == 0) throw error("sample_token: no logits to sample from", "pass the V logits of one position");
    detail::check_sampling(V, temperature, top_k);
    std::size_t best = 0;
    for (std::size_t i = 0; i < V; ++i) {
        if (!std::isfinite(logits[i]))
            throw error("sample_token: the logit of id " + std::to_string(i) + " is " + std::to_string(logits[i]),
                        "the weights hold NaN or infinity (a diverged run or a damaged checkpoint?)");
        if (logits[i] > logits[best]) best = i;
    }
    if (temperature == 0) return static_cast<token_id>(best);

    std::vector<token_id> ids(V);
    std::iota(ids.begin(), ids.end(), token_id{0});
    const std::size_t k = top_k == 0 ? V : top_k;
    if (k < V) {
        // A strict total order (larger logit first, then lower id), so the kept set is unique.
        const auto before = [&](token_id a, token_id b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        };
        std::nth_element(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k - 1), ids.end(), before);
        ids.resize(k);
        std::sort(ids.begin(), ids.end());  // the cumulative walk goes by id, whatever nth_element did
    }
    // Differences to the maximum, divided by the temperature: exp() <= 1 and no overflow even for
    // a tiny temperature (the others underflow to 0 and the argmax wins, as it should).
    std::vector<double> weight(k);
    double sum = 0;
    const double top = static_cast<double>(logits[best]);
    for (std::size_t j = 0; j < k; ++j) {
        weight[j] = std::exp((static_cast<double>(logits[ids[j]]) - top) / temperature);
        sum += weight[j];
    }
    const double target = gen.uniform() * sum;
    double cumulative = 0;
    std::size_t last_positive = 0;
    for (std::size_t j = 0; j < k; ++j) {
        cumulative += weight[j];
        if (weight[j] > 0) last_positive = j;
        if (target < cumulative) return ids[j];
    }
    return ids[last_positive];  // u * sum rounded up to sum: the last id that has any mass
}

}  // namespace strata
