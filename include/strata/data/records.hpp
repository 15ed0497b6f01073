// Reading training records from one file: plain text, base-style JSON ({"text": ...}),
// instruction-style JSON ({"instruction", "input", "output"}) or conversations ({"messages":
// [{"role", "content"}, ...]}), as JSONL or as a JSON array.
//
// Reading knows nothing of tokenizers: it turns a file into strings, and every problem it finds
// is reported with the file, the line (JSONL) or record number (JSON array) and the field.
#pragma once

#include <strata/core/error.hpp>         // strata::error
#include <strata/core/read_file.hpp>     // read_regular_file
#include <strata/text/chat_message.hpp>  // chat_message

#include <nlohmann/json.hpp>  // nlohmann::json, parse_error

#include <cstddef>      // std::size_t
#include <filesystem>   // std::filesystem::path
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <utility>      // std::move
#include <vector>       // std::vector

namespace strata::data {

// What the caller asks for (the --format flag). `jsonl`, `instruct` and `chat` all accept JSONL and
// a JSON array: the name says which keys the records carry, not how they are laid out.
enum class record_format { text, jsonl, instruct, chat, automatic };

// What a file turned out to hold once read.
enum class record_kind { base, instruct, chat };

// Every format, in the order a command line lists them (to_string gives each one's name).
inline constexpr record_format record_formats[] = {record_format::automatic, record_format::text, record_format::jsonl,
                                                   record_format::instruct, record_format::chat};

inline std::string_view to_string(record_format format) {
    switch (format) {
        case record_format::text: return "text";
        case record_format::jsonl: return "jsonl";
        case record_format::instruct: return "instruct";
        case record_format::chat: return "chat";
        case record_format::automatic: return "auto";
    }
    return "?";
}

inline std::string_view to_string(record_kind kind) {
    switch (kind) {
        case record_kind::base: return "base";
        case record_kind::instruct: return "instruct";
        case record_kind::chat: return "chat";
    }
    return "?";
}

inline record_format parse_record_format(std::string_view name) {
    if (name == "text") return record_format::text;
    if (name == "jsonl") return record_format::jsonl;
    if (name == "instruct") return record_format::instruct;
    if (name == "chat") return record_format::chat;
    if (name == "auto") return record_format::automatic;
    throw error("unknown data format '" + std::string(name) + "'",
                "use one of: text, jsonl, instruct, chat, auto");
}

struct instruct_record {
    std::string instruction;
    std::string input;  // empty when the record has no "input": the prompt then omits that section
    std::string output;
};

// A conversation: its messages in order, as the chat template will see them.
using chat_record = std::vector<chat_message>;

// The records of one file. Exactly one of `documents` (kind base), `examples` (kind instruct) and
// `conversations` (kind chat) is filled; a plain text file is a single document.
struct record_set {
    record_kind kind = record_kind::base;
    std::vector<std::string> documents;
    std::vector<instruct_record> examples;
    std::vector<chat_record> conversations;
    std::string source;  // the file name, for messages further down the pipeline

    std::size_t size() const {
        switch (kind) {
            case record_kind::base: return documents.size();
            case record_kind::instruct: return examples.size();
            case record_kind::chat: return conversations.size();
        }
        return 0;
    }
};

namespace detail {

inline bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A UTF-8 byte order mark says nothing about the content; editors on Windows like to add one.
inline std::string_view skip_bom(std::string_view content) {
    if (content.size() >= 3 && content.substr(0, 3) == "\xEF\xBB\xBF") content.remove_prefix(3);
    return content;
}

inline std::size_t first_non_space(std::string_view content) {
    std::size_t i = 0;
    while (i < content.size() && is_json_space(content[i])) ++i;
    return i;
}

inline std::size_t line_of(std::string_view content, std::size_t offset) {
    std::size_t line = 1;
    for (std::size_t i = 0; i < offset && i < content.size(); ++i) line += content[i] == '\n';
    return line;
}

// The reason part of a nlohmann parse error, without its "[json.exception...] parse error at
// line 1, column 9: " prefix: the prefix counts lines within what was parsed, which for JSONL is
// one line, so we put the file's own position in front instead.
inline std::string parse_error_reason(const nlohmann::json::exception& e) {
    std::string_view what = e.what();
    std::size_t column = what.find("column ");
    std::size_t colon = column == std::string_view::npos ? what.find(": ") : what.find(": ", column);
    if (colon == std::string_view::npos) return std::string(what);
    return std::string(what.substr(colon + 2));
}

// Returns the offset of the first byte that is not valid UTF-8, or npos.
inline std::size_t find_invalid_utf8(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
        auto c = static_cast<unsigned char>(s[i]);
        std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || i + len > s.size()) return i;
        for (std::size_t k = 1; k < len; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return i;
        // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either.
        auto c1 = static_cast<unsigned char>(len > 1 ? s[i + 1] : 0);
        if ((len == 2 && c < 0xC2) || (len == 3 && c == 0xE0 && c1 < 0xA0) ||
            (len == 3 && c == 0xED && c1 >= 0xA0) || (len == 4 && c == 0xF0 && c1 < 0x90) ||
            (len == 4 && (c > 0xF4 || (c == 0xF4 && c1 >= 0x90))))
            return i;
        i += len;
    }
    return std::string_view::npos;
}

// "data.jsonl line 3" or "data.json record 4": where a record came from, for messages.
struct record_place {
    std::string_view source;
    bool in_array;
    std::size_t number;  // 1-based line (JSONL) or record (array) number

    std::string str() const {
        return std::string(source) + (in_array ? " record " : " line ") + std::to_string(number);
    }
};

inline std::string keys_of(const nlohmann::json& object) {
    std::string keys;
    for (const auto& [key, value] : object.items()) keys += (keys.empty() ? "\"" : ", \"") + key + "\"";
    return keys.empty() ? "none" : keys;
}

// A required string field, or an error naming the record and the field.
inline std::string string_field(const nlohmann::json& object, const char* key, const record_place& place,
                                std::string_view hint_when_missing) {
    auto it = object.find(key);
    if (it == object.end())
        throw error(place.str() + ": record has no \"" + key + "\" field (its keys: " + keys_of(object) + ")",
                    std::string(hint_when_missing));
    if (!it->is_string())
        throw error(place.str() + ": field \"" + key + "\" is a " + it->type_name() + ", expected a string",
                    "quote the value, e.g. \"" + std::string(key) + "\": \"...\"");
    return it->get<std::string>();
}

inline record_kind kind_from_keys(const nlohmann::json& object, const record_place& place) {
    if (object.contains("instruction")) return record_kind::instruct;
    if (object.contains("messages")) return record_kind::chat;
    if (object.contains("text")) return record_kind::base;
    throw error(place.str() + ": cannot tell base from instruction or chat records: the first record has keys " +
                    keys_of(object),
                "base records carry \"text\"; instruction records carry \"instruction\", \"output\" and "
                "optionally \"input\"; chat records carry \"messages\"");
}

// {"messages": [{"role": "user", "content": "..."}, ...]}: roles and contents are strings.
inline chat_record chat_record_of(const nlohmann::json& value, const record_place& place) {
    const char* shape = "chat records look like {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}, "
                        "{\"role\": \"assistant\", \"content\": \"...\"}]}";
    const auto it = value.find("messages");
    if (it == value.end())
        throw error(place.str() + ": record has no \"messages\" field (its keys: " + keys_of(value) + ")", shape);
    if (!it->is_array() || it->empty())
        throw error(place.str() + ": \"messages\" is " + (it->is_array() ? "an empty list" : std::string("a ") + it->type_name()) +
                        ", expected a list of messages",
                    shape);
    chat_record out;
    for (std::size_t i = 0; i < it->size(); ++i) {
        const nlohmann::json& m = (*it)[i];
        const std::string where = place.str() + " message " + std::to_string(i + 1);
        if (!m.is_object()) throw error(where + " is a " + m.type_name() + ", expected an object", shape);
        std::string fields[2];
        for (int k = 0; k < 2; ++k) {
            const char* key = k == 0 ? "role" : "content";
            const auto f = m.find(key);
            if (f == m.end() || !f->is_string())
                throw error(where + ": \"" + key + "\" is " + (f == m.end() ? "missing" : std::string("a ") + f->type_name()) +
                                ", expected a string",
                            shape);
            fields[k] = f->get<std::string>();
        }
        out.push_back({std::move(fields[0]), std::move(fields[1])});
    }
    return out;
}

inline void add_record(record_set& out, const nlohmann::json& value, const record_place& place) {
    if (!value.is_object())
        throw error(place.str() + ": record is a JSON " + std::string(value.type_name()) + ", expected an object",
                    out.kind == record_kind::base ? "each record looks like {\"text\": \"...\"}"
                                                  : "each record looks like {\"instruction\": \"...\", "
                                                    "\"input\": \"...\", \"output\": \"...\"}");
    if (out.kind == record_kind::chat) {
        out.conversations.push_back(chat_record_of(value, place));
        return;
    }
    if (out.kind == record_kind::base) {
        bool looks_instruct = value.contains("instruction");
        out.documents.push_back(string_field(
            value, "text", place,
            looks_instruct ? "this looks like an instruction record; a file holds one kind of record (auto "
                             "decides from the first record) and the instruct format reads instruction records"
                           : "base records look like {\"text\": \"...\"}"));
        return;
    }
    const char* missing_hint = value.contains("text")
                                   ? "this looks like a base record; a file holds one kind of record (auto decides "
                                     "from the first record) and the jsonl format reads {\"text\": ...} records"
                                   : "instruction records need \"instruction\" and \"output\"; \"input\" is optional";
    instruct_record r;
    r.instruction = string_field(value, "instruction", place, missing_hint);
    // A missing or null input means "no input"; anything else must be a string.
    if (auto it = value.find("input"); it != value.end() && !it->is_null())
        r.input = string_field(value, "input", place, missing_hint);
    r.output = string_field(value, "output", place, missing_hint);
    out.examples.push_back(std::move(r));
}

inline void parse_json_array(record_set& out, std::string_view content, record_format format) {
    nlohmann::json array;
    try {
        array = nlohmann::json::parse(content);
    } catch (const nlohmann::json::parse_error& e) {
        std::size_t line = line_of(content, e.byte == 0 ? 0 : e.byte - 1);
        throw error(out.source + " line " + std::to_string(line) + ": malformed JSON: " + parse_error_reason(e),
                    "a JSON array file must hold one array of objects: [{...}, {...}]");
    } catch (const nlohmann::json::out_of_range& e) {  // a number past a double's range: 1e400
        throw error(out.source + ": malformed JSON: " + parse_error_reason(e), "write numbers a double can hold");
    }
    if (array.empty())
        throw error(out.source + ": the JSON array holds no records", "add at least one record");
    for (std::size_t i = 0; i < array.size(); ++i) {
        record_place place{out.source, true, i + 1};
        if (i == 0 && format == record_format::automatic && array[0].is_object())
            out.kind = kind_from_keys(array[0], place);
        add_record(out, array[i], place);
    }
}

inline void parse_jsonl(record_set& out, std::string_view content, record_format format) {
    std::size_t line_number = 0;
    bool first = true;
    for (std::size_t begin = 0; begin < content.size();) {
        std::size_t end = content.find('\n', begin);
        if (end == std::string_view::npos) end = content.size();
        std::string_view line = content.substr(begin, end - begin);
        begin = end + 1;
        ++line_number;
        if (first_non_space(line) == line.size()) continue;  // blank lines separate nothing
        nlohmann::json value;
        try {
            value = nlohmann::json::parse(line);
        } catch (const nlohmann::json::parse_error& e) {
            throw error(out.source + " line " + std::to_string(line_number) + ", column " + std::to_string(e.byte) +
                            ": malformed JSON: " + parse_error_reason(e),
                        "JSONL holds one complete JSON object per line; for pretty-printed JSON use an array "
                        "[{...}, {...}]");
        } catch (const nlohmann::json::out_of_range& e) {  // a number past a double's range: 1e400
            throw error(out.source + " line " + std::to_string(line_number) + ": malformed JSON: " + parse_error_reason(e),
                        "write numbers a double can hold");
        }
        record_place place{out.source, false, line_number};
        if (first && format == record_format::automatic && value.is_object()) out.kind = kind_from_keys(value, place);
        first = false;
        add_record(out, value, place);
    }
    if (first) throw error(out.source + ": no records found", "write one JSON object per line");
}

}  // namespace detail

// Parses file content already in memory; `source` names it in messages.
inline record_set parse_records(std::string_view content, record_format format, std::string source) {
    record_set out;
    out.source = std::move(source);
    if (content.empty()) throw error(out.source + " is empty", "point the data path at a file with training text");
    content = detail::skip_bom(content);
    std::size_t start = detail::first_non_space(content);
    if (start == content.size())
        throw error(out.source + " holds only whitespace", "point the data path at a file with training text");

    char first = content[start];
    bool looks_json = first == '[' || first == '{';
    if (format == record_format::text || (format == record_format::automatic && !looks_json)) {
        if (std::size_t bad = detail::find_invalid_utf8(content); bad != std::string_view::npos)
            throw error(out.source + " line " + std::to_string(detail::line_of(content, bad)) + " (byte " +
                            std::to_string(bad) + "): invalid UTF-8",
                        "convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8");
        out.kind = record_kind::base;
        out.documents.emplace_back(content);
        return out;
    }
    if (!looks_json)
        throw error(out.source + " line " + std::to_string(detail::line_of(content, start)) + ": expected JSON for the format " +
                        std::string(to_string(format)) + " but the file starts with '" + std::string(1, first) + "'",
                    "use the text format for plain text, or auto", {"format"});
    out.kind = format == record_format::instruct ? record_kind::instruct
               : format == record_format::chat   ? record_kind::chat
                                                 : record_kind::base;
    if (first == '[')
        detail::parse_json_array(out, content, format);
    else
        detail::parse_jsonl(out, content, format);
    return out;
}

// Reads one regular file (not a directory, device or pipe) whole and parses it.
inline record_set read_records(const std::filesystem::path& path, record_format format = record_format::automatic) {
    return parse_records(read_regular_file(path, "data file", "pass one data file, not a directory"), format, path.string());
}

}  // namespace strata::data
