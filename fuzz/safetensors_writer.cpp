// safetensors_writer driven by the fuzzer: tensors of any dtype, shape, name and contents, and
// metadata. add() and set_metadata() accept or throw strata::error; whatever was accepted is
// written, reads back identically (names in order, dtypes, shapes, bytes, metadata), and the
// read satisfies the format's invariants (safetensors_common.hpp).
#include "safetensors_common.hpp"  // check_file

#include <strata/io/safetensors.hpp>  // safetensors_writer, safetensors_file

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>  // std::byte, std::size_t
#include <cstdint>  // std::uint8_t
#include <map>      // std::map
#include <string>   // std::string
#include <vector>   // std::vector

namespace {

struct expected_tensor {
    std::string name;
    strata::safetensors_dtype dtype;
    std::vector<std::size_t> shape;
    std::vector<std::byte> bytes;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    strata::safetensors_writer w;
    std::vector<expected_tensor> tensors;
    std::map<std::string, std::string> metadata;
    while (in.remaining_bytes() > 0) {
        if (in.ConsumeIntegralInRange(0, 7) == 0) {  // metadata now and then
            std::string key = in.ConsumeRandomLengthString(16), value = in.ConsumeRandomLengthString(32);
            if (strata::fuzz::parses([&] { w.set_metadata(key, value); })) metadata[key] = value;
            continue;
        }
        expected_tensor t;
        t.name = in.ConsumeRandomLengthString(24);
        t.dtype = static_cast<strata::safetensors_dtype>(in.ConsumeIntegralInRange(0, 14));
        const std::size_t rank = in.ConsumeIntegralInRange(0, 4);
        for (std::size_t i = 0; i < rank; ++i)
            t.shape.push_back(in.ConsumeBool() ? in.ConsumeIntegralInRange<std::size_t>(0, 6) : in.ConsumeIntegral<std::size_t>());
        // Usually the right number of bytes, now and then not.
        const std::optional<std::uint64_t> wanted = strata::detail::tensor_byte_count(t.shape, t.dtype);
        std::size_t n = wanted && *wanted <= 4096 ? static_cast<std::size_t>(*wanted) : 0;
        if (in.ConsumeIntegralInRange(0, 15) == 0) n = in.ConsumeIntegralInRange<std::size_t>(0, 64);
        const std::vector<std::uint8_t> raw = in.ConsumeBytes<std::uint8_t>(n);
        for (std::uint8_t b : raw) t.bytes.push_back(static_cast<std::byte>(b));
        const bool accepted = strata::fuzz::parses([&] { w.add(t.name, t.dtype, t.shape, t.bytes); });
        bool valid = !t.name.empty() && t.name != "__metadata__" && wanted && *wanted == t.bytes.size() &&
                     strata::detail::is_valid_utf8(t.name);
        for (const expected_tensor& e : tensors) valid &= e.name != t.name;
        FUZZ_CHECK(accepted == valid);
        if (accepted) tensors.push_back(std::move(t));
    }
    FUZZ_CHECK(w.size() == tensors.size());

    const std::vector<std::byte> file = w.to_bytes();
    const strata::safetensors_file f = strata::safetensors_file::from_bytes(file, "written");
    FUZZ_CHECK(f.size() == tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const expected_tensor& e = tensors[i];
        FUZZ_CHECK(f.names()[i] == e.name);
        const strata::safetensors_tensor_info& t = f.info(e.name);
        FUZZ_CHECK(t.dtype == e.dtype && t.shape == e.shape && t.bytes.size() == e.bytes.size());
        FUZZ_CHECK(e.bytes.empty() || std::memcmp(t.bytes.data(), e.bytes.data(), e.bytes.size()) == 0);
    }
    FUZZ_CHECK(std::map<std::string, std::string>(f.metadata().begin(), f.metadata().end()) == metadata);
    strata::fuzz::check_file(f, file.size());
    return 0;
}
