// atomic_write: files and directories that appear whole or not at all.
//
// A checkpoint interrupted by a crash, a kill or a full disk must never leave a half-written file
// where a good one was. Every writer here builds the new content under a temporary name beside the
// target, makes it durable (fsync), and only then renames it over the target: rename(2) within one
// filesystem is atomic, so a reader sees either the old content or the new, never a mix. The parent
// directory is fsynced last so that the rename itself survives a power loss.
//
// POSIX only (Linux first: renameat2 gives no-replace and exchange semantics for directories).
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <atomic>        // std::atomic (unique temporary names within one process)
#include <cerrno>        // errno, ENOSPC, EDQUOT, ...
#include <concepts>      // std::invocable
#include <cstddef>       // std::byte, std::size_t
#include <cstdint>       // std::uint64_t
#include <filesystem>    // std::filesystem::path, status, remove_all, recursive_directory_iterator
#include <functional>    // std::invoke
#include <span>          // std::span
#include <string>        // std::string, std::to_string
#include <string_view>   // std::string_view
#include <system_error>  // std::error_code, std::system_category
#include <utility>       // std::exchange, std::move

#include <fcntl.h>     // open, O_* flags
#include <stdio.h>     // rename, renameat2, RENAME_NOREPLACE, RENAME_EXCHANGE (glibc >= 2.28)
#include <sys/stat.h>  // fstat, struct stat
#include <unistd.h>    // read, write, fsync, close, unlink, getpid

namespace strata {

namespace detail {

inline std::string errno_text(int err) { return std::error_code(err, std::system_category()).message(); }

inline std::filesystem::path parent_or_current(const std::filesystem::path& path) {
    std::filesystem::path parent = path.parent_path();
    return parent.empty() ? std::filesystem::path(".") : parent;
}

// What the user can do about an OS error, chosen by errno: "No space left on device" alone does
// not say which disk to clean up, so the hint names the directory.
inline std::string io_hint(int err, const std::filesystem::path& path) {
    const std::string dir = parent_or_current(path).string();
    switch (err) {
        case ENOSPC:
        case EDQUOT:
            return "free disk space (or raise the quota) on the filesystem holding '" + dir +
                   "', or write somewhere else";
        case EFBIG:
            return "the file exceeds the file size limit (ulimit -f) or the filesystem's maximum file size";
        case ENOENT: {
            std::error_code ec;
            if (std::filesystem::is_directory(parent_or_current(path), ec))
                return "'" + dir + "' holds no '" + path.filename().string() + "': check the name";
            return "a directory on the path does not exist; create '" + dir + "' first";
        }
        case ENOTDIR: return "a component of the path is a file, not a directory";
        case EACCES:
        case EPERM: return "check the write permissions of '" + dir + "'";
        case EROFS: return "the filesystem holding '" + dir + "' is read-only; write somewhere else";
        case EXDEV: return "both paths must be on the same filesystem; create the temporary beside the target";
        case EIO: return "the device reported an I/O error; check the disk (dmesg)";
        case EISDIR: return "the target is a directory; remove it or choose another file name";
        case EEXIST:
        case ENOTEMPTY: return "the target already exists; remove it or choose another name";
        default: return "check that '" + dir + "' exists, is writable and has free space";
    }
}

[[noreturn]] inline void throw_io_error(std::string_view what, const std::filesystem::path& path, int err) {
    throw error("io: cannot " + std::string(what) + " '" + path.string() + "': " + errno_text(err),
                io_hint(err, path));
}

// Owns one file descriptor; closing a descriptor that was written to goes through close_checked so
// that a deferred write error (NFS, some full-disk cases) is not lost.
class unique_fd {
public:
    unique_fd() = default;
    explicit unique_fd(int fd) : m_fd(fd) {}
    unique_fd(unique_fd&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}
    unique_fd& operator=(unique_fd&& other) noexcept {
        if (this != &other) {
            reset();
            m_fd = std::exchange(other.m_fd, -1);
        }
        return *this;
    }
    unique_fd(const unique_fd&) = delete;
    unique_fd& operator=(const unique_fd&) = delete;
    ~unique_fd() { reset(); }

    int get() const noexcept { return m_fd; }
    bool valid() const noexcept { return m_fd >= 0; }

    void reset() noexcept {
        if (m_fd >= 0) ::close(m_fd);
        m_fd = -1;
    }

    void close_checked(const std::filesystem::path& shown_path) {
        const int fd = std::exchange(m_fd, -1);
        if (fd >= 0 && ::close(fd) != 0) throw_io_error("close", shown_path, errno);
    }

private:
    int m_fd = -1;
};

inline unique_fd open_or_throw(const std::filesystem::path& path, int flags, std::string_view what) {
    int fd;
    do fd = ::open(path.c_str(), flags | O_CLOEXEC, 0666);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) throw_io_error(what, path, errno);
    return unique_fd(fd);
}

// write(2) may write less than asked (signals, quotas hit midway); loop until done. Returns 0 or
// the errno of the failure, so each caller can name the file the user knows.
inline int write_all(int fd, std::span<const std::byte> bytes) noexcept {
    while (!bytes.empty()) {
        const ssize_t n = ::write(fd, bytes.data(), bytes.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return ENOSPC;  // no progress and no error: treat as a full device
        bytes = bytes.subspan(static_cast<std::size_t>(n));
    }
    return 0;
}

// Reads exactly bytes.size() bytes from `offset`; a short read means the file shrank under us.
inline void read_exactly(int fd, std::span<std::byte> bytes, std::uint64_t offset,
                         const std::filesystem::path& shown_path) {
    const std::size_t wanted = bytes.size();
    while (!bytes.empty()) {
        const ssize_t n = ::pread(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) continue;
            throw_io_error("read", shown_path, errno);
        }
        if (n == 0)
            throw error("io: '" + shown_path.string() + "' ended after " +
                            std::to_string(offset) + " bytes while " + std::to_string(wanted) +
                            " more were being read",
                        "another process is truncating or rewriting the file; retry when it is done");
        bytes = bytes.subspan(static_cast<std::size_t>(n));
        offset += static_cast<std::uint64_t>(n);
    }
}

inline std::uint64_t file_size_of(int fd, const std::filesystem::path& shown_path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_io_error("stat", shown_path, errno);
    if (!S_ISREG(st.st_mode))
        throw error("io: '" + shown_path.string() + "' is not a regular file", "pass the path of a file");
    return static_cast<std::uint64_t>(st.st_size);
}

inline void fsync_or_throw(int fd, const std::filesystem::path& shown_path) {
    if (::fsync(fd) != 0) throw_io_error("flush (fsync)", shown_path, errno);
}

// A rename or a new file is durable only once the directory that holds the entry is synced.
inline void fsync_directory(const std::filesystem::path& dir) {
    unique_fd fd = open_or_throw(dir, O_RDONLY | O_DIRECTORY, "open directory");
    fsync_or_throw(fd.get(), dir);
}

inline void fsync_parent_directory(const std::filesystem::path& path) {
    fsync_directory(parent_or_current(path));
}

// pid and a per-process counter: two writers in one process, or a leftover of a crashed process
// that had the same pid, never share a temporary.
inline std::filesystem::path temporary_name_for(const std::filesystem::path& target, std::string_view tag) {
    static std::atomic<std::uint64_t> counter{0};
    std::filesystem::path name = target;
    name += std::string(tag) + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
    return name;
}

}  // namespace detail

// Writes one file under a temporary name and renames it over the target on commit(). Destroying
// it without commit() (an exception midway) removes the temporary and leaves the target as it was.
// Chunks go straight to write(2): hand it large chunks.
class atomic_file_writer {
public:
    explicit atomic_file_writer(std::filesystem::path target) : m_target(std::move(target)) {
        if (m_target.empty()) throw error("io: cannot write a file with an empty path", "pass a file path");
        // A leftover with the same name is possible only after a crash; move on to the next name.
        for (int attempt = 0;; ++attempt) {
            m_temp = detail::temporary_name_for(m_target, ".tmp-");
            const int fd = ::open(m_temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
            if (fd >= 0) {
                m_fd = detail::unique_fd(fd);
                break;
            }
            if (errno == EINTR || (errno == EEXIST && attempt < 100)) continue;
            const int err = errno;
            throw error("io: cannot create the temporary file '" + m_temp.string() + "' to write '" +
                            m_target.string() + "': " + detail::errno_text(err),
                        detail::io_hint(err, m_target));
        }
    }

    atomic_file_writer(const atomic_file_writer&) = delete;
    atomic_file_writer& operator=(const atomic_file_writer&) = delete;

    ~atomic_file_writer() {
        if (m_committed) return;
        m_fd.reset();
        ::unlink(m_temp.c_str());
    }

    void write(std::span<const std::byte> bytes) {
        require_open("write");
        if (const int err = detail::write_all(m_fd.get(), bytes); err != 0)
            throw error("io: cannot write '" + m_target.string() + "' (" + std::to_string(bytes.size()) +
                            " bytes after the first " + std::to_string(m_bytes_written) + ", into '" +
                            m_temp.string() + "'): " + detail::errno_text(err) +
                            "; the old file is untouched",
                        detail::io_hint(err, m_target));
        m_bytes_written += bytes.size();
    }

    void write(std::string_view text) { write(std::as_bytes(std::span(text.data(), text.size()))); }

    // Makes the content durable, then atomically replaces the target and syncs its directory.
    void commit() {
        require_open("commit");
        detail::fsync_or_throw(m_fd.get(), m_temp);
        m_fd.close_checked(m_temp);
        if (std::rename(m_temp.c_str(), m_target.c_str()) != 0) {
            const int err = errno;
            ::unlink(m_temp.c_str());
            m_committed = true;  // nothing left to clean up
            throw error("io: cannot rename '" + m_temp.string() + "' over '" + m_target.string() +
                            "': " + detail::errno_text(err) + "; the old file is untouched",
                        detail::io_hint(err, m_target));
        }
        m_committed = true;
        try {
            detail::fsync_parent_directory(m_target);
        } catch (const error& e) {
            throw error(std::string("io: '") + m_target.string() +
                            "' was replaced, but the rename may not survive a power loss: " + e.what(),
                        e.hint());
        }
    }

    const std::filesystem::path& target() const noexcept { return m_target; }
    const std::filesystem::path& temporary_path() const noexcept { return m_temp; }
    std::uint64_t bytes_written() const noexcept { return m_bytes_written; }

private:
    void require_open(std::string_view action) const {
        if (m_committed || !m_fd.valid())
            throw error("io: cannot " + std::string(action) + " '" + m_target.string() +
                            "': the atomic write was already committed",
                        "write everything before commit(); commit() runs once");
    }

    std::filesystem::path m_target;
    std::filesystem::path m_temp;
    detail::unique_fd m_fd;
    std::uint64_t m_bytes_written = 0;
    bool m_committed = false;
};

// Streams the file through `fill(atomic_file_writer&)`, then commits. If fill throws, its exception
// propagates unchanged, the temporary is removed and the old target stays as it was.
template <class Fill>
    requires std::invocable<Fill&, atomic_file_writer&>
void write_file_atomically(const std::filesystem::path& target, Fill&& fill) {
    atomic_file_writer out(target);
    std::invoke(fill, out);
    out.commit();
}

inline void write_file_atomically(const std::filesystem::path& target, std::span<const std::byte> bytes) {
    write_file_atomically(target, [&](atomic_file_writer& out) { out.write(bytes); });
}

inline void write_file_atomically(const std::filesystem::path& target, std::string_view text) {
    write_file_atomically(target, [&](atomic_file_writer& out) { out.write(text); });
}

// ---- directories -------------------------------------------------------------------------------

struct directory_commit_options {
    // When final_dir exists: false refuses; true swaps the new directory in and deletes the old one
    // afterwards, so a complete directory stands at final_dir at every moment.
    bool replace_existing = false;
};

namespace detail {

// Every file and directory under `root` (and root itself) reaches the disk before the rename
// publishes them; symlinks are not followed.
inline void fsync_tree(const std::filesystem::path& root) {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(root, ec), end; it != end; it.increment(ec)) {
        if (ec) break;
        const fs::file_status st = it->symlink_status(ec);
        if (ec) break;
        if (fs::is_regular_file(st)) {
            unique_fd fd = open_or_throw(it->path(), O_RDONLY, "open for fsync");
            fsync_or_throw(fd.get(), it->path());
        } else if (fs::is_directory(st)) {
            fsync_directory(it->path());
        }
    }
    if (ec) throw_io_error("list the directory", root, ec.value());
    fsync_directory(root);
}

enum class rename_result { done, exists, unsupported };

// rename(2) silently replaces an empty directory; renameat2 can refuse or swap instead.
inline rename_result rename_with_flags(const std::filesystem::path& from, const std::filesystem::path& to,
                                       unsigned flags, std::string_view what) {
#if defined(__linux__) && defined(RENAME_NOREPLACE) && defined(RENAME_EXCHANGE)
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), flags) == 0) return rename_result::done;
    const int err = errno;
    if (err == EEXIST || err == ENOTEMPTY) return rename_result::exists;
    if (err == EINVAL || err == ENOSYS || err == ENOTSUP) return rename_result::unsupported;
    throw error("io: cannot " + std::string(what) + " '" + from.string() + "' -> '" + to.string() +
                    "': " + errno_text(err),
                io_hint(err, to));
#else
    (void)from, (void)to, (void)flags, (void)what;
    return rename_result::unsupported;
#endif
}

inline void rename_or_throw(const std::filesystem::path& from, const std::filesystem::path& to,
                            std::string_view what) {
    if (std::rename(from.c_str(), to.c_str()) != 0) {
        const int err = errno;
        throw error("io: cannot " + std::string(what) + " '" + from.string() + "' -> '" + to.string() +
                        "': " + errno_text(err),
                    io_hint(err, to));
    }
}

inline void remove_old_directory(const std::filesystem::path& old_dir, const std::filesystem::path& final_dir) {
    std::error_code ec;
    std::filesystem::remove_all(old_dir, ec);
    if (ec)
        throw error("io: '" + final_dir.string() + "' was committed, but its previous contents at '" +
                        old_dir.string() + "' could not be removed: " + ec.message(),
                    "remove '" + old_dir.string() + "' by hand");
}

// Replacement without renameat2 (other kernels, some network filesystems): move the old directory
// aside, move the new one in, and move the old one back if that fails. final_dir is briefly absent,
// but the old content is never deleted before the new one is in place.
inline void replace_directory_by_renames(const std::filesystem::path& tmp_dir,
                                         const std::filesystem::path& final_dir) {
    const std::filesystem::path old_dir = temporary_name_for(final_dir, ".old-");
    rename_or_throw(final_dir, old_dir, "move the previous directory aside");
    try {
        rename_or_throw(tmp_dir, final_dir, "move the new directory in");
    } catch (...) {
        std::rename(old_dir.c_str(), final_dir.c_str());
        throw;
    }
    fsync_parent_directory(final_dir);
    remove_old_directory(old_dir, final_dir);
}

}  // namespace detail

// Publishes a fully written directory at final_dir in one step (e.g. OUT/step-000100/ built as
// OUT/step-000100.tmp/). Both must be on the same filesystem.
inline void commit_directory_atomically(const std::filesystem::path& tmp_dir,
                                        const std::filesystem::path& final_dir,
                                        directory_commit_options options = {}) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(fs::symlink_status(tmp_dir, ec)))
        throw error("io: cannot commit '" + tmp_dir.string() + "' as '" + final_dir.string() +
                        "': it is not a directory",
                    "write the checkpoint into the temporary directory first");
    std::error_code tmp_ec, final_ec;
    const fs::path tmp_real = fs::weakly_canonical(tmp_dir, tmp_ec);
    const fs::path final_real = fs::weakly_canonical(final_dir, final_ec);
    if (!tmp_ec && !final_ec && tmp_real == final_real)
        throw error("io: cannot commit '" + tmp_dir.string() + "' onto itself",
                    "build the new directory under a different (temporary) name");

    detail::fsync_tree(tmp_dir);

    const auto refuse_existing = [&] {
        throw error("io: cannot commit '" + tmp_dir.string() + "': '" + final_dir.string() +
                        "' already exists",
                    "remove it, choose another name, or pass replace_existing = true");
    };

    bool done = false;
#if defined(__linux__) && defined(RENAME_NOREPLACE) && defined(RENAME_EXCHANGE)
    switch (detail::rename_with_flags(tmp_dir, final_dir, RENAME_NOREPLACE, "rename")) {
        case detail::rename_result::done: done = true; break;
        case detail::rename_result::exists:
            if (!options.replace_existing) refuse_existing();
            if (!fs::is_directory(fs::symlink_status(final_dir, ec)))
                throw error("io: cannot replace '" + final_dir.string() + "' with the directory '" +
                                tmp_dir.string() + "': it is not a directory",
                            "remove it or choose another name");
            // After the exchange tmp_dir names the old content: the new one is already live.
            if (detail::rename_with_flags(tmp_dir, final_dir, RENAME_EXCHANGE, "exchange") ==
                detail::rename_result::done) {
                detail::fsync_parent_directory(final_dir);
                detail::remove_old_directory(tmp_dir, final_dir);
                done = true;
            }
            break;
        case detail::rename_result::unsupported: break;
    }
#endif
    if (!done) {
        const bool exists = fs::exists(fs::symlink_status(final_dir, ec));
        if (exists && !options.replace_existing) refuse_existing();
        if (exists) {
            if (!fs::is_directory(fs::symlink_status(final_dir, ec)))
                throw error("io: cannot replace '" + final_dir.string() + "' with the directory '" +
                                tmp_dir.string() + "': it is not a directory",
                            "remove it or choose another name");
            detail::replace_directory_by_renames(tmp_dir, final_dir);
        } else {
            detail::rename_or_throw(tmp_dir, final_dir, "rename");
        }
    }
    detail::fsync_parent_directory(final_dir);
    if (detail::parent_or_current(tmp_dir) != detail::parent_or_current(final_dir))
        detail::fsync_parent_directory(tmp_dir);
}

}  // namespace strata
