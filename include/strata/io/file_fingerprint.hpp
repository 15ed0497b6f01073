// file_fingerprint: what tells one file's content from another's, cheaply enough to take of every
// file a checkpoint holds and of a run's data file: the size and a 64-bit hash of the content. A
// file of up to full_hash_limit bytes is hashed whole; a larger one through 64 blocks of 64 KiB
// spread evenly over it (the first and the last among them), so a 50 GB checkpoint costs 4 MiB of
// reading, not 50 GB. That tells a file from another step, run or data set (every weight changes
// at every step; two data files differ throughout), not a single flipped bit in an unsampled part:
// a fingerprint, not a checksum against corruption.
//
// The hash is FNV-1a over little-endian 64-bit words, with the size and each block's offset mixed
// in and splitmix64's finalizer at the end; it identifies, it does not authenticate.
#pragma once

#include <strata/io/atomic_write.hpp>  // detail::open_or_throw, read_exactly, file_size_of

#include <algorithm>   // std::min
#include <cstddef>     // std::byte, std::size_t
#include <cstdint>     // std::uint64_t
#include <cstring>     // std::memcpy
#include <filesystem>  // std::filesystem::path
#include <span>        // std::span
#include <string>      // std::string
#include <vector>      // std::vector

#include <fcntl.h>  // O_RDONLY

namespace strata {

struct file_fingerprint {
    std::uint64_t bytes = 0;  // the file's size
    std::string hash;         // 16 hex digits
    friend bool operator==(const file_fingerprint&, const file_fingerprint&) = default;
};

namespace detail {

class fingerprint_hash {
public:
    void add(std::uint64_t word) { m_h = (m_h ^ word) * 0x100000001b3ULL; }
    void add(std::span<const std::byte> bytes) {
        std::size_t i = 0;
        for (; i + 8 <= bytes.size(); i += 8) {
            std::uint64_t w;
            std::memcpy(&w, bytes.data() + i, 8);
            add(w);
        }
        std::uint64_t tail = 0;
        std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
        add(tail ^ (static_cast<std::uint64_t>(bytes.size() - i) << 56));
    }
    std::string hex() const {
        std::uint64_t z = m_h + 0x9e3779b97f4a7c15ULL;  // splitmix64's finalizer
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        static constexpr char digits[] = "0123456789abcdef";
        std::string out(16, '0');
        for (int i = 15; i >= 0; --i, z >>= 4) out[static_cast<std::size_t>(i)] = digits[z & 15];
        return out;
    }

private:
    std::uint64_t m_h = 0xcbf29ce484222325ULL;
};

}  // namespace detail

// Files up to this size are hashed whole.
inline constexpr std::uint64_t full_hash_limit = 64ull << 20;

// The fingerprint of the first `length` bytes of `path` (all of it by default, or when shorter).
inline file_fingerprint fingerprint_of(const std::filesystem::path& path, std::uint64_t length = ~0ull) {
    detail::unique_fd fd = detail::open_or_throw(path, O_RDONLY, "open for its fingerprint");
    const std::uint64_t size = std::min(length, detail::file_size_of(fd.get(), path));
    detail::fingerprint_hash h;
    h.add(size);
    constexpr std::uint64_t chunk = 1ull << 20, block = 64ull << 10, blocks = 64;
    std::vector<std::byte> buffer(static_cast<std::size_t>(size <= full_hash_limit ? std::min(chunk, size) : block));
    const auto hash_range = [&](std::uint64_t offset, std::uint64_t n) {
        const std::span<std::byte> part(buffer.data(), static_cast<std::size_t>(n));
        detail::read_exactly(fd.get(), part, offset, path);
        h.add(offset);
        h.add(part);
    };
    if (size <= full_hash_limit) {
        for (std::uint64_t offset = 0; offset < size; offset += chunk) hash_range(offset, std::min(chunk, size - offset));
    } else {
        const std::uint64_t stride = (size - block) / (blocks - 1);
        for (std::uint64_t i = 0; i < blocks; ++i) hash_range(i * stride, block);
    }
    return {size, h.hex()};
}

}  // namespace strata
