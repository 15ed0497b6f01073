// strata-gpt sample: text generated from a checkpoint (strata's, or a Hugging Face GPT-2
// directory) by strata::generator, on the CPU or CUDA backend. The flags (sample_args, filled by
// main.cpp's CLI) and the command.
#pragma once

#include "../common/sample_flags.hpp"  // examples::sample_args

namespace strata::gpt_cli {

using sample_args = examples::sample_args;

// The sample command: prints the prompt and its continuation; 0 on success; throws strata::error
// (printed by main) when it cannot load or generate.
int run_sample(const sample_args& a);

}  // namespace strata::gpt_cli
