// score: what a model computes on one token sequence, written as a safetensors file that other
// tools (transformers, numpy) compare against:
//
//   input_ids   I32 (T)      the tokens, at positions 0 .. T-1
//   logits      F32 (T, V)   the model's forward logits at every position (row t: after ids[0..t])
//   loss        F64 (1)      the mean next-token cross-entropy over the T - 1 predictions,
//                            mean_t [logsumexp(logits[t]) - logits[t][ids[t + 1]]], in double
//
// The logits are strata::generator's full forward (all_logits, strata/model/generator.hpp) on the
// model's backend, all T rows read from one forward: the model is built with an LM head chunk of T
// rows (make_scoring_model).
//
// Glossary: T tokens, V vocab.
#pragma once

#include "llama_model.hpp"  // llama::llama_config, llama_model

#include <strata/core/error.hpp>      // strata::error
#include <strata/io/safetensors.hpp>  // strata::safetensors_writer
#include <strata/model/generator.hpp>  // strata::generator
#include <strata/text/tokenizer.hpp>  // strata::token_id

#include <algorithm>   // std::max, std::max_element
#include <cmath>       // std::exp, std::log
#include <cstddef>     // std::size_t
#include <cstdint>     // std::int32_t
#include <filesystem>  // std::filesystem::path
#include <span>        // std::span
#include <vector>      // std::vector

namespace llama {

struct token_scores {
    std::vector<std::int32_t> ids;  // (T)
    std::vector<float> logits;      // (T, V)
    std::size_t vocab = 0;          // V
    double loss = 0;                // mean next-token loss over T - 1 predictions
};

// The model of `c` whose one forward keeps the logits of `tokens` positions (the LM head's chunk).
template <strata::Backend B>
llama_model<B> make_scoring_model(const llama_config& c, std::size_t tokens) {
    c.validate();
    strata::decoder_config d = c.decoder();
    d.head_chunk_rows = std::max<std::size_t>(tokens, 1);
    return llama_model<B>(d, c.block(), c.norm());
}

// The mean next-token cross-entropy of (T, V) logits on `ids`, in double.
inline double next_token_loss(std::span<const float> logits, std::span<const std::int32_t> ids, std::size_t V) {
    const std::size_t T = ids.size();
    double sum = 0;
    for (std::size_t t = 0; t + 1 < T; ++t) {
        const std::span<const float> row = logits.subspan(t * V, V);
        const double top = *std::max_element(row.begin(), row.end());
        double z = 0;
        for (const float x : row) z += std::exp(static_cast<double>(x) - top);
        sum += top + std::log(z) - static_cast<double>(row[static_cast<std::size_t>(ids[t + 1])]);
    }
    return sum / static_cast<double>(T - 1);
}

// The scores of `ids` (2 <= T <= the model's context) with the generator's model, which must come
// from make_scoring_model(config, T) or a larger chunk.
template <class Model>
token_scores score_tokens(strata::generator<Model>& gen, std::span<const strata::token_id> ids, std::size_t vocab) {
    if (ids.size() < 2)
        throw strata::error("score: " + std::to_string(ids.size()) + " token(s); a next-token loss needs at least 2",
                            "score a longer text");
    token_scores s{{ids.begin(), ids.end()}, {}, vocab, 0};
    const auto logits = gen.all_logits(ids);
    s.logits.assign(logits.begin(), logits.end());
    s.loss = next_token_loss(s.logits, s.ids, vocab);
    return s;
}

// input_ids, logits and loss into `file` (written whole or not at all).
inline void write_scores(const std::filesystem::path& file, const token_scores& s) {
    strata::safetensors_writer w;
    w.set_metadata("format", "pt");
    w.add("input_ids", {s.ids.size()}, s.ids);
    w.add("logits", {s.ids.size(), s.vocab}, s.logits);
    w.add("loss", {1}, std::vector<double>{s.loss});
    w.write(file);
}

}  // namespace llama
