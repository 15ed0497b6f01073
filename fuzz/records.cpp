// Training records (strata/data/records.hpp) and the instruction renderer (strata/data/prompt.hpp).
// For every --format, parse_records either returns a consistent record_set or throws
// strata::error:
// - at least one record, of exactly the kind it says (documents, examples or conversations);
// - every string valid UTF-8 (the tokenizers and the JSON writers downstream rely on it);
// - plain text is the file itself, less a byte order mark.
// Every instruction record renders through the Alpaca template as a reference renderer does it.
// The input is also tried as a template: validate() accepts it or throws strata::error, and
// render() substitutes each placeholder once, never re-scanning what it put in.
#include "fuzz_check.hpp"

#include <strata/data/prompt.hpp>   // prompt_template, alpaca_prompt
#include <strata/data/records.hpp>  // parse_records, record_format, record_set

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint8_t
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace {

using strata::data::record_format;
using strata::data::record_kind;

bool valid_utf8(std::string_view s) { return strata::data::detail::find_invalid_utf8(s) == std::string_view::npos; }

// Placeholders found by searching for the earliest of the two, not by walking byte by byte.
std::string reference_render(const strata::data::prompt_template& t, std::string_view instruction,
                             std::string_view input) {
    std::string_view rest = input.empty() ? t.without_input : t.with_input;
    std::string out;
    while (true) {
        const std::size_t i = rest.find("{instruction}"), n = rest.find("{input}");
        if (i == std::string_view::npos && n == std::string_view::npos) return out + std::string(rest);
        const bool take_instruction = n == std::string_view::npos || (i != std::string_view::npos && i < n);
        const std::size_t at = take_instruction ? i : n;
        out += rest.substr(0, at);
        out += take_instruction ? instruction : input;
        rest.remove_prefix(at + (take_instruction ? 13 : 7));
    }
}

void check_records(std::string_view content, record_format format) {
    strata::data::record_set set;
    if (!strata::fuzz::parses([&] { set = strata::data::parse_records(content, format, "fuzz.jsonl"); })) return;
    FUZZ_CHECK(set.size() >= 1);
    FUZZ_CHECK(set.source == "fuzz.jsonl");
    if (set.kind == record_kind::base) {
        FUZZ_CHECK(set.examples.empty() && set.conversations.empty() && !set.documents.empty());
        for (const std::string& d : set.documents) FUZZ_CHECK(valid_utf8(d));
    } else if (set.kind == record_kind::instruct) {
        FUZZ_CHECK(set.documents.empty() && set.conversations.empty() && !set.examples.empty());
        FUZZ_CHECK(format == record_format::instruct || format == record_format::automatic);
    } else {
        FUZZ_CHECK(set.documents.empty() && set.examples.empty() && !set.conversations.empty());
        FUZZ_CHECK(format == record_format::chat || format == record_format::automatic);
        for (const strata::data::chat_record& c : set.conversations) {
            FUZZ_CHECK(!c.empty());
            for (const strata::chat_message& m : c) FUZZ_CHECK(valid_utf8(m.role) && valid_utf8(m.content));
        }
    }
    if (format == record_format::text) {
        std::string_view body = content;
        if (body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);
        FUZZ_CHECK(set.kind == record_kind::base && set.documents.size() == 1 && set.documents[0] == body);
    }
    const strata::data::prompt_template alpaca = strata::data::alpaca_prompt();
    for (const strata::data::instruct_record& r : set.examples) {
        FUZZ_CHECK(valid_utf8(r.instruction) && valid_utf8(r.input) && valid_utf8(r.output));
        const std::string prompt = alpaca.render(r.instruction, r.input);
        FUZZ_CHECK(prompt == reference_render(alpaca, r.instruction, r.input));
        FUZZ_CHECK(prompt.find(r.instruction) != std::string::npos);
        FUZZ_CHECK(prompt.find(r.input) != std::string::npos);
    }
}

void check_template(std::string_view text) {
    // with_input is the input; without_input is the part before its first "{input}".
    const strata::data::prompt_template t{std::string(text), std::string(text.substr(0, text.find("{input}")))};
    const bool valid = strata::fuzz::parses([&] { t.validate(); });
    for (auto [instruction, input] : {std::pair<std::string_view, std::string_view>{"do {input} now", "{instruction}"},
                                      {"{instruction}", ""},
                                      {text, text}}) {
        const std::string out = t.render(instruction, input);
        FUZZ_CHECK(out == reference_render(t, instruction, input));
        if (valid) FUZZ_CHECK(out.find(instruction) != std::string::npos);
        if (valid && !input.empty()) FUZZ_CHECK(out.find(input) != std::string::npos);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view content(reinterpret_cast<const char*>(data), size);
    for (record_format format :
         {record_format::text, record_format::jsonl, record_format::instruct, record_format::chat, record_format::automatic})
        check_records(content, format);
    check_template(content);
    return 0;
}
