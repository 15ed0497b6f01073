// kernels/cuda/embedding.cuh against kernels/cpu/embedding.hpp, bit for bit.
#include "cuda/cuda_test_util.cuh"  // skip_without_gpu, device_buffer, test_stream, comparisons

#include <strata/core/error.hpp>              // strata::error
#include <strata/kernels/cpu/embedding.hpp>   // embedding_forward, embedding_backward (the oracle)
#include <strata/kernels/cuda/embedding.cuh>  // the kernels under test

#include <doctest/doctest.h>  // TEST_CASE, CHECK, CHECK_MESSAGE, CHECK_THROWS_AS, CAPTURE

#include <cmath>    // std::isnan, std::exp, std::log
#include <cstddef>  // std::size_t
#include <cstdint>  // std::int32_t
#include <random>   // std::mt19937, std::uniform_int_distribution
#include <vector>   // std::vector

namespace {

using namespace strata::test;
namespace cpu = strata::kernels::cpu;
namespace gpu = strata::kernels::cuda;

struct shape {
    std::size_t B, T, C, V, maxT;
};

// Odd channel counts (36, 40, 48; 37 for the scalar path), GPT-2 XL's 1600, T not a power of two
// and T == maxT, B*T of 1, 7 and 300, and a full GPT-2 124M batch (8 x 1024, V = 50257).
const std::vector<shape> shapes{{1, 1, 36, 67, 4},      {1, 7, 40, 101, 9},       {3, 100, 48, 501, 128},
                                {2, 150, 37, 300, 150}, {1, 7, 1600, 1000, 1024}, {8, 1024, 768, 50257, 1024}};

// Half the positions draw from three hot ids (the first, a middle and the last row), so rows repeat
// hundreds of times and the order of their adds matters; the rest are uniform over [0, V).
std::vector<std::int32_t> skewed_tokens(std::size_t n, std::size_t V, std::uint32_t seed) {
    std::mt19937 engine(seed);
    std::uniform_int_distribution<std::int32_t> any(0, static_cast<std::int32_t>(V) - 1), coin(0, 5);
    const std::int32_t hot[] = {0, static_cast<std::int32_t>(V / 2), static_cast<std::int32_t>(V) - 1};
    std::vector<std::int32_t> tokens(n);
    for (auto& t : tokens) {
        const int c = coin(engine);
        t = c < 3 ? hot[c] : any(engine);
    }
    return tokens;
}

TEST_CASE("cuda embedding forward and backward equal the CPU bit for bit") {
    if (skip_without_gpu()) return;
    // Threshold: none. Forward is one add per element; backward adds the same floats in the CPU's
    // order (increasing bt per dwte row, increasing b per dwpe row), one add at a time.
    test_stream stream;
    for (const auto [B, T, C, V, maxT] : shapes) {
        for (const std::size_t offset : {0, 1}) {  // 1: misaligned, the scalar path
            CAPTURE(B);
            CAPTURE(T);
            CAPTURE(C);
            CAPTURE(V);
            CAPTURE(offset);
            const std::size_t BT = B * T;
            const auto tokens = skewed_tokens(BT, V, 101);
            const auto wte = random_floats(V * C, 102), wpe = random_floats(maxT * C, 103);
            const auto dout = random_floats(BT * C, 104);
            // Gradients start random: backward must add to them (the LM head's share is already in dwte).
            const auto dwte0 = random_floats(V * C, 105), dwpe0 = random_floats(maxT * C, 106);

            std::vector<float> out(BT * C), dwte = dwte0, dwpe = dwpe0;
            cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V, maxT);
            cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, V, maxT);

            device_buffer<std::int32_t> d_tokens(tokens);
            device_buffer<float> d_wte(wte, offset), d_wpe(wpe, offset), d_out(BT * C, offset), d_dout(dout, offset),
                d_dwte(dwte0, offset), d_dwpe(dwpe0, offset);
            gpu::embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), B, T, C, V, maxT, stream);
            gpu::embedding_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), B, T, C, V, maxT, stream);
            const std::string d_out_diff = first_difference(d_out.download(), out, "out");
            const std::string d_dwte_diff = first_difference(d_dwte.download(), dwte, "dwte");
            const std::string d_dwpe_diff = first_difference(d_dwpe.download(), dwpe, "dwpe");
            CHECK_MESSAGE(d_out_diff.empty(), d_out_diff);
            CHECK_MESSAGE(d_dwte_diff.empty(), d_dwte_diff);
            CHECK_MESSAGE(d_dwpe_diff.empty(), d_dwpe_diff);
        }
    }
}

TEST_CASE("cuda embedding: ids outside [0, V) give NaN rows forward and are skipped in dwte") {
    if (skip_without_gpu()) return;
    // The CPU throws for such ids; the GPU cannot. Reference: the CPU on the same tokens with the bad
    // ids replaced by 0, and, for dwte, with their dout rows zeroed (adding 0 changes no bit);
    // dwpe still receives every position's dout.
    test_stream stream;
    const std::size_t B = 2, T = 9, C = 40, V = 67, maxT = 16, BT = B * T;
    auto tokens = skewed_tokens(BT, V, 111);
    tokens[3] = static_cast<std::int32_t>(V);  // one past the end
    tokens[11] = -1;
    const auto wte = random_floats(V * C, 112), wpe = random_floats(maxT * C, 113), dout = random_floats(BT * C, 114);
    const auto dwte0 = random_floats(V * C, 115), dwpe0 = random_floats(maxT * C, 116);

    auto replaced = tokens;
    replaced[3] = replaced[11] = 0;
    auto dout_without_bad = dout;
    for (const std::size_t bad : {std::size_t{3}, std::size_t{11}})
        for (std::size_t c = 0; c < C; ++c) dout_without_bad[bad * C + c] = 0.0f;
    std::vector<float> out(BT * C), dwte = dwte0, dwpe_unused = dwpe0, dwte_unused = dwte0, dwpe = dwpe0;
    cpu::embedding_forward(out.data(), replaced.data(), wte.data(), wpe.data(), B, T, C, V, maxT);
    cpu::embedding_backward(dwte.data(), dwpe_unused.data(), dout_without_bad.data(), replaced.data(), B, T, C, V,
                            maxT);
    cpu::embedding_backward(dwte_unused.data(), dwpe.data(), dout.data(), replaced.data(), B, T, C, V, maxT);

    device_buffer<std::int32_t> d_tokens(tokens);
    device_buffer<float> d_wte(wte), d_wpe(wpe), d_out(BT * C), d_dout(dout), d_dwte(dwte0), d_dwpe(dwpe0);
    gpu::embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), B, T, C, V, maxT, stream);
    gpu::embedding_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), B, T, C, V, maxT, stream);
    auto got_out = d_out.download();
    for (const std::size_t bad : {std::size_t{3}, std::size_t{11}}) {
        for (std::size_t c = 0; c < C; ++c) {
            CHECK(std::isnan(got_out[bad * C + c]));
            got_out[bad * C + c] = out[bad * C + c];  // every other row must match the CPU
        }
    }
    CHECK_MESSAGE(first_difference(got_out, out, "out").empty(), first_difference(got_out, out, "out"));
    CHECK_MESSAGE(first_difference(d_dwte.download(), dwte, "dwte").empty(),
                  first_difference(d_dwte.download(), dwte, "dwte"));
    CHECK_MESSAGE(first_difference(d_dwpe.download(), dwpe, "dwpe").empty(),
                  first_difference(d_dwpe.download(), dwpe, "dwpe"));
}

TEST_CASE("cuda embedding refuses T > maxT before any launch, as the CPU does") {
    if (skip_without_gpu()) return;
    float* none = nullptr;
    const std::int32_t* no_tokens = nullptr;
    CHECK_THROWS_AS(gpu::embedding_forward(none, no_tokens, none, none, 1, 17, 8, 10, 16, nullptr), strata::error);
    CHECK_THROWS_AS(gpu::embedding_backward(none, none, none, no_tokens, 1, 17, 8, 10, 16, nullptr), strata::error);
}

}  // namespace

namespace {

// Zipf-like ids over [0, V): log-uniform, so id 0 is ~6% of the positions and the head is heavy,
// as in English text (' the', ',', '.').
std::vector<std::int32_t> zipf_tokens(std::size_t n, std::size_t V, std::uint32_t seed) {
    std::mt19937 engine(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<std::int32_t> tokens(n);
    for (auto& t : tokens) {
        const auto id = static_cast<std::int32_t>(std::exp(u(engine) * std::log(static_cast<double>(V)))) - 1;
        t = id < 0 ? 0 : id >= static_cast<std::int32_t>(V) ? static_cast<std::int32_t>(V) - 1 : id;
    }
    return tokens;
}

TEST_CASE("cuda embedding speed at the GPT-2 124M shape with Zipf tokens; 21 backward runs keep the CPU's bits") {
    if (skip_without_gpu()) return;
    test_stream stream;
    const std::size_t B = 8, T = 1024, C = 768, V = 50257, maxT = 1024, BT = B * T;
    const auto tokens = zipf_tokens(BT, V, 121);
    const auto dout = random_floats(BT * C, 122);
    const auto dwte0 = random_floats(V * C, 123), dwpe0 = random_floats(maxT * C, 124);
    device_buffer<std::int32_t> d_tokens(tokens);
    device_buffer<float> wte(V * C), wpe(maxT * C), out(BT * C), d_dout(dout), dwte(dwte0), dwpe(dwpe0);
    fill_pattern(wte.get(), V * C, 1);
    fill_pattern(wpe.get(), maxT * C, 2);
    const double fwd = time_ms(stream, 20, [&] {
        gpu::embedding_forward(out.get(), d_tokens.get(), wte.get(), wpe.get(), B, T, C, V, maxT, stream);
    });
    const int reps = 20;
    const double bwd = time_ms(stream, reps, [&] {
        gpu::embedding_backward(dwte.get(), dwpe.get(), d_dout.get(), d_tokens.get(), B, T, C, V, maxT, stream);
    });
    MESSAGE("embedding B=8 T=1024 C=768 (Zipf ids): forward " << fwd << " ms, backward " << bwd << " ms");

    // Backward ran reps + 1 times (one warm-up), accumulating: the CPU, run as often, gives the same bits.
    std::vector<float> host_dwte = dwte0, host_dwpe = dwpe0;
    for (int r = 0; r <= reps; ++r)
        cpu::embedding_backward(host_dwte.data(), host_dwpe.data(), dout.data(), tokens.data(), B, T, C, V, maxT);
    CHECK_MESSAGE(first_difference(dwte.download(), host_dwte, "dwte").empty(),
                  first_difference(dwte.download(), host_dwte, "dwte"));
    CHECK_MESSAGE(first_difference(dwpe.download(), host_dwpe, "dwpe").empty(),
                  first_difference(dwpe.download(), host_dwpe, "dwpe"));
}

}  // namespace
