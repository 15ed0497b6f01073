// Host code cannot read a storage-tier tensor's elements: it moves only by copies.
#include <strata/strata.hpp>

float touch(strata::tiered_tensor<float, strata::storage_tier>& t) {
#ifdef STRATA_MUST_NOT_COMPILE
    return t.data()[0];
#else
    return static_cast<float>(t.numel());
#endif
}
