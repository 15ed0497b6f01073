// A storage-tier view has no span: there is no memory to point at.
#include <strata/strata.hpp>

void touch(strata::tensor_view<float, strata::storage_tier> v) {
#ifdef STRATA_MUST_NOT_COMPILE
    for (float& x : v.span()) x = 0.0f;
#else
    (void)v.byte_offset();
#endif
}
