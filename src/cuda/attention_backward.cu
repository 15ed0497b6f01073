// ops<cuda_backend> (nn/cuda_ops.hpp), attention's backward: the key-tile backward with dq partials
// (kernels/cuda/attention_backward.cuh: S, P, dP once per tile pair) where its workspace fits the
// library's bound, else the key-tile backward with dq added in order (head size 64 and up) or the
// two-kernel backward (kernels/cuda/attention.cuh: dk/dv and dq kernels, one instance each per
// padded head size); the largest part of strata's device code.
// Adding a kernel: the recipe at the top of src/cuda/elementwise.cu.
#include <strata/kernels/cuda/attention.cuh>           // attention_backward
#include <strata/kernels/cuda/attention_backward.cuh>  // attention_backward_key_tiles, attention_backward_pick
#include <strata/nn/cuda_ops.hpp>                      // ops<cuda_backend>

#include <atomic>   // std::atomic
#include <cstdint>  // std::uintptr_t
#include <string>   // std::to_string

namespace strata {

namespace kernels::cuda {
// The one copy of each kernel launcher this file calls (the headers declare them extern).
STRATA_CUDA_ATTENTION_BACKWARD_INSTANCES(template)
STRATA_CUDA_ATTENTION_KEY_TILES_INSTANCES(template)
}  // namespace kernels::cuda

namespace {
std::atomic<bool>& two_kernel_attention_flag() {
    static std::atomic<bool> on{false};
    return on;
}

// The attention backward ops<cuda_backend> runs for a shape: attention_backward_pick's (partials
// where its workspace fits the library's bound, in bands at D = 128, else ordered from D = 64 on
// and recompute below);
// recompute too for shapes the key-tile kernels do not take (attention_backward then refuses them
// with its own message).
kernels::cuda::attention_backward_algo attention_algo(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
    using kernels::cuda::attention_backward_algo;
    if (two_kernel_attention_flag().load() || NH == 0 || C % NH != 0 || C / NH == 0 || C / NH > 128)
        return attention_backward_algo::recompute;
    return kernels::cuda::attention_backward_pick(B, T, NH, C / NH);
}
// The key-tile kernels want their workspace 256-byte aligned; ops' callers carve it from a float
// buffer, so it is asked this much larger and aligned here.
constexpr std::size_t attention_workspace_alignment = 256;
}  // namespace

ops<cuda_backend>::size ops<cuda_backend>::attention_workspace(size B, size T, size C, size NH) {
    const auto algo = attention_algo(B, T, C, NH);
    if (algo == kernels::cuda::attention_backward_algo::recompute) return 0;
    const size bytes = kernels::cuda::attention_backward_workspace(algo, B, T, NH, C / NH);
    return (bytes + attention_workspace_alignment) / sizeof(float) + 1;
}

void ops<cuda_backend>::attention_backward(stream& s, float* dqkv, float* workspace, const float* saved,
                                           const float* dout, const float* out, const float* qkv, size B, size T,
                                           size C, size NH) {
    cuda::trace_span span(s, "attention_backward");
    const auto algo = attention_algo(B, T, C, NH);
    if (algo == kernels::cuda::attention_backward_algo::recompute) {
        kernels::cuda::attention_backward(dqkv, saved, dout, out, qkv, B, T, C, NH, s.native());
        return;
    }
    const size floats = attention_workspace(B, T, C, NH);
    if (workspace == nullptr)
        throw error("attention_backward (cuda): B=" + std::to_string(B) + ", T=" + std::to_string(T) + ", C=" +
                        std::to_string(C) + ", NH=" + std::to_string(NH) + " takes " + std::to_string(floats) +
                        " floats of workspace, none was given",
                    "pass ops<cuda_backend>::attention_workspace(B, T, C, NH) floats (a Layer counts them in its "
                    "workspace_floats)");
    const auto address = reinterpret_cast<std::uintptr_t>(workspace);
    const std::uintptr_t skip =
        (attention_workspace_alignment - address % attention_workspace_alignment) % attention_workspace_alignment;
    const size bytes = floats * sizeof(float) - skip;
    kernels::cuda::attention_backward_key_tiles(dqkv, saved, dout, out, qkv, B, T, NH, NH, C / NH, algo,
                                                reinterpret_cast<unsigned char*>(workspace) + skip, bytes, s.native());
}

void ops<cuda_backend>::use_two_kernel_attention_backward() { two_kernel_attention_flag().store(true); }
bool ops<cuda_backend>::two_kernel_attention_backward() { return two_kernel_attention_flag().load(); }

}  // namespace strata
