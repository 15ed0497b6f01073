// The size parser behind --device-budget, --host-budget and --storage-budget (parse_bytes in
// strata/core/bytes.hpp). It returns a byte count or throws strata::error; a count it returns is
// the number written times its unit, exactly when that is an integer below 2^53 (doubles are exact
// there), and formatting a count and parsing it back gives the same count.
#include "fuzz_check.hpp"

#include <strata/core/bytes.hpp>  // parse_bytes

#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint8_t, std::uint64_t
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view

namespace {

// digits, then optionally one of the units: the plain form, whose value we can compute exactly.
bool plain_value(std::string_view text, std::uint64_t& value) {
    std::size_t digits = 0;
    value = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
        if (value > (std::uint64_t{1} << 53) / 10) return false;
        value = value * 10 + static_cast<std::uint64_t>(text[digits++] - '0');
    }
    if (digits == 0) return false;
    const std::string_view unit = text.substr(digits);
    int shift = -1;
    if (unit.empty() || unit == "B") shift = 0;
    if (unit == "K" || unit == "KiB") shift = 10;
    if (unit == "M" || unit == "MiB") shift = 20;
    if (unit == "G" || unit == "GiB") shift = 30;
    if (unit == "T" || unit == "TiB") shift = 40;
    if (shift < 0 || value > (std::uint64_t{1} << (53 - shift))) return false;
    value <<= shift;
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::size_t bytes = 0;
    const bool parsed = strata::fuzz::parses([&] { bytes = strata::parse_bytes(text, "--device-budget"); });
    std::uint64_t expected = 0;
    if (plain_value(text, expected)) {
        FUZZ_CHECK(parsed);
        FUZZ_CHECK(bytes == expected);
    }
    if (parsed) {
        for (const std::string& again : {std::to_string(bytes), std::to_string(bytes) + "B"}) {
            std::size_t back = 0;
            FUZZ_CHECK(strata::fuzz::parses([&] { back = strata::parse_bytes(again, "--host-budget"); }));
            FUZZ_CHECK(back == bytes || bytes > (std::size_t{1} << 53));  // doubles round past 2^53
        }
    }
    return 0;
}
