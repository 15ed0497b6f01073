// The `sample` command's flags strata-gpt and strata-llama share, declared once: sample_args holds
// their values and add_sample_command declares the command with one help text each; each program
// says which checkpoint directories it reads. Example code, not library code: both programs
// include it.
#pragma once

#include "run_checks.hpp"  // count_in, real_in, unsigned_number

#include <CLI/CLI.hpp>  // CLI::App, CLI::ExistingDirectory

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint64_t
#include <string>   // std::string

namespace strata::examples {

struct sample_args {
    std::string checkpoint, prompt, device = "auto";
    std::size_t max_new_tokens = 200, top_k = 40;
    double temperature = 0.8;
    std::uint64_t seed = 42;
    int threads = 0;  // CPU threads for matrix products (0: all)
};

// The sample command on app, its flags read into s; checkpoint_help names the directories it loads.
inline CLI::App* add_sample_command(CLI::App& app, sample_args& s, const std::string& checkpoint_help) {
    auto* sample = app.add_subcommand("sample", "generate text from a checkpoint");
    sample->add_option("--checkpoint", s.checkpoint, checkpoint_help)->required()->check(CLI::ExistingDirectory);
    sample->add_option("--prompt", s.prompt, "text to continue")->required();
    sample->add_option("--max-new-tokens,--tokens", s.max_new_tokens, "tokens to generate")->capture_default_str()->check(count_in(0, 1L << 24));
    sample->add_option("--temperature", s.temperature, "softmax temperature (0: greedy)")->capture_default_str()->check(real_in(0, 1e6));
    sample->add_option("--top-k", s.top_k, "sample among the k most likely tokens (0: all)")->capture_default_str()->check(count_in(0, 1L << 24));
    sample->add_option("--seed", s.seed, "sampling seed")->capture_default_str()->check(unsigned_number);
    sample->add_option("--device", s.device, "cpu, cuda or auto (auto: CUDA when a GPU is present)")->capture_default_str();
    sample->add_option("--threads", s.threads, "CPU threads for matrix products (0: all)")->check(count_in(0, 1 << 20));
    return sample;
}

}  // namespace strata::examples
