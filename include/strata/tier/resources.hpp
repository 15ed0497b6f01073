// tier_resources: what every backend shares: the byte budget of each tier, the machine's
// defaults for them, and the storage directory where storage-tier tensors get their files.
// Also the operating system's limits on host memory (RLIMIT_MEMLOCK, the cgroup's memory limit,
// MemAvailable) that a pinned host tier runs into: small parsers of the files' text, then readers.
#pragma once

#include <strata/core/bytes.hpp>            // format_bytes, page_size, round_up
#include <strata/core/error.hpp>            // strata::error
#include <strata/storage/io_engine.hpp>     // io_engine, io_engine_options, make_io_engine, shared_io_engine
#include <strata/storage/storage_file.hpp>  // storage_file
#include <strata/tier/budget.hpp>           // tier_budget
#include <strata/tier/tier.hpp>             // tier_id

#include <sys/resource.h>  // getrlimit, RLIMIT_MEMLOCK
#include <sys/statvfs.h>   // statvfs
#include <unistd.h>        // sysconf, getpid

#include <algorithm>     // std::min, std::find
#include <cctype>        // std::isalnum
#include <charconv>      // std::from_chars
#include <cstddef>       // std::size_t
#include <filesystem>    // std::filesystem
#include <fstream>       // std::ifstream
#include <iterator>      // std::istreambuf_iterator
#include <memory>        // std::unique_ptr
#include <mutex>         // std::mutex
#include <optional>      // std::optional
#include <set>           // std::set
#include <string>        // std::string
#include <string_view>   // std::string_view
#include <system_error>  // std::errc

namespace strata {

// Budgets left empty take the machine's defaults (see tier_resources).
struct tier_options {
    std::optional<std::size_t> device_bytes;
    std::optional<std::size_t> host_bytes;
    std::optional<std::size_t> storage_bytes;
    std::filesystem::path storage_dir;  // empty: <temp dir>/strata-<pid>, removed when empty at the end
    // The storage tier's I/O engine: one made for this backend from these options (on its first
    // file), or, when empty, the process's shared_io_engine().
    std::optional<io_engine_options> io;
};

inline std::size_t physical_memory_bytes() {
    return static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(::sysconf(_SC_PAGE_SIZE));
}

// Free bytes at `dir` (or its nearest existing parent) for an unprivileged writer; 0 when none
// can be measured. A relative `dir` is resolved against the current directory first: walking up
// "runs/gpt" alone ends at "", which names no file system, and a run about to create its --out
// would be told the disk is full.
inline std::size_t free_disk_bytes(std::filesystem::path dir) {
    std::error_code ec;
    if (dir.is_relative()) {
        dir = std::filesystem::absolute(dir, ec);
        if (ec) return 0;  // no current directory to resolve it against
    }
    // exists() with an error code: a parent that cannot be searched reads as absent, and the walk
    // goes on up to one that can
    while (!dir.empty() && !std::filesystem::exists(dir, ec)) {
        if (dir == dir.parent_path()) return 0;  // the root itself cannot be read
        dir = dir.parent_path();
    }
    struct statvfs info {};
    if (dir.empty() || ::statvfs(dir.c_str(), &info) != 0) return 0;
    return static_cast<std::size_t>(info.f_bavail) * info.f_frsize;
}

// ---- the operating system's limits on host memory ----
//
// The parsers take a file's text (tests feed them samples); the readers read the real files.
// std::nullopt means "no limit" (or, for MemAvailable, "not known").

namespace detail {
inline std::string_view trim(std::string_view text) {
    const auto first = text.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) return {};
    return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

inline std::optional<std::size_t> parse_count(std::string_view text) {
    std::size_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) return std::nullopt;
    return value;
}

// Calls f(hierarchy_id, controllers, path) for each "id:controllers:path" line of /proc/self/cgroup.
template <class F>
void for_each_cgroup_line(std::string_view proc_self_cgroup, F&& f) {
    while (!proc_self_cgroup.empty()) {
        const auto end = proc_self_cgroup.find('\n');
        const std::string_view line = proc_self_cgroup.substr(0, end);
        proc_self_cgroup = end == std::string_view::npos ? std::string_view{} : proc_self_cgroup.substr(end + 1);
        const auto first = line.find(':');
        const auto second = first == std::string_view::npos ? first : line.find(':', first + 1);
        if (second == std::string_view::npos) continue;
        f(line.substr(0, first), line.substr(first + 1, second - first - 1), trim(line.substr(second + 1)));
    }
}

inline std::optional<std::string> read_text(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return std::nullopt;
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
}  // namespace detail

// The process's cgroup v2 path: the "0::/path" line of /proc/self/cgroup.
inline std::optional<std::string> cgroup_v2_path(std::string_view proc_self_cgroup) {
    std::optional<std::string> path;
    detail::for_each_cgroup_line(proc_self_cgroup, [&](std::string_view id, std::string_view controllers,
                                                       std::string_view p) {
        if (id == "0" && controllers.empty()) path = std::string(p);
    });
    return path;
}

// The process's cgroup v1 memory path: the line whose controllers include "memory"
// ("4:memory:/path", "7:cpu,memory:/path").
inline std::optional<std::string> cgroup_v1_memory_path(std::string_view proc_self_cgroup) {
    std::optional<std::string> path;
    detail::for_each_cgroup_line(proc_self_cgroup, [&](std::string_view, std::string_view controllers,
                                                       std::string_view p) {
        while (!controllers.empty()) {
            const auto comma = controllers.find(',');
            if (controllers.substr(0, comma) == "memory") path = std::string(p);
            controllers = comma == std::string_view::npos ? std::string_view{} : controllers.substr(comma + 1);
        }
    });
    return path;
}

// cgroup v1 writes "no limit" as the largest page-aligned signed 64-bit count (9223372036854771712);
// no machine has 4 EiB, so anything from here up is no limit.
inline constexpr std::size_t cgroup_no_limit_from = std::size_t{1} << 62;

// The text of memory.max (v2: bytes, or "max") or memory.limit_in_bytes (v1: bytes): the limit,
// or std::nullopt for no limit (and for text that is not a count).
inline std::optional<std::size_t> parse_cgroup_memory_limit(std::string_view text) {
    const auto limit = detail::parse_count(detail::trim(text));
    if (!limit || *limit >= cgroup_no_limit_from) return std::nullopt;
    return limit;
}

// MemAvailable of /proc/meminfo ("MemAvailable:   123456 kB") in bytes.
inline std::optional<std::size_t> parse_mem_available(std::string_view proc_meminfo) {
    constexpr std::string_view key = "MemAvailable:";
    std::size_t at = proc_meminfo.find(key);
    while (at != std::string_view::npos && at != 0 && proc_meminfo[at - 1] != '\n') at = proc_meminfo.find(key, at + 1);
    if (at == std::string_view::npos) return std::nullopt;
    std::string_view value = proc_meminfo.substr(at + key.size());
    value = detail::trim(value.substr(0, value.find('\n')));
    std::size_t scale = 1;
    if (value.ends_with("kB")) {
        scale = 1024;
        value = detail::trim(value.substr(0, value.size() - 2));
    }
    const auto count = detail::parse_count(value);
    if (!count || *count > static_cast<std::size_t>(-1) / scale) return std::nullopt;
    return *count * scale;
}

// The soft RLIMIT_MEMLOCK in bytes; std::nullopt when unlimited.
inline std::optional<std::size_t> memlock_limit_bytes() {
    struct rlimit limit {};
    if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
    return static_cast<std::size_t>(limit.rlim_cur);
}

// The memory limit of this process's cgroup: the smallest memory.max from its cgroup up to the
// root of `cgroup_root` (a parent's limit binds its children too; in a container the namespace's
// root is the container's own cgroup). cgroup v1's memory.limit_in_bytes under
// `cgroup_root`/memory when no v2 file is there. std::nullopt: no limit, or no cgroup files.
inline std::optional<std::size_t> cgroup_memory_limit_bytes(
    const std::filesystem::path& proc_self_cgroup = "/proc/self/cgroup",
    const std::filesystem::path& cgroup_root = "/sys/fs/cgroup") {
    const auto membership = detail::read_text(proc_self_cgroup);
    if (!membership) return std::nullopt;
    // The smallest limit in the files `file_name` from root/path up to root; found: any file read.
    const auto smallest = [](const std::filesystem::path& root, const std::string& path, const char* file_name,
                             bool& found) {
        std::filesystem::path relative = std::filesystem::path(path).relative_path().lexically_normal();
        if (std::find(relative.begin(), relative.end(), "..") != relative.end())
            relative.clear();  // a cgroup outside our namespace: only the namespace's root is visible
        std::optional<std::size_t> limit;
        for (std::filesystem::path dir = relative.empty() ? root : root / relative;; dir = dir.parent_path()) {
            if (const auto text = detail::read_text(dir / file_name)) {
                found = true;
                if (const auto here = parse_cgroup_memory_limit(*text)) limit = limit ? std::min(*limit, *here) : *here;
            }
            if (dir == root || dir == dir.parent_path()) break;
        }
        return limit;
    };
    bool found = false;
    if (const auto v2 = cgroup_v2_path(*membership)) {
        const auto limit = smallest(cgroup_root, *v2, "memory.max", found);
        if (found) return limit;
    }
    if (const auto v1 = cgroup_v1_memory_path(*membership))
        return smallest(cgroup_root / "memory", *v1, "memory.limit_in_bytes", found);
    return std::nullopt;
}

inline std::optional<std::size_t> mem_available_bytes(const std::filesystem::path& proc_meminfo = "/proc/meminfo") {
    const auto text = detail::read_text(proc_meminfo);
    return text ? parse_mem_available(*text) : std::nullopt;
}

// The limits that pinned host memory runs into, read now.
struct host_memory_limits {
    std::optional<std::size_t> memlock;        // RLIMIT_MEMLOCK; nullopt: unlimited
    std::optional<std::size_t> cgroup_memory;  // the cgroup's memory limit; nullopt: none
    std::optional<std::size_t> mem_available;  // MemAvailable; nullopt: not known
};

inline host_memory_limits read_host_memory_limits() {
    return {memlock_limit_bytes(), cgroup_memory_limit_bytes(), mem_available_bytes()};
}

// "RLIMIT_MEMLOCK unlimited, cgroup memory limit none, MemAvailable 100.00 GiB (107374182400 B)"
inline std::string describe(const host_memory_limits& limits) {
    return "RLIMIT_MEMLOCK " + (limits.memlock ? format_bytes(*limits.memlock) : std::string("unlimited")) +
           ", cgroup memory limit " + (limits.cgroup_memory ? format_bytes(*limits.cgroup_memory) : std::string("none")) +
           ", MemAvailable " + (limits.mem_available ? format_bytes(*limits.mem_available) : std::string("unknown"));
}

class tier_resources {
public:
    // `device_default` is the backend's own default (free GPU memory; a slice of RAM on the CPU).
    tier_resources(const tier_options& options, std::size_t device_default)
        : m_storage_dir(options.storage_dir.empty()
                            ? std::filesystem::temp_directory_path() / ("strata-" + std::to_string(::getpid()))
                            : options.storage_dir),
          m_own_dir(options.storage_dir.empty()),
          m_device(tier_id::device, options.device_bytes.value_or(device_default)),
          m_host(tier_id::host, options.host_bytes.value_or(physical_memory_bytes() / 10 * 9)),
          m_storage(tier_id::storage, options.storage_bytes.value_or(free_disk_bytes(m_storage_dir))),
          m_io_options(options.io) {}

    tier_resources(const tier_resources&) = delete;
    tier_resources& operator=(const tier_resources&) = delete;

    ~tier_resources() {
        std::error_code ignored;
        if (m_own_dir) std::filesystem::remove(m_storage_dir, ignored);  // only if empty
    }

    tier_budget& budget(tier_id t) {
        switch (t) {
            case tier_id::device: return m_device;
            case tier_id::host: return m_host;
            default: return m_storage;
        }
    }

    const std::filesystem::path& storage_dir() const { return m_storage_dir; }

    // A storage-tier file named after its tensor (stable across runs), unique while it lives.
    std::unique_ptr<storage_file> create_file(const std::string& tensor_name, std::size_t bytes) {
        const std::string file_name = sanitize(tensor_name) + ".strata";
        {
            std::lock_guard lock(m_mutex);
            if (!m_live_files.insert(file_name).second)
                throw error("two storage-tier tensors are named '" + tensor_name + "' (file " +
                                (m_storage_dir / file_name).string() + ")",
                            "give every storage-tier tensor a unique name");
        }
        try {
            m_storage.reserve(round_up(bytes, page_size), tensor_name);
            try {
                std::filesystem::create_directories(m_storage_dir);
                return std::make_unique<storage_file>(m_storage_dir / file_name, bytes, io());
            } catch (...) {
                m_storage.release(round_up(bytes, page_size));
                throw;
            }
        } catch (const std::filesystem::filesystem_error& e) {
            forget(file_name);
            throw error("cannot create the storage directory " + m_storage_dir.string() + ": " + e.code().message(),
                        "choose a writable storage directory (tier_options::storage_dir)");
        } catch (...) {
            forget(file_name);
            throw;
        }
    }

    // The engine this backend's storage files submit to (made here on first use when
    // tier_options::io named one).
    io_engine& io() {
        if (!m_io_options) return shared_io_engine();
        std::lock_guard lock(m_mutex);
        if (!m_io) m_io = make_io_engine(*m_io_options);
        return *m_io;
    }

    void destroy_file(std::unique_ptr<storage_file> file) noexcept {
        if (!file) return;
        m_storage.release(file->bytes_on_disk());
        forget(file->path().filename().string());
        file.reset();
    }

private:
    static std::string sanitize(const std::string& name) {
        std::string out = name.empty() ? "tensor" : name;
        for (char& c : out)
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) c = '_';
        return out;
    }
    void forget(const std::string& file_name) {
        std::lock_guard lock(m_mutex);
        m_live_files.erase(file_name);
    }

    std::filesystem::path m_storage_dir;
    bool m_own_dir;
    tier_budget m_device;
    tier_budget m_host;
    tier_budget m_storage;
    std::optional<io_engine_options> m_io_options;
    std::unique_ptr<io_engine> m_io;  // outlives every file: tensors die before their backend
    std::mutex m_mutex;
    std::set<std::string> m_live_files;
};

}  // namespace strata
