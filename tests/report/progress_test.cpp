// progress_reporter's output in both modes, against exact expected text, with a fake clock.
#include <strata/report/progress.hpp>  // progress_reporter, format_duration, format_rate

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include <algorithm>  // std::count
#include <cstdio>     // std::fflush, stdout
#include <limits>     // std::numeric_limits
#include <sstream>    // std::ostringstream
#include <string>     // std::string
#include <vector>     // std::vector

#include <unistd.h>  // dup, dup2, pipe, close, STDOUT_FILENO

namespace progress_test {  // this file's names: an area's files compile as one unit (unity build)

namespace {

// A clock the test moves by hand.
struct fake_clock {
    double now = 1000.0;
    strata::progress_options options(long print_every = 10) {
        strata::progress_options o;
        o.print_every = print_every;
        o.bar_width = 10;
        o.clock = [this] { return now; };
        return o;
    }
};

std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

}  // namespace

TEST_CASE("durations print as h:mm:ss with unbounded hours") {
    CHECK(strata::format_duration(0) == "0:00:00");
    CHECK(strata::format_duration(59.6) == "0:01:00");
    CHECK(strata::format_duration(3661) == "1:01:01");
    CHECK(strata::format_duration(97329) == "27:02:09");
    CHECK(strata::format_duration(-1) == "--:--:--");
    CHECK(strata::format_duration(std::numeric_limits<double>::infinity()) == "--:--:--");
}

TEST_CASE("rates and losses print compactly, NaN spelled one way") {
    CHECK(strata::format_rate(950) == "950");
    CHECK(strata::format_rate(48210) == "48.2k");
    CHECK(strata::format_rate(1.55e6) == "1.55M");
    CHECK(strata::format_loss(3.14159) == "3.1416");
    CHECK(strata::format_loss(std::numeric_limits<double>::quiet_NaN()) == "nan");
    CHECK(strata::format_loss(-std::numeric_limits<double>::quiet_NaN()) == "nan");
    CHECK(strata::format_loss(std::numeric_limits<double>::infinity()) == "inf");
}

TEST_CASE("off a terminal: plain lines at the first step, every N steps and the last") {
    fake_clock clock;
    std::ostringstream out;
    {
        strata::progress_reporter progress(25, out, /*is_terminal=*/false, clock.options(10));
        for (long step = 1; step <= 25; ++step) {
            clock.now += 2;  // two seconds per step
            progress.update(step, 5.0 - 0.1 * static_cast<double>(step), 48210, step == 20 ? "val 3.1000" : "");
        }
    }
    CHECK(out.str().find('\r') == std::string::npos);
    const std::vector<std::string> lines = split_lines(out.str());
    REQUIRE(lines.size() == 4);
    CHECK(lines[0] == "step 1/25 | loss 4.9000 | 48.2k tok/s | elapsed 0:00:02 | ETA 0:00:48");
    CHECK(lines[1] == "step 10/25 | loss 4.0000 | 48.2k tok/s | elapsed 0:00:20 | ETA 0:00:30");
    CHECK(lines[2] == "step 20/25 | loss 3.0000 | 48.2k tok/s | elapsed 0:00:40 | ETA 0:00:10 | val 3.1000");
    CHECK(lines[3] == "step 25/25 | loss 2.5000 | 48.2k tok/s | elapsed 0:00:50 | ETA 0:00:00");
}

TEST_CASE("off a terminal, notes are plain lines between the progress lines") {
    fake_clock clock;
    std::ostringstream out;
    strata::progress_reporter progress(4, out, false, clock.options(2));
    progress.update(1, 2.0, 100);
    progress.note("saved checkpoint step_1");
    progress.update(2, 1.5, 100);
    const std::vector<std::string> lines = split_lines(out.str());
    REQUIRE(lines.size() == 3);
    CHECK(lines[1] == "saved checkpoint step_1");
    CHECK(lines[2].rfind("step 2/4 |", 0) == 0);
}

TEST_CASE("on a terminal: one line redrawn with \\r, a bar, ETA, and a newline only at the end") {
    fake_clock clock;
    std::ostringstream out;
    strata::progress_reporter progress(200, out, /*is_terminal=*/true, clock.options());
    clock.now += 10;
    progress.update(1, 10.0, 1.55e6, "lr 6.0e-04");
    CHECK(out.str() ==
          "\rstep   1/200 [..........]   0.5% | loss 10.0000 | 1.55M tok/s | ETA 0:33:10 | lr 6.0e-04");
    out.str("");
    clock.now += 90;  // 100 s for 50 steps: 2 s a step, 150 to go
    progress.update(50, 4.0, 950);
    // The new line is shorter than the old one: spaces cover the rest of the old line.
    const std::string bar = "step  50/200 [##........]  25.0% | loss 4.0000 | 950 tok/s | ETA 0:05:00";
    const std::size_t previous = std::string("step   1/200 [..........]   0.5% | loss 10.0000 | 1.55M tok/s | ETA 0:33:10 | lr 6.0e-04").size();
    CHECK(out.str() == "\r" + bar + std::string(previous - bar.size(), ' '));
    CHECK(out.str().find('\n') == std::string::npos);

    out.str("");
    progress.finish();
    CHECK(out.str() == "\n");
    progress.finish();  // a second finish adds nothing
    CHECK(out.str() == "\n");
}

TEST_CASE("on a terminal, a note takes the bar's line and the bar is redrawn under it") {
    fake_clock clock;
    std::ostringstream out;
    strata::progress_reporter progress(10, out, true, clock.options());
    clock.now += 1;
    progress.update(10, 1.0, 2000);
    const std::string bar = "step 10/10 [##########] 100.0% | loss 1.0000 | 2.0k tok/s | ETA 0:00:00";
    out.str("");
    progress.note("eval: val loss 1.2");
    const std::string note = "eval: val loss 1.2";
    CHECK(out.str() == "\r" + note + std::string(bar.size() - note.size(), ' ') + "\n\r" + bar);
}

TEST_CASE("the destructor ends the bar's line") {
    fake_clock clock;
    std::ostringstream out;
    {
        strata::progress_reporter progress(3, out, true, clock.options());
        progress.update(1, 1.0, 1.0);
    }
    const std::string text = out.str();
    CHECK(text.back() == '\n');
    CHECK(std::count(text.begin(), text.end(), '\n') == 1);
}

TEST_CASE("a resumed run counts its ETA from start_step; bad arguments are refused") {
    fake_clock clock;
    std::ostringstream out;
    strata::progress_options options = clock.options(1);
    options.start_step = 100;
    strata::progress_reporter progress(200, out, false, options);
    clock.now += 30;
    progress.update(110, 2.0, 10);  // 3 s a step since the restart, 90 steps left
    CHECK(out.str() == "step 110/200 | loss 2.0000 | 10 tok/s | elapsed 0:00:30 | ETA 0:04:30\n");

    std::ostringstream sink;
    CHECK_THROWS_WITH_AS(strata::progress_reporter(0, sink, false), doctest::Contains("total_steps"), strata::error);
    strata::progress_options bad;
    bad.print_every = 0;
    CHECK_THROWS_WITH_AS(strata::progress_reporter(5, sink, false, bad), doctest::Contains("print_every"),
                         strata::error);
    CHECK(sink.str().empty());
}

TEST_CASE("stdout_is_terminal is false when stdout is a pipe") {
    std::fflush(stdout);
    const int saved = dup(STDOUT_FILENO);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    dup2(fds[1], STDOUT_FILENO);
    const bool terminal = strata::stdout_is_terminal();
    dup2(saved, STDOUT_FILENO);
    close(saved);
    close(fds[0]);
    close(fds[1]);
    CHECK_FALSE(terminal);
}

}  // namespace progress_test
