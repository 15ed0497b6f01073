// ops<cuda_backend>::attention_backward, the backward the models run: the key-tile backward
// (kernels/cuda/attention_backward.cuh) with dq partials where attention_backward_pick says so (one
// band, or bands at head size 128), with dq added in order at long context, the two-kernel backward
// (kernels/cuda/attention.cuh) below head size 64 there; the same bits as the kernel it picks,
// the same bits run to run, the two-kernel backward's values within FP32 tolerance, and a clear
// error without its workspace.
//
// The last case switches the process to the two-kernel backward for good
// (use_two_kernel_attention_backward: one way only), so it stays last in this file; no other file
// of this suite calls ops<cuda_backend>::attention_backward.
#include <strata/cuda.hpp>                             // ops<cuda_backend>, cuda_backend
#include <strata/kernels/cuda/attention.cuh>           // attention_forward, attention_backward
#include <strata/kernels/cuda/attention_backward.cuh>  // attention_backward_key_tiles, attention_backward_pick

#include <doctest/doctest.h>  // TEST_CASE, CHECK, INFO

#include "cuda_test_util.cuh"  // device_buffer, random_floats, first_difference, normalized_error, skip_without_gpu

#include <cstddef>  // std::size_t
#include <vector>   // std::vector

namespace attention_ops_test {

using namespace strata;
namespace gpu = kernels::cuda;
using op = ops<cuda_backend>;
using test::device_buffer;

struct problem {
    std::size_t B, T, C, NH;
    std::vector<float> qkv, dout, start;
    problem(std::size_t b, std::size_t t, std::size_t c, std::size_t nh, unsigned seed)
        : B(b), T(t), C(c), NH(nh), qkv(test::random_floats(b * t * 3 * c, seed)),
          dout(test::random_floats(b * t * c, seed + 1)), start(test::random_floats(b * t * 3 * c, seed + 2)) {}
};

// dqkv = start + the backward through ops<cuda_backend> (workspace: attention_workspace floats, one
// float off 16-byte alignment, as a Layer's carve may place it), and through `algo`'s kernels.
struct results {
    std::vector<float> ops, ops_again, kernel;
};
results run(const problem& p, gpu::attention_backward_algo algo) {
    cuda_backend backend;
    auto s = backend.make_stream("test");
    const std::size_t BT = p.B * p.T, HS = p.C / p.NH;
    device_buffer<float> qkv(p.qkv), dout(p.dout), out(BT * p.C), lse(gpu::attention_saved(p.B, p.T, p.NH));
    gpu::attention_forward(out.get(), lse.get(), qkv.get(), p.B, p.T, p.C, p.NH, s.native());
    device_buffer<float> workspace(op::attention_workspace(p.B, p.T, p.C, p.NH), 1);
    results r;
    for (std::vector<float>* target : {&r.ops, &r.ops_again}) {
        device_buffer<float> dqkv(p.start);
        op::attention_backward(s, dqkv.get(), workspace.get(), lse.get(), dout.get(), out.get(), qkv.get(), p.B, p.T,
                               p.C, p.NH);
        s.synchronize();
        *target = dqkv.download();
    }
    device_buffer<float> dqkv(p.start);
    if (algo == gpu::attention_backward_algo::recompute) {
        gpu::attention_backward(dqkv.get(), lse.get(), dout.get(), out.get(), qkv.get(), p.B, p.T, p.C, p.NH,
                                s.native());
    } else {
        const std::size_t bytes = gpu::attention_backward_workspace(algo, p.B, p.T, p.NH, HS);
        device_buffer<unsigned char> own(bytes);
        gpu::attention_backward_key_tiles(dqkv.get(), lse.get(), dout.get(), out.get(), qkv.get(), p.B, p.T, p.NH,
                                          p.NH, HS, algo, own.get(), bytes, s.native());
    }
    s.synchronize();
    r.kernel = dqkv.download();
    return r;
}

// True, reported as a skip, once this process runs the two-kernel backward for good (the last case
// of this file ran first).
bool switched_to_two_kernels() {
    if (!op::two_kernel_attention_backward()) return false;
    test::skip("this process was switched to the two-kernel backward (the last case of this file ran first)");
    return true;
}

TEST_CASE("cuda ops attention_backward: partials where their workspace fits, the kernel's bits, run to run") {
    if (test::skip_without_gpu() || switched_to_two_kernels()) return;
    for (const problem& p : {problem(2, 200, 48, 3, 10), problem(1, 1, 64, 2, 20), problem(3, 129, 256, 4, 30)}) {
        INFO("B=" << p.B << " T=" << p.T << " C=" << p.C << " NH=" << p.NH);
        const std::size_t HS = p.C / p.NH;
        REQUIRE(gpu::attention_backward_pick(p.B, p.T, p.NH, HS) == gpu::attention_backward_algo::partials);
        // The workspace: partials' bytes and room to align them to 256 bytes.
        const std::size_t bytes = gpu::attention_backward_workspace(gpu::attention_backward_algo::partials, p.B, p.T,
                                                                    p.NH, HS);
        CHECK(op::attention_workspace(p.B, p.T, p.C, p.NH) * sizeof(float) >= bytes + 255);
        const results r = run(p, gpu::attention_backward_algo::partials);
        CHECK(test::first_difference(r.ops, r.kernel, "ops vs attention_backward_key_tiles (partials)") == "");
        CHECK(test::first_difference(r.ops_again, r.ops, "ops, second run") == "");
        // Against the two-kernel backward: the same products, dq summed in another order.
        const results old = run(p, gpu::attention_backward_algo::recompute);
        const auto e = test::normalized_error(r.ops, old.kernel);
        INFO(e.describe("partials vs two-kernel"));
        CHECK(e.error < 5e-5);
    }
}

// The op against the kernel it picks (the same bits, run to run) and the two-kernel backward.
void check_against_kernel(const problem& p, gpu::attention_backward_algo algo) {
    const std::size_t HS = p.C / p.NH;
    const std::size_t bytes = gpu::attention_backward_workspace(algo, p.B, p.T, p.NH, HS);
    CHECK(op::attention_workspace(p.B, p.T, p.C, p.NH) * sizeof(float) >= bytes + 255);
    CHECK(bytes <= gpu::attention_partials_limit_bytes);
    const results r = run(p, algo);
    CHECK(test::first_difference(r.ops, r.kernel, "ops vs attention_backward_key_tiles") == "");
    CHECK(test::first_difference(r.ops_again, r.ops, "ops, second run") == "");
    const results old = run(p, gpu::attention_backward_algo::recompute);
    const auto e = test::normalized_error(r.ops, old.kernel);
    INFO(e.describe("key tiles vs two-kernel"));
    CHECK(e.error < 5e-5);
}

TEST_CASE("cuda ops attention_backward: partials in bands at head size 128 where the triangle would not fit") {
    if (test::skip_without_gpu() || switched_to_two_kernels()) return;
    // B=1 T=16384 NH=2 HS=128: the whole triangle would take 4.3 GB (above
    // attention_partials_limit_bytes); bands of query tiles take at most the bound.
    const problem p(1, 16384, 256, 2, 50);
    const std::size_t HS = p.C / p.NH;
    REQUIRE(gpu::attention_backward_workspace(gpu::attention_backward_algo::partials, p.B, p.T, p.NH, HS,
                                              ~std::size_t{0}) > gpu::attention_partials_limit_bytes);
    REQUIRE(gpu::attention_backward_pick(p.B, p.T, p.NH, HS) == gpu::attention_backward_algo::partials);
    CHECK(gpu::attention_partials_bands(p.B, p.T, p.NH, HS) > 1);
    check_against_kernel(p, gpu::attention_backward_algo::partials);
}

TEST_CASE("cuda ops attention_backward: ordered at head size 64 where the triangle would not fit") {
    if (test::skip_without_gpu() || switched_to_two_kernels()) return;
    // B=1 T=24576 NH=2 HS=64: the triangle would take 2.4 GB; ordered's workspace is linear in T
    // (dout . out per row and a counter per query tile).
    const problem p(1, 24576, 128, 2, 60);
    const std::size_t HS = p.C / p.NH;
    REQUIRE(gpu::attention_partials_bands(p.B, p.T, p.NH, HS) > 1);
    REQUIRE(gpu::attention_backward_pick(p.B, p.T, p.NH, HS) == gpu::attention_backward_algo::ordered);
    CHECK(gpu::attention_backward_workspace(gpu::attention_backward_algo::ordered, p.B, p.T, p.NH, HS) <
          std::size_t{1} << 20);
    check_against_kernel(p, gpu::attention_backward_algo::ordered);
    CHECK(gpu::attention_backward_pick(1, 32768, 12, 64) == gpu::attention_backward_algo::ordered);  // 124M's heads
}

TEST_CASE("cuda ops attention_backward: the two-kernel backward, no workspace, below head size 64 at long T") {
    if (test::skip_without_gpu()) return;
    // B=1 T=32768 NH=12 HS=32: the triangle would take 12.9 GB (above attention_partials_limit_bytes).
    CHECK(op::attention_workspace(1, 32768, 384, 12) == 0);
    CHECK(op::attention_workspace(8, 1024, 768, 12) > 0);  // GPT-2 124M's benchmark shape: 214 MB
    // Shapes the key-tile kernels do not take get none either (the two-kernel backward refuses them).
    CHECK(op::attention_workspace(1, 64, 258, 2) == 0);
}

TEST_CASE("cuda ops attention_backward refuses a shape that takes a workspace when it gets none") {
    if (test::skip_without_gpu()) return;
    if (op::two_kernel_attention_backward()) {
        test::skip("this process was switched to the two-kernel backward");
        return;
    }
    cuda_backend backend;
    auto s = backend.make_stream("test");
    float* none = nullptr;
    CHECK_THROWS_WITH_AS(op::attention_backward(s, none, none, none, none, none, none, 1, 64, 64, 2),
                         doctest::Contains("floats of workspace, none was given"), strata::error);
}

// Last in this file: switches the whole process (see the file comment).
TEST_CASE("cuda ops use_two_kernel_attention_backward: no workspace from then on, and the two-kernel bits") {
    if (test::skip_without_gpu()) return;
    const problem p(2, 200, 48, 3, 40);
    const std::size_t before = op::attention_workspace(p.B, p.T, p.C, p.NH);
    op::use_two_kernel_attention_backward();
    CHECK(op::two_kernel_attention_backward());
    CHECK(before > 0);
    CHECK(op::attention_workspace(p.B, p.T, p.C, p.NH) == 0);
    const results r = run(p, gpu::attention_backward_algo::recompute);
    CHECK(test::first_difference(r.ops, r.kernel, "ops vs attention_backward (two kernels)") == "");
}

}  // namespace attention_ops_test
