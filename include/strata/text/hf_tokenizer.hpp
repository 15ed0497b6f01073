// hf_tokenizer: a tokenizer read from a Hugging Face tokenizer.json, giving the ids that the
// `tokenizers` library gives (tests/text/hf_tokenizer_test.cpp checks Llama 3, Qwen2, Llama 2
// and Mistral kinds against tokenizers 0.23.2, id for id).
//
// What it supports, and refuses with a strata::error naming the field otherwise:
//   model           BPE (ignore_merges, byte_fallback, fuse_unk, unk_token; no dropout, no
//                   continuing_subword_prefix / end_of_word_suffix)
//   added_tokens    matched before normalization (normalized false), or by their normalized text
//                   after it (true), leftmost longest, with lstrip / rstrip / single_word
//   normalizer      NFC, Prepend, Replace (String pattern), Sequence
//   pre_tokenizer   ByteLevel (with or without its regex), Split with the GPT-2, Llama 3 or Qwen2
//                   regex (Isolated), Metaspace, Sequence
//   post_processor  TemplateProcessing (its single template), ByteLevel, Sequence: ids added by
//                   encode_with_special_tokens
//   decoder         ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence
//
// encode() is Tokenizer's: add_special_tokens=False (special tokens written in the text are still
// recognized), as the data pipeline wants; encode_with_special_tokens() adds what the
// post-processor adds (Llama's BOS). decode() is decode(ids, skip_special_tokens=False).
#pragma once

#include <strata/core/error.hpp>              // strata::error
#include <strata/text/gpt2_tokenizer.hpp>     // gpt2_detail::merge_pairs, shared_piece_cache
#include <strata/text/gpt2_vocab_files.hpp>   // gpt2_detail::byte_to_code_point, code_point_to_byte
#include <strata/text/hf_tokenizer_json.hpp>   // hf_detail::tables, json_loader
#include <strata/text/hf_split.hpp>           // llama3_split, *_split_regex
#include <strata/text/nfc.hpp>                // unicode::to_nfc
#include <strata/text/tokenizer.hpp>          // token_id, Tokenizer

#include <nlohmann/json.hpp>  // nlohmann::json

#include <algorithm>      // std::all_of, std::stable_sort
#include <cstddef>        // std::size_t, std::ptrdiff_t
#include <cstdint>        // std::uint32_t
#include <filesystem>     // std::filesystem::path
#include <fstream>        // std::ifstream
#include <iterator>       // std::istreambuf_iterator
#include <memory>         // std::shared_ptr, std::make_shared
#include <optional>       // std::optional
#include <span>           // std::span
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <utility>        // std::move
#include <vector>         // std::vector

namespace strata {

namespace hf_detail {

// A piece of text on its way through normalization and pre-tokenization; at_start says whether
// it begins at offset 0 of the input (Metaspace's prepend_scheme "first" asks).
struct piece {
    std::string text;
    bool at_start;
};

inline bool is_space_at(std::string_view text, std::size_t pos, std::size_t& length) {
    const unicode::utf8_unit u = unicode::decode_utf8(text, pos);
    length = u.length;
    return u.valid && unicode::classify(u.code_point) == unicode::char_class::space;
}

}  // namespace hf_detail

class hf_tokenizer {
public:
    // A tokenizer.json file, or a directory that holds one.
    static hf_tokenizer load(const std::filesystem::path& path) {
        std::error_code ec;
        const std::filesystem::path file = std::filesystem::is_directory(path, ec) ? path / "tokenizer.json" : path;
        if (!std::filesystem::is_regular_file(file, ec))
            throw error("hf_tokenizer: " + file.string() + " is not a file",
                        "pass a Hugging Face tokenizer.json, or the model directory that holds one");
        std::ifstream in(file, std::ios::binary);
        std::string text(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>{});
        if (!in.good() && !in.eof())
            throw error("hf_tokenizer: cannot read " + file.string(), "check the file's permissions");
        return from_json_text(text, file.string());
    }

    // The text of a tokenizer.json; source names it in errors.
    static hf_tokenizer from_json_text(std::string_view json_text, const std::string& source = "tokenizer.json") {
        nlohmann::json root;
        try {
            root = nlohmann::json::parse(json_text);
        } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
            throw error("hf_tokenizer: " + source + " is not valid JSON: " + e.what(),
                        "a tokenizer.json is what tokenizers' Tokenizer.save writes; was it copied completely?");
        }
        auto t = std::make_shared<tables>();
        try {
            hf_detail::json_loader(*t, source).load(root);
        } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
            throw error("hf_tokenizer: " + source + " is not a tokenizer.json strata understands: " + e.what(),
                        "check that the file is a Hugging Face tokenizers file (tokenizer.save)");
        }
        // tokenizers matches a normalized added token by its normalized text (Llama 2's "<s>" as
        // "▁<s>"), in the normalized segments; the others by their text, before normalization.
        for (hf_detail::added_token& a : t->added) a.match = a.normalized ? normalize(*t, a.content) : a.content;
        std::stable_sort(t->added.begin(), t->added.end(), [](const hf_detail::added_token& a, const hf_detail::added_token& b) {
            return a.match.size() > b.match.size();
        });
        return hf_tokenizer(std::move(t));
    }

    std::vector<token_id> encode(std::string_view text) const {
        std::vector<token_id> ids;
        ids.reserve(text.size() / 3 + 1);
        encode_into(text, ids);
        return ids;
    }

    // encode() plus what the post-processor adds (the BOS of Llama's TemplateProcessing).
    std::vector<token_id> encode_with_special_tokens(std::string_view text) const {
        std::vector<token_id> ids = m_tables->template_prefix;
        encode_into(text, ids);
        ids.insert(ids.end(), m_tables->template_suffix.begin(), m_tables->template_suffix.end());
        return ids;
    }

    std::string decode(std::span<const token_id> ids) const {
        std::vector<std::string> tokens;
        tokens.reserve(ids.size());
        for (token_id id : ids) {
            if (id < 0 || id >= vocab_size())
                throw error("hf_tokenizer: token id " + std::to_string(id) + " is out of range [0, " +
                                std::to_string(vocab_size()) + ")",
                            "the ids were not produced by this tokenizer.json; check which tokenizer made them", {"tokenizer"});
            const auto& token = m_tables->token_of[static_cast<std::size_t>(id)];
            if (token) tokens.push_back(*token);  // an id no token has is skipped, as tokenizers does
        }
        return m_tables->decoding.decode(std::move(tokens));
    }

    // The token's text as tokenizer.json spells it; empty for an id with no token.
    std::string_view token_text(token_id id) const {
        if (id < 0 || id >= vocab_size()) return {};
        const auto& token = m_tables->token_of[static_cast<std::size_t>(id)];
        return token ? std::string_view(*token) : std::string_view();
    }

    std::optional<token_id> token_id_of(std::string_view token) const {
        for (const hf_detail::added_token& a : m_tables->added)
            if (a.content == token) return a.id;
        const auto it = m_tables->vocab.find(token);
        if (it == m_tables->vocab.end()) return std::nullopt;
        return it->second;
    }

    // End of text: the first of <|endoftext|>, <|end_of_text|>, </s>, <|im_end|>, <eos> that is
    // an added special token.
    token_id eot_id() const {
        if (!m_tables->eot)
            throw error("hf_tokenizer: " + m_tables->source + " has no end-of-text token (none of <|endoftext|>, "
                        "<|end_of_text|>, </s>, <|im_end|>, <eos> is a special added token)",
                        "documents cannot be separated; add one to added_tokens, or use another tokenizer");
        return *m_tables->eot;
    }
    // The beginning-of-sequence token the post-processor adds first, if it adds one.
    std::optional<token_id> bos_id() const {
        if (m_tables->template_prefix.empty()) return std::nullopt;
        return m_tables->template_prefix.front();
    }
    token_id vocab_size() const { return static_cast<token_id>(m_tables->token_of.size()); }
    std::string_view name() const { return "hf"; }

private:
    using tables = hf_detail::tables;

    explicit hf_tokenizer(std::shared_ptr<const tables> t)
        : m_tables(std::move(t)), m_cache(std::make_shared<gpt2_detail::shared_piece_cache>()) {}

    // ---- encoding ----

    // Splits text on the added tokens of one kind (normalized or not): calls on_text(offset,
    // text) for the text between them and on_token(id) for each match.
    template <class OnText, class OnToken>
    void split_added(std::string_view text, bool normalized, OnText&& on_text, OnToken&& on_token) const {
        const auto& added = m_tables->added;
        std::size_t done = 0;  // text before this has been handed on
        for (std::size_t pos = 0; pos < text.size(); ++pos) {
            const hf_detail::added_token* match = nullptr;
            for (const hf_detail::added_token& a : added)  // longest first: the first match is the longest
                if (a.normalized == normalized && !a.match.empty() && text.compare(pos, a.match.size(), a.match) == 0) {
                    if (a.single_word && !single_word_ok(text, pos, pos + a.match.size())) continue;
                    match = &a;
                    break;
                }
            if (!match) continue;
            std::size_t start = pos, stop = pos + match->match.size(), length = 0;
            if (match->lstrip)
                while (start > done) {
                    std::size_t back = start - 1;
                    while (back > done && (static_cast<unsigned char>(text[back]) & 0xC0) == 0x80) --back;
                    if (!hf_detail::is_space_at(text, back, length) || back + length != start) break;
                    start = back;
                }
            if (match->rstrip)
                while (stop < text.size() && hf_detail::is_space_at(text, stop, length)) stop += length;
            if (start > done) on_text(done, text.substr(done, start - done));
            on_token(match->id);
            done = stop;
            pos = stop - 1;
        }
        if (done < text.size()) on_text(done, text.substr(done));
    }

    static bool single_word_ok(std::string_view text, std::size_t start, std::size_t stop) {
        const auto is_word = [&](std::size_t pos) {
            const unicode::utf8_unit u = unicode::decode_utf8(text, pos);
            const auto cls = u.valid ? unicode::classify(u.code_point) : unicode::char_class::other;
            return text[pos] == '_' || cls == unicode::char_class::letter || cls == unicode::char_class::number;
        };
        if (start > 0) {
            std::size_t back = start - 1;
            while (back > 0 && (static_cast<unsigned char>(text[back]) & 0xC0) == 0x80) --back;
            if (is_word(back)) return false;
        }
        return stop >= text.size() || !is_word(stop);
    }

    void encode_into(std::string_view text, std::vector<token_id>& ids) const {
        const auto push_id = [&](token_id id) { ids.push_back(id); };
        split_added(text, false, [&](std::size_t offset, std::string_view segment) {
            std::string normalized = normalize(segment);
            split_added(normalized, true, [&](std::size_t inner, std::string_view part) {
                encode_normalized(part, offset == 0 && inner == 0, ids);
            }, push_id);
        }, push_id);
    }

    std::string normalize(std::string_view text) const { return normalize(*m_tables, text); }

    static std::string normalize(const tables& t, std::string_view text) {
        std::string out(text);
        for (const hf_detail::normalizer_step& n : t.normalizers) {
            using kind = hf_detail::normalizer_step::kind;
            switch (n.type) {
                case kind::nfc: out = unicode::to_nfc(out); break;
                case kind::prepend: if (!out.empty()) out.insert(0, n.content); break;
                case kind::replace: out = hf_detail::replace_all(out, n.pattern, n.content); break;
            }
        }
        return out;
    }

    void encode_normalized(std::string_view text, bool at_start, std::vector<token_id>& ids) const {
        std::vector<hf_detail::piece> pieces{{std::string(text), at_start}}, next;
        for (const hf_detail::pretokenizer_step& p : m_tables->pretokenizers) {
            next.clear();
            for (hf_detail::piece& pc : pieces) apply(p, pc, next);
            pieces.swap(next);
        }
        for (const hf_detail::piece& pc : pieces)
            if (!pc.text.empty()) encode_piece(pc.text, ids);
    }

    static void apply(const hf_detail::pretokenizer_step& p, hf_detail::piece& pc, std::vector<hf_detail::piece>& out) {
        using kind = hf_detail::pretokenizer_step::kind;
        bool first = true;
        const auto emit = [&](std::string_view s) {
            out.push_back({std::string(s), pc.at_start && first});
            first = false;
        };
        switch (p.type) {
            case kind::split_gpt2: gpt2_split(pc.text, emit); break;
            case kind::split_llama3: llama3_split(pc.text, 3, emit); break;
            case kind::split_qwen2: llama3_split(pc.text, 1, emit); break;
            case kind::byte_level: {
                if (p.add_prefix_space && !pc.text.starts_with(' ')) pc.text.insert(0, " ");
                static constexpr auto map = gpt2_detail::byte_to_code_point();
                const auto to_chars = [&](std::string_view s) {
                    std::string mapped;
                    mapped.reserve(s.size() * 2);
                    for (unsigned char b : s) unicode::encode_utf8(map[b], mapped);
                    emit(mapped);
                };
                if (p.use_regex) gpt2_split(pc.text, to_chars);
                else to_chars(pc.text);
                break;
            }
            case kind::metaspace: {
                std::string s = hf_detail::replace_all(pc.text, " ", p.replacement);
                const bool prepend = p.scheme == hf_detail::prepend_scheme::always ||
                                     (p.scheme == hf_detail::prepend_scheme::first && pc.at_start);
                if (prepend && !s.starts_with(p.replacement)) s.insert(0, p.replacement);
                if (!p.split) {
                    emit(s);
                    break;
                }
                // Each replacement starts a piece (MergedWithNext).
                std::size_t begin = 0;
                for (std::size_t found = s.find(p.replacement, 1); found != std::string::npos;
                     found = s.find(p.replacement, found + p.replacement.size())) {
                    if (found > begin) emit(std::string_view(s).substr(begin, found - begin));
                    begin = found;
                }
                if (begin < s.size()) emit(std::string_view(s).substr(begin));
                break;
            }
        }
    }

    void encode_piece(std::string_view piece, std::vector<token_id>& ids) const {
        if (m_tables->ignore_merges) {
            const auto it = m_tables->vocab.find(piece);
            if (it != m_tables->vocab.end()) {
                ids.push_back(it->second);
                return;
            }
        }
        m_cache->encode(piece, ids, [this](std::string_view p, std::vector<token_id>& out) { bpe(p, out); });
    }

    // The symbols a word starts as (tokenizers' BPE::merge_word): each character's token; else
    // its bytes' <0xNN> tokens (byte_fallback); else unk, consecutive unks fused (fuse_unk); a
    // character with none of these is dropped, as tokenizers drops it.
    void initial_symbols(std::string_view word, std::vector<token_id>& out) const {
        const tables& t = *m_tables;
        std::optional<token_id> pending_unk;
        for (std::size_t pos = 0; pos < word.size();) {
            const std::size_t length = unicode::decode_utf8(word, pos).length;
            const std::string_view ch = word.substr(pos, length);
            pos += length;
            if (const auto it = t.vocab.find(ch); it != t.vocab.end()) {
                if (pending_unk) out.push_back(*pending_unk);
                pending_unk.reset();
                out.push_back(it->second);
                continue;
            }
            if (t.byte_fallback && std::all_of(ch.begin(), ch.end(), [&](char b) {
                    return t.byte_fallback_id[static_cast<unsigned char>(b)] >= 0;
                })) {
                if (pending_unk) out.push_back(*pending_unk);
                pending_unk.reset();
                for (unsigned char b : ch) out.push_back(t.byte_fallback_id[b]);
                continue;
            }
            if (!t.unk) continue;
            if (pending_unk && !t.fuse_unk) out.push_back(*pending_unk);
            pending_unk = t.unk;
        }
        if (pending_unk) out.push_back(*pending_unk);
    }

    // tokenizers' BPE: the initial symbols, merged as gpt2_detail::merge_pairs does.
    void bpe(std::string_view word, std::vector<token_id>& ids) const {
        std::vector<token_id> start;
        initial_symbols(word, start);
        gpt2_detail::merge_pairs(start, m_tables->merges, ids);
    }

    std::shared_ptr<const tables> m_tables;
    std::shared_ptr<gpt2_detail::shared_piece_cache> m_cache;
};

static_assert(Tokenizer<hf_tokenizer>);

}  // namespace strata
