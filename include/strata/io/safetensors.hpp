// safetensors: the Hugging Face tensor file format, written atomically and read with every field
// validated, so a corrupt or hostile file is an error that names the problem, never a crash.
//
// Layout of a file:
//   8 bytes   N, the header length, an unsigned 64-bit little-endian integer
//   N bytes   a JSON object, padded with spaces so that 8 + N is a multiple of 8:
//             {"__metadata__": {"key": "value"},
//              "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   the rest  the byte buffer; offsets are relative to its start, and the tensors cover it exactly
//             (no gaps, no overlaps, nothing after the last one).
// Tensor data is little-endian and row-major.
#pragma once

#include <strata/core/error.hpp>          // strata::error
#include <strata/core/float_formats.hpp>  // bf16_to_float, f16_to_float
#include <strata/io/atomic_write.hpp>  // write_file_atomically, atomic_file_writer, detail:: file helpers

#include <nlohmann/json.hpp>  // nlohmann::json (reading), nlohmann::ordered_json (writing in field order)

#include <algorithm>    // std::sort, std::min
#include <array>        // std::array
#include <bit>          // std::endian
#include <concepts>     // std::convertible_to, std::invocable
#include <cstddef>      // std::byte, std::size_t
#include <cstdint>      // std::uint8_t, std::uint64_t, std::int*_t, std::uintptr_t
#include <cstring>      // std::memcpy
#include <filesystem>   // std::filesystem::path
#include <functional>   // std::invoke
#include <map>          // std::map
#include <memory>       // std::unique_ptr, std::shared_ptr
#include <new>          // std::align_val_t, operator new[]
#include <optional>     // std::optional
#include <ranges>       // std::ranges::contiguous_range, range_value_t, data, size
#include <set>          // std::set
#include <span>         // std::span, std::as_bytes
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <type_traits>  // std::remove_cv_t
#include <utility>      // std::move
#include <vector>       // std::vector

#include <fcntl.h>  // O_RDONLY

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data and strata reads it in place; a big-endian host "
              "would need a byte-swapping reader.");
static_assert(sizeof(bool) == 1, "safetensors BOOL is one byte per element, so bool must be one byte.");

namespace strata {

enum class safetensors_dtype : std::uint8_t {
    boolean, u8, i8, f8_e4m3, f8_e5m2, i16, u16, f16, bf16, i32, u32, f32, i64, u64, f64
};

namespace detail {

struct safetensors_dtype_row {
    safetensors_dtype dtype;
    std::string_view name;
    std::size_t size;
};

// The names are the format's; F16, BF16 and the FP8 types have no C++20 element type and are read
// as raw bytes.
inline constexpr std::array<safetensors_dtype_row, 15> safetensors_dtype_table{{
    {safetensors_dtype::boolean, "BOOL", 1},   {safetensors_dtype::u8, "U8", 1},
    {safetensors_dtype::i8, "I8", 1},          {safetensors_dtype::f8_e4m3, "F8_E4M3", 1},
    {safetensors_dtype::f8_e5m2, "F8_E5M2", 1}, {safetensors_dtype::i16, "I16", 2},
    {safetensors_dtype::u16, "U16", 2},        {safetensors_dtype::f16, "F16", 2},
    {safetensors_dtype::bf16, "BF16", 2},      {safetensors_dtype::i32, "I32", 4},
    {safetensors_dtype::u32, "U32", 4},        {safetensors_dtype::f32, "F32", 4},
    {safetensors_dtype::i64, "I64", 8},        {safetensors_dtype::u64, "U64", 8},
    {safetensors_dtype::f64, "F64", 8},
}};

inline constexpr const safetensors_dtype_row& dtype_row(safetensors_dtype dtype) {
    return safetensors_dtype_table[static_cast<std::size_t>(dtype)];
}

}  // namespace detail

constexpr std::string_view to_string(safetensors_dtype dtype) { return detail::dtype_row(dtype).name; }
constexpr std::size_t element_size(safetensors_dtype dtype) { return detail::dtype_row(dtype).size; }

constexpr std::optional<safetensors_dtype> parse_safetensors_dtype(std::string_view name) {
    for (const auto& row : detail::safetensors_dtype_table)
        if (row.name == name) return row.dtype;
    return std::nullopt;
}

// The C++ element type of each dtype that has one; typed reads and writes accept only these.
template <class T>
struct safetensors_dtype_of;
template <> struct safetensors_dtype_of<bool> { static constexpr auto value = safetensors_dtype::boolean; };
template <> struct safetensors_dtype_of<std::uint8_t> { static constexpr auto value = safetensors_dtype::u8; };
template <> struct safetensors_dtype_of<std::int8_t> { static constexpr auto value = safetensors_dtype::i8; };
template <> struct safetensors_dtype_of<std::int16_t> { static constexpr auto value = safetensors_dtype::i16; };
template <> struct safetensors_dtype_of<std::uint16_t> { static constexpr auto value = safetensors_dtype::u16; };
template <> struct safetensors_dtype_of<std::int32_t> { static constexpr auto value = safetensors_dtype::i32; };
template <> struct safetensors_dtype_of<std::uint32_t> { static constexpr auto value = safetensors_dtype::u32; };
template <> struct safetensors_dtype_of<float> { static constexpr auto value = safetensors_dtype::f32; };
template <> struct safetensors_dtype_of<std::int64_t> { static constexpr auto value = safetensors_dtype::i64; };
template <> struct safetensors_dtype_of<std::uint64_t> { static constexpr auto value = safetensors_dtype::u64; };
template <> struct safetensors_dtype_of<double> { static constexpr auto value = safetensors_dtype::f64; };

template <class T>
concept SafetensorsElement = requires {
    { safetensors_dtype_of<std::remove_cv_t<T>>::value } -> std::convertible_to<safetensors_dtype>;
};

template <SafetensorsElement T>
inline constexpr safetensors_dtype safetensors_dtype_v = safetensors_dtype_of<std::remove_cv_t<T>>::value;

// Beyond this a header is taken as corruption, not data (the limit Hugging Face's reader uses).
inline constexpr std::uint64_t safetensors_max_header_bytes = 100'000'000;

namespace detail {

inline std::string shape_string(std::span<const std::size_t> shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
}

// shape product times element size, or nothing when it does not fit in 64 bits.
inline std::optional<std::uint64_t> tensor_byte_count(std::span<const std::size_t> shape,
                                                      safetensors_dtype dtype) {
    std::uint64_t bytes = element_size(dtype);
    for (std::size_t extent : shape)
        if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(extent), &bytes)) return std::nullopt;
    return bytes;
}

inline std::uint64_t element_count_of(std::span<const std::size_t> shape) {
    std::uint64_t count = 1;
    for (std::size_t extent : shape) count *= extent;
    return count;
}

// Names and metadata go into JSON, which must be UTF-8; nlohmann's strict dump finds out.
inline bool is_valid_utf8(const std::string& text) {
    try {
        (void)nlohmann::json(text).dump();
        return true;
    } catch (const nlohmann::json::type_error&) {
        return false;
    }
}

}  // namespace detail

// ---- writer ------------------------------------------------------------------------------------

// Collects tensors and metadata, then writes one file. Tensors appear in the order they were added
// (in the header and in the buffer), so the same calls always give the same bytes.
//
// A tensor may also be declared by name, dtype and shape alone: the header depends on nothing
// else, so file_size() is exact before any data exists, and write_streamed() writes the header
// first and then takes each declared tensor's bytes in order, from a buffer the caller reuses
// (a multi-GB checkpoint goes to disk without being staged whole in memory).
class safetensors_writer {
public:
    class stream;


    // Copies the bytes: the caller's buffer may change or go away right after.
    void add(std::string name, safetensors_dtype dtype, std::vector<std::size_t> shape,
             std::span<const std::byte> bytes) {
        add_entry(std::move(name), dtype, std::move(shape), bytes, true);
    }

    // Refers to the bytes without copying, for multi-GB checkpoints: they must stay alive and
    // unchanged until write() or to_bytes() has returned.
    void add_view(std::string name, safetensors_dtype dtype, std::vector<std::size_t> shape,
                  std::span<const std::byte> bytes) {
        add_entry(std::move(name), dtype, std::move(shape), bytes, false);
    }

    // A tensor whose bytes are handed over during write_streamed(), in declaration order.
    void declare(std::string name, safetensors_dtype dtype, std::vector<std::size_t> shape) {
        const std::uint64_t bytes = checked_size(name, dtype, shape);
        push_entry({std::move(name), dtype, std::move(shape), {}, {}, entry_data::declared, bytes});
    }

    template <SafetensorsElement T>
    void declare(std::string name, std::vector<std::size_t> shape) {
        declare(std::move(name), safetensors_dtype_v<T>, std::move(shape));
    }

    // Typed convenience: the dtype follows from the element type (float -> F32, ...). Copies.
    template <std::ranges::contiguous_range Values>
        requires SafetensorsElement<std::ranges::range_value_t<Values>>
    void add(std::string name, std::vector<std::size_t> shape, const Values& values) {
        using T = std::ranges::range_value_t<Values>;
        const std::span<const T> typed(std::ranges::data(values), std::ranges::size(values));
        add(std::move(name), safetensors_dtype_v<T>, std::move(shape), std::as_bytes(typed));
    }

    // Setting a key again replaces its value; keys keep the order of their first setting.
    void set_metadata(const std::string& key, const std::string& value) {
        if (!detail::is_valid_utf8(key) || !detail::is_valid_utf8(value))
            throw error("safetensors_writer: metadata key '" + key + "' or its value is not valid UTF-8",
                        "the header is JSON; pass UTF-8 text (encode binary values, e.g. as hex)");
        m_metadata[key] = value;
    }

    std::size_t size() const noexcept { return m_entries.size(); }
    std::uint64_t data_size() const noexcept { return m_data_size; }
    // The bytes the file will have: the length field, the padded header and the data.
    std::uint64_t file_size() const { return 8 + header().size() + m_data_size; }

    // The header as written: compact JSON, padded with spaces to a multiple of 8 bytes. Assembled
    // entry by entry because a JSON object keyed in insertion order costs a linear search per key.
    std::string header() const {
        std::string text = "{";
        if (!m_metadata.empty()) text += R"("__metadata__":)" + m_metadata.dump();
        std::uint64_t offset = 0;
        for (const entry& e : m_entries) {
            const std::uint64_t end = offset + e.size;
            nlohmann::ordered_json info = nlohmann::ordered_json::object();
            info["dtype"] = to_string(e.dtype);
            info["shape"] = e.shape;
            info["data_offsets"] = nlohmann::ordered_json::array({offset, end});
            if (text.size() > 1) text += ',';
            text += nlohmann::ordered_json(e.name).dump() + ":" + info.dump();
            offset = end;
        }
        text += '}';
        text.append((8 - text.size() % 8) % 8, ' ');
        return text;
    }

    // Hands the file to `sink(std::span<const std::byte>)` in order, chunk by chunk.
    // Every tensor must carry its bytes (add, add_view): declared ones go through write_streamed.
    template <class Sink>
    void write_to(Sink&& sink) const {
        for (const entry& e : m_entries)
            if (e.data == entry_data::declared)
                throw error("safetensors_writer: tensor '" + e.name + "' was declared without its bytes",
                            "write a file with declared tensors through write_streamed()");
        write_header_to(sink);
        for (const entry& e : m_entries)
            if (!e.bytes().empty()) sink(e.bytes());
    }

    std::vector<std::byte> to_bytes() const {
        std::vector<std::byte> file;
        write_to([&](std::span<const std::byte> chunk) { file.insert(file.end(), chunk.begin(), chunk.end()); });
        return file;
    }

    // Atomic: `path` holds either its old content or the complete new file, never a partial one.
    void write(const std::filesystem::path& path) const {
        write_file_atomically(path, [&](atomic_file_writer& out) {
            write_to([&](std::span<const std::byte> chunk) { out.write(chunk); });
        });
    }

    // Atomic like write(): the header goes out first, then fill(stream&) hands over the bytes of
    // every declared tensor, in declaration order, with stream::write(name, bytes); tensors added
    // with their bytes are written by the stream when their turn comes. A tensor given out of
    // order, with the wrong size or dtype, or never given, is an error and the target stays as it was.
    template <class Fill>
        requires std::invocable<Fill&, stream&>
    void write_streamed(const std::filesystem::path& path, Fill&& fill) const;

private:
    enum class entry_data { copied, viewed, declared };

    struct entry {
        std::string name;
        safetensors_dtype dtype;
        std::vector<std::size_t> shape;
        std::vector<std::byte> copy;
        std::span<const std::byte> view;
        entry_data data;
        std::uint64_t size;  // bytes in the buffer

        std::span<const std::byte> bytes() const {
            return data == entry_data::copied ? std::span<const std::byte>(copy) : view;
        }
    };

    template <class Sink>
    void write_header_to(Sink&& sink) const {
        const std::string text = header();
        std::array<std::byte, 8> length{};
        for (std::size_t i = 0; i < 8; ++i)
            length[i] = static_cast<std::byte>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xff);
        sink(std::span<const std::byte>(length));
        sink(std::as_bytes(std::span(text.data(), text.size())));
    }

    // Checks a new tensor's name and shape; returns its size in bytes.
    std::uint64_t checked_size(const std::string& name, safetensors_dtype dtype,
                               const std::vector<std::size_t>& shape) const {
        if (name.empty())
            throw error("safetensors_writer: a tensor needs a non-empty name", "name every tensor");
        if (name == "__metadata__")
            throw error("safetensors_writer: '__metadata__' is reserved for the header's metadata",
                        "rename the tensor; use set_metadata for key/value text");
        if (!detail::is_valid_utf8(name))
            throw error("safetensors_writer: tensor name '" + name + "' is not valid UTF-8",
                        "the header is JSON; use UTF-8 names");
        if (m_names.contains(name))
            throw error("safetensors_writer: tensor '" + name + "' was added twice",
                        "every tensor in a file needs its own name");
        const std::optional<std::uint64_t> expected = detail::tensor_byte_count(shape, dtype);
        if (!expected)
            throw error("safetensors_writer: tensor '" + name + "' has shape " + detail::shape_string(shape) +
                            " whose size in bytes overflows 64 bits",
                        "check the shape");
        return *expected;
    }

    void add_entry(std::string name, safetensors_dtype dtype, std::vector<std::size_t> shape,
                   std::span<const std::byte> bytes, bool copy) {
        const std::uint64_t expected = checked_size(name, dtype, shape);
        if (expected != bytes.size())
            throw error("safetensors_writer: tensor '" + name + "' has shape " + detail::shape_string(shape) +
                            " of " + std::string(to_string(dtype)) + ", which is " + std::to_string(expected) +
                            " bytes, but " + std::to_string(bytes.size()) + " bytes were given",
                        "pass the shape and dtype that describe the data");
        entry e{std::move(name), dtype, std::move(shape), {}, {}, copy ? entry_data::copied : entry_data::viewed,
                expected};
        if (copy)
            e.copy.assign(bytes.begin(), bytes.end());
        else
            e.view = bytes;
        push_entry(std::move(e));
    }

    void push_entry(entry e) {
        m_names.insert(e.name);
        m_data_size += e.size;
        m_entries.push_back(std::move(e));
    }

    std::vector<entry> m_entries;
    std::set<std::string, std::less<>> m_names;
    nlohmann::ordered_json m_metadata = nlohmann::ordered_json::object();
    std::uint64_t m_data_size = 0;
};

// The data side of safetensors_writer::write_streamed(): takes each declared tensor's bytes, in
// declaration order, straight to the file (nothing is copied or kept).
class safetensors_writer::stream {
public:
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;

    // The bytes of the next declared tensor, which must be `name`.
    void write(std::string_view name, std::span<const std::byte> bytes) {
        const entry& e = expect(name);
        if (bytes.size() != e.size)
            throw error("safetensors_writer: '" + m_out.target().string() + "': tensor '" + e.name + "' is " +
                            std::to_string(e.size) + " bytes (" + detail::shape_string(e.shape) + " of " +
                            std::string(to_string(e.dtype)) + "), but " + std::to_string(bytes.size()) +
                            " bytes were given",
                        "hand over the whole tensor in one write");
        m_out.write(bytes);
        ++m_next;
    }

    // Typed: the element type must be the declared dtype's.
    template <SafetensorsElement T>
    void write(std::string_view name, std::span<const T> values) {
        const entry& e = expect(name);
        if (e.dtype != safetensors_dtype_v<T>)
            throw error("safetensors_writer: '" + m_out.target().string() + "': tensor '" + e.name +
                            "' was declared " + std::string(to_string(e.dtype)) + " and given as " +
                            std::string(to_string(safetensors_dtype_v<T>)),
                        "declare and write a tensor with the same element type");
        write(name, std::as_bytes(values));
    }

private:
    friend class safetensors_writer;
    using entry = safetensors_writer::entry;

    stream(const safetensors_writer& writer, atomic_file_writer& out) : m_writer(writer), m_out(out) {}

    // Tensors added with their bytes go out as soon as they are next.
    void write_added() {
        const auto& entries = m_writer.m_entries;
        for (; m_next < entries.size() && entries[m_next].data != entry_data::declared; ++m_next)
            if (!entries[m_next].bytes().empty()) m_out.write(entries[m_next].bytes());
    }

    const entry& expect(std::string_view name) {
        write_added();
        const auto& entries = m_writer.m_entries;
        if (m_next == entries.size())
            throw error("safetensors_writer: '" + m_out.target().string() + "': tensor '" + std::string(name) +
                            "' was given after every declared tensor",
                        "declare each tensor before write_streamed(), and give it once");
        if (entries[m_next].name != name)
            throw error("safetensors_writer: '" + m_out.target().string() + "': tensor '" + std::string(name) +
                            "' was given where '" + entries[m_next].name + "' comes next",
                        "give the declared tensors in the order they were declared");
        return entries[m_next];
    }

    void finish() {
        write_added();
        if (m_next < m_writer.m_entries.size())
            throw error("safetensors_writer: '" + m_out.target().string() + "': tensor '" +
                            m_writer.m_entries[m_next].name + "' was declared but never given",
                        "give every declared tensor's bytes during write_streamed()");
    }

    const safetensors_writer& m_writer;
    atomic_file_writer& m_out;
    std::size_t m_next = 0;
};

template <class Fill>
    requires std::invocable<Fill&, safetensors_writer::stream&>
void safetensors_writer::write_streamed(const std::filesystem::path& path, Fill&& fill) const {
    write_file_atomically(path, [&](atomic_file_writer& out) {
        write_header_to([&](std::span<const std::byte> chunk) { out.write(chunk); });
        stream s(*this, out);
        std::invoke(fill, s);
        s.finish();
    });
}

// ---- reader ------------------------------------------------------------------------------------

struct safetensors_tensor_info {
    safetensors_dtype dtype;
    std::vector<std::size_t> shape;
    std::uint64_t begin;               // data_offsets, relative to the byte buffer
    std::uint64_t end;
    std::span<const std::byte> bytes;  // the tensor's data inside the file's buffer

    std::uint64_t element_count() const { return detail::element_count_of(shape); }
};

// A whole safetensors file in memory, validated on open. The byte buffer starts on a 64-byte
// boundary, so get<T>() can hand out views without copying whenever a tensor's offset is a
// multiple of its element size. Hugging Face's writer orders tensors by dtype size to arrange
// that; safetensors_writer keeps insertion order, so a narrow dtype added before a wide one can
// misalign it. copy_to() works for any offset.
//
// open_header() validates the same header but reads no tensor data: the file stays open and
// read_as_float() reads one tensor at a time straight into its destination (a checkpoint of many
// GB is never held whole in memory). Such a file has no bytes() or get() views.
class safetensors_file {
public:
    static safetensors_file open(const std::filesystem::path& path) {
        detail::unique_fd fd = detail::open_or_throw(path, O_RDONLY, "open safetensors file");
        const std::uint64_t size = detail::file_size_of(fd.get(), path);
        safetensors_file file;
        file.m_source = path.string();
        std::array<std::byte, 8> length{};
        if (size >= 8) detail::read_exactly(fd.get(), length, 0, path);
        std::byte* start = file.allocate(size, size >= 8 ? read_header_length(length) : 0);
        detail::read_exactly(fd.get(), std::span(start, size), 0, path);
        file.parse(std::span<const std::byte>(start, size));
        return file;
    }

    // Only the header is read and validated (against the file's size); tensors are read on demand
    // by read_as_float(), from the file kept open.
    static safetensors_file open_header(const std::filesystem::path& path) {
        detail::unique_fd fd = detail::open_or_throw(path, O_RDONLY, "open safetensors file");
        const std::uint64_t size = detail::file_size_of(fd.get(), path);
        safetensors_file file;
        file.m_source = path.string();
        if (size < 8)
            file.fail_corrupt("the file is " + std::to_string(size) +
                              " bytes long, shorter than the 8-byte header length that starts every safetensors file");
        std::array<std::byte, 8> length{};
        detail::read_exactly(fd.get(), length, 0, path);
        const std::uint64_t n = file.checked_header_length(read_header_length(length), size - 8);
        std::string text(static_cast<std::size_t>(n), '\0');
        detail::read_exactly(fd.get(), std::as_writable_bytes(std::span(text)), 8, path);
        file.parse_header(text, size - 8 - n, nullptr);
        file.m_data_start = 8 + n;
        file.m_fd = std::make_shared<detail::unique_fd>(std::move(fd));
        return file;
    }

    // The same validation for a file already in memory; `source` names it in errors.
    static safetensors_file from_bytes(std::span<const std::byte> bytes, std::string source = "<memory>") {
        safetensors_file file;
        file.m_source = std::move(source);
        std::array<std::byte, 8> length{};
        if (bytes.size() >= 8) std::memcpy(length.data(), bytes.data(), 8);
        std::byte* start = file.allocate(bytes.size(), bytes.size() >= 8 ? read_header_length(length) : 0);
        if (!bytes.empty()) std::memcpy(start, bytes.data(), bytes.size());
        file.parse(std::span<const std::byte>(start, bytes.size()));
        return file;
    }

    safetensors_file(safetensors_file&&) noexcept = default;
    safetensors_file& operator=(safetensors_file&&) noexcept = default;

    // In the order the header lists them.
    const std::vector<std::string>& names() const noexcept { return m_names; }
    std::size_t size() const noexcept { return m_names.size(); }
    bool contains(std::string_view name) const { return m_index.find(name) != m_index.end(); }
    const std::map<std::string, std::string, std::less<>>& metadata() const noexcept { return m_metadata; }
    const std::string& source() const noexcept { return m_source; }
    std::uint64_t header_size() const noexcept { return m_header_size; }

    const safetensors_tensor_info& info(std::string_view name) const {
        const auto it = m_index.find(name);
        if (it == m_index.end()) {
            std::string held;
            for (std::size_t i = 0; i < m_names.size() && i < 8; ++i) held += (i ? ", " : "") + m_names[i];
            if (m_names.size() > 8) held += ", ...";
            throw error("safetensors: '" + m_source + "' has no tensor '" + std::string(name) + "'",
                        m_names.empty() ? std::string("the file holds no tensors")
                                        : "it holds " + std::to_string(m_names.size()) + " tensors: " + held);
        }
        return m_infos[it->second];
    }

    std::span<const std::byte> bytes(std::string_view name) const {
        require_in_memory(name);
        return info(name).bytes;
    }

    // True when only the header was read (open_header): tensors are read with read_as_float().
    bool header_only() const noexcept { return m_fd != nullptr; }

    // The tensor converted to float exactly: F32 as is, BF16 and F16 widened (every value of
    // either is a float). Works on whole files and header-only ones (read from the file in pieces,
    // so the only memory used is `destination` and a bounded staging buffer). F64 and the integer
    // dtypes are refused: they do not convert exactly, or are not weights.
    void read_as_float(std::string_view name, std::span<float> destination) const {
        const safetensors_tensor_info& t = info(name);
        if (t.dtype != safetensors_dtype::f32 && t.dtype != safetensors_dtype::bf16 && t.dtype != safetensors_dtype::f16)
            fail("tensor '" + std::string(name) + "' is " + std::string(to_string(t.dtype)) +
                     "; read_as_float converts F32, BF16 and F16 exactly, and nothing else",
                 "convert the checkpoint's weights to one of those dtypes");
        if (destination.size() != t.element_count())
            fail("tensor '" + std::string(name) + "' has shape " + detail::shape_string(t.shape) + " (" +
                     std::to_string(t.element_count()) + " elements), but the destination holds " +
                     std::to_string(destination.size()) + " elements",
                 "size the destination to the tensor, or check that the file matches the model");
        if (destination.empty()) return;  // a tensor with a zero extent: nothing to read
        const std::size_t width = element_size(t.dtype);
        const auto convert = [&](std::span<const std::byte> from, float* to) {
            const std::size_t count = from.size() / width;
            if (t.dtype == safetensors_dtype::f32) {
                std::memcpy(to, from.data(), from.size());
                return;
            }
            for (std::size_t i = 0; i < count; ++i) {
                std::uint16_t bits;
                std::memcpy(&bits, from.data() + 2 * i, 2);
                to[i] = t.dtype == safetensors_dtype::bf16 ? bf16_to_float(bits) : f16_to_float(bits);
            }
        };
        if (!header_only()) {
            convert(t.bytes, destination.data());
            return;
        }
        if (t.dtype == safetensors_dtype::f32) {  // straight into the destination
            detail::read_exactly(m_fd->get(), std::as_writable_bytes(destination), m_data_start + t.begin, m_source);
            return;
        }
        constexpr std::size_t staging_elements = std::size_t{1} << 21;  // 4 MiB of 16-bit values
        std::vector<std::byte> staging(std::min<std::size_t>(destination.size(), staging_elements) * width);
        for (std::size_t done = 0; done < destination.size();) {
            const std::size_t count = std::min(staging_elements, destination.size() - done);
            const std::span<std::byte> piece(staging.data(), count * width);
            detail::read_exactly(m_fd->get(), piece, m_data_start + t.begin + done * width, m_source);
            convert(piece, destination.data() + done);
            done += count;
        }
    }

    // A view into the file's buffer, valid as long as this object lives.
    template <SafetensorsElement T>
    std::span<const T> get(std::string_view name) const {
        return view_as<T>(checked<T>(name, nullptr), name);
    }

    // Also requires the tensor's shape to be exactly `expected_shape`.
    template <SafetensorsElement T>
    std::span<const T> get(std::string_view name, const std::vector<std::size_t>& expected_shape) const {
        return view_as<T>(checked<T>(name, &expected_shape), name);
    }

    template <SafetensorsElement T>
    void copy_to(std::string_view name, std::span<T> destination) const {
        copy_checked(checked<T>(name, nullptr), name, destination);
    }

    template <SafetensorsElement T>
    void copy_to(std::string_view name, std::span<T> destination,
                 const std::vector<std::size_t>& expected_shape) const {
        copy_checked(checked<T>(name, &expected_shape), name, destination);
    }

private:
    static constexpr std::size_t buffer_alignment = 64;

    struct aligned_delete {
        void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{buffer_alignment}); }
    };

    safetensors_file() = default;

    static std::uint64_t read_header_length(std::span<const std::byte, 8> bytes) {
        std::uint64_t n = 0;
        for (std::size_t i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
        return n;
    }

    // Room for the whole file, placed so that its byte buffer (at 8 + N) lands on an aligned address.
    std::byte* allocate(std::uint64_t file_size, std::uint64_t header_length) {
        const std::size_t shift = (buffer_alignment - (8 + header_length) % buffer_alignment) % buffer_alignment;
        m_storage.reset(static_cast<std::byte*>(
            ::operator new[](static_cast<std::size_t>(file_size) + shift, std::align_val_t{buffer_alignment})));
        return m_storage.get() + shift;
    }

    std::string prefix() const { return "safetensors: '" + m_source + "': "; }

    void require_in_memory(std::string_view name) const {
        if (header_only())
            fail("tensor '" + std::string(name) + "' has no bytes in memory: the file was opened with open_header()",
                 "read it with read_as_float(), or open the whole file with open()");
    }

    std::uint64_t checked_header_length(std::uint64_t n, std::uint64_t after_length) const {
        if (n > safetensors_max_header_bytes)
            fail_corrupt("the header length is " + std::to_string(n) + " bytes, above the limit of " +
                         std::to_string(safetensors_max_header_bytes));
        if (n > after_length)
            fail_corrupt("the header length is " + std::to_string(n) + " bytes, larger than the " +
                         std::to_string(after_length) + " bytes that follow it");
        return n;
    }

    [[noreturn]] void fail(const std::string& what, const std::string& hint) const {
        throw error(prefix() + what, hint);
    }

    [[noreturn]] void fail_corrupt(const std::string& what) const {
        fail(what, "the file is corrupt, truncated or not a safetensors file; write it again");
    }

    void parse(std::span<const std::byte> file);
    // buffer: the byte buffer in memory, or null for a header-only file (then only its size is known).
    void parse_header(std::string_view text, std::uint64_t buffer_size, const std::byte* buffer);
    void parse_metadata(const nlohmann::json& value);
    safetensors_tensor_info parse_tensor(const std::string& name, const nlohmann::json& value,
                                         std::uint64_t buffer_size, const std::byte* buffer) const;
    void check_coverage(std::uint64_t buffer_size) const;

    template <SafetensorsElement T>
    const safetensors_tensor_info& checked(std::string_view name,
                                           const std::vector<std::size_t>* expected_shape) const {
        require_in_memory(name);
        const safetensors_tensor_info& t = info(name);
        if (t.dtype != safetensors_dtype_v<T>)
            fail("tensor '" + std::string(name) + "' is " + std::string(to_string(t.dtype)) + ", but was read as " +
                     std::string(to_string(safetensors_dtype_v<T>)),
                 "read it with the element type of " + std::string(to_string(t.dtype)) +
                     ", or convert from the raw bytes()");
        if (expected_shape && *expected_shape != t.shape)
            fail("tensor '" + std::string(name) + "' has shape " + detail::shape_string(t.shape) + ", expected " +
                     detail::shape_string(*expected_shape),
                 "the file was written for a different model configuration");
        if constexpr (std::is_same_v<std::remove_cv_t<T>, bool>) {
            for (std::byte b : t.bytes)
                if (b != std::byte{0} && b != std::byte{1})
                    fail_corrupt("BOOL tensor '" + std::string(name) + "' holds the byte " +
                                 std::to_string(static_cast<int>(b)) + ", which is neither 0 nor 1");
        }
        return t;
    }

    template <SafetensorsElement T>
    std::span<const T> view_as(const safetensors_tensor_info& t, std::string_view name) const {
        if (reinterpret_cast<std::uintptr_t>(t.bytes.data()) % alignof(T) != 0)
            fail("tensor '" + std::string(name) + "' at data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                     ") is not aligned for " + std::string(to_string(t.dtype)) + " and cannot be viewed in place",
                 "use copy_to(), which has no alignment requirement");
        return {reinterpret_cast<const T*>(t.bytes.data()), static_cast<std::size_t>(t.element_count())};
    }

    template <SafetensorsElement T>
    void copy_checked(const safetensors_tensor_info& t, std::string_view name, std::span<T> destination) const {
        if (destination.size() != t.element_count())
            fail("tensor '" + std::string(name) + "' has shape " + detail::shape_string(t.shape) + " (" +
                     std::to_string(t.element_count()) + " elements), but the destination holds " +
                     std::to_string(destination.size()) + " elements",
                 "size the destination to the tensor, or check that the file matches the model");
        if (!t.bytes.empty()) std::memcpy(destination.data(), t.bytes.data(), t.bytes.size());
    }

    std::string m_source;
    std::unique_ptr<std::byte[], aligned_delete> m_storage;
    std::uint64_t m_header_size = 0;
    std::vector<std::string> m_names;
    std::vector<safetensors_tensor_info> m_infos;  // parallel to m_names
    std::map<std::string, std::size_t, std::less<>> m_index;
    std::map<std::string, std::string, std::less<>> m_metadata;
    std::shared_ptr<detail::unique_fd> m_fd;  // header-only files: the open file
    std::uint64_t m_data_start = 0;           // header-only files: the byte buffer's offset in it
};

inline void safetensors_file::parse(std::span<const std::byte> file) {
    if (file.size() < 8)
        fail_corrupt("the file is " + std::to_string(file.size()) +
                     " bytes long, shorter than the 8-byte header length that starts every safetensors file");
    const std::uint64_t n = checked_header_length(read_header_length(file.first<8>()), file.size() - 8);
    const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), static_cast<std::size_t>(n));
    const std::span<const std::byte> buffer = file.subspan(8 + static_cast<std::size_t>(n));
    parse_header(text, buffer.size(), buffer.data());
}

inline void safetensors_file::parse_header(std::string_view text, std::uint64_t buffer_size, const std::byte* buffer) {
    m_header_size = text.size();
    if (text.empty() || text.front() != '{')
        fail_corrupt("the header does not start with '{'");

    // nlohmann keeps the last of two equal keys and sorts object keys; the parse callback sees every
    // key in file order, so it both refuses duplicates and records the order of the tensors.
    std::vector<std::set<std::string>> open_objects;
    std::vector<std::string> top_level_keys;
    const auto on_event = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using event_t = nlohmann::json::parse_event_t;
        if (event == event_t::object_start) open_objects.emplace_back();
        if (event == event_t::object_end) open_objects.pop_back();
        if (event == event_t::key) {
            const std::string& key = parsed.get_ref<const std::string&>();
            if (!open_objects.back().insert(key).second)
                fail_corrupt(open_objects.size() == 1 ? "the header lists '" + key + "' twice"
                                                      : "the header entry '" + top_level_keys.back() +
                                                            "' has the field '" + key + "' twice");
            if (open_objects.size() == 1) top_level_keys.push_back(key);
        }
        return true;
    };
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(text, on_event);
    } catch (const nlohmann::json::parse_error& e) {
        fail_corrupt(std::string("the header is not valid JSON: ") + e.what());
    } catch (const nlohmann::json::out_of_range& e) {  // a number past a double's range: 1e400
        fail_corrupt(std::string("the header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) fail_corrupt(std::string("the header is a JSON ") + header.type_name() + ", not an object");

    m_names.reserve(top_level_keys.size());
    m_infos.reserve(top_level_keys.size());
    for (const std::string& name : top_level_keys) {
        const nlohmann::json& value = header.at(name);
        if (name == "__metadata__") {
            parse_metadata(value);
            continue;
        }
        if (name.empty())  // safetensors_writer refuses it too: a file strata reads is one it can write
            fail_corrupt("a tensor has an empty name");
        m_index.emplace(name, m_names.size());
        m_names.push_back(name);
        m_infos.push_back(parse_tensor(name, value, buffer_size, buffer));
    }
    check_coverage(buffer_size);
}

inline void safetensors_file::parse_metadata(const nlohmann::json& value) {
    if (!value.is_object())
        fail_corrupt(std::string("__metadata__ is a JSON ") + value.type_name() + ", not an object of strings");
    for (const auto& [key, item] : value.items()) {
        if (!item.is_string())
            fail_corrupt("__metadata__ entry '" + key + "' is a JSON " + item.type_name() +
                         "; safetensors metadata values are strings");
        m_metadata.emplace(key, item.get<std::string>());
    }
}

inline safetensors_tensor_info safetensors_file::parse_tensor(const std::string& name,
                                                              const nlohmann::json& value,
                                                              std::uint64_t buffer_size,
                                                              const std::byte* buffer) const {
    const std::string where = "tensor '" + name + "'";
    if (!value.is_object()) fail_corrupt(where + " is described by a JSON " + value.type_name() + ", not an object");
    const auto field = [&](const char* key) -> const nlohmann::json& {
        const auto it = value.find(key);
        if (it == value.end()) fail_corrupt(where + " has no \"" + key + "\"");
        return *it;
    };
    const auto unsigned_list = [&](const char* key) {
        const nlohmann::json& list = field(key);
        std::vector<std::uint64_t> numbers;
        bool ok = list.is_array();
        for (std::size_t i = 0; ok && i < list.size(); ++i) {
            ok = list[i].is_number_unsigned();
            if (ok) numbers.push_back(list[i].get<std::uint64_t>());
        }
        if (!ok) fail_corrupt(where + ": \"" + key + "\" is " + list.dump() + ", not a list of non-negative integers");
        return numbers;
    };

    const nlohmann::json& dtype_json = field("dtype");
    const std::optional<safetensors_dtype> dtype =
        dtype_json.is_string() ? parse_safetensors_dtype(dtype_json.get_ref<const std::string&>()) : std::nullopt;
    if (!dtype) {
        std::string known;
        for (const auto& row : detail::safetensors_dtype_table) known += (known.empty() ? "" : ", ") + std::string(row.name);
        fail(where + " has the unknown dtype " + dtype_json.dump(), "strata reads " + known);
    }

    safetensors_tensor_info info{*dtype, {}, 0, 0, {}};
    for (std::uint64_t extent : unsigned_list("shape")) info.shape.push_back(static_cast<std::size_t>(extent));
    const std::vector<std::uint64_t> offsets = unsigned_list("data_offsets");
    if (offsets.size() != 2)
        fail_corrupt(where + ": \"data_offsets\" has " + std::to_string(offsets.size()) +
                     " numbers, not [begin, end]");
    info.begin = offsets[0];
    info.end = offsets[1];
    const std::string range = "[" + std::to_string(info.begin) + ", " + std::to_string(info.end) + "]";
    if (info.begin > info.end) fail_corrupt(where + " has data_offsets " + range + " that end before they begin");
    if (info.end > buffer_size)
        fail_corrupt(where + " has data_offsets " + range + " that reach past the end of the " +
                     std::to_string(buffer_size) + "-byte buffer");
    const std::optional<std::uint64_t> needed = detail::tensor_byte_count(info.shape, info.dtype);
    if (!needed) fail_corrupt(where + " has shape " + detail::shape_string(info.shape) + " whose byte size overflows");
    if (*needed != info.end - info.begin)
        fail_corrupt(where + " has shape " + detail::shape_string(info.shape) + " of " + std::string(to_string(info.dtype)) +
                     ", which needs " + std::to_string(*needed) + " bytes, but its data_offsets " + range + " span " +
                     std::to_string(info.end - info.begin));
    if (buffer)
        info.bytes = {buffer + info.begin, static_cast<std::size_t>(info.end - info.begin)};
    return info;
}

// The format requires the tensors to tile the buffer exactly: in offset order each one begins where
// the previous ended, and the last ends at the end of the file.
inline void safetensors_file::check_coverage(std::uint64_t buffer_size) const {
    std::vector<std::size_t> order(m_infos.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return std::pair(m_infos[a].begin, m_infos[a].end) < std::pair(m_infos[b].begin, m_infos[b].end);
    });
    std::uint64_t covered = 0;
    const std::string* previous = nullptr;
    for (std::size_t i : order) {
        const safetensors_tensor_info& t = m_infos[i];
        if (t.begin < covered)
            fail_corrupt("tensor '" + m_names[i] + "' (data_offsets [" + std::to_string(t.begin) + ", " +
                         std::to_string(t.end) + "]) overlaps tensor '" + *previous + "', which ends at " +
                         std::to_string(covered));
        if (t.begin > covered)
            fail_corrupt("bytes [" + std::to_string(covered) + ", " + std::to_string(t.begin) +
                         ") of the buffer belong to no tensor: the data_offsets are not contiguous (gap before '" +
                         m_names[i] + "')");
        covered = t.end;
        previous = &m_names[i];
    }
    if (covered != buffer_size)
        fail_corrupt("the tensors cover " + std::to_string(covered) + " bytes of the " + std::to_string(buffer_size) +
                     "-byte buffer; the rest belongs to no tensor");
}

}  // namespace strata
