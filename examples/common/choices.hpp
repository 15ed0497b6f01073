// The choices of the example programs' flags, from the library's names: each enum's list
// (placements, activation_policies, lr_kinds, ...) as its name_of or to_string writes it, so that
// a choice the library adds is a choice on the command line, and its help and errors name it.
// Example code, not library code.
#pragma once

#include <strata/optim/optimizers.hpp>  // registered_optimizers

#include <cstddef>  // std::size_t
#include <string>   // std::string
#include <string_view>  // std::string_view
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

// The optimizers --optimizer takes: every one the library registers (optim/optimizers.hpp).
inline std::vector<std::string> optimizer_choices() {
    std::vector<std::string> names;
    for (std::string_view n : registered_optimizers::name_list()) names.emplace_back(n);
    return names;
}

}  // namespace strata::examples
