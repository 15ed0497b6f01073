// strata-llama train: the flags of the train command (train_args, filled by main.cpp's CLI) and the
// command itself: data, tokenizer, the Llama model (or with --lora-rank its LoRA model), the memory
// plan (train.cpp), then the training (train_model.hpp: one unit per backend and model).
#pragma once

#include "../common/train_flags.hpp"  // examples::train_flags

#include <cstddef>  // std::size_t
#include <string>   // std::string

namespace strata::llama_cli {

// The train flags: the ones strata-gpt shares (examples/common/train_flags.hpp), and the Llama
// shape's and strata-llama's own.
struct train_args : examples::train_flags {
    std::size_t hidden = 0;                   // SwiGLU width; 0: 8/3 n_embd rounded up to a multiple of 8
    std::size_t n_kv_head = 0, head_dim = 0;  // 0: n_head key/value heads, heads of n_embd / n_head
    std::size_t vocab = 0;                    // embedding rows; 0: the tokenizer's (or the checkpoint's)
    bool untied_head = false, qkv_bias = false;
    double rope_theta = 10000.0, norm_eps = 1e-5;
    std::string moments = "host";  // the optimizer state's home when streamed (host, storage)
    std::string lora_targets = "qkv_proj,o_proj,gate_proj,up_proj,down_proj";
    train_args() { out = "runs/llama"; }
};

// The train command: 0 on success, 128 + the signal when SIGINT / SIGTERM stopped the run; throws
// strata::error (printed by main) when it cannot train.
int run_train(const train_args& a);

}  // namespace strata::llama_cli
