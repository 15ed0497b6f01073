// Pinned host memory: the line the CLIs print, the refusal before the OS is asked, the error
// naming the bytes and the limits, and on every backend a host-tier allocation larger than a
// pinned chunk (on CUDA: registered chunk by chunk) that copies correctly across a chunk boundary.
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, make_backend

#include <strata/backend/pinning.hpp>  // format_pinning, pinning_limit_exceeded, pinning_error, pinned_chunk

#include <doctest/doctest.h>

#include <chrono>       // std::chrono::milliseconds
#include <cstddef>      // std::byte, std::size_t
#include <cstdint>      // std::uintptr_t
#include <cstring>      // std::memcmp
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace pinning_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

TEST_CASE("format_pinning: bytes, seconds and the rate") {
    CHECK(format_pinning({.bytes = 80ull << 30, .seconds = 12.3}) == "pinned 80.00 GiB of host memory in 12.3 s (6.50 GiB/s)");
    CHECK(format_pinning({.bytes = 3ull << 29, .seconds = 0.5}) == "pinned 1.50 GiB of host memory in 0.5 s (3.00 GiB/s)");
    CHECK(format_pinning({.bytes = 12ull << 20, .seconds = 0.00004}) == "pinned 12.00 MiB of host memory in 0.0 s");
    CHECK(format_pinning({}) == "pinned no host memory");
}

TEST_CASE("pinning_meter: totals grow, what is pinned now comes back down") {
    pinning_meter meter;
    meter.pinned(4096, std::chrono::milliseconds(250));
    meter.pinned(8192, std::chrono::milliseconds(750));
    meter.unpinned(4096);
    CHECK(meter.pinned_now() == 8192);
    CHECK(meter.stats().bytes == 12288);
    CHECK(meter.stats().seconds == doctest::Approx(1.0));
}

TEST_CASE("pinning_limit_exceeded: the cgroup limit counts what is pinned, MemAvailable what is asked") {
    const host_memory_limits limits{.memlock = 64u << 10, .cgroup_memory = 16ull << 30, .mem_available = 10ull << 30};
    CHECK_FALSE(pinning_limit_exceeded(1ull << 30, 14ull << 30, limits).has_value());  // RLIMIT_MEMLOCK only reported
    const auto over_cgroup = pinning_limit_exceeded(3ull << 30, 14ull << 30, limits);
    REQUIRE(over_cgroup.has_value());
    CHECK(over_cgroup->find("cgroup memory limit of 16.00 GiB") != std::string::npos);
    CHECK(pinning_limit_exceeded(1, 17ull << 30, limits).has_value());  // already over: nothing more
    const auto over_available = pinning_limit_exceeded(11ull << 30, 0, limits);
    REQUIRE(over_available.has_value());
    CHECK(over_available->find("MemAvailable") != std::string::npos);
    CHECK_FALSE(pinning_limit_exceeded(std::size_t{1} << 50, 0, host_memory_limits{}).has_value());  // none known
}

TEST_CASE("pinning_error names the bytes asked, the bytes pinned, the limits, and what to do") {
    const host_memory_limits limits{.memlock = std::nullopt, .cgroup_memory = std::nullopt, .mem_available = 20ull << 30};
    const error e = pinning_error("adamw.m", 24ull << 30, 4ull << 30,
                                  "cudaHostRegister of chunk 13 of 24 failed: cudaErrorMemoryAllocation", limits);
    const std::string what = e.what();
    CHECK(what.find("cannot pin 24.00 GiB (25769803776 B) of host memory for 'adamw.m'") != std::string::npos);
    CHECK(what.find("chunk 13 of 24") != std::string::npos);
    CHECK(what.find("4.00 GiB (4294967296 B) pinned already") != std::string::npos);
    CHECK(what.find("RLIMIT_MEMLOCK unlimited, cgroup memory limit none, MemAvailable 20.00 GiB") != std::string::npos);
    CHECK(e.hint().find("lower the host budget") != std::string::npos);
    CHECK(e.hint().find("ulimit -l") != std::string::npos);
    CHECK(e.hint().find("storage") != std::string::npos);
    CHECK(e.settings() == std::vector<std::string>{"host_budget", "storage_dir"});
}

TEST_CASE("bytes_to_chunk_end: copies split there stay inside one chunk") {
    auto* const base = reinterpret_cast<const std::byte*>(std::uintptr_t{7} * pinned_chunk);
    CHECK(bytes_to_chunk_end(base) == pinned_chunk);
    CHECK(bytes_to_chunk_end(base + 1) == pinned_chunk - 1);
    CHECK(bytes_to_chunk_end(base + pinned_chunk - 1) == 1);
}

TEST_CASE_TEMPLATE("a host-tier allocation past a pinned chunk: counted, charged as before, copied across the boundary",
                   B, STRATA_TEST_BACKENDS) {
    auto backend = test::make_backend<B>({.host_bytes = 2 * pinned_chunk});
    if (!backend) return;
    const std::size_t window = std::size_t{2} << 20;
    const std::size_t bytes = pinned_chunk + window + 5 * page_size + 123;  // chunked, the last chunk partial
    const std::size_t charged = round_up(bytes, page_size);
    const pinning_stats before = backend->pinning();

    auto* host = static_cast<std::byte*>(backend->allocate(tier_id::host, bytes, "big"));
    CHECK(backend->budget(tier_id::host).used() == charged);  // the budget is charged exactly as before
    CHECK(backend->pinning().bytes == before.bytes + charged);
    CHECK(backend->pinning().seconds >= before.seconds);
    if constexpr (B::name == std::string_view("cuda")) CHECK(is_aligned(host, pinned_chunk));

    // 2 MiB across the first chunk boundary of the allocation: host -> device -> host, back to a
    // window that crosses the boundary at another offset. Only these pages are touched.
    // (CUDA: the allocation starts on a chunk, so its first boundary is one chunk in; the CPU
    // backend's host memory has no registrations: any window inside will do.)
    std::byte* boundary = host + bytes_to_chunk_end(host);
    if (boundary < host + window || boundary + window > host + bytes) boundary = host + window;
    std::byte* const src = boundary - window / 2;
    std::byte* const dst = boundary - window / 4;
    REQUIRE(src >= host);
    REQUIRE(dst + window <= host + bytes);
    for (std::size_t i = 0; i < window; ++i) src[i] = static_cast<std::byte>(i * 7 + 1);
    const std::vector<std::byte> expected(src, src + window);
    void* device = backend->allocate(tier_id::device, window, "window");
    auto s = backend->make_stream("pinning test");
    backend->copy(device, tier_id::device, src, tier_id::host, window, s);
    backend->copy(dst, tier_id::host, device, tier_id::device, window, s).wait();
    CHECK(std::memcmp(dst, expected.data(), window) == 0);

    backend->deallocate(tier_id::device, device, window);
    backend->deallocate(tier_id::host, host, bytes);
    CHECK(backend->budget(tier_id::host).used() == 0);
    CHECK(backend->pinning().bytes == before.bytes + charged);  // a total: freeing does not take it back
}

#ifdef STRATA_TESTS_WITH_CUDA
TEST_CASE("cuda_backend: pinning more than MemAvailable is refused before the OS is asked") {
    const auto available = mem_available_bytes();
    if (!available) {
        test::skip("no MemAvailable in /proc/meminfo");
        return;
    }
    const std::size_t asked = round_up(*available + pinned_chunk, page_size);
    auto backend = test::make_backend<cuda_backend>({.host_bytes = 2 * asked});
    if (!backend) return;
    const pinning_stats before = backend->pinning();
    CHECK_THROWS_WITH_AS(backend->allocate(tier_id::host, asked, "too much"),
                         doctest::Contains("of host memory for 'too much': it is more than"), strata::error);
    CHECK(backend->budget(tier_id::host).used() == 0);  // nothing kept from the refused allocation
    CHECK(backend->pinning().bytes == before.bytes);
}
#endif

}  // namespace pinning_test
