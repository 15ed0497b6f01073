// From records to sequences: packing arithmetic, instruction masking, truncation and drops, the
// train/validation split, and the errors on the way.
#include <strata/data/tokenize.hpp>        // prepare_data, pack_documents, build_instruct_rows
#include <strata/text/byte_tokenizer.hpp>  // byte_tokenizer

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE

#include <cmath>        // NAN
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace tokenize_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata::data;
using strata::token_id;

namespace {

constexpr token_id eot = strata::byte_tokenizer::eot;
constexpr token_id x = ignore_index;

std::vector<token_id> ids(std::span<const token_id> s) { return {s.begin(), s.end()}; }

std::vector<token_id> bytes(std::string_view text) {
    std::vector<token_id> out;
    for (unsigned char c : text) out.push_back(c);
    return out;
}

record_set base_records(std::vector<std::string> documents) {
    record_set r;
    r.kind = record_kind::base;
    r.documents = std::move(documents);
    r.source = "mem";
    return r;
}

record_set instruct_records(std::vector<instruct_record> examples) {
    record_set r;
    r.kind = record_kind::instruct;
    r.examples = std::move(examples);
    r.source = "mem";
    return r;
}

// Short enough to count by hand: "I:ab R:" is 7 bytes.
prompt_template tiny_prompt() { return {"I:{instruction} X:{input} R:", "I:{instruction} R:"}; }

template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const strata::error& e) {
        return e.what();
    }
    FAIL("expected a strata::error");
    return {};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Not the byte tokenizer: one token per word, to show the pipeline is generic over Tokenizer.
struct word_tokenizer {
    std::vector<token_id> encode(std::string_view text) const {
        std::vector<token_id> out;
        bool in_word = false;
        for (char c : text) {
            bool space = c == ' ' || c == '\n';
            if (!space && !in_word) out.push_back(static_cast<token_id>(out.size() % 7));
            in_word = !space;
        }
        return out;
    }
    std::string decode(std::span<const token_id>) const { return {}; }
    token_id eot_id() const { return 7; }
    token_id vocab_size() const { return 8; }
    std::string_view name() const { return "word"; }
};

struct broken_tokenizer : word_tokenizer {
    std::vector<token_id> encode(std::string_view) const { return {1, 8}; }
    std::string_view name() const { return "broken"; }
};

}  // namespace

TEST_CASE("packing: documents joined with eot, windows of T+1 overlapping by one") {
    strata::byte_tokenizer tok;
    record_set r = base_records({"abc", "de"});
    // stream: a b c | d e |   (7 tokens)
    CHECK(tokenize_documents(r, tok) == std::vector<token_id>{'a', 'b', 'c', eot, 'd', 'e', eot});

    data_stats stats;
    token_dataset d = pack_documents(r, tok, 2, stats);
    REQUIRE(d.size() == 3);
    CHECK(d.seq_len() == 2);
    CHECK(ids(d.inputs(0)) == std::vector<token_id>{'a', 'b'});
    CHECK(ids(d.targets(0)) == std::vector<token_id>{'b', 'c'});
    CHECK(ids(d.inputs(1)) == std::vector<token_id>{'c', eot});
    CHECK(ids(d.targets(1)) == std::vector<token_id>{eot, 'd'});
    CHECK(ids(d.inputs(2)) == std::vector<token_id>{'d', 'e'});
    CHECK(ids(d.targets(2)) == std::vector<token_id>{'e', eot});
    CHECK(stats.tokens == 7);
    CHECK(stats.sequences == 3);
    CHECK(stats.tail_tokens == 0);
    CHECK(stats.trainable_targets == 6);

    data_stats s4;
    token_dataset d4 = pack_documents(r, tok, 4, s4);  // one window of 5, two tail tokens unused
    REQUIRE(d4.size() == 1);
    CHECK(ids(d4.inputs(0)) == std::vector<token_id>{'a', 'b', 'c', eot});
    CHECK(ids(d4.targets(0)) == std::vector<token_id>{'b', 'c', eot, 'd'});
    CHECK(s4.tail_tokens == 2);
    CHECK_THROWS(d4.inputs(1));

    data_stats s6;
    token_dataset d6 = pack_documents(r, tok, 6, s6);  // the whole stream is exactly one window
    REQUIRE(d6.size() == 1);
    CHECK(ids(d6.targets(0)) == std::vector<token_id>{'b', 'c', eot, 'd', 'e', eot});
    CHECK(s6.tail_tokens == 0);
}

TEST_CASE("packing: a corpus shorter than one window is an error with the numbers") {
    strata::byte_tokenizer tok;
    data_stats stats;
    std::string e = error_of([&] { pack_documents(base_records({"abc", "de"}), tok, 7, stats); });
    CHECK(contains(e, "mem has 7 tokens"));
    CHECK(contains(e, "seq_len 7 needs at least 8"));
    CHECK(contains(e, "lower seq_len"));
    CHECK(contains(error_of([&] { pack_documents(base_records({"abc"}), tok, 0, stats); }), "seq_len is 0"));
}

TEST_CASE("packing works for any Tokenizer and checks its ids against the vocabulary") {
    data_stats stats;
    token_dataset d = pack_documents(base_records({"one two three", "four"}), word_tokenizer{}, 2, stats);
    // words get ids 0 1 2 | 0 |: six tokens, two windows of three
    REQUIRE(d.size() == 2);
    CHECK(ids(d.inputs(0)) == std::vector<token_id>{0, 1});
    CHECK(ids(d.inputs(1)) == std::vector<token_id>{2, 7});
    CHECK(ids(d.targets(1)) == std::vector<token_id>{7, 0});

    std::string e = error_of([&] { pack_documents(base_records({"a", "b"}), broken_tokenizer{}, 2, stats); });
    CHECK(contains(e, "mem document 1: tokenizer 'broken' produced id 8, outside its vocabulary [0, 8)"));
}

TEST_CASE("the Alpaca template, with and without input") {
    prompt_template p = alpaca_prompt();
    CHECK(p.render("Sum it.", "1 2") ==
          "Below is an instruction that describes a task, paired with an input that provides further context. "
          "Write a response that appropriately completes the request.\n\n"
          "### Instruction:\nSum it.\n\n### Input:\n1 2\n\n### Response:\n");
    CHECK(p.render("Say hi.", "") ==
          "Below is an instruction that describes a task. Write a response that appropriately completes the "
          "request.\n\n### Instruction:\nSay hi.\n\n### Response:\n");
    // Substituted text is not scanned again.
    CHECK(tiny_prompt().render("use {input}", "v") == "I:use {input} X:v R:");
    CHECK_NOTHROW(p.validate());
}

TEST_CASE("a prompt template that loses a field is refused") {
    CHECK(contains(error_of([] { prompt_template{"I:{instruction}", "I:{instruction}"}.validate(); }),
                   "with_input must contain both {instruction} and {input}"));
    CHECK(contains(error_of([] { prompt_template{"{instruction}{input}", "nothing"}.validate(); }),
                   "without_input must contain {instruction}"));
    CHECK(contains(error_of([] { prompt_template{"{instruction}{input}", "{instruction}{input}"}.validate(); }),
                   "without_input must not contain {input}"));
    data_stats stats;
    CHECK_THROWS_AS(build_instruct_rows(instruct_records({{"a", "", "b"}}), strata::byte_tokenizer{}, 8,
                                        prompt_template{"x", "y"}, stats),
                    strata::error);
}

TEST_CASE("instruction rows: prompt targets ignored, response targets are the next tokens, padding ignored") {
    strata::byte_tokenizer tok;
    data_stats stats;
    // prompt "I:ab R:" (7 tokens), response "cd" + eot: 10 tokens in a window of 13.
    token_dataset d = build_instruct_rows(instruct_records({{"ab", "", "cd"}}), tok, 12, tiny_prompt(), stats);
    REQUIRE(d.size() == 1);
    std::vector<token_id> full = bytes("I:ab R:cd");
    full.push_back(eot);
    std::vector<token_id> in(full.begin(), full.end());
    in.push_back(eot);  // padding
    in.push_back(eot);
    CHECK(ids(d.inputs(0)) == in);
    CHECK(ids(d.targets(0)) == std::vector<token_id>{x, x, x, x, x, x, 'c', 'd', eot, x, x, x});
    CHECK(stats.tokens == 10);
    CHECK(stats.trainable_targets == 3);
    CHECK(stats.truncated == 0);
    CHECK(stats.dropped == 0);
    CHECK(stats.sequences == 1);

    // With an input, the other text of the template is used.
    data_stats s2;
    token_dataset d2 = build_instruct_rows(instruct_records({{"a", "z", "q"}}), tok, 16, tiny_prompt(), s2);
    std::vector<token_id> expected = bytes("I:a X:z R:q");
    expected.push_back(eot);
    CHECK(std::vector<token_id>(d2.inputs(0).begin(), d2.inputs(0).begin() + 12) == expected);
    CHECK(d2.targets(0)[9] == 'q');  // target of the last prompt token is the first response token
    CHECK(d2.targets(0)[8] == x);
    CHECK(d2.targets(0)[10] == eot);
    CHECK(d2.targets(0)[11] == x);
}

TEST_CASE("instruction rows: truncation keeps the prompt start; a prompt that fills the window is dropped") {
    strata::byte_tokenizer tok;
    std::vector<instruct_record> records = {{"ab", "", "cd"}, {"abcdef", "", "g"}, {"ab", "", ""}};
    // Full lengths: 10, 13 (prompt 11), 8 (prompt 7, response only eot).
    data_stats stats;
    token_dataset d = build_instruct_rows(instruct_records(records), tok, 8, tiny_prompt(), stats);
    // Window 9: record 1 is cut after 'd' (eot lost), record 2's prompt fills it, record 3 fits.
    REQUIRE(d.size() == 2);
    CHECK(ids(d.inputs(0)) == bytes("I:ab R:c"));
    CHECK(ids(d.targets(0)) == std::vector<token_id>{x, x, x, x, x, x, 'c', 'd'});
    CHECK(ids(d.targets(1)) == std::vector<token_id>{x, x, x, x, x, x, eot, x});
    CHECK(stats.records == 0);  // filled by prepare_data, not here
    CHECK(stats.truncated == 1);
    CHECK(stats.dropped == 1);
    CHECK(stats.sequences == 2);
    CHECK(stats.trainable_targets == 3);
    CHECK(stats.tokens == 10 + 13 + 8);

    // Window 8: record 1 keeps exactly one trainable target.
    data_stats s7;
    token_dataset d7 = build_instruct_rows(instruct_records({{"ab", "", "cd"}}), tok, 7, tiny_prompt(), s7);
    CHECK(ids(d7.targets(0)) == std::vector<token_id>{x, x, x, x, x, x, 'c'});
    CHECK(s7.truncated == 1);

    data_stats s6;
    std::string e = error_of([&] {
        build_instruct_rows(instruct_records({{"ab", "", "cd"}, {"ab", "", "e"}}), tok, 6, tiny_prompt(), s6);
    });
    CHECK(s6.dropped == 2);
    CHECK(contains(e, "mem: all 2 instruction records were dropped"));
    CHECK(contains(e, "seq_len + 1 = 7"));
    CHECK(contains(e, "raise seq_len"));
}

TEST_CASE("validation count: round(n * fraction), at least 1, leaving at least 1 for training") {
    CHECK(validation_count(10, 0.0) == 0);
    CHECK(validation_count(10, 0.1) == 1);
    CHECK(validation_count(10, 0.25) == 3);  // 2.5 rounds up
    CHECK(validation_count(100, 0.07) == 7);  // 7.000000000000001 must not become 8
    CHECK(validation_count(1000, 0.0001) == 1);
    CHECK(validation_count(2, 0.01) == 1);
    CHECK(validation_count(2, 0.99) == 1);
    CHECK(validation_count(5, 0.9) == 4);
    CHECK(validation_count(1, 0.5) == 0);
    CHECK(validation_count(0, 0.5) == 0);
    for (double bad : {-0.1, 1.0, 2.0, static_cast<double>(NAN)}) {
        std::string e = error_of([&] { validation_count(10, bad); });
        CHECK(contains(e, "outside [0, 1)"));
        CHECK(contains(e, "0 for no validation set"));
    }
}

TEST_CASE("prepare_data: base corpus split at its end, with stats") {
    strata::byte_tokenizer tok;
    // 20 bytes + eot = 21 tokens; T = 4 gives 5 windows; 20% = 1 validation window.
    prepared_data p = prepare_data(base_records({"abcdefghijklmnopqrst"}), tok, {4, 0.2, alpaca_prompt()});
    REQUIRE(p.train.size() == 4);
    REQUIRE(p.validation.size() == 1);
    CHECK(ids(p.train.inputs(0)) == bytes("abcd"));
    CHECK(ids(p.train.inputs(3)) == bytes("mnop"));
    CHECK(ids(p.train.targets(3)) == bytes("nopq"));
    CHECK(ids(p.validation.inputs(0)) == bytes("qrst"));
    CHECK(ids(p.validation.targets(0)) == std::vector<token_id>{'r', 's', 't', eot});
    CHECK(p.stats.kind == record_kind::base);
    CHECK(p.stats.records == 1);
    CHECK(p.stats.tokens == 21);
    CHECK(p.stats.sequences == 5);
    CHECK(p.stats.train_sequences == 4);
    CHECK(p.stats.validation_sequences == 1);
    CHECK(p.stats.summary() ==
          "base data: 1 records, 21 tokens, 5 sequences (4 train, 1 validation), 20 trainable targets, "
          "0 tail tokens unused");

    prepared_data none = prepare_data(base_records({"abcdefghijklmnopqrst"}), tok, {4, 0.0, alpaca_prompt()});
    CHECK(none.train.size() == 5);
    CHECK(none.validation.empty());
    CHECK(none.validation.seq_len() == 4);

    std::string e = error_of([&] { prepare_data(base_records({"abc"}), tok, {2, 1.5, alpaca_prompt()}); });
    CHECK(contains(e, "validation fraction"));
}

TEST_CASE("prepare_data: instruction records split in file order, with counts") {
    strata::byte_tokenizer tok;
    std::vector<instruct_record> records;
    for (char c = 'a'; c <= 'j'; ++c) records.push_back({std::string(1, c), "", "ok"});
    records.push_back({"a very long instruction that cannot fit", "", "no"});
    data_options options{12, 0.2, tiny_prompt()};
    prepared_data p = prepare_data(instruct_records(records), tok, options);
    CHECK(p.stats.kind == record_kind::instruct);
    CHECK(p.stats.records == 11);
    CHECK(p.stats.dropped == 1);
    CHECK(p.stats.sequences == 10);
    REQUIRE(p.train.size() == 8);
    REQUIRE(p.validation.size() == 2);
    CHECK(p.train.inputs(0)[2] == 'a');
    CHECK(p.validation.inputs(0)[2] == 'i');
    CHECK(p.validation.inputs(1)[2] == 'j');
    CHECK(contains(p.stats.summary(), "instruct data: 11 records"));
    CHECK(contains(p.stats.summary(), "0 truncated, 1 dropped"));
}

TEST_CASE("token_dataset guards its shapes and slices") {
    CHECK(contains(error_of([] { token_dataset::packed({1, 2}, 2); }), "holds no window of seq_len + 1 = 3"));
    CHECK(contains(error_of([] { token_dataset::rows({1, 2, 3}, {1, 2, 3}, 2); }), "whole number of rows"));
    CHECK(contains(error_of([] { token_dataset::rows({1, 2}, {1}, 2); }), "whole number of rows"));
    CHECK(contains(error_of([] { token_dataset::rows({}, {}, 0); }), "seq_len is 0"));
    token_dataset d = token_dataset::rows({1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}, 2);
    token_dataset tail = d.slice(1, 2);
    REQUIRE(tail.size() == 2);
    CHECK(ids(tail.inputs(0)) == std::vector<token_id>{3, 4});
    CHECK(ids(tail.targets(1)) == std::vector<token_id>{11, 12});
    CHECK(tail.slice(1, 1).inputs(0)[0] == 5);
    CHECK(contains(error_of([&] { d.slice(2, 2); }), "slice [2, 4) is outside a dataset of 3 sequences"));
    CHECK(contains(error_of([&] { tail.targets(2); }), "sequence 2 is out of range for 2 sequences"));
}

}  // namespace tokenize_test
