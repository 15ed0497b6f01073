// nccl_communicator: the Communicator (comm/communicator.hpp) of the CUDA backend, over NCCL.
//
// One process, one thread per GPU: nccl_group opens the communicators of the GPUs of this host
// at once (ncclCommInitAll), and each rank's thread uses its own, with its own cuda_backend on
// that GPU. Threads rather than processes because the ranks share the host's memory: the
// training state in pinned host memory is allocated once and every GPU streams it over its own
// PCIe link; processes would each need their own copy or an IPC mapping of it.
//
//   nccl_group group({0, 1});                        // GPUs 0 and 1
//   // on rank r's thread, with cuda_backend backend(options, group.device(r)):
//   nccl_communicator comm(group, r);
//   comm.all_reduce(s, grads, n);                    // ncclAllReduce on s, returns s.record()
//
// Sums follow NCCL's order (ring or tree), fixed for a given group and size, so a run repeats
// bitwise on the same machine; it is not thread_communicator's rank order.
//
// Built only where NCCL is found (CMake: STRATA_HAVE_NCCL, target strata_nccl).
#pragma once

#include <strata/backend/cuda_backend.hpp>  // cuda_backend
#include <strata/core/error.hpp>            // strata::error

#include <cuda_runtime.h>  // cudaSetDevice
#include <nccl.h>          // ncclComm_t, ncclAllReduce, ...

#include <cstddef>      // std::size_t
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

namespace strata {

namespace detail::nccl {
inline void check(ncclResult_t result, const char* what) {
    if (result != ncclSuccess)
        throw error(std::string("NCCL: ") + what + " failed: " + ncclGetErrorString(result),
                    "check that every rank calls the same collectives in the same order; NCCL_DEBUG=WARN prints "
                    "NCCL's own diagnosis");
}

template <class R>
ncclDataType_t type_of() {
    static_assert(std::is_same_v<R, float> || std::is_same_v<R, double>, "nccl_communicator: float or double");
    return std::is_same_v<R, float> ? ncclFloat32 : ncclFloat64;
}
}  // namespace detail::nccl

class nccl_group {
public:
    explicit nccl_group(std::vector<int> devices) : m_devices(std::move(devices)), m_comms(m_devices.size()) {
        if (m_devices.empty()) throw error("nccl_group: no GPUs", "name at least one device");
        detail::nccl::check(ncclCommInitAll(m_comms.data(), static_cast<int>(m_devices.size()), m_devices.data()),
                            "ncclCommInitAll");
    }
    nccl_group(const nccl_group&) = delete;
    nccl_group& operator=(const nccl_group&) = delete;
    ~nccl_group() {
        for (ncclComm_t c : m_comms)
            if (c != nullptr) ncclCommDestroy(c);
    }

    std::size_t size() const { return m_devices.size(); }
    int device(std::size_t rank) const { return m_devices.at(rank); }
    ncclComm_t comm(std::size_t rank) const { return m_comms.at(rank); }

private:
    std::vector<int> m_devices;
    std::vector<ncclComm_t> m_comms;
};

class nccl_communicator {
public:
    using backend_type = cuda_backend;
    using stream = cuda_backend::stream;
    using event = cuda_backend::event;

    nccl_communicator(nccl_group& group, std::size_t rank) : m_group(&group), m_rank(rank) {
        if (rank >= group.size())
            throw error("nccl_communicator: rank " + std::to_string(rank) + " of a group of " +
                        std::to_string(group.size()));
    }

    std::size_t rank() const { return m_rank; }
    std::size_t size() const { return m_group->size(); }

    template <class R>
    event all_reduce(stream& s, R* data, std::size_t n) {
        detail::nccl::check(ncclAllReduce(data, data, n, detail::nccl::type_of<R>(), ncclSum, comm(), s.native()),
                            "ncclAllReduce");
        return s.record();
    }

    template <class R>
    event reduce_scatter(stream& s, const R* send, R* recv, std::size_t n) {
        detail::nccl::check(ncclReduceScatter(send, recv, n, detail::nccl::type_of<R>(), ncclSum, comm(), s.native()),
                            "ncclReduceScatter");
        return s.record();
    }

    template <class R>
    event all_gather(stream& s, const R* send, R* recv, std::size_t n) {
        detail::nccl::check(ncclAllGather(send, recv, n, detail::nccl::type_of<R>(), comm(), s.native()),
                            "ncclAllGather");
        return s.record();
    }

    template <class R>
    event broadcast(stream& s, R* data, std::size_t n, std::size_t root) {
        if (root >= size())
            throw error("nccl_communicator::broadcast: root " + std::to_string(root) + " of a group of " +
                        std::to_string(size()));
        detail::nccl::check(ncclBroadcast(data, data, n, detail::nccl::type_of<R>(), static_cast<int>(root), comm(),
                                          s.native()),
                            "ncclBroadcast");
        return s.record();
    }

private:
    ncclComm_t comm() const { return m_group->comm(m_rank); }

    nccl_group* m_group;
    std::size_t m_rank;
};

}  // namespace strata
