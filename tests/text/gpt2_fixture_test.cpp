// gpt2_tokenizer against Hugging Face's GPT2TokenizerFast (fixtures from
// tools/make_tokenizer_fixture.py): the first 300 corpus lines and edge cases id for id (the text
// is in the fixture), and 20,000 lines plus the whole corpus by hash (needs the corpus from
// ../shared/data; skipped, visibly, without it).
#include <strata/text/gpt2_tokenizer.hpp>  // strata::gpt2_tokenizer

#include <doctest/doctest.h>  // TEST_CASE, CHECK, MESSAGE

#include "support/skip.hpp"  // strata::test::skip
#include <nlohmann/json.hpp>  // nlohmann::json

#include <chrono>       // std::chrono::steady_clock
#include <cstdint>      // std::uint64_t
#include <cstdlib>      // std::getenv
#include <filesystem>   // std::filesystem
#include <fstream>      // std::ifstream
#include <iterator>     // std::istreambuf_iterator
#include <optional>     // std::optional
#include <sstream>      // std::istringstream
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace gpt2_fixture_test {  // this file's names: an area's files compile as one unit (unity build)

namespace fs = std::filesystem;
using strata::gpt2_tokenizer;
using strata::token_id;
using ids_t = std::vector<token_id>;

namespace {

fs::path repo_dir() {
#ifdef STRATA_SOURCE_DIR
    return fs::path(STRATA_SOURCE_DIR);
#else
    return fs::path(__FILE__).parent_path().parent_path().parent_path();
#endif
}

fs::path fixtures_dir() { return repo_dir() / "tests" / "fixtures"; }

const gpt2_tokenizer& gpt2() {
    static const gpt2_tokenizer tok = gpt2_tokenizer::load(fixtures_dir() / "gpt2");
    return tok;
}

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot read ", path.string());
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The corpus: $STRATA_SHARED_DATA, else ../shared/data from the working directory, else the
// shared folder beside the repository.
std::optional<fs::path> find_corpus(std::string& tried) {
    std::vector<fs::path> roots;
    if (const char* env = std::getenv("STRATA_SHARED_DATA")) roots.emplace_back(env);
    roots.emplace_back(fs::path("..") / "shared" / "data");
    roots.push_back(repo_dir() / ".." / "shared" / "data");
    for (const fs::path& root : roots) {
        const fs::path corpus = root / "corpus" / "nlp-corpus.txt";
        tried += " " + corpus.string();
        std::error_code ec;
        if (fs::is_regular_file(corpus, ec)) return corpus;
    }
    return std::nullopt;
}

// FNV-1a 64, as tools/make_tokenizer_fixture.py computes it.
struct fnv1a {
    std::uint64_t h = 0xCBF29CE484222325ull;
    void bytes(std::string_view data) {
        for (unsigned char b : data) h = (h ^ b) * 0x100000001B3ull;
    }
    void id(token_id v) {  // as little-endian int32
        const auto u = static_cast<std::uint32_t>(v);
        for (int shift = 0; shift < 32; shift += 8) h = (h ^ ((u >> shift) & 0xFF)) * 0x100000001B3ull;
    }
};

std::string hex(std::uint64_t v) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(16, '0');
    for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = digits[v & 0xF];
    return out;
}

std::string show(const ids_t& ids) {
    std::string out = "[";
    for (std::size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
    return out + "]";
}

// Compares each entry's ids; returns how many matched.
std::size_t check_entries(const nlohmann::json& entries, const char* what) {
    std::size_t matched = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
        const std::string text = entries[i].at("text").get<std::string>();
        const ids_t want = entries[i].at("ids").get<ids_t>();
        const ids_t got = gpt2().encode(text);
        if (got == want) {
            ++matched;
        } else {
            CHECK_MESSAGE(got == want, what, " ", i, ": ", text, "\n  got  ", show(got), "\n  want ", show(want));
        }
        CHECK(gpt2().decode(got) == text);
    }
    return matched;
}

struct hash_row {
    std::size_t count;
    std::uint64_t ids, text;
};

}  // namespace

TEST_CASE("gpt2 vs Hugging Face: the first 300 corpus lines, id for id") {
    const auto fixture = nlohmann::json::parse(read_file(fixtures_dir() / "gpt2_tokens_300.json"));
    const nlohmann::json& lines = fixture.at("lines");
    REQUIRE(lines.size() == 300);
    const std::size_t matched = check_entries(lines, "line");
    MESSAGE(matched, " of ", lines.size(), " lines match ", fixture.at("reference").get<std::string>());
    CHECK(matched == lines.size());
}

TEST_CASE("gpt2 vs Hugging Face: edge cases (spaces, contractions, eot, scripts, emoji)") {
    const auto fixture = nlohmann::json::parse(read_file(fixtures_dir() / "gpt2_tokens_300.json"));
    const nlohmann::json& cases = fixture.at("cases");
    REQUIRE(cases.size() > 50);
    CHECK(check_entries(cases, "case") == cases.size());
}

TEST_CASE("gpt2 vs Hugging Face: 20,000 corpus lines by hash, and the whole corpus") {
    std::string tried;
    const std::optional<fs::path> corpus_path = find_corpus(tried);
    if (!corpus_path) {
        strata::test::skip("corpus not found (set STRATA_SHARED_DATA); tried" + tried);
        return;
    }
    const std::string corpus = read_file(*corpus_path);

    std::istringstream fixture(read_file(fixtures_dir() / "gpt2_tokens_hashes.txt"));
    std::vector<hash_row> rows;
    std::size_t all_lines = 0, all_tokens = 0;
    std::string all_hash;
    for (std::string line; std::getline(fixture, line);) {
        std::istringstream fields(line);
        if (line.starts_with("# all_lines")) {
            std::string hash_word, label;
            fields >> hash_word >> label >> all_lines >> all_tokens >> all_hash;
        } else if (!line.starts_with("#")) {
            hash_row row{};
            std::string ids_hex, text_hex;
            fields >> row.count >> ids_hex >> text_hex;
            REQUIRE_MESSAGE(!fields.fail(), "bad fixture row ", rows.size() + 1, ": ", line);
            row.ids = std::stoull(ids_hex, nullptr, 16);
            row.text = std::stoull(text_hex, nullptr, 16);
            rows.push_back(row);
        }
    }
    REQUIRE(rows.size() == 20000);
    REQUIRE(all_lines > 0);

    const auto start = std::chrono::steady_clock::now();
    std::size_t line_no = 0, matched = 0, mismatched = 0, total_tokens = 0, corpus_differs = 0;
    fnv1a whole;
    for (std::size_t pos = 0; pos < corpus.size(); ++line_no) {
        std::size_t end = corpus.find('\n', pos);
        if (end == std::string::npos) end = corpus.size();
        const std::string_view text(corpus.data() + pos, end - pos);
        pos = end + 1;

        const ids_t ids = gpt2().encode(text);
        total_tokens += ids.size();
        for (token_id id : ids) whole.id(id);
        whole.id(-1);
        if (line_no >= rows.size()) continue;

        fnv1a text_hash, ids_hash;
        text_hash.bytes(text);
        for (token_id id : ids) ids_hash.id(id);
        if (text_hash.h != rows[line_no].text) {
            ++corpus_differs;
        } else if (ids.size() == rows[line_no].count && ids_hash.h == rows[line_no].ids) {
            ++matched;
        } else if (++mismatched <= 10) {  // the first few say which; the count says how many
            CHECK_MESSAGE(false, "line ", line_no + 1, " differs: got ", ids.size(), " tokens, want ",
                          rows[line_no].count, ": ", text);
        }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK_MESSAGE(corpus_differs == 0, corpus_differs, " lines of ", corpus_path->string(),
                  " are not the text the fixture was made from");
    MESSAGE(matched, " of ", rows.size(), " hashed lines match; whole corpus: ", line_no, " lines, ",
            total_tokens, " tokens encoded line by line in ", seconds, " s");
    CHECK(matched == rows.size());
    CHECK(line_no == all_lines);
    CHECK(total_tokens == all_tokens);
    CHECK(hex(whole.h) == all_hash);
}

}  // namespace gpt2_fixture_test
