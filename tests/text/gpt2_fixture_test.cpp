// gpt2_tokenizer against Hugging Face's GPT2TokenizerFast (fixtures from
// tools/make_tokenizer_fixture.py): the first 300 corpus lines and edge cases id for id (the text
// is in the fixture), and 20,000 lines plus the whole corpus by hash (needs the corpus from
// ../shared/data; skipped, visibly, without it).
#include <strata/text/gpt2_tokenizer.hpp>  // strata::gpt2_tokenizer

#include <doctest/doctest.h>  // TEST_CASE, CHECK, MESSAGE

#include "support/skip.hpp"          // strata::test::skip
#include "support/token_hashes.hpp"  // strata::test::find_corpus, parse_token_hashes, encode_corpus
#include <nlohmann/json.hpp>  // nlohmann::json

#include <filesystem>   // std::filesystem
#include <fstream>      // std::ifstream
#include <iterator>     // std::istreambuf_iterator
#include <optional>     // std::optional
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
    const std::optional<fs::path> corpus_path = strata::test::find_corpus(repo_dir(), tried);
    if (!corpus_path) {
        strata::test::skip("corpus not found (set STRATA_SHARED_DATA); tried" + tried);
        return;
    }
    const std::string corpus = read_file(*corpus_path);
    const strata::test::token_hashes fixture =
        strata::test::parse_token_hashes(read_file(fixtures_dir() / "gpt2_tokens_hashes.txt"));
    REQUIRE_MESSAGE(fixture.bad_row == 0, "bad fixture row ", fixture.bad_row);
    REQUIRE(fixture.rows.size() == 20000);
    REQUIRE(fixture.all_lines > 0);

    const strata::test::corpus_result r =
        strata::test::encode_corpus(corpus, fixture, [](std::string_view text) { return gpt2().encode(text); });
    for (const std::string& m : r.mismatches) CHECK_MESSAGE(false, m);  // the first few say which
    CHECK_MESSAGE(r.corpus_differs == 0, r.corpus_differs, " lines of ", corpus_path->string(),
                  " are not the text the fixture was made from");
    MESSAGE(r.matched, " of ", fixture.rows.size(), " hashed lines match; whole corpus: ", r.lines, " lines, ",
            r.tokens, " tokens encoded line by line in ", r.seconds, " s");
    CHECK(r.matched == fixture.rows.size());
    CHECK(r.lines == fixture.all_lines);
    CHECK(r.tokens == fixture.all_tokens);
    CHECK(r.whole_hash == fixture.all_hash);
}

}  // namespace gpt2_fixture_test
