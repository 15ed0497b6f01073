// strata-gpt train, the part that takes the compiler's time: one model trained on one backend
// (train_model: the plan's trainer built, initialized and run by strata::run_training). Declared
// here, defined in train_model_impl.hpp, and instantiated once per backend and model, each in its
// own unit (train_cpu_gpt.cpp, train_cpu_lora.cpp, train_cuda_gpt.cpp, train_cuda_lora.cpp), so
// that a parallel build compiles the four at once; train.cpp (flags, data, plan) calls them.
#pragma once

#include "../lora/lora_model.hpp"  // lora::gpt2_lora_model
#include "train.hpp"               // train_args

#include <strata/backend/cpu_backend.hpp>  // cpu_backend
#include <strata/data/tokenize.hpp>        // data::prepared_data
#include <strata/model/gpt.hpp>            // gpt_model, gpt_config
#include <strata/model/model_files.hpp>    // host_blocks
#include <strata/plan/planner.hpp>         // memory_plan
#include <strata/train/tiered_trainer.hpp>  // train_options
#ifdef STRATA_WITH_CUDA
#include <strata/cuda.hpp>  // cuda_backend
#endif

#include <string>  // std::string
#include <vector>  // std::vector

namespace strata::gpt_cli {

// Everything train_model needs besides the backends, the plan, the model and its options.
struct run_context {
    const train_args& a;
    data::prepared_data& prepared;
    token_id eot;
    bool streamed = false;                // a streamed plan: every step traced (transfer time hidden under compute)
    host_blocks<float> init_blocks;       // --init-from: weights to start from (empty: random init)
    gpt_config init_config;               // --init-from: its shape
    std::string tokenizer;                // "byte", "gpt2:DIR" or "hf:PATH", as used
    double predicted_step_seconds = 0;    // the cost model's, for the run's summary (0: none)
};

// The plan's trainer for `model` on `backends` (one rank each; --gpus N > 1: data-parallel), from
// --init-from's weights or the seed's, trained with the model's checkpoint files: 0 on success,
// 128 + the signal when SIGINT / SIGTERM stopped the run.
template <class B, class Model>
int train_model(const std::vector<B*>& backends, const memory_plan& p, const Model& model, const train_options& o,
                run_context& ctx);

// The models strata-gpt trains on each backend, each instantiated in its own unit.
extern template int train_model(const std::vector<cpu_backend*>&, const memory_plan&, const gpt_model<float, cpu_backend>&,
                                const train_options&, run_context&);  // train_cpu_gpt.cpp
extern template int train_model(const std::vector<cpu_backend*>&, const memory_plan&,
                                const lora::gpt2_lora_model<cpu_backend>&, const train_options&,
                                run_context&);  // train_cpu_lora.cpp
#ifdef STRATA_WITH_CUDA
extern template int train_model(const std::vector<cuda_backend*>&, const memory_plan&,
                                const gpt_model<float, cuda_backend>&, const train_options&,
                                run_context&);  // train_cuda_gpt.cpp
extern template int train_model(const std::vector<cuda_backend*>&, const memory_plan&,
                                const lora::gpt2_lora_model<cuda_backend>&, const train_options&,
                                run_context&);  // train_cuda_lora.cpp
#endif

}  // namespace strata::gpt_cli
