// Communicator: the collectives of data-parallel training, enqueued on a backend stream.
//
// Glossary: N ranks (one per device), r this rank, n elements, R the element type (float or
// double). A rank is one model replica with its own backend and streams; every rank of a group
// calls the same collectives in the same order (as with NCCL), each on one of its own streams.
//
//   all_reduce(s, data, n)              data (n) <- sum over ranks of data (n), on every rank
//   reduce_scatter(s, send, recv, n)    recv (n) <- sum over ranks of send[r n, (r + 1) n)
//   all_gather(s, send, recv, n)        recv[k n, (k + 1) n) <- send (n) of rank k, for every k
//   broadcast(s, data, n, root)         data (n) <- data (n) of rank `root`
//
// Like every copy in strata, a collective only enqueues work: it runs on `s` after everything
// enqueued on `s` before it, and returns an event that completes when it has. The buffers must
// stay valid until then. A rank's buffers live in its backend's memory (the CPU's for
// thread_communicator, its device's for nccl_communicator). In place is allowed: all_reduce
// always; reduce_scatter with recv = send + r n; all_gather with send = recv + r n.
//
// Sums are over ranks in a fixed order per implementation, so a run is bitwise repeatable; the
// order differs between implementations (thread_communicator adds rank 0, 1, ... N - 1; NCCL its
// ring or tree), so two implementations agree to FP32 reduction-order rounding, not bitwise.
//
// Failure: a collective that cannot complete (a rank called another collective or another size,
// a rank aborted, a rank never came) fails on every rank with one strata::error naming the ranks
// and the collective, surfacing at the stream's next event wait, instead of hanging.
//
// Implementations: thread_communicator<R> (comm/thread_communicator.hpp: ranks as threads of one
// process, CPU backend; what CI runs, under ThreadSanitizer) and nccl_communicator
// (comm/nccl_communicator.hpp: NCCL, one thread per GPU of one process).
#pragma once

#include <strata/backend/backend.hpp>  // Backend

#include <concepts>  // std::same_as
#include <cstddef>   // std::size_t

namespace strata {

template <class C>
concept Communicator =
    Backend<typename C::backend_type> &&
    requires(C& c, typename C::backend_type::stream& s, float* data, const float* send, std::size_t n) {
        { c.rank() } -> std::same_as<std::size_t>;
        { c.size() } -> std::same_as<std::size_t>;
        { c.all_reduce(s, data, n) } -> std::same_as<typename C::backend_type::event>;
        { c.reduce_scatter(s, send, data, n) } -> std::same_as<typename C::backend_type::event>;
        { c.all_gather(s, send, data, n) } -> std::same_as<typename C::backend_type::event>;
        { c.broadcast(s, data, n, n) } -> std::same_as<typename C::backend_type::event>;
    };

}  // namespace strata
