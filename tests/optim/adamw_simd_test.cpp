// Every AdamW path this CPU has (scalar, AVX2+FMA, AVX-512F) against the scalar reference
// adamw_update<float>, bit for bit: odd sizes, every misalignment of head and tail, several steps
// so m and v carry history, subnormal and huge values, both lerp formulas, with and without decay.
#include <strata/optim/adamw.hpp>       // adamw_update, adamw_hparams
#include <strata/optim/adamw_simd.hpp>  // adamw_update_fast, adamw_path, adamw_path_available, resolve

#include "adamw_data.hpp"  // offset_array, fill, first_bit_difference, hparam_sets, available_paths

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE, MESSAGE, CAPTURE

#include <algorithm>  // std::ranges::copy
#include <array>    // std::array
#include <cmath>    // std::nextafter
#include <cstddef>  // std::size_t
#include <memory>   // std::unique_ptr, std::make_unique
#include <random>   // std::mt19937_64
#include <string>   // std::string
#include <vector>   // std::vector

namespace adamw_simd_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using strata::adamw_path;
using strata_test::offset_array;

constexpr adamw_path forced_paths[] = {adamw_path::scalar, adamw_path::avx2_fma, adamw_path::avx512f};

struct adamw_state {
    offset_array p, m, v;
    adamw_state(std::size_t n, std::array<std::size_t, 3> offsets)
        : p(n, offsets[0]), m(n, offsets[1]), v(n, offsets[2]) {}
    void copy_from(const adamw_state& other) {
        std::ranges::copy(other.p.cspan(), p.span().begin());
        std::ranges::copy(other.m.cspan(), m.span().begin());
        std::ranges::copy(other.v.cspan(), v.span().begin());
    }
};

// Runs the reference and every available path side by side for `steps` steps from one random
// state, each step with fresh gradients and its own learning rate, and compares after each step.
void check_paths_against_reference(std::size_t n, std::array<std::size_t, 4> offsets, const strata::adamw_hparams& h,
                                   bool decay, unsigned seed, long steps = 4) {
    std::mt19937_64 rng(seed);
    adamw_state reference(n, {0, 0, 0});
    strata_test::fill(reference.p.span(), rng);
    strata_test::fill(reference.m.span(), rng);
    strata_test::fill(reference.v.span(), rng, /*non_negative=*/true);  // v is a running mean of squares

    const std::vector<adamw_path> paths = strata_test::available_paths();
    std::vector<std::unique_ptr<adamw_state>> states;
    for (std::size_t i = 0; i < paths.size(); ++i) {
        states.push_back(std::make_unique<adamw_state>(n, std::array{offsets[0], offsets[2], offsets[3]}));
        states.back()->copy_from(reference);
    }
    offset_array g(n, offsets[1]);
    for (long t = 1; t <= steps; ++t) {
        strata_test::fill(g.span(), rng);
        const double lr = 1e-3 * static_cast<double>(t) / 3;
        strata::adamw_update<float>(reference.p.span(), g.cspan(), reference.m.span(), reference.v.span(), h, lr, t,
                                    decay);
        for (std::size_t i = 0; i < paths.size(); ++i) {
            CAPTURE(strata::name_of(paths[i]));
            CAPTURE(t);
            adamw_state& s = *states[i];
            strata::adamw_update_fast(s.p.span(), g.cspan(), s.m.span(), s.v.span(), h, lr, t, decay, paths[i]);
            REQUIRE(strata_test::first_bit_difference(s.p.cspan(), reference.p.cspan()) == "");
            REQUIRE(strata_test::first_bit_difference(s.m.cspan(), reference.m.cspan()) == "");
            REQUIRE(strata_test::first_bit_difference(s.v.cspan(), reference.v.cspan()) == "");
        }
    }
}

}  // namespace

TEST_CASE("the bitwise comparison sees one ulp and the sign of zero") {
    std::vector<float> a{1.0f, 0.0f, 3.0f}, b = a;
    CHECK(strata_test::first_bit_difference(a, b) == "");
    b[2] = std::nextafter(3.0f, 4.0f);
    CHECK(strata_test::first_bit_difference(a, b).find("element 2") == 0);
    b[2] = 3.0f;
    b[1] = -0.0f;  // equal as numbers, different bits
    CHECK(strata_test::first_bit_difference(a, b).find("element 1") == 0);
}

TEST_CASE("every available path equals adamw_update<float> bit for bit on small odd sizes and misalignments") {
    // Offsets (in floats past a cache line) of p, g, m, v: aligned, all different, and heads long
    // enough to need a masked prologue on both vector widths.
    const std::array<std::array<std::size_t, 4>, 4> offset_sets{
        {{0, 0, 0, 0}, {1, 3, 5, 7}, {15, 0, 8, 2}, {9, 9, 9, 9}}};
    unsigned seed = 1;
    for (const std::size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 100}) {
        for (const auto& offsets : offset_sets) {
            for (const auto& h : strata_test::hparam_sets()) {
                for (const bool decay : {true, false}) {
                    CAPTURE(n);
                    CAPTURE(offsets[0]);
                    CAPTURE(offsets[1]);
                    CAPTURE(h.beta1);
                    CAPTURE(h.eps);
                    CAPTURE(h.weight_decay);
                    CAPTURE(decay);
                    check_paths_against_reference(n, offsets, h, decay, seed++);
                }
            }
        }
    }
}

TEST_CASE("every available path equals adamw_update<float> bit for bit on 100003 elements (odd-sized views)") {
    for (const auto& h : strata_test::hparam_sets()) {
        for (const bool decay : {true, false}) {
            CAPTURE(h.beta1);
            CAPTURE(h.eps);
            CAPTURE(h.weight_decay);
            CAPTURE(decay);
            check_paths_against_reference(100003, {3, 1, 14, 6}, h, decay, 1000 + (decay ? 1u : 0u), 3);
        }
    }
}

TEST_CASE("the state really moves: several steps give nonzero moments and changed weights") {
    // Guards the comparison above against comparing two untouched arrays.
    std::vector<float> p(17, 0.5f), g(17, 0.25f), m(17, 0.0f), v(17, 0.0f);
    for (long t = 1; t <= 3; ++t)
        strata::adamw_update_fast(p, g, m, v, strata::adamw_hparams{}, 1e-2, t, true);
    for (std::size_t i = 0; i < p.size(); ++i) {
        CHECK(p[i] < 0.5f);
        CHECK(m[i] > 0.0f);
        CHECK(v[i] > 0.0f);
    }
}

TEST_CASE("automatic resolves to the widest available path; a forced path the CPU lacks is refused") {
    const adamw_path best = strata::resolve(adamw_path::automatic);
    CHECK(best == strata::adamw_best_path());
    CHECK(strata::adamw_path_available(best));
    CHECK(best != adamw_path::automatic);
    if (strata::adamw_path_available(adamw_path::avx512f)) CHECK(best == adamw_path::avx512f);
    else if (strata::adamw_path_available(adamw_path::avx2_fma)) CHECK(best == adamw_path::avx2_fma);
    else CHECK(best == adamw_path::scalar);

    bool tested_refusal = false;
    for (const adamw_path path : forced_paths) {
        if (strata::adamw_path_available(path)) {
            CHECK(strata::resolve(path) == path);
            continue;
        }
        std::vector<float> x(4, 1.0f);
        CHECK_THROWS_WITH_AS(strata::adamw_update_fast(x, x, x, x, strata::adamw_hparams{}, 1e-3, 1, true, path),
                             doctest::Contains("path is not available on this CPU"), strata::error);
        tested_refusal = true;
    }
    if (!tested_refusal) MESSAGE("skipped: this CPU has every path, so none can be refused");
}

TEST_CASE("adamw_update_fast refuses what adamw_update refuses") {
    std::vector<float> p(5), g(5), m(5), v(4);
    const strata::adamw_hparams h;
    CHECK_THROWS_WITH_AS(strata::adamw_update_fast(p, g, m, v, h, 1e-3, 1, true),
                         doctest::Contains("adamw_update_fast: span sizes differ: params 5, grads 5, m 5, v 4"),
                         strata::error);
    std::vector<float> g4(4);
    CHECK_THROWS_WITH_AS(strata::adamw_update_fast(p, g4, m, p, h, 1e-3, 1, true),
                         doctest::Contains("params 5, grads 4"), strata::error);
    CHECK_THROWS_WITH_AS(strata::adamw_update_fast(p, g, m, p, h, 1e-3, 0, true),
                         doctest::Contains("step must be >= 1"), strata::error);
    CHECK_THROWS_WITH_AS(strata::adamw_update_fast(p, g, m, p, h, -1.0, 1, true), doctest::Contains("lr must be"),
                         strata::error);
    strata::adamw_hparams bad;
    bad.beta1 = 1.0;
    CHECK_THROWS_WITH_AS(strata::adamw_update_fast(p, g, m, p, bad, 1e-3, 1, true),
                         doctest::Contains("beta1 must be in [0, 1)"), strata::error);
}

}  // namespace adamw_simd_test
