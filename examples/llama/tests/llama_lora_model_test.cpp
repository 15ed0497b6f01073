// A LoRA fine-tune of a trained Llama-family model through strata's own trainers (the model of
// llama_lora_model.hpp):
// - freshly initialized (B = 0), the LoRA model's loss is the base model's, bit for bit;
// - only adapters move: every base tensor is bit-identical after training; the loss on a new text falls;
// - streamed == resident bitwise (losses, norms, weights, the adapters' moments);
// - the adapters file (adapters.hpp's, "model.layers.<l>...") loads back bitwise;
// - the planner sees the frozen base: gradients are the adapters' bytes only.
#include "support/placements.hpp"  // test::streamed_trainer
#include "../llama_lora_model.hpp"  // llama::make_llama_lora_model, upload_base_weights
#ifdef STRATA_TESTS_WITH_CUDA
#include "../llama_ops_cuda.hpp"  // llama_ops<cuda_backend> (definitions: strata_llama_cuda_ops)
#endif
#include "../../lora/tests/finetune_support.hpp"  // text, options, same, finetune, run
#include "io/scratch_dir.hpp"       // scratch_dir
#include "support/backends.hpp"     // STRATA_TEST_BACKENDS, make_backend
#include "support/policy_gradients.hpp"  // test::policy_gradients

#include <strata/io/safetensors.hpp>          // strata::safetensors_file
#include <strata/plan/planner.hpp>            // plan, footprint_of
#include <strata/strata.hpp>                  // tier_options, cpu_backend
#include <strata/train/checkpoint.hpp>        // download_blocks, host_blocks
#include <strata/train/tiered_trainer.hpp>  // tiered_trainer

#include <doctest/doctest.h>  // TEST_CASE, TEST_CASE_TEMPLATE, CHECK, MESSAGE

#include <cstring>      // std::memcmp
#include <filesystem>   // std::filesystem::path
#include <span>         // std::span
#include <type_traits>  // std::remove_const_t
#include <vector>       // std::vector

namespace llama_lora_model_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

// Grouped-query attention with q/k/v biases (Qwen2) and an untied head: every kind of frozen tensor.
const llama::llama_config base_config{.vocab = 31, .max_seq = 8, .n_layer = 2, .n_head = 4, .n_embd = 16,
                                      .hidden = 24, .n_kv_head = 2, .tie_word_embeddings = false,
                                      .qkv_bias = true, .arch = llama::llama_arch::qwen2};
const llama::llama_lora_config adapters{.rank = 4, .alpha = 8.0};  // all five projections

using namespace lora::finetune_support;  // text, options, same, finetune, run

// The base model: a Llama trained a little on text A, and its loss on text B.
template <class B>
host_blocks<float> train_base(B& backend, double& loss_on_b) {
    const auto model = llama::make_llama_model<B>(base_config);
    tiered_trainer<float, B, llama::llama_model<B>> t(backend, model, options(1e-2));
    t.initialize(11);
    for (int s = 0; s < 20; ++s) t.step(text(1, s));
    loss_on_b = t.evaluate(text(3, 1000));
    return download_blocks(t, decltype(t)::state_kind::params);
}

}  // namespace

TEST_CASE_TEMPLATE("llama LoRA: only the adapters move, the loss on new text falls, streamed == resident", B,
                   STRATA_TEST_BACKENDS) {
    test::scratch_dir dir;
    auto made = test::make_backend<B>(tier_options{.storage_dir = dir.path()});
    if (!made) return;
    B& backend = *made;
    double base_loss = 0;
    const host_blocks<float> base = train_base(backend, base_loss);
    const auto model = llama::make_llama_lora_model<B>(base_config, adapters);
    using M = std::remove_const_t<decltype(model)>;
    using resident_t = tiered_trainer<float, B, M>;
    using streamed_t = test::streamed_trainer<tiered_trainer<float, B, M>, 2, storage_tier>;
    const auto upload = [&](auto& t) { llama::upload_base_weights(t, model, base_config, base); };
    const auto resident = run<resident_t>(backend, model, upload, 30, dir.path() / "adapters.safetensors");

    CHECK(resident.before == base_loss);  // B = 0: the base model's loss, bit for bit
    MESSAGE("loss on the new text: " << resident.before << " -> " << resident.after);
    CHECK(resident.after < 0.8 * resident.before);
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
    CHECK(moved == 2 * 5 * base_config.n_layer);             // A and B of 5 projections per layer
    CHECK(frozen == 2 + 8 * base_config.n_layer + 1);        // embeddings + head, 8 per block, the norm
    CHECK(resident.m[0].empty());                            // frozen embeddings: no moments
    CHECK(resident.m[model.final_group()].empty());          // frozen final norm

    const auto streamed = run<streamed_t>(backend, model, upload, 30);
    CHECK(resident.losses == streamed.losses);
    CHECK(resident.norms == streamed.norms);
    for (std::size_t g = 0; g < model.group_count(); ++g) {
        CHECK(same(resident.params[g], streamed.params[g]));
        CHECK(same(resident.m[g], streamed.m[g]));
        CHECK(same(resident.v[g], streamed.v[g]));
    }

    // the adapters file: Llama names, and it loads back into a fresh trainer bitwise
    const auto file = safetensors_file::open(dir.path() / "adapters.safetensors");
    CHECK(file.contains("model.layers.1.mlp.down_proj.lora_A"));
    CHECK(file.info("model.layers.0.self_attn.qkv_proj.lora_B").shape == std::vector<std::size_t>{4, 32});
    CHECK(file.metadata().at("format") == "strata.lora.llama/1");
    resident_t t(backend, model, options(1e-3));
    t.initialize(99);
    llama::upload_base_weights(t, model, base_config, base);
    lora::load_model_adapters(strata::trainer_weights{t}, model, dir.path() / "adapters.safetensors");
    const auto loaded = download_blocks(t, resident_t::state_kind::params);
    for (std::size_t g = 0; g < model.group_count(); ++g) CHECK(same(loaded[g], resident.params[g]));
    CHECK(t.evaluate(text(3, 1000)) == resident.after);
}

TEST_CASE_TEMPLATE("llama LoRA under every activation policy (kept parts at a smaller micro-batch too): the "
                   "adapters' gradients of keeping every block, bitwise", B, STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    if (!made) return;
    const auto model = llama::make_llama_lora_model<B>(base_config, adapters);
    test::policy_gradients<float, B, std::remove_const_t<decltype(model)>> gradients(*made, model, base_config.vocab, 5);
    const test::micro_batch_shape shape{.rows = 3, .cols = 8, .batch = 2, .seq = 7};  // 2 x 7 in 3 x 8
    gradients.check_every_policy(shape);
}

TEST_CASE("llama LoRA: the planner sees the frozen base (gradients and moments are the adapters' only)") {
    const auto model = llama::make_llama_lora_model<cpu_backend>(base_config, adapters);
    plan_request r{.model = footprint_of<cpu_backend>(model, 4, 8), .accum = 1, .activations = activation_policy::recompute,
                   .where = placement::streamed};
    r.budgets = {.device = std::size_t(1) << 30, .host = std::size_t(1) << 30, .storage = 0};
    const memory_plan p = plan(r);
    std::size_t trainable = 0;
    for (const auto& g : model.groups()) trainable += g.trainable_bytes();
    CHECK(p.bytes_of(plan_category::grads, tier_id::host) == trainable);
    // r (in + out) per adapter: qkv (16 + 32), o (16 + 16), gate and up (16 + 24), down (24 + 16)
    CHECK(p.trainable_parameters == base_config.n_layer * adapters.rank * ((16 + 32) + (16 + 16) + 2 * (16 + 24) + (24 + 16)));
    CHECK(p.trainable_parameters < p.parameters / 4);
    MESSAGE(plan_table(p));
}

}  // namespace llama_lora_model_test
