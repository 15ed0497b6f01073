// The Tokenizer concept: what the data pipeline, the trainer and sampling need from a tokenizer.
#pragma once

#include <concepts>     // std::convertible_to, std::same_as
#include <cstdint>      // std::int32_t
#include <span>         // std::span
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace strata {

// Token ids are int32 everywhere (the GPT-2 vocabulary has 50257 entries).
using token_id = std::int32_t;

template <class T>
concept Tokenizer = requires(const T& tok, std::string_view text, std::span<const token_id> ids) {
    { tok.encode(text) } -> std::same_as<std::vector<token_id>>;
    { tok.decode(ids) } -> std::same_as<std::string>;
    { tok.eot_id() } -> std::same_as<token_id>;      // end-of-text: separates documents
    { tok.vocab_size() } -> std::same_as<token_id>;  // ids are in [0, vocab_size)
    { tok.name() } -> std::convertible_to<std::string_view>;
};

}  // namespace strata
