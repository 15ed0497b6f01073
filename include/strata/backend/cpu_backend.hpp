// cpu_backend: the whole tier/stream/event architecture on a machine without a GPU.
//
// The device tier is a bounded arena in host memory (cpu::device_arena), streams are worker
// threads (cpu::stream), and every copy is a task on a stream that yields an event, exactly as
// on the CUDA backend. The asynchronous logic above it therefore really runs, and really races,
// in CI, where ThreadSanitizer watches it.
//
// pinning() counts the host tier's allocations as if pinned, with the real time aligned_alloc
// took: nothing is page-locked and no page is touched, so the seconds are next to nothing.
#pragma once

#include <strata/backend/cpu/arena.hpp>     // cpu::device_arena
#include <strata/backend/cpu/stream.hpp>    // cpu::stream, cpu::event
#include <strata/backend/pinning.hpp>       // pinning_meter, pinning_stats
#include <strata/core/bytes.hpp>            // page_size, round_up, format_bytes
#include <strata/core/error.hpp>            // strata::error
#include <strata/storage/storage_file.hpp>  // storage_file
#include <strata/tier/resources.hpp>        // tier_resources, tier_options
#include <strata/tier/tier.hpp>             // tier_id

#include <chrono>       // std::chrono::steady_clock
#include <cstddef>      // std::size_t, std::byte
#include <cstdlib>      // std::aligned_alloc, std::free
#include <cstring>      // std::memcpy, std::memset
#include <memory>       // std::unique_ptr
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace strata {

class cpu_backend {
public:
    using stream = cpu::stream;
    using event = cpu::event;
    static constexpr std::string_view name = "cpu";

    // The CPU stand-in for GPU memory defaults to a quarter of RAM: address space is reserved,
    // pages are only used when touched.
    explicit cpu_backend(const tier_options& options = {})
        : m_tiers(options, physical_memory_bytes() / 4), m_arena(m_tiers.budget(tier_id::device).limit()) {}

    cpu_backend(const cpu_backend&) = delete;
    cpu_backend& operator=(const cpu_backend&) = delete;

    tier_budget& budget(tier_id t) { return m_tiers.budget(t); }
    const std::filesystem::path& storage_dir() const { return m_tiers.storage_dir(); }

    // The host tier's allocations so far and the time they took (see the top of this file).
    pinning_stats pinning() const { return m_pinning.stats(); }

    stream make_stream(std::string stream_name) { return stream(std::move(stream_name)); }

    // ---- memory of the addressable tiers (device, host) ----

    void* allocate(tier_id t, std::size_t bytes, const std::string& what) {
        auto& budget = m_tiers.budget(t);
        const std::size_t charged = charge(bytes);
        budget.reserve(charged, what);
        try {
            if (t == tier_id::device) return m_arena.allocate(charged);
            const auto start = std::chrono::steady_clock::now();
            void* p = std::aligned_alloc(page_size, charged);
            if (!p) throw error("out of host memory allocating " + format_bytes(charged) + " for '" + what + "'",
                                "lower the host tier budget to what the machine has");
            m_pinning.pinned(charged, std::chrono::steady_clock::now() - start);
            return p;
        } catch (...) {
            budget.release(charged);
            throw;
        }
    }

    void deallocate(tier_id t, void* p, std::size_t bytes) noexcept {
        if (t == tier_id::device) {
            m_arena.deallocate(p);
        } else {
            std::free(p);
            m_pinning.unpinned(charge(bytes));
        }
        m_tiers.budget(t).release(charge(bytes));
    }

    // ---- files of the storage tier ----

    std::unique_ptr<storage_file> create_file(const std::string& tensor_name, std::size_t bytes) {
        return m_tiers.create_file(tensor_name, bytes);
    }
    void destroy_file(std::unique_ptr<storage_file> file) noexcept { m_tiers.destroy_file(std::move(file)); }

    // ---- asynchronous copies and fills: each is a task on `s` and yields the event that marks its end ----

    event copy(void* dst, tier_id, const void* src, tier_id, std::size_t bytes, stream& s) {
        if (bytes) s.enqueue([=] { std::memcpy(dst, src, bytes); }, "copy");
        return s.record();
    }

    // `bytes` zero bytes at dst (device or host tier), a task on `s` like a copy.
    event zero(void* dst, tier_id, std::size_t bytes, stream& s) {
        if (bytes) s.enqueue([=] { std::memset(dst, 0, bytes); }, "zero");
        return s.record();
    }

    // Storage I/O: one task on the stream (ordered by events like any copy); inside it the
    // storage_file's io_engine keeps many chunk requests in flight.
    event read(void* dst, tier_id, const storage_file& src, std::size_t offset, std::size_t bytes, stream& s) {
        s.enqueue([=, &src] { src.read(offset, dst, bytes); }, "storage read");
        return s.record();
    }

    event write(storage_file& dst, std::size_t offset, const void* src, tier_id, std::size_t bytes, stream& s) {
        s.enqueue([=, &dst] { dst.write(offset, src, bytes); }, "storage write");
        return s.record();
    }

    event copy(storage_file& dst, std::size_t dst_offset, const storage_file& src, std::size_t src_offset,
               std::size_t bytes, stream& s) {
        s.enqueue([=, &dst, &src] { storage_file::copy(dst, dst_offset, src, src_offset, bytes); }, "storage copy");
        return s.record();
    }

private:
    // Allocations are padded to whole pages, and the budget is charged what is really taken.
    static std::size_t charge(std::size_t bytes) { return round_up(bytes == 0 ? 1 : bytes, page_size); }

    tier_resources m_tiers;
    cpu::device_arena m_arena;
    pinning_meter m_pinning;
};

}  // namespace strata
