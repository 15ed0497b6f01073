// The chat template fixtures (tests/fixtures/chat_templates/*.jinja: the chat_template strings of
// published models) for the text and data tests that render them.
#pragma once

#include <strata/text/chat_template.hpp>  // strata::chat_template

#include <doctest/doctest.h>  // REQUIRE_MESSAGE

#include "support/skip.hpp"  // strata::test::skip
#include <nlohmann/json.hpp>  // nlohmann::json

#include <filesystem>  // std::filesystem::path
#include <fstream>     // std::ifstream
#include <iterator>    // std::istreambuf_iterator
#include <optional>    // std::optional
#include <string>      // std::string
#include <vector>      // std::vector

namespace strata::test {

inline std::filesystem::path fixtures_dir() {
#ifdef STRATA_SOURCE_DIR
    return std::filesystem::path(STRATA_SOURCE_DIR) / "tests" / "fixtures";
#else
    return std::filesystem::path(__FILE__).parent_path().parent_path() / "fixtures";
#endif
}

inline std::string read_text_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot read ", path.string());
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// tests/fixtures/chat_templates/<file> with the special tokens its tokenizer_config.json names.
inline chat_template chat_template_fixture(const std::string& file, const std::string& bos, const std::string& eos) {
    return chat_template::from_source(read_text_file(fixtures_dir() / "chat_templates" / file), bos, eos, file);
}

// tools/make_chat_template_fixtures.py's renderings by transformers; absent, the test is skipped
// (saying so) and this is empty.
inline std::optional<nlohmann::json> expected_renderings() {
    const std::filesystem::path file = fixtures_dir() / "chat_templates" / "expected.json";
    if (std::filesystem::exists(file)) return nlohmann::json::parse(read_text_file(file));
    skip(file.string() + " is absent: run tools/make_chat_template_fixtures.py (transformers 5.x, jinja2) to compare with transformers");
    return std::nullopt;
}

// One case of expected.json: the template with its special tokens, and the conversation.
struct expected_chat_case {
    chat_template chat;
    std::vector<chat_message> messages;
    bool add_generation_prompt;
    std::string label;  // "llama3.1.jinja user_assistant add_generation_prompt=1", for messages
};

inline expected_chat_case expected_case_of(const nlohmann::json& c) {
    const auto special = [&](const char* key) { return c[key].is_string() ? c[key].get<std::string>() : std::string(); };
    const std::string name = c.at("template");
    expected_chat_case out{chat_template_fixture(name, special("bos_token"), special("eos_token")), {},
                           c.at("add_generation_prompt").get<bool>(), {}};
    for (const auto& m : c.at("messages")) out.messages.push_back({m.at("role"), m.at("content")});
    out.label = name + " " + c.at("conversation").get<std::string>() + " add_generation_prompt=" +
                std::to_string(out.add_generation_prompt);
    return out;
}

}  // namespace strata::test
