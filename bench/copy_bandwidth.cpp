// Copy bandwidth for every pair of tiers and every backend present, as bytes/s counters.
// On CUDA it adds pageable host memory next to pinned, to show why the host tier is pinned.
//
//   strata_bench_copy [--bytes=N] [--storage-dir=DIR] [google benchmark flags]
#include <strata/strata.hpp>
#ifdef STRATA_BENCH_WITH_CUDA
#include <strata/cuda.hpp>
#endif

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

using namespace strata;

namespace {

std::size_t g_bytes = std::size_t{256} << 20;
std::filesystem::path g_storage_dir;

tier_options bench_tiers() {
    return {.device_bytes = 4 * g_bytes + (64 << 20),
            .host_bytes = 4 * g_bytes + (64 << 20),
            .storage_bytes = 4 * g_bytes + (64 << 20),
            .storage_dir = g_storage_dir};
}

template <class B, Tier Dst, Tier Src>
void copy_pair(benchmark::State& state, B* backend) {
    tiered_tensor<std::byte, Src, B> src(*backend, {g_bytes}, std::string("bench_src_") + std::string(Src::name));
    tiered_tensor<std::byte, Dst, B> dst(*backend, {g_bytes}, std::string("bench_dst_") + std::string(Dst::name));
    auto s = backend->make_stream("bench");
    dst.copy_from(src, s).wait();  // warm up: first touch, page mapping
    for (auto _ : state) dst.copy_from(src, s).wait();
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * g_bytes));
}

template <class B, Tier Src>
void register_from(B* backend) {
    const std::string prefix = std::string(B::name) + "/" + std::string(Src::name) + "->";
    auto add = [&](auto dst_tag) {
        using Dst = decltype(dst_tag);
        benchmark::RegisterBenchmark((prefix + std::string(Dst::name)).c_str(),
                                     [backend](benchmark::State& st) { copy_pair<B, Dst, Src>(st, backend); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.5);
    };
    add(device_tier{});
    add(host_tier{});
    add(storage_tier{});
}

template <class B>
void register_all(B* backend) {
    register_from<B, device_tier>(backend);
    register_from<B, host_tier>(backend);
    register_from<B, storage_tier>(backend);
}

#ifdef STRATA_BENCH_WITH_CUDA
// Pageable (plain malloc'ed) host memory: what the host tier would cost if it were not pinned.
void pageable(benchmark::State& state, cuda_backend* backend, bool to_device) {
    std::vector<std::byte> host(g_bytes, std::byte{1});
    tiered_tensor<std::byte, device_tier, cuda_backend> dev(*backend, {g_bytes}, "bench_pageable_dev");
    auto s = backend->make_stream("bench");
    auto once = [&] {
        if (to_device)
            backend->copy(address_of(dev.view()), tier_id::device, host.data(), tier_id::host, g_bytes, s).wait();
        else
            backend->copy(host.data(), tier_id::host, address_of(dev.view()), tier_id::device, g_bytes, s).wait();
    };
    once();
    for (auto _ : state) once();
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * g_bytes));
}

// Both directions at once on two streams (the link is full duplex).
void bidirectional(benchmark::State& state, cuda_backend* backend) {
    tiered_tensor<std::byte, host_tier, cuda_backend> h1(*backend, {g_bytes}, "bench_bidir_h1"), h2(*backend, {g_bytes}, "bench_bidir_h2");
    tiered_tensor<std::byte, device_tier, cuda_backend> d1(*backend, {g_bytes}, "bench_bidir_d1"), d2(*backend, {g_bytes}, "bench_bidir_d2");
    auto up = backend->make_stream("h2d"), down = backend->make_stream("d2h");
    for (auto _ : state) {
        auto a = d1.copy_from(h1, up);
        auto b = h2.copy_from(d2, down);
        a.wait();
        b.wait();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * g_bytes));
}
#endif

}  // namespace

int main(int argc, char** argv) {
    std::vector<char*> rest;
    for (int i = 0; i < argc; ++i) {
        if (std::strncmp(argv[i], "--bytes=", 8) == 0)
            g_bytes = std::strtoull(argv[i] + 8, nullptr, 10);
        else if (std::strncmp(argv[i], "--storage-dir=", 14) == 0)
            g_storage_dir = argv[i] + 14;
        else
            rest.push_back(argv[i]);
    }
    int rest_argc = static_cast<int>(rest.size());
    benchmark::Initialize(&rest_argc, rest.data());

    auto cpu = std::make_unique<cpu_backend>(bench_tiers());
    register_all(cpu.get());
#ifdef STRATA_BENCH_WITH_CUDA
    std::unique_ptr<cuda_backend> gpu;
    if (cuda_backend::available()) {
        gpu = std::make_unique<cuda_backend>(bench_tiers());
        register_all(gpu.get());
        auto* g = gpu.get();
        benchmark::RegisterBenchmark("cuda/pageable->device", [g](benchmark::State& st) { pageable(st, g, true); })
            ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
        benchmark::RegisterBenchmark("cuda/device->pageable", [g](benchmark::State& st) { pageable(st, g, false); })
            ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
        benchmark::RegisterBenchmark("cuda/host<->device both at once", [g](benchmark::State& st) { bidirectional(st, g); })
            ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
    } else {
        std::fprintf(stderr, "strata_bench_copy: no GPU, CUDA pairs skipped\n");
    }
#endif
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
