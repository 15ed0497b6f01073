// hf_weights: the weights of a Hugging Face model directory as they are published, read tensor by
// tensor into whatever memory the caller hands over.
//
// A directory holds either one `model.safetensors`, or shards `model-0000N-of-0000M.safetensors`
// listed by `model.safetensors.index.json`:
//
//     {"metadata": {"total_size": 16060522496},
//      "weight_map": {"model.embed_tokens.weight": "model-00001-of-00004.safetensors", ...}}
//
// Only the shards' headers are read when the directory is opened; read_as_float() then reads one
// tensor from its shard, converting BF16 and F16 to float exactly (core/float_formats.hpp), so a
// 14B checkpoint never needs its size in RAM, let alone twice. The index and the shards must
// agree: every listed shard exists and holds the tensors listed for it and no others, and a shard
// name is a plain file name inside the directory (never a path out of it).
#pragma once

#include <strata/core/error.hpp>      // strata::error
#include <strata/io/json_file.hpp>    // read_json_file
#include <strata/io/safetensors.hpp>  // safetensors_file, safetensors_tensor_info

#include <nlohmann/json.hpp>  // nlohmann::json

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <filesystem>   // std::filesystem::path, exists, is_regular_file
#include <map>          // std::map
#include <span>         // std::span
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <utility>      // std::move
#include <vector>       // std::vector

namespace strata {

class hf_weights {
public:
    static constexpr std::string_view single_file = "model.safetensors";
    static constexpr std::string_view index_file = "model.safetensors.index.json";

    // Opens the checkpoint in `dir`: the index when there is one, else the single file.
    static hf_weights open(const std::filesystem::path& dir) {
        hf_weights w;
        w.m_dir = dir;
        const std::filesystem::path index = dir / index_file;
        const std::filesystem::path single = dir / single_file;
        if (std::filesystem::exists(index)) {
            w.read_index(index);
        } else if (std::filesystem::exists(single)) {
            w.m_shards.push_back(safetensors_file::open_header(single));
            for (const std::string& name : w.m_shards.back().names()) w.m_shard_of.emplace(name, 0);
        } else {
            throw error("hf_weights: '" + dir.string() + "' holds neither " + std::string(index_file) + " nor " +
                            std::string(single_file),
                        "point at a Hugging Face model directory (the one with config.json and the weights)");
        }
        return w;
    }

    // Every tensor's name, sorted.
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        out.reserve(m_shard_of.size());
        for (const auto& [name, shard] : m_shard_of) out.push_back(name);
        return out;
    }
    std::size_t size() const noexcept { return m_shard_of.size(); }
    bool contains(std::string_view name) const { return m_shard_of.find(name) != m_shard_of.end(); }
    std::size_t shard_count() const noexcept { return m_shards.size(); }

    const safetensors_tensor_info& info(std::string_view name) const { return shard(name).info(name); }
    // The shard file that holds `name`.
    const std::string& source_of(std::string_view name) const { return shard(name).source(); }

    // Bytes of all tensors as stored (2 per element for BF16 and F16).
    std::uint64_t stored_bytes() const {
        std::uint64_t total = 0;
        for (const auto& [name, shard] : m_shard_of) {
            const safetensors_tensor_info& t = m_shards[shard].info(name);
            total += t.end - t.begin;
        }
        return total;
    }

    // The tensor as float (F32, BF16 and F16 exactly; other dtypes are refused with the name).
    void read_as_float(std::string_view name, std::span<float> destination) const {
        shard(name).read_as_float(name, destination);
    }

private:
    hf_weights() = default;

    const safetensors_file& shard(std::string_view name) const {
        const auto it = m_shard_of.find(name);
        if (it == m_shard_of.end())
            throw error("hf_weights: the checkpoint in '" + m_dir.string() + "' has no tensor '" + std::string(name) + "'",
                        "the checkpoint was made for another architecture, or a different naming of its weights");
        return m_shards[it->second];
    }

    [[noreturn]] static void bad_index(const std::filesystem::path& index, const std::string& what,
                                       const std::string& hint = "the index does not describe its shards; download "
                                                                 "the checkpoint again") {
        throw error("hf_weights: '" + index.string() + "': " + what, hint);
    }

    void read_index(const std::filesystem::path& index) {
        const nlohmann::json j = read_json_file(index);
        if (!j.is_object()) bad_index(index, std::string("is a JSON ") + j.type_name() + ", not an object");
        const auto map = j.find("weight_map");
        if (map == j.end() || !map->is_object())
            bad_index(index, "has no \"weight_map\" object (tensor name -> shard file)");
        if (map->empty()) bad_index(index, "\"weight_map\" lists no tensors");

        std::map<std::string, std::size_t, std::less<>> shard_index;  // file name -> m_shards
        std::vector<std::vector<std::string>> listed;                  // per shard: its tensors in the index
        for (const auto& [name, file] : map->items()) {
            if (!file.is_string())
                bad_index(index, "the shard of '" + name + "' is a JSON " + file.type_name() + ", not a file name");
            const std::string& shard_name = file.get_ref<const std::string&>();
            if (shard_name.empty() || shard_name == "." || shard_name == ".." ||
                shard_name.find('/') != std::string::npos || shard_name.find('\\') != std::string::npos)
                bad_index(index, "the shard of '" + name + "' is \"" + shard_name +
                                     "\", which is not a file name inside the checkpoint's directory",
                          "shards are plain file names next to the index; a path is refused");
            auto [it, added] = shard_index.emplace(shard_name, shard_index.size());
            if (added) listed.emplace_back();
            listed[it->second].push_back(name);
        }
        std::vector<const std::string*> file_of(shard_index.size());
        for (const auto& [file, i] : shard_index) file_of[i] = &file;
        for (std::size_t i = 0; i < listed.size(); ++i)
            for (const std::string& name : listed[i]) m_shard_of.emplace(name, i);
        m_shards.reserve(shard_index.size());
        for (std::size_t i = 0; i < file_of.size(); ++i) {
            const std::filesystem::path path = m_dir / *file_of[i];
            if (!std::filesystem::exists(path))
                bad_index(index, "lists the shard '" + *file_of[i] + "' (" + std::to_string(listed[i].size()) +
                                     " tensors, e.g. '" + listed[i].front() + "'), which is not in '" + m_dir.string() + "'",
                          "download every shard the index names");
            m_shards.push_back(safetensors_file::open_header(path));
            const safetensors_file& shard = m_shards.back();
            for (const std::string& name : listed[i])
                if (!shard.contains(name))
                    bad_index(index, "puts '" + name + "' in '" + *file_of[i] + "', which does not hold it");
            if (shard.size() == listed[i].size()) continue;  // it holds exactly the listed tensors
            for (const std::string& name : shard.names()) {
                const auto it = m_shard_of.find(name);
                if (it == m_shard_of.end())
                    bad_index(index, "does not list '" + name + "', which the shard '" + *file_of[i] + "' holds");
                if (it->second != i)
                    bad_index(index, "puts '" + name + "' in '" + *file_of[it->second] + "', but the shard '" +
                                         *file_of[i] + "' holds it too");
            }
        }
    }

    std::filesystem::path m_dir;
    std::vector<safetensors_file> m_shards;                      // header-only, files kept open
    std::map<std::string, std::size_t, std::less<>> m_shard_of;  // tensor name -> m_shards
};

}  // namespace strata
