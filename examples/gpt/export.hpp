// strata-gpt export: a LoRA run's adapters merged into its base model, written as a plain GPT-2
// checkpoint (model.safetensors + config.json, loadable by strata-gpt sample, --init-from and
// transformers). The flags (export_args, filled by main.cpp's CLI) and the command.
#pragma once

#include <filesystem>  // std::filesystem::path
#include <string>      // std::string

namespace strata::gpt_cli {

struct export_args {
    std::string adapters, base, out;
    bool overwrite = false;
};

// export replaces --out whole, so it must be no input (`adapters`, the adapters file, or `base`,
// the base model's directory) and, unless --overwrite, empty or a previous export; throws
// strata::error otherwise.
void check_export_out(const export_args& a, const std::filesystem::path& adapters, const std::string& base);

// The export command: 0 on success; throws strata::error (printed by main) when it cannot merge.
int run_export(const export_args& a);

}  // namespace strata::gpt_cli
