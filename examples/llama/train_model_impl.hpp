// The definition of train_on (train_model.hpp), included only by the units that instantiate it
// (train_<backend>_<model>.cpp): each compiles one model's trainer on one backend.
#pragma once

#include "../common/example_cli.hpp"  // with_planned_trainer
#include "../common/train_run.hpp"    // run_inputs, build_and_train, build_and_train_parallel, finish_run
#include "train_model.hpp"            // run_context, train_on, is_lora, lora_adapter_config

#include <strata/model/model_files.hpp>  // strata::model_files

#include <span>    // std::span
#include <vector>  // std::vector

namespace strata::llama_cli {

// After initialize(): --init-from's weights (a LoRA model: its base tensors, by name; without
// --init-from the base keeps its random initialization).
template <class Trainer, class Model>
void upload_initial_weights(Trainer& t, const Model& model, const run_context& ctx) {
    if constexpr (is_lora<Model>) {
        if (ctx.init) llama::upload_base_weights(t, model, *ctx.init);  // group by group
    } else if (ctx.init) {  // one group at a time through host memory
        for (std::size_t g = 0; g < ctx.init->group_count(); ++g) {
            const std::vector<float> block = ctx.init->group(g);
            t.upload(Trainer::state_kind::params, g, std::span<const float>(block));
        }
    }
}

// A checkpoint's model files (strata::model_files): the Llama directory (model.safetensors,
// config.json with the run's architecture and token ids), or (LoRA) the adapters and
// adapter_config.json.
template <class Model>
strata::model_files<Model> model_files_of(const train_args& a, const llama::llama_config& config) {
    if constexpr (is_lora<Model>)
        return {.adapter_config = lora_adapter_config(a)};
    else
        return {.identity = llama::hf_identity::of(config)};
}

// The model's fields of trainer_state.json.
template <class Model>
void add_model_state(nlohmann::json& state, const train_args& a) {
    state["model"] = "strata-llama";
    if constexpr (is_lora<Model>) state["lora"] = lora_adapter_config(a);
}

// The plan's trainer (Trainer) for the model, from --init-from's weights or the seed's, trained by
// strata::run_training with the model's checkpoint files (examples/common/train_run.hpp).
// --gpus N > 1: a data_parallel_trainer of Trainer, one rank per backend.
template <class Trainer, class B, class Model>
int train_planned(const std::vector<B*>& backends, const Model& model, const train_options& o, run_context& ctx) {
    const examples::run_inputs in{"strata-llama", ctx.data, ctx.tokenizer, ctx.prepared, ctx.eot, ctx.streamed,
                                  ctx.predicted_step_seconds};
    const auto upload = [&](auto& t) { upload_initial_weights(t, model, ctx); };
    const auto model_state = [&](nlohmann::json& state) { add_model_state<Model>(state, ctx.a); };
    const strata::model_files<Model> files = model_files_of<Model>(ctx.a, ctx.config);
    const run_result r =
        backends.size() > 1
            ? examples::build_and_train_parallel<Trainer>(backends, model, o, ctx.a, in, upload, model_state, files)
            : examples::build_and_train<Trainer>(*backends[0], model, o, ctx.a, in, upload, model_state, files);
    return examples::finish_run(r, ctx.a);
}

// The trainer the plan asks for (train_model.hpp).
template <class B, class Model>
int train_on(const std::vector<B*>& backends, const memory_plan& p, const Model& model, const train_options& o,
             run_context& ctx) {
    return examples::with_planned_trainer<B, Model>(
        p, [&]<class Trainer>() { return train_planned<Trainer>(backends, model, o, ctx); });
}

}  // namespace strata::llama_cli
