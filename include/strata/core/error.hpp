// strata::error: the one exception type the library throws.
//
// Every error names what failed, the sizes or names involved, and a hint the user can act on.
// The library never calls exit(); callers decide what to do with an error.
//
// Hints speak the library's language, not a program's: a hint names the settings to change by
// their library names ("lower seq_len"), and lists those names in settings(), so that a program
// can show its own spelling of them (a CLI maps "seq_len" to its --seq-len flag).
#pragma once

#include <stdexcept>  // std::runtime_error
#include <string>     // std::string
#include <utility>    // std::move
#include <vector>     // std::vector

namespace strata {

class error : public std::runtime_error {
public:
    explicit error(const std::string& what, std::string hint = {}, std::vector<std::string> settings = {})
        : std::runtime_error(hint.empty() ? what : what + " (hint: " + hint + ")"),
          m_hint(std::move(hint)),
          m_settings(std::move(settings)) {}

    // The hint alone, without the message (empty when there is none).
    const std::string& hint() const noexcept { return m_hint; }
    // The library settings the hint is about ("seq_len", "lr", "storage_dir", ...), possibly none.
    const std::vector<std::string>& settings() const noexcept { return m_settings; }

private:
    std::string m_hint;
    std::vector<std::string> m_settings;
};

}  // namespace strata
