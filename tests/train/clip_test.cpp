// Global-norm clipping on vectors whose norms are known, and the refusal of non-finite norms.
#include <strata/train/clip.hpp>  // global_grad_norm, clip_coefficient, clip_grad_norm

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include <array>   // std::array
#include <cmath>   // std::sqrt, std::nan
#include <limits>  // std::numeric_limits
#include <span>    // std::span
#include <string>  // std::string
#include <vector>  // std::vector

namespace clip_test {  // this file's names: an area's files compile as one unit (unity build)

TEST_CASE("the global norm spans every block: 3-4-12 makes 13") {
    const std::vector<std::vector<float>> grads{{3}, {4}, {12}};
    CHECK(strata::global_grad_norm(grads) == 13.0);
    const std::vector<double> a{3, 4}, b{};
    const std::array<std::span<const double>, 2> spans{std::span(a), std::span(b)};
    CHECK(strata::global_grad_norm(spans) == 5.0);
    CHECK(strata::global_grad_norm(std::vector<std::vector<float>>{}) == 0.0);
}

TEST_CASE("the norm accumulates in double: float squares that would overflow stay finite") {
    const std::vector<std::vector<float>> grads{{1e20f, -1e20f}};
    const double norm = strata::global_grad_norm(grads);
    CHECK(norm == doctest::Approx(std::sqrt(2.0) * 1e20).epsilon(1e-6));
}

TEST_CASE("layer-by-layer sums of squares reproduce the global norm exactly") {
    // What the streamed optimizer relies on: add each layer's sum in layer order, then sqrt.
    std::vector<std::vector<float>> grads(5);
    float x = 0.37f;
    for (std::size_t layer = 0; layer < grads.size(); ++layer)
        for (int i = 0; i < 1000 + 17 * static_cast<int>(layer); ++i) {
            x = x * 1.37f - static_cast<float>(static_cast<int>(x * 1.37f)) - 0.5f;  // deterministic, signed
            grads[layer].push_back(x);
        }
    double sum = 0;
    for (const auto& g : grads) sum += strata::sum_of_squares(std::span(g));
    CHECK(std::sqrt(sum) == strata::global_grad_norm(grads));
    CHECK(sum > 0);
}

TEST_CASE("the clip coefficient is torch's min(1, max_norm / (norm + 1e-6))") {
    CHECK(strata::clip_coefficient(13.0, 1.0) == 1.0 / (13.0 + 1e-6));
    CHECK(strata::clip_coefficient(0.5, 1.0) == 1.0);
    CHECK(strata::clip_coefficient(0.0, 1.0) == 1.0);
    CHECK(strata::clip_coefficient(1.0, 1.0) < 1.0);  // the 1e-6 makes a norm at the limit scale a hair
    CHECK(strata::clip_coefficient(1.0, 1.0) == doctest::Approx(1.0 - 1e-6));
    CHECK_THROWS_WITH_AS(strata::clip_coefficient(2.0, 0.0), doctest::Contains("max_norm must be"), strata::error);
}

TEST_CASE("clip_grad_norm scales every block to the limit and returns the norm before clipping") {
    std::vector<std::vector<float>> grads{{3, 0}, {4}, {12}};
    const double before = strata::clip_grad_norm(grads, 1.0, 7);
    CHECK(before == 13.0);
    CHECK(grads[0][0] == doctest::Approx(3.0 / 13));
    CHECK(grads[1][0] == doctest::Approx(4.0 / 13));
    CHECK(grads[2][0] == doctest::Approx(12.0 / 13));
    CHECK(grads[0][1] == 0.0f);
    CHECK(strata::global_grad_norm(grads) == doctest::Approx(1.0).epsilon(1e-6));

    std::vector<double> small{0.1, 0.2};
    std::array<std::span<double>, 1> spans{std::span(small)};
    CHECK(strata::clip_grad_norm(spans, 1.0, 8) == doctest::Approx(std::sqrt(0.05)));
    CHECK(small[0] == 0.1);  // within the limit: untouched
    CHECK(small[1] == 0.2);
}

TEST_CASE("a NaN or infinite norm stops training with the step in the message") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    for (double bad : {nan, inf}) {
        try {
            strata::clip_coefficient(bad, 1.0, 42);
            FAIL("expected strata::error");
        } catch (const strata::error& e) {
            const std::string what = e.what();
            CHECK(what.find("non-finite gradient norm") != std::string::npos);
            CHECK(what.find("at step 42") != std::string::npos);
            CHECK(what.find("the loss diverged") != std::string::npos);
            CHECK(e.hint().find("learning rate") != std::string::npos);
            CHECK(e.hint().find("--") == std::string::npos);  // a library hint names no program's flags
        }
    }
    std::vector<std::vector<float>> grads{{1, std::numeric_limits<float>::quiet_NaN()}, {2}};
    CHECK_THROWS_WITH_AS(strata::clip_grad_norm(grads, 1.0, 3), doctest::Contains("at step 3"), strata::error);
    CHECK(grads[0][0] == 1.0f);  // refused before scaling anything
    CHECK(grads[1][0] == 2.0f);
    CHECK_NOTHROW(strata::require_finite_grad_norm(1e300, 0));
    CHECK_THROWS_WITH_AS(strata::clip_coefficient(nan, 1.0), "non-finite gradient norm (nan): the loss diverged "
                         "(hint: lower the learning rate, lengthen the warmup, or clip the gradients' norm; resume from the "
                         "last checkpoint)",
                         strata::error);
}

}  // namespace clip_test
