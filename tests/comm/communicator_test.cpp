// thread_communicator: each collective against a sequential reference over ranks (bitwise: the
// sums add rank 0, 1, ... in order), in place and not, with 1 to 4 ranks as threads; repeated
// runs give the same bits; mismatched calls, an aborting rank and a rank that never comes fail
// every rank with one error instead of hanging. Runs under ThreadSanitizer in CI.
#include <strata/comm/communicator.hpp>         // Communicator
#include <strata/comm/thread_communicator.hpp>  // thread_group, thread_communicator
#include <strata/core/rng.hpp>                  // rng

#include <doctest/doctest.h>  // TEST_CASE, CHECK, REQUIRE

#include <algorithm>   // std::copy
#include <chrono>      // std::chrono::milliseconds
#include <cstddef>     // std::size_t
#include <functional>  // std::function
#include <string>      // std::string
#include <thread>      // std::thread
#include <vector>      // std::vector

namespace communicator_test {  // this file's names: an area's files compile as one unit (unity build)

using strata::cpu_backend;
using strata::thread_communicator;
using strata::thread_group;

static_assert(strata::Communicator<thread_communicator>);

// Runs body(comm, stream) on one thread per rank; returns each rank's error message ("" if none).
std::vector<std::string> on_ranks(thread_group& group,
                                  const std::function<void(thread_communicator&, cpu_backend::stream&)>& body) {
    std::vector<std::string> errors(group.size());
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < group.size(); ++r)
        threads.emplace_back([&, r] {
            cpu_backend backend;
            auto s = backend.make_stream("rank" + std::to_string(r));
            thread_communicator comm(group, r);
            try {
                body(comm, s);
                s.synchronize();
            } catch (const std::exception& e) {
                errors[r] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    return errors;
}

// Rank r's input: n values that differ per rank and make the order of a float sum matter.
template <class R>
std::vector<R> input(std::size_t rank, std::size_t n) {
    strata::rng gen(1234 + rank);
    std::vector<R> v(n);
    for (auto& x : v) x = static_cast<R>(gen.normal(0.0, 1.0) * (rank % 2 ? 1e4 : 1e-3));
    return v;
}

template <class R>
R rank_order_sum(std::size_t ranks, std::size_t n, std::size_t i) {  // the reference: rank 0 + 1 + ...
    R sum = input<R>(0, n)[i];
    for (std::size_t k = 1; k < ranks; ++k) sum += input<R>(k, n)[i];
    return sum;
}

TEST_CASE_TEMPLATE("all_reduce: every rank gets the rank-order sum, bitwise, in place", R, float, double) {
    for (std::size_t ranks : {1, 2, 3, 4}) {
        CAPTURE(ranks);
        const std::size_t n = 1001;  // not a multiple of the ranks: uneven shares
        thread_group group(ranks);
        std::vector<std::vector<R>> out(ranks);
        const auto errors = on_ranks(group, [&](thread_communicator& comm, cpu_backend::stream& s) {
            out[comm.rank()] = input<R>(comm.rank(), n);
            comm.all_reduce(s, out[comm.rank()].data(), n).wait();
        });
        for (const auto& e : errors) CHECK(e == "");
        for (std::size_t r = 0; r < ranks; ++r)
            for (std::size_t i = 0; i < n; i += 37) REQUIRE(out[r][i] == rank_order_sum<R>(ranks, n, i));
        CHECK(out.front() == out.back());
    }
}

TEST_CASE("reduce_scatter and all_gather: each rank's share, separate buffers and in place") {
    const std::size_t ranks = 3, n = 50;  // n elements per rank
    for (bool in_place : {false, true}) {
        CAPTURE(in_place);
        thread_group group(ranks);
        std::vector<std::vector<float>> scattered(ranks), gathered(ranks);
        const auto errors = on_ranks(group, [&](thread_communicator& comm, cpu_backend::stream& s) {
            const std::size_t r = comm.rank();
            std::vector<float> send = input<float>(r, ranks * n);
            if (in_place) {
                comm.reduce_scatter(s, send.data(), send.data() + r * n, n);
                comm.all_gather(s, send.data() + r * n, send.data(), n).wait();
                scattered[r].assign(send.begin() + static_cast<std::ptrdiff_t>(r * n),
                                    send.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
                gathered[r] = send;
            } else {
                scattered[r].resize(n);
                gathered[r].resize(ranks * n);
                comm.reduce_scatter(s, send.data(), scattered[r].data(), n);
                comm.all_gather(s, scattered[r].data(), gathered[r].data(), n).wait();
            }
        });
        for (const auto& e : errors) CHECK(e == "");
        for (std::size_t r = 0; r < ranks; ++r)
            for (std::size_t i = 0; i < n; ++i) REQUIRE(scattered[r][i] == rank_order_sum<float>(ranks, ranks * n, r * n + i));
        for (std::size_t r = 0; r < ranks; ++r) CHECK(gathered[r] == gathered[0]);  // all_reduce, in two halves
        for (std::size_t i = 0; i < ranks * n; ++i) REQUIRE(gathered[0][i] == rank_order_sum<float>(ranks, ranks * n, i));
    }
}

TEST_CASE("broadcast: the root's values on every rank; collectives run in stream order") {
    const std::size_t ranks = 3, n = 64;
    thread_group group(ranks);
    std::vector<std::vector<double>> out(ranks);
    const auto errors = on_ranks(group, [&](thread_communicator& comm, cpu_backend::stream& s) {
        const std::size_t r = comm.rank();
        out[r].assign(n, -1.0);
        // written by an earlier task on the same stream: the broadcast must see it
        s.enqueue([&, r] {
            const auto values = input<double>(r, n);
            std::copy(values.begin(), values.end(), out[r].begin());  // the buffer stays where it is
        });
        comm.broadcast(s, out[r].data(), n, 2);
        comm.all_reduce(s, out[r].data(), n).wait();
    });
    for (const auto& e : errors) CHECK(e == "");
    for (std::size_t r = 0; r < ranks; ++r)
        for (std::size_t i = 0; i < n; ++i) REQUIRE(out[r][i] == input<double>(2, n)[i] * 3.0);
}

TEST_CASE("the same collectives twice give the same bits") {
    auto run = [] {
        thread_group group(4);
        std::vector<std::vector<float>> out(4);
        on_ranks(group, [&](thread_communicator& comm, cpu_backend::stream& s) {
            out[comm.rank()] = input<float>(comm.rank(), 4096);
            for (int round = 0; round < 5; ++round) comm.all_reduce(s, out[comm.rank()].data(), 4096);
            s.synchronize();
        });
        return out;
    };
    CHECK(run() == run());
}

TEST_CASE("ranks that call different collectives or sizes fail together, naming both calls") {
    thread_group group(2);
    std::vector<float> a(8), b(8);
    const auto errors = on_ranks(group, [&](thread_communicator& comm, cpu_backend::stream& s) {
        if (comm.rank() == 0) comm.all_reduce(s, a.data(), 8).wait();
        else comm.all_reduce(s, b.data(), 7).wait();
    });
    for (const auto& e : errors) {
        CHECK(e.find("rank 0 called all_reduce(8 elements) while rank 1 called all_reduce(7 elements)") != std::string::npos);
        CHECK(e.find("hint:") != std::string::npos);
    }
}

TEST_CASE("a rank that aborts or never comes fails the others instead of hanging") {
    {
        thread_group group(3);
        std::vector<std::vector<float>> data(3, std::vector<float>(16, 1.0f));
        const auto errors = on_ranks(group, [&](thread_communicator& comm, cpu_backend::stream& s) {
            if (comm.rank() == 1) {
                comm.group().abort(1, "its step threw");
                return;
            }
            comm.all_reduce(s, data[comm.rank()].data(), 16).wait();
        });
        CHECK(errors[0].find("rank 1 aborted: its step threw") != std::string::npos);
        CHECK(errors[2].find("rank 1 aborted: its step threw") != std::string::npos);
        // and every later collective fails at once
        cpu_backend backend;
        auto s = backend.make_stream("late");
        thread_communicator late(group, 0);
        late.all_reduce(s, data[0].data(), 16);
        CHECK_THROWS_WITH_AS(s.synchronize(), doctest::Contains("rank 1 aborted"), strata::error);
    }
    {
        thread_group group(2, std::chrono::milliseconds(50));
        std::vector<float> data(4);
        const auto errors = on_ranks(group, [&](thread_communicator& comm, cpu_backend::stream& s) {
            if (comm.rank() == 0) comm.all_reduce(s, data.data(), 4).wait();
        });
        CHECK(errors[0].find("rank 0 waited 50 ms in all_reduce #0 for 1 other rank(s)") != std::string::npos);
        CHECK(errors[1] == "");
    }
}

TEST_CASE("a group and a communicator refuse impossible ranks") {
    CHECK_THROWS_AS(thread_group(0), strata::error);
    thread_group group(2);
    CHECK_THROWS_WITH_AS(thread_communicator(group, 2), "thread_communicator: rank 2 of a group of 2", strata::error);
    thread_communicator comm(group, 0);
    cpu_backend backend;
    auto s = backend.make_stream("s");
    float x = 0;
    CHECK_THROWS_AS(comm.broadcast(s, &x, 1, 5), strata::error);
}

}  // namespace communicator_test
