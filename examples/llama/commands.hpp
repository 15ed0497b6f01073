// strata-llama's commands other than train: sample (generate text from a checkpoint), export (a
// checkpoint as a Hugging Face directory), score (logits and loss on a text). Their flags, filled
// by main.cpp's CLI, and the commands (commands.cpp): each returns 0 on success and throws
// strata::error (printed by main) when it cannot run.
#pragma once

#include "../common/sample_flags.hpp"  // examples::sample_args

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint64_t
#include <string>   // std::string

namespace strata::llama_cli {

using sample_args = examples::sample_args;

int run_sample(const sample_args& a);

struct export_args {
    std::string checkpoint, out, dtype = "float32";
};

int run_export(const export_args& a);

struct score_args {
    std::string checkpoint, prompt, tokens_file, out, device = "auto";
    bool overwrite = false;
};

int run_score(const score_args& a);

}  // namespace strata::llama_cli
