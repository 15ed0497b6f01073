// A LoRA fine-tune of a trained GPT through strata's own trainers (the model of lora_model.hpp):
// - only adapters move: every base tensor is bit-identical after training, resident and streamed;
// - streamed == resident bitwise (losses, norms, weights, the adapters' moments);
// - the loss on a new text goes down;
// - the merged model (W + alpha/r A B) gives the LoRA model's loss;
// - the planner's host bytes are the full fine-tune's minus exactly the frozen tensors'
//   gradients and moments (plus the adapters' weights and state).
#include "support/placements.hpp"  // test::streamed_trainer
#include "../lora_model.hpp"     // lora::make_gpt2_lora_model, upload_base_weights, merged_blocks
#include "finetune_support.hpp"  // text, options, same, finetune, run
#include "io/scratch_dir.hpp"    // scratch_dir
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, make_backend
#include "support/policy_gradients.hpp"  // test::policy_gradients

#include <strata/nn/cpu_ops.hpp>
#include <strata/plan/planner.hpp>
#include <strata/strata.hpp>
#include <strata/train/checkpoint.hpp>
#include <strata/train/tiered_trainer.hpp>
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

namespace lora_finetune_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

const gpt_config base_config{.vocab_size = 31, .max_seq = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
const lora::gpt2_lora_config adapters{.rank = 4, .alpha = 8.0,
                                      .targets = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}};

using namespace lora::finetune_support;  // text, options, same, finetune, run

// The base model: a GPT trained a little on text A.
template <class B>
host_blocks<float> train_base(B& backend) {
    const gpt_model<float, B> model(base_config);
    gpt_trainer<float, B> t(backend, model, options(1e-2));
    t.initialize(11);
    for (int s = 0; s < 30; ++s) t.step(text(1, s));
    return download_blocks(t, gpt_trainer<float, B>::state_kind::params);
}

}  // namespace

TEST_CASE_TEMPLATE("a LoRA fine-tune moves only the adapters, lowers the loss on new text, streamed == resident", B,
                   STRATA_TEST_BACKENDS) {
    test::scratch_dir dir;
    auto made = test::make_backend<B>(tier_options{.storage_dir = dir.path()});
    if (!made) return;
    B& backend = *made;
    const host_blocks<float> base = train_base(backend);
    const auto model = lora::make_gpt2_lora_model<B>(base_config, adapters);
    using M = decltype(model);
    using resident_t = tiered_trainer<float, B, std::remove_const_t<M>>;
    using streamed_t = test::streamed_trainer<tiered_trainer<float, B, std::remove_const_t<M>>, 2, storage_tier>;
    const auto upload = [&](auto& t) { lora::upload_base_weights(t, model, base_config, base); };
    const auto resident = run<resident_t>(backend, model, upload, 40, dir.path() / "adapters.safetensors");

    // the fine-tune learned text B
    MESSAGE("loss on the new text: " << resident.before << " -> " << resident.after);
    CHECK(resident.after < 0.8 * resident.before);
    // every frozen tensor is bit-identical; every adapter moved
    std::size_t frozen = 0, moved = 0;
    for (std::size_t g = 0; g < model.group_count(); ++g)
        for (const auto& entry : model.groups()[g].entries()) {
            const std::span<const float> before(resident.initial[g].data() + entry.offset, entry.spec.shape.numel());
            const std::span<const float> after(resident.params[g].data() + entry.offset, entry.spec.shape.numel());
            CAPTURE(model.hf_name(g, entry));
            if (entry.spec.trainable) {
                CHECK_FALSE(same(before, after));
                ++moved;
            } else {
                CHECK(same(before, after));
                ++frozen;
            }
        }
    CHECK(moved == 2 * 4 * base_config.n_layer);  // A and B of 4 projections per layer
    CHECK(frozen == 2 + 12 * base_config.n_layer + 2);
    CHECK(resident.m[0].empty());  // frozen embeddings: no moments

    // streamed (moments on the storage tier) gives the same bits
    const auto streamed = run<streamed_t>(backend, model, upload, 40);
    CHECK(resident.losses == streamed.losses);
    CHECK(resident.norms == streamed.norms);
    for (std::size_t g = 0; g < model.group_count(); ++g) {
        CHECK(same(resident.params[g], streamed.params[g]));
        CHECK(same(resident.m[g], streamed.m[g]));
        CHECK(same(resident.v[g], streamed.v[g]));
    }

    // the merged plain GPT (W + alpha/r A B) computes the LoRA model's loss
    const host_blocks<float> merged = lora::merged_blocks(base_config, lora::gpt2_lora_config(adapters), base,
                                                          dir.path() / "adapters.safetensors");
    const gpt_model<float, B> plain(base_config);
    gpt_trainer<float, B> t(backend, plain, options(1e-3));
    for (std::size_t g = 0; g < merged.size(); ++g) t.upload(gpt_trainer<float, B>::state_kind::params, g, merged[g]);
    const double merged_loss = t.evaluate(text(3, 1000));
    MESSAGE("merged model's loss " << merged_loss << ", LoRA model's " << resident.after);
    CHECK(std::abs(merged_loss - resident.after) < 1e-5 * resident.after);
}

TEST_CASE_TEMPLATE("a LoRA model under every activation policy (kept parts at a smaller micro-batch too): the "
                   "adapters' gradients of keeping every block, bitwise", B, STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    if (!made) return;
    const auto model = lora::make_gpt2_lora_model<B>(base_config, adapters);
    test::policy_gradients<float, B, std::remove_const_t<decltype(model)>> gradients(*made, model,
                                                                                    base_config.vocab_size, 5);
    const test::micro_batch_shape shape{.rows = 3, .cols = 8, .batch = 2, .seq = 7};  // 2 x 7 in 3 x 8
    gradients.check_every_policy(shape);
}

TEST_CASE("the planner: a LoRA fine-tune needs the full fine-tune's host bytes minus the frozen tensors' state") {
    const auto model = lora::make_gpt2_lora_model<cpu_backend>(base_config, adapters);
    const gpt_model<float, cpu_backend> full(base_config);
    plan_request r{.model = footprint_of<cpu_backend>(full, 4, 8), .accum = 1, .activations = activation_policy::recompute,
                   .where = placement::streamed};
    r.budgets = {.device = std::size_t(1) << 30, .host = std::size_t(1) << 30, .storage = 0};
    const memory_plan full_plan = plan(r);
    r.model = footprint_of<cpu_backend>(model, 4, 8);
    const memory_plan lora_plan = plan(r);
    std::size_t W = 0, W_lora = 0, T_lora = 0;
    for (const auto& g : full.groups()) W += g.bytes();
    for (const auto& g : model.groups()) {
        W_lora += g.bytes();
        T_lora += g.trainable_bytes();
    }
    // full: weights + grads + m + v = 4 W; LoRA: its weights (base + adapters) + 3 x the adapters'
    CHECK(full_plan.total(tier_id::host) - lora_plan.total(tier_id::host) == 4 * W - (W_lora + 3 * T_lora));
    CHECK(lora_plan.bytes_of(plan_category::grads, tier_id::host) == T_lora);
    CHECK(lora_plan.trainable_parameters < lora_plan.parameters / 4);
    MESSAGE("host: full fine-tune " << full_plan.total(tier_id::host) << " B, LoRA " << lora_plan.total(tier_id::host)
                                    << " B\n" << plan_table(lora_plan));
}

}  // namespace lora_finetune_test
