// Byte arithmetic shared by every tier: page alignment, human-readable sizes and sizes read from a
// command line (--device-budget 12G).
#pragma once

#include <strata/core/error.hpp>  // strata::error

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uintptr_t
#include <cstdio>   // std::snprintf
#include <string>   // std::string, std::stod

namespace strata {

// Every tier allocation is aligned to and padded to this: O_DIRECT needs it on the storage tier,
// and one page-aligned block per layer is what lets one DMA burst or one pread move a layer.
inline constexpr std::size_t page_size = 4096;

constexpr std::size_t round_up(std::size_t n, std::size_t multiple) {
    return (n + multiple - 1) / multiple * multiple;
}

constexpr std::size_t round_down(std::size_t n, std::size_t multiple) { return n / multiple * multiple; }

constexpr bool is_aligned(std::size_t n, std::size_t multiple) { return n % multiple == 0; }

inline bool is_aligned(const void* p, std::size_t multiple) {
    return reinterpret_cast<std::uintptr_t>(p) % multiple == 0;
}

// "1.50 GiB": short, for tables.
inline std::string format_bytes_short(std::size_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes);
    int unit = 0;
    while (value >= 1024.0 && unit < 4) {
        value /= 1024.0;
        ++unit;
    }
    char buf[32];
    if (unit == 0)
        std::snprintf(buf, sizeof buf, "%zu B", bytes);
    else
        std::snprintf(buf, sizeof buf, "%.2f %s", value, units[unit]);
    return buf;
}

// "1.50 GiB (1610612736 B)": the exact count keeps error messages unambiguous.
inline std::string format_bytes(std::size_t bytes) {
    const std::string rounded = format_bytes_short(bytes);
    return bytes < 1024 ? rounded : rounded + " (" + std::to_string(bytes) + " B)";
}

// Parses "1234", "512M", "16G" (binary units) into bytes; `flag` names the option in errors.
inline std::size_t parse_bytes(const std::string& text, const std::string& flag) {
    std::size_t pos = 0;
    double value = 0;
    try {
        value = std::stod(text, &pos);
    } catch (...) {
        pos = 0;
    }
    std::string unit = text.substr(pos);
    double scale = 1;
    if (unit == "K" || unit == "KiB") scale = 1024.0;
    else if (unit == "M" || unit == "MiB") scale = 1024.0 * 1024;
    else if (unit == "G" || unit == "GiB") scale = 1024.0 * 1024 * 1024;
    else if (unit == "T" || unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
    else if (!unit.empty() && unit != "B") pos = 0;
    // !(value >= 0) also refuses NaN; "inf" and 1e30G do not fit, and converting them is undefined.
    if (pos == 0 || !(value >= 0))
        throw error(flag + " '" + text + "' is not a byte count", "write it like 1073741824, 512M or 16G");
    const double bytes = value * scale;
    if (!(bytes < 18446744073709551616.0))  // 2^64
        throw error(flag + " '" + text + "' is more bytes than a 64-bit count holds", "write it like 512M or 16G");
    return static_cast<std::size_t>(bytes);
}

}  // namespace strata
