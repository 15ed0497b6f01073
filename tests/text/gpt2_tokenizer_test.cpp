// gpt2_tokenizer: pre-tokenization rules, BPE order, special token, round trips, file errors.
// The comparison with Hugging Face over the corpus is in gpt2_fixture_test.cpp.
#include <strata/text/gpt2_tokenizer.hpp>  // strata::gpt2_tokenizer, gpt2_split, unicode::

#include <doctest/doctest.h>     // TEST_CASE, CHECK
#include <nlohmann/json.hpp>     // nlohmann::json, to write small vocabularies

#include <cstdint>      // std::uint32_t
#include <filesystem>   // std::filesystem
#include <fstream>      // std::ofstream
#include <random>       // std::mt19937
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <thread>       // std::thread
#include <vector>       // std::vector

namespace gpt2_tokenizer_test {  // this file's names: an area's files compile as one unit (unity build)

namespace fs = std::filesystem;
using strata::gpt2_tokenizer;
using strata::token_id;
using ids_t = std::vector<token_id>;

namespace {

fs::path fixtures_dir() {
#ifdef STRATA_SOURCE_DIR
    return fs::path(STRATA_SOURCE_DIR) / "tests" / "fixtures";
#else
    return fs::path(__FILE__).parent_path().parent_path() / "fixtures";
#endif
}

// One tokenizer for the whole file: loading takes a fraction of a second.
const gpt2_tokenizer& gpt2() {
    static const gpt2_tokenizer tok = gpt2_tokenizer::load(fixtures_dir() / "gpt2");
    return tok;
}

std::vector<std::string> split(std::string_view text) {
    std::vector<std::string> out;
    for (std::string_view piece : strata::gpt2_split(text)) out.emplace_back(piece);
    return out;
}

std::string utf8(char32_t cp) {
    std::string out;
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    } else if (cp < 0x10000) {
        out += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                static_cast<char>(0x80 | (cp & 0x3F))};
    } else {
        out += {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
                static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    return out;
}

// A vocabulary key as vocab.json spells raw bytes (GPT-2's bytes_to_unicode).
std::string key_of(std::string_view raw) {
    static constexpr auto table = strata::gpt2_detail::byte_to_code_point();
    std::string key;
    for (unsigned char b : raw) key += utf8(table[b]);
    return key;
}

// A small byte-level vocabulary: the 256 bytes, then `extra` in order, then <|endoftext|>.
std::string small_vocab(const std::vector<std::string>& extra) {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[key_of(std::string(1, static_cast<char>(b)))] = b;
    int id = 256;
    for (const std::string& raw : extra) vocab[key_of(raw)] = id++;
    vocab["<|endoftext|>"] = id;
    return vocab.dump();
}

// bc is merged before ab, so "abc" must become a|bc even though "abc" is a token.
const std::vector<std::string> small_tokens{"ab", "bc", "abc", "aa"};
const std::string small_merges = "#version: 0.2\nb c\na b\nab c\na a\n";

std::string what_of(const auto& make) {
    try {
        make();
    } catch (const strata::error& e) {
        return e.what();
    }
    return "no error";
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

}  // namespace

static_assert(strata::Tokenizer<gpt2_tokenizer>);

TEST_CASE("gpt2: the real files load with GPT-2's sizes and known ids") {
    const gpt2_tokenizer& tok = gpt2();
    CHECK(tok.vocab_size() == 50257);
    CHECK(tok.eot_id() == 50256);
    CHECK(tok.name() == "gpt2");
    CHECK(tok.encode("Hello world") == ids_t{15496, 995});
    CHECK(tok.encode(" Hello world") == ids_t{18435, 995});
    CHECK(tok.token_bytes(995) == " world");
    CHECK(tok.token_bytes(220) == " ");
    CHECK(tok.encode("") == ids_t{});
}

TEST_CASE("gpt2 split: words take one leading space, contractions are their own pieces") {
    CHECK(split("Hello, world! It's 42") ==
          std::vector<std::string>{"Hello", ",", " world", "!", " It", "'s", " 42"});
    CHECK(split("we'll I'd you're they've I'm don't") ==
          std::vector<std::string>{"we", "'ll", " I", "'d", " you", "'re", " they", "'ve", " I", "'m", " don", "'t"});
    // Only lower-case contractions at the start of a match; elsewhere ' is punctuation.
    CHECK(split("DON'T") == std::vector<std::string>{"DON", "'", "T"});
    CHECK(split("?!'s x 's") == std::vector<std::string>{"?!'", "s", " x", " '", "s"});
    CHECK(split("abc123def") == std::vector<std::string>{"abc", "123", "def"});
    CHECK(split("$$$ ...") == std::vector<std::string>{"$$$", " ..."});
}

TEST_CASE("gpt2 split: white space runs leave their last space to the next word") {
    CHECK(split("a  b") == std::vector<std::string>{"a", " ", " b"});
    CHECK(split("a   b") == std::vector<std::string>{"a", "  ", " b"});
    CHECK(split("trailing   ") == std::vector<std::string>{"trailing", "   "});
    CHECK(split("   leading") == std::vector<std::string>{"  ", " leading"});
    // A lone non-space-character space before a word is \s+ on its own.
    CHECK(split("x\t\ny") == std::vector<std::string>{"x", "\t", "\n", "y"});
    CHECK(split("a\n\nb") == std::vector<std::string>{"a", "\n", "\n", "b"});
    CHECK(split(" ") == std::vector<std::string>{" "});
    CHECK(split("") == std::vector<std::string>{});
}

TEST_CASE("gpt2 split: Unicode classes (letters, numbers, White_Space) beyond ASCII") {
    CHECK(split("naïve café") == std::vector<std::string>{"naïve", " café"});
    CHECK(split("١٢٣ ½Ⅻ") == std::vector<std::string>{"١٢٣", " ½Ⅻ"});
    CHECK(split("x\u00a0y") == std::vector<std::string>{"x", "\u00a0", "y"});       // NBSP is \s
    CHECK(split("x\u0085 y") == std::vector<std::string>{"x", "\u0085", " y"});     // NEL is \s
    CHECK(split("x\u3000\u3000y") == std::vector<std::string>{"x", "\u3000", "\u3000", "y"});
    // U+001C is a space to Python's isspace but not White_Space, which is what \s means to Oniguruma.
    CHECK(split("x \x1c" "b") == std::vector<std::string>{"x", " \x1c", "b"});
    CHECK(split("x \u0085b") == std::vector<std::string>{"x", " ", "\u0085", "b"});
    CHECK(split("e\u0301!") == std::vector<std::string>{"e", "\u0301!"});           // a mark is neither L nor N
    CHECK(split("👍🏽 ok") == std::vector<std::string>{"👍🏽", " ok"});
}

TEST_CASE("unicode: classify and decode_utf8") {
    using strata::unicode::char_class;
    using strata::unicode::classify;
    CHECK(classify(U'a') == char_class::letter);
    CHECK(classify(U'漢') == char_class::letter);
    CHECK(classify(U'7') == char_class::number);
    CHECK(classify(U'Ⅻ') == char_class::number);
    CHECK(classify(U' ') == char_class::space);
    CHECK(classify(U'\u2029') == char_class::space);
    CHECK(classify(U'\u180e') == char_class::other);  // left White_Space in Unicode 6.3
    CHECK(classify(U'€') == char_class::other);
    CHECK(classify(U'\U0001E030') == char_class::letter);  // new in Unicode 15.0
    CHECK(classify(U'\U0010FFFF') == char_class::other);

    const auto unit = [](std::string_view s) { return strata::unicode::decode_utf8(s, 0); };
    CHECK(unit("\xE2\x82\xAC").valid);
    CHECK(unit("\xE2\x82\xAC").code_point == U'€');
    CHECK(unit("\xF4\x8F\xBF\xBF").code_point == 0x10FFFF);
    CHECK(unit("\xF0\x9F\x91\x8D").length == 4);
    CHECK_FALSE(unit("\xC0\xAF").valid);              // overlong '/'
    CHECK_FALSE(unit("\xE0\x80\xAF").valid);          // overlong
    CHECK_FALSE(unit("\xED\xA0\x80").valid);          // surrogate
    CHECK_FALSE(unit("\xF4\x90\x80\x80").valid);      // past U+10FFFF
    CHECK_FALSE(unit("\xE2\x82").valid);              // truncated
    CHECK_FALSE(unit("\x80").valid);                  // stray continuation
    CHECK(unit("\xE2\x82").length == 1);
}

TEST_CASE("gpt2 split: invalid UTF-8 bytes are one-byte symbols") {
    CHECK(split("a\xff\xfe b") == std::vector<std::string>{"a", "\xff\xfe", " b"});
    CHECK(split("!\x80?") == std::vector<std::string>{"!\x80?"});
    CHECK(split("\xE2\x82 x") == std::vector<std::string>{"\xE2\x82", " x"});
    CHECK(split(" \xED\xA0\x80") == std::vector<std::string>{" \xED\xA0\x80"});
}

TEST_CASE("gpt2: <|endoftext|> in text is split out as eot, as Hugging Face does by default") {
    const gpt2_tokenizer& tok = gpt2();
    CHECK(tok.encode("<|endoftext|>") == ids_t{50256});
    CHECK(tok.encode("a<|endoftext|>b") == ids_t{64, 50256, 65});
    // Each side is pre-tokenized alone: the space before it is not glued to anything.
    CHECK(tok.encode(" <|endoftext|> x") == ids_t{220, 50256, 2124});
    CHECK(tok.encode("<|endoftext|><|endoftext|>") == ids_t{50256, 50256});
    CHECK(tok.encode("<|endoftext") == tok.encode_ordinary("<|endoftext"));

    const ids_t plain = tok.encode_ordinary("<|endoftext|>");
    CHECK(plain.size() > 1);
    CHECK(tok.decode(plain) == "<|endoftext|>");
    CHECK(tok.decode(ids_t{50256}) == "<|endoftext|>");
}

TEST_CASE("gpt2: merges apply lowest rank first, leftmost among equals") {
    const gpt2_tokenizer tok = gpt2_tokenizer::from_strings(small_vocab(small_tokens), small_merges);
    CHECK(tok.vocab_size() == 261);
    CHECK(tok.eot_id() == 260);
    CHECK(tok.encode("ab") == ids_t{256});
    CHECK(tok.encode("abc") == ids_t{'a', 257});  // b c (rank 0) beats a b (rank 1)
    CHECK(tok.encode("aaa") == ids_t{259, 'a'});
    CHECK(tok.encode("aaaa") == ids_t{259, 259});
    CHECK(tok.encode("abcabc") == ids_t{'a', 257, 'a', 257});
    CHECK(tok.encode("aab") == ids_t{'a', 256});  // a b (rank 1) goes before a a (rank 3)
}

TEST_CASE("gpt2: decode is the exact byte-level inverse of encode") {
    const gpt2_tokenizer& tok = gpt2();
    const std::vector<std::string> texts{
        "The quick brown fox.\n\n  Indented\tand tabbed   ",
        "emoji 👍🏽 ok 🇫🇷 👨‍👩‍👧",
        "日本語のテキストです。 Привет, мир! مرحبا नमस्ते",
        "invalid \xff\xfe bytes \x80 and a truncated \xE2\x82",
        "surrogate \xED\xA0\x80 overlong \xC0\xAF NUL " + std::string(1, '\0') + " end",
        "mixed <|endoftext|> special",
        std::string(3000, ' ') + "x",
    };
    for (const std::string& text : texts) {
        CAPTURE(text);
        CHECK(tok.decode(tok.encode(text)) == text);
        CHECK(tok.decode(tok.encode_ordinary(text)) == text);
    }
}

TEST_CASE("gpt2: random byte strings round-trip and their pieces tile the input") {
    const gpt2_tokenizer& tok = gpt2();
    std::mt19937 rng(12345);
    // Bytes drawn mostly from a small alphabet of ASCII, UTF-8 lead/continuation bytes and spaces,
    // so that runs, contractions and broken sequences all occur.
    const std::string alphabet = std::string("aZ09 '\t\n.s") + "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x91\x8D\x80\xBF\xFF\xC0\xED";
    for (int round = 0; round < 3000; ++round) {
        std::string text(rng() % 40, '\0');
        for (char& c : text) c = (rng() % 4 == 0) ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
        CAPTURE(round);
        std::string tiled;
        for (std::string_view piece : strata::gpt2_split(text)) {
            CHECK_FALSE(piece.empty());
            tiled += piece;
        }
        CHECK(tiled == text);
        const ids_t ids = tok.encode(text);
        for (token_id id : ids) CHECK((id >= 0 && id < tok.vocab_size()));
        CHECK(tok.decode(ids) == text);
    }
}

// Quadratic merging would take minutes on this one 100 kB piece; the heap takes milliseconds.
TEST_CASE("gpt2: a long piece (no spaces) encodes quickly and exactly" * doctest::timeout(10)) {
    const gpt2_tokenizer& tok = gpt2();
    std::string text;
    for (int i = 0; i < 50000; ++i) text += "ab";
    REQUIRE(strata::gpt2_split(text).size() == 1);
    const ids_t ids = tok.encode(text);
    CHECK(ids.size() == 50000);  // GPT-2 has "ab" but nothing longer made of it
    CHECK(tok.decode(ids) == text);
}

TEST_CASE("gpt2: the cache changes nothing, across calls, copies and threads") {
    const gpt2_tokenizer fresh = gpt2_tokenizer::load(fixtures_dir() / "gpt2");
    const std::string text = "It's a truth universally acknowledged, that a single man in possession of a good "
                             "fortune, must be in want of a wife. 1813 <|endoftext|> ünïcödé";
    const ids_t first = fresh.encode(text);
    CHECK(fresh.encode(text) == first);
    const gpt2_tokenizer copy = fresh;  // shares tables and cache
    CHECK(copy.encode(text) == first);
    CHECK(gpt2().encode(text) == first);


    // Threads share one cold cache; each must get what a separate tokenizer computes alone.
    const gpt2_tokenizer shared = gpt2_tokenizer::load(fixtures_dir() / "gpt2");
    std::vector<std::string> texts;
    for (int i = 0; i < 64; ++i) texts.push_back(text + " variant " + std::to_string(i * 7919));
    std::vector<std::vector<ids_t>> results(4, std::vector<ids_t>(texts.size()));
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < results.size(); ++t)
        threads.emplace_back([&, t] {
            for (std::size_t i = 0; i < texts.size(); ++i) results[t][(i + 16 * t) % texts.size()] = shared.encode(texts[(i + 16 * t) % texts.size()]);
        });
    for (std::thread& th : threads) th.join();
    for (std::size_t i = 0; i < texts.size(); ++i)
        for (const auto& r : results) CHECK(r[i] == fresh.encode(texts[i]));
}

TEST_CASE("gpt2: decode rejects ids outside the vocabulary") {
    const gpt2_tokenizer& tok = gpt2();
    for (token_id bad : {-1, 50257, 1 << 30}) {
        CAPTURE(bad);
        const std::string what = what_of([&] { (void)tok.decode(ids_t{15496, bad}); });
        CHECK(contains(what, std::to_string(bad)));
        CHECK(contains(what, "50257"));
    }
}

TEST_CASE("gpt2: missing files are named") {
    const fs::path dir = fs::temp_directory_path() / "strata_gpt2_missing_files";
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::string what = what_of([&] { (void)gpt2_tokenizer::load(dir); });
    CHECK(contains(what, "vocab.json"));
    CHECK(contains(what, "cannot read"));

    std::ofstream(dir / "vocab.json") << small_vocab(small_tokens);
    what = what_of([&] { (void)gpt2_tokenizer::load(dir); });
    CHECK(contains(what, "merges.txt"));

    std::ofstream(dir / "merges.txt") << small_merges;
    CHECK(gpt2_tokenizer::load(dir).encode("abc") == ids_t{'a', 257});
    fs::remove_all(dir);
}

TEST_CASE("gpt2: malformed vocab.json is reported with line, column and the problem") {
    const auto vocab_error = [](const std::string& json) {
        return what_of([&] { (void)gpt2_tokenizer::from_strings(json, small_merges, "my/vocab.json"); });
    };
    const std::string good = small_vocab(small_tokens);
    CHECK(vocab_error(good) == "no error");

    std::string what = vocab_error("[1, 2]");
    CHECK(contains(what, "my/vocab.json line 1, column 1"));
    CHECK(contains(what, "expected '{'"));

    what = vocab_error("{\n  \"a\": 0,\n  \"b\" 1\n}");
    CHECK(contains(what, "line 3, column 7"));
    CHECK(contains(what, "expected ':'"));

    CHECK(contains(vocab_error("{\"a\": -1}"), "non-negative integer id"));
    CHECK(contains(vocab_error("{\"a\": 1.5}"), "is not an integer"));
    CHECK(contains(vocab_error("{\"a\": 99999999999}"), "does not fit in int32"));
    CHECK(contains(vocab_error("{\"a\\q\": 0}"), "unknown escape"));
    CHECK(contains(vocab_error("{\"a\": 0"), "found the end of the file"));
    CHECK(contains(vocab_error("{\"a\": 0} x"), "unexpected text after the closing"));
    CHECK(contains(vocab_error("{\"\\ud800\": 0}"), "surrogate"));

    // Well-formed JSON that is not a byte-level vocabulary.
    CHECK(contains(vocab_error("{\"a\": 0, \"a\": 1}"), "appears twice"));
    CHECK(contains(vocab_error("{\"a\": 0, \"b\": 0}"), "is already the id of \"a\""));
    CHECK(contains(vocab_error("{\"a\": 0, \"b\": 5}"), "ids must be 0, 1, ... without gaps"));
    CHECK(contains(vocab_error("{\"a\": 0, \"\\u00e9\\u0020\": 1}"), "U+0020, which is not one of GPT-2's byte characters"));
    CHECK(contains(vocab_error("{\"a\": 0}"), "no token for byte 0"));

    nlohmann::json no_eot = nlohmann::json::parse(good);
    no_eot.erase("<|endoftext|>");
    CHECK(contains(vocab_error(no_eot.dump()), "no \"<|endoftext|>\" token"));
}

TEST_CASE("gpt2: malformed merges.txt is reported with its line and the problem") {
    const std::string vocab = small_vocab(small_tokens);
    const auto merges_error = [&](const std::string& merges) {
        return what_of([&] { (void)gpt2_tokenizer::from_strings(vocab, merges, "vocab.json", "my/merges.txt"); });
    };
    CHECK(merges_error(small_merges) == "no error");
    CHECK(merges_error("b c\r\na b\r\n") == "no error");         // no #version line, CRLF
    CHECK(merges_error(small_merges + "\n\n") == "no error");    // trailing blank lines

    std::string what = merges_error("#version: 0.2\nb c\na b c\n");
    CHECK(contains(what, "my/merges.txt line 3"));
    CHECK(contains(what, "two tokens separated by one space"));

    CHECK(contains(merges_error("#version: 0.2\nb c\n\na b\n"), "line 3: empty line"));
    CHECK(contains(merges_error("#version: 0.2\nbc\n"), "two tokens"));
    CHECK(contains(merges_error("#version: 0.2\nb  c\n"), "two tokens"));
    what = merges_error("#version: 0.2\nb q\n");
    CHECK(contains(what, "line 2"));
    CHECK(contains(what, "\"bq\" is not in vocab.json"));
    // U+00E9 spells byte 0xE9, so the pair is readable; it is the merged token that is missing.
    CHECK(contains(merges_error("#version: 0.2\nb \xC3\xA9\n"), "\"b\xC3\xA9\" is not in vocab.json"));
    CHECK(contains(merges_error("#version: 0.2\nz \xE2\x82\xAC\n"), "U+20AC, which is not one of GPT-2's byte characters"));
}

}  // namespace gpt2_tokenizer_test
