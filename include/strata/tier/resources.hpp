// tier_resources: what every backend shares: the byte budget of each tier, the machine's
// defaults for them, and the storage directory where storage-tier tensors get their files.
#pragma once

#include <strata/core/bytes.hpp>            // format_bytes, page_size, round_up
#include <strata/core/error.hpp>            // strata::error
#include <strata/storage/storage_file.hpp>  // storage_file
#include <strata/tier/budget.hpp>           // tier_budget
#include <strata/tier/tier.hpp>             // tier_id

#include <sys/statvfs.h>  // statvfs
#include <unistd.h>       // sysconf, getpid

#include <cctype>      // std::isalnum
#include <cstddef>     // std::size_t
#include <filesystem>  // std::filesystem
#include <memory>      // std::unique_ptr
#include <mutex>       // std::mutex
#include <optional>    // std::optional
#include <set>         // std::set
#include <string>      // std::string

namespace strata {

// Budgets left empty take the machine's defaults (see tier_resources).
struct tier_options {
    std::optional<std::size_t> device_bytes;
    std::optional<std::size_t> host_bytes;
    std::optional<std::size_t> storage_bytes;
    std::filesystem::path storage_dir;  // empty: <temp dir>/strata-<pid>, removed when empty at the end
};

inline std::size_t physical_memory_bytes() {
    return static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(::sysconf(_SC_PAGE_SIZE));
}

// Free bytes at `dir` (or its nearest existing parent) for an unprivileged writer.
inline std::size_t free_disk_bytes(std::filesystem::path dir) {
    while (!dir.empty() && !std::filesystem::exists(dir)) dir = dir.parent_path();
    struct statvfs info {};
    if (dir.empty() || ::statvfs(dir.c_str(), &info) != 0) return 0;
    return static_cast<std::size_t>(info.f_bavail) * info.f_frsize;
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
          m_storage(tier_id::storage, options.storage_bytes.value_or(free_disk_bytes(m_storage_dir))) {}

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
                return std::make_unique<storage_file>(m_storage_dir / file_name, bytes);
            } catch (...) {
                m_storage.release(round_up(bytes, page_size));
                throw;
            }
        } catch (const std::filesystem::filesystem_error& e) {
            forget(file_name);
            throw error("cannot create the storage directory " + m_storage_dir.string() + ": " + e.code().message(),
                        "choose a writable --storage-dir");
        } catch (...) {
            forget(file_name);
            throw;
        }
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
    std::mutex m_mutex;
    std::set<std::string> m_live_files;
};

}  // namespace strata
