// io_uring_engine: the I/O engine on Linux io_uring through liburing, for builds that have it
// (STRATA_HAVE_LIBURING, set by strata's CMake when liburing is found; link -luring). One ring,
// up to `queue_depth` requests in the kernel at once, without a thread per request.
//
// Threads: submitters prepare submission queue entries and hand them to the kernel under
// m_mutex; one reaper thread waits for completions, resubmits the rest of a short or interrupted
// transfer, feeds queued requests in as slots free up, and finishes batches (outside the lock).
// The reaper takes m_mutex after each wait, which also orders a submitter's writes to a request
// before the reaper reads it (liburing's ring barriers are invisible to ThreadSanitizer).
#pragma once

#ifndef STRATA_HAVE_LIBURING
#error "strata/storage/io_uring.hpp needs liburing: build with STRATA_HAVE_LIBURING (strata's CMake sets it when liburing is found)"
#endif

#include <strata/core/error.hpp>          // strata::error
#include <strata/storage/io_request.hpp>  // io_engine, io_request, io_completion

#include <liburing.h>  // io_uring_queue_init, io_uring_get_sqe, io_uring_prep_read/write, io_uring_wait_cqe_timeout

#include <algorithm>      // std::min
#include <cerrno>         // EINTR, EAGAIN, EBUSY, ETIME, ECANCELED, EIO
#include <chrono>         // std::chrono::milliseconds
#include <cstddef>        // std::size_t
#include <cstring>        // std::strerror
#include <deque>          // std::deque
#include <memory>         // std::make_shared, std::shared_ptr, std::unique_ptr
#include <mutex>          // std::mutex, std::lock_guard, std::unique_lock
#include <span>           // std::span
#include <string>         // std::string, std::to_string
#include <string_view>    // std::string_view
#include <thread>         // std::thread, std::this_thread
#include <unordered_set>  // std::unordered_set
#include <utility>        // std::move
#include <vector>         // std::vector

namespace strata {

class io_uring_engine final : public io_engine {
public:
    static constexpr std::size_t default_queue_depth = 64;

    // Throws strata::error when the kernel refuses a ring or is older than 5.11 (no timed wait
    // without a submission); make_io_engine then falls back to the thread pool, logged.
    explicit io_uring_engine(std::size_t queue_depth = default_queue_depth) : m_depth(queue_depth) {
        if (queue_depth == 0 || queue_depth > 4096)
            throw error("io_uring_engine: queue depth must be in [1, 4096], got " + std::to_string(queue_depth));
        // One spare entry for the no-op that wakes the reaper at shutdown.
        const int rc = ::io_uring_queue_init(static_cast<unsigned>(queue_depth + 1), &m_ring, 0);
        if (rc < 0)
            throw error("io_uring_queue_init failed: " + std::string(std::strerror(-rc)),
                        "the kernel refuses io_uring (too old, or disabled by sysctl or seccomp); use the thread pool engine");
        if (!(m_ring.features & IORING_FEAT_EXT_ARG)) {
            ::io_uring_queue_exit(&m_ring);
            throw error("io_uring on this kernel has no timed wait (IORING_FEAT_EXT_ARG, Linux 5.11)",
                        "use the thread pool engine");
        }
        try {
            m_reaper = std::thread([this] { reap(); });
        } catch (...) {
            ::io_uring_queue_exit(&m_ring);
            throw;
        }
    }

    io_uring_engine(const io_uring_engine&) = delete;
    io_uring_engine& operator=(const io_uring_engine&) = delete;

    // Requests already started finish (including the rest of short transfers); requests still
    // queued are cancelled; the reaper is joined.
    ~io_uring_engine() override {
        std::vector<finished> cancelled;
        {
            std::lock_guard lock(m_mutex);
            m_stopping = true;
            std::deque<std::unique_ptr<op>> started;
            for (auto& o : m_queue)
                if (o->done > 0)
                    started.push_back(std::move(o));  // the rest of a short transfer
                else
                    cancelled.push_back({std::move(o), ECANCELED});
            m_queue.swap(started);
            if (m_broken.empty()) {
                if (io_uring_sqe* wake = ::io_uring_get_sqe(&m_ring)) {  // the spare entry
                    ::io_uring_prep_nop(wake);
                    ::io_uring_sqe_set_data(wake, nullptr);
                    m_unsubmitted.push_back(nullptr);
                    flush(cancelled);
                }
            }
        }
        finish_all(cancelled);
        m_reaper.join();  // the wake-up no-op, or the reaper's timed wait, ends it
        ::io_uring_queue_exit(&m_ring);
        // Only a broken ring leaves requests in the kernel behind: their batches fail.
        for (op* o : m_in_kernel) cancelled.push_back({std::unique_ptr<op>(o), ECANCELED});
        m_in_kernel.clear();
        finish_all(cancelled);
        detail::tsan_forget_mutex(m_mutex);
    }

    io_completion submit(std::span<const io_request> batch) override {
        if (batch.empty()) return {};
        auto state = std::make_shared<detail::io_batch_state>(batch.size());
        std::vector<finished> failed;
        {
            std::lock_guard lock(m_mutex);
            if (m_stopping || !m_broken.empty())
                throw error("io_uring_engine cannot take requests: " +
                                (m_stopping ? std::string("the engine shuts down") : m_broken),
                            "keep the engine alive until every submitted batch was waited for");
            for (const io_request& r : batch) m_queue.push_back(std::make_unique<op>(op{r, 0, state}));
            pump(failed);
        }
        finish_all(failed);
        return io_completion(std::move(state));
    }

    std::string_view kind() const override { return "io_uring"; }
    std::size_t in_flight_limit() const override { return m_depth; }

private:
    struct op {
        io_request request;
        std::size_t done = 0;  // bytes moved so far (short transfers resume from here)
        std::shared_ptr<detail::io_batch_state> batch;
    };
    struct finished {
        std::unique_ptr<op> o;
        int err;  // -1 success, 0 end of file, else errno
    };

    // One entry moves at most this much (its length is 32-bit); the rest follows as a short transfer.
    static constexpr std::size_t max_entry_bytes = std::size_t{1} << 30;
    static constexpr auto reaper_timeout = std::chrono::milliseconds(100);

    // Under m_mutex: queued requests into free ring slots, then into the kernel.
    void pump(std::vector<finished>& failed) {
        while (m_broken.empty() && m_in_kernel.size() < m_depth && !m_queue.empty()) {
            io_uring_sqe* sqe = ::io_uring_get_sqe(&m_ring);
            if (!sqe) break;  // the ring is full of entries the kernel has not taken yet
            op* o = m_queue.front().release();
            m_queue.pop_front();
            const io_request& r = o->request;
            const unsigned n = static_cast<unsigned>(std::min(r.bytes - o->done, max_entry_bytes));
            if (r.op == io_op::write)
                ::io_uring_prep_write(sqe, r.fd, r.buffer + o->done, n, static_cast<__u64>(r.offset + o->done));
            else
                ::io_uring_prep_read(sqe, r.fd, r.buffer + o->done, n, static_cast<__u64>(r.offset + o->done));
            ::io_uring_sqe_set_data(sqe, o);
            m_in_kernel.insert(o);
            m_unsubmitted.push_back(o);
        }
        flush(failed);
    }

    // Under m_mutex: hand prepared entries to the kernel. Transient refusals (EINTR, EAGAIN,
    // EBUSY) are retried by the reaper at its next wake-up (a completion, or its timed wait).
    // Any other refusal breaks the engine: the entries not taken fail, the queue fails, and
    // nothing submits to the ring again, so the kernel never sees them.
    void flush(std::vector<finished>& failed) {
        while (!m_unsubmitted.empty() && m_broken.empty()) {
            const int rc = ::io_uring_submit(&m_ring);
            if (rc > 0) {
                m_unsubmitted.erase(m_unsubmitted.begin(), m_unsubmitted.begin() + rc);
                continue;
            }
            if (rc == 0 || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) return;
            m_broken = "io_uring_submit failed: " + std::string(std::strerror(-rc));
            for (op* o : m_unsubmitted)
                if (o) {
                    m_in_kernel.erase(o);
                    failed.push_back({std::unique_ptr<op>(o), -rc});
                }
            m_unsubmitted.clear();
        }
        if (!m_broken.empty()) {
            for (auto& o : m_queue) failed.push_back({std::move(o), EIO});
            m_queue.clear();
        }
    }

    static void finish_all(std::vector<finished>& done) {
        for (auto& f : done) {
            const io_request& r = f.o->request;
            f.o->batch->finish(r, r.offset + f.o->done, f.err);
        }
        done.clear();
    }

    // Under m_mutex: one completion.
    void complete(op* o, int res, std::vector<finished>& done) {
        m_in_kernel.erase(o);
        std::unique_ptr<op> owned(o);
        if (res == -EINTR || res == -EAGAIN) {
            m_queue.push_front(std::move(owned));  // retry the same range first
        } else if (res < 0) {
            done.push_back({std::move(owned), -res});
        } else if (res == 0) {
            done.push_back({std::move(owned), o->request.op == io_op::write ? EIO : 0});
        } else {
            o->done += static_cast<std::size_t>(res);
            if (o->done < o->request.bytes)
                m_queue.push_front(std::move(owned));  // a short transfer: the rest next
            else
                done.push_back({std::move(owned), -1});
        }
    }

    void reap() {
        std::vector<finished> done;
        for (;;) {
            io_uring_cqe* cqe = nullptr;
            __kernel_timespec timeout{.tv_sec = 0, .tv_nsec = std::chrono::nanoseconds(reaper_timeout).count()};
            const int rc = ::io_uring_wait_cqe_timeout(&m_ring, &cqe, &timeout);
            const bool wait_failed = rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN;
            std::unique_lock lock(m_mutex);
            if (rc == 0) {
                unsigned head = 0, seen = 0;
                io_uring_for_each_cqe(&m_ring, head, cqe) {
                    ++seen;
                    if (auto* o = static_cast<op*>(::io_uring_cqe_get_data(cqe))) complete(o, cqe->res, done);
                }
                ::io_uring_cq_advance(&m_ring, seen);
            } else if (wait_failed && m_broken.empty()) {
                // The ring itself failed: nothing more is submitted; what is queued fails.
                m_broken = "io_uring_wait_cqe_timeout failed: " + std::string(std::strerror(-rc));
            }
            pump(done);  // once broken, this only fails the queue
            // Requests in the kernel still use their buffers: wait for them, unless the ring
            // cannot report them any more (the destructor then fails them after closing it).
            const bool stop = m_stopping && m_queue.empty() && (m_in_kernel.empty() || wait_failed);
            lock.unlock();
            finish_all(done);
            if (stop) return;
            if (wait_failed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }

    const std::size_t m_depth;
    io_uring m_ring{};
    std::mutex m_mutex;
    std::deque<std::unique_ptr<op>> m_queue;  // waiting for a ring slot (new, or the rest of a short one)
    std::unordered_set<op*> m_in_kernel;      // prepared or in the kernel, owned until reaped
    std::deque<op*> m_unsubmitted;            // prepared, not yet taken by the kernel (null: the wake-up)
    bool m_stopping = false;
    std::string m_broken;  // why the engine can take no more work ("" while it can)
    std::thread m_reaper;
};

}  // namespace strata
