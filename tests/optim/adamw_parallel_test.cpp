// adamw_update_parallel and offloaded_adamw: bitwise equal to adamw_update<float> for 1, 2 and 3
// threads on every available path, also when the caller runs with flush-to-zero; the clip folded in
// as a gradient scale; refusals.
#include <strata/kernels/cpu/elementwise.hpp>  // scale_inplace (the separate clip pass the folded scale replaces)
#include <strata/optim/adamw.hpp>              // adamw_update, adamw_hparams
#include <strata/optim/adamw_simd.hpp>         // adamw_update_parallel, adamw_path, adamw_path_available
#include <strata/optim/host_thread_pool.hpp>   // host_thread_pool
#include <strata/optim/offloaded_adamw.hpp>    // offloaded_adamw

#include "adamw_data.hpp"  // fill, first_bit_difference, hparam_sets, available_paths

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE, MESSAGE, CAPTURE, CHECK_THROWS_WITH_AS

#include <algorithm>  // std::ranges::copy
#include <cstddef>    // std::size_t
#include <limits>     // std::numeric_limits
#include <memory>     // std::unique_ptr, std::make_unique
#include <random>     // std::mt19937_64
#include <vector>     // std::vector

#if defined(__x86_64__)
#include <immintrin.h>  // _mm_getcsr, _mm_setcsr
#endif

namespace adamw_parallel_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using strata::adamw_path;

// One block of AdamW state and its copy for the reference.
struct twin_state {
    std::vector<float> p, m, v, ref_p, ref_m, ref_v;
    twin_state(std::size_t n, std::mt19937_64& rng) : p(n), m(n), v(n) {
        strata_test::fill(p, rng);
        strata_test::fill(m, rng);
        strata_test::fill(v, rng, /*non_negative=*/true);
        ref_p = p;
        ref_m = m;
        ref_v = v;
    }
    void reference_step(std::span<const float> g, const strata::adamw_hparams& h, double lr, long t, bool decay) {
        strata::adamw_update<float>(ref_p, g, ref_m, ref_v, h, lr, t, decay);
    }
    void require_equal() const {
        REQUIRE(strata_test::first_bit_difference(p, ref_p) == "");
        REQUIRE(strata_test::first_bit_difference(m, ref_m) == "");
        REQUIRE(strata_test::first_bit_difference(v, ref_v) == "");
    }
};

#if defined(__x86_64__)
// Sets flush-to-zero and denormals-are-zero on this thread for the scope.
class scoped_ftz_daz {
public:
    scoped_ftz_daz() : m_saved(_mm_getcsr()) { _mm_setcsr(m_saved | 0x8040u); }
    scoped_ftz_daz(const scoped_ftz_daz&) = delete;
    scoped_ftz_daz& operator=(const scoped_ftz_daz&) = delete;
    ~scoped_ftz_daz() { _mm_setcsr(m_saved); }

private:
    unsigned m_saved;
};
#endif

}  // namespace

TEST_CASE("adamw_update_parallel is bitwise equal to adamw_update<float> for 1, 2 and 3 threads") {
    const std::vector<adamw_path> paths = strata_test::available_paths();
    for (const std::size_t threads : {1, 2, 3}) {
        strata::host_thread_pool pool(threads);
        // Sizes below one chunk (caller alone), just past a few chunks, and eight chunks and an odd tail.
        const std::size_t a_few_chunks = 3 * strata::adamw_parallel_min_chunk + 5;
        for (const std::size_t n : {std::size_t{0}, std::size_t{17}, a_few_chunks, 8 * strata::adamw_parallel_min_chunk + 3}) {
            for (const adamw_path path : paths) {
                for (const bool decay : {true, false}) {
                    CAPTURE(threads);
                    CAPTURE(n);
                    CAPTURE(strata::name_of(path));
                    CAPTURE(decay);
                    std::mt19937_64 rng(n + 7 * threads);
                    // A misaligned view of p, so chunk boundaries must follow p's cache lines.
                    twin_state s(n + 3, rng);
                    std::vector<float> g(n + 3);
                    const strata::adamw_hparams h;
                    for (long t = 1; t <= 3; ++t) {
                        strata_test::fill(g, rng);
                        const double lr = 2e-3 / static_cast<double>(t);
                        strata::adamw_update_parallel(pool, std::span(s.p).subspan(3),
                                                      std::span<const float>(g).subspan(3), std::span(s.m).subspan(3),
                                                      std::span(s.v).subspan(3), h, lr, t, decay, path);
                        strata::adamw_update<float>(std::span(s.ref_p).subspan(3), std::span<const float>(g).subspan(3),
                                                    std::span(s.ref_m).subspan(3), std::span(s.ref_v).subspan(3), h,
                                                    lr, t, decay);
                        s.require_equal();
                    }
                }
            }
        }
    }
}

#if defined(__x86_64__)
TEST_CASE("worker threads use the caller's flush-to-zero setting, so the thread count still changes nothing") {
    // The pool's workers start with the default environment (no FTZ/DAZ); the caller then turns
    // both on. Without carrying the caller's environment over, worker chunks would keep the
    // subnormals that the caller's chunks flush.
    strata::host_thread_pool pool(3);
    const std::size_t n = 400000;
    std::mt19937_64 rng(99);
    std::vector<float> p(n), g(n), m(n), v(n);
    for (std::size_t i = 0; i < n; ++i) {  // every value subnormal or tiny, so flushing shows everywhere
        p[i] = 1e-39f * static_cast<float>(i % 97 + 1);
        g[i] = (i % 2 ? -1e-40f : 3e-39f) * static_cast<float>(i % 13 + 1);
        m[i] = 2e-40f * static_cast<float>(i % 7);
        v[i] = 5e-39f * static_cast<float>(i % 5);
    }
    const std::vector<float> p0 = p, m0 = m, v0 = v;
    std::vector<float> ref_p = p, ref_m = m, ref_v = v, plain_p = p, plain_m = m, plain_v = v;
    const strata::adamw_hparams h;
    strata::adamw_update<float>(plain_p, g, plain_m, plain_v, h, 1e-3, 1, true);  // without FTZ, for contrast
    {
        const scoped_ftz_daz flush;
        strata::adamw_update<float>(ref_p, g, ref_m, ref_v, h, 1e-3, 1, true);
        for (const adamw_path path : strata_test::available_paths()) {
            CAPTURE(strata::name_of(path));
            p = p0;
            m = m0;
            v = v0;
            strata::adamw_update_parallel(pool, p, g, m, v, h, 1e-3, 1, true, path);
            REQUIRE(strata_test::first_bit_difference(p, ref_p) == "");
            REQUIRE(strata_test::first_bit_difference(m, ref_m) == "");
            REQUIRE(strata_test::first_bit_difference(v, ref_v) == "");
        }
    }
    // The data really depends on the mode: FTZ/DAZ gives other bits than the default environment.
    CHECK(strata_test::first_bit_difference(plain_m, ref_m) != "");
}
#endif

TEST_CASE("offloaded_adamw steps a model's blocks exactly as adamw_update<float> does") {
    std::mt19937_64 rng(5);
    // A toy model: big and small tensors, decayed matrices and undecayed biases and gains.
    const std::vector<std::size_t> sizes{768, 1, 2304 * 768 + 5, 3072, 65537};
    const std::vector<bool> decays{false, false, true, true, true};
    // GPT-2's hyperparameters and the other lerp formula (the SIMD tests walk every set).
    for (const auto& h : {strata_test::hparam_sets()[0], strata_test::hparam_sets()[2]}) {
        for (const std::size_t threads : {1, 3}) {
            CAPTURE(h.beta1);
            CAPTURE(h.weight_decay);
            CAPTURE(threads);
            strata::offloaded_adamw opt(h, threads);
            CHECK(opt.threads() == threads);
            CHECK(opt.path() == strata::adamw_best_path());
            CHECK(opt.hparams().beta2 == h.beta2);
            std::vector<std::unique_ptr<twin_state>> blocks;
            for (const std::size_t n : sizes) blocks.push_back(std::make_unique<twin_state>(n, rng));
            for (long t = 1; t <= 3; ++t) {
                const double lr = 6e-4 * static_cast<double>(t);
                for (std::size_t b = 0; b < blocks.size(); ++b) {  // as the trainer would: last layer first
                    const std::size_t i = blocks.size() - 1 - b;
                    std::vector<float> g(sizes[i]);
                    strata_test::fill(g, rng);
                    twin_state& s = *blocks[i];
                    opt.step_block(s.p, g, s.m, s.v, lr, t, decays[i]);
                    s.reference_step(g, h, lr, t, decays[i]);
                    CAPTURE(i);
                    CAPTURE(t);
                    s.require_equal();
                }
            }
        }
    }
}

TEST_CASE("every forced path gives offloaded_adamw the same bits") {
    std::mt19937_64 rng(11);
    const std::size_t n = 100003;
    std::vector<float> g(n);
    strata_test::fill(g, rng);
    twin_state s(n, rng);
    s.reference_step(g, strata::adamw_hparams{}, 1e-3, 1, true);
    for (const adamw_path path : strata_test::available_paths()) {
        CAPTURE(strata::name_of(path));
        strata::offloaded_adamw opt({}, 2, path);
        CHECK(opt.path() == path);
        std::vector<float> p(s.p), m(s.m), v(s.v);  // start state: s.p, s.m, s.v are untouched
        opt.step_block(p, g, m, v, 1e-3, 1, true);
        REQUIRE(strata_test::first_bit_difference(p, s.ref_p) == "");
        REQUIRE(strata_test::first_bit_difference(m, s.ref_m) == "");
        REQUIRE(strata_test::first_bit_difference(v, s.ref_v) == "");
    }
}

// The clip folded into AdamW: step_block(..., grad_scale) == scale_inplace(g, grad_scale) followed by
// a plain step, bit for bit, on every path and thread count, with and without decay, for both lerp
// formulas; g itself is left unscaled. A scale of 1 is no scale at all.
TEST_CASE("a gradient scale folded into AdamW equals scale_inplace then AdamW, bitwise") {
    std::mt19937_64 rng(23);
    const std::vector<std::size_t> sizes{1, 15, 100003};
    for (const auto& h : {strata_test::hparam_sets()[0], strata_test::hparam_sets()[2]})
        for (const adamw_path path : strata_test::available_paths())
            for (const std::size_t threads : {1, 3})
                for (const float scale : {0.0371f, 0.999999f, 1.0f})
                    for (const std::size_t n : sizes)
                        for (const bool decay : {false, true}) {
                            CAPTURE(h.beta1);
                            CAPTURE(strata::name_of(path));
                            CAPTURE(threads);
                            CAPTURE(scale);
                            CAPTURE(n);
                            CAPTURE(decay);
                            strata::offloaded_adamw opt(h, threads, path);
                            twin_state s(n, rng);
                            for (long t = 1; t <= 2; ++t) {
                                std::vector<float> g(n);
                                strata_test::fill(g, rng);
                                const std::vector<float> g_before = g;
                                opt.step_block(s.p, g, s.m, s.v, 1e-3, t, decay, scale);
                                REQUIRE(strata_test::first_bit_difference(g, g_before) == "");
                                strata::kernels::cpu::scale_inplace(g.data(), scale, n);
                                s.reference_step(g, h, 1e-3, t, decay);
                                s.require_equal();
                            }
                        }
    // the scalar reference takes the same scale
    twin_state s(1000, rng);
    std::vector<float> g(1000);
    strata_test::fill(g, rng);
    strata::adamw_update<float>(s.p, g, s.m, s.v, {}, 1e-3, 1, true, 0.25f);
    strata::kernels::cpu::scale_inplace(g.data(), 0.25f, g.size());
    s.reference_step(g, {}, 1e-3, 1, true);
    s.require_equal();
}

TEST_CASE("size mismatches, bad steps and bad hyperparameters are refused before any work") {
    strata::host_thread_pool pool(2);
    std::vector<float> p(100, 1.0f), g(100, 0.5f), m(100, 0.0f), v(99, 0.0f);
    const std::vector<float> p_before = p;
    CHECK_THROWS_WITH_AS(
        strata::adamw_update_parallel(pool, p, g, m, v, {}, 1e-3, 1, true),
        doctest::Contains("adamw_update_parallel: span sizes differ: params 100, grads 100, m 100, v 99"), strata::error);
    CHECK(p == p_before);

    strata::offloaded_adamw opt({}, 2);
    CHECK_THROWS_WITH_AS(opt.step_block(p, g, m, v, 1e-3, 1, true), doctest::Contains("span sizes differ"),
                         strata::error);
    v.resize(100);
    CHECK_THROWS_WITH_AS(opt.step_block(p, g, m, v, 1e-3, 0, true), doctest::Contains("step must be >= 1"),
                         strata::error);
    CHECK_THROWS_WITH_AS(opt.step_block(p, g, m, v, -1.0, 1, true), doctest::Contains("lr must be"), strata::error);
    CHECK_THROWS_WITH_AS(opt.step_block(p, g, m, v, 1e-3, 1, true, std::numeric_limits<float>::quiet_NaN()),
                         doctest::Contains("grad_scale must be"), strata::error);
    CHECK_THROWS_WITH_AS(opt.step_block(p, g, m, v, 1e-3, 1, true, -0.5f), doctest::Contains("grad_scale must be"),
                         strata::error);
    CHECK(p == p_before);

    strata::adamw_hparams bad;
    bad.eps = -1;
    CHECK_THROWS_WITH_AS(strata::offloaded_adamw(bad, 2), doctest::Contains("eps must be"), strata::error);
    CHECK_THROWS_WITH_AS(strata::offloaded_adamw({}, 0), doctest::Contains("threads must be >= 1"), strata::error);
}

}  // namespace adamw_parallel_test
