// The one place the example programs choose a backend type: --device (use_cuda) says CUDA or the
// CPU, and with_backend turns that into the type B every later step is written for (the device
// tier's default bytes, the GEMM math, the machine planned for, one backend per rank).
// Example code, not library code: strata-gpt and strata-llama include it.
#pragma once

#include <strata/backend/cpu_backend.hpp>  // cpu_backend
#include <strata/core/error.hpp>           // strata::error
#include <strata/core/format.hpp>          // fmt::format
#include <strata/tier/resources.hpp>       // physical_memory_bytes, tier_options
#ifdef STRATA_WITH_CUDA
#include <strata/cuda.hpp>  // cuda_backend, cuda::device_count, ops<cuda_backend>
#endif

#include <cstddef>      // std::size_t
#include <memory>       // std::unique_ptr, std::make_unique
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

namespace strata::examples {

// f.template operator()<B>() with B = cuda_backend when `cuda` (use_cuda's answer), else cpu_backend.
template <class F>
decltype(auto) with_backend(bool cuda, F&& f) {
#ifdef STRATA_WITH_CUDA
    if (cuda) return f.template operator()<cuda_backend>();
#else
    (void)cuda;
#endif
    return f.template operator()<cpu_backend>();
}

// f(backend) on one backend of the kind --device chose, with `tiers` (sample, score).
template <class F>
decltype(auto) on_backend(bool cuda, const tier_options& tiers, F&& f) {
    return with_backend(cuda, [&]<class B>() -> decltype(auto) {
        B backend(tiers);
        return f(backend);
    });
}

// The device tier's default bytes on B: the GPU's free memory less a margin, or on the CPU backend
// (whose "device" is host memory) a quarter of RAM.
template <class B>
std::size_t default_device_bytes() {
#ifdef STRATA_WITH_CUDA
    if constexpr (std::is_same_v<B, cuda_backend>) return cuda_backend::default_device_budget();
#endif
    return physical_memory_bytes() / 4;
}

// --tf32 on B: the CUDA GEMMs' math (TF32 tensor cores or strict FP32); the CPU backend has one.
template <class B>
void set_gemm_math(bool tf32) {
    if constexpr (std::is_same_v<B, cpu_backend>) {
        if (tf32) throw error("--tf32 applies to the CUDA backend's GEMMs only", "drop --tf32, or use --device cuda");
    }
#ifdef STRATA_WITH_CUDA
    if constexpr (std::is_same_v<B, cuda_backend>) ops<cuda_backend>::set_tf32(tf32);
#endif
}

// The GEMM math line of a run's summary, or "" on the CPU backend.
template <class B>
std::string gemm_math_line(bool tf32) {
    if constexpr (std::is_same_v<B, cpu_backend>) return {};
    return std::string("GEMM math: ") + (tf32 ? "TF32 tensor cores (--tf32)" : "strict FP32");
}

// --gpus N: refused beyond the GPUs this process sees (the CPU backend runs N ranks as threads).
template <class B>
void check_ranks(std::size_t ranks) {
#ifdef STRATA_WITH_CUDA
    if constexpr (std::is_same_v<B, cuda_backend>)
        if (ranks > static_cast<std::size_t>(cuda::device_count()))
            throw error("--gpus " + std::to_string(ranks) + ": this machine has " + std::to_string(cuda::device_count()) +
                            " GPU(s)",
                        "train on at most as many ranks as GPUs (CUDA_VISIBLE_DEVICES chooses which)");
#endif
    (void)ranks;
}

// A train command's backend flags on B, first of all: --tf32 sets the GEMM math (the one the
// calibration then measures; refused on the CPU), --gpus is refused beyond the GPUs there are.
template <class B>
void apply_backend_flags(bool tf32, std::size_t gpus) {
    set_gemm_math<B>(tf32);
    check_ranks<B>(gpus);
}

// The end of a run's model line: "batch 8 x 128 x accum 1 x 2 data-parallel ranks, CUDA backend".
template <class B, class Args>
std::string batch_and_backend(const Args& a) {
    return fmt::format("batch {} x {} x accum {}{}, {} backend", a.batch, a.seq_len, a.accum,
                       a.gpus > 1 ? fmt::format(" x {} data-parallel ranks", a.gpus) : std::string(),
                       std::is_same_v<B, cpu_backend> ? "CPU" : "CUDA");
}

// One backend per rank (--gpus): rank r on GPU r, or the r-th CPU rank.
template <class B>
std::vector<std::unique_ptr<B>> make_backends(const tier_options& tiers, std::size_t ranks) {
    std::vector<std::unique_ptr<B>> backends;
    for (std::size_t r = 0; r < ranks; ++r) {
        if constexpr (std::is_same_v<B, cpu_backend>)
            backends.push_back(std::make_unique<B>(tiers));
        else
            backends.push_back(std::make_unique<B>(tiers, static_cast<int>(r)));
    }
    return backends;
}

// The raw pointers of make_backends' backends (what the trainers take).
template <class B>
std::vector<B*> pointers_of(const std::vector<std::unique_ptr<B>>& owned) {
    std::vector<B*> out;
    for (const auto& b : owned) out.push_back(b.get());
    return out;
}

}  // namespace strata::examples
