// byte_tokenizer: the default tokenizer. One token per byte (ids 0..255) plus end-of-text (256).
// It needs no files, round-trips any byte string exactly, and suits small models on small corpora.
#pragma once

#include <strata/core/error.hpp>       // strata::error
#include <strata/text/tokenizer.hpp>   // token_id, Tokenizer

#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace strata {

class byte_tokenizer {
public:
    static constexpr token_id eot = 256;

    std::vector<token_id> encode(std::string_view text) const {
        std::vector<token_id> ids;
        ids.reserve(text.size());
        for (unsigned char c : text) ids.push_back(static_cast<token_id>(c));
        return ids;
    }

    // End-of-text decodes to nothing: it marks a boundary, not a character.
    std::string decode(std::span<const token_id> ids) const {
        std::string text;
        text.reserve(ids.size());
        for (token_id id : ids) {
            if (id == eot) continue;
            if (id < 0 || id > eot)
                throw error("byte_tokenizer: token id " + std::to_string(id) + " is out of range [0, 257)",
                            "the ids were not produced by the byte tokenizer; check which tokenizer made them", {"tokenizer"});
            text.push_back(static_cast<char>(id));
        }
        return text;
    }

    token_id eot_id() const { return eot; }
    token_id vocab_size() const { return eot + 1; }
    std::string_view name() const { return "byte"; }
};

static_assert(Tokenizer<byte_tokenizer>);

}  // namespace strata
