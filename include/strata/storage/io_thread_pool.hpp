// thread_pool_io_engine: the I/O engine that runs everywhere. N worker threads take requests
// from one FIFO queue and run each as a blocking pread/pwrite loop, so up to N requests are in
// the kernel at once (what an NVMe drive needs to reach its bandwidth; the threads mostly sleep
// in the kernel, so N may exceed the core count).
#pragma once

#include <strata/core/error.hpp>          // strata::error
#include <strata/storage/io_request.hpp>  // io_engine, io_request, io_completion, detail::run_blocking

#include <algorithm>           // std::clamp
#include <cerrno>              // ECANCELED
#include <condition_variable>  // std::condition_variable
#include <cstddef>             // std::size_t
#include <deque>               // std::deque
#include <memory>              // std::make_shared, std::shared_ptr
#include <mutex>               // std::mutex, std::lock_guard, std::unique_lock
#include <span>                // std::span
#include <string>              // std::to_string
#include <string_view>         // std::string_view
#include <thread>              // std::thread
#include <utility>             // std::move
#include <vector>              // std::vector

namespace strata {

class thread_pool_io_engine final : public io_engine {
public:
    // Twice the hardware threads, 4 to 16: the workers wait on the disk, not on a core, and a disk
    // wants many requests in flight. Measured on an H100 box's virtual disk, the kind the GPU box
    // has (strata_bench_storage, 2 GiB, O_DIRECT, 1 MiB requests, 2026-12-06): 8 workers read
    // 1.53 GB/s and write 2.60, 16 read 2.02 and write 2.90 (docs/perf-notes.md).
    static std::size_t default_workers() noexcept {
        const std::size_t hw = std::thread::hardware_concurrency();
        return std::clamp<std::size_t>(2 * hw, 4, 16);
    }

    explicit thread_pool_io_engine(std::size_t workers = default_workers()) {
        if (workers == 0)
            throw error("thread_pool_io_engine: workers must be >= 1, got 0",
                        "pass the number of requests to keep in flight (default_workers() is a good start)");
        m_workers.reserve(workers);
        try {
            for (std::size_t i = 0; i < workers; ++i) m_workers.emplace_back([this] { work(); });
        } catch (...) {
            shut_down();
            throw;
        }
    }

    thread_pool_io_engine(const thread_pool_io_engine&) = delete;
    thread_pool_io_engine& operator=(const thread_pool_io_engine&) = delete;

    // Requests already running finish; queued ones are cancelled; the workers are joined.
    ~thread_pool_io_engine() override {
        shut_down();
        detail::tsan_forget_mutex(m_mutex);
    }

    io_completion submit(std::span<const io_request> batch) override {
        if (batch.empty()) return {};
        auto state = std::make_shared<detail::io_batch_state>(batch.size());
        {
            std::lock_guard lock(m_mutex);
            if (m_stopping)
                throw error("thread_pool_io_engine: a batch was submitted while the engine shuts down",
                            "keep the engine alive until every submitted batch was waited for");
            for (const io_request& r : batch) m_queue.push_back({r, state});
        }
        if (batch.size() == 1)
            m_wake.notify_one();
        else
            m_wake.notify_all();
        return io_completion(std::move(state));
    }

    std::string_view kind() const override { return "thread pool"; }
    std::size_t in_flight_limit() const override { return m_workers.size(); }

private:
    struct job {
        io_request request;
        std::shared_ptr<detail::io_batch_state> batch;
    };

    void work() {
        for (;;) {
            job j;
            {
                std::unique_lock lock(m_mutex);
                m_wake.wait(lock, [&] { return m_stopping || !m_queue.empty(); });
                if (m_stopping) return;  // shut_down() cancels what is left in the queue
                j = std::move(m_queue.front());
                m_queue.pop_front();
            }
            detail::run_blocking(j.request, *j.batch);
        }
    }

    void shut_down() noexcept {
        std::deque<job> cancelled;
        {
            std::lock_guard lock(m_mutex);
            m_stopping = true;
            cancelled.swap(m_queue);
        }
        m_wake.notify_all();
        for (job& j : cancelled) j.batch->finish(j.request, j.request.offset, ECANCELED);
        for (std::thread& t : m_workers) t.join();
        m_workers.clear();
    }

    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::deque<job> m_queue;
    bool m_stopping = false;
    std::vector<std::thread> m_workers;
};

}  // namespace strata
