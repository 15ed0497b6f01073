// metrics_writer: each record is one line that parses back as JSON, visible before the writer closes.
#include <strata/report/metrics.hpp>  // metrics_writer, read_metrics

#include <doctest/doctest.h>  // TEST_CASE, CHECK

#include <nlohmann/json.hpp>  // nlohmann::json

#include <filesystem>  // std::filesystem
#include <fstream>     // std::ifstream, std::ofstream
#include <limits>      // std::numeric_limits
#include <string>      // std::string, std::getline
#include <vector>      // std::vector

#include <unistd.h>  // getpid

namespace metrics_test {  // this file's names: an area's files compile as one unit (unity build)

namespace fs = std::filesystem;

namespace {

// A fresh directory per test, removed at the end of the test.
struct scratch_dir {
    fs::path path;
    explicit scratch_dir(const std::string& name)
        : path(fs::temp_directory_path() / ("strata_metrics_" + name + "_" + std::to_string(getpid()))) {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~scratch_dir() { fs::remove_all(path); }
};

std::vector<std::string> lines_of(const fs::path& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

}  // namespace

TEST_CASE("each record is one flushed line of JSON with free-form fields") {
    scratch_dir dir("lines");
    const fs::path file = dir.path / "metrics.jsonl";
    strata::metrics_writer writer(file);
    writer.write({{"step", 1}, {"loss", 10.5}, {"lr", 6e-4}});
    writer.write({{"step", 2}, {"loss", 9.25}, {"grad_norm", 1.5}, {"tokens_per_s", 48000.0}});
    writer.write({{"step", 2}, {"val_loss", 9.5}, {"note", "eval"}});

    // Read while the writer is still open: flushed per line, nothing waits in a buffer.
    const std::vector<std::string> lines = lines_of(file);
    REQUIRE(lines.size() == 3);
    const nlohmann::json first = nlohmann::json::parse(lines[0]);
    CHECK(first["step"] == 1);
    CHECK(first["loss"] == 10.5);
    CHECK(first["lr"] == 6e-4);
    CHECK(nlohmann::json::parse(lines[1])["tokens_per_s"] == 48000.0);
    CHECK(nlohmann::json::parse(lines[2])["note"] == "eval");
    CHECK(writer.lines_written() == 3);
    CHECK(writer.path() == file);

    const std::vector<nlohmann::json> records = strata::read_metrics(file);
    REQUIRE(records.size() == 3);
    CHECK(records[1]["grad_norm"] == 1.5);
}

TEST_CASE("NaN has no JSON spelling and is written as null") {
    scratch_dir dir("nan");
    strata::metrics_writer writer(dir.path / "m.jsonl");
    writer.write({{"step", 3}, {"loss", std::numeric_limits<double>::quiet_NaN()}});
    const std::vector<nlohmann::json> records = strata::read_metrics(dir.path / "m.jsonl");
    REQUIRE(records.size() == 1);
    CHECK(records[0]["loss"].is_null());
}

TEST_CASE("a new writer truncates; an appending one continues a resumed run's file") {
    scratch_dir dir("append");
    const fs::path file = dir.path / "m.jsonl";
    { strata::metrics_writer(file).write({{"step", 1}}); }
    { strata::metrics_writer(file, /*append=*/true).write({{"step", 2}}); }
    CHECK(lines_of(file) == std::vector<std::string>{R"({"step":1})", R"({"step":2})"});
    { strata::metrics_writer(file).write({{"step", 9}}); }
    CHECK(lines_of(file) == std::vector<std::string>{R"({"step":9})"});
}

TEST_CASE("a metrics file is locked while written: a second writer is refused and truncates nothing") {
    scratch_dir dir("locked");
    const fs::path file = dir.path / "m.jsonl";
    strata::metrics_writer first(file);
    first.write({{"step", 1}});
    CHECK_THROWS_WITH_AS(strata::metrics_writer{file}, doctest::Contains("being written by another run"), strata::error);
    CHECK_THROWS_WITH_AS(strata::metrics_writer(file, /*append=*/true), doctest::Contains("being written by another run"),
                         strata::error);
    first.write({{"step", 2}});
    CHECK(lines_of(file) == std::vector<std::string>{R"({"step":1})", R"({"step":2})"});
}

TEST_CASE("a file that cannot be created is a clear error") {
    scratch_dir dir("errors");
    CHECK_THROWS_WITH_AS(strata::metrics_writer(dir.path / "missing" / "m.jsonl"),
                         doctest::Contains("directory '"), strata::error);
    CHECK_THROWS_WITH_AS(strata::metrics_writer(dir.path / "missing" / "m.jsonl"),
                         doctest::Contains("does not exist"), strata::error);
    // The path is itself a directory: the open fails and the message names the path.
    CHECK_THROWS_WITH_AS(strata::metrics_writer{dir.path}, doctest::Contains("cannot create"), strata::error);
}

TEST_CASE("a record must be an object") {
    scratch_dir dir("object");
    strata::metrics_writer writer(dir.path / "m.jsonl");
    CHECK_THROWS_WITH_AS(writer.write(nlohmann::json::array({1, 2})), doctest::Contains("must be a JSON object"),
                         strata::error);
    CHECK(writer.lines_written() == 0);
}

TEST_CASE("reading back skips a last line cut short by a crash, and names any other bad line") {
    scratch_dir dir("read");
    const fs::path cut = dir.path / "cut.jsonl";
    { std::ofstream(cut) << "{\"step\":1}\n\n{\"step\":2}\n{\"step\":3,\"lo"; }
    const std::vector<nlohmann::json> records = strata::read_metrics(cut);
    REQUIRE(records.size() == 2);
    CHECK(records[1]["step"] == 2);

    const fs::path bad = dir.path / "bad.jsonl";
    { std::ofstream(bad) << "{\"step\":1}\nnot json\n{\"step\":3}\n"; }
    CHECK_THROWS_WITH_AS(strata::read_metrics(bad), doctest::Contains("line 2"), strata::error);
    CHECK_THROWS_WITH_AS(strata::read_metrics(dir.path / "absent.jsonl"), doctest::Contains("cannot open"),
                         strata::error);
}

}  // namespace metrics_test
