// JSON files: atomic round trip, parse errors located by line and column, field access errors that
// name the file and key.
#include <strata/io/json_file.hpp>  // read_json_file, write_json_file, parse_json_text, json_field

#include "scratch_dir.hpp"  // scratch_dir, read_text, write_text

#include <doctest/doctest.h>

#include <cstdint>  // std::int64_t
#include <string>   // std::string
#include <vector>   // std::vector

namespace json_file_test {  // this file's names: an area's files compile as one unit (unity build)

using strata::test::read_text;
using strata::test::scratch_dir;
using strata::test::write_text;

TEST_CASE("write_json_file and read_json_file round trip, keeping key order for ordered_json") {
    scratch_dir dir;
    nlohmann::ordered_json manifest;
    manifest["step"] = 100;
    manifest["files"] = {"model.safetensors", "optimizer.safetensors"};
    manifest["lr"] = 3e-4;
    strata::write_json_file(dir / "manifest.json", manifest);
    CHECK(read_text(dir / "manifest.json") ==
          "{\n  \"step\": 100,\n  \"files\": [\n    \"model.safetensors\",\n    \"optimizer.safetensors\"\n  ],\n"
          "  \"lr\": 0.0003\n}\n");
    CHECK(strata::read_json_file<nlohmann::ordered_json>(dir / "manifest.json") == manifest);
    CHECK(dir.list() == std::vector<std::string>{"manifest.json"});
}

TEST_CASE("a parse error names the file, the line and the column") {
    scratch_dir dir;
    write_text(dir / "bad.json", "{\n  \"a\": 1,\n  \"b\": tru\n}\n");
    try {
        (void)strata::read_json_file(dir / "bad.json");
        FAIL("expected strata::error");
    } catch (const strata::error& e) {
        const std::string what = e.what();
        CHECK(what.find((dir / "bad.json").string()) != std::string::npos);
        CHECK(what.find("line 3, column 11: syntax error") != std::string::npos);
        CHECK(what.find("invalid literal") != std::string::npos);
        CHECK(e.hint().find("not valid JSON") != std::string::npos);
    }
}

TEST_CASE("an empty or truncated file is reported as such") {
    CHECK_THROWS_WITH_AS(strata::parse_json_text("", "empty.json"), doctest::Contains("empty.json"),
                         strata::error);
    CHECK_THROWS_WITH_AS(strata::parse_json_text("", "empty.json"), doctest::Contains("the file is empty"),
                         strata::error);
    CHECK_THROWS_WITH_AS(strata::parse_json_text("{\"a\": [1, 2", "cut.json"),
                         doctest::Contains("line 1, column 12: syntax error while parsing array"), strata::error);
    CHECK_THROWS_WITH_AS(strata::parse_json_text("[1,\n\n ]", "comma.json"),
                         doctest::Contains("at line 3, column 2"), strata::error);
}

TEST_CASE("a missing JSON file is an error naming its path") {
    scratch_dir dir;
    CHECK_THROWS_WITH_AS((void)strata::read_json_file(dir / "absent.json"),
                         doctest::Contains("absent.json': No such file or directory"), strata::error);
}

TEST_CASE("json_field names the source and key when a field is missing or of the wrong type") {
    const auto config = strata::parse_json_text(R"({"n_layer": 12, "name": "gpt2"})", "config.json");
    CHECK(strata::json_field<std::int64_t>(config, "n_layer", "config.json") == 12);
    CHECK(strata::json_field<std::string>(config, "name", "config.json") == "gpt2");
    CHECK_THROWS_WITH_AS((void)strata::json_field<int>(config, "n_head", "config.json"),
                         doctest::Contains("'config.json' has no field 'n_head'"), strata::error);
    CHECK_THROWS_WITH_AS((void)strata::json_field<int>(config, "name", "config.json"),
                         doctest::Contains("field 'name' of 'config.json' is a string"), strata::error);
    CHECK_THROWS_WITH_AS((void)strata::json_field<int>(nlohmann::json::array(), "x", "list.json"),
                         doctest::Contains("is a array, not an object"), strata::error);
}

TEST_CASE("write_json_file refuses invalid UTF-8 and leaves the old file") {
    scratch_dir dir;
    write_text(dir / "m.json", "{}\n");
    nlohmann::json bad;
    bad["name"] = std::string("\xff\xfe");
    CHECK_THROWS_WITH_AS(strata::write_json_file(dir / "m.json", bad), doctest::Contains("m.json"),
                         strata::error);
    CHECK(read_text(dir / "m.json") == "{}\n");
}

// Found by fuzz/checkpoint_json.cpp: nlohmann throws out_of_range, not parse_error, for a number
// past a double's range, and it escaped as a foreign exception type.
TEST_CASE("a number too large for a double is a strata::error naming the file") {
    CHECK_THROWS_WITH_AS(strata::parse_json_text("{\"step\": 1e400}", "trainer_state.json"),
                         doctest::Contains("'trainer_state.json': [json.exception.out_of_range.406] number overflow"),
                         strata::error);
}

// Found by fuzz/checkpoint_json.cpp: json_field<long> of 1e30 converted a double out of long's range
// (undefined behavior); 2.5 and true were read as 2 and 1.
TEST_CASE("json_field of an integer type takes only a JSON integer that fits") {
    const auto state = nlohmann::json::parse(
        R"({"step": 1e30, "half": 2.5, "flag": true, "negative": -1, "big": 18446744073709551615, "ok": 300})");
    CHECK(strata::json_field<long>(state, "ok", "trainer_state.json") == 300);
    CHECK(strata::json_field<long>(state, "negative", "trainer_state.json") == -1);
    CHECK_THROWS_WITH_AS(strata::json_field<long>(state, "step", "trainer_state.json"),
                         doctest::Contains("field 'step' of 'trainer_state.json' is a number (1e+30), not an integer in"),
                         strata::error);
    CHECK_THROWS_AS(strata::json_field<long>(state, "half", "s.json"), strata::error);
    CHECK_THROWS_AS(strata::json_field<long>(state, "flag", "s.json"), strata::error);
    CHECK_THROWS_AS(strata::json_field<long>(state, "big", "s.json"), strata::error);
    CHECK_THROWS_AS(strata::json_field<std::uint64_t>(state, "negative", "s.json"), strata::error);
    CHECK(strata::json_field<std::uint64_t>(state, "big", "s.json") == 18446744073709551615ull);
    CHECK(strata::json_field<double>(state, "half", "s.json") == 2.5);
}

}  // namespace json_file_test
