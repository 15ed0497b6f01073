// What the CUDA kernel tests share: a skip (support/skip.hpp) on machines without a GPU, device buffers and a
// stream that clean up after themselves, and the two comparisons against the CPU oracle (bitwise,
// and the normalized error max |gpu - cpu| / max(1, max |cpu|)).
#pragma once

#include <strata/backend/cuda/check.hpp>          // cuda::check, cuda::device_count
#include <strata/kernels/cpu/gradient_check.hpp>  // random_vector

#include <doctest/doctest.h>  // MESSAGE

#include "support/skip.hpp"  // skip

#include <cuda_runtime.h>  // cudaMalloc, cudaMemcpy, cudaStreamCreate

#include <algorithm>  // std::max
#include <bit>        // std::bit_cast
#include <cmath>      // std::abs, std::isfinite, std::ldexp
#include <cstddef>    // std::size_t
#include <cstdint>    // std::uint32_t, std::uint64_t
#include <iomanip>    // std::setprecision
#include <limits>     // std::numeric_limits
#include <random>     // std::mt19937
#include <sstream>    // std::ostringstream
#include <string>     // std::string
#include <vector>     // std::vector

namespace strata::test {

// Every CUDA test case starts with: if (skip_without_gpu()) return;
inline bool skip_without_gpu() {
    if (cuda::device_count() > 0) return false;
    skip("cuda: no GPU on this machine");
    return true;
}

// n elements of T in device memory, starting `offset` elements into the allocation: offset 1 makes
// a float buffer that is not 16-byte aligned, the case where kernels fall back from float4.
template <class T>
class device_buffer {
public:
    explicit device_buffer(std::size_t n, std::size_t offset = 0) : m_size(n) {
        cuda::check(cudaMalloc(&m_allocation, std::max<std::size_t>(n + offset, 1) * sizeof(T)),
                    "cudaMalloc (test buffer)");
        m_data = m_allocation + offset;
    }
    explicit device_buffer(const std::vector<T>& host, std::size_t offset = 0) : device_buffer(host.size(), offset) {
        upload(host);
    }
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;
    ~device_buffer() { cudaFree(m_allocation); }

    T* get() const { return m_data; }
    std::size_t size() const { return m_size; }

    // Waits until the data is on the device: a cudaMemcpy from pageable memory may return before its
    // DMA lands, and the kernels under test run on a non-blocking stream that does not wait for it.
    void upload(const std::vector<T>& host) {
        REQUIRE(host.size() == m_size);
        cuda::check(cudaMemcpy(m_data, host.data(), m_size * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
        cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after an upload");
    }
    // Waits for all work on the device first (cudaDeviceSynchronize), so a test reads finished results.
    std::vector<T> download() const {
        cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (a kernel failed)");
        std::vector<T> host(m_size);
        cuda::check(cudaMemcpy(host.data(), m_data, m_size * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
        return host;
    }

private:
    T* m_allocation = nullptr;
    T* m_data = nullptr;
    std::size_t m_size = 0;
};

// A non-default stream, so the tests see that launchers use the stream they are given.
class test_stream {
public:
    test_stream() { cuda::check(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate"); }
    test_stream(const test_stream&) = delete;
    test_stream& operator=(const test_stream&) = delete;
    ~test_stream() { cudaStreamDestroy(m_stream); }
    operator cudaStream_t() const { return m_stream; }

private:
    cudaStream_t m_stream = nullptr;
};

// Mean milliseconds per call of launch() over `reps` calls after one warm-up call, timed with
// events on `stream`.
template <class Launch>
double time_ms(cudaStream_t stream, int reps, Launch&& launch) {
    launch();
    cudaEvent_t start = nullptr, stop = nullptr;
    cuda::check(cudaEventCreate(&start), "cudaEventCreate");
    cuda::check(cudaEventCreate(&stop), "cudaEventCreate");
    cuda::check(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; i < reps; ++i) launch();
    cuda::check(cudaEventRecord(stop, stream), "cudaEventRecord");
    cuda::check(cudaEventSynchronize(stop), "cudaEventSynchronize (a timed kernel failed)");
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ms / reps;
}

// x[i] = a pseudo-random value in [-1, 1] from a hash of i and seed: fills the large buffers of the
// speed tests without generating gigabytes on the host. (A template, so several test files may
// include it.)
template <int = 0>
__global__ void fill_pattern_kernel(float* x, std::size_t n, unsigned seed) {
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed * 2246822519u;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        x[i] = static_cast<float>(h % 2000001u) * 1e-6f - 1.0f;
    }
}

inline void fill_pattern(float* x, std::size_t n, unsigned seed) {
    fill_pattern_kernel<><<<1024, 256>>>(x, n, seed);
    cuda::check(cudaGetLastError(), "fill_pattern launch");
    cuda::check(cudaDeviceSynchronize(), "fill_pattern");
}

// GB/s of `bytes` moved in `ms` milliseconds.
inline double gigabytes_per_second(double bytes, double ms) { return bytes / (ms * 1e-3) * 1e-9; }

// ---- comparisons ----

// The bits of a float or double, to compare without == treating -0 == +0 or NaN != NaN.
inline std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }
inline std::uint64_t bits_of(double x) { return std::bit_cast<std::uint64_t>(x); }

// "" when gpu and cpu hold the same bits; else where they first differ, with both values.
template <class T>
std::string first_difference(const std::vector<T>& gpu, const std::vector<T>& cpu, const std::string& what) {
    if (gpu.size() != cpu.size()) return what + ": sizes differ";
    for (std::size_t i = 0; i < gpu.size(); ++i) {
        if (bits_of(gpu[i]) != bits_of(cpu[i])) {
            std::ostringstream text;
            text << std::setprecision(10) << what << ": first difference at [" << i << "] of " << gpu.size() << ": gpu "
                 << gpu[i] << " vs cpu " << cpu[i];
            return text.str();
        }
    }
    return "";
}

// max |gpu - cpu| / max(1, max |cpu|): relative to the tensor's scale, absolute below 1. A NaN or
// an infinity on either side counts as an infinite error, so it cannot slip under a threshold.
struct normalized {
    double error = 0;
    std::size_t index = 0;
    double gpu = 0, cpu = 0;

    std::string describe(const std::string& what) const {
        std::ostringstream text;
        text << std::setprecision(9) << what << ": normalized error " << error << ", worst at [" << index << "]: gpu "
             << gpu << " vs cpu " << cpu;
        return text.str();
    }
};

template <class G, class C>
normalized normalized_error(const std::vector<G>& gpu, const std::vector<C>& cpu) {
    normalized worst;
    if (gpu.size() != cpu.size()) {
        worst.error = std::numeric_limits<double>::infinity();
        return worst;
    }
    double scale = 1.0, largest = -1.0;
    for (const auto c : cpu) scale = std::max(scale, std::abs(static_cast<double>(c)));
    for (std::size_t i = 0; i < gpu.size(); ++i) {
        const double g = static_cast<double>(gpu[i]), c = static_cast<double>(cpu[i]);
        const double diff =
            std::isfinite(g) && std::isfinite(c) ? std::abs(g - c) : std::numeric_limits<double>::infinity();
        if (diff > largest) {
            largest = diff;
            worst.index = i, worst.gpu = g, worst.cpu = c;
        }
    }
    worst.error = std::max(largest, 0.0) / scale;
    return worst;
}

// The largest per-element |gpu - cpu| / max(floor, |gpu| + |cpu|): relative everywhere, for
// tensors whose small elements matter (probabilities of a 50257-way softmax). NaN or infinity on
// either side is an infinite error.
template <class G, class C>
normalized relative_error(const std::vector<G>& gpu, const std::vector<C>& cpu, double floor = 1e-30) {
    normalized worst;
    if (gpu.size() != cpu.size()) {
        worst.error = std::numeric_limits<double>::infinity();
        return worst;
    }
    worst.error = -1.0;
    for (std::size_t i = 0; i < gpu.size(); ++i) {
        const double g = static_cast<double>(gpu[i]), c = static_cast<double>(cpu[i]);
        const double err = std::isfinite(g) && std::isfinite(c)
                               ? std::abs(g - c) / std::max(floor, std::abs(g) + std::abs(c))
                               : std::numeric_limits<double>::infinity();
        if (err > worst.error) worst = {err, i, g, c};
    }
    worst.error = std::max(worst.error, 0.0);
    return worst;
}

// n floats uniform in [lo, hi) from a fixed seed (the CPU tests' generator).
inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, double lo = -1.0, double hi = 1.0) {
    return kernels::cpu::random_vector<float>(n, seed, lo, hi);
}

}  // namespace strata::test
