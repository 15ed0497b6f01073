// sample_token: frequencies against the softmax, temperature, top-k, ties, the draws it consumes,
// and bad logits and options. (Generation itself: generator_test.cpp.)
#include "sample_support.hpp"  // chi_square, softmax, error_of

#include <strata/core/rng.hpp>       // rng
#include <strata/model/sampler.hpp>  // sample_token

#include <doctest/doctest.h>  // TEST_CASE, SUBCASE, CHECK, MESSAGE

#include <cstddef>  // std::size_t
#include <limits>   // std::numeric_limits
#include <string>   // std::string
#include <vector>   // std::vector

namespace sampler_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
using sample_support::chi_square, sample_support::softmax, sample_support::error_of;

TEST_CASE("sample_token: frequencies follow the softmax, top-k and ties keep the lower ids") {
    const std::size_t draws = 20000;
    const std::vector<double> z{1.0, 0.2, -0.5, 2.0, 0.0};
    auto count = [&](const std::vector<double>& logits, double temperature, std::size_t top_k) {
        rng gen(11);
        std::vector<std::size_t> counts(logits.size());
        for (std::size_t i = 0; i < draws; ++i) ++counts[sample_token<double>(logits, temperature, top_k, gen)];
        return counts;
    };
    SUBCASE("all ids, temperature 0.7") {
        const double chi2 = chi_square(count(z, 0.7, 0), softmax(z, 0.7), draws);
        MESSAGE("chi-square, 4 degrees of freedom: " << chi2);
        CHECK(chi2 < 25);  // p ~ 5e-5 for a correct sampler
    }
    SUBCASE("temperature 2 is flatter than 0.7") {
        const auto hot = count(z, 2.0, 0);
        CHECK(chi_square(hot, softmax(z, 2.0), draws) < 25);
        CHECK(hot[3] < count(z, 0.7, 0)[3]);
    }
    SUBCASE("top_k = 3 renormalizes over ids 3, 0, 1") {
        const auto counts = count(z, 1.0, 3);
        CHECK(counts[2] == 0);
        CHECK(counts[4] == 0);
        const double chi2 = chi_square(counts, softmax({1.0, 0.2, -1e300, 2.0, -1e300}, 1.0), draws);
        CHECK(chi2 < 20);
    }
    SUBCASE("ties at the cut keep the lower ids") {
        const auto counts = count({0.0, 1.0, 1.0, 1.0, -1.0}, 1.0, 2);
        CHECK(counts[0] == 0);
        CHECK(counts[3] == 0);
        CHECK(counts[4] == 0);
        CHECK(chi_square(counts, {0, 0.5, 0.5, 0, 0}, draws) < 15);
    }
    SUBCASE("greedy and top_k = 1 take the lowest of equal maxima") {
        rng gen(0);
        const std::vector<float> tied{0.f, 3.f, 3.f, -2.f};
        CHECK(sample_token<float>(tied, 0.0, 0, gen) == 1);
        CHECK(sample_token<float>(tied, 1.0, 1, gen) == 1);
        // A tiny temperature leaves only the maximum, without NaN (equal maxima would share the mass).
        CHECK(sample_token<float>(std::vector<float>{0.f, 3.f, 2.5f, -2.f}, 1e-300, 0, gen) == 1);
    }
    SUBCASE("one uniform per draw, none for greedy") {
        rng gen(5), twin(5);
        sample_token<double>(z, 0.0, 0, gen);
        CHECK(gen == twin);
        sample_token<double>(z, 1.0, 2, gen);
        twin.uniform();
        CHECK(gen == twin);
    }
    SUBCASE("bad logits and options") {
        rng gen(0);
        const std::vector<double> bad{0.0, std::numeric_limits<double>::quiet_NaN()};
        CHECK(error_of([&] { sample_token<double>(bad, 1.0, 0, gen); }).find("logit of id 1") != std::string::npos);
        CHECK(error_of([&] { sample_token<double>(std::vector<double>{}, 1.0, 0, gen); }) != "(no error)");
        CHECK(error_of([&] { sample_token<double>(z, -0.1, 0, gen); }).find("temperature") != std::string::npos);
        CHECK(error_of([&] { sample_token<double>(z, 1.0, 6, gen); }).find("top_k 6") != std::string::npos);
    }
}

}  // namespace sampler_test
