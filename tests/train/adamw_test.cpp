// The reference AdamW against values worked out by hand and a trajectory recomputed in long double
// from the textbook formulas (a different order of operations than the code under test).
#include <strata/train/adamw.hpp>  // adamw_update, adamw_hparams

#include <doctest/doctest.h>  // TEST_CASE, TEST_CASE_TEMPLATE, CHECK

#include <cmath>   // std::pow, std::sqrt, std::fabs
#include <string>  // std::string
#include <vector>  // std::vector

namespace {

// One step of the textbook AdamW, in long double: the independent check.
struct textbook_adamw {
    std::vector<long double> p, m, v;

    void step(const std::vector<long double>& g, const strata::adamw_hparams& h, long double lr, long t,
              bool decay) {
        const long double b1 = h.beta1, b2 = h.beta2;
        for (std::size_t i = 0; i < p.size(); ++i) {
            if (decay) p[i] -= lr * h.weight_decay * p[i];
            m[i] = b1 * m[i] + (1 - b1) * g[i];
            v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
            const long double mhat = m[i] / (1 - std::pow(b1, static_cast<long double>(t)));
            const long double vhat = v[i] / (1 - std::pow(b2, static_cast<long double>(t)));
            p[i] -= lr * mhat / (std::sqrt(vhat) + h.eps);
        }
    }
};

template <class T, class U>
std::vector<T> cast(const std::vector<U>& x) {
    return std::vector<T>(x.begin(), x.end());
}

template <class T>
std::string error_of(std::vector<T>& p, std::vector<T>& g, std::vector<T>& m, std::vector<T>& v, long step) {
    try {
        strata::adamw_update<T>(p, g, m, v, strata::adamw_hparams{}, 1e-3, step, true);
    } catch (const strata::error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE_TEMPLATE("the first step moves each weight by about lr against its gradient's sign", T, float, double) {
    // At t = 1 bias correction makes mhat = g and vhat = g*g exactly, so the step is lr*g/(|g|+eps).
    std::vector<T> p{0, 0, 0}, g{2, -0.5, 1e-3}, m(3, 0), v(3, 0);
    strata::adamw_hparams h;
    h.weight_decay = 0;
    strata::adamw_update<T>(p, g, m, v, h, 0.1, 1, true);
    CHECK(p[0] == doctest::Approx(-0.1 * 2 / (2 + 1e-8)).epsilon(1e-6));
    CHECK(p[1] == doctest::Approx(0.1 * 0.5 / (0.5 + 1e-8)).epsilon(1e-6));
    CHECK(p[2] == doctest::Approx(-0.1 * 1e-3 / (1e-3 + 1e-8)).epsilon(1e-6));
    CHECK(m[0] == doctest::Approx(0.2));  // (1 - 0.9) * 2
    CHECK(v[0] == doctest::Approx(0.2));  // (1 - 0.95) * 4
    CHECK(m[1] == doctest::Approx(-0.05));
    CHECK(v[1] == doctest::Approx(0.0125));
}

TEST_CASE_TEMPLATE("a constant gradient moves the weight by lr every step", T, float, double) {
    // With g constant, mhat = g and vhat = g*g at every t, so each step is lr*g/(g+eps) ~ lr.
    std::vector<T> p{1}, g{3}, m{0}, v{0};
    strata::adamw_hparams h;
    h.weight_decay = 0;
    for (long t = 1; t <= 5; ++t) strata::adamw_update<T>(p, g, m, v, h, 0.01, t, true);
    CHECK(p[0] == doctest::Approx(1 - 5 * 0.01 * 3 / (3 + 1e-8)).epsilon(1e-6));
}

TEST_CASE_TEMPLATE("weight decay alone multiplies by (1 - lr*wd), only where decay is asked", T, float, double) {
    std::vector<T> p{1, -2}, g{0, 0}, m{0, 0}, v{0, 0};
    strata::adamw_hparams h;
    h.weight_decay = 0.1;
    strata::adamw_update<T>(p, g, m, v, h, 0.1, 1, true);
    CHECK(p[0] == static_cast<T>(1 * static_cast<T>(0.99)));  // zero gradient: the Adam term is 0/eps = 0
    CHECK(p[1] == static_cast<T>(-2 * static_cast<T>(0.99)));
    std::vector<T> q{1, -2};
    strata::adamw_update<T>(q, g, m, v, h, 0.1, 2, false);
    CHECK(q[0] == 1);
    CHECK(q[1] == -2);
}

TEST_CASE_TEMPLATE("a 5-step trajectory matches the textbook AdamW in long double", T, float, double) {
    const std::vector<long double> p0{0.5L, -1.25L, 0.03L, 2.0L, -0.7L, 0.0L, 1e-4L};
    const std::vector<std::vector<long double>> grads{
        {0.1L, -0.2L, 0.3L, 1.5L, -0.01L, 0.0L, 2e-7L},
        {-0.3L, -0.1L, 0.25L, 1.2L, 0.02L, 0.5L, -3e-7L},
        {0.05L, 0.4L, -0.6L, 0.9L, -0.03L, 0.0L, 1e-6L},
        {0.2L, -0.25L, 0.1L, -2.0L, 0.04L, -0.5L, 5e-7L},
        {-0.15L, 0.3L, 0.2L, 0.7L, -0.05L, 0.25L, -1e-6L},
    };
    const std::vector<long double> lrs{1e-3L, 2e-3L, 3e-3L, 2.5e-3L, 1e-3L};
    strata::adamw_hparams h;  // 0.9, 0.95, 1e-8, 0.1
    for (bool decay : {true, false}) {
        CAPTURE(decay);
        std::vector<T> p = cast<T>(p0), m(p0.size(), 0), v(p0.size(), 0);
        // Start the textbook from the same rounded weights, so only the update's arithmetic differs.
        textbook_adamw expected{cast<long double>(p), std::vector<long double>(p0.size()),
                                std::vector<long double>(p0.size())};
        for (long t = 1; t <= 5; ++t) {
            const std::vector<T> g = cast<T>(grads[t - 1]);
            // The lr the code sees is the double the schedule would give; the textbook uses it unrounded.
            strata::adamw_update<T>(p, g, m, v, h, static_cast<double>(lrs[t - 1]), t, decay);
            expected.step(cast<long double>(g), h, static_cast<double>(lrs[t - 1]), t, decay);
        }
        // double agrees to rounding; float carries ~1e-7 relative error per operation through 5 steps.
        const double tol = sizeof(T) == sizeof(double) ? 1e-13 : 2e-7;
        for (std::size_t i = 0; i < p.size(); ++i) {
            CAPTURE(i);
            CHECK(std::fabs(static_cast<long double>(p[i]) - expected.p[i]) <= tol * (1 + std::fabs(expected.p[i])));
            CHECK(std::fabs(static_cast<long double>(m[i]) - expected.m[i]) <= tol * (1 + std::fabs(expected.m[i])));
            CHECK(std::fabs(static_cast<long double>(v[i]) - expected.v[i]) <= tol * (1 + std::fabs(expected.v[i])));
        }
        // Each weight moved: the trajectory is not trivially the start.
        for (std::size_t i = 0; i + 1 < p.size(); ++i) CHECK(p[i] != static_cast<T>(p0[i]));
    }
}

TEST_CASE("mismatched spans, step 0 and bad hyperparameters are refused") {
    std::vector<float> p(4), g(4), m(4), v(3);
    CHECK(error_of(p, g, m, v, 1).find("params 4, grads 4, m 4, v 3") != std::string::npos);
    v.resize(4);
    CHECK(error_of(p, g, m, v, 0).find("step must be >= 1") != std::string::npos);
    CHECK(error_of(p, g, m, v, 1).empty());

    strata::adamw_hparams h;
    h.beta2 = 1.0;
    CHECK_THROWS_WITH_AS(strata::adamw_update<float>(p, g, m, v, h, 1e-3, 1, true),
                         doctest::Contains("beta2 must be in [0, 1)"), strata::error);
    CHECK_THROWS_WITH_AS(strata::adamw_update<float>(p, g, m, v, strata::adamw_hparams{}, -1.0, 1, true),
                         doctest::Contains("lr must be"), strata::error);
}
