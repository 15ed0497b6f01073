// strata-llama train: the Llama model's LoRA model (--lora-rank) on the CPU backend: its trainer,
// instantiated in this unit alone (train_model.hpp).
#include "train_model_impl.hpp"  // train_on

namespace strata::llama_cli {

template int train_on(const std::vector<cpu_backend*>&, const memory_plan&,
                      const llama::llama_lora_model<cpu_backend>&, const train_options&, run_context&);

}  // namespace strata::llama_cli
