// Host code cannot write through a device-tier view.
#include <strata/strata.hpp>

void touch(strata::tensor_view<float, strata::device_tier> v) {
#ifdef STRATA_MUST_NOT_COMPILE
    v[0] = 1.0f;
#else
    (void)v.slice(0, 0);
#endif
}
