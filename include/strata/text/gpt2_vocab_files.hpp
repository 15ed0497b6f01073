// Reading GPT-2's vocabulary files: the bytes_to_unicode alphabet their tokens are spelled in, and
// a reader for vocab.json (one flat JSON object of token -> id).
#pragma once

#include <strata/core/error.hpp>              // strata::error
#include <strata/text/gpt2_pretokenizer.hpp>  // unicode::decode_utf8, unicode::encode_utf8
#include <strata/text/tokenizer.hpp>          // token_id

#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view

namespace strata::gpt2_detail {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100.. in byte order, so that every vocabulary key is printable text.
constexpr std::array<char32_t, 256> byte_to_code_point() {
    std::array<char32_t, 256> table{};
    char32_t next = 256;
    for (std::size_t b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        table[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return table;
}

// The inverse, over the 324 code points the table can produce; -1 elsewhere.
inline int code_point_to_byte(char32_t cp) {
    static const auto inverse = [] {
        std::array<short, 324> table;
        table.fill(-1);
        const auto forward = byte_to_code_point();
        for (std::size_t b = 0; b < 256; ++b) table[forward[b]] = static_cast<short>(b);
        return table;
    }();
    return cp < inverse.size() ? inverse[cp] : -1;
}

inline std::string hex_code_point(char32_t cp) {
    static constexpr char digits[] = "0123456789ABCDEF";
    std::string out = "U+";
    for (int shift = cp > 0xFFFF ? 20 : 12; shift >= 0; shift -= 4) out.push_back(digits[(cp >> shift) & 0xF]);
    return out;
}

// A vocabulary key (UTF-8 over bytes_to_unicode's alphabet) back to the raw bytes it spells;
// why_not says what is wrong when it cannot be.
inline bool key_to_bytes(std::string_view key, std::string& bytes, std::string& why_not) {
    bytes.clear();
    for (std::size_t pos = 0; pos < key.size();) {
        const unicode::utf8_unit u = unicode::decode_utf8(key, pos);
        if (!u.valid) {
            why_not = "is not valid UTF-8";
            return false;
        }
        const int b = code_point_to_byte(u.code_point);
        if (b < 0) {
            why_not = "has " + hex_code_point(u.code_point) + ", which is not one of GPT-2's byte characters";
            return false;
        }
        bytes.push_back(static_cast<char>(b));
        pos += u.length;
    }
    return true;
}

// Shows a token's key in an error message, shortened when long.
inline std::string shown(std::string_view text) {
    constexpr std::size_t max = 40;
    return "\"" + std::string(text.substr(0, max)) + (text.size() > max ? "...\"" : "\"");
}

// Reads vocab.json: one JSON object of string -> non-negative integer, which is all GPT-2's is.
// A full JSON library would be a dependency of the header for this one flat object.
class vocab_reader {
public:
    vocab_reader(std::string_view text, std::string_view file_name) : m_text(text), m_file(file_name) {}

    // Calls on_entry(key, id) for each entry, in file order.
    template <class OnEntry>
    void read(OnEntry&& on_entry) {
        skip_space();
        expect('{', "'{' (vocab.json is one JSON object of token -> id)");
        skip_space();
        if (peek() == '}') {
            ++m_pos;
        } else {
            std::string key;
            while (true) {
                skip_space();
                const std::size_t key_at = m_pos;
                read_string(key);
                skip_space();
                expect(':', "':' after a token");
                skip_space();
                const long long id = read_id(key);
                on_entry(key, static_cast<token_id>(id), key_at);
                skip_space();
                if (peek() == ',') { ++m_pos; continue; }
                expect('}', "',' or '}' after an id");
                break;
            }
        }
        skip_space();
        if (m_pos != m_text.size()) fail(m_pos, "unexpected text after the closing '}'");
    }

    [[noreturn]] void fail(std::size_t at, const std::string& what) const {
        std::size_t line = 1, column = 1;
        for (std::size_t i = 0; i < at && i < m_text.size(); ++i) {
            if (m_text[i] == '\n') { ++line; column = 1; }
            else { ++column; }
        }
        throw error("gpt2_tokenizer: " + std::string(m_file) + " line " + std::to_string(line) + ", column " +
                        std::to_string(column) + ": " + what,
                    "vocab.json must be GPT-2's vocabulary: one JSON object {\"token\": id, ...}");
    }

private:
    char peek() const { return m_pos < m_text.size() ? m_text[m_pos] : '\0'; }

    void skip_space() {
        while (m_pos < m_text.size() &&
               (m_text[m_pos] == ' ' || m_text[m_pos] == '\t' || m_text[m_pos] == '\n' || m_text[m_pos] == '\r'))
            ++m_pos;
    }

    void expect(char c, const char* what) {
        if (peek() != c || m_pos >= m_text.size())
            fail(m_pos, std::string("expected ") + what + (m_pos >= m_text.size() ? ", found the end of the file"
                                                                                  : ", found '" + std::string(1, peek()) + "'"));
        ++m_pos;
    }

    unsigned read_hex4() {
        if (m_pos + 4 > m_text.size()) fail(m_pos, "\\u needs four hex digits");
        unsigned value = 0;
        for (int i = 0; i < 4; ++i) {
            const char c = m_text[m_pos++];
            value <<= 4;
            if (c >= '0' && c <= '9') value |= static_cast<unsigned>(c - '0');
            else if (c >= 'a' && c <= 'f') value |= static_cast<unsigned>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') value |= static_cast<unsigned>(c - 'A' + 10);
            else fail(m_pos - 1, "\\u needs four hex digits");
        }
        return value;
    }

    void read_string(std::string& out) {
        out.clear();
        expect('"', "'\"' to open a token");
        while (true) {
            if (m_pos >= m_text.size()) fail(m_pos, "the file ends inside a string");
            const char c = m_text[m_pos++];
            if (c == '"') return;
            if (static_cast<unsigned char>(c) < 0x20) fail(m_pos - 1, "a control character inside a string");
            if (c != '\\') { out.push_back(c); continue; }
            if (m_pos >= m_text.size()) fail(m_pos, "the file ends inside a string");
            const char e = m_text[m_pos++];
            switch (e) {
                case '"': out.push_back('"'); break;
                case '\\': out.push_back('\\'); break;
                case '/': out.push_back('/'); break;
                case 'b': out.push_back('\b'); break;
                case 'f': out.push_back('\f'); break;
                case 'n': out.push_back('\n'); break;
                case 'r': out.push_back('\r'); break;
                case 't': out.push_back('\t'); break;
                case 'u': {
                    char32_t cp = read_hex4();
                    if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair spells one code point
                        if (m_pos + 2 > m_text.size() || m_text[m_pos] != '\\' || m_text[m_pos + 1] != 'u')
                            fail(m_pos, "a high surrogate \\u escape without its low half");
                        m_pos += 2;
                        const char32_t low = read_hex4();
                        if (low < 0xDC00 || low > 0xDFFF) fail(m_pos - 6, "a high surrogate followed by no low surrogate");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                        fail(m_pos - 6, "a lone low surrogate \\u escape");
                    }
                    unicode::encode_utf8(cp, out);
                    break;
                }
                default: fail(m_pos - 1, std::string("unknown escape \\") + e);
            }
        }
    }

    long long read_id(const std::string& key) {
        const std::size_t start = m_pos;
        long long value = 0;
        while (m_pos < m_text.size() && m_text[m_pos] >= '0' && m_text[m_pos] <= '9') {
            value = value * 10 + (m_text[m_pos++] - '0');
            if (value > 0x7FFFFFFF) fail(start, "the id of " + shown(key) + " does not fit in int32");
        }
        if (m_pos == start) fail(start, "expected a non-negative integer id for " + shown(key));
        if (peek() == '.' || peek() == 'e' || peek() == 'E') fail(start, "the id of " + shown(key) + " is not an integer");
        return value;
    }

    std::string_view m_text;
    std::string_view m_file;
    std::size_t m_pos = 0;
};

}  // namespace strata::gpt2_detail
