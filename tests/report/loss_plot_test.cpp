// The loss plot SVG: structure, point counts, degenerate inputs, and the atomic file write.
#include <strata/report/loss_plot.hpp>  // loss_point, loss_svg, write_loss_svg

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include <algorithm>   // std::sort
#include <cmath>       // std::exp
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ifstream
#include <limits>      // std::numeric_limits
#include <sstream>     // std::ostringstream, std::istringstream
#include <string>      // std::string, std::stod
#include <vector>      // std::vector

#include <unistd.h>  // getpid

namespace loss_plot_test {  // this file's names: an area's files compile as one unit (unity build)

namespace fs = std::filesystem;

namespace {

constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();

// The `points` attribute of the polyline with this id, split into (x, y) pairs; empty if absent.
std::vector<std::pair<double, double>> polyline_points(const std::string& svg, const std::string& id) {
    const std::size_t at = svg.find("<polyline id=\"" + id + "\"");
    if (at == std::string::npos) return {};
    const std::size_t begin = svg.find("points=\"", at) + 8;
    const std::size_t end = svg.find('"', begin);
    std::istringstream in(svg.substr(begin, end - begin));
    std::vector<std::pair<double, double>> points;
    for (std::string pair; in >> pair;) {
        const std::size_t comma = pair.find(',');
        points.emplace_back(std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1)));
    }
    return points;
}

std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

// Every element opened is closed, in order: enough XML checking to catch a broken writer.
bool tags_balanced(const std::string& svg) {
    std::vector<std::string> open;
    for (std::size_t at = svg.find('<'); at != std::string::npos; at = svg.find('<', at + 1)) {
        const std::size_t end = svg.find('>', at);
        if (end == std::string::npos) return false;
        const std::string tag = svg.substr(at + 1, end - at - 1);
        if (tag.empty()) return false;
        if (tag.back() == '/') continue;
        if (tag[0] != '/') {
            open.push_back(tag.substr(0, tag.find(' ')));
        } else {
            if (open.empty() || open.back() != tag.substr(1)) return false;
            open.pop_back();
        }
    }
    return open.empty();
}

bool inside_viewbox(const std::vector<std::pair<double, double>>& points) {
    for (const auto& [x, y] : points)
        if (!(x >= 0 && x <= 800 && y >= 0 && y <= 500)) return false;
    return true;
}

std::vector<strata::loss_point> decaying_curve(int n) {
    std::vector<strata::loss_point> points;
    for (int i = 0; i < n; ++i) points.push_back({static_cast<double>(i * 10), 2 + 9 * std::exp(-i / 20.0)});
    return points;
}

}  // namespace

TEST_CASE("a train curve and val points make a complete SVG with axes, ticks, labels and a legend") {
    const std::vector<strata::loss_point> train = decaying_curve(101);  // steps 0..1000
    const std::vector<strata::loss_point> val{{0, 11}, {500, 2.5}, {1000, 2.1}};
    const std::string svg = strata::loss_svg(train, val, "gpt2 <tiny> & co");

    CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
    CHECK(svg.size() >= 7);
    CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
    CHECK(tags_balanced(svg));
    CHECK(svg.find("<script") == std::string::npos);
    CHECK(svg.find("href") == std::string::npos);
    CHECK(svg.find("url(") == std::string::npos);

    const auto train_points = polyline_points(svg, "train");
    CHECK(train_points.size() == 101);
    CHECK(inside_viewbox(train_points));
    // Loss falls, so the curve descends on screen; SVG's y grows downwards, so the first y is smaller.
    CHECK(train_points.front().second < train_points.back().second);
    CHECK(train_points.front().first < train_points.back().first);
    CHECK(polyline_points(svg, "val").size() == 3);
    CHECK(count(svg, "<circle") == 3);  // val markers only: the train line has many points

    CHECK(svg.find("gpt2 &lt;tiny&gt; &amp; co") != std::string::npos);
    CHECK(svg.find(">step</text>") != std::string::npos);
    CHECK(svg.find(">loss</text>") != std::string::npos);
    CHECK(svg.find(">train loss</text>") != std::string::npos);
    CHECK(svg.find(">val loss</text>") != std::string::npos);
    // Step ticks every 100 from 0 to 1000; loss ticks on whole units between 2 and 11.
    const std::string x_ticks = svg.substr(svg.find("class=\"x-ticks\""));
    CHECK(x_ticks.find(">0</text>") != std::string::npos);
    CHECK(x_ticks.find(">500</text>") != std::string::npos);
    CHECK(x_ticks.find(">1000</text>") != std::string::npos);
    const std::string y_ticks = svg.substr(svg.find("class=\"y-ticks\""));
    CHECK(y_ticks.find(">2</text>") != std::string::npos);
    CHECK(y_ticks.find(">10</text>") != std::string::npos);
}

TEST_CASE("NaN and infinite entries are skipped, and no NaN reaches the text") {
    std::vector<strata::loss_point> train = decaying_curve(20);
    train[5].loss = not_a_number;
    train[6].loss = std::numeric_limits<double>::infinity();
    train[7].step = not_a_number;
    const std::vector<strata::loss_point> val{{50, not_a_number}, {100, 3.0}};
    const std::string svg = strata::loss_svg(train, val, "with holes");
    CHECK(polyline_points(svg, "train").size() == 17);
    CHECK(polyline_points(svg, "val").size() == 1);
    CHECK(svg.find("nan") == std::string::npos);
    CHECK(svg.find("inf") == std::string::npos);
    CHECK(tags_balanced(svg));
}

TEST_CASE("one point and a constant loss still draw inside the plot") {
    const std::vector<strata::loss_point> one{{5, 3.0}};
    const std::string single = strata::loss_svg(one, {}, "one");
    const auto points = polyline_points(single, "train");
    REQUIRE(points.size() == 1);
    CHECK(inside_viewbox(points));
    CHECK(count(single, "<circle") == 1);  // a one-point line is invisible: it gets a marker
    CHECK(single.find(">val loss<") == std::string::npos);
    CHECK(single.find("nan") == std::string::npos);

    const std::vector<strata::loss_point> flat{{0, 2.5}, {1, 2.5}, {2, 2.5}};
    const std::string constant = strata::loss_svg(flat, {}, "flat");
    const auto flat_points = polyline_points(constant, "train");
    REQUIRE(flat_points.size() == 3);
    CHECK(inside_viewbox(flat_points));
    CHECK(flat_points[0].second == flat_points[2].second);
    CHECK(flat_points[0].second > 45);   // strictly inside the plot area, not on its edge
    CHECK(flat_points[0].second < 440);
    CHECK(constant.find("nan") == std::string::npos);
}

TEST_CASE("no finite points gives an empty plot that says so") {
    const std::vector<strata::loss_point> all_nan{{0, not_a_number}, {1, not_a_number}};
    const std::string svg = strata::loss_svg(all_nan, {}, "diverged");
    CHECK(svg.find("<polyline") == std::string::npos);
    CHECK(svg.find("no finite loss values") != std::string::npos);
    CHECK(svg.find("nan") == std::string::npos);
    CHECK(tags_balanced(svg));
}

TEST_CASE("write_loss_svg replaces the file atomically and leaves no temporary behind") {
    const fs::path dir = fs::temp_directory_path() / ("strata_plot_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const fs::path file = dir / "loss.svg";
    const std::vector<strata::loss_point> train = decaying_curve(10);
    strata::write_loss_svg(file, decaying_curve(3), {}, "first");
    strata::write_loss_svg(file, train, {}, "second");  // overwrites the first
    std::ostringstream contents;
    contents << std::ifstream(file).rdbuf();
    CHECK(contents.str() == strata::loss_svg(train, {}, "second"));

    CHECK_THROWS_WITH_AS(strata::write_loss_svg(dir / "missing" / "loss.svg", train, {}, "x"),
                         doctest::Contains("missing/loss.svg"), strata::error);
    fs::create_directories(dir / "taken.svg");  // a directory where the file should go: rename fails
    CHECK_THROWS_WITH_AS(strata::write_loss_svg(dir / "taken.svg", train, {}, "x"),
                         doctest::Contains("cannot rename"), strata::error);
    // Only the plot is left: no temporary from the good writes or the failed one.
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"loss.svg", "taken.svg"});
    fs::remove_all(dir);
}

}  // namespace loss_plot_test
