// Host code cannot read a device-tier tensor's elements.
#include <strata/strata.hpp>

float touch(strata::tiered_tensor<float, strata::device_tier>& t) {
    (void)t.device_data();  // allowed: a handle for kernels
#ifdef STRATA_MUST_NOT_COMPILE
    return t[0];
#else
    return 0.0f;
#endif
}
