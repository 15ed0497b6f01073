// trace_recorder: a Chrome / Perfetto trace of where a step's time goes, one named track per
// stream (H2D, compute, D2H, optimizer, storage I/O), so that overlap (or its absence) is seen at
// a glance in ui.perfetto.dev or chrome://tracing. Plus the number the trainer logs from it: the
// fraction of transfer time hidden under compute, by interval-union arithmetic.
//
// The output is the Trace Event Format's JSON object form:
//   {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {"generator": "strata"}}
// (otherData tells a trace strata wrote, which a later run may replace, from anyone else's file)
// with complete events ("ph": "X", ts and dur in microseconds since the recorder's origin on the
// steady clock) and metadata events ("ph": "M": process_name, thread_name, thread_sort_index)
// that name each track and fix its order. A track is a Chrome "thread": its tid is a small number
// of the recorder's, not an OS thread id, so work measured on any thread lands on the track of the
// stream it belongs to.
//
// Thread-safe: any thread may add events. When disabled, add() and scope cost one relaxed atomic
// load and a branch, with no clock read and no allocation.
#pragma once

#include <strata/core/error.hpp>       // strata::error
#include <strata/io/atomic_write.hpp>  // write_file_atomically

#include <nlohmann/json.hpp>  // nlohmann::json

#include <algorithm>    // std::sort, std::stable_sort, std::max, std::min
#include <array>        // std::array
#include <atomic>       // std::atomic
#include <chrono>       // std::chrono::steady_clock, duration_cast
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int64_t, std::uint32_t
#include <filesystem>   // std::filesystem::path
#include <mutex>        // std::mutex, std::lock_guard
#include <span>         // std::span
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::move, std::exchange
#include <vector>       // std::vector

namespace strata {

// The tracks the pipeline and trainer record to. They get tids 1..5 in this order (Perfetto shows
// them top to bottom); any other track name gets the next tid on first use.
namespace trace_track {
inline constexpr std::string_view h2d = "H2D";
inline constexpr std::string_view compute = "compute";
inline constexpr std::string_view d2h = "D2H";
inline constexpr std::string_view optimizer = "optimizer";
inline constexpr std::string_view storage = "storage I/O";
inline constexpr std::array<std::string_view, 5> standard{h2d, compute, d2h, optimizer, storage};
// What moves bytes between tiers: the time the pipeline wants hidden under compute.
inline constexpr std::array<std::string_view, 3> transfers{h2d, d2h, storage};
}  // namespace trace_track

// ---- interval-union arithmetic -----------------------------------------------------------------

// A half-open stretch of time [begin, end), in any one unit. end <= begin covers no time.
struct interval {
    double begin = 0;
    double end = 0;
    double length() const { return end > begin ? end - begin : 0; }
    friend bool operator==(const interval&, const interval&) = default;
};

// The same time as `intervals`, as sorted, disjoint intervals; empty ones dropped, overlapping or
// touching ones merged.
inline std::vector<interval> interval_union(std::vector<interval> intervals) {
    std::erase_if(intervals, [](const interval& i) { return !(i.end > i.begin); });
    std::sort(intervals.begin(), intervals.end(), [](const interval& a, const interval& b) { return a.begin < b.begin; });
    std::vector<interval> merged;
    for (const interval& i : intervals) {
        if (!merged.empty() && i.begin <= merged.back().end)
            merged.back().end = std::max(merged.back().end, i.end);
        else
            merged.push_back(i);
    }
    return merged;
}

// Time covered by at least one interval (overlaps count once).
inline double covered_length(std::span<const interval> intervals) {
    double total = 0;
    for (const interval& i : interval_union({intervals.begin(), intervals.end()})) total += i.length();
    return total;
}

// Time covered both by some interval of `a` and by some interval of `b`.
inline double overlap_length(std::span<const interval> a, std::span<const interval> b) {
    const std::vector<interval> ua = interval_union({a.begin(), a.end()});
    const std::vector<interval> ub = interval_union({b.begin(), b.end()});
    double total = 0;
    // Both lists are sorted and disjoint: walk them together, dropping whichever ends first.
    for (std::size_t i = 0, j = 0; i < ua.size() && j < ub.size();) {
        total += interval{std::max(ua[i].begin, ub[j].begin), std::min(ua[i].end, ub[j].end)}.length();
        if (ua[i].end < ub[j].end)
            ++i;
        else
            ++j;
    }
    return total;
}

// The share of the time covered by `a` that `b` covers too, in [0, 1]: with a = transfers and
// b = compute, the fraction of transfer time hidden under compute. 1 when `a` covers no time:
// nothing is left exposed.
inline double overlap_fraction(std::span<const interval> a, std::span<const interval> b) {
    const double covered = covered_length(a);
    return covered > 0 ? overlap_length(a, b) / covered : 1.0;
}

// ---- the recorder ------------------------------------------------------------------------------

struct trace_event {
    std::string name;
    std::string category;
    std::uint32_t tid = 0;       // the track
    std::int64_t begin_ns = 0;   // since the recorder's origin, >= 0
    std::int64_t duration_ns = 0;  // >= 0
};

struct trace_track_info {
    std::string name;
    std::uint32_t tid = 0;
};

class trace_recorder {
public:
    using clock = std::chrono::steady_clock;
    using time_point = clock::time_point;

    // `pid` is the process id shown in the trace (one recorder per run: any constant will do).
    explicit trace_recorder(bool enabled = true, std::uint32_t pid = 1)
        : m_enabled(enabled), m_pid(pid), m_origin(clock::now()) {}

    trace_recorder(const trace_recorder&) = delete;
    trace_recorder& operator=(const trace_recorder&) = delete;

    bool enabled() const noexcept { return m_enabled.load(std::memory_order_relaxed); }
    void set_enabled(bool on) noexcept { m_enabled.store(on, std::memory_order_relaxed); }

    // ts = 0 in the trace.
    time_point origin() const noexcept { return m_origin; }
    static time_point now() noexcept { return clock::now(); }

    // Records [begin, end) on `track`, measured anywhere (a stream's worker thread, a GPU event pair
    // converted to host time). Times before the origin are clamped to it and an end before its
    // begin gives a zero duration, so ts and dur are never negative. The category defaults to
    // the track's name.
    void add(std::string_view track, std::string_view name, time_point begin, time_point end,
             std::string_view category = {}) {
        if (!enabled()) return;
        const std::int64_t b = std::max<std::int64_t>(0, since_origin(begin));
        const std::int64_t e = std::max<std::int64_t>(b, since_origin(end));
        std::lock_guard lock(m_mutex);
        const std::uint32_t tid = track_id_locked(track);
        m_events.push_back({std::string(name), std::string(category.empty() ? track : category), tid, b, e - b});
    }

    // Measures its own lifetime on a track: { auto s = trace.measure("compute", "block 3 fwd"); ... }.
    // Records even when the scope is left by an exception. Disabled: no clock read, no copy.
    class scope {
    public:
        scope(trace_recorder& recorder, std::string_view track, std::string_view name, std::string_view category = {})
            : m_recorder(recorder.enabled() ? &recorder : nullptr) {
            if (!m_recorder) return;
            m_track = track;
            m_name = name;
            m_category = category;
            m_begin = clock::now();
        }
        scope(scope&& other) noexcept
            : m_recorder(std::exchange(other.m_recorder, nullptr)),
              m_track(std::move(other.m_track)),
              m_name(std::move(other.m_name)),
              m_category(std::move(other.m_category)),
              m_begin(other.m_begin) {}
        scope(const scope&) = delete;
        scope& operator=(const scope&) = delete;
        scope& operator=(scope&&) = delete;
        ~scope() { end(); }

        // Records now instead of at destruction (once).
        void end() noexcept {
            if (!m_recorder) return;
            try {
                std::exchange(m_recorder, nullptr)->add(m_track, m_name, m_begin, clock::now(), m_category);
            } catch (...) {
                // out of memory while tracing: losing one event beats terminating the run
            }
        }

    private:
        trace_recorder* m_recorder;
        std::string m_track, m_name, m_category;
        time_point m_begin{};
    };

    [[nodiscard]] scope measure(std::string_view track, std::string_view name, std::string_view category = {}) {
        return scope(*this, track, name, category);
    }

    // Wraps `task` so that running it records its span on `track`: hand the result to a CPU
    // stream's enqueue() and the event marks when the worker thread really ran it, not when it
    // was queued. The recorder must outlive the task.
    template <class Task>
    auto timed(std::string_view track, std::string_view name, Task task) {
        return [this, track = std::string(track), name = std::string(name), task = std::move(task)]() mutable {
            scope s(*this, track, name);
            task();
        };
    }

    // ---- reading back ----

    std::size_t size() const {
        std::lock_guard lock(m_mutex);
        return m_events.size();
    }

    void clear() {
        std::lock_guard lock(m_mutex);
        m_events.clear();
    }

    // The tracks that have been used, by tid.
    std::vector<trace_track_info> tracks() const {
        std::lock_guard lock(m_mutex);
        std::vector<trace_track_info> out = m_tracks;
        std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.tid < b.tid; });
        return out;
    }

    // All events, by begin time (ties keep the order they were added in).
    std::vector<trace_event> events() const {
        std::vector<trace_event> out;
        {
            std::lock_guard lock(m_mutex);
            out = m_events;
        }
        std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.begin_ns < b.begin_ns; });
        return out;
    }

    // The recorded spans of the named tracks, in microseconds since the origin (not merged).
    std::vector<interval> busy(std::span<const std::string_view> track_names) const {
        std::lock_guard lock(m_mutex);
        std::vector<std::uint32_t> tids;
        for (const auto& t : m_tracks)
            for (std::string_view name : track_names)
                if (t.name == name) tids.push_back(t.tid);
        std::vector<interval> out;
        for (const auto& e : m_events)
            if (std::find(tids.begin(), tids.end(), e.tid) != tids.end())
                out.push_back({static_cast<double>(e.begin_ns) / 1e3,
                               static_cast<double>(e.begin_ns + e.duration_ns) / 1e3});
        return out;
    }
    std::vector<interval> busy(std::string_view track_name) const { return busy(std::span(&track_name, 1)); }

    // Fraction of the time some transfer (H2D, D2H, storage I/O) ran during which compute ran too.
    double transfer_hidden_fraction() const {
        return overlap_fraction(busy(trace_track::transfers), busy(trace_track::compute));
    }

    nlohmann::json to_json() const {
        nlohmann::json events = nlohmann::json::array();
        events.push_back(metadata("process_name", 0, {{"name", "strata"}}));
        for (const auto& t : tracks()) {
            events.push_back(metadata("thread_name", t.tid, {{"name", t.name}}));
            events.push_back(metadata("thread_sort_index", t.tid, {{"sort_index", t.tid}}));
        }
        for (const auto& e : this->events())
            events.push_back({{"ph", "X"},
                              {"name", e.name},
                              {"cat", e.category},
                              {"ts", static_cast<double>(e.begin_ns) / 1e3},
                              {"dur", static_cast<double>(e.duration_ns) / 1e3},
                              {"pid", m_pid},
                              {"tid", e.tid}});
        return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", {{"generator", "strata"}}}};
    }

    // Writes the trace to `path` atomically: a reader (or a crash) never sees half a file.
    void write(const std::filesystem::path& path) const {
        std::string text;
        try {
            text = to_json().dump();
        } catch (const nlohmann::json::exception& e) {
            throw error("trace: cannot serialize the trace for '" + path.string() + "': " + e.what(),
                        "event and track names must be valid UTF-8");
        }
        write_file_atomically(path, text);
    }

private:
    std::int64_t since_origin(time_point t) const {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(t - m_origin).count();
    }

    std::uint32_t track_id_locked(std::string_view track) {
        for (const auto& t : m_tracks)
            if (t.name == track) return t.tid;
        std::uint32_t tid = 0;
        for (std::size_t i = 0; i < trace_track::standard.size(); ++i)
            if (trace_track::standard[i] == track) tid = static_cast<std::uint32_t>(i + 1);
        if (tid == 0) tid = static_cast<std::uint32_t>(trace_track::standard.size()) + ++m_other_tracks;
        m_tracks.push_back({std::string(track), tid});
        return tid;
    }

    nlohmann::json metadata(const char* name, std::uint32_t tid, nlohmann::json args) const {
        return {{"ph", "M"}, {"name", name}, {"pid", m_pid}, {"tid", tid}, {"args", std::move(args)}};
    }

    std::atomic<bool> m_enabled;
    std::uint32_t m_pid;
    time_point m_origin;
    mutable std::mutex m_mutex;
    std::vector<trace_track_info> m_tracks;  // used so far
    std::uint32_t m_other_tracks = 0;        // tracks outside trace_track::standard
    std::vector<trace_event> m_events;
};

}  // namespace strata
