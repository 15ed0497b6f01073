// What every harness checks besides "no crash": a property that fails aborts with a message (so
// libFuzzer saves the input), and a parser may only fail by throwing strata::error.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <cstdio>     // std::fprintf
#include <cstdlib>    // std::abort
#include <exception>  // std::exception
#include <typeinfo>   // typeid

namespace strata::fuzz {

[[noreturn]] inline void property_failed(const char* what, const char* file, int line) {
    std::fprintf(stderr, "\n==== property violated at %s:%d: %s\n", file, line, what);
    std::abort();
}

// Runs parse(); returns true when it succeeded, false when it threw strata::error. Any other
// exception is a bug: the library promises one exception type with a message and a hint.
template <class Parse>
bool parses(Parse&& parse) {
    try {
        parse();
        return true;
    } catch (const strata::error&) {
        return false;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "\n==== a parser threw %s, not strata::error: %s\n", typeid(e).name(), e.what());
        std::abort();
    }
}

}  // namespace strata::fuzz

// CHECK-like, but always on (the fuzz build may define NDEBUG).
#define FUZZ_CHECK(...)                                                                       \
    do {                                                                                      \
        if (!(__VA_ARGS__)) ::strata::fuzz::property_failed(#__VA_ARGS__, __FILE__, __LINE__);\
    } while (0)
