// strata/train.hpp: what a program composes to train a model, in one include: the CPU backend
// and its ops, the model templates (decoder_model, and gpt_model: GPT-2, the decoder_model of the
// GPT-2 block and layernorm), the pipeline of streamed blocks, the optimizers (AdamW, SGD with
// momentum) and offloaded_adamw, the trainer for every plan (tiered_trainer: resident, streamed,
// state on storage, any mix, as train_options::homes says), the planner, checkpoints, data loading, learning-rate schedules and the step loop of a
// run (run_training). <strata/cuda.hpp> adds the CUDA backend and its ops.
#pragma once

#include <strata/data/dataset.hpp>              // data::dataset
#include <strata/data/loader.hpp>               // data::batch, data::batch_loader
#include <strata/model/decoder.hpp>             // decoder_model
#include <strata/model/gpt.hpp>                 // gpt_model, its files (model_files<gpt_model>)
#include <strata/model/model_files.hpp>         // model_files: a model's checkpoint files
#include <strata/nn/cpu_ops.hpp>                // ops<cpu_backend>
#include <strata/nn/gpt2_block.hpp>             // gpt2_block
#include <strata/nn/layernorm_layer.hpp>        // layernorm_layer
#include <strata/optim/offloaded_adamw.hpp>     // offloaded_adamw
#include <strata/optim/optimizers.hpp>          // adamw_optimizer, sgd_optimizer, any_optimizer
#include <strata/plan/planner.hpp>              // plan, memory_plan
#include <strata/stream/prefetch_pipeline.hpp>  // pipeline_engine, transfer_counters
#include <strata/strata.hpp>                    // backends, tiers, tensors
#include <strata/train/checkpoint.hpp>          // save_checkpoint, load_checkpoint
#include <strata/train/run.hpp>                 // run_training, run_options, run_hooks
#include <strata/train/schedule.hpp>            // lr_schedule
#include <strata/train/tiered_trainer.hpp>      // tiered_trainer, train_options (every plan)

namespace strata {

// The trainer of GPT-2 (gpt_model): tiered_trainer names no model, so a program says which.
template <class R, Backend B, Optimizer Opt = any_optimizer>
using gpt_trainer = tiered_trainer<R, B, gpt_model<R, B>, Opt>;

}  // namespace strata
