// Chat data (strata/data/chat.hpp, the chat rows of tokenize.hpp): chat records read from JSONL,
// conversations rendered with real templates and tokenized with the hf tokenizer fixtures, where
// exactly the assistant turns (content and end-of-turn) are trained; instruction records through
// a chat template; the refusal of a template that is not prefix-stable; the masks against
// transformers' return_assistant_tokens_mask (expected.json, when present); and the BOS that an
// hf tokenizer's post-processor puts before each document of text data.
#include <strata/data/tokenize.hpp>        // prepare_data, build_chat_rows, tokenize_documents
#include <strata/text/byte_tokenizer.hpp>  // byte_tokenizer
#include <strata/text/hf_tokenizer.hpp>    // hf_tokenizer

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE

#include "support/chat_fixtures.hpp"  // chat_template_fixture, fixtures_dir, expected_renderings
#include <nlohmann/json.hpp>  // nlohmann::json

#include <algorithm>   // std::count
#include <filesystem>  // std::filesystem
#include <map>         // std::map
#include <string>      // std::string
#include <vector>      // std::vector

namespace chat_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata::data;
using strata::chat_message;
using strata::chat_template;
using strata::hf_tokenizer;
using strata::token_id;

using strata::test::chat_template_fixture;
using strata::test::fixtures_dir;

namespace {

const hf_tokenizer& tokenizer(const std::string& kind) {
    static std::map<std::string, hf_tokenizer> loaded;
    auto it = loaded.find(kind);
    if (it == loaded.end()) it = loaded.emplace(kind, hf_tokenizer::load(fixtures_dir() / "hf_tokenizers" / kind)).first;
    return it->second;
}

record_set chat_records(std::vector<chat_record> conversations) {
    record_set r;
    r.kind = record_kind::chat;
    r.conversations = std::move(conversations);
    r.source = "mem";
    return r;
}

// The trained stretches of each row, decoded: what the loss sees, one string per stretch.
std::vector<std::string> trained_texts(const token_dataset& d, const hf_tokenizer& tok) {
    std::vector<std::string> out;
    for (std::size_t row = 0; row < d.size(); ++row) {
        std::vector<token_id> run;
        const auto targets = d.targets(row);
        for (std::size_t t = 0; t <= targets.size(); ++t) {
            if (t < targets.size() && targets[t] != ignore_index) {
                run.push_back(targets[t]);
            } else if (!run.empty()) {
                out.push_back(tok.decode(run));
                run.clear();
            }
        }
    }
    return out;
}

std::string error_of(auto&& f) {
    try {
        f();
    } catch (const strata::error& e) {
        return e.what();
    }
    return "no error";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const chat_record two_turns = {
    {"system", "You are a helpful assistant."},
    {"user", "What is 2 + 2?"},
    {"assistant", "2 + 2 = 4."},
    {"user", "And 3 + 3?"},
    {"assistant", "6."},
};

}  // namespace

TEST_CASE("chat records: JSONL and JSON arrays of {messages}, auto-detected; errors name the message") {
    const std::string jsonl =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n";
    for (record_format f : {record_format::chat, record_format::automatic}) {
        const record_set r = parse_records(jsonl, f, "c.jsonl");
        CHECK(r.kind == record_kind::chat);
        REQUIRE(r.size() == 2);
        CHECK(r.conversations[0][1].role == "assistant");
        CHECK(r.conversations[0][1].content == "yo");
    }
    CHECK(parse_records("[{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}]", record_format::automatic, "a").kind ==
          record_kind::chat);
    CHECK(parse_record_format("chat") == record_format::chat);
    CHECK(contains(error_of([] { parse_records("{\"messages\": [{\"role\": \"user\"}]}", record_format::chat, "c.jsonl"); }),
                   "c.jsonl line 1 message 1: \"content\" is missing, expected a string"));
    CHECK(contains(error_of([] { parse_records("{\"messages\": []}", record_format::chat, "c.jsonl"); }),
                   "\"messages\" is an empty list"));
    CHECK(contains(error_of([] { parse_records("{\"text\": \"t\"}", record_format::chat, "c.jsonl"); }),
                   "record has no \"messages\" field"));
}

TEST_CASE("chat rows, Llama 3.1: only the assistant turns and their <|eot_id|> are trained") {
    const hf_tokenizer& tok = tokenizer("llama3");
    const chat_template t = chat_template_fixture("llama3.1.jinja", "<|begin_of_text|>", "<|eot_id|>");
    data_stats stats;
    const token_dataset d = build_chat_rows(chat_records({two_turns}), tok, 256, t, stats);
    REQUIRE(d.size() == 1);
    CHECK(trained_texts(d, tok) == std::vector<std::string>{"2 + 2 = 4.<|eot_id|>", "6.<|eot_id|>"});
    // one BOS, the template's: the post-processor's is not added again
    const std::vector<token_id> ids = tok.encode(t.render(two_turns, false));
    CHECK(d.inputs(0)[0] == *tok.bos_id());
    CHECK(d.inputs(0)[1] != *tok.bos_id());
    CHECK(stats.tokens == ids.size());
    CHECK(stats.chat_template);
    CHECK(stats.trainable_targets == tok.encode("2 + 2 = 4.<|eot_id|>6.<|eot_id|>").size());
    // the input row is the rendering, then end-of-text padding
    CHECK(std::vector<token_id>(d.inputs(0).begin(), d.inputs(0).begin() + static_cast<std::ptrdiff_t>(ids.size())) == ids);
    CHECK(d.inputs(0)[255] == tok.eot_id());
}

TEST_CASE("chat rows, Qwen2.5 and Llama 2: the template's end of turn is trained with the content") {
    const data_stats none;
    data_stats s1 = none, s2 = none;
    const token_dataset q = build_chat_rows(chat_records({two_turns}), tokenizer("qwen2"), 256,
                                            chat_template_fixture("qwen2.5.jinja", "", "<|im_end|>"), s1);
    CHECK(trained_texts(q, tokenizer("qwen2")) == std::vector<std::string>{"2 + 2 = 4.<|im_end|>\n", "6.<|im_end|>\n"});
    const token_dataset l = build_chat_rows(chat_records({two_turns}), tokenizer("llama2"), 256,
                                            chat_template_fixture("llama2.jinja", "<s>", "</s>"), s2);
    // Llama 2's answer follows "[/INST]" with a space, which the tokenizer joins to the first word
    // ("▁2"; decoding a run drops its first "▁")
    CHECK(trained_texts(l, tokenizer("llama2")) == std::vector<std::string>{"2 + 2 = 4. </s>", "6. </s>"});
}

TEST_CASE("chat rows: instruction records through a chat template (user: instruction, blank line, input)") {
    const hf_tokenizer& tok = tokenizer("qwen2");
    record_set r;
    r.kind = record_kind::instruct;
    r.examples = {{"Translate.", "chat", "Plaudern."}, {"Say hi.", "", "Hi!"}};
    r.source = "mem";
    CHECK(conversation_of(r.examples[0])[0].content == "Translate.\n\nchat");
    CHECK(conversation_of(r.examples[1])[0].content == "Say hi.");
    data_options o{.seq_len = 64, .val_fraction = 0.0};
    o.chat = chat_template_fixture("qwen2.5.jinja", "", "<|im_end|>");
    const prepared_data p = prepare_data(r, tok, o);
    CHECK(trained_texts(p.train, tok) == std::vector<std::string>{"Plaudern.<|im_end|>\n", "Hi!<|im_end|>\n"});
    CHECK(contains(p.stats.summary(), "instruct data (chat template): 2 records"));
    // without a template, the Alpaca prompt as before
    const prepared_data alpaca = prepare_data(r, tok, {.seq_len = 128, .val_fraction = 0.0});
    CHECK(!alpaca.stats.chat_template);
    CHECK(trained_texts(alpaca.train, tok)[0] == "Plaudern.<|endoftext|>");
}

TEST_CASE("chat rows: truncation, drops, and chat records without a template") {
    const hf_tokenizer& tok = tokenizer("qwen2");
    const chat_template t = chat_template_fixture("qwen2.5.jinja", "", "<|im_end|>");
    const std::size_t prompt = tok.encode(t.render(std::span(two_turns).first(2), true)).size();
    data_stats cut;
    build_chat_rows(chat_records({two_turns}), tok, prompt, t, cut);
    CHECK(cut.truncated == 1);
    CHECK(cut.trainable_targets == 1);
    data_stats dropped;
    CHECK(contains(error_of([&] { build_chat_rows(chat_records({two_turns}), tok, prompt - 1, t, dropped); }),
                   "mem: all 1 chat records were dropped"));
    CHECK(dropped.dropped == 1);
    CHECK(contains(error_of([&] { prepare_data(chat_records({two_turns}), tok, {.seq_len = 64}); }),
                   "holds chat records ({\"messages\": [...]}) but no chat template was given"));
}

TEST_CASE("chat rows: a template that is not prefix-stable is refused (Mistral v0.3 with a system message)") {
    const hf_tokenizer& tok = tokenizer("mistral");
    const chat_template t = chat_template_fixture("mistral-v0.3.jinja", "<s>", "</s>");
    data_stats stats;
    const std::string e = error_of([&] { build_chat_rows(chat_records({two_turns}), tok, 256, t, stats); });
    CHECK(contains(e, "mem record 1: the chat template mistral-v0.3.jinja is not prefix-stable"));
    CHECK(contains(e, "drop the system message"));
    // without the system message it is stable
    const chat_record no_system(two_turns.begin() + 1, two_turns.end());
    const token_dataset d = build_chat_rows(chat_records({no_system}), tok, 256, t, stats);
    CHECK(trained_texts(d, tok) == std::vector<std::string>{"2 + 2 = 4.</s>", "6.</s>"});
    // the template's own refusal names the record
    const chat_record two_users = {{"user", "a"}, {"user", "b"}, {"assistant", "c"}};
    const std::string alternate = error_of([&] { build_chat_rows(chat_records({two_users}), tok, 256, t, stats); });
    CHECK(contains(alternate, "mem record 1: mistral-v0.3.jinja 18:17: the template raised an exception: After the "
                              "optional system message, conversation roles must alternate"));
    CHECK(contains(alternate, "(hint: the conversation does not have the form this chat template accepts)"));
}

TEST_CASE("chat rows: the trained tokens against transformers' assistant masks (expected.json)") {
    const auto doc = strata::test::expected_renderings();
    if (!doc) return;
    std::size_t compared = 0;
    for (const nlohmann::json& c : doc->at("cases")) {
        if (!c.contains("assistant_masks") || c["assistant_masks"].is_null() || c.at("add_generation_prompt")) continue;
        const auto [t, messages, generation_prompt, label] = strata::test::expected_case_of(c);
        INFO(label);
        const conversation_tokens got = tokenize_conversation(render_for_training(t, messages, "expected.json"), tokenizer(c.at("tokenizer")));
        CHECK(got.ids == c.at("ids").get<std::vector<token_id>>());
        std::vector<int> mask(got.trained.begin(), got.trained.end());
        CHECK(mask == c.at("assistant_masks").get<std::vector<int>>());
        ++compared;
    }
    MESSAGE(compared, " assistant masks compared with transformers ", doc->value("transformers", std::string("?")));
    CHECK(compared > 0);
}

TEST_CASE("text data: each document starts with the BOS an hf tokenizer's post-processor adds") {
    record_set r;
    r.kind = record_kind::base;
    r.documents = {"first doc", "second"};
    r.source = "mem";
    const hf_tokenizer& llama = tokenizer("llama3");
    std::vector<token_id> expected;
    for (const std::string& doc : r.documents) {
        const std::vector<token_id> ids = llama.encode_with_special_tokens(doc);  // HF's tokenizer(doc)
        CHECK(ids.front() == *llama.bos_id());
        expected.insert(expected.end(), ids.begin(), ids.end());
        expected.push_back(llama.eot_id());
    }
    CHECK(tokenize_documents(r, llama) == expected);
    // Qwen2 adds no BOS; bytes have no post-processor
    const hf_tokenizer& qwen = tokenizer("qwen2");
    const std::vector<token_id> q = tokenize_documents(r, qwen);
    CHECK(q.size() == qwen.encode("first doc").size() + qwen.encode("second").size() + 2);
    CHECK(tokenize_documents(r, strata::byte_tokenizer{}).size() == 9 + 6 + 2);
}

}  // namespace chat_test
