// The split regexes of Llama 3 and Qwen2 (Hugging Face Split pre-tokenizers), done by hand over
// UTF-8 code points on the classes of unicode_tables.hpp, as gpt2_split does GPT-2's:
//
//   Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2:   the same with \p{N} for \p{N}{1,3} (digits one by one)
//
// Oniguruma takes the first alternative that matches at a position, each greedy with
// backtracking; every position starts a match, so the pieces cover the text. (?i) folds 's' with
// 'S' and U+017F LATIN SMALL LETTER LONG S, the other letters with their upper case only.
// Invalid UTF-8 bytes are "other", one byte each, as in gpt2_split.
#pragma once

#include <strata/text/gpt2_pretokenizer.hpp>  // unicode::classed_unit_at, unicode::class_run_end

#include <cstddef>      // std::size_t
#include <string_view>  // std::string_view

namespace strata {

// The patterns exactly as tokenizer.json spells them (pre_tokenizer Split, pattern.Regex).
inline constexpr std::string_view gpt2_split_regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view llama3_split_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view qwen2_split_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Calls on_piece(std::string_view) for each piece of Llama 3's split regex (max_digits 3) or
// Qwen2's (max_digits 1).
template <class OnPiece>
void llama3_split(std::string_view text, std::size_t max_digits, OnPiece&& on_piece) {
    using unicode::char_class;
    const std::size_t n = text.size();
    using unit = unicode::classed_unit;
    const auto unit_at = [&](std::size_t pos) { return unicode::classed_unit_at(text, pos); };
    const auto run_end = [&](std::size_t pos, char_class cls) { return unicode::class_run_end(text, pos, cls); };
    const auto is_newline = [&](std::size_t pos) { return text[pos] == '\r' || text[pos] == '\n'; };
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    const auto contraction_length = [&](std::size_t pos) -> std::size_t {
        if (text[pos] != '\'' || pos + 1 >= n) return 0;
        const char c1 = static_cast<char>(text[pos + 1] | 0x20);  // ASCII letters to lower case
        const bool letter1 = (text[pos + 1] >= 'a' && text[pos + 1] <= 'z') || (text[pos + 1] >= 'A' && text[pos + 1] <= 'Z');
        if (letter1 && (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')) return 2;
        if (text.substr(pos + 1, 2) == "\xC5\xBF") return 3;  // U+017F folds to 's'
        if (!letter1 || pos + 2 >= n) return 0;
        const char c2 = static_cast<char>(text[pos + 2] | 0x20);
        const bool letter2 = (text[pos + 2] >= 'a' && text[pos + 2] <= 'z') || (text[pos + 2] >= 'A' && text[pos + 2] <= 'Z');
        if (letter2 && ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))) return 3;
        return 0;
    };

    std::size_t pos = 0;
    while (pos < n) {
        std::size_t end = pos + contraction_length(pos);
        if (end == pos) {
            const unit first = unit_at(pos);
            const bool next_is_letter = pos + first.length < n && unit_at(pos + first.length).cls == char_class::letter;
            if (first.cls == char_class::letter) {
                end = run_end(pos, char_class::letter);  // \p{L}+
            } else if (first.cls != char_class::number && !is_newline(pos) && next_is_letter) {
                end = run_end(pos + first.length, char_class::letter);  // [^\r\n\p{L}\p{N}]\p{L}+
            } else if (first.cls == char_class::number) {
                end = pos;  // \p{N}{1,max_digits}
                for (std::size_t k = 0; k < max_digits && end < n; ++k) {
                    const unit u = unit_at(end);
                    if (u.cls != char_class::number) break;
                    end += u.length;
                }
            } else if (first.cls == char_class::other ||
                       (text[pos] == ' ' && pos + 1 < n && unit_at(pos + 1).cls == char_class::other)) {
                end = run_end(text[pos] == ' ' ? pos + 1 : pos, char_class::other);  // ' ?[^\s\p{L}\p{N}]+'
                while (end < n && is_newline(end)) ++end;                            // [\r\n]*
            } else {
                // White space: \s*[\r\n]+ ends after the run's last CR or LF; without one,
                // \s+(?!\S) leaves the last unit to the next piece unless the text ends, and a
                // lone unit before a non-space is \s+.
                std::size_t last_unit = pos, after_newline = 0;
                end = pos;
                while (end < n) {
                    const unit u = unit_at(end);
                    if (u.cls != char_class::space) break;
                    if (is_newline(end)) after_newline = end + 1;
                    last_unit = end;
                    end += u.length;
                }
                if (after_newline != 0) end = after_newline;
                else if (end < n && last_unit > pos) end = last_unit;
            }
        }
        on_piece(text.substr(pos, end - pos));
        pos = end;
    }
}

}  // namespace strata
