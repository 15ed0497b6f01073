// strata-gpt train: the flags of the train command (train_args, filled by main.cpp's CLI) and the
// command itself: data, tokenizer, model (the GPT, or with --lora-rank its LoRA model), the memory
// plan, then strata::run_training (train/run.hpp) with the checkpoint files of that model.
#pragma once

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint64_t
#include <string>   // std::string

namespace strata::gpt_cli {

struct train_args {
    std::string data, format = "auto", tokenizer = "byte";
    std::string chat_template;  // --chat-template: "" (auto for chat records, none otherwise), auto, none or FILE
    std::size_t n_layer = 4, n_head = 4, n_embd = 128, seq_len = 128;
    std::size_t batch = 8, accum = 1;
    std::size_t gpus = 1;  // data-parallel ranks: GPUs 0..N-1 (CUDA, NCCL) or N CPU ranks as threads
    long steps = 300, warmup = -1, eval_every = 50, save_every = 0, eval_batches = 8;
    double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, clip = 1.0, val_fraction = 0.05;
    std::string optimizer = "adamw";  // adamw, sgd (with momentum) or adafactor
    double momentum = 0.9;            // SGD's
    double beta2_decay = -0.8, eps2 = 1e-3, update_clip = 1.0;  // Adafactor's (torch's defaults)
    std::string schedule = "cosine";
    std::uint64_t seed = 1337;
    std::string out = "runs/gpt", resume, metrics, device = "auto";
    std::string save = "full";  // what each checkpoint holds: full, weights (no optimizer state) or none
    long stop_at = 0;  // stop (and save) after this step without changing the schedule
    std::string placement = "auto", device_budget, host_budget, storage_dir, storage_budget, trace;
    std::string io_engine = "auto";  // the storage tier's I/O engine
    std::size_t io_workers = 0;
    bool plan_only = false;
    std::string machine;            // --machine FILE: plan and predict for that machine (with --plan only)
    bool recalibrate = false;       // measure this machine's rates again, not from the cache
    bool state_on_storage = false;  // every host group's optimizer state on storage
    std::string init_from;
    bool tokenizer_given = false;
    int threads = 0;
    bool no_checkpointing = false;  // the older name of --activations keep
    std::string activations = "auto";
    bool tf32 = false;
    std::size_t lora_rank = 0;  // 0: full fine-tuning / pre-training; > 0: LoRA adapters only
    double lora_alpha = 0;      // 0: 2 x rank
    std::string lora_targets = "attn.c_attn,attn.c_proj,mlp.c_fc,mlp.c_proj";
    std::string config;                 // --config FILE (applied in main)
    bool overwrite = false;             // replace the checkpoints in --out of another run (or this run's past --resume)
    bool metrics_append = false;        // add to an existing --metrics file that is not this run's
    bool allow_option_changes = false;  // resume with options that differ from the checkpoint's
};

// The train command: 0 on success, 128 + the signal when SIGINT / SIGTERM stopped the run; throws
// strata::error (printed by main) when it cannot train.
int run_train(const train_args& a);

}  // namespace strata::gpt_cli
