// The choices of the example programs' flags, from the library's names: each enum's list
// (placements, activation_policies, lr_kinds, ...) as its name_of or to_string writes it, so that
// a choice the library adds is a choice on the command line, and its help and errors name it.
// Example code, not library code.
#pragma once

#include <strata/optim/optimizers.hpp>  // optimizer_kind, name_of(optimizer_kind)

#include <cstddef>  // std::size_t
#include <string>   // std::string
#include <vector>   // std::vector

namespace strata::examples {

// The names of every value of a library enum's list, as its name_of (or to_string) writes them.
template <class E, std::size_t N>
std::vector<std::string> names_of(const E (&values)[N]) {
    std::vector<std::string> names;
    for (const E v : values) {
        if constexpr (requires { name_of(v); })
            names.emplace_back(name_of(v));
        else
            names.emplace_back(to_string(v));
    }
    return names;
}

// The optimizers --optimizer takes. (A registry of optimizer names replaces this list when the
// library has one: every optimizer it registers is then a choice.)
inline std::vector<std::string> optimizer_choices() {
    return names_of({optimizer_kind::adamw, optimizer_kind::sgd});
}

}  // namespace strata::examples
