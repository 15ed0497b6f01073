// Attention backward on the GPU: attention.cuh's two kernels (recompute: 7 tile products per tile
// pair) against the key-tile backward of attention_backward.cuh (5 products; dq summed from
// partials or added in place in order), FP32, at GPT-2 124M's attention shape (B=8, T=1024,
// NH=12, HS=64) and at long context (B=1, T=32768 and 65536). Prints, per shape and algorithm,
// ms per backward, the ratio to recompute, TFLOP/s counting the 5 causal products, the workspace,
// the backward's time over the forward's (timed first, same shape), and checks on the results:
// max |difference| to recompute relative to max |recompute|, whether a second run gives the same
// bits, and a hash of the result (at head size 64 the wide and the 128-thread blocks must agree).
//
// Usage: strata_bench_attention [B T NH NKV HS]...   (five numbers per extra shape; NKV < NH runs
// the key-tile backward alone, recompute being multi-head only). STRATA_ATTN_PARTIALS_BUDGET_MB
// (default 32768) skips partials where its workspace is larger; STRATA_ATTN_ALGOS (e.g.
// "recompute,ordered") runs only the rows whose label it contains (the first row run is the
// reference of the ratios).
#include <strata/backend/cuda/check.hpp>              // strata::cuda::check
#include <strata/kernels/cuda/attention_backward.cuh> // attention_backward_key_tiles, attention_backward

#include <cuda_runtime.h>

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <cstddef>    // std::size_t
#include <cstdint>    // std::uint32_t, std::uint64_t
#include <cstdio>     // std::printf
#include <cstdlib>    // std::getenv, std::strtoull
#include <cstring>    // std::memcmp, std::strstr
#include <exception>  // std::exception
#include <vector>     // std::vector

namespace {

namespace gpu = strata::kernels::cuda;
using gpu::attention_backward_algo;
using strata::cuda::check;

struct shape {
    std::size_t B, T, NH, NKV, HS;
};

__global__ void fill_pattern(float* x, std::size_t n, unsigned seed) {
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed * 2246822519u;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        x[i] = static_cast<float>(h % 2000001u) * 1e-6f - 1.0f;
    }
}

struct buffer {
    float* p = nullptr;
    std::size_t n = 0;
    explicit buffer(std::size_t count) : n(count) { check(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(float)), "cudaMalloc"); }
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    ~buffer() { cudaFree(p); }
    void fill(unsigned seed) { fill_pattern<<<1024, 256>>>(p, n, seed); }
    void zero() { check(cudaMemset(p, 0, n * sizeof(float)), "cudaMemset"); }
    std::vector<float> download() const {
        std::vector<float> h(n);
        check(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
        return h;
    }
};

template <class F>
double milliseconds(int reps, F&& launch) {
    launch();  // warm-up
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    check(cudaEventRecord(start), "cudaEventRecord");
    for (int i = 0; i < reps; ++i) launch();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize (a kernel failed)");
    float ms = 0.f;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ms / reps;
}

void run(const shape& s, std::size_t partials_budget) {
    const std::size_t BT = s.B * s.T, A = s.NH * s.HS, row = (s.NH + 2 * s.NKV) * s.HS;
    const bool multi_head = s.NKV == s.NH;
    buffer qkv(BT * row), dout(BT * A), out(BT * A), lse(s.B * s.NH * s.T), dqkv(BT * row);
    qkv.fill(1), dout.fill(2);
    const int reps = s.B * s.T * s.T * s.NH >= (std::size_t{1} << 34) ? 3 : 10;
    double forward_ms = 0;
    {
        // The forward needs multi-head rows: with GQA, run it on k, v expanded (a copy per head).
        buffer qkv_mh(multi_head ? 0 : BT * 3 * A);
        if (!multi_head) {
            for (std::size_t part = 0; part < 2; ++part)
                for (std::size_t h = 0; h < s.NH; ++h)
                    check(cudaMemcpy2D(qkv_mh.p + (1 + part) * A + h * s.HS, 3 * A * sizeof(float),
                                       qkv.p + A + part * s.NKV * s.HS + h / (s.NH / s.NKV) * s.HS, row * sizeof(float),
                                       s.HS * sizeof(float), BT, cudaMemcpyDeviceToDevice),
                          "cudaMemcpy2D");
            check(cudaMemcpy2D(qkv_mh.p, 3 * A * sizeof(float), qkv.p, row * sizeof(float), A * sizeof(float), BT,
                               cudaMemcpyDeviceToDevice),
                  "cudaMemcpy2D");
        }
        const float* forward_qkv = multi_head ? qkv.p : qkv_mh.p;
        forward_ms = milliseconds(reps, [&] {  // its last run leaves out and lse for the backward
            gpu::attention_forward(out.p, lse.p, forward_qkv, s.B, s.T, A, s.NH, nullptr);
        });
        check(cudaDeviceSynchronize(), "attention_forward");
    }
    const double T = static_cast<double>(s.T);
    const double flops = 5.0 * 2.0 * s.B * s.NH * (T * T / 2) * s.HS;  // 5 causal (T, T, HS) products
    std::printf("\nB=%zu T=%zu NH=%zu NKV=%zu HS=%zu (%d timed runs each)\n", s.B, s.T, s.NH, s.NKV, s.HS, reps);
    // The forward's bits, so that two builds of the kernel can be compared (same hash: same output).
    const auto fnv1a = [](const std::vector<float>& v) {
        std::uint64_t h = 1469598103934665603ull;
        for (const float x : v) {
            std::uint32_t bits;
            std::memcpy(&bits, &x, sizeof bits);
            for (int i = 0; i < 4; ++i) h = (h ^ ((bits >> (8 * i)) & 0xffu)) * 1099511628211ull;
        }
        return h;
    };
    std::printf("  forward %.3f ms, %.1f TFLOP/s (the cost model's attention_forward_share: forward / (forward + "
                "backward)); out, lse hash %016llx %016llx\n",
                forward_ms, flops / 5.0 * 2.0 / (forward_ms * 1e9),
                static_cast<unsigned long long>(fnv1a(out.download())), static_cast<unsigned long long>(fnv1a(lse.download())));
    std::printf("  %-12s %10s %8s %9s %12s %14s %10s %9s %17s\n", "algo", "ms", "ratio", "TFLOP/s", "workspace MB",
                "max|diff| rel", "repeatable", "bwd/fwd", "dqkv hash");

    std::vector<float> reference;
    double reference_ms = 0;
    // partials at the library's bound (in bands where the triangle is larger), then in one band
    // (the whole triangle) where that differs and fits STRATA_ATTN_PARTIALS_BUDGET_MB.
    // At head size 64 the key-tile rows run in the kernels' wide blocks (256 threads); the "-128"
    // rows run the 128-thread blocks of the other head sizes, for the same bits (the hash column).
    struct variant {
        attention_backward_algo algo;
        std::size_t limit;
        const char* label;
        int threads = 0;
    };
    const std::size_t one_band = static_cast<std::size_t>(-1);
    const bool banded = gpu::attention_partials_bands(s.B, s.T, s.NH, s.HS) > 1;
    const bool wide = gpu::attention_detail::padded_head_size(s.HS) == gpu::attention_detail::wide::D;
    const std::size_t bound = gpu::attention_partials_limit_bytes;
    for (const variant& v : {variant{attention_backward_algo::recompute, bound, "recompute"},
                             variant{attention_backward_algo::partials, bound, "partials-128", 128},
                             variant{attention_backward_algo::partials, bound, "partials"},
                             variant{attention_backward_algo::partials, one_band, "partials-1"},
                             variant{attention_backward_algo::ordered, bound, "ordered-128", 128},
                             variant{attention_backward_algo::ordered, bound, "ordered"}}) {
        const attention_backward_algo algo = v.algo;
        if (algo == attention_backward_algo::recompute && !multi_head) continue;
        if (v.threads != 0 && !wide) continue;  // the same kernel as the row after it
        if (const char* only = std::getenv("STRATA_ATTN_ALGOS"); only && !std::strstr(only, v.label)) continue;
        if (v.limit == one_band && !banded) continue;  // the row above was one band already
        const std::size_t bytes = gpu::attention_backward_workspace(algo, s.B, s.T, s.NH, s.HS, v.limit);
        if (algo == attention_backward_algo::partials && bytes > std::max(partials_budget, gpu::attention_partials_limit_bytes)) {
            std::printf("  %-12s skipped: workspace %.0f MB above the budget (STRATA_ATTN_PARTIALS_BUDGET_MB)\n",
                        v.label, bytes / 1e6);
            continue;
        }
        if (algo == attention_backward_algo::partials && v.limit != one_band)
            std::printf("  %-12s %zu band(s) of query tiles\n", v.label,
                        gpu::attention_partials_bands(s.B, s.T, s.NH, s.HS, v.limit));
        void* workspace = nullptr;
        if (bytes > 0) check(cudaMalloc(&workspace, bytes), "cudaMalloc (workspace)");
        auto backward = [&] {
            if (algo == attention_backward_algo::recompute)
                gpu::attention_backward(dqkv.p, lse.p, dout.p, out.p, qkv.p, s.B, s.T, A, s.NH, nullptr);
            else
                gpu::attention_backward_key_tiles(dqkv.p, lse.p, dout.p, out.p, qkv.p, s.B, s.T, s.NH, s.NKV, s.HS,
                                                  algo, workspace, bytes, nullptr, v.limit, v.threads);
        };
        dqkv.zero();
        const double ms = milliseconds(reps, backward);
        dqkv.zero();
        backward();
        const std::vector<float> first = dqkv.download();
        dqkv.zero();
        backward();
        const std::vector<float> second = dqkv.download();
        if (workspace) cudaFree(workspace);
        const bool repeatable = std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0;
        double diff = 0, size = 0;
        if (reference.empty()) {
            reference = first;
            reference_ms = ms;
        } else {
            for (std::size_t i = 0; i < first.size(); ++i) {
                diff = std::max(diff, static_cast<double>(std::abs(first[i] - reference[i])));
                size = std::max(size, static_cast<double>(std::abs(reference[i])));
            }
        }
        std::printf("  %-12s %10.3f %8.3f %9.1f %12.1f %14.3g %10s %9.2f  %016llx\n", v.label, ms,
                    reference_ms > 0 ? reference_ms / ms : 1.0, flops / ms * 1e-9, bytes / 1e6,
                    size > 0 ? diff / size : 0.0, repeatable ? "yes" : "NO", forward_ms > 0 ? ms / forward_ms : 0.0,
                    static_cast<unsigned long long>(fnv1a(first)));
    }
    std::printf("  (ratio: the first row's ms / this row's; max|diff| rel: against the first row)\n");
}

}  // namespace

int main(int argc, char** argv) {
    try {
        std::vector<shape> shapes = {{8, 1024, 12, 12, 64}, {1, 32768, 12, 12, 64}, {1, 65536, 12, 12, 64}};
        if (argc > 1) {
            shapes.clear();
            if ((argc - 1) % 5 != 0) {
                std::fprintf(stderr, "usage: %s [B T NH NKV HS]...\n", argv[0]);
                return 2;
            }
            for (int i = 1; i + 4 < argc; i += 5)
                shapes.push_back({std::strtoull(argv[i], nullptr, 10), std::strtoull(argv[i + 1], nullptr, 10),
                                  std::strtoull(argv[i + 2], nullptr, 10), std::strtoull(argv[i + 3], nullptr, 10),
                                  std::strtoull(argv[i + 4], nullptr, 10)});
        }
        const char* budget = std::getenv("STRATA_ATTN_PARTIALS_BUDGET_MB");
        const std::size_t partials_budget = (budget ? std::strtoull(budget, nullptr, 10) : 32768) << 20;
        cudaDeviceProp prop{};
        check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
        std::printf("attention backward, FP32, %s\n", prop.name);
        for (const shape& s : shapes) run(s, partials_budget);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "strata_bench_attention: %s\n", e.what());
        return 1;
    }
}
