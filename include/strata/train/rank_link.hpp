// rank_link: what one rank's trainer knows of data-parallel training (train/data_parallel.hpp).
//
// A data-parallel step runs one trainer per rank (device), each on its own share of the global
// batch, in lockstep. A rank's trainer needs three things from the others:
//   all_reduce   sums a device buffer over the ranks, enqueued on one of its streams (the
//                Communicator's collective, comm/communicator.hpp, type-erased here so that the
//                trainer does not depend on which one);
//   exchange     sums a host value over the ranks in rank order (the step's loss), so that every
//                rank takes the same decision on the same number (a NaN on one rank stops all);
//   broadcast    copies a device buffer from one rank to all (a device-homed group's weights,
//                from the rank that keeps its optimizer state and updates it: device_state_owners);
//   rank         rank 0 owns the host state: the host-homed groups' weights, gradients and
//                optimizer state exist once, made by rank 0's trainer; the others share it (a
//                host_store, train/group_state.hpp), stream the weights from it and never write
//                them.
// ranks == 1 with no all_reduce is the plain, single-device trainer.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <condition_variable>  // std::condition_variable
#include <cstddef>             // std::size_t
#include <cstdint>             // std::uint64_t
#include <functional>          // std::function
#include <mutex>               // std::mutex, std::unique_lock
#include <string>              // std::string
#include <vector>              // std::vector

namespace strata {

// Host-side sums of one double per rank, added in rank order (0, 1, ..., N - 1): every rank gets
// the same bits. abort() makes every waiting and later sum fail instead of waiting for a rank
// that will not come (its step threw).
class rank_exchange {
public:
    explicit rank_exchange(std::size_t ranks) : m_values(ranks, 0.0) {
        if (ranks == 0) throw error("rank_exchange: 0 ranks", "a data-parallel group has at least one rank");
    }
    rank_exchange(const rank_exchange&) = delete;
    rank_exchange& operator=(const rank_exchange&) = delete;

    std::size_t size() const { return m_values.size(); }

    // Every rank calls it once per round with its value; returns the sum over the ranks.
    double sum(std::size_t rank, double value) {
        std::unique_lock lock(m_mutex);
        check_failure();
        m_values.at(rank) = value;
        const std::uint64_t round = m_round;
        if (++m_arrived == m_values.size()) {
            double total = 0;
            for (double v : m_values) total += v;
            m_result = total;
            m_arrived = 0;
            ++m_round;
            m_cv.notify_all();
            return total;
        }
        m_cv.wait(lock, [&] { return m_round != round || !m_failure.empty(); });
        if (m_round == round) check_failure();
        return m_result;  // the next round cannot end before this rank has joined it
    }

    void abort(const std::string& why) {
        std::lock_guard lock(m_mutex);
        if (m_failure.empty()) m_failure = why;
        m_cv.notify_all();
    }

private:
    void check_failure() const {  // m_mutex held
        if (!m_failure.empty())
            throw error("data-parallel step abandoned: " + m_failure,
                        "another rank failed first: its error is the one to read");
    }

    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::vector<double> m_values;
    std::size_t m_arrived = 0;
    std::uint64_t m_round = 0;
    double m_result = 0;
    std::string m_failure;  // non-empty: aborted
};

template <class R, class Stream, class Event>
struct rank_link {
    std::size_t rank = 0;
    std::size_t ranks = 1;
    std::function<Event(Stream&, R*, std::size_t)> all_reduce;  // empty when ranks == 1
    std::function<Event(Stream&, R*, std::size_t, std::size_t)> broadcast;  // (data, n, root); empty when ranks == 1
    rank_exchange* exchange = nullptr;                           // null when ranks == 1

    bool parallel() const { return ranks > 1; }
    bool owns_host_state() const { return rank == 0; }
};

}  // namespace strata
