// Skips that say so: a test case that cannot run here (no GPU, no CUDA build, data or a file-system
// feature missing) calls skip(reason) and returns. The shared main (tests/doctest_main.cpp) lists
// the skipped cases with their reasons and exits with skip_exit_code when every case it ran was
// skipped, which CTest (SKIP_RETURN_CODE, one CTest test per case) reports as "Skipped", not
// "Passed". A case that calls skip() and also fails an assertion still fails.
#pragma once

#include <string>  // std::string

namespace strata::test {

// The exit code CTest's SKIP_RETURN_CODE expects (77, as Automake's convention).
inline constexpr int skip_exit_code = 77;

// Marks the running test case as skipped and prints the reason (defined in doctest_main.cpp).
void skip(const std::string& reason);

// True in a build under AddressSanitizer (GCC's macro, Clang's feature): there a case that compares
// measured times means nothing (-O0, every access checked), so such a case skips, saying so.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool address_sanitizer_build = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool address_sanitizer_build = true;
#else
inline constexpr bool address_sanitizer_build = false;
#endif
#else
inline constexpr bool address_sanitizer_build = false;
#endif

// True in a build under ThreadSanitizer: threads run 5-15x slower and are scheduled around its
// checks, so a case that measures how threads overlap skips there too, saying so.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool thread_sanitizer_build = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool thread_sanitizer_build = true;
#else
inline constexpr bool thread_sanitizer_build = false;
#endif
#else
inline constexpr bool thread_sanitizer_build = false;
#endif

}  // namespace strata::test
