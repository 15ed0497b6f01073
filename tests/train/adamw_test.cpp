// The reference AdamW against values worked out by hand and a trajectory recomputed in long double
// from the textbook formulas (a different order of operations than the code under test).
#include <strata/optim/adamw.hpp>  // adamw_update, adamw_hparams

#include <doctest/doctest.h>  // TEST_CASE, TEST_CASE_TEMPLATE, CHECK

#include <cmath>   // std::pow, std::sqrt, std::fabs
#include <string>  // std::string
#include <vector>  // std::vector

namespace adamw_test {  // this file's names: an area's files compile as one unit (unity build)

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

// Golden values from torch 2.11.0 on the CPU (AVX512 build), torch.optim.AdamW with foreach=False,
// fused=False, betas (0.9, 0.95), eps 1e-8, lr set per step, two param groups: weight_decay 0.1
// and 0.0. Seven elements, so torch runs its scalar kernels. Generated by:
//
//   torch.manual_seed(0)
//   p0 = (torch.randn(7) * 0.5).float(); p0[5] = 0.0
//   g = (torch.randn(5, 7) * 0.3).float(); g[:, 6] *= 1e-5
//   lrs = [1e-3, 2e-3, 3e-3, 2.5e-3, 1e-3]
//   a, b = (torch.nn.Parameter(p0.clone()) for _ in range(2))
//   opt = torch.optim.AdamW([{'params': [a], 'weight_decay': 0.1}, {'params': [b], 'weight_decay': 0.0}],
//                           betas=(0.9, 0.95), eps=1e-8, foreach=False, fused=False)
//   for t in range(5):
//       for grp in opt.param_groups: grp['lr'] = lrs[t]
//       a.grad = g[t].clone(); b.grad = g[t].clone(); opt.step()
//   print p0, g, and a, b with their exp_avg, exp_avg_sq, each value as float.hex
TEST_CASE("a 5-step float trajectory matches torch.optim.AdamW to the bit") {
    const std::vector<float> p0{0x1.8a7eb8p-1f, -0x1.2c78ap-3f, -0x1.16e292p+0f, 0x1.23096cp-2f,
                                -0x1.15a342p-1f, 0x0.0p+0f,     0x1.9d06f4p-3f};
    const std::vector<std::vector<float>> grads{
        {-0x1.9f8906p-2f, -0x1.047ebcp-1f, 0x1.5c267p-3f, 0x1.e78814p-3f, 0x1.6fed4ep-3f, -0x1.ddb9a8p-2f,
         -0x1.12e652p-20f},
        {0x1.1c9f2cp-1f, 0x1.ccea9cp-3f, -0x1.67bacep-3f, -0x1.aa23cep-5f, 0x1.c2ea58p-5f, 0x1.aad034p-2f,
         0x1.3f5f0cp-18f},
        {0x1.22b3fp-2f, -0x1.032d72p-2f, -0x1.78fc48p-3f, 0x1.3691bep-7f, -0x1.2eb364p-3f, 0x1.b5119ap-5f,
         -0x1.72fb34p-21f},
        {-0x1.e16348p-4f, 0x1.4dccep-3f, -0x1.e591d2p-4f, 0x1.f91992p-5f, -0x1.14aecp-3f, -0x1.60193cp-3f,
         0x1.574ffcp-17f},
        {-0x1.d6613ep-2f, -0x1.7b2054p-2f, 0x1.178284p-1f, -0x1.52dbf8p-3f, -0x1.9723e2p-2f, 0x1.cf63a8p-5f,
         -0x1.bcff54p-23f},
    };
    const double lrs[] = {1e-3, 2e-3, 3e-3, 2.5e-3, 1e-3};
    const std::vector<float> expected_m{-0x1.41673p-6f,  -0x1.ea224ep-5f, 0x1.c0485p-6f,  0x1.a2c49cp-10f,
                                        -0x1.89f662p-5f, -0x1.76c254p-8f, 0x1.2db0b4p-20f};
    const std::vector<float> expected_v{0x1.1d0ec6p-5f, 0x1.84a04p-6f,  0x1.41153ep-6f, 0x1.04a874p-8f,
                                        0x1.6f0abcp-7f, 0x1.26f99ep-6f, 0x1.a6e68ep-38f};
    const std::vector<float> expected_p_decay{0x1.899686p-1f,  -0x1.23b2cp-3f,   -0x1.1639fap+0f, 0x1.1e2a2ep-2f,
                                              -0x1.16724cp-1f, 0x1.376caep-10f, 0x1.95c4c6p-3f};
    const std::vector<float> expected_p_no_decay{0x1.89f672p-1f,  -0x1.23fad6p-3f,  -0x1.167dcap+0f, 0x1.1e7064p-2f,
                                                 -0x1.16b61p-1f, 0x1.37a446p-10f, 0x1.9628f4p-3f};
    strata::adamw_hparams h;
    h.beta1 = 0.9;
    h.beta2 = 0.95;
    h.eps = 1e-8;
    h.weight_decay = 0.1;
    for (bool decay : {true, false}) {
        CAPTURE(decay);
        std::vector<float> p = p0, m(7, 0.0f), v(7, 0.0f);
        for (long t = 1; t <= 5; ++t) strata::adamw_update<float>(p, grads[t - 1], m, v, h, lrs[t - 1], t, decay);
        const std::vector<float>& expected_p = decay ? expected_p_decay : expected_p_no_decay;
        for (std::size_t i = 0; i < 7; ++i) {
            CAPTURE(i);
            CHECK(p[i] == expected_p[i]);
            CHECK(m[i] == expected_m[i]);
            CHECK(v[i] == expected_v[i]);
        }
    }
}

TEST_CASE("adamw_constants are torch's Python scalars rounded to the tensor type") {
    strata::adamw_hparams h;  // 0.9, 0.95, 1e-8, 0.1
    const auto k = strata::adamw_constants_for<float>(h, 2e-3, 3, true);
    CHECK(k.apply_decay);
    CHECK(k.decay_factor == static_cast<float>(1 - 2e-3 * 0.1));
    CHECK(k.lerp_weight == static_cast<float>(1 - 0.9));
    CHECK(k.lerp_weight_small);
    CHECK(k.beta2 == 0.95f);
    CHECK(k.one_minus_beta2 == static_cast<float>(1 - 0.95));
    CHECK(k.bc2_sqrt == static_cast<float>(std::pow(1 - std::pow(0.95, 3.0), 0.5)));
    CHECK(k.eps == 1e-8f);
    CHECK(k.neg_step_size == static_cast<float>(-2e-3 / (1 - std::pow(0.9, 3.0))));
    // No decay for the block, or weight_decay 0: torch skips the multiply altogether.
    CHECK_FALSE(strata::adamw_constants_for<float>(h, 2e-3, 3, false).apply_decay);
    h.weight_decay = 0;
    CHECK_FALSE(strata::adamw_constants_for<float>(h, 2e-3, 3, true).apply_decay);
    // beta1 below 0.5 makes the lerp weight large: torch's lerp switches formula.
    h.beta1 = 0.3;
    CHECK_FALSE(strata::adamw_constants_for<double>(h, 2e-3, 3, true).lerp_weight_small);
    CHECK_THROWS_WITH_AS(strata::adamw_constants_for<float>(h, 2e-3, 0, true, "who_called"),
                         doctest::Contains("who_called: step must be >= 1"), strata::error);
}

}  // namespace adamw_test
