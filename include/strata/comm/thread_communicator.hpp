// thread_communicator: the Communicator (comm/communicator.hpp) of ranks that are threads of one
// process on the CPU backend. It runs data-parallel logic without GPUs, so CI tests it, and its
// races, under ThreadSanitizer.
//
//   thread_group group(3);                                   // shared by the ranks
//   // on rank r's thread, with its own cpu_backend and streams:
//   thread_communicator comm(group, r);
//   comm.all_reduce(s, grads, n).wait();
//
// A collective is one task on the rank's stream. The task meets the other ranks' tasks of the
// same collective twice: once all have published their buffers, each rank computes its share
// (all_reduce: elements [r n / N, (r + 1) n / N) of every rank's buffer; the others: its own
// output), and once all are done, every rank's task returns (so no buffer is reused while another
// rank still reads it). Sums add rank 0, 1, ..., N - 1 in that order: bitwise repeatable, and
// equal to a sequential sum over ranks.
//
// Failure instead of a hang: ranks that meet with different collectives or sizes, a rank that
// calls abort() (e.g. its step threw), or a rank that does not arrive within the group's timeout
// poison the group: the collective fails on every rank with one strata::error (surfacing at the
// stream's next event wait), and so does every later one.
#pragma once

#include <strata/backend/cpu_backend.hpp>  // cpu_backend
#include <strata/core/error.hpp>           // strata::error

#include <algorithm>           // std::copy_n
#include <chrono>              // std::chrono::milliseconds, std::chrono::steady_clock
#include <condition_variable>  // std::condition_variable
#include <cstddef>             // std::size_t
#include <cstdint>             // std::uint64_t
#include <mutex>               // std::mutex, std::unique_lock
#include <string>              // std::string, std::to_string
#include <type_traits>         // std::is_same_v
#include <vector>              // std::vector

namespace strata {

class thread_group {
public:
    // `timeout`: how long a rank waits for the others in one collective before it fails the group.
    explicit thread_group(std::size_t ranks, std::chrono::milliseconds timeout = std::chrono::minutes(10))
        : m_ranks(ranks), m_timeout(timeout), m_calls(ranks) {
        if (ranks == 0) throw error("thread_group: 0 ranks", "a group has at least one rank");
    }
    thread_group(const thread_group&) = delete;
    thread_group& operator=(const thread_group&) = delete;

    std::size_t size() const { return m_ranks; }

    // Fails the collective every rank is in or enters next, with `why` (a rank's own error, say),
    // so that no rank waits for one that will not come.
    void abort(std::size_t rank, const std::string& why) {
        std::lock_guard lock(m_mutex);
        poison("rank " + std::to_string(rank) + " aborted: " + why);
    }

private:
    friend class thread_communicator;

    // One rank's call of a collective: what it is, and its buffers.
    struct call {
        const char* op = "";
        std::size_t count = 0;
        std::size_t root = 0;
        const void* send = nullptr;
        void* recv = nullptr;
    };

    // Publishes rank's call, then waits until every rank has published (phase 0) or finished
    // its share (phase 1). Returns every rank's call; throws when the group is poisoned.
    const std::vector<call>& meet(std::size_t rank, const call& mine, int phase) {
        std::unique_lock lock(m_mutex);
        check_poison();
        if (phase == 0) m_calls[rank] = mine;
        const std::uint64_t generation = m_generation;
        if (++m_arrived == m_ranks) {
            m_arrived = 0;
            ++m_generation;
            if (phase == 0) check_calls();
            m_cv.notify_all();
            check_poison();
            return m_calls;
        }
        const auto deadline = std::chrono::steady_clock::now() + m_timeout;
        while (m_generation == generation && m_failure.empty()) {
            if (m_cv.wait_until(lock, deadline) == std::cv_status::timeout && m_generation == generation &&
                m_failure.empty()) {
                poison("rank " + std::to_string(rank) + " waited " + std::to_string(m_timeout.count()) + " ms in " +
                       mine.op + " #" + std::to_string(m_collectives[rank]) + " for " +
                       std::to_string(m_ranks - m_arrived) + " other rank(s)");
            }
        }
        check_poison();
        return m_calls;
    }

    // The last rank to arrive checks that all called the same collective on the same sizes.
    void check_calls() {
        const call& first = m_calls[0];
        for (std::size_t r = 1; r < m_ranks; ++r) {
            const call& c = m_calls[r];
            if (std::string(c.op) != first.op || c.count != first.count || c.root != first.root)
                poison("rank 0 called " + describe(first) + " while rank " + std::to_string(r) + " called " +
                       describe(c));
        }
    }

    static std::string describe(const call& c) {
        return std::string(c.op) + "(" + std::to_string(c.count) + " elements" +
               (std::string(c.op) == "broadcast" ? ", root " + std::to_string(c.root) : std::string()) + ")";
    }

    void poison(const std::string& why) {  // m_mutex held
        if (m_failure.empty()) m_failure = why;
        m_cv.notify_all();
    }
    void check_poison() const {  // m_mutex held
        if (!m_failure.empty())
            throw error("thread_group: collective failed: " + m_failure,
                        "every rank must call the same collectives, in the same order, with the same sizes; a rank "
                        "that fails should abort the group");
    }

    const std::size_t m_ranks;
    const std::chrono::milliseconds m_timeout;
    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::vector<call> m_calls;
    std::vector<std::uint64_t> m_collectives = std::vector<std::uint64_t>(m_ranks, 0);  // per rank, for messages
    std::size_t m_arrived = 0;
    std::uint64_t m_generation = 0;
    std::string m_failure;  // non-empty: poisoned
};

class thread_communicator {
public:
    using backend_type = cpu_backend;
    using stream = cpu_backend::stream;
    using event = cpu_backend::event;

    thread_communicator(thread_group& group, std::size_t rank) : m_group(&group), m_rank(rank) {
        if (rank >= group.size())
            throw error("thread_communicator: rank " + std::to_string(rank) + " of a group of " +
                        std::to_string(group.size()));
    }

    std::size_t rank() const { return m_rank; }
    std::size_t size() const { return m_group->size(); }
    thread_group& group() const { return *m_group; }

    template <class R>
    event all_reduce(stream& s, R* data, std::size_t n) {
        return enqueue(s, {"all_reduce", n, 0, data, data}, [n](const std::vector<thread_group::call>& calls,
                                                                 std::size_t r) {
            const std::size_t N = calls.size(), begin = r * n / N, end = (r + 1) * n / N;
            for (std::size_t i = begin; i < end; ++i) {
                R sum = static_cast<const R*>(calls[0].send)[i];
                for (std::size_t k = 1; k < N; ++k) sum += static_cast<const R*>(calls[k].send)[i];
                for (std::size_t k = 0; k < N; ++k) static_cast<R*>(calls[k].recv)[i] = sum;
            }
        });
    }

    template <class R>
    event reduce_scatter(stream& s, const R* send, R* recv, std::size_t n) {
        return enqueue(s, {"reduce_scatter", n, 0, send, recv}, [n](const std::vector<thread_group::call>& calls,
                                                                     std::size_t r) {
            R* out = static_cast<R*>(calls[r].recv);
            for (std::size_t i = 0; i < n; ++i) {
                R sum = static_cast<const R*>(calls[0].send)[r * n + i];
                for (std::size_t k = 1; k < calls.size(); ++k) sum += static_cast<const R*>(calls[k].send)[r * n + i];
                out[i] = sum;
            }
        });
    }

    template <class R>
    event all_gather(stream& s, const R* send, R* recv, std::size_t n) {
        return enqueue(s, {"all_gather", n, 0, send, recv}, [n](const std::vector<thread_group::call>& calls,
                                                                 std::size_t r) {
            R* out = static_cast<R*>(calls[r].recv);
            for (std::size_t k = 0; k < calls.size(); ++k) {
                const R* in = static_cast<const R*>(calls[k].send);
                if (in != out + k * n) std::copy_n(in, n, out + k * n);
            }
        });
    }

    template <class R>
    event broadcast(stream& s, R* data, std::size_t n, std::size_t root) {
        if (root >= size())
            throw error("thread_communicator::broadcast: root " + std::to_string(root) + " of a group of " +
                        std::to_string(size()));
        return enqueue(s, {"broadcast", n, root, data, data}, [n, root](const std::vector<thread_group::call>& calls,
                                                                         std::size_t r) {
            if (r != root) std::copy_n(static_cast<const R*>(calls[root].send), n, static_cast<R*>(calls[r].recv));
        });
    }

private:
    template <class Work>
    event enqueue(stream& s, thread_group::call mine, Work work) {
        thread_group* group = m_group;
        const std::size_t rank = m_rank;
        s.enqueue(
            [group, rank, mine, work] {
                const auto& calls = group->meet(rank, mine, 0);
                work(calls, rank);
                group->meet(rank, mine, 1);
                std::lock_guard lock(group->m_mutex);
                ++group->m_collectives[rank];
            },
            mine.op);
        return s.record();
    }

    thread_group* m_group;
    std::size_t m_rank;
};

}  // namespace strata
