// parse_bytes: the sizes of --device-budget, --host-budget and --storage-budget.
#include <strata/core/bytes.hpp>  // parse_bytes
#include <strata/core/error.hpp>  // strata::error

#include <doctest/doctest.h>

namespace bytes_test {  // this file's names: an area's files compile as one unit (unity build)

TEST_CASE("parse_bytes reads plain counts and binary units") {
    CHECK(strata::parse_bytes("1234", "--device-budget") == 1234);
    CHECK(strata::parse_bytes("100B", "--device-budget") == 100);
    CHECK(strata::parse_bytes("64KiB", "--device-budget") == 64 * 1024);
    CHECK(strata::parse_bytes("512M", "--device-budget") == 512ull << 20);
    CHECK(strata::parse_bytes("1.5G", "--device-budget") == 3ull << 29);
    CHECK(strata::parse_bytes("12GiB", "--device-budget") == 12ull << 30);
    CHECK(strata::parse_bytes("16T", "--device-budget") == 16ull << 40);
    CHECK_THROWS_WITH_AS(strata::parse_bytes("12 GB", "--host-budget"),
                         doctest::Contains("--host-budget '12 GB' is not a byte count"), strata::error);
    CHECK_THROWS_AS(strata::parse_bytes("-1G", "--host-budget"), strata::error);
}

// Found by fuzz/byte_size.cpp: each converted a double out of size_t's range (undefined behavior).
TEST_CASE("parse_bytes refuses sizes past 2^64 bytes, infinity and NaN") {
    CHECK_THROWS_WITH_AS(strata::parse_bytes("21661616T", "--device-budget"),
                         doctest::Contains("more bytes than a 64-bit count holds"), strata::error);
    CHECK_THROWS_AS(strata::parse_bytes("1e30", "--device-budget"), strata::error);
    CHECK_THROWS_AS(strata::parse_bytes("infG", "--device-budget"), strata::error);
    CHECK_THROWS_AS(strata::parse_bytes("nan", "--device-budget"), strata::error);
    CHECK(strata::parse_bytes("16383T", "--device-budget") == 16383ull << 40);
}

}  // namespace bytes_test
