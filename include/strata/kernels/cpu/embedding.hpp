// Token + position embedding of GPT-2 (Hugging Face: wte(input_ids) + wpe(arange(T))).
//
// Glossary: B batch, T time (sequence length), C channels, V vocab, maxT the longest sequence
// wpe has rows for (GPT-2: 1024).
#pragma once

#include <concepts>               // std::floating_point
#include <cstddef>                // std::size_t
#include <cstdint>                // std::int32_t
#include <string>                 // std::to_string
#include <strata/core/error.hpp>  // strata::error

namespace strata::kernels::cpu {

namespace detail {

// Checked in forward and backward alike: a bad id would read or write outside wte.
inline void check_embedding_sizes(const std::int32_t* tokens, std::size_t B, std::size_t T,
                                  std::size_t V, std::size_t maxT) {
    if (T > maxT) {
        throw error("embedding: sequence length T=" + std::to_string(T) +
                        " is longer than the position table maxT=" + std::to_string(maxT),
                    "cut sequences to at most maxT tokens");
    }
    for (std::size_t i = 0; i < B * T; ++i) {
        if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= V) {
            throw error("embedding: token id " + std::to_string(tokens[i]) + " at position " +
                            std::to_string(i) + " (b=" + std::to_string(i / T) + ", t=" +
                            std::to_string(i % T) + ") is outside [0, V=" + std::to_string(V) + ")",
                        "the tokenizer and the model must agree on the vocabulary size");
        }
    }
}

}  // namespace detail

template <std::floating_point Real>
void embedding_forward(Real* out,                   // (B, T, C)
                       const std::int32_t* tokens,  // (B, T)
                       const Real* wte,             // (V, C)
                       const Real* wpe,             // (maxT, C), or null: no learned positions (RoPE models)
                       std::size_t B, std::size_t T, std::size_t C, std::size_t V,
                       std::size_t maxT) {
    detail::check_embedding_sizes(tokens, B, T, V, maxT);
    for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t t = 0; t < T; ++t) {
            Real* out_bt = out + (b * T + t) * C;
            const Real* wte_row = wte + static_cast<std::size_t>(tokens[b * T + t]) * C;
            if (!wpe) {
                for (std::size_t c = 0; c < C; ++c) out_bt[c] = wte_row[c];
                continue;
            }
            const Real* wpe_row = wpe + t * C;
            for (std::size_t c = 0; c < C; ++c) {
                out_bt[c] = wte_row[c] + wpe_row[c];
            }
        }
    }
}

// Accumulates: with a tied LM head, dwte already holds the head's gradient when this runs.
template <std::floating_point Real>
void embedding_backward(Real* dwte,                  // (V, C)
                        Real* dwpe,                  // (maxT, C), or null (no learned positions)
                        const Real* dout,            // (B, T, C)
                        const std::int32_t* tokens,  // (B, T)
                        std::size_t B, std::size_t T, std::size_t C, std::size_t V,
                        std::size_t maxT) {
    detail::check_embedding_sizes(tokens, B, T, V, maxT);
    for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t t = 0; t < T; ++t) {
            const Real* dout_bt = dout + (b * T + t) * C;
            Real* dwte_row = dwte + static_cast<std::size_t>(tokens[b * T + t]) * C;
            for (std::size_t c = 0; c < C; ++c) dwte_row[c] += dout_bt[c];
            if (!dwpe) continue;
            Real* dwpe_row = dwpe + t * C;
            for (std::size_t c = 0; c < C; ++c) dwpe_row[c] += dout_bt[c];
        }
    }
}

}  // namespace strata::kernels::cpu
