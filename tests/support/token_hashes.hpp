// The tokenizer parity fixtures' hashes (tools/make_tokenizer_fixture.py,
// tools/make_hf_tokenizer_fixtures.py): finding the corpus they were made from, FNV-1a 64 as the
// tools compute it, and the hashes.txt format (an all-lines row, then one row per line).
#pragma once

#include <chrono>       // std::chrono::steady_clock
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint32_t, std::uint64_t
#include <cstdlib>      // std::getenv
#include <filesystem>   // std::filesystem
#include <optional>     // std::optional
#include <sstream>      // std::istringstream
#include <string>       // std::string, std::stoull, std::to_string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace strata::test {

// The corpus: $STRATA_SHARED_DATA, else ../shared/data from the working directory, else the
// shared folder beside the repository (or beside the worktrees' folder, /work/wt/<name>). tried
// collects the paths looked at, for the skip message.
inline std::optional<std::filesystem::path> find_corpus(const std::filesystem::path& repo_dir, std::string& tried) {
    namespace fs = std::filesystem;
    std::vector<fs::path> roots;
    if (const char* env = std::getenv("STRATA_SHARED_DATA")) roots.emplace_back(env);
    roots.emplace_back(fs::path("..") / "shared" / "data");
    roots.push_back(repo_dir / ".." / "shared" / "data");
    roots.push_back(repo_dir / ".." / ".." / "shared" / "data");
    for (const fs::path& root : roots) {
        const fs::path corpus = root / "corpus" / "nlp-corpus.txt";
        tried += ' ';
        tried += corpus.string();
        std::error_code ec;
        if (fs::is_regular_file(corpus, ec)) return corpus;
    }
    return std::nullopt;
}

struct fnv1a {  // FNV-1a 64
    std::uint64_t h = 0xCBF29CE484222325ull;
    void bytes(std::string_view data) {
        for (unsigned char b : data) h = (h ^ b) * 0x100000001B3ull;
    }
    void id(std::int32_t v) {  // as little-endian int32
        const auto u = static_cast<std::uint32_t>(v);
        for (int shift = 0; shift < 32; shift += 8) h = (h ^ ((u >> shift) & 0xFF)) * 0x100000001B3ull;
    }
};

inline std::string hex16(std::uint64_t v) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(16, '0');
    for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = digits[v & 0xF];
    return out;
}

struct hash_row {
    std::size_t count;
    std::uint64_t ids, text;
};

struct token_hashes {
    std::vector<hash_row> rows;
    std::size_t all_lines = 0, all_tokens = 0;
    std::string all_hash;
    std::size_t bad_row = 0;  // the 1-based number of the first row that did not parse; 0: none
};

// "# all_lines N TOKENS HASH" then rows "COUNT IDS_HASH TEXT_HASH" (hex); other '#' lines are comments.
inline token_hashes parse_token_hashes(const std::string& text) {
    token_hashes out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        std::istringstream fields(line);
        if (line.starts_with("# all_lines")) {
            std::string hash_word, label;
            fields >> hash_word >> label >> out.all_lines >> out.all_tokens >> out.all_hash;
        } else if (!line.starts_with("#")) {
            hash_row row{};
            std::string ids_hex, text_hex;
            fields >> row.count >> ids_hex >> text_hex;
            if (fields.fail()) {
                if (out.bad_row == 0) out.bad_row = out.rows.size() + 1;
                continue;
            }
            row.ids = std::stoull(ids_hex, nullptr, 16);
            row.text = std::stoull(text_hex, nullptr, 16);
            out.rows.push_back(row);
        }
    }
    return out;
}

// Encodes the corpus line by line (encode(std::string_view) -> ids) and compares with the
// fixture's rows while there are rows.
struct corpus_result {
    std::size_t lines = 0, matched = 0, tokens = 0, corpus_differs = 0;
    std::string whole_hash;                // of every line's ids then -1
    std::vector<std::string> mismatches;   // the first ten: "line N: got A tokens, want B: TEXT"
    std::size_t mismatched = 0;
    double seconds = 0;
};

template <class Encode>
corpus_result encode_corpus(std::string_view corpus, const token_hashes& fixture, Encode&& encode) {
    corpus_result r;
    fnv1a whole;
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t pos = 0; pos < corpus.size(); ++r.lines) {
        std::size_t end = corpus.find('\n', pos);
        if (end == std::string_view::npos) end = corpus.size();
        const std::string_view text = corpus.substr(pos, end - pos);
        pos = end + 1;
        const auto ids = encode(text);
        r.tokens += ids.size();
        for (auto id : ids) whole.id(id);
        whole.id(-1);
        if (r.lines >= fixture.rows.size()) continue;
        const hash_row& row = fixture.rows[r.lines];
        fnv1a text_hash, ids_hash;
        text_hash.bytes(text);
        for (auto id : ids) ids_hash.id(id);
        if (text_hash.h != row.text) {
            ++r.corpus_differs;
        } else if (ids.size() == row.count && ids_hash.h == row.ids) {
            ++r.matched;
        } else if (++r.mismatched <= 10) {
            r.mismatches.push_back("line " + std::to_string(r.lines + 1) + ": got " + std::to_string(ids.size()) +
                                   " tokens, want " + std::to_string(row.count) + ": " + std::string(text));
        }
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.whole_hash = hex16(whole.h);
    return r;
}

}  // namespace strata::test
