// Tokenizers on arbitrary bytes: the byte tokenizer and GPT-2's BPE (with the vocabulary in
// tests/fixtures/gpt2/). Properties:
// - decode(encode(bytes)) == bytes, for encode and encode_ordinary, invalid UTF-8 included;
// - every id is in [0, vocab_size); encode_ordinary never yields end-of-text;
// - the pre-tokenizer's pieces are non-empty and concatenate to the text;
// - encode_ordinary equals a plain reference BPE (repeatedly merge the adjacent pair of lowest rank,
//   leftmost among equals) computed here from merges.txt, piece by piece;
// - encoding again (now from the piece cache) gives the same ids;
// - decode of arbitrary ids returns their bytes or throws strata::error.
#include "fuzz_check.hpp"

#include <strata/text/byte_tokenizer.hpp>     // byte_tokenizer
#include <strata/text/gpt2_pretokenizer.hpp>  // gpt2_split
#include <strata/text/gpt2_tokenizer.hpp>     // gpt2_tokenizer
#include <strata/text/gpt2_vocab_files.hpp>   // gpt2_detail::key_to_bytes

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint8_t
#include <cstring>      // std::memcpy
#include <fstream>      // std::ifstream
#include <iterator>     // std::istreambuf_iterator
#include <map>          // std::map
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::pair
#include <vector>       // std::vector

namespace {

std::string read_fixture(const char* name) {
    std::ifstream in(std::string(STRATA_FUZZ_GPT2_DIR) + "/" + name, std::ios::binary);
    FUZZ_CHECK(in.good());
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// merges.txt as (left bytes, right bytes) -> rank; a repeated pair keeps its last rank.
std::map<std::pair<std::string, std::string>, std::size_t> read_ranks(std::string_view text) {
    std::map<std::pair<std::string, std::string>, std::size_t> ranks;
    std::size_t rank = 0, pos = 0;
    std::string left, right, why;
    while (pos < text.size()) {
        std::size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        if (line.empty() || line.starts_with("#version")) continue;
        const std::size_t space = line.find(' ');
        FUZZ_CHECK(strata::gpt2_detail::key_to_bytes(line.substr(0, space), left, why) && strata::gpt2_detail::key_to_bytes(line.substr(space + 1), right, why));
        ranks[{left, right}] = rank++;
    }
    return ranks;
}

struct fixture {
    strata::gpt2_tokenizer gpt2;
    std::map<std::pair<std::string, std::string>, std::size_t> ranks;
};

const fixture& gpt2_fixture() {
    static const fixture f = [] {
        const std::string merges = read_fixture("merges.txt");
        return fixture{strata::gpt2_tokenizer::from_strings(read_fixture("vocab.json"), merges), read_ranks(merges)};
    }();
    return f;
}

// The textbook algorithm, quadratic and obviously right.
std::vector<std::string> reference_bpe(std::string_view piece, const fixture& f) {
    std::vector<std::string> symbols;
    for (char c : piece) symbols.emplace_back(1, c);
    while (symbols.size() > 1) {
        std::size_t best = 0, best_rank = static_cast<std::size_t>(-1);
        for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
            const auto it = f.ranks.find({symbols[i], symbols[i + 1]});
            if (it != f.ranks.end() && it->second < best_rank) best = i, best_rank = it->second;
        }
        if (best_rank == static_cast<std::size_t>(-1)) break;
        symbols[best] += symbols[best + 1];
        symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    return symbols;
}

void check_byte_tokenizer(std::string_view text, const std::uint8_t* data, std::size_t size) {
    const strata::byte_tokenizer tok;
    const std::vector<strata::token_id> ids = tok.encode(text);
    FUZZ_CHECK(ids.size() == text.size());
    for (strata::token_id id : ids) FUZZ_CHECK(id >= 0 && id < 256);
    FUZZ_CHECK(tok.decode(ids) == text);

    // Arbitrary ids: their bytes, end-of-text skipped, or an error for an id out of range.
    std::vector<strata::token_id> any(size / sizeof(strata::token_id));
    if (!any.empty()) std::memcpy(any.data(), data, any.size() * sizeof(strata::token_id));
    std::string decoded;
    if (strata::fuzz::parses([&] { decoded = tok.decode(any); })) {
        std::string expected;
        for (strata::token_id id : any) {
            FUZZ_CHECK(id >= 0 && id <= tok.eot_id());
            if (id != tok.eot_id()) expected.push_back(static_cast<char>(id));
        }
        FUZZ_CHECK(decoded == expected);
    }
}

void check_gpt2(std::string_view text, const std::uint8_t* data, std::size_t size) {
    const fixture& f = gpt2_fixture();
    const strata::gpt2_tokenizer& tok = f.gpt2;

    std::string joined;
    std::vector<std::string_view> pieces = strata::gpt2_split(text);
    for (std::string_view piece : pieces) {
        FUZZ_CHECK(!piece.empty());
        joined += piece;
    }
    FUZZ_CHECK(joined == text);

    const std::vector<strata::token_id> ordinary = tok.encode_ordinary(text);
    for (strata::token_id id : ordinary) FUZZ_CHECK(id >= 0 && id < tok.vocab_size() && id != tok.eot_id());
    FUZZ_CHECK(tok.decode(ordinary) == text);
    FUZZ_CHECK(tok.encode_ordinary(text) == ordinary);  // the second time through the piece cache

    std::size_t at = 0;  // token index in `ordinary`
    for (std::string_view piece : pieces) {
        if (piece.size() > 64) {  // the reference is quadratic: skip long pieces, but keep the place
            std::size_t covered = 0;
            while (covered < piece.size()) covered += tok.token_bytes(ordinary.at(at++)).size();
            FUZZ_CHECK(covered == piece.size());
            continue;
        }
        for (const std::string& symbol : reference_bpe(piece, f)) {
            FUZZ_CHECK(at < ordinary.size());
            FUZZ_CHECK(tok.token_bytes(ordinary[at++]) == symbol);
        }
    }
    FUZZ_CHECK(at == ordinary.size());

    const std::vector<strata::token_id> ids = tok.encode(text);
    for (strata::token_id id : ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
    FUZZ_CHECK(tok.decode(ids) == text);

    std::vector<strata::token_id> any(size / sizeof(strata::token_id));
    if (!any.empty()) std::memcpy(any.data(), data, any.size() * sizeof(strata::token_id));
    std::string decoded;
    if (strata::fuzz::parses([&] { decoded = tok.decode(any); })) {
        std::string expected;
        for (strata::token_id id : any) expected += tok.token_bytes(id);
        FUZZ_CHECK(decoded == expected);
    } else {
        bool out_of_range = false;
        for (strata::token_id id : any) out_of_range |= id < 0 || id >= tok.vocab_size();
        FUZZ_CHECK(out_of_range);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    check_byte_tokenizer(text, data, size);
    check_gpt2(text, data, size);
    return 0;
}
