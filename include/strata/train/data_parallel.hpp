// data_parallel_trainer: one trainer per device (rank), each on its share of the global batch,
// with one copy of the host state for all of them.
//
//   thread_group group(2);                                  // CPU: ranks as threads
//   std::vector<thread_communicator> comms{{group, 0}, {group, 1}};
//   options.homes = every_group(model.groups().size(), group_home::host());  // or a plan's
//   data_parallel_trainer<gpt_trainer<float, cpu_backend>, thread_communicator> dp(
//       {&b0, &b1}, std::move(comms), model, options);
//   dp.initialize(seed);
//   dp.step(micro);   // ranks x options.accum micro-batches: rank r takes [r accum, (r + 1) accum)
//
// What each rank does (tiered_trainer with a rank_link, train/rank_link.hpp):
//   - forward and backward of its own micro-batches, on its own device and streams;
//   - as each group's backward ends, its gradients are summed over the ranks on a "reduce"
//     stream (the Communicator's all_reduce), overlapped with the backward of the blocks before
//     it; the global norm is taken of the summed gradients, so every rank has the same one;
//   - the loss is summed over the ranks in rank order (rank_exchange): every rank sees the
//     same loss and norm and takes the same decision (a non-finite one stops them all);
//   - device-homed groups' weights and gradients are on every rank; the optimizer state of each
//     is kept by one rank (device_state_owners: round robin over the device-homed groups), which
//     alone updates the group and broadcasts the new weights, so every group is updated once
//     and each device holds about 1/N of the device-homed optimizer state;
//   - host-homed groups (streamed, pinned, moments on storage) exist ONCE: rank 0's trainer makes
//     their host state (group_state.hpp: host_store) and the other ranks share it:
//     only rank 0's summed gradients come home, its optimizer thread updates each group once,
//     and every rank waits for that update before it copies the group's weights to its device
//     in the next step. Host memory holds one copy of the training state however many ranks
//     stream from it (each rank adds only its staging: tokens, losses).
//
// Determinism: with thread_communicator the sums over the ranks add rank 0, 1, ... in order, so
// a run is bitwise repeatable. Against one device with accum x ranks micro-batches of the same
// global batch, only the order of the gradient sums differs (FP32 adds in another order: a few
// units in the last place per element); losses agree to that rounding carried through the
// updates (tests/train/data_parallel_test.cpp states and checks the bound).
//
// The step's rank threads: rank 0 runs on the caller's thread, rank r > 0 on a worker of its own
// (a cpu::stream). A rank whose step throws aborts the group (communicator and exchange) so that
// no other rank waits for it; the first error is rethrown. Checkpoints read each tensor from the
// rank that keeps it and write it to every rank that keeps a copy.
#pragma once

#include <strata/backend/cpu/stream.hpp>    // cpu::stream (the ranks' threads)
#include <strata/comm/communicator.hpp>     // Communicator
#include <strata/core/error.hpp>            // strata::error
#include <strata/data/loader.hpp>           // data::batch
#include <strata/train/rank_link.hpp>       // rank_link, rank_exchange
#include <strata/train/tiered_trainer.hpp>  // train_options, step_result, tiered_trainer

#include <cstddef>    // std::size_t
#include <exception>  // std::exception_ptr
#include <memory>     // std::unique_ptr
#include <span>       // std::span
#include <string>     // std::string
#include <string_view>  // std::string_view
#include <vector>     // std::vector

namespace strata {

namespace detail {
// Aborts a communicator's group, where the communicator can (thread_communicator's group can;
// an NCCL communicator's collectives fail on their own when a rank is gone, or time out).
template <class Comm>
void abort_group(Comm& comm, const std::string& why) {
    if constexpr (requires { comm.group().abort(comm.rank(), why); }) comm.group().abort(comm.rank(), why);
}
// Makes the rank's device current on the calling thread, where a backend has devices.
template <class B>
void make_current(B& backend) {
    if constexpr (requires { backend.make_current(); }) backend.make_current();
}
}  // namespace detail

template <class Trainer, Communicator Comm>
class data_parallel_trainer {
public:
    using trainer_type = Trainer;
    using model_type = typename Trainer::model_type;
    using backend_type = typename Comm::backend_type;
    using state_kind = trainer_state_kind;
    using R = typename model_type::value_type;

    // backends[r] and comms[r]: rank r's device and its communicator (comms[r].rank() == r).
    // `options` are one rank's: batch is its micro-batch, accum its micro-batches per step; the
    // step's global batch is ranks x accum x batch sequences.
    data_parallel_trainer(std::vector<backend_type*> backends, std::vector<Comm> comms, const model_type& model,
                          const train_options& options)
        : m_comms(std::move(comms)), m_exchange(backends.size()) {
        const std::size_t n = backends.size();
        if (n == 0) throw error("data_parallel_trainer: no ranks", "give one backend per device");
        if (m_comms.size() != n)
            throw error("data_parallel_trainer: " + std::to_string(n) + " backends and " + std::to_string(m_comms.size()) +
                        " communicators", "give one communicator per rank");
        for (std::size_t r = 0; r < n; ++r)
            if (m_comms[r].rank() != r || m_comms[r].size() != n)
                throw error("data_parallel_trainer: communicator " + std::to_string(r) + " is rank " +
                                std::to_string(m_comms[r].rank()) + " of " + std::to_string(m_comms[r].size()),
                            "comms[r] must be rank r of a group of as many ranks as backends");
        for (std::size_t r = 0; r < n; ++r) {
            typename Trainer::link dp;
            dp.rank = r;
            dp.ranks = n;
            if (n > 1) {
                Comm* comm = &m_comms[r];
                dp.all_reduce = [comm](auto& s, R* data, std::size_t count) { return comm->all_reduce(s, data, count); };
                dp.broadcast = [comm](auto& s, R* data, std::size_t count, std::size_t root) {
                    return comm->broadcast(s, data, count, root);
                };
                dp.exchange = &m_exchange;
            }
            m_backends.push_back(backends[r]);
            detail::make_current(*backends[r]);  // its streams and memory on its device
            m_ranks.push_back(std::make_unique<Trainer>(*backends[r], model, options, std::move(dp),
                                                        r == 0 ? nullptr : m_ranks[0]->host_state()));
        }
        for (std::size_t r = 1; r < n; ++r) m_threads.emplace_back("rank " + std::to_string(r));
        m_options = options;
        m_options.accum = options.accum * n;
    }

    // The ranks above 0 stream rank 0's host state (shared with them), which their queued copies
    // may still read while rank 0's optimizer thread writes it: they go first.
    ~data_parallel_trainer() {
        while (!m_ranks.empty()) {
            detail::make_current(*m_backends[m_ranks.size() - 1]);
            m_ranks.pop_back();
        }
    }
    data_parallel_trainer(const data_parallel_trainer&) = delete;
    data_parallel_trainer& operator=(const data_parallel_trainer&) = delete;

    std::size_t ranks() const { return m_ranks.size(); }
    // Rank r's trainer, its device made current on the calling thread (CUDA: every call a
    // rank's trainer makes runs on the current device).
    Trainer& rank(std::size_t r) {
        detail::make_current(*m_backends.at(r));
        return *m_ranks[r];
    }

    const model_type& model() const { return m_ranks[0]->model(); }
    // The step's options: one rank's, with accum = ranks x the rank's accum (the micro-batches step() takes).
    const train_options& options() const { return m_options; }
    const train_options& rank_options() const { return m_ranks[0]->options(); }
    const auto& optimizer() const { return m_ranks[0]->optimizer(); }
    const auto& homes() const { return m_ranks[0]->homes(); }
    long step_count() const { return m_ranks[0]->step_count(); }
    void set_step_count(long step) {
        for (auto& t : m_ranks) t->set_step_count(step);
    }
    // Bytes moved over every rank's links (each rank's own H2D and D2H; the storage traffic is rank 0's).
    transfer_counters counters() const {
        transfer_counters sum;
        for (const auto& t : m_ranks) {
            const auto& c = t->counters();
            sum.h2d_bytes += c.h2d_bytes;
            sum.d2h_bytes += c.d2h_bytes;
            sum.storage_read_bytes += c.storage_read_bytes;
            sum.storage_write_bytes += c.storage_write_bytes;
        }
        return sum;
    }
    void finish_updates() {
        for (std::size_t r = 0; r < m_ranks.size(); ++r) rank(r).finish_updates();
    }
    // Every rank's streams, their tracks named "rank r: H2D" (a trace shows each rank's link).
    template <class F>
    void for_each_stream(F&& f) {
        for (std::size_t r = 0; r < m_ranks.size(); ++r)
            rank(r).for_each_stream([&](std::string_view track, auto& s) {
                const std::string name = "rank " + std::to_string(r) + ": " + std::string(track);
                f(std::string_view(name), s);
            });
    }

    // ranks x accum micro-batches: rank r takes micro[r accum, (r + 1) accum).
    step_result step(std::span<const data::batch> micro) {
        const std::size_t n = m_ranks.size(), accum = rank_options().accum;
        if (micro.size() != n * accum)
            throw error("data_parallel_trainer::step got " + std::to_string(micro.size()) + " micro-batches, expected " +
                        std::to_string(n) + " ranks x accum " + std::to_string(accum));
        std::size_t counted = 0;
        for (std::size_t r = 0; r < n; ++r) {
            const std::size_t c = detail::check_micro_batches(share(micro, r), rank_options(), step_count() + 1,
                                                              model().vocab_size());
            counted += c;
        }
        std::vector<step_result> results(n);
        run_ranks([&](std::size_t r) { results[r] = m_ranks[r]->step_share(share(micro, r), counted); });
        return results[0];
    }

    // Validation on rank 0 (the same number a single device gives).
    double evaluate(std::span<const data::batch> batches) { return rank(0).evaluate(batches); }

    // Rank 0 initializes (the host state and its device replicas); the other ranks' device
    // replicas are copies of rank 0's.
    void initialize(std::uint64_t seed) {
        rank(0).initialize(seed);
        copy_device_weights();
    }

    // From the rank that keeps it: the host state and the device weights from rank 0, a
    // device-homed group's optimizer state from its owner.
    void download(state_kind k, std::size_t g, std::span<R> out) { rank(keeper(k, g)).download(k, g, out); }
    // Into every rank that keeps a copy: a device-homed group's weights and gradients on every
    // rank, its optimizer state on its owner; the host state in rank 0.
    void upload(state_kind k, std::size_t g, std::span<const R> in) {
        const bool replicated = homes()[g].weights == tier_id::device && k.of != state_kind::part::optimizer;
        for (std::size_t r = 0; r < m_ranks.size(); ++r)
            if (r == keeper(k, g) || replicated) rank(r).upload(k, g, in);
    }

private:
    std::size_t keeper(state_kind k, std::size_t g) const {
        const bool on_device = homes()[g].weights == tier_id::device;
        return on_device && k.of == state_kind::part::optimizer ? m_ranks[0]->state_owner(g) : 0;
    }

    std::span<const data::batch> share(std::span<const data::batch> micro, std::size_t r) const {
        const std::size_t accum = rank_options().accum;
        return micro.subspan(r * accum, accum);
    }

    // f(r) on every rank's thread at once; a failing rank aborts the group so that no other rank
    // waits for it; the first failure (by rank) is rethrown once every rank has returned.
    template <class F>
    void run_ranks(F&& f) {
        const std::size_t n = m_ranks.size();
        std::vector<std::exception_ptr> failures(n);
        auto on_rank = [&](std::size_t r) {
            try {
                detail::make_current(*m_backends[r]);
                f(r);
            } catch (const std::exception& e) {
                failures[r] = std::current_exception();
                abort_all("rank " + std::to_string(r) + ": " + e.what());
            } catch (...) {
                failures[r] = std::current_exception();
                abort_all("rank " + std::to_string(r) + " failed");
            }
        };
        for (std::size_t r = 1; r < n; ++r) m_threads[r - 1].enqueue([&on_rank, r] { on_rank(r); }, "data-parallel step");
        on_rank(0);
        for (auto& t : m_threads) t.synchronize();  // named: every rank has finished its share
        for (auto& f : failures)
            if (f) std::rethrow_exception(f);
    }

    void abort_all(const std::string& why) {
        m_exchange.abort(why);
        for (auto& c : m_comms) detail::abort_group(c, why);
    }

    // Rank 0's weights of every device-homed group into the other ranks' copies.
    void copy_device_weights() {
        const auto& groups = model().groups();
        std::vector<R> block;
        for (std::size_t g = 0; g < groups.size(); ++g) {
            if (homes()[g].weights != tier_id::device || m_ranks.size() == 1) continue;
            block.resize(groups[g].numel());
            rank(0).download(state_kind::params, g, block);
            for (std::size_t r = 1; r < m_ranks.size(); ++r) rank(r).upload(state_kind::params, g, block);
        }
    }

    std::vector<Comm> m_comms;
    rank_exchange m_exchange;
    std::vector<backend_type*> m_backends;
    std::vector<std::unique_ptr<Trainer>> m_ranks;  // rank 0 first: the others point to it
    std::vector<cpu::stream> m_threads;             // ranks 1 .. N - 1
    train_options m_options;
};

}  // namespace strata
