// strata::rng against the published xoshiro256** and splitmix64 vectors, its state round trip, and
// the statistics of its uniform and normal draws.
#include <strata/core/rng.hpp>  // rng, splitmix64

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include <nlohmann/json.hpp>  // nlohmann::json

#include <algorithm>  // std::shuffle, std::sort
#include <array>      // std::array
#include <cmath>      // std::sqrt, std::fabs
#include <cstdint>    // std::uint64_t
#include <random>     // std::uniform_random_bit_generator
#include <string>     // std::string
#include <vector>     // std::vector

namespace rng_test {  // this file's names: an area's files compile as one unit (unity build)

TEST_CASE("splitmix64 reproduces Vigna's reference outputs") {
    std::uint64_t state = 0;
    CHECK(strata::splitmix64(state) == 0xE220A8397B1DCDAFULL);
    CHECK(strata::splitmix64(state) == 0x6E789E6AA1B965F4ULL);
    CHECK(strata::splitmix64(state) == 0x06C45D188009454FULL);
    CHECK(strata::splitmix64(state) == 0xF88BB8A8724C81ECULL);
    state = 1234567;
    for (std::uint64_t expected : {6457827717110365317ULL, 3203168211198807973ULL, 9817491932198370423ULL,
                                   4593380528125082431ULL, 16408922859458223821ULL})
        CHECK(strata::splitmix64(state) == expected);
}

TEST_CASE("xoshiro256** from the state {1, 2, 3, 4} gives the reference implementation's outputs") {
    strata::rng r = strata::rng::from_state({1, 2, 3, 4});
    for (std::uint64_t expected :
         {11520ULL, 0ULL, 1509978240ULL, 1215971899390074240ULL, 1216172134540287360ULL, 607988272756665600ULL,
          16172922978634559625ULL, 8476171486693032832ULL, 10595114339597558777ULL, 2904607092377533576ULL})
        CHECK(r.next_u64() == expected);
}

TEST_CASE("a seed expands through splitmix64: seed 0's state and seed 42's first outputs") {
    CHECK(strata::rng(0).state() ==
          strata::rng::state_type{0xE220A8397B1DCDAFULL, 0x6E789E6AA1B965F4ULL, 0x06C45D188009454FULL,
                                  0xF88BB8A8724C81ECULL});
    strata::rng r(42);
    const std::uint64_t first[] = {1546998764402558742ULL, 6990951692964543102ULL, 12544586762248559009ULL,
                                   17057574109182124193ULL};
    for (std::uint64_t expected : first) CHECK(r.next_u64() == expected);

    // uniform() is exactly the top 53 bits of the same stream; uniform_float() the top 24.
    strata::rng u(42), f(42);
    CHECK(u.uniform() == static_cast<double>(first[0] >> 11) / 9007199254740992.0);
    CHECK(f.uniform_float() == static_cast<float>(first[0] >> 40) / 16777216.0f);
}

TEST_CASE("the same seed gives the same stream; another seed another one") {
    strata::rng a(7), b(7), c(8);
    int same_as_c = 0;
    for (int i = 0; i < 1000; ++i) {
        const std::uint64_t x = a.next_u64();
        CHECK(x == b.next_u64());
        same_as_c += x == c.next_u64();
    }
    CHECK(same_as_c == 0);
}

TEST_CASE("the all-zero state is refused") {
    CHECK_THROWS_WITH_AS(strata::rng::from_state({0, 0, 0, 0}), doctest::Contains("all-zero state"), strata::error);
}

TEST_CASE("uniform draws stay in [0, 1) with the right mean and variance") {
    strata::rng r(1);
    const int n = 100000;
    double sum = 0, sum_sq = 0;
    float fsum = 0;
    int out_of_range = 0;
    for (int i = 0; i < n; ++i) {
        const double x = r.uniform();
        const float y = r.uniform_float();
        out_of_range += !(x >= 0.0 && x < 1.0) + !(y >= 0.0f && y < 1.0f);
        sum += x;
        sum_sq += x * x;
        fsum += y / n;
    }
    CHECK(out_of_range == 0);
    const double mean = sum / n;
    CHECK(mean == doctest::Approx(0.5).epsilon(0.01));                        // sd of the mean ~0.0009
    CHECK(sum_sq / n - mean * mean == doctest::Approx(1.0 / 12).epsilon(0.02));
    CHECK(fsum == doctest::Approx(0.5).epsilon(0.01));
}

TEST_CASE("below(n) covers [0, n) evenly and refuses n = 0") {
    strata::rng r(3);
    std::array<int, 7> counts{};
    int out_of_range = 0;
    for (int i = 0; i < 70000; ++i) {
        const std::uint64_t k = r.below(7);
        if (k < 7) ++counts[k];
        else ++out_of_range;
    }
    CHECK(out_of_range == 0);
    for (int c : counts) CHECK(c == doctest::Approx(10000).epsilon(0.05));  // sd ~93
    CHECK(r.below(1) == 0);
    const std::uint64_t huge = (1ULL << 63) + 1;  // rejection matters most here: half the draws are rejected
    for (int i = 0; i < 100; ++i) CHECK(r.below(huge) < huge);
    CHECK_THROWS_AS(r.below(0), strata::error);
}

TEST_CASE("100k normals have mean 0 and variance 1, and normal(mean, sd) shifts and scales") {
    strata::rng r(2024);
    const int n = 100000;
    double sum = 0, sum_sq = 0, sum_4 = 0;
    int beyond_3sd = 0;
    for (int i = 0; i < n; ++i) {
        const double z = r.normal();
        sum += z;
        sum_sq += z * z;
        sum_4 += z * z * z * z;
        beyond_3sd += std::fabs(z) > 3;
    }
    const double mean = sum / n;
    const double var = sum_sq / n - mean * mean;
    CHECK(std::fabs(mean) < 0.015);                            // sd of the mean ~0.0032
    CHECK(var == doctest::Approx(1.0).epsilon(0.02));          // sd of the variance ~0.0045
    CHECK(sum_4 / n == doctest::Approx(3.0).epsilon(0.05));    // kurtosis of a normal
    CHECK(beyond_3sd == doctest::Approx(270).epsilon(0.35));   // P(|z| > 3) = 0.0027

    strata::rng a(5), b(5);
    for (int i = 0; i < 10; ++i) CHECK(a.normal(1.5, 0.02) == doctest::Approx(1.5 + 0.02 * b.normal()));
}

TEST_CASE("the state round-trips through JSON, spare normal included, and the stream continues") {
    strata::rng r(99);
    for (int i = 0; i < 5; ++i) r.next_u64();
    r.normal();  // leaves a spare normal behind
    const nlohmann::json saved = r;
    CHECK(saved["algorithm"] == "xoshiro256**");
    CHECK(saved["state"].size() == 4);
    CHECK(saved["spare_normal"].is_number());

    // Through text too: the checkpoint stores it as a string.
    strata::rng restored = nlohmann::json::parse(saved.dump()).get<strata::rng>();
    CHECK(restored == r);
    CHECK(restored.normal() == r.normal());  // the spare
    for (int i = 0; i < 100; ++i) CHECK(restored.next_u64() == r.next_u64());

    const nlohmann::json no_spare = strata::rng(1);
    CHECK(no_spare["spare_normal"].is_null());
    CHECK(no_spare.get<strata::rng>() == strata::rng(1));
}

TEST_CASE("damaged JSON states are refused with what is wrong") {
    nlohmann::json j = strata::rng(1);
    j["algorithm"] = "mt19937";
    CHECK_THROWS_WITH_AS(j.get<strata::rng>(), doctest::Contains("'algorithm' must be"), strata::error);
    j = strata::rng(1);
    j["state"].erase(3);
    CHECK_THROWS_WITH_AS(j.get<strata::rng>(), doctest::Contains("array of 4"), strata::error);
    j = strata::rng(1);
    j["state"][2] = -1;
    CHECK_THROWS_WITH_AS(j.get<strata::rng>(), doctest::Contains("entry 2"), strata::error);
    j["state"] = {0, 0, 0, 0};
    CHECK_THROWS_WITH_AS(j.get<strata::rng>(), doctest::Contains("all-zero"), strata::error);
    CHECK_THROWS_AS(nlohmann::json(42).get<strata::rng>(), strata::error);
}

TEST_CASE("rng works with std algorithms as a UniformRandomBitGenerator") {
    static_assert(std::uniform_random_bit_generator<strata::rng>);
    std::vector<int> v{1, 2, 3, 4, 5, 6, 7, 8};
    strata::rng r(11);
    std::shuffle(v.begin(), v.end(), r);
    std::vector<int> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8});
}

}  // namespace rng_test
