// trace_recorder: the JSON parses back as a Chrome/Perfetto trace with named, ordered tracks;
// events are well-formed from many threads at once; the overlap arithmetic is exact.
#include <strata/backend/cpu/stream.hpp>  // cpu::stream (tasks timed on a worker thread)
#include <strata/report/trace.hpp>        // trace_recorder, interval, overlap_fraction

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include <nlohmann/json.hpp>  // nlohmann::json

#include <io/scratch_dir.hpp>  // test::scratch_dir, read_text

#include <algorithm>  // std::find
#include <atomic>     // std::atomic
#include <chrono>     // std::chrono::microseconds, milliseconds
#include <map>        // std::map
#include <set>        // std::set
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string, std::to_string
#include <thread>     // std::thread, std::this_thread::sleep_for
#include <vector>     // std::vector

namespace trace_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
using std::chrono::microseconds;

namespace {

// Parses the recorder's output as a reader would: from the written file.
nlohmann::json written(const trace_recorder& trace, const test::scratch_dir& dir) {
    const auto path = dir / "trace.json";
    trace.write(path);
    return nlohmann::json::parse(test::read_text(path));
}

// tid -> name from the thread_name metadata.
std::map<std::uint32_t, std::string> track_names(const nlohmann::json& doc) {
    std::map<std::uint32_t, std::string> out;
    for (const auto& e : doc["traceEvents"])
        if (e["ph"] == "M" && e["name"] == "thread_name") out[e["tid"].get<std::uint32_t>()] = e["args"]["name"];
    return out;
}

void check_well_formed(const nlohmann::json& doc) {
    REQUIRE(doc.is_object());
    REQUIRE(doc["traceEvents"].is_array());
    CHECK(doc["displayTimeUnit"] == "ms");
    double last_ts = -1;
    bool seen_complete = false;
    for (const auto& e : doc["traceEvents"]) {
        REQUIRE(e.contains("ph"));
        CHECK(e["pid"].is_number_unsigned());
        CHECK(e["tid"].is_number_unsigned());
        if (e["ph"] == "M") {
            CHECK_FALSE(seen_complete);  // metadata first
            CHECK(e["args"].is_object());
            continue;
        }
        REQUIRE(e["ph"] == "X");
        seen_complete = true;
        CHECK(e["name"].is_string());
        CHECK(e["cat"].is_string());
        REQUIRE(e["ts"].is_number());
        REQUIRE(e["dur"].is_number());
        CHECK(e["ts"].get<double>() >= 0);
        CHECK(e["dur"].get<double>() >= 0);
        CHECK(e["ts"].get<double>() >= last_ts);  // sorted by start
        last_ts = e["ts"].get<double>();
    }
}

}  // namespace

TEST_CASE("a trace parses back with named, ordered tracks and complete events") {
    test::scratch_dir dir;
    trace_recorder trace;
    const auto t0 = trace.origin();
    // added out of order and on a custom track first
    trace.add("checkpoint", "save step 10", t0 + microseconds(900), t0 + microseconds(950));
    trace.add(trace_track::compute, "block 0 fwd", t0 + microseconds(100), t0 + microseconds(400));
    trace.add(trace_track::h2d, "params g1", t0 + microseconds(50), t0 + microseconds(250), "copy");
    trace.add(trace_track::storage, "read m g1", t0 + microseconds(10), t0 + microseconds(30));
    trace.add(trace_track::d2h, "grads g1", t0 + microseconds(600), t0 + microseconds(700));
    trace.add(trace_track::optimizer, "adamw g1", t0 + microseconds(700), t0 + microseconds(800));
    trace.add("checkpoint", "save step 20", t0 + microseconds(1000), t0 + microseconds(1001));

    const nlohmann::json doc = written(trace, dir);
    check_well_formed(doc);
    CHECK(dir.list() == std::vector<std::string>{"trace.json"});  // no temporary left behind

    const auto names = track_names(doc);
    CHECK(names == std::map<std::uint32_t, std::string>{
                       {1, "H2D"}, {2, "compute"}, {3, "D2H"}, {4, "optimizer"}, {5, "storage I/O"}, {6, "checkpoint"}});
    std::map<std::uint32_t, int> sort_index;
    bool process_named = false;
    for (const auto& e : doc["traceEvents"]) {
        if (e["ph"] == "M" && e["name"] == "thread_sort_index") sort_index[e["tid"]] = e["args"]["sort_index"];
        if (e["ph"] == "M" && e["name"] == "process_name") process_named = e["args"]["name"] == "strata";
    }
    CHECK(process_named);
    CHECK(sort_index == std::map<std::uint32_t, int>{{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}});

    std::vector<nlohmann::json> complete;
    for (const auto& e : doc["traceEvents"])
        if (e["ph"] == "X") complete.push_back(e);
    REQUIRE(complete.size() == 7);
    CHECK(complete[0]["name"] == "read m g1");
    CHECK(complete[0]["tid"] == 5);
    CHECK(complete[0]["cat"] == "storage I/O");
    CHECK(complete[0]["ts"].get<double>() == doctest::Approx(10));
    CHECK(complete[0]["dur"].get<double>() == doctest::Approx(20));
    CHECK(complete[1]["name"] == "params g1");
    CHECK(complete[1]["cat"] == "copy");
    CHECK(complete[1]["dur"].get<double>() == doctest::Approx(200));
    CHECK(complete[6]["name"] == "save step 20");
    CHECK(complete[6]["tid"] == 6);
    CHECK(complete[6]["dur"].get<double>() == doctest::Approx(1));
}

TEST_CASE("times before the origin and ends before begins never give negative ts or dur") {
    trace_recorder trace;
    const auto t0 = trace.origin();
    trace.add("compute", "early", t0 - std::chrono::milliseconds(5), t0 + microseconds(3));
    trace.add("compute", "backwards", t0 + microseconds(50), t0 + microseconds(20));
    trace.add("compute", "all before", t0 - microseconds(9), t0 - microseconds(2));
    const auto events = trace.events();
    REQUIRE(events.size() == 3);
    for (const auto& e : events) {
        CHECK(e.begin_ns >= 0);
        CHECK(e.duration_ns >= 0);
    }
    CHECK(events[0].name == "early");
    CHECK(events[0].duration_ns == 3000);
    CHECK(events[1].name == "all before");
    CHECK(events[1].duration_ns == 0);
    CHECK(events[2].name == "backwards");
    CHECK(events[2].begin_ns == 50000);
    CHECK(events[2].duration_ns == 0);
}

TEST_CASE("a scope measures its lifetime, also when left by an exception; disabled records nothing") {
    trace_recorder trace;
    {
        auto s = trace.measure("compute", "sleep");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    try {
        trace_recorder::scope s(trace, "optimizer", "throws", "adamw");
        throw std::runtime_error("boom");
    } catch (const std::runtime_error&) {
    }
    {
        trace_recorder::scope s(trace, "H2D", std::string("ended ") + "early");  // the name is copied
        s.end();
        s.end();  // once only
    }
    auto events = trace.events();
    REQUIRE(events.size() == 3);
    CHECK(events[0].name == "sleep");
    CHECK(events[0].duration_ns >= 2'000'000);
    CHECK(events[1].name == "throws");
    CHECK(events[1].category == "adamw");
    CHECK(events[2].name == "ended early");

    trace.set_enabled(false);
    CHECK_FALSE(trace.enabled());
    {
        auto s = trace.measure("compute", "hidden");
    }
    trace.add("compute", "hidden", trace.now(), trace.now());
    trace.timed("compute", "hidden", [] {})();
    CHECK(trace.size() == 3);

    trace.set_enabled(true);
    trace.add("compute", "again", trace.now(), trace.now());
    CHECK(trace.size() == 4);
    trace.clear();
    CHECK(trace.size() == 0);

    trace_recorder off(false);
    off.add("compute", "x", off.now(), off.now());
    CHECK(off.size() == 0);
    CHECK(off.tracks().empty());
}

TEST_CASE("many threads record at once; every event arrives whole on its track") {
    trace_recorder trace;
    constexpr int threads = 6, per_thread = 500;
    const std::vector<std::string> tracks{"H2D", "compute", "D2H", "optimizer", "storage I/O", "extra"};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            for (int i = 0; i < per_thread; ++i) {
                const std::string& track = tracks[static_cast<std::size_t>(t)];
                if (i % 2 == 0) {
                    auto s = trace.measure(track, "t" + std::to_string(t) + "." + std::to_string(i));
                } else {
                    const auto b = trace_recorder::now();
                    trace.add(track, "t" + std::to_string(t) + "." + std::to_string(i), b, trace_recorder::now());
                }
                if (i == per_thread / 2) (void)trace.busy("compute");  // readers alongside writers
            }
        });
    for (auto& th : pool) th.join();

    const auto events = trace.events();
    REQUIRE(events.size() == threads * per_thread);
    std::map<std::uint32_t, std::set<std::string>> names_by_tid;
    for (const auto& e : events) names_by_tid[e.tid].insert(e.name);
    REQUIRE(names_by_tid.size() == threads);
    const auto infos = trace.tracks();
    REQUIRE(infos.size() == threads);
    for (const auto& info : infos) {
        const auto& names = names_by_tid[info.tid];
        CHECK(names.size() == per_thread);
        const std::size_t t = static_cast<std::size_t>(
            std::find(tracks.begin(), tracks.end(), info.name) - tracks.begin());
        REQUIRE(t < tracks.size());
        CHECK(names.count("t" + std::to_string(t) + ".0") == 1);
        CHECK(names.count("t" + std::to_string(t) + "." + std::to_string(per_thread - 1)) == 1);
    }
    test::scratch_dir dir;
    check_well_formed(written(trace, dir));
}

TEST_CASE("tasks timed on CPU streams land on their tracks, while compute overlaps a transfer") {
    trace_recorder trace;
    cpu::stream h2d("h2d"), compute("compute");
    using namespace std::chrono_literals;
    std::atomic<bool> computing{false};
    compute.enqueue(trace.timed(trace_track::compute, "block 0", [&] {
        computing = true;
        std::this_thread::sleep_for(60ms);
    }));
    h2d.enqueue([&] {
        while (!computing) std::this_thread::yield();  // the copy starts once compute has
    });
    h2d.enqueue(trace.timed(trace_track::h2d, "params g1", [] { std::this_thread::sleep_for(20ms); }));
    h2d.synchronize();
    compute.synchronize();
    const auto events = trace.events();
    REQUIRE(events.size() == 2);
    CHECK(trace.busy(trace_track::h2d).size() == 1);
    CHECK(trace.busy(trace_track::compute).size() == 1);
    CHECK(trace.busy("nothing").empty());
    // the 20 ms copy starts after the 60 ms compute has: most of it, if not all, lies under compute
    CHECK(trace.transfer_hidden_fraction() > 0.5);
    CHECK(trace.transfer_hidden_fraction() <= 1.0);
}

TEST_CASE("writing into a missing directory is a strata::error and leaves nothing") {
    test::scratch_dir dir;
    trace_recorder trace;
    trace.add("compute", "x", trace.now(), trace.now());
    CHECK_THROWS_AS(trace.write(dir / "missing" / "trace.json"), error);
    CHECK(dir.list().empty());
}

TEST_CASE("interval unions merge overlaps and touching ends, drop empties, accept any order") {
    CHECK(interval_union({}).empty());
    CHECK(interval_union({{5, 5}, {7, 3}}).empty());
    CHECK(interval_union({{4, 6}, {0, 2}, {1, 3}, {6, 7}, {10, 12}, {11, 11.5}}) ==
          std::vector<interval>{{0, 3}, {4, 7}, {10, 12}});
    const std::vector<interval> overlapping{{0, 10}, {5, 15}, {20, 25}};
    CHECK(covered_length(overlapping) == 20);
}

TEST_CASE("overlap fraction: full, none, partial, nested, unions on both sides") {
    using v = std::vector<interval>;
    // full: the transfer lies inside compute
    CHECK(overlap_fraction(v{{2, 4}}, v{{0, 10}}) == 1.0);
    // none: disjoint, and touching at one point counts nothing
    CHECK(overlap_fraction(v{{0, 5}}, v{{5, 9}}) == 0.0);
    CHECK(overlap_fraction(v{{0, 5}}, v{}) == 0.0);
    // partial: [0, 10) against [6, 20): 4 of 10
    CHECK(overlap_fraction(v{{0, 10}}, v{{6, 20}}) == doctest::Approx(0.4));
    // nested the other way: compute inside a long transfer
    CHECK(overlap_fraction(v{{0, 10}}, v{{2, 3}, {5, 7}}) == doctest::Approx(0.3));
    // H2D and D2H at once count once: union [0, 8) and [10, 12) = 10; compute [4, 11) covers 4 + 1
    CHECK(overlap_fraction(v{{0, 6}, {2, 8}, {10, 12}}, v{{4, 11}}) == doctest::Approx(0.5));
    // overlapping compute intervals count once as well
    CHECK(overlap_fraction(v{{0, 10}}, v{{1, 5}, {3, 6}, {4, 5}}) == doctest::Approx(0.5));
    // many small pieces against many small pieces, interleaved
    v a, b;
    for (int i = 0; i < 100; ++i) {
        a.push_back({i * 10.0, i * 10.0 + 6});  // 6 of every 10
        b.push_back({i * 10.0 + 3, i * 10.0 + 9});  // overlaps [3, 6): 3 of the 6
    }
    CHECK(overlap_length(a, b) == doctest::Approx(300));
    CHECK(overlap_fraction(a, b) == doctest::Approx(0.5));
    // no transfer time: nothing is exposed
    CHECK(overlap_fraction(v{}, v{{0, 1}}) == 1.0);
    CHECK(overlap_fraction(v{{3, 3}}, v{}) == 1.0);
}

TEST_CASE("the recorder's transfer-hidden fraction reads the transfer tracks against compute") {
    trace_recorder trace;
    const auto t0 = trace.origin();
    auto at = [&](int us) { return t0 + microseconds(us); };
    trace.add(trace_track::compute, "fwd", at(100), at(500));
    trace.add(trace_track::h2d, "g1", at(0), at(200));          // 100 of 200 hidden
    trace.add(trace_track::d2h, "g0", at(150), at(250));        // overlaps H2D: union [0, 250)
    trace.add(trace_track::storage, "m g0", at(600), at(650));  // exposed
    trace.add(trace_track::optimizer, "adamw", at(0), at(1000));  // not a transfer, not compute
    // transfer union: [0, 250) + [600, 650) = 300 us; under compute [100, 250) = 150 us
    CHECK(trace.transfer_hidden_fraction() == doctest::Approx(0.5));
    const auto transfers = trace.busy(trace_track::transfers);
    CHECK(transfers.size() == 3);
    CHECK(covered_length(transfers) == doctest::Approx(300));
    CHECK(trace_recorder().transfer_hidden_fraction() == 1.0);
}

}  // namespace trace_test
