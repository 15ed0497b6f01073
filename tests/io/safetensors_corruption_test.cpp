// Corrupt safetensors files: each defect is refused with a strata::error that names it, and never
// reaches a crash or an out-of-bounds read (run under AddressSanitizer).
#include <strata/io/safetensors.hpp>  // safetensors_file, safetensors_writer

#include "scratch_dir.hpp"  // scratch_dir, write_bytes

#include <doctest/doctest.h>

#include <cstddef>   // std::byte
#include <cstdint>   // std::uint64_t
#include <optional>  // std::optional
#include <string>    // std::string
#include <vector>    // std::vector

namespace safetensors_corruption_test {  // this file's names: an area's files compile as one unit (unity build)

using strata::safetensors_file;

namespace {

// 8-byte length (the real one unless `declared` says otherwise), the header as given, then the buffer.
std::vector<std::byte> make_file(const std::string& header, std::vector<std::byte> buffer,
                                 std::optional<std::uint64_t> declared = std::nullopt) {
    const std::uint64_t n = declared.value_or(header.size());
    std::vector<std::byte> file;
    for (int i = 0; i < 8; ++i) file.push_back(static_cast<std::byte>((n >> (8 * i)) & 0xff));
    for (char c : header) file.push_back(static_cast<std::byte>(c));
    file.insert(file.end(), buffer.begin(), buffer.end());
    return file;
}

std::vector<std::byte> zeros(std::size_t n) { return std::vector<std::byte>(n); }

std::string open_error(const std::vector<std::byte>& file) {
    try {
        (void)safetensors_file::from_bytes(file, "bad.safetensors");
    } catch (const strata::error& e) {
        return e.what();
    }
    return "(opened without error)";
}

// One F32 [2] tensor with the given offsets, in a buffer of `buffer_size` bytes.
std::vector<std::byte> one_tensor(const std::string& offsets, std::size_t buffer_size) {
    return make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":)" + offsets + "}}", zeros(buffer_size));
}

}  // namespace

TEST_CASE("a file shorter than the 8-byte length is refused") {
    CHECK(open_error({}).find("is 0 bytes long, shorter than the 8-byte header length") != std::string::npos);
    CHECK(open_error(zeros(5)).find("is 5 bytes long") != std::string::npos);
}

TEST_CASE("a header length beyond the file or beyond 100 MB is refused before anything is parsed") {
    CHECK(open_error(make_file("{}", {}, 10)).find("the header length is 10 bytes, larger than the 2 bytes") !=
          std::string::npos);
    CHECK(open_error(make_file("{}", {}, 100'000'001)).find("above the limit of 100000000") != std::string::npos);
    CHECK(open_error(make_file("{}", {}, ~std::uint64_t{0})).find("above the limit") != std::string::npos);
}

TEST_CASE("a truncated file on disk is refused with its path") {
    strata::safetensors_writer writer;
    writer.add("w", {4}, std::vector<float>{1, 2, 3, 4});
    std::vector<std::byte> file = writer.to_bytes();
    file.erase(file.end() - 3, file.end());  // resize(size() - 3) trips a GCC 12 -Wstringop-overflow false alarm
    strata::test::scratch_dir dir;
    strata::test::write_bytes(dir / "cut.safetensors", file);
    CHECK_THROWS_WITH_AS((void)safetensors_file::open(dir / "cut.safetensors"),
                         doctest::Contains("cut.safetensors': tensor 'w' has data_offsets [0, 16] that reach past "
                                           "the end of the 13-byte buffer"),
                         strata::error);
    // Cut inside the header: the declared length no longer fits.
    file.erase(file.begin() + 20, file.end());
    strata::test::write_bytes(dir / "cut.safetensors", file);
    CHECK_THROWS_WITH_AS((void)safetensors_file::open(dir / "cut.safetensors"),
                         doctest::Contains("larger than the 12 bytes that follow it"), strata::error);
}

TEST_CASE("a header that is not a JSON object is refused") {
    CHECK(open_error(make_file(R"({"a": })", {})).find("the header is not valid JSON") != std::string::npos);
    CHECK(open_error(make_file(R"({} trailing)", {})).find("the header is not valid JSON") != std::string::npos);
    CHECK(open_error(make_file("{\"a\xff\":1}", {})).find("the header is not valid JSON") != std::string::npos);
    CHECK(open_error(make_file(R"([1, 2])", {})).find("does not start with '{'") != std::string::npos);
    CHECK(open_error(make_file("", {})).find("does not start with '{'") != std::string::npos);
    CHECK(open_error(make_file(R"({"a": 5})", {})).find("tensor 'a' is described by a JSON number, not an object") !=
          std::string::npos);
}

TEST_CASE("duplicate keys are refused, not silently merged") {
    const std::string entry = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
    CHECK(open_error(make_file(R"({"a":)" + entry + R"(,"a":)" + entry + "}", zeros(1)))
              .find("the header lists 'a' twice") != std::string::npos);
    CHECK(open_error(make_file(R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", zeros(1)))
              .find("the header entry 'a' has the field 'dtype' twice") != std::string::npos);
    CHECK(open_error(make_file(R"({"__metadata__":{"k":"1","k":"2"}})", {}))
              .find("the header entry '__metadata__' has the field 'k' twice") != std::string::npos);
}

TEST_CASE("an unknown or malformed dtype is refused and the known ones are listed") {
    const std::string message =
        open_error(make_file(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", zeros(4)));
    CHECK(message.find("tensor 'a' has the unknown dtype \"F33\"") != std::string::npos);
    CHECK(message.find("strata reads BOOL, U8, I8") != std::string::npos);
    CHECK(open_error(make_file(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", zeros(4)))
              .find("unknown dtype 4") != std::string::npos);
}

TEST_CASE("missing fields and malformed shapes or offsets are refused") {
    CHECK(open_error(make_file(R"({"a":{"dtype":"F32","shape":[1]}})", zeros(4)))
              .find("tensor 'a' has no \"data_offsets\"") != std::string::npos);
    CHECK(open_error(make_file(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", zeros(4)))
              .find("tensor 'a' has no \"dtype\"") != std::string::npos);
    CHECK(open_error(make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", zeros(4)))
              .find("\"shape\" is [-1], not a list of non-negative integers") != std::string::npos);
    CHECK(open_error(make_file(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", zeros(4)))
              .find("not a list of non-negative integers") != std::string::npos);
    CHECK(open_error(make_file(R"({"a":{"dtype":"F32","shape":3,"data_offsets":[0,4]}})", zeros(4)))
              .find("\"shape\" is 3, not a list") != std::string::npos);
    CHECK(open_error(one_tensor("[0,4,8]", 8)).find("\"data_offsets\" has 3 numbers, not [begin, end]") !=
          std::string::npos);
    CHECK(open_error(one_tensor("[8,0]", 8)).find("data_offsets [8, 0] that end before they begin") !=
          std::string::npos);
}

TEST_CASE("shape times dtype size must equal the span of data_offsets") {
    CHECK(open_error(one_tensor("[0,12]", 12))
              .find("tensor 'a' has shape [2] of F32, which needs 8 bytes, but its data_offsets [0, 12] span 12") !=
          std::string::npos);
    CHECK(open_error(make_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", {}))
              .find("whose byte size overflows") != std::string::npos);
}

TEST_CASE("offsets outside the buffer are refused") {
    CHECK(open_error(one_tensor("[4,12]", 8)).find("data_offsets [4, 12] that reach past the end of the 8-byte buffer") !=
          std::string::npos);
    CHECK(open_error(one_tensor("[18446744073709551608,18446744073709551615]", 8)).find("reach past the end") !=
          std::string::npos);
}

TEST_CASE("overlapping, gapped or incomplete coverage of the buffer is refused") {
    const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":)";
    const std::string b = R"("b":{"dtype":"F32","shape":[2],"data_offsets":)";
    CHECK(open_error(make_file("{" + a + "[0,8]}," + b + "[4,12]}}", zeros(12)))
              .find("tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a', which ends at 8") != std::string::npos);
    CHECK(open_error(make_file("{" + a + "[0,8]}," + b + "[0,8]}}", zeros(8))).find("overlaps") != std::string::npos);
    CHECK(open_error(make_file("{" + a + "[0,8]}," + b + "[12,20]}}", zeros(20)))
              .find("bytes [8, 12) of the buffer belong to no tensor") != std::string::npos);
    CHECK(open_error(make_file("{" + b + "[4,12]}}", zeros(12))).find("bytes [0, 4) of the buffer belong to no tensor") !=
          std::string::npos);
    CHECK(open_error(make_file("{" + a + "[0,8]}}", zeros(11)))
              .find("the tensors cover 8 bytes of the 11-byte buffer") != std::string::npos);
    CHECK(open_error(make_file("{}", zeros(3))).find("cover 0 bytes of the 3-byte buffer") != std::string::npos);
    // A zero-sized tensor may sit anywhere on a boundary, but not inside another tensor.
    const std::string z = R"("z":{"dtype":"F32","shape":[0],"data_offsets":)";
    CHECK(open_error(make_file("{" + a + "[0,8]}," + z + "[4,4]}}", zeros(8))).find("tensor 'z'") != std::string::npos);
    CHECK_NOTHROW((void)safetensors_file::from_bytes(make_file("{" + z + "[8,8]}," + a + "[0,8]}}", zeros(8))));
    CHECK_NOTHROW((void)safetensors_file::from_bytes(make_file("{" + z + "[0,0]}," + a + "[0,8]}}", zeros(8))));
}

TEST_CASE("metadata must be an object of strings") {
    CHECK(open_error(make_file(R"({"__metadata__":["a"]})", {})).find("__metadata__ is a JSON array") !=
          std::string::npos);
    CHECK(open_error(make_file(R"({"__metadata__":{"step":100}})", {}))
              .find("__metadata__ entry 'step' is a JSON number") != std::string::npos);
}

TEST_CASE("every error names the file and carries a hint") {
    try {
        (void)safetensors_file::from_bytes(one_tensor("[0,12]", 12), "model-00001.safetensors");
        FAIL("expected strata::error");
    } catch (const strata::error& e) {
        CHECK(std::string(e.what()).starts_with("safetensors: 'model-00001.safetensors': "));
        CHECK_FALSE(e.hint().empty());
    }
}

// Every single-byte truncation and every header byte flipped must end in a clean error or a valid
// file, never in a crash: AddressSanitizer watches the reads.
TEST_CASE("truncations and byte flips of a valid file never crash the reader") {
    strata::safetensors_writer writer;
    writer.add("w", {2, 2}, std::vector<float>{1, 2, 3, 4});
    writer.add("b", {3}, std::vector<std::uint8_t>{1, 1, 0});
    writer.set_metadata("k", "v");
    const std::vector<std::byte> good = writer.to_bytes();
    int refused = 0;
    for (std::size_t cut = 0; cut < good.size(); ++cut) {
        const std::vector<std::byte> truncated(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut));
        CHECK_THROWS_AS((void)safetensors_file::from_bytes(truncated), strata::error);
    }
    const std::size_t header_end = 8 + static_cast<std::size_t>(good[0]);
    for (std::size_t i = 0; i < header_end; ++i) {
        std::vector<std::byte> flipped = good;
        flipped[i] ^= std::byte{0x5a};
        try {
            (void)safetensors_file::from_bytes(flipped);
        } catch (const strata::error&) {
            ++refused;
        }
    }
    CHECK(refused > static_cast<int>(header_end) / 2);
}

// Found by fuzz/safetensors.cpp: nlohmann throws out_of_range, not parse_error, for a number past a
// double's range, and it escaped the reader as a foreign exception type.
TEST_CASE("a header number too large for a double is refused as corrupt") {
    const std::string error = open_error(make_file(R"({"x":{"dtype":"U8","shape":[1e400],"data_offsets":[0,1]}}   )", zeros(1)));
    CHECK(error.find("the header is not valid JSON") != std::string::npos);
    CHECK(error.find("number overflow") != std::string::npos);
}

// Found by fuzz/safetensors.cpp: the reader took a tensor named "", which safetensors_writer
// refuses, so a file strata opened could not be written back.
TEST_CASE("a tensor with an empty name is refused") {
    CHECK(open_error(make_file(R"({"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}    )", {}))
              .find("a tensor has an empty name") != std::string::npos);
}

}  // namespace safetensors_corruption_test
