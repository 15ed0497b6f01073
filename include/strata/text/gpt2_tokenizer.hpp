// gpt2_tokenizer: GPT-2's byte-level BPE, id for id the same as Hugging Face's GPT2TokenizerFast.
//
// Text is split at the literal "<|endoftext|>" (which becomes its own id, as Hugging Face does by
// default), each part is pre-tokenized (gpt2_pretokenizer.hpp), and each piece is encoded by
// applying merges.txt's merges, lowest rank first, to its bytes. The vocabulary's keys spell bytes
// through GPT-2's bytes_to_unicode table; we translate them back to raw bytes once at load, so
// encoding and decoding work on bytes and decode is the exact inverse of encode for any input,
// invalid UTF-8 included.
#pragma once

#include <strata/core/error.hpp>               // strata::error
#include <strata/text/gpt2_pretokenizer.hpp>   // gpt2_split
#include <strata/text/gpt2_vocab_files.hpp>    // gpt2_detail::vocab_reader, key_to_bytes, shown
#include <strata/text/tokenizer.hpp>           // token_id, Tokenizer

#include <algorithm>      // std::fill
#include <array>          // std::array
#include <cstddef>        // std::size_t, std::ptrdiff_t
#include <cstdint>        // std::uint32_t, std::uint64_t
#include <filesystem>     // std::filesystem::path
#include <fstream>        // std::ifstream
#include <functional>     // std::equal_to, std::hash
#include <iterator>       // std::istreambuf_iterator
#include <memory>         // std::shared_ptr
#include <mutex>          // std::mutex, std::lock_guard
#include <queue>          // std::priority_queue
#include <span>           // std::span
#include <string>         // std::string, std::to_string
#include <string_view>    // std::string_view
#include <unordered_map>  // std::unordered_map
#include <utility>        // std::move, std::pair
#include <vector>         // std::vector

namespace strata {

namespace gpt2_detail {

// Hashes by string_view so the vocabulary can be probed with a string_view.
struct string_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// Open-addressing tables for the two lookups BPE makes per piece. std::unordered_map chases two
// or three pointers per lookup, which made them most of the encoding time.
inline std::size_t mix(std::uint64_t key) noexcept {
    key ^= key >> 33;
    key *= 0xFF51AFD7ED558CCDull;
    return static_cast<std::size_t>(key ^ (key >> 33));
}

// (left id, right id) -> the merge's rank and the id it makes.
class merge_table {
public:
    struct merge {
        std::uint32_t rank;
        token_id merged;
    };

    void insert_or_assign(token_id left, token_id right, merge value) {
        if (2 * (m_size + 1) > m_slots.size()) grow();
        slot& s = probe(key_of(left, right));
        if (s.key == empty) ++m_size;
        s = {key_of(left, right), value};
    }

    const merge* find(token_id left, token_id right) const noexcept {
        if (m_slots.empty()) return nullptr;
        const std::uint64_t key = key_of(left, right);
        for (std::size_t i = mix(key) & (m_slots.size() - 1);; i = (i + 1) & (m_slots.size() - 1)) {
            if (m_slots[i].key == key) return &m_slots[i].value;
            if (m_slots[i].key == empty) return nullptr;
        }
    }

    std::size_t size() const noexcept { return m_size; }

private:
    struct slot {
        std::uint64_t key;
        merge value;
    };
    static constexpr std::uint64_t empty = ~std::uint64_t{0};  // ids are < 2^31, so no pair is this

    static std::uint64_t key_of(token_id left, token_id right) noexcept {
        return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
    }

    slot& probe(std::uint64_t key) {
        std::size_t i = mix(key) & (m_slots.size() - 1);
        while (m_slots[i].key != key && m_slots[i].key != empty) i = (i + 1) & (m_slots.size() - 1);
        return m_slots[i];
    }

    void grow() {
        std::vector<slot> old(m_slots.empty() ? 1024 : 2 * m_slots.size(), slot{empty, {}});
        old.swap(m_slots);
        for (const slot& s : old)
            if (s.key != empty) probe(s.key) = s;
    }

    std::vector<slot> m_slots;
    std::size_t m_size = 0;
};

// Pieces seen before -> their ids. Words repeat a lot (Zipf), so most pieces skip BPE. Keys and
// ids live in two flat arenas; when full it starts over, which bounds its memory.
class piece_cache {
public:
    static constexpr std::size_t max_entries = std::size_t{1} << 17;
    static constexpr std::size_t max_piece = 128;  // longer pieces are rare and not kept

    // Appends piece's ids to out and returns true when piece is cached.
    bool find(std::string_view piece, std::size_t hash, std::vector<token_id>& out) const {
        if (m_slots.empty()) return false;
        for (std::size_t i = hash & (m_slots.size() - 1);; i = (i + 1) & (m_slots.size() - 1)) {
            const slot& s = m_slots[i];
            if (s.ids_size == 0) return false;
            if (s.hash == hash && std::string_view(m_keys).substr(s.key_at, s.key_size) == piece) {
                out.insert(out.end(), m_ids.begin() + s.ids_at, m_ids.begin() + s.ids_at + s.ids_size);
                return true;
            }
        }
    }

    // piece must not be cached yet, and ids must not be empty.
    void insert(std::string_view piece, std::size_t hash, std::span<const token_id> ids) {
        if (m_size == max_entries) clear();
        if (2 * (m_size + 1) > m_slots.size()) grow();
        const slot s{hash, static_cast<std::uint32_t>(m_keys.size()), static_cast<std::uint32_t>(piece.size()),
                     static_cast<std::uint32_t>(m_ids.size()), static_cast<std::uint32_t>(ids.size())};
        m_keys.append(piece);
        m_ids.insert(m_ids.end(), ids.begin(), ids.end());
        place(s);
        ++m_size;
    }

private:
    struct slot {
        std::size_t hash;
        std::uint32_t key_at, key_size, ids_at, ids_size;  // ids_size == 0: a free slot
    };

    void place(const slot& s) {
        std::size_t i = s.hash & (m_slots.size() - 1);
        while (m_slots[i].ids_size != 0) i = (i + 1) & (m_slots.size() - 1);
        m_slots[i] = s;
    }

    void grow() {
        std::vector<slot> old(m_slots.empty() ? 4096 : 2 * m_slots.size(), slot{});
        old.swap(m_slots);
        for (const slot& s : old)
            if (s.ids_size != 0) place(s);
    }

    void clear() {
        std::fill(m_slots.begin(), m_slots.end(), slot{});
        m_keys.clear();
        m_ids.clear();
        m_size = 0;
    }

    std::vector<slot> m_slots;
    std::string m_keys;
    std::vector<token_id> m_ids;
    std::size_t m_size = 0;
};

// A piece_cache that threads share (tokenizers are copied into loader threads): the lookup and
// the insertion under a lock, the BPE outside it.
class shared_piece_cache {
public:
    // Appends piece's ids: the cached ones, else compute(piece, ids)'s, which are then cached.
    template <class Compute>
    void encode(std::string_view piece, std::vector<token_id>& ids, Compute&& compute) {
        if (piece.size() > piece_cache::max_piece) {
            compute(piece, ids);
            return;
        }
        const std::size_t hash = std::hash<std::string_view>{}(piece);
        {
            std::lock_guard lock(m_mutex);
            if (m_cache.find(piece, hash, ids)) return;
        }
        const std::size_t first = ids.size();
        compute(piece, ids);
        if (ids.size() == first) return;  // the cache cannot hold an empty result
        std::lock_guard lock(m_mutex);
        // Another thread may have cached it meanwhile; the cache holds each piece once.
        std::vector<token_id> scratch;
        if (!m_cache.find(piece, hash, scratch)) m_cache.insert(piece, hash, std::span<const token_id>(ids).subspan(first));
    }

private:
    std::mutex m_mutex;
    piece_cache m_cache;
};

// Byte-pair merging as Hugging Face's tokenizers does it: always the pair of lowest rank next,
// the leftmost among equals, over a linked list of symbols with a heap of candidate pairs
// (n log n, so a megabyte without spaces is no trap). Appends the merged ids of start to ids.
inline void merge_pairs(std::span<const token_id> start, const merge_table& merges, std::vector<token_id>& ids) {
    if (start.size() <= 1) {
        ids.insert(ids.end(), start.begin(), start.end());
        return;
    }
    struct symbol {
        token_id id;
        std::ptrdiff_t prev, next;  // -1 at the ends; a merged-away symbol is skipped by both
        bool alive;
    };
    struct candidate {
        std::uint32_t rank;
        std::ptrdiff_t left;  // symbol index
        token_id merged;
        bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    const auto n = static_cast<std::ptrdiff_t>(start.size());
    std::vector<symbol> symbols(start.size());
    for (std::ptrdiff_t i = 0; i < n; ++i)
        symbols[static_cast<std::size_t>(i)] = {start[static_cast<std::size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1, true};
    const auto at = [&](std::ptrdiff_t i) -> symbol& { return symbols[static_cast<std::size_t>(i)]; };
    std::priority_queue<candidate, std::vector<candidate>, std::greater<>> queue;
    const auto offer = [&](std::ptrdiff_t left) {
        const std::ptrdiff_t right = at(left).next;
        if (right < 0) return;
        if (const auto* m = merges.find(at(left).id, at(right).id)) queue.push({m->rank, left, m->merged});
    };
    for (std::ptrdiff_t i = 0; i + 1 < n; ++i) offer(i);

    while (!queue.empty()) {
        const candidate top = queue.top();
        queue.pop();
        symbol& left = at(top.left);
        if (!left.alive || left.next < 0) continue;
        symbol& right = at(left.next);
        // Stale when either side has merged since this candidate was offered.
        const auto* m = merges.find(left.id, right.id);
        if (!m || m->merged != top.merged) continue;
        left.id = top.merged;
        right.alive = false;
        left.next = right.next;
        if (right.next >= 0) at(right.next).prev = top.left;
        if (left.prev >= 0) offer(left.prev);
        offer(top.left);
    }
    for (std::ptrdiff_t i = 0; i >= 0; i = at(i).next) ids.push_back(at(i).id);
}

}  // namespace gpt2_detail

class gpt2_tokenizer {
public:
    static constexpr std::string_view eot_text = "<|endoftext|>";

    // Reads dir/vocab.json and dir/merges.txt, as a GPT-2 checkpoint ships them.
    static gpt2_tokenizer load(const std::filesystem::path& dir) {
        const std::filesystem::path vocab_path = dir / "vocab.json";
        const std::filesystem::path merges_path = dir / "merges.txt";
        return from_strings(read_file(vocab_path), read_file(merges_path), vocab_path.string(), merges_path.string());
    }

    // The same from the files' contents; the names only label error messages.
    static gpt2_tokenizer from_strings(std::string_view vocab_json, std::string_view merges_txt,
                                       std::string_view vocab_name = "vocab.json",
                                       std::string_view merges_name = "merges.txt") {
        auto tables = std::make_shared<gpt2_tokenizer::tables>();
        id_map id_of;  // only loading looks tokens up by their bytes
        read_vocab(*tables, id_of, vocab_json, vocab_name);
        read_merges(*tables, id_of, merges_txt, merges_name);
        return gpt2_tokenizer(std::move(tables));
    }

    // Hugging Face's default: "<|endoftext|>" in the text becomes eot_id(), the rest is BPE.
    std::vector<token_id> encode(std::string_view text) const {
        std::vector<token_id> ids;
        ids.reserve(text.size() / 3 + 1);
        for (std::size_t pos = 0; pos <= text.size();) {
            const std::size_t found = text.find(eot_text, pos);
            encode_ordinary_into(text.substr(pos, found == std::string_view::npos ? std::string_view::npos : found - pos), ids);
            if (found == std::string_view::npos) break;
            ids.push_back(m_tables->eot);
            pos = found + eot_text.size();
        }
        return ids;
    }

    // No special tokens: "<|endoftext|>" in the text is encoded as the characters it is.
    std::vector<token_id> encode_ordinary(std::string_view text) const {
        std::vector<token_id> ids;
        ids.reserve(text.size() / 3 + 1);
        encode_ordinary_into(text, ids);
        return ids;
    }

    // The bytes of the tokens, concatenated; end-of-text decodes to "<|endoftext|>" as in Hugging
    // Face, so that decode(encode(text)) == text.
    std::string decode(std::span<const token_id> ids) const {
        std::string text;
        text.reserve(ids.size() * 4);
        for (token_id id : ids) text += token_bytes(id);
        return text;
    }

    // The raw bytes one token stands for (not necessarily whole UTF-8 characters).
    std::string_view token_bytes(token_id id) const {
        if (id < 0 || id >= vocab_size())
            throw error("gpt2_tokenizer: token id " + std::to_string(id) + " is out of range [0, " +
                            std::to_string(vocab_size()) + ")",
                        "the ids were not produced by this GPT-2 vocabulary; check which tokenizer made them", {"tokenizer"});
        return m_tables->bytes_of[static_cast<std::size_t>(id)];
    }

    token_id eot_id() const { return m_tables->eot; }
    token_id vocab_size() const { return static_cast<token_id>(m_tables->bytes_of.size()); }
    std::string_view name() const { return "gpt2"; }

private:
    using id_map = std::unordered_map<std::string, token_id, gpt2_detail::string_hash, std::equal_to<>>;

    // What encoding and decoding need from the files; immutable after load and shared by copies.
    struct tables {
        std::vector<std::string> bytes_of;  // id -> raw bytes
        std::array<token_id, 256> byte_id{};
        gpt2_detail::merge_table merges;
        token_id eot = -1;
    };

    // The piece cache is shared by copies of a tokenizer and guarded, since encode is const and may
    // run on threads.
    explicit gpt2_tokenizer(std::shared_ptr<const tables> t)
        : m_tables(std::move(t)), m_cache(std::make_shared<gpt2_detail::shared_piece_cache>()) {}

    static std::string read_file(const std::filesystem::path& path) {
        std::ifstream in(path, std::ios::binary);
        if (!in)
            throw error("gpt2_tokenizer: cannot read " + path.string(),
                        "pass the folder that holds a GPT-2 checkpoint's vocab.json and merges.txt");
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }

    static void read_vocab(tables& t, id_map& id_of, std::string_view json, std::string_view file_name) {
        gpt2_detail::vocab_reader reader(json, file_name);
        struct entry {
            std::string key, bytes;
            token_id id;
            std::size_t key_at;
        };
        std::vector<entry> entries;
        std::string bytes, why_not;
        reader.read([&](const std::string& key, token_id id, std::size_t key_at) {
            if (!gpt2_detail::key_to_bytes(key, bytes, why_not))
                reader.fail(key_at, "token " + gpt2_detail::shown(key) + " " + why_not);
            entries.push_back({key, bytes, id, key_at});
        });
        // Ids index the decode table, so they must be exactly 0..n-1 (checked before sizing it by them).
        t.bytes_of.resize(entries.size());
        std::vector<const entry*> owner(entries.size(), nullptr);
        for (const entry& e : entries) {
            const auto id = static_cast<std::size_t>(e.id);
            if (id >= entries.size())
                reader.fail(e.key_at, "id " + std::to_string(e.id) + " of " + gpt2_detail::shown(e.key) +
                                          " is not below the number of tokens, " + std::to_string(entries.size()) +
                                          " (ids must be 0, 1, ... without gaps)");
            if (owner[id])
                reader.fail(e.key_at, "id " + std::to_string(e.id) + " of " + gpt2_detail::shown(e.key) +
                                          " is already the id of " + gpt2_detail::shown(owner[id]->key));
            if (!id_of.emplace(e.bytes, e.id).second)
                reader.fail(e.key_at, "token " + gpt2_detail::shown(e.key) + " appears twice");
            owner[id] = &e;
            t.bytes_of[id] = e.bytes;
        }
        const std::string file(file_name);
        const std::string hint = "vocab.json must be GPT-2's vocabulary: one JSON object {\"token\": id, ...}";
        for (int b = 0; b < 256; ++b) {
            const auto it = id_of.find(std::string(1, static_cast<char>(b)));
            if (it == id_of.end())
                throw error("gpt2_tokenizer: " + file + " has no token for byte " + std::to_string(b) +
                                " (a byte-level vocabulary needs all 256)",
                            hint);
            t.byte_id[static_cast<std::size_t>(b)] = it->second;
        }
        const auto eot = id_of.find(eot_text);
        if (eot == id_of.end())
            throw error("gpt2_tokenizer: " + file + " has no \"<|endoftext|>\" token", hint);
        t.eot = eot->second;
    }

    static void read_merges(tables& t, const id_map& id_of, std::string_view text, std::string_view file_name) {
        const std::string file(file_name);
        const std::string hint = "merges.txt must be GPT-2's: a \"#version\" line, then one \"left right\" pair per line";
        std::size_t line_no = 0;
        std::uint32_t rank = 0;
        std::string left, right, why_not;
        std::size_t pos = 0;
        while (pos < text.size()) {
            std::size_t end = text.find('\n', pos);
            if (end == std::string_view::npos) end = text.size();
            std::string_view line = text.substr(pos, end - pos);
            pos = end + 1;
            ++line_no;
            if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
            if (line_no == 1 && line.starts_with("#version")) continue;
            const auto fail = [&](const std::string& what) {
                throw error("gpt2_tokenizer: " + file + " line " + std::to_string(line_no) + ": " + what, hint);
            };
            if (line.empty()) {
                if (text.find_first_not_of("\r\n", pos) == std::string_view::npos) break;  // trailing blank lines
                fail("empty line");
            }
            const std::size_t space = line.find(' ');
            if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
                line.find(' ', space + 1) != std::string_view::npos)
                fail("expected two tokens separated by one space, found " + gpt2_detail::shown(line));
            const std::string_view left_key = line.substr(0, space), right_key = line.substr(space + 1);
            if (!gpt2_detail::key_to_bytes(left_key, left, why_not))
                fail("token " + gpt2_detail::shown(left_key) + " " + why_not);
            if (!gpt2_detail::key_to_bytes(right_key, right, why_not))
                fail("token " + gpt2_detail::shown(right_key) + " " + why_not);
            const auto id_or_fail = [&](const std::string& bytes, std::string_view key) {
                const auto it = id_of.find(bytes);
                if (it == id_of.end()) fail("token " + gpt2_detail::shown(key) + " is not in vocab.json");
                return it->second;
            };
            const token_id left_id = id_or_fail(left, left_key);
            const token_id right_id = id_or_fail(right, right_key);
            const token_id merged_id = id_or_fail(left + right, std::string(left_key) + std::string(right_key));
            // A repeated pair keeps its last rank, as Hugging Face's tokenizers does.
            t.merges.insert_or_assign(left_id, right_id, {rank++, merged_id});
        }
    }

    void encode_ordinary_into(std::string_view text, std::vector<token_id>& ids) const {
        gpt2_split(text, [&](std::string_view piece) { encode_piece(piece, ids); });
    }

    void encode_piece(std::string_view piece, std::vector<token_id>& ids) const {
        if (piece.size() == 1) {
            ids.push_back(m_tables->byte_id[static_cast<unsigned char>(piece[0])]);
            return;
        }
        m_cache->encode(piece, ids, [this](std::string_view p, std::vector<token_id>& out) { bpe(p, out); });
    }

    void bpe(std::string_view piece, std::vector<token_id>& ids) const {
        std::vector<token_id> start(piece.size());
        for (std::size_t i = 0; i < piece.size(); ++i) start[i] = m_tables->byte_id[static_cast<unsigned char>(piece[i])];
        gpt2_detail::merge_pairs(start, m_tables->merges, ids);
    }

    std::shared_ptr<const tables> m_tables;
    std::shared_ptr<gpt2_detail::shared_piece_cache> m_cache;
};

static_assert(Tokenizer<gpt2_tokenizer>);

}  // namespace strata
