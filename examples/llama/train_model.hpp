// strata-llama train, the part that takes the compiler's time: one model trained on one backend
// (train_on: the plan's trainer built, initialized and run by strata::run_training). Declared here,
// defined in train_model_impl.hpp, and instantiated once per backend and model, each in its own
// unit (train_cpu_llama.cpp, train_cpu_lora.cpp, train_cuda_llama.cpp, train_cuda_lora.cpp), so
// that a parallel build compiles the four at once; train.cpp (flags, data, plan) calls them.
#pragma once

#include "llama_lora_model.hpp"  // llama::llama_lora_model, llama_lora_config, llama_lora_block
#include "llama_model.hpp"       // llama::llama_model, llama_config, llama_weights
#include "train.hpp"             // train_args
#ifdef STRATA_WITH_CUDA
#include "llama_ops_cuda.hpp"  // llama_ops<cuda_backend>, ops<cuda_backend>
#include <strata/cuda.hpp>     // cuda_backend
#endif

#include <strata/backend/cpu_backend.hpp>   // cpu_backend
#include <strata/data/tokenize.hpp>         // data::prepared_data
#include <strata/plan/planner.hpp>          // memory_plan
#include <strata/train/tiered_trainer.hpp>  // train_options

#include <nlohmann/json.hpp>  // nlohmann::json

#include <string>       // std::string
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

namespace strata::llama_cli {

// Everything train_on needs besides the backends, the plan, the model and its options.
struct run_context {
    const train_args& a;
    std::string data;  // the data file used
    data::prepared_data& prepared;
    token_id eot;
    std::string tokenizer;                  // "byte", "gpt2:DIR" or "hf:PATH"
    const llama::llama_weights* init = nullptr;  // --init-from's weights (null: random initialization)
    llama::llama_config config;             // the model's shape (a LoRA run's base), architecture and token ids
    bool streamed = false;                  // a streamed plan: every step traced (transfer time hidden under compute)
    double predicted_step_seconds = 0;      // the cost model's, for the run's summary (0: none)
};

// --lora-rank's adapters: rank, alpha and the projections adapted (train.cpp).
llama::llama_lora_config lora_config_of(const train_args& a);

// adapter_config.json of a LoRA checkpoint: what the adapters adapt, and the base they were trained on (train.cpp).
nlohmann::json lora_adapter_config(const train_args& a);

template <class Model>
constexpr bool is_lora = std::is_same_v<typename Model::block_type,
                                        llama::llama_lora_block<float, typename Model::backend_type>>;

// The plan's trainer for `model` on `backends` (one rank each; --gpus N > 1: data-parallel), from
// --init-from's weights or the seed's, trained with the model's checkpoint files: 0 on success,
// 128 + the signal when SIGINT / SIGTERM stopped the run.
template <class B, class Model>
int train_on(const std::vector<B*>& backends, const memory_plan& p, const Model& model, const train_options& o,
             run_context& ctx);

// The models strata-llama trains on each backend, each instantiated in its own unit.
extern template int train_on(const std::vector<cpu_backend*>&, const memory_plan&, const llama::llama_model<cpu_backend>&,
                             const train_options&, run_context&);  // train_cpu_llama.cpp
extern template int train_on(const std::vector<cpu_backend*>&, const memory_plan&,
                             const llama::llama_lora_model<cpu_backend>&, const train_options&,
                             run_context&);  // train_cpu_lora.cpp
#ifdef STRATA_WITH_CUDA
extern template int train_on(const std::vector<cuda_backend*>&, const memory_plan&,
                             const llama::llama_model<cuda_backend>&, const train_options&,
                             run_context&);  // train_cuda_llama.cpp
extern template int train_on(const std::vector<cuda_backend*>&, const memory_plan&,
                             const llama::llama_lora_model<cuda_backend>&, const train_options&,
                             run_context&);  // train_cuda_lora.cpp
#endif

}  // namespace strata::llama_cli
