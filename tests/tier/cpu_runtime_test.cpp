// The CPU backend's pieces on their own: FIFO streams, events, failures, the device arena,
// and unaligned storage-file I/O against an in-memory model.
#include <strata/strata.hpp>

#include <doctest/doctest.h>

#include "support/skip.hpp"  // strata::test::skip

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

namespace cpu_runtime_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

TEST_CASE("a CPU stream runs tasks in FIFO order and events mark points in it") {
    cpu::stream s("fifo");
    std::vector<int> order;  // written by the worker only; read after the event
    for (int i = 0; i < 100; ++i) s.enqueue([&order, i] { order.push_back(i); });
    auto e = s.record();
    e.wait();
    REQUIRE(order.size() == 100);
    for (int i = 0; i < 100; ++i) CHECK(order[i] == i);
    CHECK(e.ready());
    CHECK(cpu::event{}.ready());
}

TEST_CASE("work on one stream waits for an event of another") {
    cpu::stream producer("producer"), consumer("consumer");
    std::atomic<bool> gate{false};
    int value = 0;
    producer.enqueue([&] {
        while (!gate.load()) std::this_thread::yield();
        value = 42;
    });
    auto produced = producer.record();
    consumer.wait(produced);
    int seen = -1;
    consumer.enqueue([&] { seen = value; });
    auto consumed = consumer.record();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK_FALSE(consumed.ready());  // held back by the producer
    gate = true;
    consumed.wait();
    CHECK(seen == 42);
}

TEST_CASE("a failing task surfaces at the next event wait, and later tasks are skipped") {
    cpu::stream s("failing");
    bool ran_after = false;
    s.enqueue([] { throw strata::error("disk full (simulated)"); });
    s.enqueue([&] { ran_after = true; });
    auto e = s.record();
    CHECK_THROWS_WITH_AS(e.wait(), doctest::Contains("disk full (simulated)"), strata::error);
    CHECK_FALSE(ran_after);
    // the failure travels to a stream that waits on it
    cpu::stream other("other");
    other.wait(e);
    CHECK_THROWS_AS(other.synchronize(), strata::error);
}

TEST_CASE("the CPU device arena is bounded, fragments, and coalesces") {
    cpu::device_arena arena(16 * 4096);
    void* a = arena.allocate(4 * 4096);
    void* b = arena.allocate(4 * 4096);
    void* c = arena.allocate(4 * 4096);
    void* d = arena.allocate(4 * 4096);
    CHECK_THROWS_WITH_AS(arena.allocate(1), doctest::Contains("fragmented"), strata::error);
    arena.deallocate(b);
    arena.deallocate(d);
    // 8 pages are free but not contiguous
    CHECK_THROWS_WITH_AS(arena.allocate(8 * 4096), doctest::Contains("largest free block"), strata::error);
    arena.deallocate(c);  // b, c, d merge into 12 contiguous pages
    void* big = arena.allocate(12 * 4096);
    CHECK(big == b);
    arena.deallocate(a);
    arena.deallocate(big);
    CHECK(arena.allocate(16 * 4096) == a);
}

TEST_CASE("storage files read and write any byte range exactly") {
    const auto dir = std::filesystem::temp_directory_path() / ("strata-test-io-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::size_t size = 3 * storage_file::bounce_bytes + 12345;
    storage_file file(dir / "ranges.strata", size);
    CHECK(file.bytes_on_disk() % page_size == 0);
    std::vector<unsigned char> model(size, 0);
    file.write(0, model.data(), size);
    std::mt19937_64 rng(7);
    std::vector<unsigned char> buf;
    for (int round = 0; round < 60; ++round) {
        const std::size_t off = rng() % size;
        const std::size_t len = rng() % std::min<std::size_t>(size - off, round % 3 ? 9000 : size) + (round == 0);
        const std::size_t n = std::min(len, size - off);
        buf.resize(n + 1);
        unsigned char* p = buf.data() + (round % 2);  // odd buffer addresses too
        if (round % 2 == 0) {
            for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(rng());
            file.write(off, p, n);
            std::copy(p, p + n, model.begin() + off);
        } else {
            file.read(off, p, n);
            CHECK(std::equal(p, p + n, model.begin() + off));
        }
    }
    std::vector<unsigned char> all(size);
    file.read(0, all.data(), size);
    CHECK(all == model);
    CHECK_THROWS_WITH_AS(file.read(size - 1, all.data(), 2), doctest::Contains("out of range"), strata::error);
    std::filesystem::remove_all(dir);
}

TEST_CASE("where O_DIRECT is refused, storage falls back to buffered I/O and says so once") {
    if (!std::filesystem::exists("/dev/shm")) {
        strata::test::skip("no /dev/shm tmpfs on this machine");
        return;
    }
    const auto dir = std::filesystem::path("/dev/shm") / ("strata-test-shm-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    struct remove_on_exit {
        std::filesystem::path p;
        ~remove_on_exit() { std::filesystem::remove_all(p); }
    } cleanup{dir};
    std::vector<std::string> notes;
    auto previous = set_log_sink([&](std::string_view m) { notes.emplace_back(m); });
    detail::buffered_io_noted() = false;
    {
        storage_file f1(dir / "a.strata", 100), f2(dir / "b.strata", 100);
        if (f1.direct_io()) {  // Linux >= 6.6 tmpfs accepts O_DIRECT
            set_log_sink(previous);
            strata::test::skip("this kernel's tmpfs accepts O_DIRECT, so the fallback cannot be provoked here");
            return;
        }
        CHECK_FALSE(f2.direct_io());
        std::vector<char> data(100, 'x'), back(100);
        f1.write(0, data.data(), 100);
        f1.read(0, back.data(), 100);
        CHECK(back == data);
    }
    set_log_sink(previous);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].find("refuses O_DIRECT") != std::string::npos);
}

}  // namespace cpu_runtime_test
