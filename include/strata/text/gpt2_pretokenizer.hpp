// GPT-2's pre-tokenizer: splits text into the pieces that BPE then encodes one by one.
//
// It does by hand, over UTF-8 code points, exactly what this regex does in Hugging Face's
// tokenizers (Oniguruma, leftmost alternative first, greedy with backtracking):
//
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// Every code point is a letter (\p{L}), a number (\p{N}), white space (\s, the White_Space
// property) or "other"; the four classes partition Unicode, so every position starts a match and
// the pieces cover the text exactly.
//
// Invalid UTF-8 never reaches Hugging Face (Python strings are valid Unicode), so there is no
// reference to match. Here each byte that does not start a well-formed sequence (stray
// continuation bytes, overlong forms, surrogates, code points past U+10FFFF, truncated sequences)
// is one "other" unit of one byte, as U+FFFD (a symbol) would be: it joins neighbouring
// punctuation, stays in the piece as the raw byte, and byte-level BPE encodes it as that byte's
// token, so decode(encode(s)) == s for any byte string.
#pragma once

#include <strata/text/unicode_tables.hpp>  // unicode::char_class, unicode::class_ranges

#include <algorithm>    // std::upper_bound
#include <array>        // std::array
#include <cstddef>      // std::size_t
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace strata {

namespace unicode {

// Class of one code point. ASCII, nearly all of most text, is one table lookup.
inline char_class classify(char32_t cp) noexcept {
    static constexpr auto ascii = [] {
        std::array<char_class, 128> table{};
        for (const class_range& r : class_ranges)
            for (char32_t c = r.first; c <= r.last && c < 128; ++c) table[c] = r.cls;
        return table;
    }();
    if (cp < 128) return ascii[cp];
    const auto* after = std::upper_bound(class_ranges.begin(), class_ranges.end(), cp,
                                         [](char32_t c, const class_range& r) { return c < r.first; });
    if (after == class_ranges.begin()) return char_class::other;
    const class_range& r = *(after - 1);
    return cp <= r.last ? r.cls : char_class::other;
}

// One unit of text: a well-formed UTF-8 sequence, or a single invalid byte.
struct utf8_unit {
    char32_t code_point;   // meaningless for an invalid byte
    unsigned char length;  // bytes, 1..4
    bool valid;
};

// Decodes the unit at text[pos] (pos < text.size()). The accepted forms are those of Unicode's
// table 3-7 (well-formed byte sequences), so overlongs and surrogates come out invalid.
inline utf8_unit decode_utf8(std::string_view text, std::size_t pos) noexcept {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char b0 = byte(pos);
    if (b0 < 0x80) return {b0, 1, true};
    const utf8_unit invalid{0xFFFD, 1, false};

    std::size_t length = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte; the rest are 80..BF
    char32_t cp = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) { length = 2; cp = b0 & 0x1F; }
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        length = 3; cp = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;  // no overlongs
        if (b0 == 0xED) hi = 0x9F;  // no surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        length = 4; cp = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;  // no overlongs
        if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
    } else {
        return invalid;
    }
    if (pos + length > text.size()) return invalid;
    for (std::size_t i = 1; i < length; ++i) {
        const unsigned char b = byte(pos + i);
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return invalid;
        cp = (cp << 6) | (b & 0x3F);
    }
    return {cp, static_cast<unsigned char>(length), true};
}

// Appends cp (at most U+10FFFF) as UTF-8.
inline void encode_utf8(char32_t cp, std::string& out) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

// One unit of text with its class; an invalid byte is "other".
struct classed_unit {
    std::size_t length;
    char_class cls;
};

inline classed_unit classed_unit_at(std::string_view text, std::size_t pos) noexcept {
    const utf8_unit u = decode_utf8(text, pos);
    return {u.length, u.valid ? classify(u.code_point) : char_class::other};
}

// End of the run of units of class cls that starts at pos.
inline std::size_t class_run_end(std::string_view text, std::size_t pos, char_class cls) noexcept {
    while (pos < text.size()) {
        const classed_unit u = classed_unit_at(text, pos);
        if (u.cls != cls) break;
        pos += u.length;
    }
    return pos;
}

}  // namespace unicode

// Calls on_piece(std::string_view) for each GPT-2 pre-token of text, in order; the pieces
// concatenate to text.
template <class OnPiece>
void gpt2_split(std::string_view text, OnPiece&& on_piece) {
    using unicode::char_class;
    const std::size_t n = text.size();

    using unit = unicode::classed_unit;
    const auto unit_at = [&](std::size_t pos) { return unicode::classed_unit_at(text, pos); };
    const auto run_end = [&](std::size_t pos, char_class cls) { return unicode::class_run_end(text, pos, cls); };
    // 's 't 're 've 'm 'll 'd: lower case only, as in the regex.
    const auto contraction_length = [&](std::size_t pos) -> std::size_t {
        if (text[pos] != '\'' || pos + 1 >= n) return 0;
        const char c1 = text[pos + 1];
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
        if (pos + 2 >= n) return 0;
        const char c2 = text[pos + 2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
        return 0;
    };

    std::size_t pos = 0;
    while (pos < n) {
        std::size_t end = pos + contraction_length(pos);
        if (end == pos) {
            const unit first = unit_at(pos);
            if (first.cls != char_class::space) {
                end = run_end(pos, first.cls);  // \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+
            } else if (text[pos] == ' ' && pos + 1 < n && unit_at(pos + 1).cls != char_class::space) {
                end = run_end(pos + 1, unit_at(pos + 1).cls);  // the optional leading space
            } else {
                // \s+(?!\S) backs off one unit so that the last space goes with the next word;
                // a lone space before a non-space falls through to \s+.
                std::size_t last = pos;
                end = pos;
                while (end < n) {
                    const unit u = unit_at(end);
                    if (u.cls != char_class::space) break;
                    last = end;
                    end += u.length;
                }
                if (end < n && last > pos) end = last;
            }
        }
        on_piece(text.substr(pos, end - pos));
        pos = end;
    }
}

// The pieces as a vector (for tests and inspection; encoding streams them).
inline std::vector<std::string_view> gpt2_split(std::string_view text) {
    std::vector<std::string_view> pieces;
    gpt2_split(text, [&](std::string_view piece) { pieces.push_back(piece); });
    return pieces;
}

}  // namespace strata
