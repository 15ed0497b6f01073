// The safetensors reader on arbitrary bytes, from memory and from a file: it either opens the
// file or throws strata::error, never crashes; both ways agree; a file that opened satisfies the
// format's invariants (safetensors_common.hpp), its typed reads return the tensor or a
// strata::error (wrong type, misalignment), and written again by safetensors_writer it reads back
// identically. open_header() opens exactly the files open() opens, and read_as_float() gives the
// same bits through both.
#include "safetensors_common.hpp"  // check_file, same_contents

#include <strata/io/safetensors.hpp>  // safetensors_file

#include <cstddef>      // std::byte, std::size_t
#include <cstdint>      // std::uint8_t
#include <cstdio>       // std::FILE, std::fopen, std::fwrite
#include <cstring>      // std::memcmp
#include <memory>       // std::unique_ptr
#include <optional>     // std::optional
#include <span>         // std::span
#include <string>       // std::string
#include <vector>       // std::vector

#include <unistd.h>  // getpid

namespace {

template <class T>
void check_typed_reads(const strata::safetensors_file& f, const std::string& name) {
    const strata::safetensors_tensor_info& t = f.info(name);
    std::span<const T> view;
    if (strata::fuzz::parses([&] { view = f.get<T>(name); })) {
        FUZZ_CHECK(t.dtype == strata::safetensors_dtype_v<T>);
        FUZZ_CHECK(view.size() == t.element_count() && view.size_bytes() == t.bytes.size());
    }
    const auto n = static_cast<std::size_t>(t.element_count());
    const std::unique_ptr<T[]> copy(new T[n]);  // not std::vector, which has no span for bool
    if (strata::fuzz::parses([&] { f.copy_to<T>(name, std::span<T>(copy.get(), n)); }))
        FUZZ_CHECK(t.dtype == strata::safetensors_dtype_v<T>);
    std::vector<std::size_t> other_shape = t.shape;
    other_shape.push_back(1);  // one more dimension: never the tensor's shape
    FUZZ_CHECK(!strata::fuzz::parses([&] { f.copy_to<T>(name, std::span<T>(copy.get(), n), other_shape); }));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    std::optional<strata::safetensors_file> memory;
    const bool opened = strata::fuzz::parses([&] { memory.emplace(strata::safetensors_file::from_bytes(bytes)); });

    // The loader from a file reads through another path (its own header-length read and buffer).
    static const std::string path = "/tmp/strata-fuzz-safetensors-" + std::to_string(::getpid()) + ".safetensors";
    std::FILE* out = std::fopen(path.c_str(), "wb");
    FUZZ_CHECK(out != nullptr);
    FUZZ_CHECK(std::fwrite(data, 1, size, out) == size);
    FUZZ_CHECK(std::fclose(out) == 0);
    std::optional<strata::safetensors_file> file;
    FUZZ_CHECK(strata::fuzz::parses([&] { file.emplace(strata::safetensors_file::open(path)); }) == opened);
    std::optional<strata::safetensors_file> header;
    FUZZ_CHECK(strata::fuzz::parses([&] { header.emplace(strata::safetensors_file::open_header(path)); }) == opened);
    if (!opened) return 0;
    FUZZ_CHECK(strata::fuzz::same_contents(*memory, *file));
    FUZZ_CHECK(header->header_only() && header->names() == memory->names());
    for (const std::string& name : memory->names()) {
        const auto n = static_cast<std::size_t>(memory->info(name).element_count());
        if (n > (std::size_t{1} << 24)) continue;  // a huge shape of zero-size dims aside, keep memory bounded
        std::vector<float> a(n), b(n);
        const bool read = strata::fuzz::parses([&] { memory->read_as_float(name, a); });
        FUZZ_CHECK(strata::fuzz::parses([&] { header->read_as_float(name, b); }) == read);
        if (read) FUZZ_CHECK(n == 0 || std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0);
        FUZZ_CHECK(!strata::fuzz::parses([&] { (void)header->bytes(name); }));
    }

    strata::fuzz::check_file(*memory, size);
    for (const std::string& name : memory->names()) {
        check_typed_reads<float>(*memory, name);
        check_typed_reads<bool>(*memory, name);
        check_typed_reads<std::int64_t>(*memory, name);
        check_typed_reads<std::uint16_t>(*memory, name);
    }
    FUZZ_CHECK(!strata::fuzz::parses([&] { (void)memory->info("\xff not a name"); }));
    return 0;
}
