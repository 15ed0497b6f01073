// Host AdamW throughput next to STREAM-like memory bandwidth over the same buffers, in one run.
//
//   strata_bench_adamw [--params=N] [--threads=T] [google benchmark flags]
//
// N parameters (default 64M: 1 GiB of fp32 state), T threads for the pool rows (default: every
// core). One AdamW step reads p, g, m, v and writes p, m, v: 28 bytes per parameter, with no
// write-allocate traffic since every line it writes was just read. Memory, not arithmetic, should
// bound it, so the yardsticks are bandwidth rows over the same buffers: STREAM copy and triad
// (counted as STREAM does, 8 and 12 bytes per element) and an "adamw-shaped" stream with AdamW's
// exact traffic (4 reads, 3 in-place writes) and a trivial add. The summary at the end prints
// each AdamW row's bytes/s over those rows on the same number of threads: 1.0 against
// adamw-shaped means AdamW runs at the memory's speed. items_per_second counts parameters for
// AdamW rows and elements for STREAM rows.
#include <strata/optim/adamw.hpp>             // adamw_update, adamw_hparams
#include <strata/optim/adamw_simd.hpp>        // adamw_update_fast, adamw_update_parallel, adamw_path
#include <strata/optim/host_thread_pool.hpp>  // host_thread_pool

#include <benchmark/benchmark.h>  // benchmark::State, RegisterBenchmark, ClobberMemory

#include <algorithm>  // std::max
#include <chrono>     // std::chrono::steady_clock, std::chrono::duration
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::printf, std::fprintf
#include <cstdlib>    // std::aligned_alloc, std::free, std::strtoull
#include <cstring>    // std::strncmp, std::memcpy
#include <map>        // std::map
#include <memory>     // std::unique_ptr
#include <new>        // std::bad_alloc
#include <span>       // std::span
#include <string>     // std::string
#include <vector>     // std::vector

namespace {

std::size_t g_params = std::size_t{64} << 20;
std::size_t g_threads = strata::host_thread_pool::default_threads();

struct free_deleter {
    void operator()(float* p) const noexcept { std::free(p); }
};
using page_buffer = std::unique_ptr<float[], free_deleter>;

page_buffer page_aligned_floats(std::size_t n) {
    const std::size_t bytes = (n * sizeof(float) + 4095) / 4096 * 4096;
    auto* p = static_cast<float*>(std::aligned_alloc(4096, bytes == 0 ? 4096 : bytes));
    if (p == nullptr) throw std::bad_alloc();
    return page_buffer(p);
}

// The four state arrays, page-aligned as strata lays out a layer; shared by every row, so AdamW and
// STREAM run over the same bytes.
struct state_buffers {
    page_buffer p, g, m, v;
    std::size_t n;
    explicit state_buffers(std::size_t count)
        : p(page_aligned_floats(count)), g(page_aligned_floats(count)), m(page_aligned_floats(count)),
          v(page_aligned_floats(count)), n(count) {
        for (std::size_t i = 0; i < n; ++i) {  // first touch on this thread; realistic magnitudes
            p[i] = 0.02f * static_cast<float>(static_cast<int>(i % 2001) - 1000) / 1000.0f;
            g[i] = 1e-3f * static_cast<float>(static_cast<int>(i % 977) - 488) / 488.0f;
            m[i] = 0.0f;
            v[i] = 0.0f;
        }
    }
    std::span<float> ps() { return {p.get(), n}; }
    std::span<const float> gs() { return {g.get(), n}; }
    std::span<float> ms() { return {m.get(), n}; }
    std::span<float> vs() { return {v.get(), n}; }
};

state_buffers* g_state = nullptr;
strata::host_thread_pool* g_pool = nullptr;

// Bytes/s of every row for the summary: the best of Google Benchmark's runs of that row (its
// calibration runs and --benchmark_repetitions), the one least disturbed by other load.
std::map<std::string, double> g_bytes_per_second;

template <class Body>
void timed_rows(benchmark::State& state, const std::string& name, double bytes_per_item, Body&& body) {
    const auto start = std::chrono::steady_clock::now();
    for (auto _ : state) {
        body();
        benchmark::ClobberMemory();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double items = static_cast<double>(state.iterations()) * static_cast<double>(g_state->n);
    state.SetItemsProcessed(static_cast<std::int64_t>(items));
    state.SetBytesProcessed(static_cast<std::int64_t>(items * bytes_per_item));
    if (seconds > 0 && state.iterations() > 0) {
        double& best = g_bytes_per_second[name];
        best = std::max(best, items * bytes_per_item / seconds);
    }
}

// ---- STREAM-like rows ----
// Explicit 16-float vectors (GCC vector extensions; at -O2 GCC does not vectorize these loops by
// itself, and a scalar loop would measure the core instead of the memory), each function cloned
// for AVX-512F and AVX2 and picked at load time, so the yardstick uses the same vector width as
// the AdamW rows.

using vec16 = float __attribute__((vector_size(64)));
constexpr std::size_t lanes = 16;
#if defined(__x86_64__)
#define STRATA_BENCH_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define STRATA_BENCH_CLONES
#endif

void copy_range(float* __restrict dst, const float* __restrict src, std::size_t n) {
    std::memcpy(dst, src, n * sizeof(float));
}

STRATA_BENCH_CLONES void triad_range(float* __restrict a, const float* __restrict b, const float* __restrict c, float s, std::size_t n) {
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes) {
        vec16 x, y;
        std::memcpy(&x, b + i, sizeof x);
        std::memcpy(&y, c + i, sizeof y);
        x += s * y;
        std::memcpy(a + i, &x, sizeof x);
    }
    for (; i < n; ++i) a[i] = b[i] + s * c[i];
}

// AdamW's memory traffic without its arithmetic: read p, g, m, v; write p, m, v (in place).
STRATA_BENCH_CLONES void adamw_shaped_range(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                        std::size_t n) {
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes) {
        vec16 a, b, c, d;
        std::memcpy(&a, p + i, sizeof a);
        std::memcpy(&b, g + i, sizeof b);
        std::memcpy(&c, m + i, sizeof c);
        std::memcpy(&d, v + i, sizeof d);
        a += b;
        c += b;
        d += b;
        std::memcpy(p + i, &a, sizeof a);
        std::memcpy(m + i, &c, sizeof c);
        std::memcpy(v + i, &d, sizeof d);
    }
    for (; i < n; ++i) p[i] += g[i], m[i] += g[i], v[i] += g[i];
}

// Runs body(begin, end) over [0, n) on the calling thread alone or on the pool.
template <class Body>
void over_state(bool pooled, Body&& body) {
    if (!pooled) return body(std::size_t{0}, g_state->n);
    g_pool->parallel_for(g_state->n, body, {.multiple = 1024, .min_chunk = 1 << 15});
}

std::string row_name(const std::string& what, bool pooled) { return what + (pooled ? ", pool" : ", 1 thread"); }

void stream_copy(benchmark::State& state, bool pooled) {
    auto& st = *g_state;
    timed_rows(state, row_name("stream copy", pooled), 2 * sizeof(float), [&] {
        over_state(pooled, [&](std::size_t b, std::size_t e) { copy_range(st.m.get() + b, st.g.get() + b, e - b); });
    });
}

void stream_triad(benchmark::State& state, bool pooled) {
    auto& st = *g_state;
    timed_rows(state, row_name("stream triad", pooled), 3 * sizeof(float), [&] {
        over_state(pooled, [&](std::size_t b, std::size_t e) {
            triad_range(st.v.get() + b, st.g.get() + b, st.m.get() + b, 0.5f, e - b);
        });
    });
}

void stream_adamw_shaped(benchmark::State& state, bool pooled) {
    auto& st = *g_state;
    timed_rows(state, row_name("stream adamw-shaped", pooled), 7 * sizeof(float), [&] {
        over_state(pooled, [&](std::size_t b, std::size_t e) {
            adamw_shaped_range(st.p.get() + b, st.g.get() + b, st.m.get() + b, st.v.get() + b, e - b);
        });
    });
}

// ---- AdamW rows: 28 bytes per parameter ----

constexpr double adamw_bytes = 7 * sizeof(float);

void reset_moments() {
    auto& st = *g_state;
    for (std::size_t i = 0; i < st.n; ++i) {  // the STREAM rows wrote over p, m, v
        st.p[i] = 0.01f;
        st.m[i] = st.v[i] = 0.0f;
    }
}

void adamw_reference(benchmark::State& state) {
    reset_moments();
    auto& st = *g_state;
    long step = 0;
    timed_rows(state, "adamw scalar reference, 1 thread", adamw_bytes, [&] {
        strata::adamw_update<float>(st.ps(), st.gs(), st.ms(), st.vs(), strata::adamw_hparams{}, 1e-4, ++step, true);
    });
}

void adamw_single(benchmark::State& state, strata::adamw_path path) {
    if (!strata::adamw_path_available(path)) {
        state.SkipWithError((std::string(strata::name_of(path)) + " is not available on this CPU").c_str());
        return;
    }
    reset_moments();
    auto& st = *g_state;
    long step = 0;
    timed_rows(state, row_name("adamw " + std::string(strata::name_of(path)), false), adamw_bytes, [&] {
        strata::adamw_update_fast(st.ps(), st.gs(), st.ms(), st.vs(), {}, 1e-4, ++step, true, path);
    });
}

void adamw_pooled(benchmark::State& state, strata::adamw_path path) {
    reset_moments();
    auto& st = *g_state;
    long step = 0;
    timed_rows(state, row_name("adamw " + std::string(strata::name_of(strata::resolve(path))), true), adamw_bytes, [&] {
        strata::adamw_update_parallel(*g_pool, st.ps(), st.gs(), st.ms(), st.vs(), {}, 1e-4, ++step, true, path);
    });
}

void print_summary() {
    const auto find = [](const std::string& key) {
        const auto it = g_bytes_per_second.find(key);
        return it == g_bytes_per_second.end() ? 0.0 : it->second;
    };
    std::printf("\nsummary: %zu params (%.2f GiB of fp32 state), pool of %zu threads\n", g_params,
                static_cast<double>(g_params) * 16 / (1 << 30), g_threads);
    std::printf("%-34s %10s %9s %17s %12s\n", "row", "Gparams/s", "GB/s", "x adamw-shaped", "x triad");
    for (const auto& [name, bytes_per_second] : g_bytes_per_second) {
        const bool pooled = name.find(", pool") != std::string::npos;
        const double shaped = find(row_name("stream adamw-shaped", pooled));
        const double triad = find(row_name("stream triad", pooled));
        if (name.rfind("adamw", 0) == 0)
            std::printf("%-34s %10.3f %9.2f %17.2f %12.2f\n", name.c_str(), bytes_per_second / adamw_bytes / 1e9,
                        bytes_per_second / 1e9, shaped > 0 ? bytes_per_second / shaped : 0.0,
                        triad > 0 ? bytes_per_second / triad : 0.0);
        else
            std::printf("%-34s %10s %9.2f %17s %12s\n", name.c_str(), "-", bytes_per_second / 1e9, "-", "-");
    }
    std::printf("(x columns: bytes/s over the STREAM row on the same threads; same T = 1 thread or the pool)\n");
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<char*> rest;
    for (int i = 0; i < argc; ++i) {
        if (std::strncmp(argv[i], "--params=", 9) == 0)
            g_params = std::strtoull(argv[i] + 9, nullptr, 10);
        else if (std::strncmp(argv[i], "--threads=", 10) == 0)
            g_threads = std::strtoull(argv[i] + 10, nullptr, 10);
        else
            rest.push_back(argv[i]);
    }
    int rest_argc = static_cast<int>(rest.size());
    benchmark::Initialize(&rest_argc, rest.data());
    if (g_params == 0 || g_threads == 0) {
        std::fprintf(stderr, "strata_bench_adamw: --params and --threads must be >= 1\n");
        return 2;
    }

    state_buffers state(g_params);
    strata::host_thread_pool pool(g_threads);
    g_state = &state;
    g_pool = &pool;

    const auto add = [](const std::string& name, auto fn) {
        benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
    };
    const std::string pool_suffix = "/pool_" + std::to_string(g_threads) + "_threads";
    add("stream/copy/1_thread", [](benchmark::State& s) { stream_copy(s, false); });
    add("stream/triad/1_thread", [](benchmark::State& s) { stream_triad(s, false); });
    add("stream/adamw_shaped/1_thread", [](benchmark::State& s) { stream_adamw_shaped(s, false); });
    add("stream/copy" + pool_suffix, [](benchmark::State& s) { stream_copy(s, true); });
    add("stream/triad" + pool_suffix, [](benchmark::State& s) { stream_triad(s, true); });
    add("stream/adamw_shaped" + pool_suffix, [](benchmark::State& s) { stream_adamw_shaped(s, true); });
    add("adamw/scalar_reference/1_thread", [](benchmark::State& s) { adamw_reference(s); });
    add("adamw/avx2_fma/1_thread", [](benchmark::State& s) { adamw_single(s, strata::adamw_path::avx2_fma); });
    add("adamw/avx512f/1_thread", [](benchmark::State& s) { adamw_single(s, strata::adamw_path::avx512f); });
    add("adamw/scalar" + pool_suffix, [](benchmark::State& s) { adamw_pooled(s, strata::adamw_path::scalar); });
    add("adamw/best" + pool_suffix, [](benchmark::State& s) { adamw_pooled(s, strata::adamw_path::automatic); });
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    print_summary();
    return 0;
}
