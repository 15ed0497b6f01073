// CUDA streams and events with the same interface as the CPU ones (cpu/stream.hpp).
//
// Host work that must sit in a stream's order (pread/pwrite of the storage tier) runs as a
// cudaLaunchHostFunc callback. A callback cannot throw into the caller, so its failure is kept
// in the backend's failure slot: later callbacks skip their work and every event::wait()
// rethrows it, so an asynchronous "disk full" is never lost.
//
// Tracing (--trace): with a tracer set, every op launched through a trace_span records a pair of
// timing events around itself; flush_trace() (after the step's named wait) turns them into host
// steady_clock times, measured from one reference event, and reports them like cpu::stream does.
#pragma once

#include <strata/backend/cuda/check.hpp>  // check

#include <cuda_runtime.h>  // cudaStream_t, cudaEvent_t, cudaLaunchHostFunc

#include <chrono>      // std::chrono::steady_clock
#include <exception>   // std::exception_ptr, std::rethrow_exception
#include <functional>  // std::function
#include <memory>      // std::shared_ptr, std::unique_ptr
#include <mutex>       // std::mutex, std::lock_guard
#include <string>      // std::string
#include <string_view> // std::string_view
#include <utility>     // std::move
#include <vector>      // std::vector

namespace strata::cuda {

// The first failure of any asynchronous host work of one backend.
class failure_slot {
public:
    void set(std::exception_ptr e) {
        std::lock_guard lock(m_mutex);
        if (!m_failure) m_failure = e;
    }
    std::exception_ptr get() const {
        std::lock_guard lock(m_mutex);
        return m_failure;
    }

private:
    mutable std::mutex m_mutex;
    std::exception_ptr m_failure;
};

using stream_tracer = std::function<void(std::string_view what, std::chrono::steady_clock::time_point begin,
                                         std::chrono::steady_clock::time_point end)>;

class event {
public:
    event() = default;  // an empty event is complete

    bool ready() const {
        if (!m_state) return true;
        const cudaError_t status = cudaEventQuery(m_state->handle);
        if (status == cudaErrorNotReady) return false;
        check(status, "cudaEventQuery");
        return true;
    }

    // Named host wait; rethrows a failure of asynchronous host work (see failure_slot).
    void wait() const {
        if (!m_state) return;
        check(cudaEventSynchronize(m_state->handle), "cudaEventSynchronize");
        if (auto failure = m_state->failures->get()) std::rethrow_exception(failure);
    }

    cudaEvent_t native() const { return m_state ? m_state->handle : nullptr; }

private:
    friend class stream;
    struct state {
        cudaEvent_t handle = nullptr;
        std::shared_ptr<failure_slot> failures;
        ~state() {
            if (handle) cudaEventDestroy(handle);
        }
    };
    std::shared_ptr<state> m_state;
};

class stream {
public:
    stream(std::string name, std::shared_ptr<failure_slot> failures)
        : m_state(std::make_unique<state>()) {
        m_state->name = std::move(name);
        m_state->failures = std::move(failures);
        check(cudaStreamCreateWithFlags(&m_state->handle, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    }
    stream(stream&&) noexcept = default;
    stream& operator=(stream&&) noexcept = default;
    ~stream() = default;

    const std::string& name() const { return m_state->name; }
    cudaStream_t native() const { return m_state->handle; }

    event record() {
        event e;
        e.m_state = std::make_shared<event::state>();
        e.m_state->failures = m_state->failures;
        check(cudaEventCreateWithFlags(&e.m_state->handle, cudaEventDisableTiming), "cudaEventCreateWithFlags");
        check(cudaEventRecord(e.m_state->handle, m_state->handle), "cudaEventRecord");
        return e;
    }

    void wait(const event& e) {
        if (e.native()) check(cudaStreamWaitEvent(m_state->handle, e.native(), 0), "cudaStreamWaitEvent");
    }

    void synchronize() { record().wait(); }

    // Host work in stream order. Skipped once the backend has failed: its inputs may be garbage.
    void enqueue_host(std::function<void()> task) {
        auto* job = new host_job{std::move(task), m_state->failures};
        const cudaError_t status = cudaLaunchHostFunc(m_state->handle, &run_host_job, job);
        if (status != cudaSuccess) {
            delete job;
            check(status, "cudaLaunchHostFunc");
        }
    }

    // ---- tracing ----

    // Every op launched through a trace_span from now on is timed (empty tracer: none).
    void set_tracer(stream_tracer tracer) {
        m_state->spans.clear();
        m_state->tracer = std::move(tracer);
        if (m_state->tracer && !m_state->origin) {
            check(cudaEventCreate(&m_state->origin), "cudaEventCreate (trace origin)");
            check(cudaEventRecord(m_state->origin, m_state->handle), "cudaEventRecord (trace origin)");
            check(cudaEventSynchronize(m_state->origin), "cudaEventSynchronize (trace origin)");  // named: trace start
            m_state->origin_host = std::chrono::steady_clock::now();
        }
    }
    bool tracing() const { return static_cast<bool>(m_state->tracer); }

    // Marks the beginning / end of one traced op on this stream (see trace_span).
    void span_begin(const char* what) {
        span sp{what, timing_event(), nullptr};
        check(cudaEventRecord(sp.begin, m_state->handle), "cudaEventRecord (trace)");
        m_state->spans.push_back(sp);
    }
    void span_end() noexcept {  // from a destructor: a failure only loses the span
        span& sp = m_state->spans.back();
        try {
            sp.end = timing_event();
        } catch (...) {
            return;
        }
        if (cudaEventRecord(sp.end, m_state->handle) != cudaSuccess) {
            (void)cudaGetLastError();
            m_state->free_events.push_back(sp.end);
            sp.end = nullptr;
        }
    }

    // Reports the finished spans to the tracer. Waits for the last one (a named wait: call it
    // after the step has synchronized anyway).
    void flush_trace() {
        auto& st = *m_state;
        for (auto& sp : st.spans) {
            if (!sp.end) continue;
            check(cudaEventSynchronize(sp.end), "cudaEventSynchronize (trace)");
            float begin_ms = 0, end_ms = 0;
            check(cudaEventElapsedTime(&begin_ms, st.origin, sp.begin), "cudaEventElapsedTime");
            check(cudaEventElapsedTime(&end_ms, st.origin, sp.end), "cudaEventElapsedTime");
            const auto at = [&](float ms) {
                return st.origin_host + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                            std::chrono::duration<double, std::milli>(ms));
            };
            if (st.tracer) st.tracer(sp.what, at(begin_ms), at(end_ms));
        }
        for (auto& sp : st.spans) st.recycle(sp);
        st.spans.clear();
    }

    // A pinned buffer this stream's staged copies reuse (they run in stream order, one at a time).
    void* staging(std::size_t bytes) {
        if (m_state->staging_bytes < bytes) {
            if (m_state->staging) {
                synchronize();  // named: the old buffer may still be in use by queued copies
                cudaFreeHost(m_state->staging);
                m_state->staging = nullptr;
            }
            check(cudaHostAlloc(&m_state->staging, bytes, cudaHostAllocDefault), "cudaHostAlloc (staging buffer)");
            m_state->staging_bytes = bytes;
        }
        return m_state->staging;
    }

private:
    struct host_job {
        std::function<void()> task;
        std::shared_ptr<failure_slot> failures;
    };
    static void CUDART_CB run_host_job(void* user) {
        std::unique_ptr<host_job> job(static_cast<host_job*>(user));
        if (job->failures->get()) return;
        try {
            job->task();
        } catch (...) {
            job->failures->set(std::current_exception());
        }
    }

    struct span {
        const char* what;
        cudaEvent_t begin, end;
    };
    cudaEvent_t timing_event() {
        auto& pool = m_state->free_events;
        if (!pool.empty()) {
            cudaEvent_t e = pool.back();
            pool.pop_back();
            return e;
        }
        cudaEvent_t e = nullptr;
        check(cudaEventCreate(&e), "cudaEventCreate (trace)");
        return e;
    }

    struct state {
        std::string name;
        cudaStream_t handle = nullptr;
        std::shared_ptr<failure_slot> failures;
        void* staging = nullptr;
        std::size_t staging_bytes = 0;
        stream_tracer tracer;
        cudaEvent_t origin = nullptr;
        std::chrono::steady_clock::time_point origin_host{};
        std::vector<span> spans;
        std::vector<cudaEvent_t> free_events;
        void recycle(span& sp) {
            if (sp.begin) free_events.push_back(sp.begin);
            if (sp.end) free_events.push_back(sp.end);
        }
        ~state() {
            if (handle) {
                cudaStreamSynchronize(handle);  // named: queued work may still use the staging buffer
                cudaStreamDestroy(handle);
            }
            if (staging) cudaFreeHost(staging);
            for (auto& sp : spans) recycle(sp);
            for (cudaEvent_t e : free_events) cudaEventDestroy(e);
            if (origin) cudaEventDestroy(origin);
        }
    };
    std::unique_ptr<state> m_state;
};

// Times the ops launched on `s` during its lifetime when `s` is traced; free otherwise.
class trace_span {
public:
    trace_span(stream& s, const char* what) : m_stream(s.tracing() ? &s : nullptr) {
        if (m_stream) m_stream->span_begin(what);
    }
    trace_span(const trace_span&) = delete;
    trace_span& operator=(const trace_span&) = delete;
    ~trace_span() {
        if (m_stream) m_stream->span_end();
    }

private:
    stream* m_stream;
};

}  // namespace strata::cuda
