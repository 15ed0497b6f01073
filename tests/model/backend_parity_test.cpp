// The CUDA backend against the CPU backend (the oracle) on a whole model: the same weights and
// batches, 10 AdamW steps with accumulation and clipping, compared step by step. Per-op parity
// lives in tests/cuda/; this is the end-to-end check that the ops compose into the same training.
//
// Tolerance: the two backends sum in different orders (cuBLAS vs Eigen GEMMs, flash attention vs
// the CPU's explicit softmax), so each op differs by a few FP32 ulps, ~1e-7 relative; through
// 3 layers and 10 AdamW steps on a tiny model those differences grow, but stay far below 1e-4 on
// the loss. A wrong kernel (a missing scale, a transposed weight) is off by 1e-1 or more.
#include "support/backends.hpp"  // make_backend, STRATA_TESTS_WITH_CUDA
#include "support/random_batch.hpp"  // test::random_batches

#include <strata/nn/cpu_ops.hpp>
#include <strata/strata.hpp>
#include <strata/train/checkpoint.hpp>  // download_blocks
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>

#include <algorithm>  // std::max
#include <cmath>      // std::abs
#include <vector>     // std::vector

namespace backend_parity_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

#ifdef STRATA_TESTS_WITH_CUDA
namespace {

const gpt_config config{.vocab_size = 67, .max_seq = 24, .n_layer = 3, .n_head = 3, .n_embd = 36};

std::vector<data::batch> micro_batches(int step, std::size_t accum, std::size_t B, std::size_t T) {
    return test::random_batches(500 + step, {.vocab = config.vocab_size, .tokens = B * T, .count = accum, .scale = 5,
                                             .shift = 2, .ignore_every = 11, .ignore_at = 5});
}

struct trajectory {
    std::vector<double> losses, norms;
    host_blocks<float> params;
};

template <class B>
trajectory train(B& backend, const train_options& o, int steps) {
    gpt_model<float, B> model(config);
    gpt_trainer<float, B> t(backend, model, o);
    t.initialize(3);
    trajectory r;
    for (int s = 0; s < steps; ++s) {
        const auto res = t.step(micro_batches(s, o.accum, o.batch, o.seq));
        r.losses.push_back(res.loss);
        r.norms.push_back(res.grad_norm);
    }
    r.params = download_blocks(t, gpt_trainer<float, B>::state_kind::params);
    return r;
}

}  // namespace

TEST_CASE("CUDA backend: a 10-step training trajectory follows the CPU backend's") {
    auto gpu = test::make_backend<cuda_backend>({.device_bytes = 256 << 20, .host_bytes = 256 << 20});
    if (!gpu) return;
    cpu_backend cpu({.device_bytes = 256 << 20, .host_bytes = 256 << 20});
    train_options o{.batch = 2, .seq = 24, .accum = 2, .clip = 0.5};
    o.schedule = {.kind = lr_kind::cosine, .lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 2, .total_steps = 10};

    const auto want = train(cpu, o, 10);
    const auto got = train(*gpu, o, 10);
    double worst_loss = 0, worst_norm = 0, worst_weight = 0;
    for (std::size_t i = 0; i < want.losses.size(); ++i) {
        INFO("step " << i + 1 << ": loss " << got.losses[i] << " vs CPU " << want.losses[i]);
        const double dl = std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]);
        const double dn = std::abs(got.norms[i] - want.norms[i]) / std::abs(want.norms[i]);
        CHECK(dl < 1e-4);
        CHECK(dn < 1e-3);  // the norm of a few-thousand-parameter model moves more than the loss
        worst_loss = std::max(worst_loss, dl);
        worst_norm = std::max(worst_norm, dn);
    }
    CHECK(want.losses.back() < want.losses.front());
    for (std::size_t g = 0; g < want.params.size(); ++g)
        for (std::size_t i = 0; i < want.params[g].size(); ++i)
            worst_weight = std::max(worst_weight, std::abs(static_cast<double>(got.params[g][i]) - want.params[g][i]));
    // AdamW moves each weight by at most ~lr per step: 10 steps of <= 3e-3; differences of 1e-4
    // would mean a different update, not rounding.
    CHECK(worst_weight < 1e-4);
    MESSAGE("CUDA vs CPU over 10 steps: worst relative loss difference " << worst_loss << ", grad norm " << worst_norm
                                                                        << ", worst absolute weight difference " << worst_weight);
}
#endif

}  // namespace backend_parity_test
