// A device_ptr is a handle for kernels: host code cannot dereference it.
#include <strata/strata.hpp>

float touch(strata::tiered_tensor<float, strata::device_tier>& t) {
    strata::device_ptr<float> p = t.device_data();
#ifdef STRATA_MUST_NOT_COMPILE
    return *p;
#else
    return p ? 1.0f : 0.0f;
#endif
}
