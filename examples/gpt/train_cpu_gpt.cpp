// strata-gpt train: the GPT on the CPU backend: its trainer, instantiated in this unit alone
// (train_model.hpp).
#include "train_model_impl.hpp"  // train_model

namespace strata::gpt_cli {

template int train_model(const std::vector<cpu_backend*>&, const memory_plan&,
                         const gpt_model<float, cpu_backend>&, const train_options&, run_context&);

}  // namespace strata::gpt_cli
