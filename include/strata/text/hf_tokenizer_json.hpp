// Reading a Hugging Face tokenizer.json into hf_tokenizer's tables. Every field strata does not
// implement is refused with a strata::error that names the field, its value and a hint; nothing
// is ignored silently (truncation and padding, which only batching uses, are the exceptions).
#pragma once

#include <strata/core/error.hpp>              // strata::error
#include <strata/text/gpt2_tokenizer.hpp>     // gpt2_detail::merge_table, string_hash
#include <strata/text/hf_decoders.hpp>        // hf_detail::decoder, decoder_step
#include <strata/text/hf_split.hpp>           // *_split_regex
#include <strata/text/tokenizer.hpp>          // token_id

#include <nlohmann/json.hpp>  // nlohmann::json

#include <algorithm>      // std::stable_sort, std::max
#include <array>          // std::array
#include <cstddef>        // std::size_t
#include <cstdint>        // std::uint32_t
#include <functional>     // std::equal_to
#include <optional>       // std::optional
#include <string>         // std::string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <vector>         // std::vector

namespace strata::hf_detail {

using json = nlohmann::json;

enum class prepend_scheme { always, first, never };

struct normalizer_step {
    enum class kind { nfc, prepend, replace } type;
    std::string pattern, content;  // prepend: content; replace: pattern -> content
};

struct pretokenizer_step {
    enum class kind { byte_level, split_gpt2, split_llama3, split_qwen2, metaspace } type;
    bool add_prefix_space = false, use_regex = false;  // byte_level
    std::string replacement;                           // metaspace
    prepend_scheme scheme = prepend_scheme::always;    // metaspace
    bool split = false;                                // metaspace
};

struct added_token {
    std::string content;
    token_id id;
    bool special, lstrip, rstrip, single_word, normalized;
    std::size_t index;  // in added_tokens, for errors
    std::string match;  // what is matched: content, or content normalized when normalized
};

using id_map = std::unordered_map<std::string, token_id, gpt2_detail::string_hash, std::equal_to<>>;

struct tables {
    std::string source;
    id_map vocab;                                      // the model's
    std::vector<std::optional<std::string>> token_of;  // id -> token (added tokens win)
    gpt2_detail::merge_table merges;
    std::optional<token_id> unk;
    bool ignore_merges = false, byte_fallback = false, fuse_unk = false;
    std::array<token_id, 256> byte_fallback_id{};  // <0xNN>; -1 where the vocabulary lacks it
    std::vector<added_token> added;                // longest match first (hf_tokenizer sorts them)
    std::vector<normalizer_step> normalizers;
    std::vector<pretokenizer_step> pretokenizers;
    std::vector<token_id> template_prefix, template_suffix;
    decoder decoding;
    std::optional<token_id> eot;
};

class json_loader {
public:
    json_loader(tables& t, std::string source) : m_t(t) { m_t.source = std::move(source); }

    void load(const json& root) {
        if (!root.is_object()) fail("the top level", root, "a tokenizer.json is one JSON object");
        // Ids are dense in real files (the added tokens follow the vocabulary, or repeat some of
        // its entries), so none reaches the number of tokens; a larger one would size the id ->
        // token table by a number the file chooses.
        if (const json* model = optional_field(root, "model"); model && model->is_object())
            if (const json* vocab = optional_field(*model, "vocab"); vocab && vocab->is_object()) m_id_limit += vocab->size();
        if (const json* added = optional_field(root, "added_tokens"); added && added->is_array()) m_id_limit += added->size();
        read_model(field(root, "model", "model"));
        if (const json* a = optional_field(root, "added_tokens")) read_added(*a);
        if (const json* n = optional_field(root, "normalizer")) read_normalizer(*n, "normalizer");
        if (const json* p = optional_field(root, "pre_tokenizer")) read_pretokenizer(*p, "pre_tokenizer");
        if (const json* p = optional_field(root, "post_processor")) read_post_processor(*p, "post_processor");
        if (const json* d = optional_field(root, "decoder")) read_decoder(*d, "decoder");
        for (std::string_view eot : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>", "<eos>"}) {
            const auto it = std::find_if(m_t.added.begin(), m_t.added.end(),
                                         [&](const added_token& a) { return a.special && a.content == eot; });
            if (it != m_t.added.end()) {
                m_t.eot = it->id;
                break;
            }
        }
    }

private:
    [[noreturn]] void fail(const std::string& where, const json& value, const std::string& hint) const {
        throw error("hf_tokenizer: " + m_t.source + ": " + where + " is " + shown(value), hint);
    }
    [[noreturn]] void unsupported(const std::string& where, const std::string& value, const std::string& hint) const {
        throw error("hf_tokenizer: " + m_t.source + ": " + where + " = " + value + " is not supported", hint);
    }
    static std::string shown(const json& value) {
        std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
        return s.size() > 80 ? s.substr(0, 80) + "..." : s;
    }

    const json& field(const json& object, const char* key, const std::string& where) const {
        if (!object.is_object()) fail(where, object, "expected a JSON object");
        const auto it = object.find(key);
        if (it == object.end())
            throw error("hf_tokenizer: " + m_t.source + ": " + where + " has no field '" + key + "'",
                        "the file is incomplete or not a Hugging Face tokenizer.json");
        return *it;
    }
    // The field, or nullptr when it is absent or null.
    static const json* optional_field(const json& object, const char* key) {
        const auto it = object.find(key);
        return it == object.end() || it->is_null() ? nullptr : &*it;
    }
    std::string string_field(const json& object, const char* key, const std::string& where) const {
        const json& v = field(object, key, where);
        if (!v.is_string()) fail(where + "." + key, v, "expected a string");
        return v.get<std::string>();
    }
    bool bool_field(const json& object, const char* key, const std::string& where, bool otherwise) const {
        const json* v = optional_field(object, key);
        if (!v) return otherwise;
        if (!v->is_boolean()) fail(where + "." + key, *v, "expected true or false");
        return v->get<bool>();
    }
    token_id id_value(const json& v, const std::string& where) const {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || static_cast<std::uint64_t>(v.get<std::int64_t>()) >= m_id_limit)
            fail(where, v, "token ids are integers from 0 to the number of tokens (" + std::to_string(m_id_limit) +
                               " in model.vocab and added_tokens) less one");
        return static_cast<token_id>(v.get<std::int64_t>());
    }
    std::string type_of(const json& object, const std::string& where) const { return string_field(object, "type", where); }

    void set_token(token_id id, const std::string& token) {
        if (static_cast<std::size_t>(id) >= m_t.token_of.size()) m_t.token_of.resize(static_cast<std::size_t>(id) + 1);
        m_t.token_of[static_cast<std::size_t>(id)] = token;
    }

    token_id vocab_id(const std::string& token, const std::string& where) const {
        const auto it = m_t.vocab.find(token);
        if (it == m_t.vocab.end())
            throw error("hf_tokenizer: " + m_t.source + ": " + where + " names \"" + token + "\", which is not in model.vocab",
                        "the file is inconsistent; save it again with tokenizers");
        return it->second;
    }

    void read_model(const json& model) {
        const std::string type = type_of(model, "model");
        if (type != "BPE")
            unsupported("model.type", "\"" + type + "\"", "strata implements the BPE model only (not WordPiece, Unigram, WordLevel)");
        if (const json* d = optional_field(model, "dropout"))
            unsupported("model.dropout", shown(*d), "BPE dropout is for training tokenizers; set it to null");
        for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
            if (const json* v = optional_field(model, key); v && !(v->is_string() && v->get<std::string>().empty()))
                unsupported(std::string("model.") + key, shown(*v), "BPE with subword prefixes or suffixes is not implemented; it must be null");
        m_t.ignore_merges = bool_field(model, "ignore_merges", "model", false);
        m_t.byte_fallback = bool_field(model, "byte_fallback", "model", false);
        m_t.fuse_unk = bool_field(model, "fuse_unk", "model", false);

        const json& vocab = field(model, "vocab", "model");
        if (!vocab.is_object()) fail("model.vocab", vocab, "expected an object {\"token\": id, ...}");
        for (const auto& [token, id_json] : vocab.items()) {
            const token_id id = id_value(id_json, "model.vocab[\"" + token + "\"]");
            m_t.vocab.emplace(token, id);
            set_token(id, token);
        }
        if (const json* unk = optional_field(model, "unk_token")) {
            if (!unk->is_string()) fail("model.unk_token", *unk, "expected a string or null");
            m_t.unk = vocab_id(unk->get<std::string>(), "model.unk_token");
        }
        static constexpr char hex[] = "0123456789ABCDEF";
        for (int b = 0; b < 256; ++b) {
            const std::string token = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
            const auto it = m_t.vocab.find(token);
            m_t.byte_fallback_id[static_cast<std::size_t>(b)] = it == m_t.vocab.end() ? -1 : it->second;
        }

        const json& merges = field(model, "merges", "model");
        if (!merges.is_array()) fail("model.merges", merges, "expected a list of \"left right\" strings or [left, right] pairs");
        std::uint32_t rank = 0;
        for (std::size_t i = 0; i < merges.size(); ++i) {
            const json& m = merges[i];
            const std::string where = "model.merges[" + std::to_string(i) + "]";
            std::string left, right;
            if (m.is_string()) {
                const std::string s = m.get<std::string>();
                const std::size_t space = s.find(' ');
                if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
                    fail(where, m, "a merge string is two tokens separated by one space");
                left = s.substr(0, space);
                right = s.substr(space + 1);
            } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
                left = m[0].get<std::string>();
                right = m[1].get<std::string>();
            } else {
                fail(where, m, "a merge is \"left right\" or [\"left\", \"right\"]");
            }
            const token_id left_id = vocab_id(left, where), right_id = vocab_id(right, where);
            const token_id merged_id = vocab_id(left + right, where);
            // A repeated pair keeps its last rank, as tokenizers does.
            m_t.merges.insert_or_assign(left_id, right_id, {rank++, merged_id});
        }
    }

    void read_added(const json& list) {
        if (!list.is_array()) fail("added_tokens", list, "expected a list of tokens");
        for (std::size_t i = 0; i < list.size(); ++i) {
            const json& a = list[i];
            const std::string where = "added_tokens[" + std::to_string(i) + "]";
            added_token t{string_field(a, "content", where), id_value(field(a, "id", where), where + ".id"),
                          bool_field(a, "special", where, false), bool_field(a, "lstrip", where, false),
                          bool_field(a, "rstrip", where, false), bool_field(a, "single_word", where, false),
                          bool_field(a, "normalized", where, false), i, {}};
            if (t.content.empty()) fail(where + ".content", a["content"], "an added token cannot be empty");
            set_token(t.id, t.content);
            m_t.added.push_back(std::move(t));
        }
    }

    std::string string_pattern(const json& step, const std::string& where) const {
        const json& pattern = field(step, "pattern", where);
        if (const json* s = pattern.is_object() ? optional_field(pattern, "String") : nullptr; s && s->is_string()) {
            if (s->get<std::string>().empty()) fail(where + ".pattern.String", *s, "an empty pattern matches everywhere");
            return s->get<std::string>();
        }
        unsupported(where + ".pattern", shown(pattern), "only {\"String\": ...} patterns are implemented here, not regexes");
    }

    void read_normalizer(const json& n, const std::string& where) {
        const std::string type = type_of(n, where);
        if (type == "Sequence") {
            const json& list = field(n, "normalizers", where);
            if (!list.is_array()) fail(where + ".normalizers", list, "expected a list");
            for (std::size_t i = 0; i < list.size(); ++i)
                read_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]");
        } else if (type == "NFC") {
            m_t.normalizers.push_back({normalizer_step::kind::nfc, {}, {}});
        } else if (type == "Prepend") {
            m_t.normalizers.push_back({normalizer_step::kind::prepend, {}, string_field(n, "prepend", where)});
        } else if (type == "Replace") {
            m_t.normalizers.push_back({normalizer_step::kind::replace, string_pattern(n, where), string_field(n, "content", where)});
        } else {
            unsupported(where + ".type", "\"" + type + "\"", "supported normalizers: NFC, Prepend, Replace (String pattern), Sequence");
        }
    }

    prepend_scheme metaspace_scheme(const json& p, const std::string& where) const {
        if (const json* s = optional_field(p, "prepend_scheme")) {
            const std::string v = s->is_string() ? s->get<std::string>() : std::string();
            if (v == "always") return prepend_scheme::always;
            if (v == "first") return prepend_scheme::first;
            if (v == "never") return prepend_scheme::never;
            fail(where + ".prepend_scheme", *s, "expected \"always\", \"first\" or \"never\"");
        }
        return bool_field(p, "add_prefix_space", where, true) ? prepend_scheme::always : prepend_scheme::never;
    }

    std::string replacement_of(const json& p, const std::string& where) const {
        const std::string r = string_field(p, "replacement", where);
        if (r.empty() || unicode::decode_utf8(r, 0).length != r.size())
            fail(where + ".replacement", p["replacement"], "the replacement is one character (\"▁\")");
        return r;
    }

    void read_pretokenizer(const json& p, const std::string& where) {
        using kind = pretokenizer_step::kind;
        const std::string type = type_of(p, where);
        if (type == "Sequence") {
            const json& list = field(p, "pretokenizers", where);
            if (!list.is_array()) fail(where + ".pretokenizers", list, "expected a list");
            for (std::size_t i = 0; i < list.size(); ++i)
                read_pretokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]");
        } else if (type == "ByteLevel") {
            pretokenizer_step s{kind::byte_level};
            s.add_prefix_space = bool_field(p, "add_prefix_space", where, true);
            s.use_regex = bool_field(p, "use_regex", where, true);
            m_t.pretokenizers.push_back(s);
        } else if (type == "Split") {
            const json& pattern = field(p, "pattern", where);
            const json* regex = pattern.is_object() ? optional_field(pattern, "Regex") : nullptr;
            if (!regex || !regex->is_string())
                unsupported(where + ".pattern", shown(pattern), "only the {\"Regex\": ...} patterns of GPT-2, Llama 3 and Qwen2 are implemented");
            const std::string r = regex->get<std::string>();
            pretokenizer_step s{r == gpt2_split_regex ? kind::split_gpt2 : r == llama3_split_regex ? kind::split_llama3 : kind::split_qwen2};
            if (r != gpt2_split_regex && r != llama3_split_regex && r != qwen2_split_regex)
                unsupported(where + ".pattern.Regex", shown(*regex),
                            "strata implements the split regexes of GPT-2, Llama 3 and Qwen2 by hand, exactly as "
                            "those files spell them, and has no general regex engine");
            const std::string behavior = string_field(p, "behavior", where);
            if (behavior != "Isolated")
                unsupported(where + ".behavior", "\"" + behavior + "\"", "only \"Isolated\" is implemented");
            if (bool_field(p, "invert", where, false)) unsupported(where + ".invert", "true", "only invert: false is implemented");
            m_t.pretokenizers.push_back(s);
        } else if (type == "Metaspace") {
            pretokenizer_step s{kind::metaspace};
            s.replacement = replacement_of(p, where);
            s.scheme = metaspace_scheme(p, where);
            s.split = bool_field(p, "split", where, true);
            m_t.pretokenizers.push_back(s);
        } else {
            unsupported(where + ".type", "\"" + type + "\"", "supported pre-tokenizers: ByteLevel, Split (GPT-2, Llama 3, Qwen2 regexes), Metaspace, Sequence");
        }
    }

    void read_post_processor(const json& p, const std::string& where) {
        const std::string type = type_of(p, where);
        if (type == "Sequence") {
            const json& list = field(p, "processors", where);
            if (!list.is_array()) fail(where + ".processors", list, "expected a list");
            for (std::size_t i = 0; i < list.size(); ++i)
                read_post_processor(list[i], where + ".processors[" + std::to_string(i) + "]");
        } else if (type == "ByteLevel") {
            // Adds no ids: it only trims offsets, which strata does not report.
        } else if (type == "TemplateProcessing") {
            const json& single = field(p, "single", where);
            if (!single.is_array()) fail(where + ".single", single, "expected a list of pieces");
            const json& specials = field(p, "special_tokens", where);
            bool seen_sequence = false;
            for (std::size_t i = 0; i < single.size(); ++i) {
                const std::string at = where + ".single[" + std::to_string(i) + "]";
                if (const json* seq = single[i].is_object() ? optional_field(single[i], "Sequence") : nullptr) {
                    if (string_field(*seq, "id", at + ".Sequence") != "A" || seen_sequence)
                        fail(at, single[i], "the single template holds sequence A once");
                    seen_sequence = true;
                } else if (const json* sp = single[i].is_object() ? optional_field(single[i], "SpecialToken") : nullptr) {
                    const std::string name = string_field(*sp, "id", at + ".SpecialToken");
                    const json& entry = field(specials, name.c_str(), where + ".special_tokens");
                    const json& ids = field(entry, "ids", where + ".special_tokens[\"" + name + "\"]");
                    if (!ids.is_array()) fail(where + ".special_tokens[\"" + name + "\"].ids", ids, "expected a list of ids");
                    for (const json& id : ids)
                        (seen_sequence ? m_t.template_suffix : m_t.template_prefix).push_back(id_value(id, at));
                } else {
                    fail(at, single[i], "a template piece is {\"Sequence\": ...} or {\"SpecialToken\": ...}");
                }
            }
            if (!seen_sequence) fail(where + ".single", single, "the single template must hold sequence A");
        } else {
            unsupported(where + ".type", "\"" + type + "\"", "supported post-processors: TemplateProcessing, ByteLevel, Sequence");
        }
    }

    void read_decoder(const json& d, const std::string& where) {
        using kind = decoder_step::kind;
        const std::string type = type_of(d, where);
        auto& steps = m_t.decoding.steps;
        if (type == "Sequence") {
            const json& list = field(d, "decoders", where);
            if (!list.is_array()) fail(where + ".decoders", list, "expected a list");
            for (std::size_t i = 0; i < list.size(); ++i) read_decoder(list[i], where + ".decoders[" + std::to_string(i) + "]");
        } else if (type == "ByteLevel") {
            steps.push_back({kind::byte_level});
        } else if (type == "Metaspace") {
            decoder_step s{kind::metaspace};
            s.content = replacement_of(d, where);
            s.drop_first_replacement = metaspace_scheme(d, where) != prepend_scheme::never;
            steps.push_back(s);
        } else if (type == "Replace") {
            decoder_step s{kind::replace};
            s.pattern = string_pattern(d, where);
            s.content = string_field(d, "content", where);
            steps.push_back(s);
        } else if (type == "ByteFallback") {
            steps.push_back({kind::byte_fallback});
        } else if (type == "Fuse") {
            steps.push_back({kind::fuse});
        } else if (type == "Strip") {
            decoder_step s{kind::strip};
            s.content = string_field(d, "content", where);
            if (s.content.empty() || unicode::decode_utf8(s.content, 0).length != s.content.size())
                fail(where + ".content", d["content"], "Strip's content is one character");
            for (auto [key, value] : {std::pair{"start", &s.start}, std::pair{"stop", &s.stop}}) {
                const json& v = field(d, key, where);
                if (!v.is_number_unsigned() || v.get<std::uint64_t>() > 1'000'000) fail(where + "." + key, v, "expected a count");
                *value = static_cast<std::size_t>(v.get<std::uint64_t>());
            }
            steps.push_back(s);
        } else {
            unsupported(where + ".type", "\"" + type + "\"", "supported decoders: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence");
        }
    }

    tables& m_t;
    std::uint64_t m_id_limit = 0;
};

}  // namespace strata::hf_detail
