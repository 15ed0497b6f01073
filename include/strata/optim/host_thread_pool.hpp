// host_thread_pool: a small persistent pool of worker threads for data-parallel host loops (the
// offloaded optimizer). One call, parallel_for, cuts [0, count) into contiguous chunks and runs
// them on the workers and on the calling thread, which works too rather than waiting idle.
//
// Why not the CPU backend's streams: a stream is an ordered queue of asynchronous tasks; here the
// caller wants one loop done now, on every core, and to get its exceptions back. The pool's only
// blocking point is the end of parallel_for, which waits for the chunks it started (named: that
// is the call's whole contract).
//
// Workers run a job's chunks under the caller's floating-point environment (rounding mode,
// flush-to-zero and denormals-are-zero bits), so the thread count cannot change a loop's results
// even when the caller runs with FTZ/DAZ set; each worker's own environment is restored after.
//
// Threading rules: parallel_for calls from several threads are serialized (one job at a time);
// calling parallel_for from inside a chunk of the same pool throws (it would deadlock).
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <algorithm>           // std::clamp, std::min
#include <atomic>              // std::atomic
#include <cfenv>               // std::fenv_t, std::fegetenv, std::fesetenv
#include <condition_variable>  // std::condition_variable
#include <cstddef>             // std::size_t
#include <cstdint>             // std::uint64_t
#include <exception>           // std::exception_ptr, std::current_exception, std::rethrow_exception
#include <mutex>               // std::mutex, std::lock_guard, std::unique_lock

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_mutex_destroy(void* addr, unsigned flags);  // ThreadSanitizer's annotation
#endif
#include <string>              // std::string, std::to_string
#include <thread>              // std::thread
#include <type_traits>         // std::remove_reference_t
#include <vector>              // std::vector

namespace strata {

// How parallel_for cuts [0, count) into chunks. Interior chunk boundaries b satisfy
// (b + phase) % multiple == 0: with multiple = 16 and phase = the misalignment of a float array
// in elements, every chunk but the first starts on a 64-byte cache line, so no two threads write
// the same line. Chunks are at least min_chunk long (except the last), so small loops run on the
// caller alone instead of paying for waking the workers.
struct chunking {
    std::size_t multiple = 1;
    std::size_t phase = 0;
    std::size_t min_chunk = 1;
};

class host_thread_pool {
public:
    // `threads` counts every thread that runs chunks, the caller included: 1 means no workers.
    explicit host_thread_pool(std::size_t threads = default_threads()) {
        if (threads == 0)
            throw error("host_thread_pool: threads must be >= 1, got 0",
                        "1 runs every chunk on the calling thread; default_threads() uses every core");
        m_workers.reserve(threads - 1);
        try {
            for (std::size_t i = 0; i + 1 < threads; ++i) m_workers.emplace_back([this] { worker_loop(); });
        } catch (...) {
            stop_and_join();
            throw;
        }
    }

    host_thread_pool(const host_thread_pool&) = delete;
    host_thread_pool& operator=(const host_thread_pool&) = delete;

    ~host_thread_pool() {
        stop_and_join();
#if defined(__SANITIZE_THREAD__)
        // std::mutex has no destructor that ThreadSanitizer sees, so a later mutex at the same
        // address would inherit this one's lock-order edges (false "potential deadlock" reports
        // between unrelated pools). Tell it these mutexes are gone.
        __tsan_mutex_destroy(&m_submit_mutex, 0);
        __tsan_mutex_destroy(&m_mutex, 0);
#endif
    }

    // The number of threads that run chunks, the caller included.
    std::size_t size() const noexcept { return m_workers.size() + 1; }

    // Chunks the workers (not the callers) have run so far: a test's evidence that a loop was
    // really split over several threads.
    std::size_t chunks_on_workers() const noexcept { return m_chunks_on_workers.load(std::memory_order_relaxed); }

    static std::size_t default_threads() noexcept {
        const unsigned n = std::thread::hardware_concurrency();
        return n == 0 ? 1 : n;
    }

    // Calls body(begin, end) on disjoint, non-empty, contiguous chunks that together cover
    // [0, count), and returns when all of them are done. If chunks throw, the chunks not yet
    // started are skipped and the first exception is rethrown here; the pool stays usable.
    template <class F>
    void parallel_for(std::size_t count, F&& body, chunking how = {}) {
        if (how.multiple == 0 || how.min_chunk == 0)
            throw error("host_thread_pool::parallel_for: chunking.multiple and chunking.min_chunk must be >= 1, got " +
                            std::to_string(how.multiple) + " and " + std::to_string(how.min_chunk),
                        "use multiple = 1 when boundaries may fall anywhere");
        if (t_running_pool == this)
            throw error("host_thread_pool::parallel_for called from inside one of its own chunks",
                        "a nested loop would wait for workers that are busy running it; run it serially");
        if (count == 0) return;

        const std::size_t chunks = chunk_count(count, how.min_chunk);
        if (chunks == 1) {
            body(std::size_t{0}, count);
            return;
        }

        // Chunk i is [bound(i), bound(i + 1)): even shares rounded down to an allowed boundary.
        // Rounding is monotonic, so chunks never overlap; a chunk may round to empty and is skipped.
        const auto bound = [&](std::size_t i) -> std::size_t {
            if (i == 0) return 0;
            if (i == chunks) return count;
            const std::size_t even = count / chunks * i + count % chunks * i / chunks;
            const std::size_t shifted = even + how.phase % how.multiple;
            const std::size_t aligned = shifted - shifted % how.multiple;
            return aligned < how.phase % how.multiple ? 0 : aligned - how.phase % how.multiple;
        };
        using body_type = std::remove_reference_t<F>;
        struct context {
            body_type* body;
            const decltype(bound)* bounds;
        } ctx{&body, &bound};
        job work{[](void* c, std::size_t i) {
                     auto& cx = *static_cast<context*>(c);
                     const std::size_t begin = (*cx.bounds)(i), end = (*cx.bounds)(i + 1);
                     if (begin < end) (*cx.body)(begin, end);
                 },
                 &ctx, chunks};
        std::fegetenv(&work.env);

        std::lock_guard one_job_at_a_time(m_submit_mutex);
        {
            std::lock_guard lock(m_mutex);
            m_job = &work;
            m_busy_workers = m_workers.size();
            ++m_generation;
        }
        m_wake.notify_all();
        run_chunks(work, /*on_worker=*/false);
        {
            std::unique_lock lock(m_mutex);
            m_done.wait(lock, [&] { return m_busy_workers == 0; });
            m_job = nullptr;
        }
        if (work.failure) std::rethrow_exception(work.failure);
    }

private:
    struct job {
        job(void (*run_chunk)(void*, std::size_t), void* run_context, std::size_t chunk_count)
            : run(run_chunk), context(run_context), chunks(chunk_count) {}

        void (*run)(void* context, std::size_t chunk);
        void* context;
        std::size_t chunks;
        std::fenv_t env{};  // the caller's floating-point environment, the workers' for this job
        std::atomic<std::size_t> next{0};
        std::atomic<bool> failed{false};
        std::mutex failure_mutex;
        std::exception_ptr failure;  // the first exception a chunk threw
    };

    // A few chunks per thread: a thread slowed down by other load on the machine then delays the
    // loop by one small chunk, not by a whole share.
    std::size_t chunk_count(std::size_t count, std::size_t min_chunk) const noexcept {
        if (m_workers.empty()) return 1;
        constexpr std::size_t chunks_per_thread = 4;
        return std::clamp<std::size_t>(count / min_chunk, 1, size() * chunks_per_thread);
    }

    void run_chunks(job& work, bool on_worker) noexcept {
        const host_thread_pool* const outer = t_running_pool;  // a chunk of another pool may call us
        t_running_pool = this;
        while (!work.failed.load(std::memory_order_relaxed)) {
            const std::size_t i = work.next.fetch_add(1, std::memory_order_relaxed);
            if (i >= work.chunks) break;
            if (on_worker) m_chunks_on_workers.fetch_add(1, std::memory_order_relaxed);
            try {
                work.run(work.context, i);
            } catch (...) {
                std::lock_guard lock(work.failure_mutex);
                if (!work.failure) work.failure = std::current_exception();
                work.failed.store(true, std::memory_order_relaxed);
            }
        }
        t_running_pool = outer;
    }

    void worker_loop() {
        std::uint64_t seen = 0;
        for (;;) {
            job* work = nullptr;
            {
                std::unique_lock lock(m_mutex);
                m_wake.wait(lock, [&] { return m_stop || m_generation != seen; });
                if (m_stop) return;
                seen = m_generation;
                work = m_job;
            }
            std::fenv_t own;
            std::fegetenv(&own);
            std::fesetenv(&work->env);
            run_chunks(*work, /*on_worker=*/true);
            std::fesetenv(&own);
            {
                std::lock_guard lock(m_mutex);
                if (--m_busy_workers == 0) m_done.notify_one();
            }
        }
    }

    void stop_and_join() noexcept {
        {
            std::lock_guard lock(m_mutex);
            m_stop = true;
        }
        m_wake.notify_all();
        for (auto& worker : m_workers) worker.join();
        m_workers.clear();
    }

    static inline thread_local const host_thread_pool* t_running_pool = nullptr;

    std::vector<std::thread> m_workers;
    std::mutex m_submit_mutex;  // held by the caller for a whole parallel_for
    std::mutex m_mutex;         // guards the fields below
    std::condition_variable m_wake;
    std::condition_variable m_done;
    job* m_job = nullptr;
    std::uint64_t m_generation = 0;  // bumped once per job; each worker runs each job once
    std::size_t m_busy_workers = 0;  // workers that have not yet finished the current job
    bool m_stop = false;
    std::atomic<std::size_t> m_chunks_on_workers{0};
};

}  // namespace strata
