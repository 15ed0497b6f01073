// CPU streams and events: a stream is a worker thread running tasks in FIFO order; an event
// marks a point in a stream. This is what makes the asynchronous logic of strata really run
// (and really race) on machines without a GPU, so it is tested under ThreadSanitizer in CI.
//
// Nothing here synchronizes implicitly: the host waits only in event::wait() and
// stream::synchronize(), both named; work on one stream waits for another only through
// stream::wait(event).
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <chrono>              // std::chrono::steady_clock
#include <condition_variable>  // std::condition_variable
#include <deque>               // std::deque
#include <exception>           // std::exception_ptr, std::rethrow_exception
#include <functional>          // std::function
#include <memory>              // std::shared_ptr, std::unique_ptr
#include <mutex>               // std::mutex, std::unique_lock
#include <string>              // std::string
#include <string_view>         // std::string_view
#include <thread>              // std::thread
#include <utility>             // std::move

namespace strata::cpu {

namespace detail {
struct event_state {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::exception_ptr failure;  // the first failure of the stream before this point, if any
};
}  // namespace detail

class event {
public:
    event() = default;  // an empty event is complete: waiting on it returns at once

    bool ready() const {
        if (!m_state) return true;
        std::lock_guard lock(m_state->mutex);
        return m_state->done;
    }

    // Named host wait. Rethrows the first failure of the stream before this event
    // (e.g. a disk-full error of an asynchronous write), so errors are never lost.
    void wait() const {
        if (!m_state) return;
        std::unique_lock lock(m_state->mutex);
        m_state->done_cv.wait(lock, [&] { return m_state->done; });
        if (m_state->failure) std::rethrow_exception(m_state->failure);
    }

private:
    friend class stream;
    explicit event(std::shared_ptr<detail::event_state> state) : m_state(std::move(state)) {}
    std::shared_ptr<detail::event_state> m_state;
};

// Sees every task a stream runs, with when it started and ended on the worker (a trace).
using stream_tracer = std::function<void(std::string_view task, std::chrono::steady_clock::time_point begin,
                                         std::chrono::steady_clock::time_point end)>;

class stream {
public:
    explicit stream(std::string name) : m_impl(std::make_unique<impl>(std::move(name))) {}
    stream(stream&&) noexcept = default;
    stream& operator=(stream&&) noexcept = default;
    ~stream() = default;  // impl's destructor finishes queued work, then joins (a named wait)

    const std::string& name() const { return m_impl->name; }

    // Run `task` after everything enqueued before it. If an earlier task failed, later tasks are
    // skipped: their inputs may be garbage. The failure surfaces at the next event::wait().
    // `what` names the task in a trace.
    void enqueue(std::function<void()> task, const char* what = "task") { m_impl->push(std::move(task), what); }

    // Every task run from now on is reported to `tracer` (empty: none). For tracing only.
    void set_tracer(stream_tracer tracer) {
        std::lock_guard lock(m_impl->mutex);
        m_impl->tracer = tracer ? std::make_shared<const stream_tracer>(std::move(tracer)) : nullptr;
    }

    // An event that completes when all work enqueued so far has run.
    event record() {
        auto state = std::make_shared<detail::event_state>();
        m_impl->push_marker([state](std::exception_ptr failure) {
            std::lock_guard lock(state->mutex);
            state->done = true;
            state->failure = failure;
            state->done_cv.notify_all();
        });
        return event(state);
    }

    // Work enqueued after this call starts only once `e` has completed (the worker blocks).
    // A failure behind `e` propagates into this stream.
    void wait(const event& e) {
        m_impl->push([e] { e.wait(); }, nullptr);  // waiting is not work: never traced
    }

    // Named host wait for everything enqueued so far; rethrows the stream's failure.
    void synchronize() { record().wait(); }

private:
    struct impl {
        struct item {
            std::function<void()> task;                      // work, skipped after a failure
            std::function<void(std::exception_ptr)> marker;  // always runs: completes events
            const char* what = "task";
        };

        std::string name;
        std::mutex mutex;
        std::condition_variable cv;
        std::deque<item> queue;
        bool stopping = false;
        std::exception_ptr failure;  // touched only by the worker thread
        std::shared_ptr<const stream_tracer> tracer;  // guarded by mutex
        std::thread worker;

        explicit impl(std::string n) : name(std::move(n)), worker([this] { run(); }) {}

        ~impl() {
            {
                std::lock_guard lock(mutex);
                stopping = true;
            }
            cv.notify_one();
            worker.join();
        }

        void push(std::function<void()> task, const char* what = "task") { push_item({std::move(task), {}, what}); }
        void push_marker(std::function<void(std::exception_ptr)> marker) { push_item({{}, std::move(marker), "event"}); }

        void push_item(item it) {
            {
                std::lock_guard lock(mutex);
                queue.push_back(std::move(it));
            }
            cv.notify_one();
        }

        void run() {
            for (;;) {
                item it;
                std::shared_ptr<const stream_tracer> trace;
                {
                    std::unique_lock lock(mutex);
                    cv.wait(lock, [&] { return stopping || !queue.empty(); });
                    if (queue.empty()) return;  // stopping and drained
                    it = std::move(queue.front());
                    queue.pop_front();
                    trace = tracer;
                }
                if (it.marker) {
                    it.marker(failure);
                } else if (!failure) {
                    const auto begin = std::chrono::steady_clock::now();
                    try {
                        it.task();
                    } catch (...) {
                        failure = std::current_exception();
                    }
                    if (trace && it.what) (*trace)(it.what, begin, std::chrono::steady_clock::now());
                }
            }
        }
    };

    std::unique_ptr<impl> m_impl;
};

}  // namespace strata::cpu
