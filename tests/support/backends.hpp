// The backends every suite is instantiated for, and a helper that skips (support/skip.hpp) without a GPU.
#pragma once

#include <strata/strata.hpp>  // cpu_backend, tier_options
#ifdef STRATA_TESTS_WITH_CUDA
#include <strata/cuda.hpp>  // cuda_backend
#endif

#include "support/skip.hpp"  // skip

#include <memory>       // std::unique_ptr
#include <string>       // std::string
#include <type_traits>  // std::is_same_v

#ifdef STRATA_TESTS_WITH_CUDA
#define STRATA_TEST_BACKENDS strata::cpu_backend, strata::cuda_backend
#else
#define STRATA_TEST_BACKENDS strata::cpu_backend
#endif

namespace strata::test {

template <class B>
bool backend_available() {
#ifdef STRATA_TESTS_WITH_CUDA
    if constexpr (std::is_same_v<B, cuda_backend>) return cuda_backend::available();
#endif
    return true;
}

// A backend for one test case, or nullptr when its hardware is missing (the case is then marked
// skipped: CTest reports it as such). Usage: auto backend = make_backend<B>(options); if (!backend) return;
template <class B>
std::unique_ptr<B> make_backend(const tier_options& options = {}) {
    if (!backend_available<B>()) {
        skip(std::string(B::name) + ": no GPU on this machine");
        return nullptr;
    }
    return std::make_unique<B>(options);
}

}  // namespace strata::test
