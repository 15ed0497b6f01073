// Unicode normalization form C (canonical decomposition, then canonical composition), for the
// NFC normalizer of Hugging Face tokenizer.json files. The data is nfc_tables.hpp (Unicode 15.0.0,
// the version of the pre-tokenizer's classes in unicode_tables.hpp).
//
// Invalid UTF-8 (which Hugging Face never sees: Python strings are valid Unicode) passes through
// byte for byte: each invalid byte is a starter that composes with nothing.
#pragma once

#include <strata/text/gpt2_pretokenizer.hpp>  // unicode::decode_utf8, unicode::encode_utf8
#include <strata/text/nfc_tables.hpp>         // unicode::nfc::decompositions, combining_classes, compositions

#include <algorithm>    // std::lower_bound, std::stable_sort
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint8_t
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::pair
#include <vector>       // std::vector

namespace strata::unicode {

namespace nfc_detail {

// Hangul syllables compose and decompose by arithmetic (Unicode 3.12).
inline constexpr char32_t s_base = 0xAC00, l_base = 0x1100, v_base = 0x1161, t_base = 0x11A7;
inline constexpr char32_t l_count = 19, v_count = 21, t_count = 28, n_count = v_count * t_count,
                          s_count = l_count * n_count;
// An invalid byte b is carried as invalid_base + b, past every code point.
inline constexpr char32_t invalid_base = 0x110000;

inline std::uint8_t combining_class(char32_t cp) noexcept {
    const auto& table = nfc::combining_classes;
    const auto* it = std::lower_bound(table.begin(), table.end(), cp,
                                      [](const nfc::combining_class& e, char32_t c) { return e.cp < c; });
    return it != table.end() && it->cp == cp ? it->ccc : 0;
}

inline void decompose(char32_t cp, std::u32string& out) {
    if (cp >= s_base && cp < s_base + s_count) {
        const char32_t s = cp - s_base;
        out.push_back(l_base + s / n_count);
        out.push_back(v_base + (s % n_count) / t_count);
        if (s % t_count != 0) out.push_back(t_base + s % t_count);
        return;
    }
    const auto& table = nfc::decompositions;
    const auto* it = std::lower_bound(table.begin(), table.end(), cp,
                                      [](const nfc::decomposition& e, char32_t c) { return e.cp < c; });
    if (it == table.end() || it->cp != cp) {
        out.push_back(cp);
        return;
    }
    decompose(it->first, out);
    if (it->second != 0) decompose(it->second, out);
}

// The primary composite of (a, b), or 0 when there is none.
inline char32_t compose(char32_t a, char32_t b) noexcept {
    if (a >= l_base && a < l_base + l_count && b >= v_base && b < v_base + v_count)
        return s_base + ((a - l_base) * v_count + (b - v_base)) * t_count;
    if (a >= s_base && a < s_base + s_count && (a - s_base) % t_count == 0 && b > t_base && b < t_base + t_count)
        return a + (b - t_base);
    const auto& table = nfc::compositions;
    const auto* it = std::lower_bound(table.begin(), table.end(), std::pair{a, b},
                                      [](const nfc::composition& e, std::pair<char32_t, char32_t> key) {
                                          return e.first != key.first ? e.first < key.first : e.second < key.second;
                                      });
    return it != table.end() && it->first == a && it->second == b ? it->composite : 0;
}

inline void append_utf8(char32_t cp, std::string& out) {
    if (cp >= invalid_base) out.push_back(static_cast<char>(cp - invalid_base));
    else encode_utf8(cp, out);
}

}  // namespace nfc_detail

// The NFC form of text. Text whose code points are all below nfc::first_affected (all ASCII and
// Latin-1 text, for one) is returned as it is without building anything.
inline std::string to_nfc(std::string_view text) {
    using namespace nfc_detail;
    bool affected = false;
    for (std::size_t pos = 0; pos < text.size() && !affected;) {
        if (static_cast<unsigned char>(text[pos]) < 0x80) {
            ++pos;
            continue;
        }
        const utf8_unit u = decode_utf8(text, pos);
        affected = u.valid && u.code_point >= nfc::first_affected;
        pos += u.length;
    }
    if (!affected) return std::string(text);

    std::u32string decomposed;
    decomposed.reserve(text.size());
    for (std::size_t pos = 0; pos < text.size();) {
        const utf8_unit u = decode_utf8(text, pos);
        if (u.valid) decompose(u.code_point, decomposed);
        else decomposed.push_back(invalid_base + static_cast<unsigned char>(text[pos]));
        pos += u.length;
    }
    // Canonical ordering: each run of non-starters sorted by combining class, stably.
    for (std::size_t i = 0; i < decomposed.size();) {
        if (combining_class(decomposed[i]) == 0) {
            ++i;
            continue;
        }
        std::size_t end = i;
        while (end < decomposed.size() && combining_class(decomposed[end]) != 0) ++end;
        std::stable_sort(decomposed.begin() + static_cast<std::ptrdiff_t>(i), decomposed.begin() + static_cast<std::ptrdiff_t>(end),
                         [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
        i = end;
    }
    // Canonical composition: each character joins the last starter unless something between them
    // blocks it (a starter, or a character of the same or a higher class).
    std::u32string composed;
    composed.reserve(decomposed.size());
    std::ptrdiff_t starter = -1;
    int last_class = -1;  // class of the last character kept after the starter; -1: none
    for (char32_t c : decomposed) {
        const int cls = c >= invalid_base ? 0 : combining_class(c);
        if (starter >= 0 && (last_class == -1 || last_class < cls) && c < invalid_base) {
            const char32_t both = compose(composed[static_cast<std::size_t>(starter)], c);
            if (both != 0) {
                composed[static_cast<std::size_t>(starter)] = both;
                continue;
            }
        }
        if (cls == 0) {
            starter = static_cast<std::ptrdiff_t>(composed.size());
            last_class = -1;
        } else {
            last_class = cls;
        }
        composed.push_back(c);
    }
    std::string out;
    out.reserve(text.size());
    for (char32_t c : composed) append_utf8(c, out);
    return out;
}

}  // namespace strata::unicode
