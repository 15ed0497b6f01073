// pinned_host: the CUDA backend's host tier, page-locked memory the GPU copies at link speed.
//
// Up to pinned_chunk: one cudaHostAlloc. Larger: an anonymous mmap aligned to pinned_chunk,
// registered with cudaHostRegister one chunk at a time, so pinning 100 GiB fails early, says how
// far it got and gives everything back, instead of one all-or-nothing call of minutes. Registered
// memory is pinned memory for cudaMemcpyAsync; the backend splits copies at chunk boundaries
// (bytes_to_chunk_end) so that none spans two registrations.
//
// Named synchronization: cudaFreeHost and cudaHostUnregister wait for the GPU.
#pragma once

#include <strata/backend/pinning.hpp>  // pinned_chunk, pinning_limit_exceeded, pinning_error
#include <strata/core/bytes.hpp>       // format_bytes
#include <strata/tier/resources.hpp>   // read_host_memory_limits

#include <cuda_runtime.h>  // cudaHostAlloc, cudaHostRegister, cudaHostUnregister, cudaFreeHost

#include <sys/mman.h>  // mmap, munmap

#include <algorithm>  // std::min
#include <cerrno>     // errno
#include <cstddef>    // std::size_t, std::byte
#include <cstring>    // std::strerror
#include <string>     // std::string, std::to_string

namespace strata::cuda {

inline bool pinned_in_chunks(std::size_t bytes) { return bytes > pinned_chunk; }

namespace detail {
inline std::string cuda_reason(cudaError_t status) {
    return std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")";
}

// An anonymous private mapping of `bytes` starting at a multiple of pinned_chunk, or nullptr.
inline std::byte* map_chunk_aligned(std::size_t bytes) {
    const std::size_t reserved = bytes + pinned_chunk;
    void* mapped = ::mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) return nullptr;
    auto* first = static_cast<std::byte*>(mapped);
    std::byte* aligned = first + bytes_to_chunk_end(first) % pinned_chunk;
    if (aligned > first) ::munmap(first, static_cast<std::size_t>(aligned - first));
    if (std::byte* tail = aligned + bytes; tail < first + reserved)
        ::munmap(tail, static_cast<std::size_t>(first + reserved - tail));
    return aligned;
}

inline void unregister_chunks(std::byte* base, std::size_t registered) noexcept {
    for (std::size_t done = 0; done < registered; done += pinned_chunk) (void)cudaHostUnregister(base + done);
}
}  // namespace detail

// Pins `bytes` (a multiple of the page) of host memory for `what`. `already_pinned`, the bytes
// the backend holds pinned now, goes into the error when the OS refuses.
inline void* pin_host(std::size_t bytes, const std::string& what, std::size_t already_pinned) {
    if (const auto limits = read_host_memory_limits(); const auto why = pinning_limit_exceeded(bytes, already_pinned, limits))
        throw pinning_error(what, bytes, already_pinned, *why, limits);
    if (!pinned_in_chunks(bytes)) {
        void* p = nullptr;
        if (const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocPortable); status != cudaSuccess) {
            (void)cudaGetLastError();
            throw pinning_error(what, bytes, already_pinned, "cudaHostAlloc failed: " + detail::cuda_reason(status),
                                read_host_memory_limits());
        }
        return p;
    }
    std::byte* const base = detail::map_chunk_aligned(bytes);
    if (!base)
        throw pinning_error(what, bytes, already_pinned, std::string("mmap failed: ") + std::strerror(errno),
                            read_host_memory_limits());
    const std::size_t chunks = (bytes + pinned_chunk - 1) / pinned_chunk;
    for (std::size_t done = 0; done < bytes; done += pinned_chunk) {
        const std::size_t n = std::min(pinned_chunk, bytes - done);
        if (const cudaError_t status = cudaHostRegister(base + done, n, cudaHostRegisterPortable); status != cudaSuccess) {
            (void)cudaGetLastError();
            const auto limits = read_host_memory_limits();  // before giving back: what the OS allowed
            detail::unregister_chunks(base, done);
            ::munmap(base, bytes);
            throw pinning_error(what, bytes, already_pinned,
                                "cudaHostRegister of chunk " + std::to_string(done / pinned_chunk + 1) + " of " +
                                    std::to_string(chunks) + " (" + format_bytes(n) + ") failed after " +
                                    format_bytes(done) + " had been registered: " + detail::cuda_reason(status),
                                limits);
        }
    }
    return base;
}

// Gives back what pin_host(bytes, ...) returned.
inline void unpin_host(void* p, std::size_t bytes) noexcept {
    if (!pinned_in_chunks(bytes)) {
        cudaFreeHost(p);
        return;
    }
    auto* const base = static_cast<std::byte*>(p);
    detail::unregister_chunks(base, bytes);
    ::munmap(base, bytes);
}

}  // namespace strata::cuda
