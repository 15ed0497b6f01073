// fmt, for strata's host-side text: plan tables, the progress line, checkpoint names, messages
// with numbers. fmt comes in header-only mode through strata::strata (fmt::fmt-header-only).
//
// Host code only: nvcc 13 cannot compile fmt 9 (its compile-time format-string checks fail in
// nvcc's front end, and its constexpr helpers in nvcc's host pass), so the headers that CUDA
// sources reach (backends, tiers, kernels, ops) format with snprintf, and this header refuses a
// CUDA source outright instead of failing deep inside fmt.
#pragma once

#if defined(__CUDACC__)
#error "strata: <strata/core/format.hpp> (fmt) is for host code: nvcc 13 cannot compile fmt 9; include the header that needs it from a .cpp file"
#endif

#include <fmt/format.h>  // fmt::format (re-exported: the one spelling strata uses)
