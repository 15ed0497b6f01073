// Host code cannot take a span (or a raw pointer) of a device-tier tensor.
#include <strata/strata.hpp>

void touch(strata::tiered_tensor<float, strata::device_tier>& t) {
#ifdef STRATA_MUST_NOT_COMPILE
    auto s = t.span();
    s[0] = 1.0f;
#else
    (void)t.view();
#endif
}
