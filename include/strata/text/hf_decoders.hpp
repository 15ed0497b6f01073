// The decoders of Hugging Face tokenizer.json files: each turns the list of token strings into
// another list, in sequence, and the result is joined (tokenizers' Decoder::decode_chain).
#pragma once

#include <strata/text/gpt2_pretokenizer.hpp>  // unicode::decode_utf8
#include <strata/text/gpt2_vocab_files.hpp>   // gpt2_detail::code_point_to_byte

#include <cstddef>      // std::size_t
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace strata::hf_detail {

// Every occurrence of pattern (not empty) in text replaced by content.
inline std::string replace_all(std::string_view text, std::string_view pattern, std::string_view content) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t pos = 0;;) {
        const std::size_t found = text.find(pattern, pos);
        if (found == std::string_view::npos) {
            out.append(text.substr(pos));
            return out;
        }
        out.append(text.substr(pos, found - pos));
        out.append(content);
        pos = found + pattern.size();
    }
}

// Rust's String::from_utf8_lossy: each maximal ill-formed subsequence becomes one U+FFFD.
inline std::string utf8_lossy(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    for (std::size_t pos = 0; pos < bytes.size();) {
        const unicode::utf8_unit u = unicode::decode_utf8(bytes, pos);
        if (u.valid) {
            out.append(bytes.substr(pos, u.length));
            pos += u.length;
            continue;
        }
        // The maximal subpart: a lead byte and the continuation bytes that could still follow it.
        const auto b0 = static_cast<unsigned char>(bytes[pos]);
        std::size_t length = 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b0 >= 0xC2 && b0 <= 0xDF) length = 2;
        else if (b0 >= 0xE0 && b0 <= 0xEF) { length = 3; lo = b0 == 0xE0 ? 0xA0 : 0x80; hi = b0 == 0xED ? 0x9F : 0xBF; }
        else if (b0 >= 0xF0 && b0 <= 0xF4) { length = 4; lo = b0 == 0xF0 ? 0x90 : 0x80; hi = b0 == 0xF4 ? 0x8F : 0xBF; }
        std::size_t taken = 1;
        while (length != 0 && taken < length && pos + taken < bytes.size()) {
            const auto b = static_cast<unsigned char>(bytes[pos + taken]);
            if (b < (taken == 1 ? lo : 0x80) || b > (taken == 1 ? hi : 0xBF)) break;
            ++taken;
        }
        out.append("\xEF\xBF\xBD");
        pos += taken;
    }
    return out;
}

struct decoder_step {
    enum class kind { byte_level, metaspace, replace, byte_fallback, fuse, strip } type;
    std::string pattern, content;  // replace: pattern -> content; metaspace: content = replacement; strip: content
    bool drop_first_replacement = false;  // metaspace: prepend_scheme is not "never"
    std::size_t start = 0, stop = 0;      // strip
};

// Token "<0xNN>" -> NN, else -1.
inline int byte_token_value(std::string_view token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
    int value = 0;
    for (char c : token.substr(3, 2)) {
        const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (digit < 0) return -1;
        value = value * 16 + digit;
    }
    return value;
}

inline std::vector<std::string> apply(const decoder_step& d, std::vector<std::string> tokens) {
    using kind = decoder_step::kind;
    std::vector<std::string> out;
    switch (d.type) {
        case kind::byte_level: {
            // Each token's characters back to bytes; a token with a character outside the byte
            // alphabet keeps its own bytes. The whole is then read as UTF-8, lossily.
            std::string bytes, own;
            for (const std::string& token : tokens) {
                own.clear();
                bool all = true;
                for (std::size_t pos = 0; pos < token.size();) {
                    const unicode::utf8_unit u = unicode::decode_utf8(token, pos);
                    const int b = u.valid ? gpt2_detail::code_point_to_byte(u.code_point) : -1;
                    if (b < 0) {
                        all = false;
                        break;
                    }
                    own.push_back(static_cast<char>(b));
                    pos += u.length;
                }
                bytes += all ? own : token;
            }
            out.push_back(utf8_lossy(bytes));
            return out;
        }
        case kind::metaspace:
            for (std::size_t i = 0; i < tokens.size(); ++i) {
                std::string s;
                for (std::size_t pos = 0; pos < tokens[i].size();) {
                    if (!d.content.empty() && tokens[i].compare(pos, d.content.size(), d.content) == 0) {
                        if (!(i == 0 && d.drop_first_replacement)) s.push_back(' ');
                        pos += d.content.size();
                    } else {
                        s.push_back(tokens[i][pos++]);
                    }
                }
                out.push_back(std::move(s));
            }
            return out;
        case kind::replace:
            for (const std::string& token : tokens) out.push_back(replace_all(token, d.pattern, d.content));
            return out;
        case kind::byte_fallback: {
            std::string run;  // bytes of consecutive <0xNN> tokens
            std::size_t run_tokens = 0;
            const auto flush = [&] {
                if (run_tokens == 0) return;
                if (utf8_lossy(run) == run) out.push_back(run);
                else
                    for (std::size_t i = 0; i < run_tokens; ++i) out.emplace_back("\xEF\xBF\xBD");
                run.clear();
                run_tokens = 0;
            };
            for (std::string& token : tokens) {
                const int b = byte_token_value(token);
                if (b >= 0) {
                    run.push_back(static_cast<char>(b));
                    ++run_tokens;
                } else {
                    flush();
                    out.push_back(std::move(token));
                }
            }
            flush();
            return out;
        }
        case kind::fuse: {
            std::string all;
            for (const std::string& token : tokens) all += token;
            out.push_back(std::move(all));
            return out;
        }
        case kind::strip:
            for (std::string& token : tokens) {
                // Up to `start` leading and `stop` trailing copies of the content character.
                std::size_t begin = 0, end = token.size();
                for (std::size_t i = 0; i < d.start && token.compare(begin, d.content.size(), d.content) == 0 && begin < end; ++i)
                    begin += d.content.size();
                for (std::size_t i = 0; i < d.stop && end >= begin + d.content.size() &&
                                        token.compare(end - d.content.size(), d.content.size(), d.content) == 0; ++i)
                    end -= d.content.size();
                out.push_back(token.substr(begin, end - begin));
            }
            return out;
    }
    return out;
}

// The decoder of a tokenizer.json: its steps in order (none: the tokens joined).
struct decoder {
    std::vector<decoder_step> steps;

    std::string decode(std::vector<std::string> tokens) const {
        for (const decoder_step& d : steps) tokens = apply(d, std::move(tokens));
        std::string out;
        for (const std::string& t : tokens) out += t;
        return out;
    }
};

}  // namespace strata::hf_detail
