// strata: memory-tiered tensors. The umbrella header only includes.
// The CUDA backend has its own entry header, <strata/cuda.hpp>, so CPU-only users never need CUDA.
#pragma once

#include <strata/backend/backend.hpp>       // Backend
#include <strata/backend/cpu_backend.hpp>   // cpu_backend
#include <strata/backend/pinning.hpp>       // pinning_stats, format_pinning
#include <strata/core/bytes.hpp>            // page_size, format_bytes
#include <strata/core/error.hpp>            // strata::error
#include <strata/core/log.hpp>              // log_note, set_log_sink
#include <strata/core/shape.hpp>            // shape
#include <strata/storage/storage_file.hpp>  // storage_file
#include <strata/tensor/copy.hpp>           // copy_async
#include <strata/tensor/tensor_view.hpp>    // tensor_view, device_ptr
#include <strata/tensor/tiered_tensor.hpp>  // tiered_tensor
#include <strata/tier/budget.hpp>           // tier_budget
#include <strata/tier/resources.hpp>        // tier_options
#include <strata/tier/tier.hpp>             // device_tier, host_tier, storage_tier, HostAccessible
