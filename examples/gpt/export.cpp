// strata-gpt export (export.hpp): a LoRA run's adapters merged into its base model.
#include "export.hpp"

#include <strata/core/error.hpp>        // strata::error
#include <strata/io/atomic_write.hpp>   // commit_directory_atomically
#include <strata/io/json_file.hpp>      // read_json_file, write_json_file
#include <strata/model/gpt.hpp>         // gpt_model, load_model_files, write_model_files
#include <strata/nn/cpu_ops.hpp>        // ops<cpu_backend>
#include <strata/strata.hpp>            // cpu_backend

#include "../common/example_cli.hpp"    // tokenizer_kind, tokenizer_of_checkpoint
#include "../common/run_directory.hpp"  // is_within, named_path, resolve_checkpoint
#include "../lora/lora_model.hpp"       // lora::config_of, lora::merged_blocks

#include <nlohmann/json.hpp>  // nlohmann::json

#include <unistd.h>  // getpid

#include <iostream>  // std::cout
#include <string>    // std::string, std::to_string
#include <vector>    // std::vector

namespace strata::gpt_cli {

namespace fs = std::filesystem;

// What trainer_state.json says in a directory export wrote: how a later export knows it may
// replace that directory without --overwrite.
constexpr const char* merge_format = "strata-gpt LoRA merge 1";

void check_export_out(const export_args& a, const fs::path& adapters, const std::string& base) {
    for (const auto& [flag, in] : std::vector<examples::named_path>{{"--adapters", adapters}, {"--base", base}})
        if (examples::is_within(a.out, in) || examples::is_within(in, a.out))
            throw error("--out '" + a.out + "' is or holds the " + flag + " input '" + in.string() +
                            "': writing it would destroy the input",
                        "pick another --out");
    const fs::path state = fs::path(a.out) / "trainer_state.json";
    const bool previous_export = fs::exists(state) && read_json_file(state).value("format", "") == merge_format;
    if (fs::exists(a.out) && !fs::is_empty(a.out) && !previous_export && !a.overwrite)
        throw error("--out '" + a.out + "' exists and is not a merge strata-gpt export wrote: refusing to replace it",
                    "pick another --out, or pass --overwrite");
}

int run_export(const export_args& a) {
    std::string base = a.base;
    // a run directory means its latest checkpoint, as for sample and --resume
    fs::path adapters = fs::is_directory(a.adapters) ? examples::resolve_checkpoint(a.adapters, "--adapters") : fs::path(a.adapters);
    if (fs::is_directory(adapters)) {  // a checkpoint directory of a LoRA run: its state names the base
        const auto state_path = adapters / "trainer_state.json";
        if (base.empty() && fs::exists(state_path)) {
            const auto state = read_json_file(state_path);
            if (state.contains("lora") && state["lora"].contains("base")) base = state["lora"]["base"].get<std::string>();
        }
        adapters /= "adapters.safetensors";
    }
    if (!fs::exists(adapters))
        throw error("'" + adapters.string() + "' does not exist", "pass a LoRA run's checkpoint (OUT/step-N) or its adapters.safetensors");
    if (base.empty())
        throw error("the base model of '" + adapters.string() + "' is unknown", "pass --base DIR (the --init-from of the LoRA run)");
    check_export_out(a, adapters, base);
    auto loaded = load_model_files<float>(base);
    auto lc = lora::config_of(adapters);
    lc.n_head = loaded.config.n_head;
    const auto merged = lora::merged_blocks(loaded.config, lc, loaded.blocks, adapters);
    // Written beside --out and renamed into place: an export that fails midway leaves --out as it was.
    const fs::path tmp = fs::path(a.out).string() + ".tmp-" + std::to_string(::getpid());
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    write_model_files(gpt_model<float, cpu_backend>(loaded.config), merged, tmp);
    for (const char* f : {"vocab.json", "merges.txt"})
        if (fs::exists(fs::path(base) / f)) fs::copy_file(fs::path(base) / f, tmp / f);
    write_json_file(tmp / "trainer_state.json",
                    nlohmann::json{{"format", merge_format},
                                   {"tokenizer", examples::tokenizer_kind(examples::tokenizer_of_checkpoint(base))},
                                   {"base", fs::absolute(base).string()},
                                   {"adapters", fs::absolute(adapters).string()}});
    commit_directory_atomically(tmp, a.out, {.replace_existing = true});
    std::cout << "merged " << adapters.string() << " (rank " << lc.rank << ", " << lc.targets.size() << " projections x "
              << lc.n_layer << " layers) into " << base << ": " << a.out << std::endl;
    return 0;
}

}  // namespace strata::gpt_cli
