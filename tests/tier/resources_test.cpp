// The host-memory limits a pinned host tier runs into: the parsers of /proc/self/cgroup,
// memory.max / memory.limit_in_bytes and /proc/meminfo on sample texts, and the cgroup reader on
// sample directory trees (v2, v1, limits on a parent, "max", missing files); the free disk bytes
// of a directory not created yet.
#include <strata/tier/resources.hpp>  // cgroup_v2_path, parse_cgroup_memory_limit, cgroup_memory_limit_bytes, free_disk_bytes, ...

#include <doctest/doctest.h>

#include <io/scratch_dir.hpp>  // test::scratch_dir, write_text

#include <filesystem>  // std::filesystem::create_directories, current_path, exists
#include <string>      // std::to_string

#include <unistd.h>  // getpid

namespace resources_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {
// A cgroup v2 host (systemd) and a cgroup v1 host as /proc/self/cgroup shows them.
constexpr const char* v2_membership = "0::/user.slice/user-1000.slice/session-3.scope\n";
constexpr const char* v1_membership =
    "12:pids:/user.slice/user-1000.slice\n"
    "11:cpu,cpuacct:/user.slice\n"
    "9:memory:/user.slice/user-1000.slice/session-3.scope\n"
    "1:name=systemd:/user.slice/user-1000.slice/session-3.scope\n"
    "0::/user.slice/user-1000.slice/session-3.scope\n";  // hybrid: v2 is mounted, with no memory controller
}  // namespace

TEST_CASE("/proc/self/cgroup: the v2 path and the v1 memory controller's path") {
    CHECK(cgroup_v2_path(v2_membership) == "/user.slice/user-1000.slice/session-3.scope");
    CHECK_FALSE(cgroup_v1_memory_path(v2_membership).has_value());
    CHECK(cgroup_v1_memory_path(v1_membership) == "/user.slice/user-1000.slice/session-3.scope");
    CHECK(cgroup_v1_memory_path("4:cpu,memory,pids:/docker/abc\n") == "/docker/abc");
    CHECK_FALSE(cgroup_v1_memory_path("4:memoryx:/docker/abc\n").has_value());
    CHECK(cgroup_v2_path("0::/\n") == "/");
    CHECK_FALSE(cgroup_v2_path("").has_value());
    CHECK_FALSE(cgroup_v2_path("garbage without colons\n").has_value());
}

TEST_CASE("memory.max and memory.limit_in_bytes: a count, or no limit") {
    CHECK(parse_cgroup_memory_limit("17179869184\n") == 17179869184ull);
    CHECK_FALSE(parse_cgroup_memory_limit("max\n").has_value());
    CHECK_FALSE(parse_cgroup_memory_limit("9223372036854771712\n").has_value());  // v1's "no limit"
    CHECK_FALSE(parse_cgroup_memory_limit("").has_value());
    CHECK_FALSE(parse_cgroup_memory_limit("12G\n").has_value());
}

TEST_CASE("/proc/meminfo: MemAvailable in bytes") {
    const char* meminfo =
        "MemTotal:       527952540 kB\n"
        "MemFree:         1234567 kB\n"
        "MemAvailable:   412345678 kB\n"
        "Buffers:          12345 kB\n";
    CHECK(parse_mem_available(meminfo) == 412345678ull * 1024);
    CHECK_FALSE(parse_mem_available("MemTotal: 1 kB\nMemFree: 1 kB\n").has_value());  // kernels before 3.14
    CHECK_FALSE(parse_mem_available("XMemAvailable: 5 kB\n").has_value());
    CHECK_FALSE(parse_mem_available("MemAvailable: lots\n").has_value());
    CHECK_FALSE(parse_mem_available("MemAvailable: 18014398509481984 kB\n").has_value());  // 2^64 bytes
    CHECK(parse_mem_available("MemAvailable: 18014398509481983 kB\n") == 18014398509481983ull * 1024);
}

TEST_CASE("the cgroup memory limit: the smallest on the way up, v1 as fallback, none when absent") {
    test::scratch_dir dir;
    const auto membership = dir / "cgroup";
    const auto root = dir / "sys-fs-cgroup";
    const auto own = root / "user.slice" / "user-1000.slice" / "session-3.scope";

    SUBCASE("no /proc/self/cgroup, or no cgroup files: none") {
        CHECK_FALSE(cgroup_memory_limit_bytes(dir / "missing", root).has_value());
        test::write_text(membership, v2_membership);
        CHECK_FALSE(cgroup_memory_limit_bytes(membership, root).has_value());
    }
    SUBCASE("v2: the process's own limit") {
        test::write_text(membership, v2_membership);
        std::filesystem::create_directories(own);
        test::write_text(own / "memory.max", "8589934592\n");
        test::write_text(root / "user.slice" / "memory.max", "max\n");
        CHECK(cgroup_memory_limit_bytes(membership, root) == 8589934592ull);
    }
    SUBCASE("v2: a parent's smaller limit binds") {
        test::write_text(membership, v2_membership);
        std::filesystem::create_directories(own);
        test::write_text(own / "memory.max", "max\n");
        test::write_text(root / "user.slice" / "user-1000.slice" / "memory.max", "4294967296\n");
        CHECK(cgroup_memory_limit_bytes(membership, root) == 4294967296ull);
    }
    SUBCASE("v2: \"max\" all the way up is no limit") {
        test::write_text(membership, v2_membership);
        std::filesystem::create_directories(own);
        test::write_text(own / "memory.max", "max\n");
        CHECK_FALSE(cgroup_memory_limit_bytes(membership, root).has_value());
    }
    SUBCASE("v2 in a container: \"0::/\", the namespace's root has the limit") {
        test::write_text(membership, "0::/\n");
        std::filesystem::create_directories(root);
        test::write_text(root / "memory.max", "2147483648\n");
        CHECK(cgroup_memory_limit_bytes(membership, root) == 2147483648ull);
    }
    SUBCASE("v2: a cgroup outside the namespace (\"/../..\") reads only the root") {
        test::write_text(membership, "0::/../../elsewhere\n");
        std::filesystem::create_directories(root);
        test::write_text(root / "memory.max", "1073741824\n");
        CHECK(cgroup_memory_limit_bytes(membership, root) == 1073741824ull);
    }
    SUBCASE("v1 (hybrid): memory.limit_in_bytes under memory/, v1's huge count is no limit") {
        test::write_text(membership, v1_membership);
        const auto v1_own = root / "memory" / "user.slice" / "user-1000.slice" / "session-3.scope";
        std::filesystem::create_directories(v1_own);
        std::filesystem::create_directories(own);  // the v2 tree exists but has no memory.max
        test::write_text(v1_own / "memory.limit_in_bytes", "9223372036854771712\n");
        CHECK_FALSE(cgroup_memory_limit_bytes(membership, root).has_value());
        test::write_text(v1_own / "memory.limit_in_bytes", "6442450944\n");
        CHECK(cgroup_memory_limit_bytes(membership, root) == 6442450944ull);
    }
}

TEST_CASE("free_disk_bytes measures the nearest existing directory; a relative path from the current one") {
    // other processes write meanwhile: two readings of one file system agree to within 1 %
    const auto same_disk = [](std::size_t a, std::size_t b) {
        return static_cast<double>(a) == doctest::Approx(static_cast<double>(b)).epsilon(0.01);
    };
    const std::size_t here = free_disk_bytes(std::filesystem::current_path());
    REQUIRE(here > 0);
    // a run's --out before it is created (runs/gpt): not 0 ("", the end of its parents), but the
    // current directory's disk
    const std::filesystem::path missing = "strata-resources-test-missing-" + std::to_string(::getpid());
    REQUIRE_FALSE(std::filesystem::exists(missing));
    for (const std::filesystem::path& relative : {missing, missing / "below" / "deeper", std::filesystem::path(".")}) {
        CAPTURE(relative);
        CHECK(same_disk(free_disk_bytes(relative), here));
    }
    CHECK_FALSE(std::filesystem::exists(missing));  // measured, not created

    test::scratch_dir dir;
    const std::size_t scratch = free_disk_bytes(dir.path());
    CHECK(scratch > 0);
    CHECK(same_disk(free_disk_bytes(dir.path() / "a" / "b"), scratch));
    CHECK(same_disk(free_disk_bytes("/nonexistent-strata-dir/below"), free_disk_bytes("/")));
}

TEST_CASE("the limits of this machine read, and read as a sentence") {
    const host_memory_limits here = read_host_memory_limits();
    CHECK(here.mem_available.has_value());  // every Linux since 3.14
    const std::string text = describe(here);
    CHECK(text.find("RLIMIT_MEMLOCK ") == 0);
    CHECK(describe(host_memory_limits{}) == "RLIMIT_MEMLOCK unlimited, cgroup memory limit none, MemAvailable unknown");
    CHECK(describe(host_memory_limits{.memlock = 8u << 20, .cgroup_memory = 16ull << 30, .mem_available = 512}) ==
          "RLIMIT_MEMLOCK 8.00 MiB (8388608 B), cgroup memory limit 16.00 GiB (17179869184 B), MemAvailable 512 B");
}

}  // namespace resources_test
