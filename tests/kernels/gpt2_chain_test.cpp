// All kernels chained into a one-block GPT-2 (embedding, attention and MLP with residuals, final
// layernorm, tied head, cross-entropy): the whole backward, written with the kernels' argument
// conventions, must match finite differences of the whole forward for every parameter. This is
// where a convention error between kernels (a residual gradient overwritten instead of added, the
// tied wte missing one of its two gradient paths) shows up.
#include <array>                           // std::array
#include <cstddef>                         // std::size_t
#include <cstdint>                         // std::int32_t
#include <numeric>                         // std::accumulate
#include <vector>                          // std::vector
#include <doctest/doctest.h>               // TEST_CASE, CHECK_MESSAGE
#include <strata/kernels/cpu/kernels.hpp>  // every kernel, numeric_gradient, compare

namespace gpt2_chain_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using namespace strata::kernels::cpu;

// Glossary: B batch, T time, C channels, V vocab, maxT wpe rows, NH heads.
constexpr std::size_t B = 2, T = 5, C = 6, V = 11, maxT = 7, NH = 2;

// All parameters in one allocation, in the order of this table (llm.c's layout); the gradients use
// the same layout, so one finite-difference sweep covers every parameter.
// clang-format off
enum param : std::size_t {
    wte, wpe, ln1w, ln1b, attn_w, attn_b, proj_w, proj_b,
    ln2w, ln2b, fc_w, fc_b, fcproj_w, fcproj_b, lnfw, lnfb, param_count
};
constexpr std::array<std::size_t, param_count> param_sizes = {
    V * C, maxT * C, C, C, C * 3 * C, 3 * C, C * C, C,
    C, C, C * 4 * C, 4 * C, 4 * C * C, C, C, C};
constexpr std::array<const char*, param_count> param_names = {
    "wte", "wpe", "ln1w", "ln1b", "attn_w", "attn_b", "proj_w", "proj_b",
    "ln2w", "ln2b", "fc_w", "fc_b", "fcproj_w", "fcproj_b", "lnfw", "lnfb"};
// clang-format on

struct tiny_gpt {
    std::vector<double> params = random_vector(
        std::accumulate(param_sizes.begin(), param_sizes.end(), std::size_t{0}), 81, -0.5, 0.5);
    std::vector<double> grads = std::vector<double>(params.size(), 0.0);
    std::vector<std::int32_t> tokens = {1, 4, 4, 9, 0, 10, 3, 3, 7, 2};
    std::vector<std::int32_t> targets = {4, 4, 9, 0, ignore_index, 3, 3, 7, 2, 5};

    // Activations, named as in llm.c's train_gpt2.c.
    std::vector<double> emb = bt(C), ln1 = bt(C), mean1 = bt(1), rstd1 = bt(1), qkv = bt(3 * C),
                        atty = bt(C), att_lse = bt(NH), attproj = bt(C), res1 = bt(C), ln2 = bt(C),
                        mean2 = bt(1), rstd2 = bt(1), fch = bt(4 * C), fch_gelu = bt(4 * C),
                        fcproj = bt(C), res2 = bt(C), lnf = bt(C), meanf = bt(1), rstdf = bt(1),
                        logits = bt(V), losses = bt(1), lse = bt(1);
    std::size_t counted = 0;

    static std::vector<double> bt(std::size_t per_position) {
        return std::vector<double>(B * T * per_position, 0.0);
    }
    double* p(param which) {
        return params.data() + offset(which);
    }
    double* g(param which) {
        return grads.data() + offset(which);
    }
    static std::size_t offset(param which) {
        return std::accumulate(param_sizes.begin(), param_sizes.begin() + which, std::size_t{0});
    }

    // The mean loss over counted targets.
    double forward() {
        embedding_forward(emb.data(), tokens.data(), p(wte), p(wpe), B, T, C, V, maxT);
        layernorm_forward(ln1.data(), mean1.data(), rstd1.data(), emb.data(), p(ln1w), p(ln1b), B,
                          T, C);
        matmul_forward(qkv.data(), ln1.data(), p(attn_w), p(attn_b), B, T, C, 3 * C);
        attention_forward(atty.data(), att_lse.data(), qkv.data(), B, T, C, NH);
        matmul_forward(attproj.data(), atty.data(), p(proj_w), p(proj_b), B, T, C, C);
        residual_forward(res1.data(), emb.data(), attproj.data(), B * T * C);
        layernorm_forward(ln2.data(), mean2.data(), rstd2.data(), res1.data(), p(ln2w), p(ln2b), B,
                          T, C);
        matmul_forward(fch.data(), ln2.data(), p(fc_w), p(fc_b), B, T, C, 4 * C);
        gelu_forward(fch_gelu.data(), fch.data(), B * T * 4 * C);
        matmul_forward(fcproj.data(), fch_gelu.data(), p(fcproj_w), p(fcproj_b), B, T, 4 * C, C);
        residual_forward(res2.data(), res1.data(), fcproj.data(), B * T * C);
        layernorm_forward(lnf.data(), meanf.data(), rstdf.data(), res2.data(), p(lnfw), p(lnfb), B,
                          T, C);
        lm_head_forward(logits.data(), lnf.data(), p(wte), B, T, C, V);
        counted = cross_entropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), B,
                                        T, V);
        return std::accumulate(losses.begin(), losses.end(), 0.0) / double(counted);
    }

    // Gradients of forward()'s loss into grads; activation gradients start at zero and accumulate.
    void backward() {
        auto dlogits = bt(V), dlnf = bt(C), dres2 = bt(C), dfcproj = bt(C), dfch_gelu = bt(4 * C),
             dfch = bt(4 * C), dln2 = bt(C), dres1 = bt(C), dattproj = bt(C), datty = bt(C),
             dqkv = bt(3 * C), dln1 = bt(C), demb = bt(C);
        cross_entropy_backward(dlogits.data(), lse.data(), logits.data(), targets.data(),
                               1.0 / double(counted), B, T, V);
        lm_head_backward(dlnf.data(), g(wte), dlogits.data(), lnf.data(), p(wte), B, T, C, V);
        layernorm_backward(dres2.data(), g(lnfw), g(lnfb), meanf.data(), rstdf.data(), dlnf.data(),
                           res2.data(), p(lnfw), B, T, C);
        residual_backward(dres1.data(), dfcproj.data(), dres2.data(), B * T * C);
        matmul_backward(dfch_gelu.data(), g(fcproj_w), g(fcproj_b), dfcproj.data(), fch_gelu.data(),
                        p(fcproj_w), B, T, 4 * C, C);
        gelu_backward(dfch.data(), dfch_gelu.data(), fch.data(), B * T * 4 * C);
        matmul_backward(dln2.data(), g(fc_w), g(fc_b), dfch.data(), ln2.data(), p(fc_w), B, T, C,
                        4 * C);
        layernorm_backward(dres1.data(), g(ln2w), g(ln2b), mean2.data(), rstd2.data(), dln2.data(),
                           res1.data(), p(ln2w), B, T, C);
        residual_backward(demb.data(), dattproj.data(), dres1.data(), B * T * C);
        matmul_backward(datty.data(), g(proj_w), g(proj_b), dattproj.data(), atty.data(), p(proj_w),
                        B, T, C, C);
        attention_backward(dqkv.data(), att_lse.data(), datty.data(), qkv.data(), B, T, C, NH);
        matmul_backward(dln1.data(), g(attn_w), g(attn_b), dqkv.data(), ln1.data(), p(attn_w), B, T,
                        C, 3 * C);
        layernorm_backward(demb.data(), g(ln1w), g(ln1b), mean1.data(), rstd1.data(), dln1.data(),
                           emb.data(), p(ln1w), B, T, C);
        embedding_backward(g(wte), g(wpe), demb.data(), tokens.data(), B, T, C, V, maxT);
    }
};

TEST_CASE("a one-block GPT-2 chained from the kernels has the gradient of its mean loss") {
    tiny_gpt model;
    model.forward();
    CHECK(model.counted == 9);
    model.backward();
    const std::vector<double> numeric =
        numeric_gradient([&] { return model.forward(); }, model.params);
    // Threshold as for the single kernels: central differences agree to ~1e-7 here, a broken
    // link between two kernels is off by O(1) on the parameters behind it.
    for (std::size_t which = 0; which < param_count; ++which) {
        const std::size_t begin = tiny_gpt::offset(param(which));
        const std::vector<double> analytic(model.grads.begin() + begin,
                                           model.grads.begin() + begin + param_sizes[which]);
        const std::vector<double> expected(numeric.begin() + begin,
                                           numeric.begin() + begin + param_sizes[which]);
        const auto result = compare(analytic, expected, numeric_gradient_floor);
        CHECK_MESSAGE(result.error < 1e-6, result.describe(param_names[which]));
    }
}

}  // namespace

}  // namespace gpt2_chain_test
