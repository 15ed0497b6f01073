// A tiny program outside the library: host -> device -> host through the CPU backend.
#include <strata/strata.hpp>

#include <cstdio>

int main() {
    strata::cpu_backend backend({.device_bytes = 1 << 20, .host_bytes = 1 << 20, .storage_bytes = 1 << 20});
    auto stream = backend.make_stream("copies");
    strata::tiered_tensor<float, strata::host_tier> a(backend, {4, 8}, "a");
    strata::tiered_tensor<float, strata::device_tier> d(backend, {4, 8}, "d");
    strata::tiered_tensor<float, strata::host_tier> b(backend, {4, 8}, "b");
    for (std::size_t i = 0; i < a.numel(); ++i) a[i] = static_cast<float>(i);
    d.copy_from(a, stream);
    b.copy_from(d, stream).wait();
    for (std::size_t i = 0; i < b.numel(); ++i)
        if (b[i] != a[i]) {
            std::printf("consumer: mismatch at %zu\n", i);
            return 1;
        }
    std::printf("consumer: strata works from an outside project\n");
    return 0;
}
