// The fine-tune protocol the LoRA model tests share (GPT-2's lora_finetune_test.cpp, the Llama
// family's examples/llama/tests/llama_lora_model_test.cpp): two synthetic texts over 31 tokens, a
// constant learning rate, and a run that records what the tests compare.
#pragma once

#include "../lora_model.hpp"  // lora::save_model_adapters

#include <strata/strata.hpp>            // data::batch, train_options, token_id
#include <strata/train/checkpoint.hpp>  // strata::download_blocks, strata::host_blocks

#include <cstddef>     // std::size_t
#include <cstring>     // std::memcmp
#include <filesystem>  // std::filesystem::path
#include <span>        // std::span
#include <vector>      // std::vector

namespace lora::finetune_support {

// Text "A" (a base model's) continues t -> t + 1; text "B" (the new one) t -> t + 3; 31 tokens.
inline std::vector<strata::data::batch> text(int stride, int step, std::size_t B = 4, std::size_t T = 8) {
    strata::data::batch b;
    for (std::size_t i = 0; i < B; ++i)
        for (std::size_t t = 0; t < T; ++t) {
            const auto token =
                static_cast<strata::token_id>((i * 7 + t * stride + static_cast<std::size_t>(step) * 5) % 31);
            b.inputs.push_back(token);
            b.targets.push_back(static_cast<strata::token_id>((token + stride) % 31));
        }
    return {b};
}

inline strata::train_options options(double lr) {
    strata::train_options o{.batch = 4, .seq = 8, .accum = 1, .clip = 1.0};
    o.schedule = {.kind = strata::lr_kind::constant, .lr = lr, .min_lr = lr, .warmup_steps = 0, .total_steps = 100};
    return o;
}

inline bool same(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);  // memcmp of null is UB
}

struct finetune {
    std::vector<double> losses, norms;
    double before = 0, after = 0;  // loss on text B, evaluated
    strata::host_blocks<float> initial, params, m, v;
};

// `steps` steps on text B after initialize(5) and upload_base(t) (the base model's weights), the
// adapters saved to `save_to` when given.
template <class Trainer, class B, class Model, class UploadBase>
finetune run(B& backend, const Model& model, UploadBase&& upload_base, int steps,
             const std::filesystem::path& save_to = {}) {
    finetune r;
    Trainer t(backend, model, options(3e-2));
    t.initialize(5);
    upload_base(t);
    using kind = typename Trainer::state_kind;
    r.initial = strata::download_blocks(t, kind::params);
    const auto eval = text(3, 1000);
    r.before = t.evaluate(eval);
    for (int s = 0; s < steps; ++s) {
        const auto res = t.step(text(3, s));
        r.losses.push_back(res.loss);
        r.norms.push_back(res.grad_norm);
    }
    r.after = t.evaluate(eval);
    r.params = strata::download_blocks(t, kind::params);
    r.m = strata::download_blocks(t, kind::adam_m);
    r.v = strata::download_blocks(t, kind::adam_v);
    if (!save_to.empty()) lora::save_model_adapters(strata::trainer_weights{t}, model, save_to);
    return r;
}

}  // namespace lora::finetune_support
