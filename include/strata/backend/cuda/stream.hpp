// CUDA streams and events with the same interface as the CPU ones (cpu/stream.hpp).
//
// Host work that must sit in a stream's order (pread/pwrite of the storage tier) runs as a
// cudaLaunchHostFunc callback. A callback cannot throw into the caller, so its failure is kept
// in the backend's failure slot: later callbacks skip their work and every event::wait()
// rethrows it, so an asynchronous "disk full" is never lost.
#pragma once

#include <strata/backend/cuda/check.hpp>  // check

#include <cuda_runtime.h>  // cudaStream_t, cudaEvent_t, cudaLaunchHostFunc

#include <exception>   // std::exception_ptr, std::rethrow_exception
#include <functional>  // std::function
#include <memory>      // std::shared_ptr, std::unique_ptr
#include <mutex>       // std::mutex, std::lock_guard
#include <string>      // std::string
#include <utility>     // std::move

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

    struct state {
        std::string name;
        cudaStream_t handle = nullptr;
        std::shared_ptr<failure_slot> failures;
        void* staging = nullptr;
        std::size_t staging_bytes = 0;
        ~state() {
            if (handle) {
                cudaStreamSynchronize(handle);  // named: queued work may still use the staging buffer
                cudaStreamDestroy(handle);
            }
            if (staging) cudaFreeHost(staging);
        }
    };
    std::unique_ptr<state> m_state;
};

}  // namespace strata::cuda
