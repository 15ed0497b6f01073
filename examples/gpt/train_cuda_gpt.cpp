// strata-gpt train: the GPT on the CUDA backend: its trainer, instantiated in this unit alone
// (train_model.hpp). Built only with the CUDA backend (examples/CMakeLists.txt).
#include "train_model_impl.hpp"  // train_model

namespace strata::gpt_cli {

template int train_model(const std::vector<cuda_backend*>&, const memory_plan&,
                         const gpt_model<float, cuda_backend>&, const train_options&, run_context&);

}  // namespace strata::gpt_cli
