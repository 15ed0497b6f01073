// hf_weights on an arbitrary model.safetensors.index.json next to two fixed, valid shards: it
// either opens or throws strata::error, never crashes and never reads outside the directory. A
// checkpoint that opened lists only tensors its shards hold, each read back (as float) with the
// bits the shard file itself gives.
#include "fuzz_check.hpp"  // FUZZ_CHECK, strata::fuzz::parses

#include <strata/io/hf_weights.hpp>   // hf_weights
#include <strata/io/safetensors.hpp>  // safetensors_writer, safetensors_file

#include <cstddef>     // std::byte, std::size_t
#include <cstdint>     // std::uint8_t, std::uint16_t
#include <cstring>     // std::memcmp, std::memcpy
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ofstream
#include <optional>    // std::optional
#include <string>      // std::string
#include <vector>      // std::vector

#include <unistd.h>  // getpid

namespace {

const std::filesystem::path& directory() {
    static const std::filesystem::path dir = [] {
        const auto d = std::filesystem::temp_directory_path() / ("strata-fuzz-hf-index-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        std::vector<std::uint16_t> half = {0x3C00, 0x7C00, 0xFC01, 0x0001};
        std::vector<std::byte> raw(2 * half.size());
        std::memcpy(raw.data(), half.data(), raw.size());
        strata::safetensors_writer one, two;
        one.add("a", std::vector<std::size_t>{2}, std::vector<float>{1, 2});
        one.add("b", strata::safetensors_dtype::bf16, {4}, raw);
        two.add("c", strata::safetensors_dtype::f16, {2, 2}, raw);
        two.add("d", std::vector<std::size_t>{1}, std::vector<std::int64_t>{5});
        one.write(d / "model-00001-of-00002.safetensors");
        two.write(d / "model-00002-of-00002.safetensors");
        return d;
    }();
    return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::filesystem::path& dir = directory();
    {
        std::ofstream out(dir / "model.safetensors.index.json", std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
        FUZZ_CHECK(out.good());
    }
    std::optional<strata::hf_weights> w;
    if (!strata::fuzz::parses([&] { w.emplace(strata::hf_weights::open(dir)); })) return 0;
    FUZZ_CHECK(w->size() >= 1 && w->shard_count() >= 1 && w->shard_count() <= 2);
    for (const std::string& name : w->names()) {
        FUZZ_CHECK(name == "a" || name == "b" || name == "c" || name == "d");
        const auto shard = strata::safetensors_file::open(w->source_of(name));
        FUZZ_CHECK(shard.contains(name));
        const auto n = static_cast<std::size_t>(w->info(name).element_count());
        std::vector<float> got(n), want(n);
        const bool read = strata::fuzz::parses([&] { w->read_as_float(name, got); });
        FUZZ_CHECK(strata::fuzz::parses([&] { shard.read_as_float(name, want); }) == read);
        FUZZ_CHECK(read == (name != "d"));  // d is I64
        if (read) FUZZ_CHECK(std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0);
    }
    return 0;
}
