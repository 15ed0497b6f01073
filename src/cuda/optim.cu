// The optimizers' device updates (optim/cuda_update.hpp: optimizer_kernels<O, cuda_backend>): each
// registered optimizer's cuda_update (kernels/cuda/optimizer_updates.cuh, non-inline: defined in
// this unit only) and the one copy of the AdamW and SGD kernel launchers. Adafactor's kernels are
// plain (non-template) functions of kernels/cuda/adafactor.cuh, compiled here through
// optimizer_updates.cuh. How to add a kernel: src/cuda/elementwise.cu.
#include <strata/kernels/cuda/optimizer_updates.cuh>  // cuda_update of every registered optimizer

namespace strata::kernels::cuda {
// The one copy of each kernel launcher (the headers declare them extern).
STRATA_CUDA_ADAMW_INSTANCES(template)
STRATA_CUDA_SGD_INSTANCES(template)
}  // namespace strata::kernels::cuda
