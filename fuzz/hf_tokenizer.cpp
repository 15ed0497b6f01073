// Hugging Face tokenizer.json as a hostile user could write it: the input is a tokenizer.json,
// then optionally a NUL byte and a text. Loading either succeeds or throws strata::error; a
// tokenizer that loads encodes the text (and the JSON itself) to ids in range, the same ids twice
// (the piece cache), and decodes them without throwing. The text also goes through the four
// fixture tokenizers (tests/fixtures/hf_tokenizers), which must round-trip it where tokenizers
// itself does (their cases.json): Llama 3 any valid UTF-8; Qwen2 text already in NFC; Llama 2
// text without "▁" and without its added tokens' text (a segment after one gets its own "▁").
#include "fuzz_check.hpp"

#include <strata/text/hf_tokenizer.hpp>  // hf_tokenizer
#include <strata/text/nfc.hpp>           // unicode::to_nfc

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint8_t
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace {

bool valid_utf8(std::string_view s) {
    for (std::size_t pos = 0; pos < s.size();) {
        const strata::unicode::utf8_unit u = strata::unicode::decode_utf8(s, pos);
        if (!u.valid) return false;
        pos += u.length;
    }
    return true;
}

const strata::hf_tokenizer& fixture(const char* kind) {
    static std::vector<std::pair<std::string, strata::hf_tokenizer>> loaded;
    for (auto& [name, tok] : loaded)
        if (name == kind) return tok;
    loaded.emplace_back(kind, strata::hf_tokenizer::load(std::string(STRATA_FUZZ_HF_DIR) + "/" + kind));
    return loaded.back().second;
}

void check_encodes(const strata::hf_tokenizer& tok, std::string_view text) {
    const std::vector<strata::token_id> ids = tok.encode(text);
    for (strata::token_id id : ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
    FUZZ_CHECK(tok.encode(text) == ids);
    const std::vector<strata::token_id> with = tok.encode_with_special_tokens(text);
    FUZZ_CHECK(with.size() >= ids.size());
    (void)tok.decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const std::size_t nul = input.find('\0');
    const std::string_view json = input.substr(0, nul);
    const std::string_view text = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);

    std::optional<strata::hf_tokenizer> tok;
    if (strata::fuzz::parses([&] { tok.emplace(strata::hf_tokenizer::from_json_text(json, "fuzz.json")); })) {
        check_encodes(*tok, text);
        check_encodes(*tok, json);
    }

    for (const char* kind : {"llama3", "qwen2", "llama2", "mistral"}) check_encodes(fixture(kind), text);
    if (!valid_utf8(text)) return 0;
    const auto round_trip = [&](const char* kind) {
        const strata::hf_tokenizer& t = fixture(kind);
        FUZZ_CHECK(t.decode(t.encode(text)) == text);
    };
    round_trip("llama3");
    if (strata::unicode::to_nfc(text) == text) round_trip("qwen2");
    bool plain = text.find("\xE2\x96\x81") == std::string_view::npos;  // U+2581 "▁"
    for (std::string_view added : {"<s>", "</s>", "<unk>"}) plain = plain && text.find(added) == std::string_view::npos;
    if (plain) round_trip("llama2");
    return 0;
}
