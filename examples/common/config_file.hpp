// --config FILE for the example trainers: a TOML or INI file of the same options as the command
// line, keys being the long flag names (`steps = 600`, `n-layer = 2`, `lr = 3e-4`, `plan = true`),
// at the top level or in a [train] section. An unknown key, a value a flag would refuse, or a file
// that cannot be read is an error; a flag given on the command line wins over the file.
//
// CLI11 2.1 reads config files for the main app only, so a subcommand's --config is applied here,
// after parsing, through each option's own validators.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <CLI/CLI.hpp>  // CLI::App, CLI::ConfigTOML, CLI::Error

#include <algorithm>   // std::replace
#include <filesystem>  // std::filesystem
#include <string>      // std::string
#include <vector>      // std::vector

namespace strata::examples {

// A key as it can be shown in a message: at most 40 characters, other bytes than printable ASCII as '?'.
inline std::string printable(std::string text) {
    if (text.size() > 40) text = text.substr(0, 40) + "...";
    for (char& c : text)
        if (c < 0x20 || c > 0x7e) c = '?';
    return text;
}

// Applies the options of `file` to the subcommand `sub` (whose name is also the one section the
// file may have). Options the command line gave are kept.
inline void apply_config_file(CLI::App& sub, const std::string& file) {
    const std::string hint = "keys are the long flag names of `" + sub.get_name() +
                             " --help` without the dashes, e.g. steps = 600 or n-layer = 2";
    if (!std::filesystem::is_regular_file(file))
        throw error("--config '" + file + "' is not a file", "pass a TOML or INI file of train options");
    std::vector<CLI::ConfigItem> items;
    try {
        items = CLI::ConfigTOML().from_file(file);
    } catch (const CLI::Error& e) {
        throw error("--config '" + file + "': " + e.what(), hint);
    }
    for (const auto& item : items) {
        if (item.name == "++" || item.name == "--") continue;  // CLI11's markers of a section's start and end
        for (const auto& parent : item.parents)
            if (parent != "default" && parent != sub.get_name())
                throw error("--config '" + file + "': section [" + parent + "] is not one of this program's",
                            "write the options at the top level or in a [" + sub.get_name() + "] section");
        std::string key = item.name;
        if (key.starts_with("--")) key = key.substr(2);
        std::replace(key.begin(), key.end(), '_', '-');
        CLI::Option* opt = key.empty() ? nullptr : sub.get_option_no_throw("--" + key);
        if (opt == nullptr || key == "config" || key == "help")
            throw error("--config '" + file + "': unknown key '" + printable(item.name) + "'", hint);
        if (opt->count() > 0) continue;  // the command line wins
        try {
            opt->add_result(item.inputs);
            opt->run_callback();  // the option's validators and conversion, as on the command line
        } catch (const CLI::Error& e) {
            throw error("--config '" + file + "': " + key + ": " + e.what(), hint);
        }
    }
}

}  // namespace strata::examples
