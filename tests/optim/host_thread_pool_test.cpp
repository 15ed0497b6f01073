// host_thread_pool: every index exactly once, boundaries on the asked multiple, real parallelism,
// exceptions carried back to the caller, refusals, and many jobs from several submitting threads
// (the part ThreadSanitizer watches).
#include <strata/optim/host_thread_pool.hpp>  // host_thread_pool, chunking

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE, CAPTURE, CHECK_THROWS_WITH_AS

#include <atomic>     // std::atomic
#include <cfenv>      // std::fegetround, std::fesetround, FE_UPWARD
#include <chrono>     // std::chrono::steady_clock, std::chrono::seconds
#include <cstddef>    // std::size_t
#include <memory>
#include <mutex>      // std::mutex, std::lock_guard
#include <set>        // std::set
#include <stdexcept>  // std::runtime_error
#include <thread>     // std::thread, std::this_thread
#include <utility>    // std::pair
#include <vector>     // std::vector

namespace host_thread_pool_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

struct coverage {
    std::vector<std::atomic<int>> hits;
    std::mutex mutex;
    std::vector<std::pair<std::size_t, std::size_t>> chunks;

    explicit coverage(std::size_t n) : hits(n) {}

    void operator()(std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
        std::lock_guard lock(mutex);
        chunks.emplace_back(begin, end);
    }
};

}  // namespace

TEST_CASE("parallel_for runs every index exactly once, in non-empty chunks on allowed boundaries") {
    for (const std::size_t threads : {1, 2, 3, 5}) {
        strata::host_thread_pool pool(threads);
        CHECK(pool.size() == threads);
        for (const std::size_t count : {0, 1, 7, 16, 100, 10007}) {
            for (const strata::chunking how : {strata::chunking{}, strata::chunking{16, 5, 1},
                                               strata::chunking{16, 0, 100}, strata::chunking{7, 20, 3}}) {
                CAPTURE(threads);
                CAPTURE(count);
                CAPTURE(how.multiple);
                CAPTURE(how.phase);
                CAPTURE(how.min_chunk);
                coverage seen(count);
                pool.parallel_for(count, [&](std::size_t b, std::size_t e) { seen(b, e); }, how);
                for (std::size_t i = 0; i < count; ++i) REQUIRE(seen.hits[i].load() == 1);
                for (const auto& [begin, end] : seen.chunks) {
                    CHECK(begin < end);
                    if (begin != 0) CHECK((begin + how.phase) % how.multiple == 0);
                }
                CHECK(seen.chunks.size() <= std::max<std::size_t>(1, count / how.min_chunk));
                if (threads == 1) CHECK(seen.chunks.size() <= 1);  // no workers: one call on the caller
            }
        }
    }
}

TEST_CASE("chunks really run on several threads at once") {
    // Each chunk waits until a second thread has entered a chunk: if only the caller ran chunks,
    // the wait would time out and the check below would fail.
    strata::host_thread_pool pool(3);
    std::mutex mutex;
    std::set<std::thread::id> ids;
    bool timed_out = false;
    pool.parallel_for(
        64,
        [&](std::size_t, std::size_t) {
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
            {
                std::lock_guard lock(mutex);
                ids.insert(std::this_thread::get_id());
            }
            for (;;) {
                {
                    std::lock_guard lock(mutex);
                    if (ids.size() >= 2) return;
                    if (std::chrono::steady_clock::now() > deadline) {
                        timed_out = true;
                        return;
                    }
                }
                std::this_thread::yield();
            }
        },
        {.min_chunk = 1});
    CHECK_FALSE(timed_out);
    CHECK(ids.size() >= 2);
}

TEST_CASE("workers run chunks under the caller's rounding mode") {
    // Each chunk records the rounding mode it ran under while the caller rounds upward. Without the
    // pool carrying the caller's floating-point environment, the workers' chunks round to nearest.
    strata::host_thread_pool pool(3);
    std::mutex mutex;
    std::set<int> modes;
    const int saved = std::fegetround();
    std::fesetround(FE_UPWARD);
    // A loaded machine may let the caller take every chunk: repeat until a worker has run one.
    for (int attempt = 0; attempt < 200 && pool.chunks_on_workers() == 0; ++attempt)
        pool.parallel_for(
            64,
            [&](std::size_t, std::size_t) {
                std::lock_guard lock(mutex);
                modes.insert(std::fegetround());
            },
            {.min_chunk = 1});
    std::fesetround(saved);
    CHECK(pool.chunks_on_workers() > 0);
    CHECK(modes == std::set<int>{FE_UPWARD});
}

TEST_CASE("the first exception of a chunk reaches the caller, and the pool stays usable") {
    strata::host_thread_pool pool(3);
    std::atomic<int> calls{0};
    CHECK_THROWS_WITH_AS(pool.parallel_for(
                             1000,
                             [&](std::size_t begin, std::size_t end) {
                                 calls.fetch_add(1);
                                 if (begin <= 500 && 500 < end) throw strata::error("chunk with 500 failed");
                             },
                             {.min_chunk = 10}),
                         "chunk with 500 failed", strata::error);
    CHECK(calls.load() >= 1);
    // Any exception type travels, not only strata::error.
    CHECK_THROWS_AS(pool.parallel_for(
                        100, [](std::size_t, std::size_t) { throw std::runtime_error("plain"); }, {.min_chunk = 1}),
                    std::runtime_error);
    auto seen = std::make_unique<coverage>(5000);  // on the heap: see host_thread_pool's destructor
    pool.parallel_for(5000, [&](std::size_t b, std::size_t e) { (*seen)(b, e); }, {.min_chunk = 64});
    for (std::size_t i = 0; i < 5000; ++i) REQUIRE(seen->hits[i].load() == 1);
}

TEST_CASE("a nested parallel_for on the same pool is refused instead of deadlocking") {
    strata::host_thread_pool pool(2);
    CHECK_THROWS_WITH_AS(pool.parallel_for(
                             1000,
                             [&](std::size_t, std::size_t) {
                                 pool.parallel_for(10, [](std::size_t, std::size_t) {}, {.min_chunk = 1});
                             },
                             {.min_chunk = 1}),
                         doctest::Contains("called from inside one of its own chunks"), strata::error);
    // A chunk may use another pool.
    strata::host_thread_pool inner(2);
    std::atomic<std::size_t> total{0};
    pool.parallel_for(
        8,
        [&](std::size_t b, std::size_t e) {
            for (std::size_t i = b; i < e; ++i)
                inner.parallel_for(
                    100, [&](std::size_t ib, std::size_t ie) { total.fetch_add(ie - ib); }, {.min_chunk = 10});
        },
        {.min_chunk = 1});
    CHECK(total.load() == 800);
}

TEST_CASE("zero threads and a zero chunk multiple are refused with a hint") {
    CHECK_THROWS_WITH_AS(strata::host_thread_pool(0), doctest::Contains("threads must be >= 1"), strata::error);
    strata::host_thread_pool pool(2);
    CHECK_THROWS_WITH_AS(pool.parallel_for(10, [](std::size_t, std::size_t) {}, {.multiple = 0}),
                         doctest::Contains("chunking.multiple and chunking.min_chunk must be >= 1"), strata::error);
    CHECK(strata::host_thread_pool::default_threads() >= 1);
}

TEST_CASE("many jobs from several submitting threads all complete, one at a time") {
    strata::host_thread_pool pool(3);
    constexpr std::size_t n = 4096;
    std::atomic<std::size_t> total{0};
    const auto submit = [&](int jobs) {
        for (int j = 0; j < jobs; ++j) {
            std::atomic<std::size_t> sum{0};
            pool.parallel_for(
                n, [&](std::size_t b, std::size_t e) { sum.fetch_add(e - b, std::memory_order_relaxed); },
                {.multiple = 16, .min_chunk = 64});
            total.fetch_add(sum.load());
        }
    };
    std::thread a(submit, 300), b(submit, 300);
    submit(300);
    a.join();
    b.join();
    CHECK(total.load() == 900 * n);
}

}  // namespace host_thread_pool_test
