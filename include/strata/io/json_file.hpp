// json_file: JSON files (checkpoint manifests, configs) read with errors that point at the line and
// column, and written atomically so a crash never leaves half a manifest behind.
#pragma once

#include <strata/core/error.hpp>        // strata::error
#include <strata/io/atomic_write.hpp>   // write_file_atomically, detail::open_or_throw, read_exactly

#include <nlohmann/json.hpp>  // nlohmann::json, nlohmann::ordered_json

#include <cstddef>      // std::size_t, std::byte
#include <cstdint>      // std::uint64_t, std::int64_t
#include <filesystem>   // std::filesystem::path
#include <limits>       // std::numeric_limits
#include <span>         // std::as_writable_bytes
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <type_traits>  // std::is_integral_v, std::is_same_v
#include <utility>      // std::in_range

#include <fcntl.h>  // O_RDONLY

namespace strata {

namespace detail {

inline std::string read_text_file(const std::filesystem::path& path, std::string_view what) {
    unique_fd fd = open_or_throw(path, O_RDONLY, "open " + std::string(what));
    const std::uint64_t size = file_size_of(fd.get(), path);
    std::string text(static_cast<std::size_t>(size), '\0');
    read_exactly(fd.get(), std::as_writable_bytes(std::span(text.data(), text.size())), 0, path);
    return text;
}

// nlohmann reports a byte offset (1-based, pointing at the offending character); people look for
// line and column.
inline std::string line_and_column(std::string_view text, std::size_t byte) {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
        if (text[i] == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// nlohmann's message repeats its own position ("[json.exception.parse_error.101] parse error at
// line 4, column 0: ..."), counted after the lexer has moved past the bad token; keep the reason.
inline std::string parse_error_reason(const std::string& message) {
    const std::size_t at = message.find("parse error");
    const std::size_t colon = at == std::string::npos ? at : message.find(": ", at);
    return colon == std::string::npos ? message : message.substr(colon + 2);
}

}  // namespace detail

// Parses `text` that came from `source` (a file name, used in errors only).
template <class Json = nlohmann::json>
Json parse_json_text(std::string_view text, const std::string& source) {
    try {
        return Json::parse(text);
    } catch (const typename Json::parse_error& e) {
        const std::string where = e.byte == 0 ? std::string("the start")
                                              : detail::line_and_column(text, static_cast<std::size_t>(e.byte));
        throw error("json: cannot parse '" + source + "' at " + where + ": " + detail::parse_error_reason(e.what()),
                    text.empty() ? "the file is empty; was it written completely?"
                                 : "the file is not valid JSON; fix it by hand or write it again");
    } catch (const typename Json::out_of_range& e) {  // a number too large for a double: 1e400
        throw error("json: cannot parse '" + source + "': " + detail::parse_error_reason(e.what()),
                    "the file is not valid JSON for strata; fix it by hand or write it again");
    }
}

template <class Json = nlohmann::json>
Json read_json_file(const std::filesystem::path& path) {
    return parse_json_text<Json>(detail::read_text_file(path, "JSON file"), path.string());
}

// The text write_json_file writes: the value indented, with a trailing newline (so its size is
// the file's, known before writing). `path` names the file in errors.
template <class Json>
std::string json_file_text(const Json& value, const std::filesystem::path& path = {}, int indent = 2) {
    std::string text;
    try {
        text = value.dump(indent);
    } catch (const typename Json::type_error& e) {
        throw error("json: cannot write '" + path.string() + "': " + e.what(),
                    "every string in the JSON value must be valid UTF-8");
    }
    text += '\n';
    return text;
}

// Written through write_file_atomically.
template <class Json>
void write_json_file(const std::filesystem::path& path, const Json& value, int indent = 2) {
    write_file_atomically(path, std::string_view(json_file_text(value, path, indent)));
}

// object[key] as T, with an error naming the source and the key instead of nlohmann's bare
// "type must be number, but is string".
template <class T, class Json>
T json_field(const Json& object, std::string_view key, std::string_view source) {
    if (!object.is_object())
        throw error("json: '" + std::string(source) + "' is a " + object.type_name() +
                        ", not an object, so it has no field '" + std::string(key) + "'",
                    "check that the file is the one that was meant");
    const auto it = object.find(key);
    if (it == object.end())
        throw error("json: '" + std::string(source) + "' has no field '" + std::string(key) + "'",
                    "the file is incomplete or from an incompatible version");
    // nlohmann converts any number to an integer type: 2.5 to 2, true to 1, and 1e30 or -1 as
    // undefined behavior or a wrap. An integer field takes a JSON integer that fits.
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        const bool fits = it->is_number_unsigned()
                              ? std::in_range<T>(it->template get<std::uint64_t>())
                              : it->is_number_integer() && std::in_range<T>(it->template get<std::int64_t>());
        if (!fits)
            throw error("json: field '" + std::string(key) + "' of '" + std::string(source) + "' is a " +
                            it->type_name() + " (" + it->dump() + "), not an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                            std::to_string(std::numeric_limits<T>::max()) + "]",
                        "the file is corrupt or from an incompatible version");
    }
    try {
        return it->template get<T>();
    } catch (const typename Json::exception& e) {
        throw error("json: field '" + std::string(key) + "' of '" + std::string(source) + "' is a " +
                        it->type_name() + " that does not convert: " + e.what(),
                    "the file is corrupt or from an incompatible version");
    }
}

}  // namespace strata
