// ops<Backend>: every op of the example GPT as an asynchronous launch on a backend stream.
//
// Layers and models are written once against this interface; a backend supplies a
// specialization. Pointers are device-tier addresses (device_ptr::get()); sizes follow the
// kernels' glossary: B batch, T time, C channels, V vocab, NH heads, OC output channels.
// Backward ops accumulate (+=) into their d-buffers, as the CPU reference kernels do.
#pragma once

namespace strata {

template <class Backend>
struct ops;  // specialized by each backend: nn/cpu_ops.hpp, nn/cuda_ops.hpp

}  // namespace strata
