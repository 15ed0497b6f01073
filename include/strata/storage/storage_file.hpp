// storage_file: one tensor's home on the storage tier, a file on local disk/NVMe.
//
// I/O is page-aligned with O_DIRECT where the file system allows it (the page cache would only
// double-buffer data that strata already stages in pinned memory). Where O_DIRECT is refused
// (tmpfs, some overlay file systems) the file is opened buffered and that is logged once.
// The file is preallocated, so "disk full" is an error at creation, not halfway through training.
#pragma once

#include <strata/core/bytes.hpp>  // page_size, round_up, round_down, is_aligned, format_bytes
#include <strata/core/error.hpp>  // strata::error
#include <strata/core/log.hpp>    // log_note

#include <fcntl.h>     // open, O_DIRECT, posix_fallocate
#include <sys/stat.h>  // mode constants
#include <unistd.h>    // pread, pwrite, close, unlink

#include <algorithm>   // std::min, std::max
#include <atomic>      // std::atomic
#include <cerrno>      // errno
#include <cstddef>     // std::size_t, std::byte
#include <cstdlib>     // std::aligned_alloc, std::free
#include <cstring>     // std::memcpy, std::strerror
#include <filesystem>  // std::filesystem::path
#include <memory>      // std::unique_ptr
#include <string>      // std::string

namespace strata {

namespace detail {
struct aligned_free {
    void operator()(std::byte* p) const noexcept { std::free(p); }
};
using aligned_buffer = std::unique_ptr<std::byte[], aligned_free>;

inline aligned_buffer make_aligned_buffer(std::size_t bytes) {
    auto* p = static_cast<std::byte*>(std::aligned_alloc(page_size, round_up(bytes, page_size)));
    if (!p) throw error("cannot allocate a " + format_bytes(bytes) + " I/O bounce buffer", "free host memory");
    return aligned_buffer(p);
}

inline std::atomic<bool>& buffered_io_noted() {
    static std::atomic<bool> noted{false};
    return noted;
}
}  // namespace detail

class storage_file {
public:
    // Unaligned requests go through a bounce buffer this large, one chunk at a time.
    static constexpr std::size_t bounce_bytes = std::size_t{4} << 20;

    // Creates (or truncates) `path` with room for `bytes` (padded to whole pages).
    storage_file(std::filesystem::path path, std::size_t bytes)
        : m_path(std::move(path)), m_bytes(bytes), m_file_bytes(round_up(bytes, page_size)) {
        m_fd = ::open(m_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0600);
        if (m_fd < 0 && errno == EINVAL) {
            m_fd = ::open(m_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            m_direct = false;
            if (m_fd >= 0 && !detail::buffered_io_noted().exchange(true))
                log_note("storage tier: the file system at " + m_path.parent_path().string() +
                         " refuses O_DIRECT (tmpfs?); using buffered I/O");
        }
        if (m_fd < 0)
            throw error("cannot create storage-tier file " + m_path.string() + ": " + std::strerror(errno),
                        "check that the storage directory exists and is writable");
        if (m_file_bytes > 0) {
            const int rc = ::posix_fallocate(m_fd, 0, static_cast<off_t>(m_file_bytes));
            if (rc != 0) {
                ::close(m_fd);
                ::unlink(m_path.c_str());
                throw error("cannot reserve " + format_bytes(m_file_bytes) + " on disk for storage-tier file " +
                                m_path.string() + ": " + std::strerror(rc),
                            rc == ENOSPC ? "the disk is full: free space or choose another --storage-dir"
                                         : "check the storage directory's file system");
            }
        }
    }

    storage_file(const storage_file&) = delete;
    storage_file& operator=(const storage_file&) = delete;

    // A storage file is scratch space for one run: it is removed when its tensor goes away.
    ~storage_file() {
        ::close(m_fd);
        ::unlink(m_path.c_str());
    }

    const std::filesystem::path& path() const { return m_path; }
    std::size_t size() const { return m_bytes; }
    std::size_t bytes_on_disk() const { return m_file_bytes; }
    bool direct_io() const { return m_direct; }

    // Blocking reads and writes of any byte range; the backends run them on their streams.
    void read(std::size_t offset, void* dst, std::size_t bytes) const {
        transfer(offset, static_cast<std::byte*>(dst), bytes, /*writing=*/false);
    }
    void write(std::size_t offset, const void* src, std::size_t bytes) {
        transfer(offset, static_cast<std::byte*>(const_cast<void*>(src)), bytes, /*writing=*/true);
    }

private:
    void check_range(std::size_t offset, std::size_t bytes) const {
        if (offset > m_bytes || bytes > m_bytes - offset)
            throw error("storage-tier access out of range in " + m_path.string() + ": bytes [" +
                            std::to_string(offset) + ", " + std::to_string(offset + bytes) + ") of " +
                            std::to_string(m_bytes));
    }

    // Walks the page-aligned cover of [offset, offset + bytes) in chunks. A chunk that the
    // request covers entirely, with a page-aligned user buffer, moves directly; any other chunk
    // goes through the bounce buffer (read-modify-write for partial pages when writing).
    void transfer(std::size_t offset, std::byte* user, std::size_t bytes, bool writing) const {
        check_range(offset, bytes);
        if (bytes == 0) return;
        const std::size_t begin = round_down(offset, page_size);
        const std::size_t end = round_up(offset + bytes, page_size);
        detail::aligned_buffer bounce;
        for (std::size_t chunk = begin; chunk < end;) {
            const std::size_t chunk_end = std::min(end, chunk + bounce_bytes);
            const std::size_t lo = std::max(chunk, offset), hi = std::min(chunk_end, offset + bytes);
            std::byte* at = user + (lo - offset);
            if (lo == chunk && hi == chunk_end && is_aligned(at, page_size)) {
                io(chunk, at, chunk_end - chunk, writing);
            } else {
                if (!bounce) bounce = detail::make_aligned_buffer(bounce_bytes);
                if (!writing || lo != chunk || hi != chunk_end) io(chunk, bounce.get(), chunk_end - chunk, false);
                if (writing) {
                    std::memcpy(bounce.get() + (lo - chunk), at, hi - lo);
                    io(chunk, bounce.get(), chunk_end - chunk, true);
                } else {
                    std::memcpy(at, bounce.get() + (lo - chunk), hi - lo);
                }
            }
            chunk = chunk_end;
        }
    }

    void io(std::size_t offset, std::byte* buf, std::size_t bytes, bool writing) const {
        while (bytes > 0) {
            const ssize_t n = writing ? ::pwrite(m_fd, buf, bytes, static_cast<off_t>(offset))
                                      : ::pread(m_fd, buf, bytes, static_cast<off_t>(offset));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                const int err = n < 0 ? errno : EIO;
                throw error(std::string(writing ? "write to" : "read from") + " storage-tier file " + m_path.string() +
                                " failed at byte " + std::to_string(offset) + ": " + std::strerror(err),
                            err == ENOSPC ? "the disk is full: free space or choose another --storage-dir"
                                          : "check the disk and the storage directory");
            }
            buf += n;
            offset += static_cast<std::size_t>(n);
            bytes -= static_cast<std::size_t>(n);
        }
    }

    std::filesystem::path m_path;
    std::size_t m_bytes;
    std::size_t m_file_bytes;
    int m_fd = -1;
    bool m_direct = true;
};

}  // namespace strata
