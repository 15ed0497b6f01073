// The definition of train_model (train_model.hpp), included only by the units that instantiate it
// (train_<backend>_<model>.cpp): each compiles one model's trainer on one backend.
#pragma once

#include "../common/example_cli.hpp"  // with_planned_trainer
#include "../common/train_run.hpp"    // run_inputs, build_and_train, build_and_train_parallel, finish_run
#include "../lora/lora_model.hpp"     // lora::upload_base_weights, adapters_file
#include "train_model.hpp"            // run_context, train_model

#include <strata/model/model_files.hpp>  // model_files, is_gpt_model
#include <strata/nn/cpu_ops.hpp>         // ops<cpu_backend>

#include <nlohmann/json.hpp>  // nlohmann::json

#include <filesystem>   // std::filesystem::absolute
#include <iostream>     // std::cout
#include <type_traits>  // std::remove_reference_t

namespace strata::gpt_cli {

// strata-gpt trains two models, both decoder_models: the GPT (gpt_model: of gpt2_blocks) and,
// with --lora-rank, its LoRA model (of gpt2_lora_blocks).
template <class Model>
constexpr bool is_lora = !is_gpt_model<Model>::value;

// The plan's trainer (Trainer) for the model, from --init-from's weights or the seed's, trained by
// strata::run_training with the model's checkpoint files (examples/common/train_run.hpp).
// --gpus N > 1: a data_parallel_trainer of Trainer, one rank per backend.
template <class Trainer, class B, class Model>
int train_planned(const std::vector<B*>& backends, const Model& model, const train_options& o, run_context& ctx) {
    const train_args& a = ctx.a;
    const examples::run_inputs in{"strata-gpt", a.data, ctx.tokenizer, ctx.prepared, ctx.eot, ctx.streamed,
                                  ctx.predicted_step_seconds};
    const auto upload = [&](auto& t) {
        using T = std::remove_reference_t<decltype(t)>;
        if constexpr (is_lora<Model>)  // the base checkpoint's weights by name; the adapters as initialized
            lora::upload_base_weights(t, model, ctx.init_config, ctx.init_blocks);
        else
            for (std::size_t g = 0; g < ctx.init_blocks.size(); ++g) t.upload(T::state_kind::params, g, ctx.init_blocks[g]);
    };
    // The GPT's checkpoints are GPT-2 directories, a LoRA run's hold the adapters alone (the base is
    // --init-from's, unchanged; export merges them): each model's strata::model_files.
    const auto model_state = [&](nlohmann::json& state) {
        if constexpr (is_lora<Model>)
            state["lora"] = {{"rank", a.lora_rank},
                             {"base", std::filesystem::absolute(a.init_from).string()},
                             {"adapters", lora::adapters_file}};
    };
    const model_files<Model> files{};
    const run_result r =
        backends.size() > 1
            ? examples::build_and_train_parallel<Trainer>(backends, model, o, a, in, upload, model_state, files)
            : examples::build_and_train<Trainer>(*backends[0], model, o, a, in, upload, model_state, files);
    if (is_lora<Model> && !r.last_checkpoint.empty())
        std::cout << "adapters only; a merged GPT-2 checkpoint: strata-gpt export --adapters " +
                         r.last_checkpoint.string() + " --out DIR"
                  << std::endl;
    return examples::finish_run(r, a);
}

// The trainer the plan asks for, on backend B, for the model (the GPT, or its LoRA model).
template <class B, class Model>
int train_model(const std::vector<B*>& backends, const memory_plan& p, const Model& model, const train_options& o,
                run_context& ctx) {
    return examples::with_planned_trainer<B, Model>(
        p, [&]<class Trainer>() { return train_planned<Trainer>(backends, model, o, ctx); });
}

}  // namespace strata::gpt_cli
