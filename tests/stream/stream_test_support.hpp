// What the stream tests added for issue 14 share: a tiny GPT, deterministic micro-batches, runs
// recorded step by step, bitwise comparison of host blocks, and a storage directory per test.
#pragma once

#include <strata/train.hpp>  // gpt_model, gpt_trainer: tiered_trainer of gpt_model
#include <strata/nn/cpu_ops.hpp>              // ops<cpu_backend>
#include <strata/strata.hpp>                  // rng, tier_options
#include <strata/train/checkpoint.hpp>        // host_blocks, download_blocks
#include "support/random_batch.hpp"  // random_batches

#include <unistd.h>  // getpid

#include <cstring>     // std::memcmp
#include <filesystem>  // std::filesystem
#include <string>      // std::string
#include <vector>      // std::vector

namespace strata::test {

inline const gpt_config tiny_gpt{.vocab_size = 29, .max_seq = 8, .n_layer = 3, .n_head = 2, .n_embd = 16};

// `accum` micro-batches of B x T tokens for step `step`, the same for every trainer; every
// seventh target is ignored, so the counted tokens differ from B * T * accum.
inline std::vector<data::batch> micro_batches(int step, std::size_t accum, std::size_t B, std::size_t T,
                                              std::size_t vocab = tiny_gpt.vocab_size) {
    return random_batches(1000 + static_cast<std::uint64_t>(step), {.vocab = vocab, .tokens = B * T, .count = accum,
                                                                    .scale = 3, .shift = 1, .ignore_every = 7,
                                                                    .ignore_at = 3});
}

template <class R>
bool same_bits(const host_blocks<R>& a, const host_blocks<R>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t g = 0; g < a.size(); ++g)
        if (a[g].size() != b[g].size() || std::memcmp(a[g].data(), b[g].data(), a[g].size() * sizeof(R)) != 0)
            return false;
    return true;
}

// A trainer's whole state on the host: weights and both AdamW moments.
template <class R>
struct trainer_state {
    host_blocks<R> params, m, v;
    bool operator==(const trainer_state& o) const { return same_bits(params, o.params) && same_bits(m, o.m) && same_bits(v, o.v); }
};
template <class Trainer, class R = typename Trainer::model_type::value_type>
trainer_state<R> state_of(Trainer& t) {
    using kind = typename Trainer::state_kind;
    return {download_blocks(t, kind::params), download_blocks(t, kind::adam_m), download_blocks(t, kind::adam_v)};
}

// Losses and norms of `steps` steps from seed 21, and the state after them.
template <class R>
struct run_result {
    std::vector<double> losses, norms;
    trainer_state<R> state;
};
template <class Trainer, class B, class R = typename Trainer::model_type::value_type>
run_result<R> run(B& backend, const gpt_config& config, const train_options& o, int steps) {
    gpt_model<R, B> model(config);
    Trainer t(backend, model, o);
    t.initialize(21);
    run_result<R> r;
    for (int s = 0; s < steps; ++s) {
        const step_result res = t.step(micro_batches(s, o.accum, o.batch, o.seq, config.vocab_size));
        r.losses.push_back(res.loss);
        r.norms.push_back(res.grad_norm);
    }
    r.state = state_of(t);
    return r;
}

// Tier budgets with a storage directory of the test's own, removed at the end of the test.
struct scratch_tiers {
    std::filesystem::path dir;
    explicit scratch_tiers(const std::string& name)
        : dir(std::filesystem::temp_directory_path() / ("strata-test-" + name + "-" + std::to_string(::getpid()))) {
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir);
    }
    ~scratch_tiers() {
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
    }
    tier_options options() const {
        return {.device_bytes = 256 << 20, .host_bytes = 256 << 20, .storage_bytes = 256 << 20, .storage_dir = dir};
    }
};

}  // namespace strata::test
