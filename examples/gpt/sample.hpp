// strata-gpt sample: text generated from a checkpoint (strata's, or a Hugging Face GPT-2
// directory) by strata::generator, on the CPU or CUDA backend. The flags (sample_args, filled by
// main.cpp's CLI) and the command.
#pragma once

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint64_t
#include <string>   // std::string

namespace strata::gpt_cli {

struct sample_args {
    std::string checkpoint, prompt, device = "auto";
    std::size_t max_new_tokens = 200, top_k = 40;
    double temperature = 0.8;
    std::uint64_t seed = 42;
    int threads = 0;  // CPU threads for matrix products (0: all)
};

// The sample command: prints the prompt and its continuation; 0 on success; throws strata::error
// (printed by main) when it cannot load or generate.
int run_sample(const sample_args& a);

}  // namespace strata::gpt_cli
