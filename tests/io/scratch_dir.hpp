// scratch_dir: a fresh directory per test under the system temp dir, removed afterwards, so tests
// never see each other's files and can list a directory to prove nothing was left behind.
#pragma once

#include <algorithm>   // std::sort
#include <atomic>      // std::atomic
#include <cstddef>     // std::byte
#include <filesystem>  // std::filesystem::path, create_directories, remove_all, directory_iterator
#include <fstream>     // std::ifstream, std::ofstream
#include <iterator>    // std::istreambuf_iterator
#include <string>      // std::string
#include <vector>      // std::vector

#include <unistd.h>  // getpid

namespace strata::test {

class scratch_dir {
public:
    scratch_dir() {
        static std::atomic<int> counter{0};
        m_path = std::filesystem::temp_directory_path() /
                 ("strata-io-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
        std::filesystem::remove_all(m_path);
        std::filesystem::create_directories(m_path);
    }
    scratch_dir(const scratch_dir&) = delete;
    scratch_dir& operator=(const scratch_dir&) = delete;
    ~scratch_dir() {
        std::error_code ec;
        std::filesystem::remove_all(m_path, ec);
    }

    const std::filesystem::path& path() const { return m_path; }
    std::filesystem::path operator/(const std::string& name) const { return m_path / name; }

    // Sorted names of the entries directly inside `dir` (default: the scratch dir itself).
    std::vector<std::string> list(const std::filesystem::path& dir = {}) const {
        std::vector<std::string> names;
        for (const auto& entry : std::filesystem::directory_iterator(dir.empty() ? m_path : dir))
            names.push_back(entry.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }

private:
    std::filesystem::path m_path;
};

inline std::string read_text(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

inline std::vector<std::byte> read_bytes(const std::filesystem::path& path) {
    const std::string text = read_text(path);
    const auto* first = reinterpret_cast<const std::byte*>(text.data());
    return {first, first + text.size()};
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace strata::test
