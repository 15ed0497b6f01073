// kernels/cuda/attention_decode.cuh against kernels/cpu/attention_decode.hpp (the oracle): new
// query rows against a KV cache, multi-head and grouped-query, one row (a generation step) and a
// prompt, caches longer than a chunk of keys, a strided q, large scores, run-to-run bits, errors.
//
// Glossary: n new rows, pos the first one's position, NH query heads, NKV key/value heads, HS head
// size, A = NH HS, KV = NKV HS.
#include "cuda/cuda_test_util.cuh"  // skip_without_gpu, device_buffer, test_stream, comparisons

#include <strata/core/error.hpp>                    // strata::error
#include <strata/kernels/cpu/attention_decode.hpp>  // attention_decode (the oracle)
#include <strata/kernels/cuda/attention_decode.cuh> // attention_decode (under test)

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE, CAPTURE, MESSAGE

#include <cstddef>  // std::size_t
#include <vector>   // std::vector

namespace {

using namespace strata::test;
namespace cpu = strata::kernels::cpu;
namespace gpu = strata::kernels::cuda;

struct decode_shape {
    std::size_t pos, n, NH, NKV, HS, q_stride;  // q_stride 0: A
    float q_scale;                              // queries scaled: large scores
};

TEST_CASE("cuda attention_decode matches the CPU: one row and prompts, MHA and GQA, caches past a chunk of keys") {
    if (skip_without_gpu()) return;
    // Threshold 1e-5 (max |gpu - cpu| / max(1, max |cpu|)): both compute the products in float in
    // key order, but the GPU's softmax is online over chunks of 128 keys (a running maximum and
    // rescaled sums, expf) where the CPU's takes the row maximum first and sums in double: a few
    // float ulps per output. A wrong head, position or mask is off by > 1e-2.
    test_stream stream;
    std::uint32_t seed = 500;
    const decode_shape shapes[] = {
        {0, 1, 1, 1, 2, 0, 1.0f},            // the first token: one key
        {5, 1, 3, 3, 5, 0, 1.0f},            // a generation step, odd head size
        {0, 9, 4, 2, 6, 0, 1.0f},            // a prompt, GQA
        {127, 3, 2, 2, 8, 0, 1.0f},          // rows seeing 128, 129, 130 keys: one and two chunks
        {1000, 1, 12, 12, 64, 0, 1.0f},      // GPT-2's heads at position 1000
        {4000, 2, 32, 8, 128, 0, 1.0f},      // Llama 3 8B's heads: 4 query heads per key/value head
        {300, 4, 6, 3, 16, 6 * 16 + 2 * 3 * 16, 1.0f},  // q strided inside a q|k|v row
        {200, 2, 4, 4, 32, 0, 30.0f},        // scores ~1e2 to 1e3: exp() overflows without the max shift
    };
    for (const auto& s : shapes) {
        CAPTURE(s.pos);
        CAPTURE(s.n);
        CAPTURE(s.NH);
        CAPTURE(s.NKV);
        CAPTURE(s.HS);
        const std::size_t A = s.NH * s.HS, KV = s.NKV * s.HS, stride = s.q_stride ? s.q_stride : A;
        auto q = random_floats(s.n * stride, ++seed);
        for (float& x : q) x *= s.q_scale;
        const auto kv = random_floats((s.pos + s.n) * 2 * KV, ++seed);
        std::vector<float> want(s.n * A);
        cpu::attention_decode(want.data(), q.data(), stride, kv.data(), s.pos, s.n, s.NH, s.NKV, s.HS);
        device_buffer<float> d_q(q), d_kv(kv), d_out(s.n * A);
        gpu::attention_decode(d_out.get(), d_q.get(), stride, d_kv.get(), s.pos, s.n, s.NH, s.NKV, s.HS, stream);
        const auto got = d_out.download();
        const auto e = normalized_error(got, want);
        CHECK_MESSAGE(e.error < 1e-5, e.describe("out"));
        // Deterministic: the same inputs, the same bits.
        gpu::attention_decode(d_out.get(), d_q.get(), stride, d_kv.get(), s.pos, s.n, s.NH, s.NKV, s.HS, stream);
        const auto again = first_difference(d_out.download(), got, "out (repeated)");
        CHECK_MESSAGE(again.empty(), again);
    }
}

TEST_CASE("cuda attention_decode refuses heads that do not group and a short query stride, before launching") {
    // No GPU needed: the shapes are checked on the host, as the CPU kernel does.
    float* none = nullptr;
    CHECK_THROWS_WITH_AS(gpu::attention_decode(none, none, 12, none, 0, 1, 6, 4, 2, nullptr),
                         doctest::Contains("key/value heads must divide the query heads"), strata::error);
    CHECK_THROWS_WITH_AS(gpu::attention_decode(none, none, 5, none, 0, 1, 3, 3, 2, nullptr),
                         doctest::Contains("stride 5"), strata::error);
}

}  // namespace
