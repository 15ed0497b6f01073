// Every tier has a byte budget: going over it is a clear error naming the tier, the bytes asked
// for and the bytes left; freeing gives the bytes back.
#include "support/backends.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <string>

namespace budget_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {
tier_options small_tiers() {
    return {.device_bytes = 1 << 20,
            .host_bytes = 2 << 20,
            .storage_bytes = 3 << 20,
            .storage_dir = std::filesystem::temp_directory_path() / ("strata-test-budget-" + std::to_string(::getpid()))};
}

template <class B, Tier Home>
void check_over_budget(B& backend, std::size_t limit) {
    INFO("tier " << Home::name);
    tiered_tensor<float, Home, B> half(backend, {limit / 8}, "half");  // half the budget, in floats
    CHECK(backend.budget(id_of<Home>).used() >= limit / 2);
    try {
        tiered_tensor<float, Home, B> too_big(backend, {limit / 4 + 1}, "too_big");
        FAIL("allocating past the budget did not throw");
    } catch (const strata::error& e) {
        const std::string what = e.what();
        CHECK(what.find(std::string(Home::name) + " tier over budget") != std::string::npos);
        CHECK(what.find("too_big") != std::string::npos);
        CHECK(what.find("asked for") != std::string::npos);
        CHECK(what.find(std::to_string(limit / 2)) != std::string::npos);  // bytes left
        CHECK(!e.hint().empty());
    }
    // nothing leaked by the failed allocation
    CHECK(backend.budget(id_of<Home>).used() == limit / 2);
}
}  // namespace

TEST_CASE_TEMPLATE("going over a tier budget throws with the numbers", B, STRATA_TEST_BACKENDS) {
    auto backend = test::make_backend<B>(small_tiers());
    if (!backend) return;
    check_over_budget<B, device_tier>(*backend, 1 << 20);
    check_over_budget<B, host_tier>(*backend, 2 << 20);
    check_over_budget<B, storage_tier>(*backend, 3 << 20);
}

TEST_CASE_TEMPLATE("freeing a tensor returns its bytes to the budget", B, STRATA_TEST_BACKENDS) {
    auto backend = test::make_backend<B>(small_tiers());
    if (!backend) return;
    for (tier_id t : {tier_id::device, tier_id::host, tier_id::storage}) CHECK(backend->budget(t).used() == 0);
    {
        tiered_tensor<double, device_tier, B> d(*backend, {100}, "d");
        tiered_tensor<double, host_tier, B> h(*backend, {100}, "h");
        tiered_tensor<double, storage_tier, B> s(*backend, {100}, "s");
        // allocations are charged whole pages
        CHECK(backend->budget(tier_id::device).used() == page_size);
        CHECK(backend->budget(tier_id::host).used() == page_size);
        CHECK(backend->budget(tier_id::storage).used() == page_size);
        auto moved = std::move(d);
        CHECK(backend->budget(tier_id::device).used() == page_size);
    }
    for (tier_id t : {tier_id::device, tier_id::host, tier_id::storage}) CHECK(backend->budget(t).used() == 0);
    CHECK(backend->budget(tier_id::device).peak() == page_size);
}

TEST_CASE_TEMPLATE("storage-tier files are named after their tensor and removed with it", B, STRATA_TEST_BACKENDS) {
    auto backend = test::make_backend<B>(small_tiers());
    if (!backend) return;
    const auto path = backend->storage_dir() / "layer.3.attn_w.strata";
    {
        tiered_tensor<float, storage_tier, B> t(*backend, {10}, "layer.3.attn w");
        CHECK(std::filesystem::exists(path));
        CHECK_THROWS_WITH_AS((tiered_tensor<float, storage_tier, B>(*backend, {10}, "layer.3.attn w")),
                             doctest::Contains("two storage-tier tensors are named"), strata::error);
    }
    CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE_TEMPLATE("a backend's storage files use the I/O engine its tier_options ask for", B, STRATA_TEST_BACKENDS) {
    tier_options options = small_tiers();
    options.io = io_engine_options{.kind = io_engine_kind::thread_pool, .workers = 3};
    auto backend = test::make_backend<B>(options);
    if (!backend) return;
    tiered_tensor<float, storage_tier, B> a(*backend, {10}, "a"), b(*backend, {10}, "b");
    io_engine& engine = a.view().file()->engine();
    CHECK(&engine == &b.view().file()->engine());  // one engine per backend
    CHECK(&engine != &shared_io_engine());
    CHECK(engine.kind() == "thread pool");
    CHECK(engine.in_flight_limit() == 3);

    auto plain = test::make_backend<B>(small_tiers());  // no engine named: the process's
    tiered_tensor<float, storage_tier, B> c(*plain, {10}, "c");
    CHECK(&c.view().file()->engine() == &shared_io_engine());
}

}  // namespace budget_test
