// device_arena: the CPU backend's device tier. One bounded region of host memory, reserved up
// front (untouched pages cost nothing) and carved by a first-fit allocator, so "device memory"
// on the CPU has a hard capacity and can fragment, as real device memory can.
#pragma once

#include <strata/core/bytes.hpp>  // format_bytes, round_up
#include <strata/core/error.hpp>  // strata::error

#include <sys/mman.h>  // mmap, munmap

#include <cerrno>    // errno
#include <cstddef>   // std::size_t, std::byte
#include <cstring>   // std::strerror
#include <iterator>  // std::prev, std::next
#include <map>       // std::map
#include <mutex>     // std::mutex, std::lock_guard
#include <string>    // std::string

namespace strata::cpu {

class device_arena {
public:
    static constexpr std::size_t alignment = 256;  // what cudaMalloc guarantees

    explicit device_arena(std::size_t capacity) : m_capacity(round_up(capacity, page_size)) {
        if (m_capacity == 0) return;
        void* p = ::mmap(nullptr, m_capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            throw error("cannot reserve " + format_bytes(m_capacity) + " of address space for the CPU device arena: " +
                            std::strerror(errno),
                        "give the CPU backend a smaller device budget");
        m_base = static_cast<std::byte*>(p);
        m_free.emplace(0, m_capacity);
    }
    device_arena(const device_arena&) = delete;
    device_arena& operator=(const device_arena&) = delete;
    ~device_arena() {
        if (m_base) ::munmap(m_base, m_capacity);
    }

    // First fit. The caller has already reserved `bytes` in the device budget; failing here
    // despite that means fragmentation, which the message says.
    void* allocate(std::size_t bytes) {
        const std::size_t size = round_up(bytes == 0 ? 1 : bytes, alignment);
        std::lock_guard lock(m_mutex);
        for (auto it = m_free.begin(); it != m_free.end(); ++it) {
            if (it->second < size) continue;
            const std::size_t offset = it->first;
            const std::size_t rest = it->second - size;
            m_free.erase(it);
            if (rest) m_free.emplace(offset + size, rest);
            m_used.emplace(offset, size);
            return m_base + offset;
        }
        std::size_t largest = 0;
        for (auto& [offset, len] : m_free) largest = len > largest ? len : largest;
        throw error("CPU device arena is fragmented: no free block of " + format_bytes(size) + " (largest free block " +
                        format_bytes(largest) + " of " + format_bytes(m_capacity) + ")",
                    "free device tensors in the reverse order of allocation, or raise the device budget");
    }

    void deallocate(void* p) noexcept {
        if (!p) return;
        std::lock_guard lock(m_mutex);
        auto used = m_used.find(static_cast<std::size_t>(static_cast<std::byte*>(p) - m_base));
        if (used == m_used.end()) return;  // not ours: a programming error, but never corrupt the free list
        auto [offset, size] = *used;
        m_used.erase(used);
        auto next = m_free.lower_bound(offset);
        if (next != m_free.end() && offset + size == next->first) {  // merge with the following block
            size += next->second;
            next = m_free.erase(next);
        }
        if (next != m_free.begin()) {  // merge with the preceding block
            auto prev = std::prev(next);
            if (prev->first + prev->second == offset) {
                prev->second += size;
                return;
            }
        }
        m_free.emplace(offset, size);
    }

    std::size_t capacity() const { return m_capacity; }
    bool owns(const void* p) const {
        auto b = static_cast<const std::byte*>(p);
        return m_base && b >= m_base && b < m_base + m_capacity;
    }

private:
    std::size_t m_capacity;
    std::byte* m_base = nullptr;
    std::mutex m_mutex;
    std::map<std::size_t, std::size_t> m_free;  // offset -> length, coalesced
    std::map<std::size_t, std::size_t> m_used;  // offset -> length
};

}  // namespace strata::cpu
