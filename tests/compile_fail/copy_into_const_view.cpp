// A copy cannot write into a view of const elements.
#include <strata/strata.hpp>

void touch(strata::cpu_backend& be, strata::tensor_view<const float, strata::host_tier> dst,
           strata::tensor_view<const float, strata::device_tier> src, strata::cpu_backend::stream& s) {
#ifdef STRATA_MUST_NOT_COMPILE
    strata::copy_async(be, dst, src, s);
#else
    (void)be; (void)dst; (void)src; (void)s;
#endif
}
