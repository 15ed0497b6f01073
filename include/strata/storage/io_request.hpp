// What the asynchronous I/O engines share: a request, the completion of a batch of requests, the
// engine interface, and the blocking pread/pwrite loop that the thread pool runs (and that every
// engine's error messages follow).
//
// A batch is submitted at once and completes as a whole: io_completion::wait() returns when every
// request of the batch has finished and throws the first failure as a strata::error naming the
// file, the byte offset and the system's reason. Buffers (and nothing else) must stay valid until
// then; io_completion's destructor waits too, so an exception between submit and wait can never
// free a buffer that the engine is still filling.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <unistd.h>  // pread, pwrite

#include <cerrno>              // errno, EINTR, EIO, ENOSPC, ECANCELED
#include <condition_variable>  // std::condition_variable
#include <cstddef>             // std::size_t, std::byte
#include <cstring>             // std::strerror
#include <memory>              // std::shared_ptr
#include <mutex>               // std::mutex, std::lock_guard, std::unique_lock
#include <span>                // std::span
#include <string>              // std::string, std::to_string
#include <string_view>         // std::string_view
#include <utility>             // std::exchange, std::move

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_mutex_destroy(void* addr, unsigned flags);  // ThreadSanitizer's annotation
#endif

namespace strata {

enum class io_op : unsigned char { read, write };

// Move `bytes` between `buffer` and the file `fd` at `offset`. `file` names the file in errors
// (e.g. "storage-tier file /nvme/strata/adam_m.g1.strata"; empty: "file descriptor N"); it is
// copied when a request fails, so it only has to live until its request has finished.
struct io_request {
    int fd = -1;
    std::size_t offset = 0;
    std::byte* buffer = nullptr;
    std::size_t bytes = 0;
    io_op op = io_op::read;
    std::string_view file;
};

namespace detail {

// std::mutex has no destructor that ThreadSanitizer sees, so a later mutex at the same address
// would inherit a dead one's lock-order edges (false reports). The owners of the engines' mutexes
// call this in their destructors; without ThreadSanitizer it does nothing.
inline void tsan_forget_mutex([[maybe_unused]] std::mutex& m) noexcept {
#if defined(__SANITIZE_THREAD__)
    __tsan_mutex_destroy(&m, 0);
#endif
}

inline std::string io_failure_message(const io_request& r, std::size_t at, int err) {
    const std::string file = r.file.empty() ? "file descriptor " + std::to_string(r.fd) : std::string(r.file);
    const std::string reason = err == 0           ? "unexpected end of file"
                               : err == ECANCELED ? "cancelled: the I/O engine shut down before it ran"
                                                  : std::strerror(err);
    return std::string(r.op == io_op::write ? "write to " : "read from ") + file + " failed at byte " +
           std::to_string(at) + ": " + reason;
}

inline std::string io_failure_hint(int err) {
    switch (err) {
        case ENOSPC: return "the disk is full: free space or choose another storage directory";
        case ECANCELED: return "destroy an I/O engine only after waiting for what was submitted to it";
        case EBADF: return "the file is closed or was not opened for this direction";
        default: return "check the disk and the storage directory";
    }
}

// The shared state of one batch: how many requests are still running, and the first failure.
// Engines call finish() exactly once per request, never while holding a lock of their own (so
// no thread ever holds two of these mutexes at once).
class io_batch_state {
public:
    explicit io_batch_state(std::size_t requests) : m_left(requests) {}
    io_batch_state(const io_batch_state&) = delete;
    io_batch_state& operator=(const io_batch_state&) = delete;

    ~io_batch_state() { tsan_forget_mutex(m_mutex); }  // batches come and go at reused addresses

    // `err` 0 with at < r.offset + r.bytes is an unexpected end of file; -1 means success.
    void finish(const io_request& r, std::size_t at, int err) {
        std::string what, hint;
        if (err >= 0) {
            what = io_failure_message(r, at, err);
            hint = io_failure_hint(err);
        }
        std::lock_guard lock(m_mutex);
        if (err >= 0 && m_what.empty()) {
            m_what = std::move(what);
            m_hint = std::move(hint);
        }
        if (--m_left == 0) m_done.notify_all();
    }

    bool done() {
        std::lock_guard lock(m_mutex);
        return m_left == 0;
    }

    // Blocks until every request has finished; returns the first failure ("" when none).
    std::pair<std::string, std::string> wait() {
        std::unique_lock lock(m_mutex);
        m_done.wait(lock, [&] { return m_left == 0; });
        return {m_what, m_hint};
    }

private:
    std::mutex m_mutex;
    std::condition_variable m_done;
    std::size_t m_left;
    std::string m_what, m_hint;
};

// The blocking loop: pread/pwrite until every byte has moved, retrying EINTR and continuing
// after short transfers. Reports through `finish(at, err)` as io_batch_state::finish does.
inline void run_blocking(const io_request& r, io_batch_state& batch) {
    std::byte* buf = r.buffer;
    std::size_t at = r.offset, left = r.bytes;
    while (left > 0) {
        const ssize_t n = r.op == io_op::write ? ::pwrite(r.fd, buf, left, static_cast<off_t>(at))
                                               : ::pread(r.fd, buf, left, static_cast<off_t>(at));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            // pwrite returning 0 for a non-empty buffer has no errno; call it an I/O error.
            batch.finish(r, at, n < 0 ? errno : (r.op == io_op::write ? EIO : 0));
            return;
        }
        buf += n;
        at += static_cast<std::size_t>(n);
        left -= static_cast<std::size_t>(n);
    }
    batch.finish(r, at, -1);
}

}  // namespace detail

// The completion of one submitted batch. Move-only; an empty completion is complete.
class io_completion {
public:
    io_completion() = default;
    explicit io_completion(std::shared_ptr<detail::io_batch_state> state) : m_state(std::move(state)) {}
    io_completion(io_completion&&) noexcept = default;
    io_completion& operator=(io_completion&& other) noexcept {
        if (this != &other) {
            settle();
            m_state = std::move(other.m_state);
        }
        return *this;
    }
    // Waits (ignoring failures): the batch's buffers must outlive the I/O into them.
    ~io_completion() { settle(); }

    bool ready() const { return !m_state || m_state->done(); }

    // Named wait for every request of the batch; throws the first failure as strata::error.
    void wait() {
        if (!m_state) return;
        auto [what, hint] = m_state->wait();
        m_state.reset();
        if (!what.empty()) throw error(what, hint);
    }

private:
    void settle() noexcept {
        if (m_state) m_state->wait();
        m_state.reset();
    }
    std::shared_ptr<detail::io_batch_state> m_state;
};

// An asynchronous I/O engine: many requests in flight, from any number of submitting threads.
// Destroying an engine finishes the requests already running, cancels those still queued (their
// batches fail with "cancelled") and joins its threads.
class io_engine {
public:
    virtual ~io_engine() = default;

    // Starts every request of `batch` and returns at once. Throws only if the engine cannot take
    // work at all (it was shut down or broke); I/O failures surface at io_completion::wait().
    virtual io_completion submit(std::span<const io_request> batch) = 0;

    // "thread pool" or "io_uring": for logs and benchmark output.
    virtual std::string_view kind() const = 0;

    // How many requests run at once: the pool's workers, or io_uring's queue depth.
    virtual std::size_t in_flight_limit() const = 0;
};

}  // namespace strata
