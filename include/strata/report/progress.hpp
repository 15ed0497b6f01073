// progress_reporter: what a training run prints while it runs.
//
// On a terminal: one status line redrawn in place with '\r' (step/total, a bar, loss, tokens/s,
// ETA), so a long run does not scroll its history away. Elsewhere (a log file, CI, a pipe): '\r'
// would leave one giant line, so it prints plain lines instead, every N steps, at the first step
// (proof the run started) and at the last. note() prints a line of its own in both modes without
// breaking the bar.
//
// `step` in update() counts completed steps: 1 after the first step, total_steps after the last.
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <strata/core/format.hpp>  // fmt::format (host only)

#include <algorithm>    // std::clamp
#include <chrono>       // std::chrono::steady_clock, duration
#include <cmath>        // std::isfinite, std::isnan, std::llround
#include <cstddef>      // std::size_t
#include <cstdio>       // stdout, fileno
#include <functional>   // std::function
#include <ostream>      // std::ostream
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <utility>      // std::move

#if defined(_WIN32)
#include <io.h>  // _isatty, _fileno
#else
#include <unistd.h>  // isatty
#endif

namespace strata {

// Whether standard output is an interactive terminal (false when redirected to a file or pipe).
inline bool stdout_is_terminal() {
#if defined(_WIN32)
    return _isatty(_fileno(stdout)) != 0;
#else
    return isatty(fileno(stdout)) != 0;
#endif
}

// h:mm:ss, hours unbounded ("27:03:09"); "--:--:--" when unknown (negative or not finite).
inline std::string format_duration(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return "--:--:--";
    const long long total = std::llround(seconds);
    return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
}

// 950, 48.2k, 1.55M: three significant digits are all a rate shown every step can hold.
inline std::string format_rate(double per_second) {
    if (!std::isfinite(per_second) || per_second < 0) return "-";
    if (per_second < 1e3) return fmt::format("{:.0f}", per_second);
    if (per_second < 1e6) return fmt::format("{:.1f}k", per_second / 1e3);
    return fmt::format("{:.2f}M", per_second / 1e6);
}

// Four decimals, and one spelling of NaN/infinity on every platform (printf may write "-nan").
inline std::string format_loss(double loss) {
    if (std::isnan(loss)) return "nan";
    if (!std::isfinite(loss)) return loss > 0 ? "inf" : "-inf";
    return fmt::format("{:.4f}", loss);
}

struct progress_options {
    long print_every = 10;  // plain mode: a line every this many steps (plus the first and the last)
    int bar_width = 30;     // terminal mode: characters between the brackets
    long start_step = 0;    // steps already done when the reporter starts (a resumed run); ETA counts from here
    std::function<double()> clock;  // monotonic seconds; empty: std::chrono::steady_clock
};

class progress_reporter {
public:
    progress_reporter(long total_steps, std::ostream& out, bool is_terminal, progress_options options = {})
        : m_total(total_steps), m_out(out), m_terminal(is_terminal), m_options(std::move(options)) {
        if (m_total < 1)
            throw error("progress: total_steps must be >= 1, got " + std::to_string(m_total),
                        "pass the run's number of steps");
        if (m_options.print_every < 1)
            throw error("progress: print_every must be >= 1, got " + std::to_string(m_options.print_every),
                        "use 1 to print every step");
        if (m_options.bar_width < 1)
            throw error("progress: bar_width must be >= 1, got " + std::to_string(m_options.bar_width));
        if (m_options.start_step < 0 || m_options.start_step > m_total)
            throw error("progress: start_step " + std::to_string(m_options.start_step) + " is outside [0, " +
                            std::to_string(m_total) + "]",
                        "pass the number of steps already done when resuming");
        if (!m_options.clock)
            m_options.clock = [] {
                return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
            };
        m_start_time = m_options.clock();
    }

    progress_reporter(const progress_reporter&) = delete;
    progress_reporter& operator=(const progress_reporter&) = delete;

    // Ends the bar's line so what the program prints next starts on a line of its own.
    ~progress_reporter() {
        try {
            finish();
        } catch (...) {  // a failing stream must not throw out of a destructor
        }
    }

    // After `step` steps are done (1-based). `extra` is appended as is (e.g. "val 3.21").
    void update(long step, double loss, double tokens_per_s, std::string_view extra = {}) {
        const double elapsed = m_options.clock() - m_start_time;
        const long done = step - m_options.start_step;
        const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(m_total - step) : -1;
        if (m_terminal) {
            m_line = bar_line(step, loss, tokens_per_s, eta, extra);
            redraw();
            return;
        }
        const bool first = !m_printed_any;
        if (first || step % m_options.print_every == 0 || step == m_total) {
            m_out << plain_line(step, loss, tokens_per_s, elapsed, eta, extra) << '\n';
            m_out.flush();
            m_printed_any = true;
        }
    }

    // A line of its own (an eval result, a checkpoint saved). On a terminal it takes the bar's place
    // and the bar is redrawn below it.
    void note(std::string_view line) {
        if (m_terminal && m_bar_visible) {
            m_out << '\r' << line;
            pad_after(line.size());
            m_out << '\n';
            m_bar_visible = false;
            m_drawn_width = 0;
            redraw();
            return;
        }
        m_out << line << '\n';
        m_out.flush();
    }

    // Leaves the bar on screen and moves to the next line. Safe to call more than once.
    void finish() {
        if (m_terminal && m_bar_visible) {
            m_out << '\n';
            m_out.flush();
            m_bar_visible = false;
            m_drawn_width = 0;
        }
    }

private:
    std::string bar_line(long step, double loss, double tokens_per_s, double eta, std::string_view extra) const {
        const double fraction = std::clamp(static_cast<double>(step) / static_cast<double>(m_total), 0.0, 1.0);
        const auto width = static_cast<std::size_t>(m_options.bar_width);
        const auto filled = static_cast<std::size_t>(fraction * static_cast<double>(width));
        const std::string total = std::to_string(m_total);
        // the step right-aligned to the total's width: a steady line
        std::string line = fmt::format("step {:>{}}/{} [{}{}] {:5.1f}% | loss {} | {} tok/s | ETA {}", step,
                                       total.size(), total, std::string(filled, '#'), std::string(width - filled, '.'),
                                       100.0 * fraction, format_loss(loss), format_rate(tokens_per_s),
                                       format_duration(eta));
        if (!extra.empty()) line += fmt::format(" | {}", extra);
        return line;
    }

    std::string plain_line(long step, double loss, double tokens_per_s, double elapsed, double eta,
                           std::string_view extra) const {
        std::string line = fmt::format("step {}/{} | loss {} | {} tok/s | elapsed {} | ETA {}", step, m_total,
                                       format_loss(loss), format_rate(tokens_per_s), format_duration(elapsed),
                                       format_duration(eta));
        if (!extra.empty()) line += fmt::format(" | {}", extra);
        return line;
    }

    void redraw() {
        if (m_line.empty()) return;
        m_out << '\r' << m_line;
        pad_after(m_line.size());
        m_drawn_width = m_line.size();
        m_bar_visible = true;
        m_out.flush();
    }

    // Spaces over what a longer previous line left on screen ('\r' only moves the cursor).
    void pad_after(std::size_t width) {
        if (width < m_drawn_width) m_out << std::string(m_drawn_width - width, ' ');
    }

    long m_total;
    std::ostream& m_out;
    bool m_terminal;
    progress_options m_options;
    double m_start_time = 0;
    std::string m_line;             // the last bar drawn, redrawn after a note
    std::size_t m_drawn_width = 0;  // characters of the bar now on screen
    bool m_bar_visible = false;
    bool m_printed_any = false;
};

}  // namespace strata
