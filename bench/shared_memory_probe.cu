// What a warp's float4 shared-memory read costs, by which lanes share an address (the rule behind
// attention_detail::place). Each pattern gives lane l a row r(l) of a (64, 68) float tile; every
// thread of 4 blocks of 256 per multiprocessor then reads float4s of its row, 64 reads unrolled
// per iteration, and the cycles per warp read and multiprocessor (clock64) are printed next to
// the pattern's prediction: 2 wavefronts (cycles of the shared-memory pipe) where lanes n and n^1
// or n and n^2 read the same address, 4 otherwise. Measured on an H100 (Nsight Compute's
// l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld, 2026-12-06): exactly that, whatever the
// number of distinct rows. Run: strata_bench_shared_memory_probe (no arguments).
#include <strata/kernels/cuda/attention.cuh>  // attention_detail::place, the kernels' placement

#include <cuda_runtime.h>

#include <cstdio>   // std::printf
#include <cstddef>  // std::size_t
#include <cstdlib>  // EXIT_FAILURE
#include <vector>   // std::vector

namespace {

constexpr int ld = 68;  // the attention tiles' row stride at head size 64: 8 consecutive rows fill 32 banks
constexpr int blocks_per_sm = 4, threads = 256, iterations = 256, unrolled = 64;

struct pattern {
    const char* name;
    int wavefronts;  // predicted per warp read
};
constexpr pattern patterns[] = {
    {"all lanes one row", 2},
    {"lane >> 4: a row per half-warp (the old ty side)", 2},
    {"lane & 15: 16 rows, n and n^1 apart (the old tx side)", 4},
    {"lane & 7: 8 rows, no pair shares", 4},
    {"lane >> 1: 16 rows, n and n^1 share", 2},
    {"(lane & 1) | (lane >> 2) << 1: 16 rows, n and n^2 share", 2},
    {"place's ty: 4 rows, n and n^1 share", 2},
    {"place's tx: 8 rows, n and n^2 share", 2},
    {"lane: 32 rows", 4},
};
constexpr int pattern_count = sizeof(patterns) / sizeof(patterns[0]);

__device__ int row_of(int p, int lane) {
    switch (p) {
    case 0: return 0;
    case 1: return lane >> 4;
    case 2: return lane & 15;
    case 3: return lane & 7;
    case 4: return lane >> 1;
    case 5: return (lane & 1) | ((lane >> 2) << 1);
    case 6: return strata::kernels::cuda::attention_detail::place<8>(lane).ty;
    case 7: return strata::kernels::cuda::attention_detail::place<8>(lane).tx;
    default: return lane;
    }
}

// out: a value per thread (keeps the reads alive); cycles: each block's clock64 span of its reads.
__global__ void probe(float* out, long long* cycles, int p) {
    __shared__ __align__(16) float tile[64 * ld];
    for (int i = threadIdx.x; i < 64 * ld; i += blockDim.x) tile[i] = static_cast<float>(i % 7);
    __syncthreads();
    const long long begin = clock64();
    const float* row = tile + row_of(p, threadIdx.x % 32) * ld;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int it = 0; it < iterations; ++it) {
#pragma unroll
        for (int c = 0; c < unrolled; ++c) {  // columns 0, 4, ..., 60, four times: the reads stay in the row
            const float4 v = *reinterpret_cast<const float4*>(row + 4 * (c % 16));
            acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
        }
        __syncwarp();  // keeps the compiler from merging iterations' reads
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc.x + acc.y + acc.z + acc.w;
    __syncthreads();
    if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - begin;
}

bool ok(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    std::printf("strata_bench_shared_memory_probe: %s: %s\n", what, cudaGetErrorString(e));
    return false;
}

}  // namespace

int main() {
    cudaDeviceProp prop{};
    if (!ok(cudaGetDeviceProperties(&prop, 0), "no CUDA device")) return EXIT_FAILURE;
    const int blocks = blocks_per_sm * prop.multiProcessorCount;
    float* out = nullptr;
    long long* cycles = nullptr;
    if (!ok(cudaMalloc(&out, sizeof(float) * blocks * threads), "cudaMalloc") ||
        !ok(cudaMalloc(&cycles, sizeof(long long) * blocks), "cudaMalloc"))
        return EXIT_FAILURE;
    // The 4 blocks a multiprocessor holds run side by side: a block's span is the multiprocessor's.
    const double reads_per_sm = static_cast<double>(blocks_per_sm) * threads / 32 * iterations * unrolled;
    std::printf("float4 shared-memory reads, %s (%d multiprocessors)\n", prop.name, prop.multiProcessorCount);
    std::printf("  %-58s %10s %12s\n", "lanes' rows", "predicted", "cycles/read");
    std::vector<long long> host(static_cast<std::size_t>(blocks));
    for (int p = 0; p < pattern_count; ++p) {
        probe<<<blocks, threads>>>(out, cycles, p);  // warm-up
        probe<<<blocks, threads>>>(out, cycles, p);
        if (!ok(cudaMemcpy(host.data(), cycles, sizeof(long long) * host.size(), cudaMemcpyDeviceToHost), "probe"))
            return EXIT_FAILURE;
        double mean = 0;
        for (long long c : host) mean += static_cast<double>(c) / blocks;
        std::printf("  %-58s %10d %12.2f\n", patterns[p].name, patterns[p].wavefronts, mean / reads_per_sm);
    }
    cudaFree(cycles);
    cudaFree(out);
    return 0;
}
