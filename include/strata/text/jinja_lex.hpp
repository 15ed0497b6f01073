// The Jinja subset of chat templates, first step: the lexer, from template source to tokens (text
// between tags, the tags' delimiters, names, literals, operators), applying the whitespace rules
// that transformers' apply_chat_template configures: trim_blocks and lstrip_blocks on, and the `-`
// markers (`{%-`, `-%}`, `{{-`, `-}}`, `{#-`, `-#}`) stripping all whitespace on their side.
// text/jinja_parse.hpp builds the tree from the tokens; text/jinja.hpp lists the subset.
#pragma once

#include <strata/core/error.hpp>               // strata::error
#include <strata/text/gpt2_pretokenizer.hpp>  // unicode::encode_utf8

#include <nlohmann/json.hpp>  // nlohmann::json (numbers)

#include <cctype>       // std::isxdigit
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <utility>      // std::move
#include <vector>       // std::vector

namespace strata::jinja {

using json = nlohmann::json;

// "3:14" for an offset into the source: where a message points the reader.
inline std::string line_column(std::string_view source, std::size_t offset) {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < offset && i < source.size(); ++i) {
        if (source[i] == '\n') {
            ++line;
            column = 1;
        } else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80) {
            ++column;
        }
    }
    return std::to_string(line) + ":" + std::to_string(column);
}

struct token {
    enum class kind { text, output_begin, output_end, block_begin, block_end, name, string, integer, number, op, end };
    kind type;
    std::size_t pos;
    std::string text;  // text, name, op, or a string literal's value
    json number;       // integer, number
};

namespace detail {

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
inline bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

class lexer {
public:
    lexer(std::string_view source, std::string_view name) : m_src(source), m_name(name) {}

    std::vector<token> run() {
        bool line_starting = true;  // the text ahead starts a line (lstrip_blocks looks)
        bool strip_next = false;    // the tag before ended in `-`: strip the text's leading whitespace
        while (m_at < m_src.size()) {
            const std::size_t open = find_open(m_at);
            std::string text(m_src.substr(m_at, open - m_at));
            const std::size_t text_pos = m_at;
            if (strip_next) {
                std::size_t k = 0;
                while (k < text.size() && is_space(text[k])) ++k;
                text.erase(0, k);
            }
            if (open < m_src.size()) strip_before_tag(text, open, line_starting);
            if (!text.empty()) m_out.push_back({token::kind::text, text_pos, std::move(text), {}});
            if (open == m_src.size()) break;
            m_at = open;
            const std::size_t tag_end = lex_tag(strip_next);
            line_starting = tag_end > 0 && m_src[tag_end - 1] == '\n';
        }
        m_out.push_back({token::kind::end, m_src.size(), {}, {}});
        return std::move(m_out);
    }

private:
    [[noreturn]] void fail(std::size_t pos, const std::string& what, const std::string& hint) const {
        throw error(std::string(m_name) + " " + line_column(m_src, pos) + ": " + what, hint);
    }

    std::size_t find_open(std::size_t from) const {
        for (std::size_t i = from; i + 1 < m_src.size(); ++i)
            if (m_src[i] == '{' && (m_src[i + 1] == '{' || m_src[i + 1] == '%' || m_src[i + 1] == '#')) return i;
        return m_src.size();
    }

    // `{%-`: all whitespace before goes; `{%` and `{#` (lstrip_blocks): spaces and tabs between
    // the line's start and the tag go.
    void strip_before_tag(std::string& text, std::size_t open, bool line_starting) const {
        const char kind = m_src[open + 1];
        const char marker = open + 2 < m_src.size() ? m_src[open + 2] : '\0';
        if (marker == '-') {
            while (!text.empty() && is_space(text.back())) text.pop_back();
            return;
        }
        if (kind == '{' || marker == '+') return;
        const std::size_t line_start = text.rfind('\n');
        const std::size_t from = line_start == std::string::npos ? 0 : line_start + 1;
        if (line_start == std::string::npos && !line_starting) return;
        for (std::size_t k = from; k < text.size(); ++k)
            if (!is_space(text[k])) return;
        text.erase(from);
    }

    // Lexes the tag at m_at; returns the offset after it (and the newline trim_blocks takes).
    std::size_t lex_tag(bool& strip_next) {
        const char kind = m_src[m_at + 1];
        const std::size_t open = m_at;
        m_at += 2;
        if (m_at < m_src.size() && (m_src[m_at] == '-' || m_src[m_at] == '+')) ++m_at;
        if (kind == '#') {
            const std::size_t close = m_src.find("#}", m_at);
            if (close == std::string_view::npos)
                fail(open, "unterminated comment: '{#' without '#}'", "close the comment with #}");
            strip_next = close > m_at && m_src[close - 1] == '-';
            m_at = close + 2;
            if (!strip_next && m_at < m_src.size() && m_src[m_at] == '\n') ++m_at;  // trim_blocks
            return m_at;
        }
        const bool output = kind == '{';
        m_out.push_back({output ? token::kind::output_begin : token::kind::block_begin, open, {}, {}});
        const std::string_view close = output ? "}}" : "%}";
        int depth = 0;  // open ( [ {: a '}' inside a dict literal does not close the tag
        for (;;) {
            while (m_at < m_src.size() && is_space(m_src[m_at])) ++m_at;
            if (m_at >= m_src.size())
                fail(open, std::string("unterminated tag: '") + (output ? "{{" : "{%") + "' without '" +
                               std::string(close) + "'",
                     "close the tag with " + std::string(close));
            const bool dash = m_src[m_at] == '-' && m_src.substr(m_at + 1, 2) == close;
            if (depth == 0 && (dash || m_src.substr(m_at, 2) == close)) {
                m_out.push_back({output ? token::kind::output_end : token::kind::block_end, m_at, {}, {}});
                m_at += dash ? 3 : 2;
                strip_next = dash;
                if (!dash && !output && m_at < m_src.size() && m_src[m_at] == '\n') ++m_at;  // trim_blocks
                return m_at;
            }
            lex_expression_token();
            const std::string& last = m_out.back().text;
            if (m_out.back().type == token::kind::op && (last == "(" || last == "[" || last == "{")) ++depth;
            if (m_out.back().type == token::kind::op && (last == ")" || last == "]" || last == "}") && depth > 0) --depth;
        }
    }

    void lex_expression_token() {
        const std::size_t pos = m_at;
        const char c = m_src[m_at];
        if (is_name_start(c)) {
            while (m_at < m_src.size() && (is_name_start(m_src[m_at]) || is_digit(m_src[m_at]))) ++m_at;
            m_out.push_back({token::kind::name, pos, std::string(m_src.substr(pos, m_at - pos)), {}});
            return;
        }
        if (is_digit(c)) {
            while (m_at < m_src.size() && (is_digit(m_src[m_at]) || m_src[m_at] == '_')) ++m_at;
            bool real = false;
            if (m_at + 1 < m_src.size() && m_src[m_at] == '.' && is_digit(m_src[m_at + 1])) {
                real = true;
                for (++m_at; m_at < m_src.size() && is_digit(m_src[m_at]);) ++m_at;
            }
            if (m_at < m_src.size() && (m_src[m_at] == 'e' || m_src[m_at] == 'E')) {  // 1e3, 2.5E-4
                std::size_t k = m_at + 1;
                if (k < m_src.size() && (m_src[k] == '+' || m_src[k] == '-')) ++k;
                if (k < m_src.size() && is_digit(m_src[k])) {
                    real = true;
                    for (m_at = k; m_at < m_src.size() && is_digit(m_src[m_at]);) ++m_at;
                }
            }
            std::string digits;
            for (char d : m_src.substr(pos, m_at - pos))
                if (d != '_') digits += d;
            token t{real ? token::kind::number : token::kind::integer, pos, digits, {}};
            try {
                t.number = real ? json(std::stod(digits)) : json(static_cast<std::int64_t>(std::stoll(digits)));
            } catch (const std::exception&) {
                fail(pos, "number " + digits + " is out of range", "write a smaller number");
            }
            m_out.push_back(std::move(t));
            return;
        }
        if (c == '\'' || c == '"') {
            m_out.push_back({token::kind::string, pos, lex_string(), {}});
            return;
        }
        static constexpr std::string_view ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                                   "~",  "<",  ">",  "(",  ")",  "[",  "]", "{", "}", ",", ".",
                                                   ":",  "|",  "="};
        for (std::string_view op : ops)
            if (m_src.substr(m_at, op.size()) == op) {
                m_at += op.size();
                m_out.push_back({token::kind::op, pos, std::string(op), {}});
                return;
            }
        fail(pos, std::string("unexpected character '") + c + "' in a tag",
             "chat templates use names, literals, operators and the {{ }} {% %} {# #} delimiters");
    }

    // A string literal with Python's escapes: \n \t \r \\ \' \" \xHH \uHHHH \UHHHHHHHH; an unknown
    // escape keeps its backslash.
    std::string lex_string() {
        const std::size_t open = m_at;
        const char quote = m_src[m_at++];
        std::string out;
        while (m_at < m_src.size() && m_src[m_at] != quote) {
            char c = m_src[m_at++];
            if (c != '\\' || m_at >= m_src.size()) {
                out += c;
                continue;
            }
            const char e = m_src[m_at++];
            switch (e) {
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                case 'r': out += '\r'; break;
                case '0': out += '\0'; break;
                case '\\': out += '\\'; break;
                case '\'': out += '\''; break;
                case '"': out += '"'; break;
                case '\n': break;  // a line continuation
                case 'x': append_code_point(out, hex(2, open), open); break;
                case 'u': append_code_point(out, hex(4, open), open); break;
                case 'U': append_code_point(out, hex(8, open), open); break;
                default: out += '\\'; out += e;
            }
        }
        if (m_at >= m_src.size())
            fail(open, "unterminated string literal", std::string("close the string with ") + quote);
        ++m_at;
        return out;
    }

    unsigned long hex(std::size_t digits, std::size_t open) {
        if (m_at + digits > m_src.size()) fail(open, "truncated \\x, \\u or \\U escape in a string", "write all its hex digits");
        const std::string h(m_src.substr(m_at, digits));
        for (char d : h)
            if (!std::isxdigit(static_cast<unsigned char>(d)))
                fail(open, "bad hex digit in the escape \\" + h, "write the escape's hex digits");
        m_at += digits;
        return std::stoul(h, nullptr, 16);
    }

    void append_code_point(std::string& out, unsigned long cp, std::size_t open) const {
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
            fail(open, "a string escape names code point " + std::to_string(cp) + ", which UTF-8 cannot hold",
                 "write a code point up to U+10FFFF, not a surrogate");
        unicode::encode_utf8(static_cast<char32_t>(cp), out);
    }

    std::string_view m_src;
    std::string_view m_name;
    std::size_t m_at = 0;
    std::vector<token> m_out;
};

}  // namespace detail

}  // namespace strata::jinja
