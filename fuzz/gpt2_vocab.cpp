// GPT-2's vocabulary files as a hostile user could write them: the input is vocab.json, a NUL
// byte, then merges.txt. Loading either succeeds or throws strata::error; a vocabulary that loads
// must still round-trip any text (decode(encode(text)) == text, here the input itself) with every
// id in range, whatever its merges are.
#include "fuzz_check.hpp"

#include <strata/text/gpt2_tokenizer.hpp>  // gpt2_tokenizer

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint8_t
#include <optional>     // std::optional
#include <string_view>  // std::string_view
#include <vector>       // std::vector

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const std::size_t nul = input.find('\0');
    const std::string_view vocab = input.substr(0, nul);
    const std::string_view merges = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);

    std::optional<strata::gpt2_tokenizer> tok;
    if (!strata::fuzz::parses([&] { tok.emplace(strata::gpt2_tokenizer::from_strings(vocab, merges)); })) return 0;

    FUZZ_CHECK(tok->vocab_size() >= 257);  // 256 bytes and end-of-text at least
    FUZZ_CHECK(tok->eot_id() >= 0 && tok->eot_id() < tok->vocab_size());
    FUZZ_CHECK(tok->token_bytes(tok->eot_id()) == strata::gpt2_tokenizer::eot_text);
    for (std::string_view text : {input, merges}) {
        const std::vector<strata::token_id> ids = tok->encode(text);
        for (strata::token_id id : ids) FUZZ_CHECK(id >= 0 && id < tok->vocab_size());
        FUZZ_CHECK(tok->decode(ids) == text);
        FUZZ_CHECK(tok->decode(tok->encode_ordinary(text)) == text);
    }
    return 0;
}
