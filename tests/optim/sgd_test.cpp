// SGD with momentum (optim/sgd.hpp, optim/sgd_simd.hpp) and the optimizer seam (optim/optimizer.hpp,
// optim/optimizers.hpp): the reference against the same update computed in double; every vector
// path and thread count bitwise equal to the reference, also with the clip folded in; the
// optimizers as the trainers see them (state names, hyperparameters, updates through the seam);
// refusals.
#include <strata/optim/host_thread_pool.hpp>      // host_thread_pool
#include <strata/optim/offloaded_optimizer.hpp>   // offloaded_optimizer
#include <strata/optim/optimizers.hpp>            // adamw_optimizer, sgd_optimizer, any_optimizer, make_optimizer
#include <strata/optim/sgd.hpp>                   // sgd_update, sgd_hparams
#include <strata/optim/sgd_simd.hpp>              // sgd_update_fast, sgd_update_parallel

#include "adamw_data.hpp"  // offset_array, fill, first_bit_difference, available_paths

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE, CAPTURE, CHECK_THROWS_WITH_AS

#include <algorithm>  // std::max, std::ranges::copy
#include <array>    // std::array
#include <cfloat>   // FLT_EPSILON
#include <cmath>    // std::fabs
#include <cstddef>  // std::size_t
#include <limits>   // std::numeric_limits
#include <random>   // std::mt19937_64, std::uniform_real_distribution
#include <span>     // std::span
#include <vector>   // std::vector

namespace sgd_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using strata::sgd_hparams;

// The hyperparameter sets every test walks through: momentum with and without coupled decay,
// Nesterov, plain SGD with decay, a small momentum.
std::vector<sgd_hparams> sgd_sets() {
    return {{0.9, 0.0, false}, {0.9, 1e-2, false}, {0.9, 0.1, true}, {0.0, 1e-2, false}, {0.25, 0.0, true}};
}

std::vector<float> uniform(std::size_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> d(lo, hi);
    std::vector<float> out(n);
    for (float& x : out) x = static_cast<float>(d(rng));
    return out;
}

}  // namespace

// torch.optim.SGD's step in double from the same float inputs: the float reference must agree to
// a few float roundings of the terms involved (each term rounds at most once per operation).
TEST_CASE("sgd_update<float> is the SGD step computed in double, to a few float roundings") {
    const std::size_t n = 4096;
    for (const sgd_hparams& h : sgd_sets()) {
        for (const bool decay : {true, false}) {
            for (const float scale : {1.0f, 0.375f}) {
                CAPTURE(h.momentum);
                CAPTURE(h.weight_decay);
                CAPTURE(h.nesterov);
                CAPTURE(decay);
                CAPTURE(scale);
                const double lr = 3e-2;
                std::vector<float> p = uniform(n, 1), b = uniform(n, 2, -0.5, 0.5);
                const std::vector<float> g = uniform(n, 3), p0 = p, b0 = b;
                strata::sgd_update<float>(p, g, b, h, lr, decay, scale);
                std::size_t bad_p = 0, bad_b = 0;
                for (std::size_t i = 0; i < n; ++i) {
                    const double wd = decay ? h.weight_decay : 0.0, mu = h.momentum;
                    const double grad = static_cast<double>(g[i]) * scale + wd * p0[i];
                    double step = grad, buf = b0[i];
                    if (mu != 0) {
                        buf = mu * b0[i] + grad;
                        step = h.nesterov ? grad + mu * buf : buf;
                    }
                    const double want_p = p0[i] - lr * step;
                    // bounds: each operation rounds once, relative FLT_EPSILON / 2 of its magnitude
                    const double grad_mag = std::fabs(g[i]) + wd * std::fabs(p0[i]);
                    const double buf_mag = mu * std::fabs(b0[i]) + grad_mag;
                    const double step_mag = mu == 0 ? grad_mag : h.nesterov ? grad_mag + mu * buf_mag : buf_mag;
                    bad_p += std::fabs(p[i] - want_p) > 4 * FLT_EPSILON * (std::fabs(p0[i]) + lr * step_mag);
                    if (mu != 0)
                        bad_b += std::fabs(b[i] - buf) > 4 * FLT_EPSILON * buf_mag;
                    else
                        bad_b += b[i] != b0[i];  // plain SGD leaves the buffer alone
                }
                CHECK(bad_p == 0);
                CHECK(bad_b == 0);
            }
        }
    }
}

TEST_CASE("sgd_update over 20 steps in float follows the double trajectory") {
    const std::size_t n = 1000;
    const sgd_hparams h{0.9, 1e-2, true};
    std::vector<float> p = uniform(n, 7), b(n, 0.0f);
    std::vector<double> pd(p.begin(), p.end()), bd(n, 0.0);
    for (int step = 0; step < 20; ++step) {
        const std::vector<float> g = uniform(n, 100 + static_cast<std::uint64_t>(step));
        strata::sgd_update<float>(p, g, b, h, 1e-2, true);
        strata::sgd_update<double>(pd, std::vector<double>(g.begin(), g.end()), bd, h, 1e-2, true);
    }
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(p[i] - pd[i]));
    CHECK(worst < 1e-5);  // |p| ~ 1: twenty steps of float roundings stay far below this
}

TEST_CASE("every sgd path and thread count is bitwise equal to sgd_update<float>, the clip folded in too") {
    const std::vector<strata::adamw_path> paths = strata_test::available_paths();
    std::mt19937_64 rng(77);
    // n: a head and a tail on every path; the big one crosses adamw_parallel_min_chunk per thread
    for (const std::size_t n : {std::size_t{1}, std::size_t{13}, std::size_t{1003}, std::size_t{200'003}}) {
        for (const std::size_t offset : {0, 3}) {
            for (const sgd_hparams& h : sgd_sets()) {
                for (const float scale : {1.0f, 0.625f}) {
                    CAPTURE(n);
                    CAPTURE(offset);
                    CAPTURE(h.momentum);
                    CAPTURE(h.nesterov);
                    CAPTURE(scale);
                    strata_test::offset_array p0(n, offset), b0(n, 0), g(n, offset + 1);
                    strata_test::fill(p0.span(), rng);
                    strata_test::fill(b0.span(), rng);
                    strata_test::fill(g.span(), rng);
                    std::vector<float> ref_p(p0.cspan().begin(), p0.cspan().end());
                    std::vector<float> ref_b(b0.cspan().begin(), b0.cspan().end());
                    strata::sgd_update<float>(ref_p, g.cspan(), ref_b, h, 3e-3, true, scale);
                    auto check = [&](auto&& run) {
                        strata_test::offset_array p(n, offset), b(n, 0);
                        std::ranges::copy(p0.cspan(), p.span().begin());
                        std::ranges::copy(b0.cspan(), b.span().begin());
                        run(p.span(), b.span());
                        REQUIRE(strata_test::first_bit_difference(p.cspan(), ref_p) == "");
                        REQUIRE(strata_test::first_bit_difference(b.cspan(), ref_b) == "");
                    };
                    for (const auto path : paths) {
                        CAPTURE(strata::name_of(path));
                        check([&](std::span<float> p, std::span<float> b) {
                            strata::sgd_update_fast(p, g.cspan(), b, h, 3e-3, true, path, scale);
                        });
                        for (const std::size_t threads : {1, 2, 3}) {
                            strata::host_thread_pool pool(threads);
                            check([&](std::span<float> p, std::span<float> b) {
                                strata::sgd_update_parallel(pool, p, g.cspan(), b, h, 3e-3, true, path, scale);
                            });
                        }
                    }
                }
            }
        }
    }
}

// The seam: what the trainers call. sgd_optimizer's host update is sgd_update's; any_optimizer
// forwards to the optimizer it holds; the state names and hyperparameters are what checkpoints and
// the planner read.
TEST_CASE("the optimizers through the Optimizer seam: names, state tensors, hyperparameters, updates") {
    static_assert(strata::Optimizer<strata::sgd_optimizer> && strata::Optimizer<strata::any_optimizer>);
    const strata::sgd_optimizer sgd({.momentum = 0.8, .weight_decay = 0.05, .nesterov = true});
    const strata::any_optimizer any = sgd;
    CHECK(any.name() == "sgd");
    CHECK(any.display_name() == "SGD");
    REQUIRE(any.state_names().size() == 1);
    CHECK(any.state_names()[0] == "momentum");
    CHECK(any.hparams_json() == nlohmann::json{{"momentum", 0.8}, {"weight_decay", 0.05}, {"nesterov", true}});
    const strata::any_optimizer adamw = strata::adamw_optimizer();
    CHECK(adamw.name() == "adamw");
    CHECK(adamw.state_names().size() == 2);
    CHECK(strata::state_label(adamw.display_name(), adamw.state_names()) == "AdamW m, v");
    CHECK(strata::state_label(any.display_name(), any.state_names()) == "SGD momentum");
    CHECK(strata::make_optimizer("sgd").name() == "sgd");
    CHECK(strata::make_optimizer("sgd", {{"momentum", 0.8}}).hparams_json().at("momentum") == 0.8);
    CHECK(strata::make_optimizer("sgd").state_names().size() == 1);
    CHECK_THROWS_WITH_AS(strata::make_optimizer("lion"), doctest::Contains("use adamw, sgd or adafactor"),
                         strata::error);
    CHECK_THROWS_WITH_AS(strata::make_optimizer("sgd", {{"beta1", 0.9}}),
                         doctest::Contains("sgd has no hyperparameter 'beta1'"), strata::error);

    const std::size_t n = 70'001;
    std::vector<float> p = uniform(n, 11), b = uniform(n, 12);
    const std::vector<float> g = uniform(n, 13);
    std::vector<float> ref_p = p, ref_b = b;
    strata::sgd_update<float>(ref_p, g, ref_b, sgd.hparams(), 1e-2, false, 0.5f);
    strata::offloaded_optimizer<strata::any_optimizer> host(any, 3);
    const std::array<std::span<float>, 1> state{std::span<float>(b)};
    host.step_block(std::span<float>(p), std::span<const float>(g), strata::optimizer_state<float>(state),
                    {.lr = 1e-2, .step = 5, .decay = false}, 0.5f);
    CHECK(strata_test::first_bit_difference(p, ref_p) == "");
    CHECK(strata_test::first_bit_difference(b, ref_b) == "");

    // double: the reference itself
    std::vector<double> pd(4, 1.0), gd(4, 0.5), bd(4, 0.0);
    const std::array<std::span<double>, 1> dstate{std::span<double>(bd)};
    strata::host_thread_pool pool(1);
    any.update(pool, std::span<double>(pd), std::span<const double>(gd), strata::optimizer_state<double>(dstate),
               {.lr = 0.1, .step = 1, .decay = true}, 1.0);
    CHECK(bd[0] == 0.5 + 0.05 * 1.0);
    CHECK(pd[0] == doctest::Approx(1.0 - 0.1 * ((0.5 + 0.05) + 0.8 * (0.5 + 0.05))).epsilon(1e-15));

    // the wrong number of state tensors is refused, naming the optimizer
    const std::array<std::span<float>, 2> two{std::span<float>(b), std::span<float>(b)};
    CHECK_THROWS_WITH_AS(host.step_block(std::span<float>(p), std::span<const float>(g),
                                         strata::optimizer_state<float>(two), {.lr = 1e-2}, 1.0f),
                         doctest::Contains("sgd: 2 state tensor(s) given, it keeps 1"), strata::error);
}

TEST_CASE("sgd refuses bad hyperparameters, sizes, learning rates and gradient scales") {
    std::vector<float> p(10, 1.0f), g(10, 1.0f), b(9, 0.0f);
    CHECK_THROWS_WITH_AS(strata::sgd_update<float>(p, g, b, {}, 1e-3, true),
                         doctest::Contains("sgd: span sizes differ: params 10, grads 10, momentum 9"), strata::error);
    b.resize(10);
    CHECK_THROWS_WITH_AS(strata::sgd_update<float>(p, g, b, {}, -1.0, true), doctest::Contains("lr must be"),
                         strata::error);
    CHECK_THROWS_WITH_AS(strata::sgd_update<float>(p, g, b, {}, 1e-3, true, -1.0f),
                         doctest::Contains("grad_scale must be"), strata::error);
    strata::host_thread_pool pool(2);
    CHECK_THROWS_WITH_AS(strata::sgd_update_parallel(pool, p, g, b, {}, 1e-3, true, strata::adamw_path::automatic,
                                                     std::numeric_limits<float>::quiet_NaN()),
                         doctest::Contains("sgd_update_parallel: grad_scale must be"), strata::error);
    CHECK(p == std::vector<float>(10, 1.0f));
    CHECK_THROWS_WITH_AS(strata::sgd_optimizer({.momentum = -0.1}), doctest::Contains("momentum must be"),
                         strata::error);
    CHECK_THROWS_WITH_AS(strata::sgd_optimizer({.weight_decay = std::numeric_limits<double>::infinity()}),
                         doctest::Contains("weight_decay must be"), strata::error);
    CHECK_THROWS_WITH_AS(strata::sgd_optimizer({.momentum = 0, .nesterov = true}),
                         doctest::Contains("Nesterov momentum needs a momentum > 0"), strata::error);
}

}  // namespace sgd_test
