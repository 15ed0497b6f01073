// Adafactor (optim/adafactor.hpp): the reference against an FP64 reading of torch's algorithm
// written here (another order of operations: the factored estimate as a full matrix, plain sums),
// a 10-step trajectory against torch.optim.Adafactor's (tests/optim/fixtures/adafactor_trajectory.json,
// made by scripts/make_adafactor_fixture.py), the state shapes and layout the trainers, the
// planner and checkpoints use, the clip folded in, the CPU backend's device path, and refusals.
#include <strata/backend/cpu_backend.hpp>   // cpu_backend
#include <strata/io/json_file.hpp>          // read_json_file
#include <strata/optim/adafactor.hpp>       // adafactor_update, adafactor_hparams, adafactor_optimizer
#include <strata/optim/optimizers.hpp>      // make_optimizer, any_optimizer, device_update
#include <strata/optim/host_thread_pool.hpp> // host_thread_pool
#include <strata/optim/state_layout.hpp>    // optimizer_state_layout

#include "adamw_data.hpp"  // first_bit_difference

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE, CAPTURE

#include <algorithm>   // std::max
#include <cmath>       // std::sqrt, std::pow, std::fabs
#include <cstdlib>     // std::strtod
#include <limits>      // std::numeric_limits
#include <filesystem>  // std::filesystem::path, exists
#include <random>      // std::mt19937_64, std::normal_distribution
#include <span>        // std::span
#include <string>      // std::string
#include <vector>      // std::vector

namespace adafactor_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

using strata::shape;
using ld = long double;

// torch's algorithm for one (rows, cols) matrix or (rows = 1) vector, in long double, written from
// its documentation: R_t, C_t the factored moments, V_t = R_t C_t / max(mean(R_t), eps1).
struct fp64_adafactor {
    std::size_t rows, cols;
    bool factored;
    std::vector<ld> p, row, col, var;

    fp64_adafactor(const std::vector<double>& p0, std::size_t r, std::size_t c, bool f)
        : rows(r), cols(c), factored(f), p(p0.begin(), p0.end()), row(r, 0), col(c, 0), var(p0.size(), 0) {}

    void step(const std::vector<double>& g, const strata::adafactor_hparams& h, ld lr, long t, ld eps1, bool decay) {
        const std::size_t n = p.size();
        const ld w = std::pow(static_cast<ld>(t), static_cast<ld>(h.beta2_decay));
        const ld rho = std::min(lr, 1 / std::sqrt(static_cast<ld>(t)));
        ld p2 = 0;
        for (ld x : p) p2 += x * x;
        const ld alpha = std::max(static_cast<ld>(h.eps2), std::sqrt(p2 / n)) * rho;
        if (decay && h.weight_decay != 0)
            for (ld& x : p) x *= 1 - lr * h.weight_decay;
        std::vector<ld> v(n);
        if (factored) {
            for (std::size_t r = 0; r < rows; ++r) {
                ld s = 0;
                for (std::size_t c = 0; c < cols; ++c) s += static_cast<ld>(g[r * cols + c]) * g[r * cols + c];
                row[r] = (1 - w) * row[r] + w * (s / cols);
            }
            for (std::size_t c = 0; c < cols; ++c) {
                ld s = 0;
                for (std::size_t r = 0; r < rows; ++r) s += static_cast<ld>(g[r * cols + c]) * g[r * cols + c];
                col[c] = (1 - w) * col[c] + w * (s / rows);
            }
            ld mean = 0;
            for (ld x : row) mean += x / rows;
            for (std::size_t i = 0; i < n; ++i) v[i] = row[i / cols] * col[i % cols] / std::max(mean, eps1);
        } else {
            for (std::size_t i = 0; i < n; ++i) v[i] = var[i] = (1 - w) * var[i] + w * static_cast<ld>(g[i]) * g[i];
        }
        std::vector<ld> u(n);
        ld u2 = 0;
        for (std::size_t i = 0; i < n; ++i) {
            u[i] = g[i] / std::sqrt(std::max(v[i], eps1 * eps1));
            u2 += u[i] * u[i];
        }
        const ld denom = std::max(static_cast<ld>(1), std::sqrt(u2 / n) / static_cast<ld>(h.d));
        for (std::size_t i = 0; i < n; ++i) p[i] -= alpha / denom * u[i];
    }
};

std::vector<double> normal(std::size_t n, double sd, unsigned seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> d(0, sd);
    std::vector<double> x(n);
    for (double& v : x) v = d(rng);
    return x;
}

template <class T>
std::vector<T> cast(const std::vector<double>& x) {
    return std::vector<T>(x.begin(), x.end());
}

// |a - b| <= rtol * |b| + atol, element by element; the first failure named.
template <class A, class B>
std::string far_apart(const std::vector<A>& a, const std::vector<B>& b, double rtol, double atol) {
    if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
        if (!(std::fabs(x - y) <= rtol * std::fabs(y) + atol))
            return "element " + std::to_string(i) + ": " + std::to_string(x) + " vs " + std::to_string(y);
    }
    return "";
}

// A 10-step run of adafactor_update<T> on a tensor of shape s; the state as the optimizer shapes it.
template <class T>
struct run_of {
    std::vector<T> p, row, col, var;
};
template <class T>
run_of<T> train(const shape& s, const std::vector<double>& p0, const std::vector<std::vector<double>>& grads,
                const std::vector<double>& lrs, const strata::adafactor_hparams& h, bool decay) {
    run_of<T> r{cast<T>(p0), std::vector<T>(strata::adafactor_optimizer::state_shape(0, s).numel()),
                std::vector<T>(strata::adafactor_optimizer::state_shape(1, s).numel()),
                std::vector<T>(strata::adafactor_optimizer::state_shape(2, s).numel())};
    for (std::size_t t = 0; t < grads.size(); ++t)
        strata::adafactor_update<T>(r.p, cast<T>(grads[t]), r.row, r.col, r.var, s, h, lrs[t], static_cast<long>(t + 1),
                                    decay);
    return r;
}

const std::vector<double> lrs{1e-2, 2e-2, 5e-2, 0.5, 0.3, 1e-2, 1e-3, 0.2, 0.1, 0.05};

}  // namespace

TEST_CASE("adafactor follows an FP64 reading of torch's algorithm: matrices, vectors, decay, clipping") {
    struct shaped {
        shape s;
        std::size_t rows, cols;
        bool factored;
    };
    for (const shaped& c : {shaped{shape{6, 9}, 6, 9, true}, shaped{shape{1, 5}, 1, 5, true}, shaped{shape{11}, 1, 11, false},
                            shaped{shape{9000}, 1, 9000, false}}) {
        for (const double wd : {0.0, 0.1}) {
            for (const double d : {1.0, 4.0}) {
                CAPTURE(c.s.to_string());
                CAPTURE(wd);
                CAPTURE(d);
                const strata::adafactor_hparams h{.d = d, .weight_decay = wd};
                const std::size_t n = c.s.numel();
                const std::vector<double> p0 = normal(n, 0.5, 1);
                std::vector<std::vector<double>> grads;
                for (unsigned t = 0; t < lrs.size(); ++t) grads.push_back(normal(n, 0.3 / (t + 1), 100 + t));
                fp64_adafactor ref64(p0, c.rows, c.cols, c.factored), ref32 = ref64;
                for (std::size_t t = 0; t < lrs.size(); ++t) {
                    ref64.step(grads[t], h, lrs[t], static_cast<long>(t + 1), std::numeric_limits<double>::epsilon(), true);
                    ref32.step(grads[t], h, lrs[t], static_cast<long>(t + 1), std::numeric_limits<float>::epsilon(), true);
                }
                const auto got64 = train<double>(c.s, p0, grads, lrs, h, true);
                const auto got32 = train<float>(c.s, p0, grads, lrs, h, true);
                CHECK(far_apart(got64.p, ref64.p, 1e-12, 1e-15) == "");
                CHECK(far_apart(got32.p, ref32.p, 2e-5, 1e-7) == "");
                if (c.factored) {
                    CHECK(far_apart(got64.row, ref64.row, 1e-12, 0) == "");
                    CHECK(far_apart(got64.col, ref64.col, 1e-12, 0) == "");
                    CHECK(far_apart(got32.col, ref32.col, 2e-6, 0) == "");
                } else {
                    CHECK(far_apart(got64.var, ref64.var, 1e-12, 0) == "");
                    CHECK(far_apart(got32.var, ref32.var, 2e-6, 0) == "");
                }
            }
        }
    }
}

TEST_CASE("the clip folded in is bitwise the gradients scaled first; decay off leaves the decay out") {
    const shape s{7, 13};
    const std::vector<float> p0 = cast<float>(normal(s.numel(), 0.5, 3)), g = cast<float>(normal(s.numel(), 0.2, 4));
    const strata::adafactor_hparams h{.weight_decay = 0.1};
    std::vector<float> a = p0, ar(7), ac(13), b = p0, br(7), bc(13), scaled = g;
    for (float& x : scaled) x = x * 0.375f;
    strata::adafactor_update<float>(a, g, ar, ac, {}, s, h, 0.02, 3, true, 0.375f);
    strata::adafactor_update<float>(b, scaled, br, bc, {}, s, h, 0.02, 3, true);
    CHECK(strata_test::first_bit_difference(a, b) == "");
    CHECK(strata_test::first_bit_difference(ar, br) == "");
    CHECK(strata_test::first_bit_difference(ac, bc) == "");
    std::vector<float> c = p0, cr(7), cc(13), e = p0, er(7), ec(13);
    strata::adafactor_update<float>(c, g, cr, cc, {}, s, h, 0.02, 3, false);
    strata::adafactor_update<float>(e, g, er, ec, {}, s, strata::adafactor_hparams{}, 0.02, 3, true);
    CHECK(strata_test::first_bit_difference(c, e) == "");
}

// The host update on a pool: every thread count gives the one-thread bits (each row's and column's
// sum on one thread, the rows' sums added in order by the caller), and the work really is split:
// the pool's workers run chunks of it. Shapes: a batch of matrices whose column ranges straddle
// the matrices, and a vector of many chunks with a short last one; the clip and the decay on.
TEST_CASE("adafactor's host update on several threads is bitwise its one-thread update") {
    const strata::adafactor_hparams h{.weight_decay = 0.1};
    for (const shape& s : {shape{3, 300, 251}, shape{40 * strata::adafactor_chunk + 123}}) {
        CAPTURE(s.to_string());
        const std::size_t nr = strata::adafactor_optimizer::state_shape(0, s).numel(),
                          nc = strata::adafactor_optimizer::state_shape(1, s).numel(),
                          nv = strata::adafactor_optimizer::state_shape(2, s).numel();
        const std::vector<float> p0 = cast<float>(normal(s.numel(), 0.5, 11));
        std::vector<float> one = p0, one_r(nr), one_c(nc), one_v(nv);
        std::vector<std::vector<float>> grads;
        for (unsigned t = 0; t < 3; ++t) grads.push_back(cast<float>(normal(s.numel(), 0.2, 20 + t)));
        for (long t = 1; t <= 3; ++t)
            strata::adafactor_update<float>(one, grads[t - 1], one_r, one_c, one_v, s, h, 0.05, t, true, 0.75f);
        for (const std::size_t threads : {2, 3}) {
            CAPTURE(threads);
            strata::host_thread_pool pool(threads);
            // A loaded machine may let the caller take every chunk before a worker wakes: retry
            // until a worker has run one (each try is checked bitwise).
            for (int attempt = 0; attempt < 50 && pool.chunks_on_workers() == 0; ++attempt) {
                std::vector<float> many = p0, many_r(nr), many_c(nc), many_v(nv);
                for (long t = 1; t <= 3; ++t)
                    strata::adafactor_update<float>(pool, std::span<float>(many), grads[t - 1], many_r, many_c, many_v,
                                                    s, h, 0.05, t, true, 0.75f);
                REQUIRE(strata_test::first_bit_difference(many, one) == "");
                REQUIRE(strata_test::first_bit_difference(many_r, one_r) == "");
                REQUIRE(strata_test::first_bit_difference(many_c, one_c) == "");
                REQUIRE(strata_test::first_bit_difference(many_v, one_v) == "");
            }
            CHECK(pool.chunks_on_workers() > 0);
        }
    }
}

TEST_CASE("adafactor's state: a matrix's row and column variances, a vector's variance; its layout in a group") {
    using O = strata::adafactor_optimizer;
    CHECK(O::state_shape(0, shape{768, 3072}) == shape{768, 1});
    CHECK(O::state_shape(1, shape{768, 3072}) == shape{1, 3072});
    CHECK(O::state_shape(2, shape{768, 3072}).numel() == 0);
    CHECK(O::state_shape(2, shape{768}) == shape{768});
    CHECK(O::state_shape(0, shape{768}).numel() == 0);
    CHECK(O::state_shape(0, shape{2, 3, 4}) == shape{2, 3, 1});
    const auto group = strata::param_layout::of<float>({{"w", shape{300, 500}, true}, {"b", shape{500}, false},
                                                        {"frozen", shape{40, 40}, true, false}});
    const auto l = strata::optimizer_state_layout::of<float>(O{}, group);
    REQUIRE(l.state_count() == 3);
    CHECK(l.at(0, 0).numel == 300);
    CHECK(l.at(1, 0).numel == 500);
    CHECK(l.at(2, 1).numel == 500);
    CHECK(l.at(2, 0).numel == 0);
    CHECK(l.at(0, 2).numel == 0);  // frozen: no state
    CHECK(l.bytes() == 3 * strata::page_size);  // each state block one page here
    // AdamW's layout is the gradients' own
    const auto a = strata::optimizer_state_layout::of<float>(strata::adamw_optimizer{}, group);
    CHECK(a.numel(0) == group.trainable_numel());
    CHECK(a.at(1, 1).offset == group.entries()[1].offset);
}

TEST_CASE("adafactor by name, with its hyperparameters checked") {
    const strata::any_optimizer o = strata::make_optimizer("adafactor", {{"eps2", 1e-2}, {"d", 2.0}, {"eps1", nullptr}});
    CHECK(o.name() == "adafactor");
    CHECK(o.hparams_json().at("eps2") == 1e-2);
    CHECK(o.hparams_json().at("eps1").is_null());
    CHECK(strata::state_label(o.display_name(), o.state_names()) == "Adafactor row_var, col_var, variance");
    CHECK_THROWS_WITH_AS(strata::make_optimizer("adafactor", {{"d", 0.5}}), doctest::Contains("d must be a finite number >= 1"),
                         strata::error);
    CHECK_THROWS_WITH_AS(strata::make_optimizer("adafactor", {{"beta2_decay", 0.2}}),
                         doctest::Contains("beta2_decay must be a finite number <= 0"), strata::error);
    CHECK_THROWS_WITH_AS(strata::make_optimizer("adafactor", {{"weight_decay", -1}}),
                         doctest::Contains("weight_decay must be"), strata::error);
    CHECK_THROWS_WITH_AS(strata::make_optimizer("adafactor", {{"momentum", 0.9}}),
                         doctest::Contains("adafactor has no hyperparameter 'momentum'"), strata::error);
    std::vector<float> p(6), g(6), row(2), col(3);
    CHECK_THROWS_WITH_AS(strata::adafactor_update<float>(p, g, row, col, {}, shape{3, 2}, {}, 1e-2, 1, true),
                         doctest::Contains("span sizes do not fit"), strata::error);
    CHECK_THROWS_WITH_AS(strata::adafactor_update<float>(p, g, row, col, {}, shape{2, 3}, {}, 1e-2, 0, true),
                         doctest::Contains("step must be >= 1"), strata::error);
}

TEST_CASE("the CPU backend's device update of adafactor is its host update, bit for bit") {
    strata::cpu_backend backend;
    auto s = backend.make_stream("test");
    const shape sh{5, 17};
    const std::vector<float> p0 = cast<float>(normal(sh.numel(), 0.5, 5)), g = cast<float>(normal(sh.numel(), 0.2, 6));
    const strata::any_optimizer o = strata::adafactor_optimizer({.weight_decay = 0.05});
    std::vector<float> a = p0, ar(5), ac(17), av(0), b = p0, br(5), bc(17), bv(0);
    std::vector<float*> state{ar.data(), ac.data(), av.data()};
    strata::device_update<strata::cpu_backend>(s, o, a.data(), g.data(), a.size(), std::span<float* const>(state),
                                               {.lr = 0.03, .step = 2, .decay = true, .shape = sh});
    s.synchronize();
    strata::adafactor_update<float>(b, g, br, bc, bv, sh, {.weight_decay = 0.05}, 0.03, 2, true);
    CHECK(strata_test::first_bit_difference(a, b) == "");
    CHECK(strata_test::first_bit_difference(ar, br) == "");
    CHECK(strata_test::first_bit_difference(ac, bc) == "");
}

// torch's trajectory (scripts/make_adafactor_fixture.py): strata sums in double in its own order,
// torch in float in its own, so the comparison is to a tolerance. The fixture is part of the
// repository: a missing one fails this test (run the script to make it).
TEST_CASE("a 10-step float trajectory matches torch.optim.Adafactor's (fixture from torch)") {
    const std::filesystem::path file =
        std::filesystem::path(STRATA_SOURCE_DIR) / "tests/optim/fixtures/adafactor_trajectory.json";
    INFO("fixture: ", file.string());
    REQUIRE_MESSAGE(std::filesystem::exists(file),
                    "the torch fixture is missing: run python3 scripts/make_adafactor_fixture.py "
                    "tests/optim/fixtures/adafactor_trajectory.json (needs PyTorch >= 2.5)");
    const nlohmann::json f = strata::read_json_file(file);
    const auto hexes = [](const nlohmann::json& a) {
        std::vector<double> out;
        for (const auto& x : a) out.push_back(std::strtod(x.get<std::string>().c_str(), nullptr));
        return out;
    };
    const auto& hp = f.at("hparams");
    std::vector<double> lr;
    for (const auto& x : f.at("lrs")) lr.push_back(x.get<double>());
    REQUIRE(f.at("cases").size() == 4);
    for (const auto& c : f.at("cases")) {
        CAPTURE(c.at("name").get<std::string>());
        std::vector<std::size_t> extents;
        for (const auto& e : c.at("shape")) extents.push_back(e.get<std::size_t>());
        const shape s(extents);
        strata::adafactor_hparams h{.beta2_decay = hp.at("beta2_decay").get<double>(),
                                    .eps2 = hp.at("eps2").get<double>(),
                                    .d = hp.at("d").get<double>(),
                                    .weight_decay = c.at("weight_decay").get<double>()};
        if (!hp.at("eps1").is_null()) h.eps1 = hp.at("eps1").get<double>();
        std::vector<std::vector<double>> grads;
        for (const auto& g : c.at("grads")) grads.push_back(hexes(g));
        const auto got = train<float>(s, hexes(c.at("p0")), grads, lr, h, true);
        const auto& e = c.at("expected");
        CHECK(far_apart(got.p, hexes(e.at("param")), 2e-5, 1e-7) == "");
        if (e.contains("row_var")) CHECK(far_apart(got.row, hexes(e.at("row_var")), 1e-5, 1e-20) == "");
        if (e.contains("col_var")) CHECK(far_apart(got.col, hexes(e.at("col_var")), 1e-5, 1e-20) == "");
        if (e.contains("variance")) CHECK(far_apart(got.var, hexes(e.at("variance")), 1e-5, 1e-20) == "");
    }
}

}  // namespace adafactor_test
