// safetensors: round trips of every typed dtype, byte-exact agreement with hand-built files, and the
// errors of the writer and of typed reads. Corrupt files are in safetensors_corruption_test.cpp.
#include <strata/io/safetensors.hpp>  // safetensors_writer, safetensors_file, safetensors_dtype

#include "scratch_dir.hpp"  // scratch_dir, read_bytes, write_bytes

#include <doctest/doctest.h>

#include <array>    // std::array
#include <cstddef>  // std::byte
#include <cstdint>  // fixed-width integer types
#include <string>   // std::string
#include <vector>   // std::vector

namespace safetensors_test {  // this file's names: an area's files compile as one unit (unity build)

using strata::safetensors_dtype;
using strata::safetensors_file;
using strata::safetensors_writer;
using strata::test::scratch_dir;

namespace {

std::vector<std::byte> bytes_of(std::initializer_list<int> values) {
    std::vector<std::byte> bytes;
    for (int v : values) bytes.push_back(static_cast<std::byte>(v));
    return bytes;
}

std::vector<std::byte> bytes_of(std::string_view text) {
    const auto* first = reinterpret_cast<const std::byte*>(text.data());
    return {first, first + text.size()};
}

template <class T>
std::vector<T> sample_values(std::size_t count) {
    std::vector<T> values(count);
    for (std::size_t i = 0; i < count; ++i) {
        if constexpr (std::is_same_v<T, bool>)
            values[i] = i % 3 == 1;
        else if constexpr (std::is_floating_point_v<T>)
            values[i] = static_cast<T>(i) * T(0.5) - T(1.25);
        else
            values[i] = static_cast<T>(i * 37 + 3);  // wraps for narrow types: still distinct patterns
    }
    return values;
}

// std::vector<bool> is not contiguous; a plain array of bool is.
template <class T>
struct values_holder {
    explicit values_holder(std::size_t count) : data(sample_values<T>(count)) {}
    std::vector<T> data;
};
template <>
struct values_holder<bool> {
    explicit values_holder(std::size_t count) : data(new bool[count]), size(count) {
        for (std::size_t i = 0; i < count; ++i) data[i] = i % 3 == 1;
    }
    std::unique_ptr<bool[]> data;
    std::size_t size;
    std::span<const bool> span() const { return {data.get(), size}; }
};

template <class T>
std::span<const T> span_of(const values_holder<T>& holder) {
    if constexpr (std::is_same_v<T, bool>)
        return holder.span();
    else
        return holder.data;
}

}  // namespace

TEST_CASE_TEMPLATE("typed tensors round trip through a file: matrix, scalar and zero-sized", T, float, double,
                   std::int8_t, std::uint8_t, std::int16_t, std::uint16_t, std::int32_t, std::uint32_t,
                   std::int64_t, std::uint64_t, bool) {
    scratch_dir dir;
    const values_holder<T> matrix(12), scalar(1);
    const std::span<const T> matrix_values = span_of(matrix);
    const std::span<const T> scalar_values = span_of(scalar).subspan(0, 1);

    safetensors_writer writer;
    writer.add("layer.0.weight", {3, 4}, matrix_values);
    writer.add("scalar", {}, scalar_values);
    writer.add("empty", {0}, std::span<const T>());
    writer.add("empty_rows", {3, 0}, std::span<const T>());
    writer.write(dir / "t.safetensors");
    CHECK(dir.list() == std::vector<std::string>{"t.safetensors"});

    const safetensors_file file = safetensors_file::open(dir / "t.safetensors");
    CHECK(file.names() == std::vector<std::string>{"layer.0.weight", "scalar", "empty", "empty_rows"});
    const auto& info = file.info("layer.0.weight");
    CHECK(info.dtype == strata::safetensors_dtype_v<T>);
    CHECK(info.shape == std::vector<std::size_t>{3, 4});
    CHECK(info.bytes.size() == 12 * sizeof(T));

    const std::span<const T> read = file.get<T>("layer.0.weight", {3, 4});
    REQUIRE(read.size() == 12);
    for (std::size_t i = 0; i < 12; ++i) CHECK(read[i] == matrix_values[i]);

    CHECK(file.info("scalar").shape.empty());
    CHECK(file.info("scalar").element_count() == 1);
    std::array<T, 1> scalar_read{};
    file.copy_to("scalar", std::span<T>(scalar_read));
    CHECK(scalar_read[0] == scalar_values[0]);

    CHECK(file.get<T>("empty").empty());
    CHECK(file.info("empty_rows").shape == std::vector<std::size_t>{3, 0});
    CHECK(file.info("empty_rows").element_count() == 0);
    file.copy_to("empty_rows", std::span<T>());
}

TEST_CASE("raw dtypes (F16, BF16, FP8) round trip as bytes, with metadata") {
    safetensors_writer writer;
    const auto half = bytes_of({0x00, 0x3c, 0x00, 0xc0});  // F16 1.0, -2.0
    const auto bf16 = bytes_of({0x80, 0x3f, 0x00, 0x40, 0x40, 0x40});  // BF16 1.0, 2.0, 3.0
    const auto fp8 = bytes_of({0x38});
    writer.add("h", safetensors_dtype::f16, {2}, half);
    writer.add("b", safetensors_dtype::bf16, {1, 3}, bf16);
    writer.add("e4m3", safetensors_dtype::f8_e4m3, {}, fp8);
    writer.set_metadata("format", "pt");
    writer.set_metadata("step", "1");
    writer.set_metadata("format", "strata");  // replaces, keeps its place

    const safetensors_file file = safetensors_file::from_bytes(writer.to_bytes());
    CHECK(file.info("h").dtype == safetensors_dtype::f16);
    CHECK(std::ranges::equal(file.bytes("h"), half));
    CHECK(file.info("b").shape == std::vector<std::size_t>{1, 3});
    CHECK(std::ranges::equal(file.bytes("b"), bf16));
    CHECK(std::ranges::equal(file.bytes("e4m3"), fp8));
    CHECK(file.metadata() == std::map<std::string, std::string, std::less<>>{{"format", "strata"}, {"step", "1"}});
    CHECK(writer.header().starts_with(R"({"__metadata__":{"format":"strata","step":"1"},"h":)"));
}

// Built byte by byte from the format description, so the test proves the format and not merely
// that the writer agrees with the reader.
TEST_CASE("the writer's bytes equal a hand-built reference file") {
    const std::string header =
        R"({"__metadata__":{"step":"100"},)"
        R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("s":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
        R"("z":{"dtype":"F32","shape":[0,3],"data_offsets":[16,16]}})";
    REQUIRE(header.size() == 194);  // padded with 6 spaces to 200 = 0xc8, a multiple of 8
    std::vector<std::byte> expected = bytes_of({0xc8, 0, 0, 0, 0, 0, 0, 0});
    const auto header_bytes = bytes_of(header + "      ");
    expected.insert(expected.end(), header_bytes.begin(), header_bytes.end());
    const auto data = bytes_of({0x00, 0x00, 0x80, 0x3f,    // 1.0f
                                0x00, 0x00, 0x00, 0xc0,    // -2.0f
                                7, 0, 0, 0, 0, 0, 0, 0});  // int64 7
    expected.insert(expected.end(), data.begin(), data.end());
    REQUIRE(expected.size() == 8 + 200 + 16);

    safetensors_writer writer;
    writer.add("w", {2}, std::vector<float>{1.0f, -2.0f});
    writer.add("s", {}, std::vector<std::int64_t>{7});
    writer.add("z", {0, 3}, std::vector<float>{});
    writer.set_metadata("step", "100");
    CHECK(writer.to_bytes() == expected);

    scratch_dir dir;
    writer.write(dir / "ref.safetensors");
    CHECK(strata::test::read_bytes(dir / "ref.safetensors") == expected);

    strata::test::write_bytes(dir / "hand.safetensors", expected);
    const safetensors_file file = safetensors_file::open(dir / "hand.safetensors");
    CHECK(file.header_size() == 200);
    CHECK(file.names() == std::vector<std::string>{"w", "s", "z"});
    CHECK(file.get<float>("w")[1] == -2.0f);
    CHECK(file.get<std::int64_t>("s")[0] == 7);
    CHECK(file.info("z").begin == 16);
    CHECK(file.metadata().at("step") == "100");
}

TEST_CASE("an empty writer gives the smallest valid file") {
    safetensors_writer writer;
    const std::vector<std::byte> expected = bytes_of({8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '});
    CHECK(writer.to_bytes() == expected);
    const safetensors_file file = safetensors_file::from_bytes(expected);
    CHECK(file.size() == 0);
    CHECK(file.metadata().empty());
}

// The example from Hugging Face's own documentation: an unpadded 60-byte header (so the buffer
// starts at file offset 68, not a multiple of 8) and no metadata.
TEST_CASE("a file written by another writer: unpadded header, header order differs from data order") {
    const std::string header = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";
    REQUIRE(header.size() == 60);
    std::vector<std::byte> file_bytes = bytes_of({60, 0, 0, 0, 0, 0, 0, 0});
    const auto header_bytes = bytes_of(header);
    file_bytes.insert(file_bytes.end(), header_bytes.begin(), header_bytes.end());
    for (int i = 0; i < 4; ++i) {
        const auto value = bytes_of({i + 1, 0, 0, 0});
        file_bytes.insert(file_bytes.end(), value.begin(), value.end());
    }
    const safetensors_file hf = safetensors_file::from_bytes(file_bytes, "hf-example");
    const std::span<const std::int32_t> test = hf.get<std::int32_t>("test", {2, 2});
    CHECK(std::vector<std::int32_t>(test.begin(), test.end()) == std::vector<std::int32_t>{1, 2, 3, 4});

    // Sorted by name in the header, by dtype in the buffer, as some writers do.
    const std::string reordered =
        R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[8,10]},"b":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})";
    std::vector<std::byte> second = bytes_of({static_cast<int>(reordered.size()), 0, 0, 0, 0, 0, 0, 0});
    const auto reordered_bytes = bytes_of(reordered);
    second.insert(second.end(), reordered_bytes.begin(), reordered_bytes.end());
    const auto data = bytes_of({0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 9, 8});  // 1.0 as F64, then 9, 8
    second.insert(second.end(), data.begin(), data.end());
    const safetensors_file mixed = safetensors_file::from_bytes(second, "mixed");
    CHECK(mixed.names() == std::vector<std::string>{"a", "b"});
    CHECK(mixed.get<double>("b")[0] == 1.0);
    CHECK(mixed.get<std::uint8_t>("a")[1] == 8);
}

TEST_CASE("a tensor at an unaligned offset is copied, not viewed") {
    safetensors_writer writer;
    writer.add("mask", {3}, std::vector<std::uint8_t>{1, 2, 3});
    writer.add("w", {2}, std::vector<float>{0.5f, 4.0f});  // lands at buffer offset 3
    const safetensors_file file = safetensors_file::from_bytes(writer.to_bytes(), "unaligned");
    CHECK_THROWS_WITH_AS((void)file.get<float>("w"), doctest::Contains("tensor 'w' at data_offsets [3, 11) is not aligned"),
                         strata::error);
    std::array<float, 2> w{};
    file.copy_to("w", std::span<float>(w));
    CHECK(w == std::array<float, 2>{0.5f, 4.0f});
}

TEST_CASE("add copies the data; add_view reads it at write time") {
    std::vector<float> copied{1, 2}, viewed{3, 4};
    safetensors_writer writer;
    writer.add("copied", {2}, copied);
    writer.add_view("viewed", safetensors_dtype::f32, {2}, std::as_bytes(std::span(viewed)));
    copied[0] = 100;
    viewed[0] = 300;
    const safetensors_file file = safetensors_file::from_bytes(writer.to_bytes());
    CHECK(file.get<float>("copied")[0] == 1);
    CHECK(file.get<float>("viewed")[0] == 300);
    CHECK(writer.size() == 2);
    CHECK(writer.data_size() == 16);
}

TEST_CASE("declared tensors stream to the file byte for byte as added ones would, in the size file_size() said") {
    scratch_dir dir;
    const std::vector<float> a{1, 2, 3, 4, 5, 6}, b{7, 8};
    const std::vector<double> c{9.5};
    safetensors_writer added;
    added.set_metadata("format", "pt");
    added.add("a", {2, 3}, a);
    added.add("b", {2}, b);
    added.add("c", {1}, c);

    safetensors_writer declared;
    declared.set_metadata("format", "pt");
    declared.declare<float>("a", {2, 3});
    declared.add("b", {2}, b);  // a tensor that carries its bytes goes out when its turn comes
    declared.declare("c", safetensors_dtype::f64, {1});
    CHECK(declared.file_size() == added.to_bytes().size());
    CHECK(declared.data_size() == added.data_size());
    std::vector<float> reused(a);  // one buffer, refilled between the tensors
    declared.write_streamed(dir / "streamed.safetensors", [&](safetensors_writer::stream& out) {
        out.write("a", std::span<const float>(reused));
        reused.assign(6, -1.0f);
        out.write("c", std::as_bytes(std::span(c)));
    });
    CHECK(strata::test::read_bytes(dir / "streamed.safetensors") == added.to_bytes());
    CHECK(std::filesystem::file_size(dir / "streamed.safetensors") == declared.file_size());
    CHECK_THROWS_WITH_AS((void)declared.to_bytes(), doctest::Contains("tensor 'a' was declared without its bytes"),
                         strata::error);
}

TEST_CASE("a streamed write given tensors out of order, of the wrong size or dtype, or incomplete leaves no file") {
    scratch_dir dir;
    safetensors_writer w;
    w.declare<float>("a", {2});
    w.declare<float>("b", {3});
    const std::vector<float> two(2), three(3);
    const std::vector<double> two_doubles(2);
    const auto path = dir / "x.safetensors";
    CHECK_THROWS_WITH_AS(w.write_streamed(path, [&](auto& out) { out.write("b", std::span<const float>(three)); }),
                         doctest::Contains("tensor 'b' was given where 'a' comes next"), strata::error);
    CHECK_THROWS_WITH_AS(w.write_streamed(path, [&](auto& out) { out.write("a", std::span<const float>(three)); }),
                         doctest::Contains("tensor 'a' is 8 bytes ([2] of F32), but 12 bytes were given"), strata::error);
    CHECK_THROWS_WITH_AS(w.write_streamed(path, [&](auto& out) { out.write("a", std::span<const double>(two_doubles)); }),
                         doctest::Contains("tensor 'a' was declared F32 and given as F64"), strata::error);
    CHECK_THROWS_WITH_AS(w.write_streamed(path, [&](auto& out) { out.write("a", std::span<const float>(two)); }),
                         doctest::Contains("tensor 'b' was declared but never given"), strata::error);
    CHECK_THROWS_WITH_AS(w.write_streamed(path,
                                          [&](auto& out) {
                                              out.write("a", std::span<const float>(two));
                                              out.write("b", std::span<const float>(three));
                                              out.write("b", std::span<const float>(three));
                                          }),
                         doctest::Contains("tensor 'b' was given after every declared tensor"), strata::error);
    CHECK(dir.list().empty());  // no target, no temporary
}

TEST_CASE("the writer rejects duplicate names, wrong byte counts and reserved or invalid names") {
    safetensors_writer writer;
    writer.add("w", {2, 3}, std::vector<float>(6));
    CHECK_THROWS_WITH_AS(writer.add("w", {6}, std::vector<float>(6)), doctest::Contains("tensor 'w' was added twice"),
                         strata::error);
    CHECK_THROWS_WITH_AS(writer.add("x", {2, 3}, std::vector<float>(5)),
                         doctest::Contains("tensor 'x' has shape [2, 3] of F32, which is 24 bytes, but 20 bytes were given"),
                         strata::error);
    CHECK_THROWS_WITH_AS(writer.add("y", safetensors_dtype::bf16, {3}, bytes_of({1, 2, 3, 4})),
                         doctest::Contains("shape [3] of BF16, which is 6 bytes, but 4"), strata::error);
    CHECK_THROWS_WITH_AS(writer.add("__metadata__", {1}, std::vector<float>(1)), doctest::Contains("reserved"),
                         strata::error);
    CHECK_THROWS_WITH_AS(writer.add("", {1}, std::vector<float>(1)), doctest::Contains("non-empty name"),
                         strata::error);
    CHECK_THROWS_WITH_AS(writer.add("bad\xff", {1}, std::vector<float>(1)), doctest::Contains("not valid UTF-8"),
                         strata::error);
    CHECK_THROWS_WITH_AS(writer.add("huge", safetensors_dtype::f32, {1ull << 32, 1ull << 32}, {}),
                         doctest::Contains("overflows 64 bits"), strata::error);
    CHECK_THROWS_WITH_AS(writer.set_metadata("k", "\xc3"), doctest::Contains("not valid UTF-8"), strata::error);
    CHECK(writer.size() == 1);  // failed adds leave nothing behind
    CHECK(safetensors_file::from_bytes(writer.to_bytes()).names() == std::vector<std::string>{"w"});
}

TEST_CASE("typed reads name the tensor and both sides of a mismatch") {
    safetensors_writer writer;
    writer.add("w", {2, 3}, std::vector<double>(6, 1.5));
    writer.add("flags", safetensors_dtype::boolean, {2}, bytes_of({1, 2}));
    writer.add("a", {1}, std::vector<float>{1});
    writer.add("b", {1}, std::vector<float>{2});
    const safetensors_file file = safetensors_file::from_bytes(writer.to_bytes(), "ckpt.safetensors");

    CHECK_THROWS_WITH_AS((void)file.get<float>("w"),
                         doctest::Contains("'ckpt.safetensors': tensor 'w' is F64, but was read as F32"), strata::error);
    std::vector<double> small(5);
    CHECK_THROWS_WITH_AS(file.copy_to("w", std::span<double>(small)),
                         doctest::Contains("tensor 'w' has shape [2, 3] (6 elements), but the destination holds 5"),
                         strata::error);
    std::vector<double> right(6);
    CHECK_THROWS_WITH_AS(file.copy_to("w", std::span<double>(right), {3, 2}),
                         doctest::Contains("tensor 'w' has shape [2, 3], expected [3, 2]"), strata::error);
    file.copy_to("w", std::span<double>(right), {2, 3});
    CHECK(right == std::vector<double>(6, 1.5));
    CHECK_THROWS_WITH_AS((void)file.get<double>("w", {6}), doctest::Contains("expected [6]"), strata::error);

    CHECK_THROWS_WITH_AS((void)file.get<bool>("flags"), doctest::Contains("holds the byte 2"), strata::error);
    CHECK(std::ranges::equal(file.bytes("flags"), bytes_of({1, 2})));

    CHECK_FALSE(file.contains("missing"));
    CHECK(file.contains("w"));
    try {
        (void)file.info("missing");
        FAIL("expected strata::error");
    } catch (const strata::error& e) {
        CHECK(std::string(e.what()).find("'ckpt.safetensors' has no tensor 'missing'") != std::string::npos);
        CHECK(e.hint() == "it holds 4 tensors: w, flags, a, b");
    }
}

TEST_CASE("opening a path that is missing or not a file names the path") {
    scratch_dir dir;
    CHECK_THROWS_WITH_AS((void)safetensors_file::open(dir / "absent.safetensors"),
                         doctest::Contains("absent.safetensors': No such file or directory"), strata::error);
    CHECK_THROWS_WITH_AS((void)safetensors_file::open(dir.path()), doctest::Contains("is not a regular file"),
                         strata::error);
}

TEST_CASE("a file moved into another object keeps its views valid") {
    safetensors_writer writer;
    writer.add("w", {3}, std::vector<std::int32_t>{4, 5, 6});
    safetensors_file first = safetensors_file::from_bytes(writer.to_bytes());
    const std::span<const std::int32_t> before = first.get<std::int32_t>("w");
    const safetensors_file second = std::move(first);
    CHECK(second.get<std::int32_t>("w").data() == before.data());
    CHECK(before[2] == 6);
}

TEST_CASE("dtype names and sizes follow the format") {
    using enum safetensors_dtype;
    CHECK(strata::to_string(f32) == "F32");
    CHECK(strata::to_string(bf16) == "BF16");
    CHECK(strata::to_string(boolean) == "BOOL");
    CHECK(strata::element_size(f64) == 8);
    CHECK(strata::element_size(bf16) == 2);
    CHECK(strata::element_size(f8_e5m2) == 1);
    CHECK(strata::parse_safetensors_dtype("I16") == i16);
    CHECK(strata::parse_safetensors_dtype("U64") == u64);
    CHECK_FALSE(strata::parse_safetensors_dtype("f32").has_value());
    for (const auto& row : strata::detail::safetensors_dtype_table) {
        CHECK(strata::parse_safetensors_dtype(row.name) == row.dtype);
        CHECK(strata::to_string(row.dtype) == row.name);
    }
}

TEST_CASE("thousands of tensors keep their order in the header and in the buffer") {
    safetensors_writer writer;
    constexpr int count = 3000;
    for (int i = count - 1; i >= 0; --i)  // descending: file order differs from sorted order
        writer.add("t" + std::to_string(i), {1}, std::vector<std::int32_t>{i});
    const safetensors_file file = safetensors_file::from_bytes(writer.to_bytes());
    REQUIRE(file.size() == count);
    CHECK(file.names().front() == "t" + std::to_string(count - 1));
    CHECK(file.names().back() == "t0");
    CHECK(file.info("t0").begin == 4 * (count - 1));
    for (int i = 0; i < count; i += 250) CHECK(file.get<std::int32_t>("t" + std::to_string(i))[0] == i);
}

}  // namespace safetensors_test
