// Checkpoints as Hugging Face publishes them: the 16-bit formats widened to float exactly (every one
// of the 65536 patterns of each, against a reference built from the fields in double precision),
// float -> bfloat16 rounding, header-only safetensors files read tensor by tensor, and sharded
// directories with model.safetensors.index.json, including every way the index and shards disagree.
#include <strata/core/float_formats.hpp>  // bf16_to_float, f16_to_float, float_to_bf16, float_to_f16
#include <strata/io/hf_weights.hpp>       // hf_weights
#include <strata/io/safetensors.hpp>      // safetensors_writer, safetensors_file

#include "scratch_dir.hpp"  // scratch_dir

#include <doctest/doctest.h>

#include <bit>         // std::bit_cast
#include <cmath>       // std::ldexp, std::isnan, std::signbit, std::nextafter
#include <cstdint>     // std::uint16_t, std::uint32_t
#include <cstring>     // std::memcpy
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ofstream
#include <limits>      // std::numeric_limits
#include <random>      // std::mt19937
#include <string>      // std::string
#include <vector>      // std::vector

namespace hf_weights_test {

using strata::hf_weights;
using strata::safetensors_dtype;
using strata::safetensors_file;
using strata::safetensors_writer;

// The value a 16-bit pattern stands for, from its fields: (-1)^s x 2^(e - bias) x 1.m, or
// 2^(1 - bias) x 0.m for a zero exponent. Infinities and NaNs are checked separately.
double reference_value(std::uint16_t bits, int exponent_bits, int mantissa_bits) {
    const int bias = (1 << (exponent_bits - 1)) - 1;
    const int e = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1);
    const int m = bits & ((1 << mantissa_bits) - 1);
    const double sign = (bits >> 15) ? -1.0 : 1.0;
    if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - bias - mantissa_bits);
    return sign * std::ldexp(static_cast<double>((1 << mantissa_bits) + m), e - bias - mantissa_bits);
}

std::vector<std::byte> raw(const std::vector<std::uint16_t>& values) {
    std::vector<std::byte> bytes(2 * values.size());
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
}

std::string error_of(auto&& call) {
    try {
        call();
    } catch (const strata::error& e) {
        return e.what();
    }
    return "(no error)";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void write_text(const std::filesystem::path& path, const std::string& text) { std::ofstream(path) << text; }

TEST_CASE("every bfloat16 and float16 pattern widens to float exactly, NaNs keep sign and payload") {
    for (std::uint32_t i = 0; i < 65536; ++i) {
        const auto bits = static_cast<std::uint16_t>(i);
        CAPTURE(i);
        const float bf = strata::bf16_to_float(bits);
        const bool bf_special = ((bits >> 7) & 0xFF) == 0xFF;
        if (!bf_special) {
            CHECK(static_cast<double>(bf) == reference_value(bits, 8, 7));
            CHECK(std::signbit(bf) == ((bits >> 15) != 0));  // -0.0 stays negative
        } else {
            CHECK(std::bit_cast<std::uint32_t>(bf) == static_cast<std::uint32_t>(bits) << 16);
        }
        const float h = strata::f16_to_float(bits);
        const bool h_special = ((bits >> 10) & 0x1F) == 0x1F;
        if (!h_special) {
            CHECK(static_cast<double>(h) == reference_value(bits, 5, 10));
            CHECK(std::signbit(h) == ((bits >> 15) != 0));
        } else if ((bits & 0x3FF) == 0) {
            CHECK(h == ((bits >> 15) ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity()));
        } else {
            CHECK(std::isnan(h));
            CHECK(std::bit_cast<std::uint32_t>(h) ==
                  ((static_cast<std::uint32_t>(bits & 0x8000) << 16) | 0x7F800000u | (static_cast<std::uint32_t>(bits & 0x3FF) << 13)));
        }
    }
    CHECK(strata::f16_to_float(0x0001) == std::ldexp(1.0f, -24));  // the smallest subnormal
    CHECK(strata::f16_to_float(0x7BFF) == 65504.0f);                // the largest finite float16
}

TEST_CASE("float -> bfloat16 rounds to nearest, ties to even, and round-trips every bfloat16") {
    for (std::uint32_t i = 0; i < 65536; ++i) {
        const auto bits = static_cast<std::uint16_t>(i);
        if (((bits >> 7) & 0xFF) == 0xFF && (bits & 0x7F) != 0) continue;  // NaNs: below
        CHECK(strata::float_to_bf16(strata::bf16_to_float(bits)) == bits);
    }
    // Against a reference: the nearer of the two bfloat16 neighbours in double, ties to the even one.
    std::mt19937 gen(7);
    std::uniform_int_distribution<std::uint32_t> any;
    for (int n = 0; n < 200000; ++n) {
        const std::uint32_t x = any(gen);
        const float v = std::bit_cast<float>(x);
        if (std::isnan(v) || std::isinf(v)) continue;
        const auto below = static_cast<std::uint16_t>(x >> 16);  // truncation: toward zero
        const auto above = static_cast<std::uint16_t>(below + 1);
        const double lo = strata::bf16_to_float(below);
        const double hi = ((above >> 7) & 0xFF) == 0xFF ? std::ldexp(1.0, 128) * (v < 0 ? -1 : 1)  // past the largest
                                                        : strata::bf16_to_float(above);
        const double dlo = std::abs(v - lo), dhi = std::abs(hi - v);
        const std::uint16_t expected = dlo < dhi ? below : dhi < dlo ? above : (below & 1) ? above : below;
        CAPTURE(x);
        CHECK(strata::float_to_bf16(v) == expected);
    }
    CHECK(strata::float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);                             // tie: to even (1.0)
    CHECK(strata::float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);      // past the tie
    CHECK(strata::float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);                         // overflows to inf
    const std::uint16_t nan = strata::float_to_bf16(-std::bit_cast<float>(0x7F800001u));  // a signalling NaN's lowest payload
    CHECK((nan & 0x8000) != 0);
    CHECK(std::isnan(strata::bf16_to_float(nan)));
}

TEST_CASE("float -> float16 rounds to nearest, ties to even, and round-trips every float16") {
    for (std::uint32_t i = 0; i < 65536; ++i) {
        const auto bits = static_cast<std::uint16_t>(i);
        if (((bits >> 10) & 0x1F) == 0x1F && (bits & 0x3FF) != 0) continue;  // NaNs: below
        CHECK(strata::float_to_f16(strata::f16_to_float(bits)) == bits);
    }
    // Against a reference: the nearer of the two float16 neighbours of |v| in double (found by
    // bisection over the ordered positive patterns), ties to the even one; from 65520 up: infinity.
    const auto reference = [](float v) -> std::uint16_t {
        const auto sign = static_cast<std::uint16_t>(std::signbit(v) ? 0x8000 : 0);
        const double a = std::abs(static_cast<double>(v));
        if (a >= 65520.0) return sign | 0x7C00;
        std::uint16_t lo = 0, hi = 0x7BFF;  // the largest pattern with value <= a
        while (lo < hi) {
            const auto mid = static_cast<std::uint16_t>((lo + hi + 1) / 2);
            if (strata::f16_to_float(mid) <= a) lo = mid; else hi = static_cast<std::uint16_t>(mid - 1);
        }
        const auto up = static_cast<std::uint16_t>(lo + 1);
        const double dlo = a - strata::f16_to_float(lo), dhi = (up == 0x7C00 ? 65536.0 : strata::f16_to_float(up)) - a;
        return sign | (dlo < dhi ? lo : dhi < dlo ? up : (lo & 1) ? up : lo);
    };
    std::mt19937 gen(11);
    std::uniform_int_distribution<std::uint32_t> any;
    std::uniform_real_distribution<float> exponent(-30.0f, 17.0f);  // subnormals to past the largest
    for (int n = 0; n < 200000; ++n) {
        const float v = n % 2 ? std::bit_cast<float>(any(gen)) : std::ldexp(1.0f + (any(gen) >> 9) * 0x1p-23f, int(exponent(gen)));
        if (std::isnan(v)) continue;
        CAPTURE(std::bit_cast<std::uint32_t>(v));
        CHECK(strata::float_to_f16(v) == (std::isinf(v) ? (std::signbit(v) ? 0xFC00 : 0x7C00) : reference(v)));
    }
    // every tie between neighbours (the midpoints are floats): to the even pattern
    for (std::uint16_t bits = 0; bits < 0x7BFF; ++bits) {
        const float mid = static_cast<float>((double(strata::f16_to_float(bits)) + strata::f16_to_float(bits + 1)) / 2);
        CHECK(strata::float_to_f16(mid) == ((bits & 1) ? bits + 1 : bits));
    }
    CHECK(strata::float_to_f16(65519.0f) == 0x7BFF);  // below the tie with infinity
    CHECK(strata::float_to_f16(65520.0f) == 0x7C00);  // the tie: to infinity (even)
    CHECK(strata::float_to_f16(-0.0f) == 0x8000);
    const std::uint16_t nan = strata::float_to_f16(-std::bit_cast<float>(0x7F800001u));
    CHECK((nan & 0x8000) != 0);
    CHECK(std::isnan(strata::f16_to_float(nan)));
}

TEST_CASE("read_as_float: F32, BF16 and F16 tensors, from a whole file and from a header-only one") {
    strata::test::scratch_dir dir;
    const std::vector<float> f32 = {1.5f, -2.25f, 0.0f, 3e-38f, 65504.0f, -1e30f};
    const std::vector<std::uint16_t> bf16 = {0x3F80, 0xBF40, 0x0001, 0x7F7F, 0x8000, 0x4049};
    std::vector<std::uint16_t> f16(2 * (std::size_t{1} << 21) + 3);  // more than the 4 MiB staging buffer
    for (std::size_t i = 0; i < f16.size(); ++i) f16[i] = static_cast<std::uint16_t>((i * 2654435761u) >> 7) & 0x7BFF;
    safetensors_writer w;
    w.add("a.f32", {2, 3}, f32);
    w.add("b.bf16", safetensors_dtype::bf16, {6}, raw(bf16));
    w.add("c.f16", safetensors_dtype::f16, {f16.size()}, raw(f16));
    w.add("d.i64", std::vector<std::size_t>{2}, std::vector<std::int64_t>{1, 2});
    w.add("e.empty", std::vector<std::size_t>{0, 4}, std::vector<float>{});  // fuzz regression: no data, no memcpy
    w.write(dir / "w.safetensors");

    for (const bool header_only : {false, true}) {
        CAPTURE(header_only);
        const safetensors_file file = header_only ? safetensors_file::open_header(dir / "w.safetensors")
                                                  : safetensors_file::open(dir / "w.safetensors");
        CHECK(file.header_only() == header_only);
        std::vector<float> out(6);
        file.read_as_float("a.f32", out);
        CHECK(out == f32);
        file.read_as_float("b.bf16", out);
        for (std::size_t i = 0; i < bf16.size(); ++i) CHECK(out[i] == strata::bf16_to_float(bf16[i]));
        std::vector<float> wide(f16.size());
        file.read_as_float("c.f16", wide);
        bool all = true;
        for (std::size_t i = 0; i < f16.size(); ++i) all = all && wide[i] == strata::f16_to_float(f16[i]);
        CHECK(all);
        std::vector<float> none;
        file.read_as_float("e.empty", none);  // UBSan: memcpy into a null pointer before the fix
        CHECK(none.empty());
        CHECK(has(error_of([&] { file.read_as_float("d.i64", out); }), "'d.i64' is I64; read_as_float converts F32, BF16"));
        CHECK(has(error_of([&] { file.read_as_float("a.f32", std::span(out).first(5)); }), "destination holds 5 elements"));
        if (header_only) {  // no in-memory views of a header-only file
            CHECK(has(error_of([&] { (void)file.bytes("a.f32"); }), "opened with open_header()"));
            CHECK(has(error_of([&] { (void)file.get<float>("a.f32"); }), "opened with open_header()"));
            CHECK(has(error_of([&] { file.copy_to("a.f32", std::span(out)); }), "opened with open_header()"));
        }
    }
    // A header-only open validates the header against the file's size as open() does.
    std::filesystem::resize_file(dir / "w.safetensors", std::filesystem::file_size(dir / "w.safetensors") - 1);
    CHECK(has(error_of([&] { (void)safetensors_file::open_header(dir / "w.safetensors"); }), "reach past the end"));
    write_text(dir / "short.safetensors", "abc");
    CHECK(has(error_of([&] { (void)safetensors_file::open_header(dir / "short.safetensors"); }), "shorter than the 8-byte"));
}

void write_sharded_index(const std::filesystem::path& index) {
    write_text(index, R"({"metadata": {"total_size": 24}, "weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "model.norm.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}})");
}

// A sharded checkpoint in `dir`: two shards and the index that lists them.
void write_sharded(const std::filesystem::path& dir) {
    safetensors_writer one, two;
    one.add("model.embed_tokens.weight", safetensors_dtype::bf16, {2, 2}, raw({0x3F80, 0x4000, 0x4040, 0x4080}));
    one.add("model.norm.weight", std::vector<std::size_t>{2}, std::vector<float>{0.5f, 0.25f});
    two.add("lm_head.weight", safetensors_dtype::f16, {2, 2}, raw({0x3C00, 0x4000, 0x4200, 0x4400}));
    one.write(dir / "model-00001-of-00002.safetensors");
    two.write(dir / "model-00002-of-00002.safetensors");
    write_sharded_index(dir / "model.safetensors.index.json");
}

TEST_CASE("hf_weights reads a sharded checkpoint through its index, and a single-file one") {
    strata::test::scratch_dir dir;
    write_sharded(dir.path());
    const hf_weights w = hf_weights::open(dir.path());
    CHECK(w.shard_count() == 2);
    CHECK(w.names() == std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"});
    CHECK(w.stored_bytes() == 8 + 8 + 8);
    CHECK(has(w.source_of("lm_head.weight"), "model-00002-of-00002.safetensors"));
    std::vector<float> v(4);
    w.read_as_float("model.embed_tokens.weight", v);
    CHECK(v == std::vector<float>{1, 2, 3, 4});
    w.read_as_float("lm_head.weight", v);
    CHECK(v == std::vector<float>{1, 2, 3, 4});
    CHECK(w.info("model.norm.weight").shape == std::vector<std::size_t>{2});
    CHECK(has(error_of([&] { w.read_as_float("model.layers.0.mlp.up_proj.weight", v); }), "has no tensor"));

    strata::test::scratch_dir single;
    safetensors_writer s;
    s.add("x", std::vector<std::size_t>{1}, std::vector<float>{7});
    s.write(single / "model.safetensors");
    const hf_weights one = hf_weights::open(single.path());
    CHECK(one.shard_count() == 1);
    std::vector<float> x(1);
    one.read_as_float("x", x);
    CHECK(x[0] == 7);

    strata::test::scratch_dir empty;
    CHECK(has(error_of([&] { (void)hf_weights::open(empty.path()); }), "holds neither model.safetensors.index.json"));
}

TEST_CASE("an index that disagrees with its shards is refused, naming the tensor or shard") {
    strata::test::scratch_dir dir;
    write_sharded(dir.path());
    const auto index = dir / "model.safetensors.index.json";
    const auto open_error = [&] { return error_of([&] { (void)hf_weights::open(dir.path()); }); };

    write_text(index, R"({"weight_map": {"model.norm.weight": "model-00003-of-00003.safetensors"}})");
    CHECK(has(open_error(), "lists the shard 'model-00003-of-00003.safetensors' (1 tensors, e.g. 'model.norm.weight')"));
    write_text(index, R"({"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}})");
    CHECK(has(open_error(), "puts 'model.norm.weight' in 'model-00002-of-00002.safetensors', which does not hold it"));
    write_text(index, R"({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors",
                                         "lm_head.weight": "model-00002-of-00002.safetensors"}})");
    CHECK(has(open_error(), "does not list 'model.embed_tokens.weight', which the shard 'model-00001-of-00002.safetensors' holds"));
    {  // the second shard holds a tensor the index puts in the first
        safetensors_writer two;
        two.add("lm_head.weight", safetensors_dtype::f16, {2, 2}, raw({0x3C00, 0x4000, 0x4200, 0x4400}));
        two.add("model.norm.weight", std::vector<std::size_t>{2}, std::vector<float>{0.5f, 0.25f});
        two.write(dir / "model-00002-of-00002.safetensors");
        write_sharded_index(index);
        CHECK(has(open_error(), "puts 'model.norm.weight' in 'model-00001-of-00002.safetensors', but the shard "
                                "'model-00002-of-00002.safetensors' holds it too"));
    }
    write_text(index, R"({"weight_map": {"model.norm.weight": "../model-00001-of-00002.safetensors"}})");
    CHECK(has(open_error(), "not a file name inside the checkpoint's directory"));
    write_text(index, R"({"weight_map": {"model.norm.weight": 3}})");
    CHECK(has(open_error(), "is a JSON number, not a file name"));
    write_text(index, R"({"metadata": {}})");
    CHECK(has(open_error(), "has no \"weight_map\" object"));
    write_text(index, R"({"weight_map": {}})");
    CHECK(has(open_error(), "lists no tensors"));
    write_text(index, R"([1, 2])");
    CHECK(has(open_error(), "is a JSON array, not an object"));
    write_text(index, R"({"weight_map": )");
    CHECK(has(open_error(), "cannot parse"));
}

}  // namespace hf_weights_test
