// The parsers of the host-memory limits a pinned host tier runs into (tier/resources.hpp): the
// text of /proc/self/cgroup, memory.max / memory.limit_in_bytes and /proc/meminfo. None throws;
// a path found is a piece of its line; a limit read is a real limit; counts printed and parsed
// back are the same, and a MemAvailable that would overflow in bytes is not known.
#include "fuzz_check.hpp"

#include <strata/tier/resources.hpp>  // cgroup_v2_path, cgroup_v1_memory_path, parse_cgroup_memory_limit, parse_mem_available, describe

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint8_t
#include <cstring>      // std::memcpy
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);

    for (const auto& path : {strata::cgroup_v2_path(text), strata::cgroup_v1_memory_path(text)})
        if (path) FUZZ_CHECK(text.find(*path) != std::string_view::npos);

    const auto limit = strata::parse_cgroup_memory_limit(text);
    if (limit) {
        FUZZ_CHECK(*limit < strata::cgroup_no_limit_from);
        FUZZ_CHECK(strata::parse_cgroup_memory_limit(std::to_string(*limit) + "\n") == limit);
    }
    const auto available = strata::parse_mem_available(text);
    (void)strata::describe({.memlock = limit, .cgroup_memory = limit, .mem_available = available});

    // The first 8 bytes as a count, written as each file writes it.
    std::size_t n = 0;
    if (size) std::memcpy(&n, data, size < sizeof n ? size : sizeof n);
    const auto as_limit = strata::parse_cgroup_memory_limit(std::to_string(n) + "\n");
    FUZZ_CHECK(n < strata::cgroup_no_limit_from ? as_limit == n : !as_limit);
    const auto as_available = strata::parse_mem_available("MemTotal: 1 kB\nMemAvailable:   " + std::to_string(n) + " kB\n");
    FUZZ_CHECK(n <= static_cast<std::size_t>(-1) / 1024 ? as_available == n * 1024 : !as_available);
    return 0;
}
