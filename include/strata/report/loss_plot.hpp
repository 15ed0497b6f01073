// write_loss_svg: the loss curve of a run as one self-contained SVG file.
//
// SVG because a browser, an editor preview and GitHub show it without any plotting stack, and it is
// text, so a test can read it. Self-contained: no scripts, no fonts or images fetched, no CSS file.
// Train loss is a line; validation loss, measured every few hundred steps, is markers joined by a
// dashed line. Points whose step or loss is NaN or infinite are skipped (a diverged step must not
// take the whole plot with it).
#pragma once

#include <strata/io/atomic_write.hpp>  // write_file_atomically

#include <algorithm>     // std::min, std::max
#include <charconv>      // std::to_chars, std::chars_format
#include <cmath>         // std::ceil, std::floor, std::fabs, std::isfinite, std::log10, std::lround, std::pow
#include <filesystem>    // std::filesystem::path
#include <span>          // std::span
#include <string>        // std::string
#include <string_view>   // std::string_view
#include <vector>        // std::vector

namespace strata {

struct loss_point {
    double step;
    double loss;
};

namespace loss_plot_detail {

struct range {
    double lo, hi;
    double span() const { return hi - lo; }
};

// The "nice numbers" tick spacing: 1, 2 or 5 times a power of ten, about `target` ticks.
inline double tick_spacing(double span, int target) {
    const double raw = span / target;
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    const double normalized = raw / magnitude;
    const double nice = normalized < 1.5 ? 1 : normalized < 3 ? 2 : normalized < 7 ? 5 : 10;
    return nice * magnitude;
}

// Widens a degenerate range (one point, a constant loss) so it has an extent to draw, then rounds
// it out to whole ticks. `min_spacing` keeps step ticks on whole steps.
inline range nice_range(double lo, double hi, int target_ticks, double min_spacing, double& spacing) {
    if (hi - lo <= 0) {
        const double pad = lo != 0 ? std::fabs(lo) * 0.1 : 1.0;
        lo -= pad;
        hi += pad;
    }
    spacing = std::max(min_spacing, tick_spacing(hi - lo, target_ticks));
    return {std::floor(lo / spacing) * spacing, std::ceil(hi / spacing) * spacing};
}

// Fixed-point without locale: printf would write "1,5" under a German locale and break the SVG.
inline std::string number(double value, int decimals = 2) {
    if (value == 0) value = 0;  // no "-0.00"
    char text[64];
    const auto result = std::to_chars(text, text + sizeof text, value, std::chars_format::fixed, decimals);
    return std::string(text, result.ptr);
}

// Enough decimals to tell two neighbouring ticks apart, no more.
inline int label_decimals(double spacing) {
    return std::max(0, static_cast<int>(std::ceil(-std::log10(spacing) - 1e-9)));
}

inline std::string escape_xml(std::string_view text) {
    std::string out;
    for (const char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default: out += c;
        }
    }
    return out;
}

inline std::vector<loss_point> finite_points(std::span<const loss_point> points) {
    std::vector<loss_point> kept;
    for (const loss_point& p : points)
        if (std::isfinite(p.step) && std::isfinite(p.loss)) kept.push_back(p);
    return kept;
}

}  // namespace loss_plot_detail

// The SVG document as a string (write_loss_svg writes it to a file).
inline std::string loss_svg(std::span<const loss_point> train, std::span<const loss_point> val,
                            std::string_view title) {
    using namespace loss_plot_detail;
    const std::vector<loss_point> train_pts = finite_points(train);
    const std::vector<loss_point> val_pts = finite_points(val);

    constexpr double width = 800, height = 500;
    constexpr double left = 75, right = 780, top = 45, bottom = 440;  // the plot area

    double step_lo = 0, step_hi = 1, loss_lo = 0, loss_hi = 1;
    bool any = false;
    for (const std::vector<loss_point>* series : {&train_pts, &val_pts})
        for (const loss_point& p : *series) {
            step_lo = any ? std::min(step_lo, p.step) : p.step;
            step_hi = any ? std::max(step_hi, p.step) : p.step;
            loss_lo = any ? std::min(loss_lo, p.loss) : p.loss;
            loss_hi = any ? std::max(loss_hi, p.loss) : p.loss;
            any = true;
        }
    double x_spacing = 1, y_spacing = 1;
    const range xr = nice_range(step_lo, step_hi, 8, 1.0, x_spacing);
    const range yr = nice_range(loss_lo, loss_hi, 6, 0.0, y_spacing);
    const auto x_of = [&](double step) { return left + (step - xr.lo) / xr.span() * (right - left); };
    const auto y_of = [&](double loss) { return bottom - (loss - yr.lo) / yr.span() * (bottom - top); };

    std::string svg;
    svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(width, 0) + "\" height=\"" +
           number(height, 0) + "\" viewBox=\"0 0 " + number(width, 0) + " " + number(height, 0) +
           "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    svg += "<text x=\"" + number((left + right) / 2) + "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">" +
           escape_xml(title) + "</text>\n";

    // Grid and tick labels. Ticks are counted, not accumulated, so rounding cannot add or drop one.
    svg += "<g stroke=\"#e0e0e0\" stroke-width=\"1\">\n";
    const long x_ticks = std::lround(xr.span() / x_spacing), y_ticks = std::lround(yr.span() / y_spacing);
    for (long i = 0; i <= x_ticks; ++i) {
        const double x = x_of(xr.lo + static_cast<double>(i) * x_spacing);
        svg += "<line x1=\"" + number(x) + "\" y1=\"" + number(top) + "\" x2=\"" + number(x) + "\" y2=\"" +
               number(bottom) + "\"/>\n";
    }
    for (long i = 0; i <= y_ticks; ++i) {
        const double y = y_of(yr.lo + static_cast<double>(i) * y_spacing);
        svg += "<line x1=\"" + number(left) + "\" y1=\"" + number(y) + "\" x2=\"" + number(right) + "\" y2=\"" +
               number(y) + "\"/>\n";
    }
    svg += "</g>\n";
    svg += "<g stroke=\"black\" stroke-width=\"1\">\n";
    svg += "<line x1=\"" + number(left) + "\" y1=\"" + number(bottom) + "\" x2=\"" + number(right) + "\" y2=\"" +
           number(bottom) + "\"/>\n";
    svg += "<line x1=\"" + number(left) + "\" y1=\"" + number(top) + "\" x2=\"" + number(left) + "\" y2=\"" +
           number(bottom) + "\"/>\n";
    svg += "</g>\n";
    svg += "<g class=\"x-ticks\" text-anchor=\"middle\">\n";
    for (long i = 0; i <= x_ticks; ++i) {
        const double value = xr.lo + static_cast<double>(i) * x_spacing;
        svg += "<text x=\"" + number(x_of(value)) + "\" y=\"" + number(bottom + 18) + "\">" +
               number(value, label_decimals(x_spacing)) + "</text>\n";
    }
    svg += "</g>\n";
    svg += "<g class=\"y-ticks\" text-anchor=\"end\">\n";
    for (long i = 0; i <= y_ticks; ++i) {
        const double value = yr.lo + static_cast<double>(i) * y_spacing;
        svg += "<text x=\"" + number(left - 6) + "\" y=\"" + number(y_of(value) + 4) + "\">" +
               number(value, label_decimals(y_spacing)) + "</text>\n";
    }
    svg += "</g>\n";
    svg += "<text x=\"" + number((left + right) / 2) + "\" y=\"" + number(height - 18) +
           "\" text-anchor=\"middle\">step</text>\n";
    svg += "<text transform=\"translate(18 " + number((top + bottom) / 2) +
           ") rotate(-90)\" text-anchor=\"middle\">loss</text>\n";

    const auto polyline = [&](const std::vector<loss_point>& pts, std::string_view id, std::string_view color,
                              std::string_view style) {
        std::string points;
        for (const loss_point& p : pts) {
            if (!points.empty()) points += ' ';
            points += number(x_of(p.step)) + "," + number(y_of(p.loss));
        }
        return "<polyline id=\"" + std::string(id) + "\" fill=\"none\" stroke=\"" + std::string(color) + "\" " +
               std::string(style) + " points=\"" + points + "\"/>\n";
    };
    const auto markers = [&](const std::vector<loss_point>& pts, std::string_view color) {
        std::string out = "<g fill=\"" + std::string(color) + "\">\n";
        for (const loss_point& p : pts)
            out += "<circle cx=\"" + number(x_of(p.step)) + "\" cy=\"" + number(y_of(p.loss)) + "\" r=\"3\"/>\n";
        return out + "</g>\n";
    };
    constexpr std::string_view train_color = "#1f77b4", val_color = "#d62728";
    if (!train_pts.empty()) {
        svg += polyline(train_pts, "train", train_color, "stroke-width=\"1.5\"");
        if (train_pts.size() == 1) svg += markers(train_pts, train_color);  // a line of one point is invisible
    }
    if (!val_pts.empty()) {
        svg += polyline(val_pts, "val", val_color, "stroke-width=\"1\" stroke-dasharray=\"4 3\"");
        svg += markers(val_pts, val_color);
    }
    if (!any)
        svg += "<text x=\"" + number((left + right) / 2) + "\" y=\"" + number((top + bottom) / 2) +
               "\" text-anchor=\"middle\" fill=\"#888\">no finite loss values</text>\n";

    // Legend, top right inside the plot area, one row per series present.
    double row = top + 16;
    const auto legend_row = [&](std::string_view label, std::string_view color, std::string_view style) {
        svg += "<line x1=\"" + number(right - 110) + "\" y1=\"" + number(row - 4) + "\" x2=\"" + number(right - 85) +
               "\" y2=\"" + number(row - 4) + "\" stroke=\"" + std::string(color) + "\" " + std::string(style) + "/>\n";
        svg += "<text x=\"" + number(right - 78) + "\" y=\"" + number(row) + "\">" + std::string(label) + "</text>\n";
        row += 18;
    };
    svg += "<g class=\"legend\">\n";
    if (!train_pts.empty()) legend_row("train loss", train_color, "stroke-width=\"2\"");
    if (!val_pts.empty()) legend_row("val loss", val_color, "stroke-width=\"1.5\" stroke-dasharray=\"4 3\"");
    svg += "</g>\n";
    svg += "</svg>\n";
    return svg;
}

// Writes through a temporary renamed over `path` (io/atomic_write.hpp), so a viewer refreshing
// the file while training runs never reads half a plot, and a crash mid-write leaves the previous
// plot intact.
inline void write_loss_svg(const std::filesystem::path& path, std::span<const loss_point> train,
                           std::span<const loss_point> val, std::string_view title) {
    write_file_atomically(path, std::string_view(loss_svg(train, val, title)));
}

}  // namespace strata
