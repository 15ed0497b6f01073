// strata-gpt train: the flags of the train command (train_args, filled by main.cpp's CLI) and the
// command itself: data, tokenizer, model (the GPT, or with --lora-rank its LoRA model), the memory
// plan, then strata::run_training (train/run.hpp) with the checkpoint files of that model.
#pragma once

#include "../common/train_flags.hpp"  // examples::train_flags

#include <string>  // std::string

namespace strata::gpt_cli {

// The train flags: the ones strata-llama shares (examples/common/train_flags.hpp), and strata-gpt's own.
struct train_args : examples::train_flags {
    std::string lora_targets = "attn.c_attn,attn.c_proj,mlp.c_fc,mlp.c_proj";
    train_args() { out = "runs/gpt"; }
};

// The train command: 0 on success, 128 + the signal when SIGINT / SIGTERM stopped the run; throws
// strata::error (printed by main) when it cannot train.
int run_train(const train_args& a);

}  // namespace strata::gpt_cli
