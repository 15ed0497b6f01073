// What the sample area's tests share: GPT-2 as a decoder_model with random weights far from flat,
// and small helpers (argmax, differences, windows, chi-square, softmax, error text).
#pragma once

#include <strata/core/error.hpp>          // strata::error
#include <strata/core/rng.hpp>            // rng
#include <strata/model/decoder.hpp>       // decoder_model, decoder_config
#include <strata/nn/gpt2_block.hpp>       // gpt2_block, gpt_config
#include <strata/nn/layernorm_layer.hpp>  // layernorm_layer, layernorm_config
#include <strata/text/tokenizer.hpp>      // token_id

#include <doctest/doctest.h>  // CHECK, REQUIRE

#include <algorithm>  // std::max, std::min
#include <cmath>      // std::abs, std::exp
#include <cstddef>    // std::size_t, std::ptrdiff_t
#include <cstdint>    // std::uint64_t
#include <string>     // std::string
#include <vector>     // std::vector

namespace sample_support {

using strata::token_id;

// GPT-2 assembled from Layers: the layout of gpt_model, so a GPT-2 checkpoint's blocks load as is.
template <class R, class B>
using gpt2_model = strata::decoder_model<strata::gpt2_block<R, B>, strata::layernorm_layer<R, B>>;

template <class R, class B>
gpt2_model<R, B> make_gpt2(const strata::gpt_config& c) {
    return {{.vocab_size = c.vocab_size, .max_seq = c.max_seq, .n_layer = c.n_layer, .n_embd = c.n_embd}, c,
            strata::layernorm_config{.channels = c.n_embd}};
}

inline strata::gpt_config small() { return {.vocab_size = 13, .max_seq = 8, .n_layer = 2, .n_head = 2, .n_embd = 8}; }

// Every parameter N(0, 0.5) (biases too, so they matter), norm gains 1, alignment gaps 0: logits far
// from flat, so a wrong cache or a misplaced parameter shows.
template <class R, class Model>
std::vector<std::vector<R>> random_blocks(const Model& model, std::uint64_t seed) {
    strata::rng gen(seed);
    std::vector<std::vector<R>> blocks;
    for (const auto& layout : model.groups()) {
        auto& block = blocks.emplace_back(layout.numel(), R(0));
        for (const auto& entry : layout.entries()) {
            const bool gain = !entry.spec.decay && entry.spec.name.ends_with("weight");
            for (std::size_t i = 0; i < entry.spec.shape.numel(); ++i)
                block[entry.offset + i] = gain ? R(1) : static_cast<R>(gen.normal(0.0, 0.5));
        }
    }
    return blocks;
}

template <class R>
token_id argmax(const std::vector<R>& x) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < x.size(); ++i)
        if (x[i] > x[best]) best = i;
    return static_cast<token_id>(best);
}

template <class R>
double max_abs_diff(const std::vector<R>& a, const std::vector<R>& b) {
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
    return worst;
}

template <class R>
double max_abs(const std::vector<R>& a) {
    double m = 0;
    for (const R x : a) m = std::max(m, std::abs(static_cast<double>(x)));
    return m;
}

// The last min(size, n) tokens.
inline std::vector<token_id> last(const std::vector<token_id>& v, std::size_t n) {
    return {v.end() - static_cast<std::ptrdiff_t>(std::min(v.size(), n)), v.end()};
}

// Pearson's statistic of observed counts against probabilities.
inline double chi_square(const std::vector<std::size_t>& counts, const std::vector<double>& p, std::size_t draws) {
    double chi2 = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        const double expected = p[i] * static_cast<double>(draws);
        if (expected == 0) {
            CHECK(counts[i] == 0);
            continue;
        }
        const double d = static_cast<double>(counts[i]) - expected;
        chi2 += d * d / expected;
    }
    return chi2;
}

inline std::vector<double> softmax(const std::vector<double>& z, double temperature) {
    double top = z[0];
    for (double x : z) top = std::max(top, x);
    std::vector<double> p;
    double sum = 0;
    for (double x : z) sum += p.emplace_back(std::exp((x - top) / temperature));
    for (double& x : p) x /= sum;
    return p;
}

// The message of the strata::error f throws, or "(no error)".
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const strata::error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace sample_support
