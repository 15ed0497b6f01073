// The element-wise optimizers' walk over an array, for one instruction set's `lanes` (included per
// instruction set by for_each_isa.inl; see optim/simd_lanes.hpp).

// Calls step(i, which) for the vectors of [0, n): a masked head up to p's next lanes::align-byte
// boundary (so that full vectors load and store p on aligned addresses), full vectors, a masked
// tail; `which` is full_vector{} or a lanes::mask of the lanes in range. Heads and tails are the
// same vector code as the rest, not a second scalar loop. step.each_line(i) runs before the full
// vector at i once per 64-byte line of p (for software prefetch). Step is a struct whose members
// carry STRATA_SIMD_TARGET and always_inline, not a lambda: nvcc's host pass drops a lambda's
// attributes, and GCC does not inline a function of another target without them (an unused
// prefetch then is dropped, silently).
template <class Step>
STRATA_SIMD_TARGET __attribute__((always_inline)) inline void for_each_vector(const float* p, std::size_t n,
                                                                              const Step& step) {
    constexpr std::size_t line_floats = 64 / sizeof(float);
    std::size_t head = (lanes::align - reinterpret_cast<std::uintptr_t>(p) % lanes::align) % lanes::align / sizeof(float);
    if (head > n) head = n;
    if (head > 0) step(0, lanes::first(head));
    std::size_t i = head;
    for (; i + lanes::width <= n; i += lanes::width) {
        if (lanes::width == line_floats || (i - head) % line_floats == 0) step.each_line(i);  // folded when a vector is a line
        step(i, full_vector{});
    }
    if (i < n) step(i, lanes::first(n - i));
}
