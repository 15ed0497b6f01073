// chat_template on the chat templates of real models (tests/fixtures/chat_templates/*.jinja: the
// chat_template strings of the Llama 3.1, Qwen2.5, Mistral-7B-Instruct-v0.3 and Llama-2-chat
// tokenizer_config.json files): a system + user + assistant + user conversation rendered with and
// without the generation prompt, to the exact strings these public formats give; the special
// tokens of the rendering tokenize to their ids. Then, when tools/make_chat_template_fixtures.py
// has written expected.json, every case against transformers' apply_chat_template (text and ids),
// skipped visibly while it is absent. Loading tokenizer_config.json, and refusals.
#include <strata/text/chat_template.hpp>  // strata::chat_template
#include <strata/text/hf_tokenizer.hpp>   // strata::hf_tokenizer

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include "support/chat_fixtures.hpp"  // chat_template_fixture, fixtures_dir, expected_renderings
#include <nlohmann/json.hpp>  // nlohmann::json

#include <algorithm>   // std::count
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ofstream
#include <map>         // std::map
#include <string>      // std::string
#include <vector>      // std::vector

namespace chat_template_test {  // this file's names: an area's files compile as one unit (unity build)

namespace fs = std::filesystem;
using strata::chat_message;
using strata::chat_template;

using strata::test::chat_template_fixture;
using strata::test::fixtures_dir;

namespace {

const std::vector<chat_message> conversation = {
    {"system", "You are a helpful assistant."},
    {"user", "What is 2 + 2?"},
    {"assistant", "2 + 2 = 4."},
    {"user", "And 3 + 3?"},
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("chat template: Llama 3.1") {
    const chat_template t = chat_template_fixture("llama3.1.jinja", "<|begin_of_text|>", "<|eot_id|>");
    const std::string expected =
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
        "You are a helpful assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2 + 2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n2 + 2 = 4.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nAnd 3 + 3?<|eot_id|>";
    CHECK(t.render(conversation, false) == expected);
    CHECK(t.render(conversation, true) == expected + "<|start_header_id|>assistant<|end_header_id|>\n\n");

    // the special tokens become their ids, and the one BOS is the template's
    const auto tok = strata::hf_tokenizer::load(fixtures_dir() / "hf_tokenizers" / "llama3");
    const std::vector<strata::token_id> ids = tok.encode(expected);
    REQUIRE(ids.size() > 10);
    CHECK(ids[0] == *tok.bos_id());
    CHECK(ids[1] == *tok.token_id_of("<|start_header_id|>"));
    CHECK(std::count(ids.begin(), ids.end(), *tok.bos_id()) == 1);
    CHECK(std::count(ids.begin(), ids.end(), *tok.token_id_of("<|eot_id|>")) == 4);
    CHECK(tok.decode(ids) == expected);
}

TEST_CASE("chat template: Qwen2.5") {
    const chat_template t = chat_template_fixture("qwen2.5.jinja", "", "<|im_end|>");
    const std::string expected =
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"
        "<|im_start|>assistant\n2 + 2 = 4.<|im_end|>\n"
        "<|im_start|>user\nAnd 3 + 3?<|im_end|>\n";
    CHECK(t.render(conversation, false) == expected);
    CHECK(t.render(conversation, true) == expected + "<|im_start|>assistant\n");
    // without a system message, Qwen's own
    CHECK(t.render(std::vector<chat_message>{{"user", "Hi"}}, false) ==
          "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
          "<|im_start|>user\nHi<|im_end|>\n");

    const auto tok = strata::hf_tokenizer::load(fixtures_dir() / "hf_tokenizers" / "qwen2");
    const std::vector<strata::token_id> ids = tok.encode(expected);
    CHECK(ids[0] == *tok.token_id_of("<|im_start|>"));
    CHECK(std::count(ids.begin(), ids.end(), *tok.token_id_of("<|im_end|>")) == 4);
}

TEST_CASE("chat template: Llama 2 chat") {
    const chat_template t = chat_template_fixture("llama2.jinja", "<s>", "</s>");
    const std::string expected =
        "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nWhat is 2 + 2? [/INST] 2 + 2 = 4. </s>"
        "<s>[INST] And 3 + 3? [/INST]";
    CHECK(t.render(conversation, false) == expected);
    CHECK(t.render(conversation, true) == expected);  // the template has no generation prompt
    const std::string e = [&] {
        try {
            t.render(std::vector<chat_message>{{"user", "a"}, {"user", "b"}}, false);
        } catch (const strata::error& x) {
            return std::string(x.what());
        }
        return std::string("no error");
    }();
    CHECK(contains(e, "the template raised an exception: Conversation roles must alternate user/assistant/user/assistant/..."));

    const auto tok = strata::hf_tokenizer::load(fixtures_dir() / "hf_tokenizers" / "llama2");
    const std::vector<strata::token_id> ids = tok.encode(expected);
    CHECK(ids[0] == *tok.bos_id());
    CHECK(std::count(ids.begin(), ids.end(), *tok.bos_id()) == 2);
    CHECK(std::count(ids.begin(), ids.end(), *tok.token_id_of("</s>")) == 1);
}

TEST_CASE("chat template: Mistral 7B Instruct v0.3 (the system message joins the last user turn)") {
    const chat_template t = chat_template_fixture("mistral-v0.3.jinja", "<s>", "</s>");
    const std::string expected =
        "<s>[INST] What is 2 + 2?[/INST] 2 + 2 = 4.</s>[INST] You are a helpful assistant.\n\nAnd 3 + 3?[/INST]";
    CHECK(t.render(conversation, false) == expected);
    CHECK(t.render(conversation, true) == expected);
    CHECK(t.render(std::vector<chat_message>{{"user", "a"}, {"assistant", " b "}}, false) == "<s>[INST] a[/INST] b</s>");
}

TEST_CASE("chat template: against transformers' apply_chat_template (expected.json)") {
    const auto doc = strata::test::expected_renderings();
    if (!doc) return;
    std::map<std::string, strata::hf_tokenizer> tokenizers;
    std::size_t compared = 0;
    for (const nlohmann::json& c : doc->at("cases")) {
        const auto [t, messages, generation_prompt, label] = strata::test::expected_case_of(c);
        INFO(label);
        if (c.contains("error")) {
            CHECK_THROWS_AS(t.render(messages, generation_prompt), strata::error);
            continue;
        }
        const std::string text = t.render(messages, generation_prompt);
        CHECK(text == c.at("text").get<std::string>());
        const std::string kind = c.at("tokenizer");
        auto it = tokenizers.find(kind);
        if (it == tokenizers.end()) it = tokenizers.emplace(kind, strata::hf_tokenizer::load(fixtures_dir() / "hf_tokenizers" / kind)).first;
        CHECK(it->second.encode(text) == c.at("ids").get<std::vector<strata::token_id>>());
        ++compared;
    }
    MESSAGE(compared, " renderings compared with transformers ", doc->value("transformers", std::string("?")));
    CHECK(compared > 0);
}

TEST_CASE("chat template: tokenizer_config.json, chat_template.jinja and refusals") {
    const fs::path dir = fs::temp_directory_path() / "strata_chat_template_test";
    fs::remove_all(dir);
    fs::create_directories(dir);
    CHECK(!chat_template::find_in(dir));  // no template: nothing
    nlohmann::json config = {{"bos_token", {{"content", "<s>"}, {"__type", "AddedToken"}}},
                             {"eos_token", "</s>"},
                             {"chat_template", "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"}};
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
    const auto found = chat_template::find_in(dir);
    REQUIRE(found);
    CHECK(found->bos_token() == "<s>");
    CHECK(found->render(std::vector<chat_message>{{"user", "x"}}, false) == "<s>x</s>");

    // a list of named templates: "default"
    config["chat_template"] = nlohmann::json::array({{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}});
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
    CHECK(chat_template::load(dir / "tokenizer_config.json").render({}, false) == "D");

    // chat_template.jinja wins, with the special tokens of tokenizer_config.json
    std::ofstream(dir / "chat_template.jinja") << "[{{ eos_token }}]\n";
    CHECK(chat_template::find_in(dir)->render({}, false) == "[</s>]");

    const auto error_of = [](auto&& f) -> std::string {
        try {
            f();
        } catch (const strata::error& e) {
            return e.what();
        }
        return "no error";
    };
    config.erase("chat_template");
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
    CHECK(contains(error_of([&] { chat_template::load(dir / "tokenizer_config.json"); }), "has no chat_template"));
    std::ofstream(dir / "bad.jinja") << "line\n{% for m in messages %}{{ m | bogus }}{% endfor %}";
    CHECK(contains(error_of([&] { chat_template::load(dir / "bad.jinja"); }), "bad.jinja 2:31: unknown filter 'bogus'"));
    fs::remove_all(dir);
}

}  // namespace chat_template_test
