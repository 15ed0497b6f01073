// What both safetensors harnesses check of a file that was read successfully.
#pragma once

#include "fuzz_check.hpp"

#include <strata/io/safetensors.hpp>  // safetensors_file, safetensors_writer

#include <cstddef>  // std::byte, std::size_t
#include <cstdint>  // std::uint64_t
#include <string>   // std::string
#include <vector>   // std::vector

namespace strata::fuzz {

// Two reads hold the same tensors (names in order, dtypes, shapes, bytes) and metadata.
inline bool same_contents(const safetensors_file& a, const safetensors_file& b) {
    if (a.names() != b.names() || a.metadata() != b.metadata()) return false;
    for (const std::string& name : a.names()) {
        const safetensors_tensor_info &x = a.info(name), &y = b.info(name);
        if (x.dtype != y.dtype || x.shape != y.shape || x.bytes.size() != y.bytes.size()) return false;
        if (!x.bytes.empty() && std::memcmp(x.bytes.data(), y.bytes.data(), x.bytes.size()) != 0) return false;
    }
    return true;
}

// The invariants of a file that opened, then: written again by safetensors_writer, it reads back
// identically, and writing that gives the same bytes.
inline void check_file(const safetensors_file& f, std::uint64_t file_size) {
    FUZZ_CHECK(f.size() == f.names().size());
    std::uint64_t total = 0;
    for (const std::string& name : f.names()) {
        FUZZ_CHECK(f.contains(name) && name != "__metadata__");
        const safetensors_tensor_info& t = f.info(name);
        FUZZ_CHECK(t.begin <= t.end && t.end - t.begin == t.bytes.size());
        FUZZ_CHECK(t.bytes.size() == t.element_count() * element_size(t.dtype));
        total += t.bytes.size();
    }
    FUZZ_CHECK(8 + f.header_size() + total == file_size);  // the tensors tile the buffer

    safetensors_writer w;
    for (const auto& [key, value] : f.metadata()) w.set_metadata(key, value);
    for (const std::string& name : f.names()) {
        const safetensors_tensor_info& t = f.info(name);
        w.add(name, t.dtype, t.shape, t.bytes);
    }
    const std::vector<std::byte> written = w.to_bytes();
    const safetensors_file again = safetensors_file::from_bytes(written, "rewritten");
    FUZZ_CHECK(same_contents(f, again));
    FUZZ_CHECK(again.header_size() % 8 == 0);

    safetensors_writer w2;
    for (const auto& [key, value] : again.metadata()) w2.set_metadata(key, value);
    for (const std::string& name : again.names()) {
        const safetensors_tensor_info& t = again.info(name);
        w2.add_view(name, t.dtype, t.shape, t.bytes);
    }
    FUZZ_CHECK(w2.to_bytes() == written);
}

}  // namespace strata::fuzz
