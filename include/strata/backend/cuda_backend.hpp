// cuda_backend: the tier/stream/event interface of cpu_backend on one NVIDIA GPU.
//
// device tier: cudaMalloc; host tier: pinned memory, so copies run at link speed (cudaHostAlloc
// up to pinned_chunk, larger ones mmap + cudaHostRegister chunk by chunk: cuda/pinned_host.hpp;
// a refusal is one error naming the bytes and the OS's limits; pinning() says how long it took);
// storage tier: files, moved in stream order by cudaLaunchHostFunc callbacks that call
// storage_file::read/write (each keeps many requests in flight on the io_engine: pread/pwrite or
// io_uring, never a CUDA call) and staged through a pinned buffer to and from the device.
// Copies between memory tiers are cudaMemcpyAsync on the given stream.
//
// Named synchronization: deallocating device or pinned memory (cudaFree, cudaFreeHost,
// cudaHostUnregister) waits for the GPU. Allocate once, outside the step loop.
#pragma once

#include <strata/backend/cuda/check.hpp>        // check, device_count
#include <strata/backend/cuda/pinned_host.hpp>  // pin_host, unpin_host
#include <strata/backend/cuda/stream.hpp>       // cuda::stream, cuda::event, failure_slot
#include <strata/backend/pinning.hpp>           // pinning_meter, pinning_stats, bytes_to_chunk_end
#include <strata/core/bytes.hpp>                // page_size, round_up, format_bytes
#include <strata/core/error.hpp>                // strata::error
#include <strata/storage/storage_file.hpp>      // storage_file
#include <strata/tier/resources.hpp>            // tier_resources, tier_options
#include <strata/tier/tier.hpp>                 // tier_id

#include <cuda_runtime.h>  // cudaMalloc, cudaMemcpyAsync, cudaMemsetAsync

#include <algorithm>    // std::min
#include <chrono>       // std::chrono::steady_clock
#include <cstddef>      // std::size_t, std::byte
#include <memory>       // std::unique_ptr, std::shared_ptr
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace strata {

class cuda_backend {
public:
    using stream = cuda::stream;
    using event = cuda::event;
    static constexpr std::string_view name = "cuda";
    static constexpr std::size_t staging_chunk = std::size_t{8} << 20;

    static bool available() { return cuda::device_count() > 0; }

    // The device budget defaults to the free GPU memory less 5% for cuBLAS workspaces and the
    // CUDA context's own allocations.
    explicit cuda_backend(const tier_options& options = {}, int device = 0)
        : m_device(select(device)), m_tiers(options, default_device_budget()) {}

    // What the device tier gets when no budget is given: 95% of the GPU memory free now.
    static std::size_t default_device_budget() { return free_device_bytes() / 20 * 19; }

    cuda_backend(const cuda_backend&) = delete;
    cuda_backend& operator=(const cuda_backend&) = delete;

    int device() const { return m_device; }
    // "NVIDIA H200": the GPU's name (a calibration cache is keyed by it: plan/calibrate.hpp).
    std::string device_name() const {
        cudaDeviceProp properties{};
        cuda::check(cudaGetDeviceProperties(&properties, m_device), "cudaGetDeviceProperties");
        return properties.name;
    }
    // Makes this backend's GPU the calling thread's current device (a data-parallel rank's
    // thread calls it before it works with this backend).
    void make_current() const { cuda::check(cudaSetDevice(m_device), "cudaSetDevice"); }
    tier_budget& budget(tier_id t) { return m_tiers.budget(t); }
    const std::filesystem::path& storage_dir() const { return m_tiers.storage_dir(); }

    // The host tier's pinned allocations so far and the time pinning took.
    pinning_stats pinning() const { return m_pinning.stats(); }

    stream make_stream(std::string stream_name) { return stream(std::move(stream_name), m_failures); }

    // ---- memory of the addressable tiers ----

    void* allocate(tier_id t, std::size_t bytes, const std::string& what) {
        auto& budget = m_tiers.budget(t);
        const std::size_t charged = charge(bytes);
        budget.reserve(charged, what);
        if (t == tier_id::host) {
            try {
                const auto start = std::chrono::steady_clock::now();
                void* p = cuda::pin_host(charged, what, m_pinning.pinned_now());
                m_pinning.pinned(charged, std::chrono::steady_clock::now() - start);
                return p;
            } catch (...) {
                budget.release(charged);
                throw;
            }
        }
        void* p = nullptr;
        if (const cudaError_t status = cudaMalloc(&p, charged); status != cudaSuccess) {
            budget.release(charged);
            (void)cudaGetLastError();
            throw error("cudaMalloc of " + format_bytes(charged) + " for '" + what + "' failed: " +
                            cudaGetErrorString(status),
                        "the device tier budget is larger than what is free; lower it");
        }
        return p;
    }

    void deallocate(tier_id t, void* p, std::size_t bytes) noexcept {
        if (t == tier_id::device) {
            cudaFree(p);
        } else {
            cuda::unpin_host(p, charge(bytes));
            m_pinning.unpinned(charge(bytes));
        }
        m_tiers.budget(t).release(charge(bytes));
    }

    // ---- files of the storage tier ----

    std::unique_ptr<storage_file> create_file(const std::string& tensor_name, std::size_t bytes) {
        return m_tiers.create_file(tensor_name, bytes);
    }
    void destroy_file(std::unique_ptr<storage_file> file) noexcept { m_tiers.destroy_file(std::move(file)); }

    // ---- asynchronous copies and fills ----

    // A host side is split at pinned_chunk boundaries: a range over two cudaHostRegister'ed
    // chunks is not one pinned allocation to the driver, which could copy it as pageable memory.
    event copy(void* dst, tier_id dst_tier, const void* src, tier_id src_tier, std::size_t bytes, stream& s) {
        cuda::trace_span span(s, "copy");
        for (std::size_t done = 0; done < bytes;) {
            auto* const to = static_cast<std::byte*>(dst) + done;
            const auto* const from = static_cast<const std::byte*>(src) + done;
            std::size_t n = bytes - done;
            if (dst_tier == tier_id::host) n = std::min(n, bytes_to_chunk_end(to));
            if (src_tier == tier_id::host) n = std::min(n, bytes_to_chunk_end(from));
            cuda::check(cudaMemcpyAsync(to, from, n, cudaMemcpyDefault, s.native()), "cudaMemcpyAsync");
            done += n;
        }
        return s.record();
    }

    // `bytes` zero bytes at dst (device or pinned host memory): cudaMemsetAsync on `s`.
    event zero(void* dst, tier_id, std::size_t bytes, stream& s) {
        cuda::trace_span span(s, "zero");
        if (bytes) cuda::check(cudaMemsetAsync(dst, 0, bytes, s.native()), "cudaMemsetAsync (zero)");
        return s.record();
    }

    // Storage <-> host: one callback for the whole range. Storage <-> device: per staging_chunk,
    // a callback filling (or draining) the stream's pinned staging buffer, then the DMA; each
    // callback has staging_chunk / storage_file::chunk_bytes requests in flight.
    event read(void* dst, tier_id dst_tier, const storage_file& src, std::size_t offset, std::size_t bytes,
               stream& s) {
        if (dst_tier == tier_id::host) {
            s.enqueue_host([=, &src] { src.read(offset, dst, bytes); });
        } else {
            void* staging = s.staging(staging_chunk);
            for (std::size_t done = 0; done < bytes; done += staging_chunk) {
                const std::size_t n = std::min(staging_chunk, bytes - done);
                s.enqueue_host([=, &src] { src.read(offset + done, staging, n); });
                cuda::check(cudaMemcpyAsync(static_cast<std::byte*>(dst) + done, staging, n, cudaMemcpyHostToDevice,
                                            s.native()),
                            "cudaMemcpyAsync (staging -> device)");
            }
        }
        return s.record();
    }

    event write(storage_file& dst, std::size_t offset, const void* src, tier_id src_tier, std::size_t bytes,
                stream& s) {
        if (src_tier == tier_id::host) {
            s.enqueue_host([=, &dst] { dst.write(offset, src, bytes); });
        } else {
            void* staging = s.staging(staging_chunk);
            for (std::size_t done = 0; done < bytes; done += staging_chunk) {
                const std::size_t n = std::min(staging_chunk, bytes - done);
                cuda::check(cudaMemcpyAsync(staging, static_cast<const std::byte*>(src) + done, n,
                                            cudaMemcpyDeviceToHost, s.native()),
                            "cudaMemcpyAsync (device -> staging)");
                s.enqueue_host([=, &dst] { dst.write(offset + done, staging, n); });
            }
        }
        return s.record();
    }

    // Storage to storage never touches the GPU: one callback, with its own (pageable) bounce
    // buffers, reading the next round while it writes the current one.
    event copy(storage_file& dst, std::size_t dst_offset, const storage_file& src, std::size_t src_offset,
               std::size_t bytes, stream& s) {
        s.enqueue_host([=, &dst, &src] { storage_file::copy(dst, dst_offset, src, src_offset, bytes); });
        return s.record();
    }

private:
    static std::size_t charge(std::size_t bytes) { return round_up(bytes == 0 ? 1 : bytes, page_size); }

    static int select(int device) {
        const int count = cuda::device_count();
        if (count == 0) throw error("no CUDA device is available", "run on a machine with an NVIDIA GPU, or use the CPU backend", {"device"});
        if (device < 0 || device >= count)
            throw error("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                        " present)");
        cuda::check(cudaSetDevice(device), "cudaSetDevice");
        return device;
    }

    static std::size_t free_device_bytes() {
        std::size_t free = 0, total = 0;
        cuda::check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
        return free;
    }

    int m_device;
    std::shared_ptr<cuda::failure_slot> m_failures = std::make_shared<cuda::failure_slot>();
    tier_resources m_tiers;
    pinning_meter m_pinning;
};

}  // namespace strata
