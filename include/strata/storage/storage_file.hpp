// storage_file: one tensor's home on the storage tier, a file on local disk/NVMe.
//
// I/O is page-aligned with O_DIRECT where the file system allows it (the page cache would only
// double-buffer data that strata already stages in pinned memory). Where O_DIRECT is refused
// (tmpfs, some overlay file systems) the file is opened buffered and that is logged once.
// The file is preallocated, so "disk full" is an error at creation, not halfway through training.
//
// read() and write() block their caller (a stream's task), but inside they are asynchronous: a
// transfer is cut into page-aligned chunks of at most chunk_bytes that are submitted together to
// an io_engine (storage/io_engine.hpp), so many requests are in flight, and then waited for.
// Partial edge pages go through a small bounce buffer (read-modify-write when writing); a user
// buffer whose address is not page-aligned relative to the file offset goes entirely through
// bounce buffers, bounce_bytes at a time.
#pragma once

#include <strata/core/bytes.hpp>          // page_size, round_up, round_down, format_bytes
#include <strata/core/error.hpp>          // strata::error
#include <strata/core/log.hpp>            // log_note
#include <strata/storage/io_engine.hpp>   // io_engine, io_request, io_completion, shared_io_engine

#include <fcntl.h>     // open, O_DIRECT, posix_fallocate
#include <sys/stat.h>  // mode constants
#include <unistd.h>    // close, unlink

#include <algorithm>   // std::min, std::max
#include <atomic>      // std::atomic
#include <cerrno>      // errno
#include <cstddef>     // std::size_t, std::byte
#include <cstdint>     // std::uintptr_t
#include <cstdlib>     // std::aligned_alloc, std::free
#include <cstring>     // std::memcpy, std::strerror
#include <filesystem>  // std::filesystem::path
#include <memory>      // std::unique_ptr
#include <string>      // std::string
#include <vector>      // std::vector

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
    // The largest single request of a transfer: large transfers become many of these, in flight
    // together (1 MiB: big enough for the disk's full bandwidth per request, small enough that a
    // one-block transfer of a small model still spreads over several).
    static constexpr std::size_t chunk_bytes = std::size_t{1} << 20;
    // A buffer that is not page-aligned relative to the file offset goes through bounce buffers,
    // this much per round (read, then copy out; or copy in, then write).
    static constexpr std::size_t bounce_bytes = std::size_t{8} << 20;

    // Creates (or truncates) `path` with room for `bytes` (padded to whole pages). Its I/O goes
    // through `engine`, which must outlive the file (the default lives until the process exits).
    storage_file(std::filesystem::path path, std::size_t bytes, io_engine& engine = shared_io_engine())
        : m_path(std::move(path)),
          m_label("storage-tier file " + m_path.string()),
          m_bytes(bytes),
          m_file_bytes(round_up(bytes, page_size)),
          m_engine(&engine) {
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
                            rc == ENOSPC ? "the disk is full: free space or choose another storage directory"
                                         : "check the storage directory's file system",
                            {"storage_dir"});
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
    io_engine& engine() const { return *m_engine; }

    // Reads and writes of any byte range, returning when every byte has moved (many requests in
    // flight meanwhile); the backends run them as tasks on their streams.
    void read(std::size_t offset, void* dst, std::size_t bytes) const {
        transfer(offset, static_cast<std::byte*>(dst), bytes, io_op::read);
    }
    void write(std::size_t offset, const void* src, std::size_t bytes) {
        transfer(offset, static_cast<std::byte*>(const_cast<void*>(src)), bytes, io_op::write);
    }

    // Copies `bytes` from `src` at `src_offset` to `dst` at `dst_offset` through two bounce
    // buffers: the next round is read from `src` while the current one is written to `dst`.
    // The two ranges must not overlap when `src` and `dst` are the same file.
    static void copy(storage_file& dst, std::size_t dst_offset, const storage_file& src, std::size_t src_offset,
                     std::size_t bytes) {
        src.check_range(src_offset, bytes);
        dst.check_range(dst_offset, bytes);
        if (bytes == 0) return;
        // Whole pages of `src` (its file is padded to whole pages), so every read is aligned.
        const std::size_t base = round_down(src_offset, page_size), stop = round_up(src_offset + bytes, page_size);
        const std::size_t round = std::min(stop - base, bounce_bytes);
        const detail::aligned_buffer buffers = detail::make_aligned_buffer(2 * round);
        std::byte* const buf[2] = {buffers.get(), buffers.get() + round};
        io_completion pending = src.submit_chunks(io_op::read, base, buf[0], std::min(round, stop - base));
        for (std::size_t lo = base, k = 0; lo < stop; lo += round, ++k) {
            pending.wait();
            const std::size_t hi = std::min(lo + round, stop);
            if (hi < stop) pending = src.submit_chunks(io_op::read, hi, buf[(k + 1) % 2], std::min(round, stop - hi));
            const std::size_t a = std::max(lo, src_offset), b = std::min(hi, src_offset + bytes);
            dst.write(dst_offset + (a - src_offset), buf[k % 2] + (a - lo), b - a);
        }
    }

private:
    void check_range(std::size_t offset, std::size_t bytes) const {
        if (offset > m_bytes || bytes > m_bytes - offset)
            throw error("storage-tier access out of range in " + m_path.string() + ": bytes [" +
                            std::to_string(offset) + ", " + std::to_string(offset + bytes) + ") of " +
                            std::to_string(m_bytes));
    }

    // [offset, offset + bytes) of the file (within its padded size) <-> buf, as requests of at
    // most chunk_bytes submitted in one batch. With O_DIRECT, offset, buf and the chunk ends must
    // be page-aligned (the last chunk may end at any page boundary of the padded file).
    io_completion submit_chunks(io_op op, std::size_t offset, std::byte* buf, std::size_t bytes) const {
        std::vector<io_request> requests;
        requests.reserve((bytes + chunk_bytes - 1) / chunk_bytes);
        for (std::size_t done = 0; done < bytes; done += chunk_bytes)
            requests.push_back({m_fd, offset + done, buf + done, std::min(chunk_bytes, bytes - done), op, m_label});
        return m_engine->submit(requests);
    }

    void transfer(std::size_t offset, std::byte* user, std::size_t bytes, io_op op) const {
        check_range(offset, bytes);
        if (bytes == 0) return;
        if (!m_direct)
            submit_chunks(op, offset, user, bytes).wait();  // buffered I/O takes any offset and address
        else if ((reinterpret_cast<std::uintptr_t>(user) - offset) % page_size == 0)
            transfer_aligned(offset, user, bytes, op);
        else
            transfer_bounced(offset, user, bytes, op);
    }

    // The user buffer lines up with the file's pages: whole pages move directly, and at most two
    // partially covered edge pages go through a two-page bounce buffer.
    void transfer_aligned(std::size_t offset, std::byte* user, std::size_t bytes, io_op op) const {
        const std::size_t end = offset + bytes;
        const std::size_t mid_lo = round_up(offset, page_size), mid_hi = round_down(end, page_size);
        std::size_t edge[2];
        std::size_t edges = 0;
        if (mid_lo > mid_hi) {
            edge[edges++] = mid_hi;  // both ends inside one page
        } else {
            if (offset != mid_lo) edge[edges++] = mid_lo - page_size;
            if (end != mid_hi) edge[edges++] = mid_hi;
        }
        detail::aligned_buffer bounce;
        if (edges) bounce = detail::make_aligned_buffer(edges * page_size);
        const auto edge_requests = [&](io_op direction) {
            std::vector<io_request> r;
            for (std::size_t i = 0; i < edges; ++i)
                r.push_back({m_fd, edge[i], bounce.get() + i * page_size, page_size, direction, m_label});
            return r;
        };
        // Copies the user's part of each edge page out of (reading) or into (writing) the bounce.
        const auto copy_edges = [&](bool to_user) {
            for (std::size_t i = 0; i < edges; ++i) {
                const std::size_t lo = std::max(offset, edge[i]), hi = std::min(end, edge[i] + page_size);
                std::byte* b = bounce.get() + i * page_size + (lo - edge[i]);
                if (to_user)
                    std::memcpy(user + (lo - offset), b, hi - lo);
                else
                    std::memcpy(b, user + (lo - offset), hi - lo);
            }
        };
        const std::size_t middle_bytes = mid_hi > mid_lo ? mid_hi - mid_lo : 0;
        std::byte* const middle = middle_bytes ? user + (mid_lo - offset) : user;
        if (op == io_op::read) {
            io_completion whole = submit_chunks(io_op::read, mid_lo, middle, middle_bytes);
            io_completion parts = m_engine->submit(edge_requests(io_op::read));
            parts.wait();
            whole.wait();
            copy_edges(/*to_user=*/true);
        } else {
            io_completion whole = submit_chunks(io_op::write, mid_lo, middle, middle_bytes);
            if (edges) {
                m_engine->submit(edge_requests(io_op::read)).wait();  // read-modify-write of the edges
                copy_edges(/*to_user=*/false);
                m_engine->submit(edge_requests(io_op::write)).wait();
            }
            whole.wait();
        }
    }

    // The user buffer does not line up with the file's pages: the page-aligned cover of the range
    // moves through bounce buffers, bounce_bytes per round, each round many requests in flight.
    void transfer_bounced(std::size_t offset, std::byte* user, std::size_t bytes, io_op op) const {
        const std::size_t end = offset + bytes;
        const std::size_t begin = round_down(offset, page_size), cover_end = round_up(end, page_size);
        const std::size_t round = std::min(cover_end - begin, bounce_bytes);
        const detail::aligned_buffer bounce = detail::make_aligned_buffer(round);
        for (std::size_t lo = begin; lo < cover_end; lo += round) {
            const std::size_t hi = std::min(lo + round, cover_end);
            const std::size_t a = std::max(lo, offset), b = std::min(hi, end);
            std::byte* const part = bounce.get() + (a - lo);
            if (op == io_op::read) {
                submit_chunks(io_op::read, lo, bounce.get(), hi - lo).wait();
                std::memcpy(user + (a - offset), part, b - a);
                continue;
            }
            // Read-modify-write of the pages the request covers only partly: the cover's first
            // page (when the range starts inside it) and its last page (when it ends inside it).
            std::vector<io_request> partial;
            if (lo == begin && offset != begin)
                partial.push_back({m_fd, lo, bounce.get(), page_size, io_op::read, m_label});
            if (hi == cover_end && end != cover_end && !(hi - page_size == lo && !partial.empty()))
                partial.push_back({m_fd, hi - page_size, bounce.get() + (hi - page_size - lo), page_size, io_op::read,
                                   m_label});
            m_engine->submit(partial).wait();
            std::memcpy(part, user + (a - offset), b - a);
            submit_chunks(io_op::write, lo, bounce.get(), hi - lo).wait();
        }
    }

    std::filesystem::path m_path;
    std::string m_label;  // "storage-tier file PATH": how errors name this file
    std::size_t m_bytes;
    std::size_t m_file_bytes;
    io_engine* m_engine;
    int m_fd = -1;
    bool m_direct = true;
};

}  // namespace strata
