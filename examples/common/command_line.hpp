// The command line of the example programs: parsing with one convention for every usage error
// (the program's "NAME: error:" prefix, a line naming the help to read, exit code usage_error), the
// usage when no command is given, and the commands named when an unknown one is.
// Example code, not library code: both strata-gpt and strata-llama include it.
#pragma once

#include "run_checks.hpp"  // flag_hint_for

#include <CLI/CLI.hpp>  // CLI::App, CLI::ParseError

#include <exception>   // std::exception
#include <functional>  // std::function
#include <iostream>    // std::cout, std::cerr
#include <optional>  // std::optional
#include <string>    // std::string

namespace strata::examples {

// The exit code of a command line that cannot run (an unknown command or flag, a bad value): the
// shells' and getopt's 2. A run that fails is 1; a run stopped by a signal 128 + the signal.
inline constexpr int usage_error = 2;

// Parses argv into `app`. Empty: go on with the command; otherwise the exit code to return now
// (0 after --help or --version, usage_error after a usage error, which is printed first).
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
    const std::string program = app.get_name();
    std::string commands;
    bool known = false;
    const std::string first = argc > 1 ? argv[1] : "";
    const CLI::App& defined = app;
    for (const auto* sub : defined.get_subcommands(std::function<bool(const CLI::App*)>())) {
        commands += (commands.empty() ? "" : ", ") + sub->get_name();
        known = known || sub->get_name() == first;
    }
    if (argc <= 1) {  // no command: the usage, as --help prints it
        std::cout << app.help();
        return usage_error;
    }
    if (!first.starts_with("-") && !known) {
        std::cerr << program << ": error: unknown command '" << first << "'" << std::endl;
        std::cerr << program << ": the commands are " << commands << " (" << program << " --help)" << std::endl;
        return usage_error;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::string command;
        for (const auto* sub : app.get_subcommands()) command = " " + sub->get_name();
        std::cerr << program << ": error: " << e.what() << std::endl;
        std::cerr << program << ": see '" << program << command << " --help'" << std::endl;
        return usage_error;
    }
    return std::nullopt;
}

// A program's app: exactly one command, and --version printing "NAME VERSION".
inline void set_up_program(CLI::App& app, const std::string& version) {
    app.require_subcommand(1);
    app.set_version_flag("--version", app.get_name() + " " + version);
}

// Runs the parsed command and returns its exit code; a failure is one line "NAME: error: WHAT",
// then "NAME: the flags for that: ..." where flags set what failed (flag_hint_for), and exit 1.
template <class Command>
int run_command(const CLI::App& app, Command&& command) {
    try {
        return command();
    } catch (const std::exception& e) {
        const std::string program = app.get_name();
        std::cerr << program << ": error: " << e.what() << std::endl;
        if (const auto hint = flag_hint_for(e); !hint.empty()) std::cerr << program << ": " << hint << std::endl;
        return 1;
    }
}

}  // namespace strata::examples
