// Copies over every pair of tiers, for every backend: sizes 0, 1, odd sizes and sizes that are
// not a multiple of the page size, verified byte for byte.
#include "support/backends.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <type_traits>
#include <vector>

namespace copy_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

std::filesystem::path scratch_dir(std::string_view suite) {
    return std::filesystem::temp_directory_path() / ("strata-test-" + std::string(suite) + "-" + std::to_string(::getpid()));
}

tier_options roomy(std::string_view suite) {
    return {.device_bytes = 64 << 20, .host_bytes = 64 << 20, .storage_bytes = 64 << 20, .storage_dir = scratch_dir(suite)};
}

// A pattern that differs at every byte position and between runs of different sizes.
std::uint8_t pattern(std::size_t i, std::size_t n) { return static_cast<std::uint8_t>((i * 131 + n * 7 + 17) % 251); }

// host -> Src -> Dst -> host, each copy on its own stream ordered by events only.
template <class B, Tier Src, Tier Dst>
void round_trip(B& backend, std::size_t n) {
    CAPTURE(n);
    INFO("from " << Src::name << " to " << Dst::name);
    tiered_tensor<std::uint8_t, host_tier, B> in(backend, {n}, "in");
    tiered_tensor<std::uint8_t, Src, B> src(backend, {n}, "src");
    tiered_tensor<std::uint8_t, Dst, B> dst(backend, {n}, "dst");
    tiered_tensor<std::uint8_t, host_tier, B> out(backend, {n}, "out");
    for (std::size_t i = 0; i < n; ++i) in[i] = pattern(i, n);
    for (std::size_t i = 0; i < n; ++i) out[i] = 0xEE;

    auto s1 = backend.make_stream("s1");
    auto s2 = backend.make_stream("s2");
    auto s3 = backend.make_stream("s3");
    auto e1 = src.copy_from(in, s1);
    s2.wait(e1);
    auto e2 = dst.copy_from(src, s2);
    s3.wait(e2);
    out.copy_from(dst, s3).wait();

    std::size_t mismatches = 0, first = n;
    for (std::size_t i = 0; i < n; ++i)
        if (out[i] != pattern(i, n)) {
            if (!mismatches) first = i;
            ++mismatches;
        }
    CHECK_MESSAGE(mismatches == 0, mismatches << " bytes differ, first at " << first);
}

template <class B, Tier Src>
void from(B& backend, std::size_t n) {
    round_trip<B, Src, device_tier>(backend, n);
    round_trip<B, Src, host_tier>(backend, n);
    round_trip<B, Src, storage_tier>(backend, n);
}

}  // namespace

TEST_CASE_TEMPLATE("copies over every tier pair are byte exact", B, STRATA_TEST_BACKENDS) {
    auto backend = test::make_backend<B>(roomy("copy"));
    if (!backend) return;
    // 0, 1, odd, around a page, not a multiple of the page size, several bounce-buffer chunks
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4095}, std::size_t{4096},
                          std::size_t{4097}, std::size_t{12289}, std::size_t{(9u << 20) + 13}}) {
        from<B, device_tier>(*backend, n);
        from<B, host_tier>(*backend, n);
        from<B, storage_tier>(*backend, n);
    }
}

TEST_CASE_TEMPLATE("copies of sub-views land at the right offsets", B, STRATA_TEST_BACKENDS) {
    auto backend = test::make_backend<B>(roomy("subview"));
    if (!backend) return;
    auto s = backend->make_stream("s");
    tiered_tensor<float, host_tier, B> host(*backend, {5, 3}, "host");
    tiered_tensor<float, storage_tier, B> disk(*backend, {5, 3}, "disk");
    tiered_tensor<float, device_tier, B> dev(*backend, {2, 3}, "dev");
    tiered_tensor<float, host_tier, B> back(*backend, {2, 3}, "back");
    for (std::size_t i = 0; i < host.numel(); ++i) host[i] = static_cast<float>(i);
    disk.copy_from(host, s);
    copy_async(*backend, dev.view(), disk.view().slice(2, 2), s);  // rows 2, 3 -> elements 6..11
    back.copy_from(dev, s).wait();
    for (std::size_t i = 0; i < back.numel(); ++i) CHECK(back[i] == static_cast<float>(6 + i));
}

TEST_CASE_TEMPLATE("a copy between views of different sizes is refused", B, STRATA_TEST_BACKENDS) {
    auto backend = test::make_backend<B>(roomy("mismatch"));
    if (!backend) return;
    auto s = backend->make_stream("s");
    tiered_tensor<float, host_tier, B> a(*backend, {4}, "a");
    tiered_tensor<float, device_tier, B> b(*backend, {5}, "b");
    CHECK_THROWS_WITH_AS(b.copy_from(a, s), doctest::Contains("element counts differ"), strata::error);
}

// zero(): a range of device or host memory set to zero in the stream's order, asynchronously: it
// runs after the copy it waits for (an event from another stream) and before the copy that follows
// it on its own stream; the bytes either side of the range keep their values.
template <class B, Tier Home>
void zero_in_order(B& backend, std::size_t n) {
    CAPTURE(n);
    INFO("in " << Home::name);
    tiered_tensor<std::uint8_t, host_tier, B> in(backend, {n + 2}, "in");
    tiered_tensor<std::uint8_t, Home, B> buf(backend, {n + 2}, "buf");
    tiered_tensor<std::uint8_t, host_tier, B> out(backend, {n + 2}, "out");
    for (std::size_t i = 0; i < n + 2; ++i) in[i] = static_cast<std::uint8_t>(1 + pattern(i, n) % 250);  // never 0
    auto fill = backend.make_stream("fill");
    auto s = backend.make_stream("zero");
    s.wait(buf.copy_from(in, fill));
    std::uint8_t* range = nullptr;
    if constexpr (std::is_same_v<Home, device_tier>)
        range = buf.device_data().get() + 1;
    else
        range = buf.data() + 1;
    auto zeroed = backend.zero(range, id_of<Home>, n, s);
    out.copy_from(buf, s).wait();
    CHECK(zeroed.ready());
    CHECK(out[0] == in[0]);
    CHECK(out[n + 1] == in[n + 1]);
    std::size_t nonzero = 0;
    for (std::size_t i = 1; i <= n; ++i) nonzero += out[i] != 0;
    CHECK_MESSAGE(nonzero == 0, nonzero << " of " << n << " bytes not zeroed");
}

TEST_CASE_TEMPLATE("zero clears a range of device or host memory in stream order", B, STRATA_TEST_BACKENDS) {
    auto backend = test::make_backend<B>(roomy("zero"));
    if (!backend) return;
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{(9u << 20) + 13}}) {
        zero_in_order<B, device_tier>(*backend, n);
        zero_in_order<B, host_tier>(*backend, n);
    }
}

}  // namespace copy_test
