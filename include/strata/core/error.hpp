// strata::error: the one exception type the library throws.
//
// Every error names what failed, the sizes or names involved, and a hint the user can act on.
// The library never calls exit(); callers decide what to do with an error.
#pragma once

#include <stdexcept>  // std::runtime_error
#include <string>     // std::string
#include <utility>    // std::move

namespace strata {

class error : public std::runtime_error {
public:
    explicit error(const std::string& what, std::string hint = {})
        : std::runtime_error(hint.empty() ? what : what + " (hint: " + hint + ")"),
          m_hint(std::move(hint)) {}

    // The hint alone, without the message (empty when there is none).
    const std::string& hint() const noexcept { return m_hint; }

private:
    std::string m_hint;
};

}  // namespace strata
