// hf_tokenizer against Hugging Face's tokenizers 0.23.2 (fixtures from
// tools/make_hf_tokenizer_fixtures.py, in tests/fixtures/hf_tokenizers/<kind>/): for each of the
// Llama 3, Qwen2, Llama 2 and Mistral kinds, every edge case and the first 200 corpus lines id for
// id (with and without the post-processor's BOS, and the decoded text), then 20,000 corpus lines
// and the whole corpus by hash (needs ../shared/data; skipped, visibly, without it). Then the
// refusals: what strata does not implement is an error that names the field.
#include <strata/text/hf_tokenizer.hpp>  // strata::hf_tokenizer

#include <doctest/doctest.h>  // TEST_CASE, CHECK, MESSAGE

#include "support/skip.hpp"          // strata::test::skip
#include "support/token_hashes.hpp"  // strata::test::find_corpus, parse_token_hashes, encode_corpus, hex16
#include <nlohmann/json.hpp>  // nlohmann::json

#include <filesystem>   // std::filesystem
#include <fstream>      // std::ifstream
#include <iterator>     // std::istreambuf_iterator
#include <algorithm>    // std::find
#include <map>          // std::map
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace hf_tokenizer_test {  // this file's names: an area's files compile as one unit (unity build)

namespace fs = std::filesystem;
using strata::hf_tokenizer;
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

fs::path kind_dir(const std::string& kind) { return repo_dir() / "tests" / "fixtures" / "hf_tokenizers" / kind; }

const hf_tokenizer& tokenizer_of(const std::string& kind) {
    static std::map<std::string, hf_tokenizer> loaded;
    auto it = loaded.find(kind);
    if (it == loaded.end()) it = loaded.emplace(kind, hf_tokenizer::load(kind_dir(kind))).first;  // a directory
    return it->second;
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

void check_cases(const std::string& kind) {
    const hf_tokenizer& tok = tokenizer_of(kind);
    const auto fixture = nlohmann::json::parse(read_file(kind_dir(kind) / "cases.json"));
    const nlohmann::json& cases = fixture.at("cases");
    REQUIRE(cases.size() > 250);
    std::size_t ids_ok = 0, default_ok = 0, decoded_ok = 0, failures = 0;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const std::string text = cases[i].at("text").get<std::string>();
        const ids_t want = cases[i].at("ids").get<ids_t>();
        const ids_t want_default = cases[i].at("ids_default").get<ids_t>();
        const std::string want_decoded = cases[i].at("decoded").get<std::string>();
        const ids_t got = tok.encode(text);
        const ids_t got_default = tok.encode_with_special_tokens(text);
        const std::string got_decoded = tok.decode(want);
        ids_ok += got == want;
        default_ok += got_default == want_default;
        decoded_ok += got_decoded == want_decoded;
        if ((got != want || got_default != want_default || got_decoded != want_decoded) && ++failures <= 10) {
            CHECK_MESSAGE(got == want, kind, " case ", i, ": ", text, "\n  got  ", show(got), "\n  want ", show(want));
            CHECK_MESSAGE(got_default == want_default, kind, " case ", i, " with special tokens: ", text,
                          "\n  got  ", show(got_default), "\n  want ", show(want_default));
            CHECK_MESSAGE(got_decoded == want_decoded, kind, " case ", i, " decoded: got \"", got_decoded,
                          "\", want \"", want_decoded, "\"");
        }
    }
    MESSAGE(kind, ": ", ids_ok, " / ", default_ok, " / ", decoded_ok, " of ", cases.size(),
            " cases match (ids / with special tokens / decoded) ", fixture.at("reference").get<std::string>());
    CHECK(ids_ok == cases.size());
    CHECK(default_ok == cases.size());
    CHECK(decoded_ok == cases.size());
}

void check_hashes(const std::string& kind) {
    std::string tried;
    const std::optional<fs::path> corpus_path = strata::test::find_corpus(repo_dir(), tried);
    if (!corpus_path) {
        strata::test::skip("corpus not found (set STRATA_SHARED_DATA); tried" + tried);
        return;
    }
    const std::string corpus = read_file(*corpus_path);
    const strata::test::token_hashes fixture = strata::test::parse_token_hashes(read_file(kind_dir(kind) / "hashes.txt"));
    REQUIRE_MESSAGE(fixture.bad_row == 0, "bad row ", fixture.bad_row, " in ", kind, "/hashes.txt");
    REQUIRE(fixture.rows.size() == 20000);
    REQUIRE(fixture.all_lines > 0);

    const hf_tokenizer& tok = tokenizer_of(kind);
    const strata::test::corpus_result r =
        strata::test::encode_corpus(corpus, fixture, [&](std::string_view text) { return tok.encode(text); });
    for (const std::string& m : r.mismatches) CHECK_MESSAGE(false, kind, " ", m);
    CHECK_MESSAGE(r.corpus_differs == 0, r.corpus_differs, " lines of ", corpus_path->string(),
                  " are not the text the fixture was made from");
    MESSAGE(kind, ": ", r.matched, " of ", fixture.rows.size(), " hashed lines match; whole corpus: ", r.lines,
            " lines, ", r.tokens, " tokens in ", r.seconds, " s");
    CHECK(r.matched == fixture.rows.size());
    CHECK(r.lines == fixture.all_lines);
    CHECK(r.tokens == fixture.all_tokens);
    CHECK(r.whole_hash == fixture.all_hash);
}

// The llama2 fixture's tokenizer.json with one change, loaded; returns the error text ("" if none).
template <class Change>
std::string load_error(Change&& change) {
    nlohmann::json j = nlohmann::json::parse(read_file(kind_dir("llama2") / "tokenizer.json"));
    change(j);
    try {
        (void)hf_tokenizer::from_json_text(j.dump(), "t.json");
    } catch (const strata::error& e) {
        return e.what();
    }
    return "";
}

std::string load_error_of_text(std::string_view text) {
    try {
        (void)hf_tokenizer::from_json_text(text, "t.json");
    } catch (const strata::error& e) {
        return e.what();
    }
    return "";
}

std::string hex_of(std::string_view s) {
    std::string out;
    for (unsigned char c : s) out += strata::test::hex16(c).substr(14);
    return out;
}

}  // namespace

TEST_CASE("hf_tokenizer llama3 vs tokenizers: edge cases and 200 corpus lines, id for id") { check_cases("llama3"); }
TEST_CASE("hf_tokenizer qwen2 vs tokenizers: edge cases and 200 corpus lines, id for id") { check_cases("qwen2"); }
TEST_CASE("hf_tokenizer llama2 vs tokenizers: edge cases and 200 corpus lines, id for id") { check_cases("llama2"); }
TEST_CASE("hf_tokenizer mistral vs tokenizers: edge cases and 200 corpus lines, id for id") { check_cases("mistral"); }
TEST_CASE("hf_tokenizer llama3 vs tokenizers: 20,000 corpus lines by hash, and the whole corpus") { check_hashes("llama3"); }
TEST_CASE("hf_tokenizer qwen2 vs tokenizers: 20,000 corpus lines by hash, and the whole corpus") { check_hashes("qwen2"); }
TEST_CASE("hf_tokenizer llama2 vs tokenizers: 20,000 corpus lines by hash, and the whole corpus") { check_hashes("llama2"); }
TEST_CASE("hf_tokenizer mistral vs tokenizers: 20,000 corpus lines by hash, and the whole corpus") { check_hashes("mistral"); }

TEST_CASE("hf_tokenizer refuses what it does not implement, naming the field") {
    CHECK(load_error([](nlohmann::json&) {}) == "");  // the unchanged file loads: the changes below are what fails
    CHECK(load_error([](nlohmann::json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }) ==
          "hf_tokenizer: t.json: normalizer.type = \"Lowercase\" is not supported (hint: supported normalizers: NFC, "
          "Prepend, Replace (String pattern), Sequence)");
    CHECK(load_error([](nlohmann::json& j) { j["normalizer"]["normalizers"][1] = {{"type", "NFKC"}}; }) ==
          "hf_tokenizer: t.json: normalizer.normalizers[1].type = \"NFKC\" is not supported (hint: supported "
          "normalizers: NFC, Prepend, Replace (String pattern), Sequence)");
    CHECK(load_error([](nlohmann::json& j) {
              j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
          }) == "hf_tokenizer: t.json: normalizer.normalizers[1].pattern = {\"Regex\":\" +\"} is not supported (hint: "
                "only {\"String\": ...} patterns are implemented here, not regexes)");
    CHECK(load_error([](nlohmann::json& j) {
              j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+|\\s+"}}}, {"behavior", "Isolated"}, {"invert", false}};
          }) == "hf_tokenizer: t.json: pre_tokenizer.pattern.Regex = \"\\\\w+|\\\\s+\" is not supported (hint: strata implements "
                "the split regexes of GPT-2, Llama 3 and Qwen2 by hand, exactly as those files spell them, and has no "
                "general regex engine)");
    CHECK(load_error([](nlohmann::json& j) {
              j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", std::string(strata::qwen2_split_regex)}}},
                                    {"behavior", "MergedWithPrevious"}, {"invert", false}};
          }) == "hf_tokenizer: t.json: pre_tokenizer.behavior = \"MergedWithPrevious\" is not supported (hint: only "
                "\"Isolated\" is implemented)");
    CHECK(load_error([](nlohmann::json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }) ==
          "hf_tokenizer: t.json: pre_tokenizer.type = \"Whitespace\" is not supported (hint: supported pre-tokenizers: "
          "ByteLevel, Split (GPT-2, Llama 3, Qwen2 regexes), Metaspace, Sequence)");
    CHECK(load_error([](nlohmann::json& j) { j["model"]["type"] = "Unigram"; }) ==
          "hf_tokenizer: t.json: model.type = \"Unigram\" is not supported (hint: strata implements the BPE model "
          "only (not WordPiece, Unigram, WordLevel))");
    CHECK(load_error([](nlohmann::json& j) { j["model"]["continuing_subword_prefix"] = "##"; }) ==
          "hf_tokenizer: t.json: model.continuing_subword_prefix = \"##\" is not supported (hint: BPE with subword "
          "prefixes or suffixes is not implemented; it must be null)");
    CHECK(load_error([](nlohmann::json& j) { j["decoder"]["decoders"][0] = {{"type", "CTC"}}; }) ==
          "hf_tokenizer: t.json: decoder.decoders[0].type = \"CTC\" is not supported (hint: supported decoders: "
          "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)");
    CHECK(load_error([](nlohmann::json& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }) ==
          "hf_tokenizer: t.json: post_processor.type = \"BertProcessing\" is not supported (hint: supported "
          "post-processors: TemplateProcessing, ByteLevel, Sequence)");
    CHECK(load_error([](nlohmann::json& j) { j["model"]["merges"][5] = "x"; }) ==
          "hf_tokenizer: t.json: model.merges[5] is \"x\" (hint: a merge string is two tokens separated by one space)");
    CHECK(load_error([](nlohmann::json& j) { j["model"]["merges"][0] = "zzz qqq"; }) ==
          "hf_tokenizer: t.json: model.merges[0] names \"zzz\", which is not in model.vocab (hint: the file is "
          "inconsistent; save it again with tokenizers)");
    CHECK(load_error([](nlohmann::json& j) { j["model"]["vocab"] = nlohmann::json::array({1, 2}); }) ==
          "hf_tokenizer: t.json: model.vocab is [1,2] (hint: expected an object {\"token\": id, ...})");
    CHECK(load_error([](nlohmann::json& j) { j["added_tokens"][0]["id"] = -3; }) ==
          "hf_tokenizer: t.json: added_tokens[0].id is -3 (hint: token ids are integers from 0 to the number of tokens "
          "(3259 in model.vocab and added_tokens) less one)");
    CHECK(load_error([](nlohmann::json& j) { j["model"]["vocab"]["e"] = 3259; }) ==
          "hf_tokenizer: t.json: model.vocab[\"e\"] is 3259 (hint: token ids are integers from 0 to the number of "
          "tokens (3259 in model.vocab and added_tokens) less one)");
    CHECK(load_error([](nlohmann::json& j) { j.erase("model"); }) ==
          "hf_tokenizer: t.json: model has no field 'model' (hint: the file is incomplete or not a Hugging Face "
          "tokenizer.json)");
}

TEST_CASE("hf_tokenizer refuses malformed JSON with the parser's position") {
    CHECK(load_error_of_text(R"({"model": )") ==
          "hf_tokenizer: t.json is not valid JSON: [json.exception.parse_error.101] parse error at line 1, column 11: "
          "syntax error while parsing value - unexpected end of input; expected '[', '{', or a literal (hint: a "
          "tokenizer.json is what tokenizers' Tokenizer.save writes; was it copied completely?)");
    CHECK(load_error_of_text("[1, 2]") ==
          "hf_tokenizer: t.json: the top level is [1,2] (hint: a tokenizer.json is one JSON object)");
    CHECK(load_error_of_text(R"({"model": {"type": 7}})") ==
          "hf_tokenizer: t.json: model.type is 7 (hint: expected a string)");
    const std::string missing = (kind_dir("llama2") / "no-such-file.json").string();
    try {
        (void)hf_tokenizer::load(missing);
        FAIL("loading a missing file did not throw");
    } catch (const strata::error& e) {
        CHECK(std::string(e.what()) == "hf_tokenizer: " + missing + " is not a file (hint: pass a Hugging Face "
                                       "tokenizer.json, or the model directory that holds one)");
    }
}

TEST_CASE("hf_tokenizer: NFC as Python's unicodedata 15.0 computes it") {
    using strata::unicode::to_nfc;
    CHECK(hex_of(to_nfc("e\u0301 caf\u00e9")) == "c3a920636166c3a9");      // composes
    CHECK(hex_of(to_nfc("\u212b")) == "c385");                               // a singleton decomposes
    CHECK(hex_of(to_nfc("\u1100\u1161\u11a8")) == "eab081");                // Hangul LV + T
    CHECK(hex_of(to_nfc("a\u0323\u0302 q\u0307\u0323")) == "e1baad2071cca3cc87");  // reordering
    CHECK(hex_of(to_nfc("\u1e0b\u0323")) == "e1b88dcc87");
    CHECK(hex_of(to_nfc("\u0344")) == "cc88cc81");                           // a composition exclusion
    CHECK(hex_of(to_nfc("x\u0301\u0301")) == "78cc81cc81");                 // blocked second accent
    CHECK(hex_of(to_nfc("\u00c5\u0301 \u0f73")) == "c7ba20e0bdb1e0bdb2");
    CHECK(to_nfc("plain ascii") == "plain ascii");
    CHECK(hex_of(to_nfc("a\xff\u0301b")) == "61ffcc8162");  // an invalid byte passes through and blocks
}

TEST_CASE("hf_tokenizer: ids out of range, eot, bos and vocabulary size") {
    const hf_tokenizer& llama3 = tokenizer_of("llama3");
    CHECK(llama3.vocab_size() == 4000);
    CHECK(llama3.eot_id() == 1);  // <|end_of_text|>
    CHECK(llama3.bos_id() == 0);  // <|begin_of_text|>
    CHECK(tokenizer_of("qwen2").eot_id() == 0);  // <|endoftext|>
    CHECK(!tokenizer_of("qwen2").bos_id());
    CHECK(tokenizer_of("llama2").eot_id() == 2);  // </s>
    CHECK(tokenizer_of("llama2").bos_id() == 1);  // <s>
    const std::vector<token_id> bad{5, 4000};
    CHECK_THROWS_WITH_AS(llama3.decode(bad),
                         "hf_tokenizer: token id 4000 is out of range [0, 4000) (hint: the ids were not produced by "
                         "this tokenizer.json; check which tokenizer made them)", strata::error);
    CHECK(llama3.decode(llama3.encode("a<|eot_id|>b")) == "a<|eot_id|>b");
}

TEST_CASE("hf_tokenizer: added tokens' lstrip, rstrip, single_word and normalized") {
    // The llama3 fixture, its <|eot_id|> (id 4) changed.
    const auto llama3_with = [](auto&& change) {
        nlohmann::json j = nlohmann::json::parse(read_file(kind_dir("llama3") / "tokenizer.json"));
        REQUIRE(j["added_tokens"][4]["content"] == "<|eot_id|>");
        change(j["added_tokens"][4]);
        return hf_tokenizer::from_json_text(j.dump(), "llama3 changed");
    };
    const hf_tokenizer plain = hf_tokenizer::load(kind_dir("llama3") / "tokenizer.json");  // the file itself
    const auto cat = [](ids_t a, const ids_t& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    };
    const ids_t a = plain.encode("a"), b = plain.encode("b"), space_b = plain.encode(" b"), a_space = plain.encode("a ");
    CHECK(plain.encode("a <|eot_id|> b") == cat(cat(a_space, {4}), space_b));

    const hf_tokenizer both = llama3_with([](nlohmann::json& t) { t["lstrip"] = t["rstrip"] = true; });
    CHECK(both.encode("a \t <|eot_id|>  \n b") == cat(cat(a, {4}), b));
    const hf_tokenizer left = llama3_with([](nlohmann::json& t) { t["lstrip"] = true; });
    CHECK(left.encode("a <|eot_id|> b") == cat(cat(a, {4}), space_b));
    const hf_tokenizer right = llama3_with([](nlohmann::json& t) { t["rstrip"] = true; });
    CHECK(right.encode("a <|eot_id|> b") == cat(cat(a_space, {4}), b));

    const hf_tokenizer word = llama3_with([](nlohmann::json& t) { t["single_word"] = true; });
    CHECK(word.encode("a <|eot_id|> b") == plain.encode("a <|eot_id|> b"));
    const ids_t glued = word.encode("a<|eot_id|>b");
    CHECK(std::find(glued.begin(), glued.end(), 4) == glued.end());  // inside a word: plain text
    CHECK(word.decode(glued) == "a<|eot_id|>b");

    // Without a normalizer, normalized: true matches the same text.
    const hf_tokenizer normalized = llama3_with([](nlohmann::json& t) { t["normalized"] = true; });
    CHECK(normalized.encode("x<|eot_id|>y") == plain.encode("x<|eot_id|>y"));
    // With a normalizer, tokenizers matches the token's normalized text in the normalized text:
    // Llama 2's "<s>" as "▁<s>" (Prepend "▁", then " " -> "▁"), so " <s>" and a leading "<s>" are
    // the token and "a<s>" is not. (Semantics of tokenizers' AddedVocabulary; the fixtures have no
    // normalized added tokens to compare with.)
    nlohmann::json j = nlohmann::json::parse(read_file(kind_dir("llama2") / "tokenizer.json"));
    REQUIRE(j["added_tokens"][1]["content"] == "<s>");
    j["added_tokens"][1]["normalized"] = true;
    const hf_tokenizer llama2 = hf_tokenizer::from_json_text(j.dump(), "llama2 changed");
    const hf_tokenizer& llama2_plain = tokenizer_of("llama2");
    CHECK(llama2.encode("<s>") == ids_t{1});
    CHECK(llama2.encode("a <s>") == cat(llama2_plain.encode("a"), {1}));
    // What follows is already normalized: "b" gets no "▁" of its own.
    CHECK(llama2.encode("a <s>b") == cat(cat(llama2_plain.encode("a"), {1}), {*llama2.token_id_of("b")}));
    const ids_t no_space = llama2.encode("a<s>");
    CHECK(std::find(no_space.begin(), no_space.end(), 1) == no_space.end());
    CHECK(llama2.decode(no_space) == "a<s>");
}

// A tiny BPE over plain characters: vocabulary <unk> a b c ab abc, merge "a b" only, so "abc"
// is reachable only by ignore_merges; no pre-tokenizer, no decoder unless given.
hf_tokenizer tiny(bool ignore_merges, bool fuse_unk, nlohmann::json decoder = nullptr) {
    nlohmann::json j = {
        {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", fuse_unk}, {"ignore_merges", ignore_merges},
                   {"vocab", {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"c", 3}, {"ab", 4}, {"abc", 5}}},
                   {"merges", nlohmann::json::array({nlohmann::json::array({"a", "b"})})}}},
        {"decoder", decoder}};
    return hf_tokenizer::from_json_text(j.dump(), "tiny");
}

TEST_CASE("hf_tokenizer: ignore_merges, unk and fuse_unk as tokenizers' BPE does them") {
    CHECK(tiny(false, false).encode("abc") == ids_t{4, 3});  // merges only: ab c
    CHECK(tiny(true, false).encode("abc") == ids_t{5});      // the whole word is a token
    CHECK(tiny(true, false).encode("abcab") == ids_t{4, 3, 4});
    CHECK(tiny(false, false).encode("axyb") == ids_t{1, 0, 0, 2});  // one <unk> per unknown character
    CHECK(tiny(false, true).encode("axyb") == ids_t{1, 0, 2});      // fused
    CHECK(tiny(false, true).encode("xaxy") == ids_t{0, 1, 0});
    CHECK(tiny(false, false).vocab_size() == 6);
    CHECK_THROWS_WITH_AS(tiny(false, false).eot_id(),
                         "hf_tokenizer: tiny has no end-of-text token (none of <|endoftext|>, <|end_of_text|>, </s>, "
                         "<|im_end|>, <eos> is a special added token) (hint: documents cannot be separated; add one to "
                         "added_tokens, or use another tokenizer)", strata::error);
}

TEST_CASE("hf_tokenizer: decoders one by one") {
    const ids_t ids{4, 0, 3};  // "ab" "<unk>" "c"
    CHECK(tiny(false, false).decode(ids) == "ab<unk>c");  // no decoder: joined
    CHECK(tiny(false, false, {{"type", "Replace"}, {"pattern", {{"String", "b"}}}, {"content", "B"}}).decode(ids) == "aB<unk>c");
    CHECK(tiny(false, false, {{"type", "Strip"}, {"content", "a"}, {"start", 1}, {"stop", 0}}).decode(ids) == "b<unk>c");
    CHECK(tiny(false, false, {{"type", "Strip"}, {"content", "c"}, {"start", 0}, {"stop", 1}}).decode(ids) == "ab<unk>");
    CHECK(tiny(false, false, {{"type", "Metaspace"}, {"replacement", "b"}, {"prepend_scheme", "never"}, {"split", false}})
              .decode(ids) == "a <unk>c");
    CHECK(tiny(false, false, {{"type", "Metaspace"}, {"replacement", "b"}, {"prepend_scheme", "always"}, {"split", false}})
              .decode(ids) == "a<unk>c");  // the first token loses its replacement characters
    // ByteFallback: a run of <0xNN> that is valid UTF-8 becomes its text, else one U+FFFD per byte.
    nlohmann::json j = nlohmann::json::parse(read_file(kind_dir("llama2") / "tokenizer.json"));
    const hf_tokenizer llama2 = hf_tokenizer::from_json_text(j.dump(), "llama2");
    const auto id = [&](std::string_view t) { return *llama2.token_id_of(t); };
    CHECK(llama2.decode(ids_t{id("<0xC3>"), id("<0xA9>")}) == "\u00e9");
    CHECK(llama2.decode(ids_t{id("<0xC3>"), id("a"), id("<0xA9>")}) == "\ufffda\ufffd");
    CHECK(llama2.decode(ids_t{id("<0xE6>"), id("<0x9C>")}) == "\ufffd\ufffd");
    // ByteLevel: the bytes read back lossily, one U+FFFD per maximal invalid subsequence.
    const hf_tokenizer& llama3 = tokenizer_of("llama3");
    const auto byte_token = [&](const char* t) { return *llama3.token_id_of(t); };
    CHECK(llama3.decode(ids_t{byte_token("\u00e6"), byte_token("\u013e")}) == "\ufffd");  // E6 9C: a truncated 3-byte form
}

}  // namespace hf_tokenizer_test
