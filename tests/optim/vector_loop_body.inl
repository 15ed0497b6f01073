// vector_loop_test's step, compiled once per instruction set by strata/optim/detail/for_each_isa.inl
// (as the optimizers' loops are): adds 1 to every lane in range and records where each_line ran.

struct test_visit_counter {
    float* a;
    std::vector<std::size_t>* lines;

    template <class Which>
    STRATA_SIMD_TARGET __attribute__((always_inline)) void operator()(std::size_t i, Which which) const {
        lanes::store(a + i, which, lanes::add(lanes::load(a + i, which), lanes::broadcast(1.0f)));
    }
    STRATA_SIMD_TARGET __attribute__((always_inline)) void each_line(std::size_t i) const { lines->push_back(i); }
};

STRATA_SIMD_TARGET inline void test_count_visits(float* a, std::size_t n, std::vector<std::size_t>& lines) {
    for_each_vector(a, n, test_visit_counter{a, &lines});
}
