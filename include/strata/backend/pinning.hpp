// pinning: what both backends share about host-tier memory the OS has to pin (page-lock) for DMA.
//
// - pinned_chunk: a large host-tier allocation is pinned (cudaHostRegister) one chunk at a time,
//   each chunk aligned to its size in the address space, so a copy split at chunk boundaries
//   (bytes_to_chunk_end) never spans two registrations.
// - pinning_meter / pinning_stats: the bytes pinned and the seconds it took, for the CLI's
//   "pinned 80.00 GiB of host memory in 12.3 s (6.50 GiB/s)" (format_pinning).
// - pinning_limit_exceeded / pinning_error: one clear strata::error when the OS refuses, naming
//   the bytes asked, the bytes already pinned and the limits that apply (tier/resources.hpp).
#pragma once

#include <strata/core/bytes.hpp>      // format_bytes, format_bytes_short
#include <strata/core/error.hpp>      // strata::error
#include <strata/tier/resources.hpp>  // host_memory_limits, describe

#include <algorithm>  // std::min
#include <atomic>    // std::atomic
#include <chrono>    // std::chrono::steady_clock, duration
#include <cstddef>   // std::size_t
#include <cstdint>   // std::uintptr_t, std::int64_t
#include <cstdio>    // std::snprintf
#include <optional>  // std::optional
#include <string>    // std::string

namespace strata {

// Host-tier allocations larger than this are pinned chunk by chunk: one cudaHostRegister of 1 GiB
// takes a fraction of a second, so a failure comes early and says how far it got, where one
// giant cudaHostAlloc of 100 GiB takes minutes and fails all or nothing.
inline constexpr std::size_t pinned_chunk = std::size_t{1} << 30;

// Bytes from `p` to the next multiple of pinned_chunk in the address space (at least 1).
inline std::size_t bytes_to_chunk_end(const void* p) {
    return pinned_chunk - reinterpret_cast<std::uintptr_t>(p) % pinned_chunk;
}

// Host memory pinned by a backend since it was made (what was freed still counts).
struct pinning_stats {
    std::size_t bytes = 0;
    double seconds = 0;
};

// Counts a backend's pinned host memory: the total and the time for pinning_stats, and what is
// pinned now for error messages. Safe to use from several threads.
class pinning_meter {
public:
    void pinned(std::size_t bytes, std::chrono::steady_clock::duration took) noexcept {
        m_bytes.fetch_add(bytes, std::memory_order_relaxed);
        m_now.fetch_add(bytes, std::memory_order_relaxed);
        m_nanoseconds.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count(),
                                std::memory_order_relaxed);
    }
    void unpinned(std::size_t bytes) noexcept { m_now.fetch_sub(bytes, std::memory_order_relaxed); }

    std::size_t pinned_now() const noexcept { return m_now.load(std::memory_order_relaxed); }
    pinning_stats stats() const noexcept {
        return {m_bytes.load(std::memory_order_relaxed), static_cast<double>(m_nanoseconds.load(std::memory_order_relaxed)) * 1e-9};
    }

private:
    std::atomic<std::size_t> m_bytes{0};
    std::atomic<std::size_t> m_now{0};
    std::atomic<std::int64_t> m_nanoseconds{0};
};

// "pinned 80.00 GiB of host memory in 12.3 s (6.50 GiB/s)". The rate is left out under 0.1 s,
// where it would be noise (the CPU backend's allocations take microseconds).
inline std::string format_pinning(const pinning_stats& stats) {
    if (stats.bytes == 0) return "pinned no host memory";
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f s", stats.seconds);
    std::string text = "pinned " + format_bytes_short(stats.bytes) + " of host memory in " + seconds;
    if (stats.seconds >= 0.1)
        text += " (" + format_bytes_short(static_cast<std::size_t>(static_cast<double>(stats.bytes) / stats.seconds)) + "/s)";
    return text;
}

// Why pinning `asked` more bytes, with `already_pinned` pinned, cannot succeed, or std::nullopt.
// The cgroup limit is certain (going over it ends in the OOM killer, not in an error), and memory
// beyond MemAvailable could only come from swapping others out: pinned pages never swap, and
// getting them takes minutes of reclaim. RLIMIT_MEMLOCK is only reported: the NVIDIA driver's
// pinning does not go through mlock(), so the limit does not bind it on most systems.
inline std::optional<std::string> pinning_limit_exceeded(std::size_t asked, std::size_t already_pinned,
                                                         const host_memory_limits& limits) {
    if (limits.cgroup_memory && asked > *limits.cgroup_memory - std::min(already_pinned, *limits.cgroup_memory))
        return "it would exceed the cgroup memory limit of " + format_bytes(*limits.cgroup_memory);
    if (limits.mem_available && asked > *limits.mem_available)
        return "it is more than the " + format_bytes(*limits.mem_available) + " of MemAvailable";
    return std::nullopt;
}

// The error for a refused pin: `failure` says what failed ("cudaHostAlloc failed: ..." or the
// limit it would exceed).
inline error pinning_error(const std::string& what, std::size_t asked, std::size_t already_pinned,
                           const std::string& failure, const host_memory_limits& limits) {
    return error("cannot pin " + format_bytes(asked) + " of host memory for '" + what + "': " + failure +
                     "; this backend has " + format_bytes(already_pinned) + " pinned already; limits: " +
                     describe(limits),
                 "lower the host budget, raise the locked-memory limit (ulimit -l), or put the optimizer's moments on "
                 "storage (a storage directory)", {"host_budget", "storage_dir"});
}

}  // namespace strata
