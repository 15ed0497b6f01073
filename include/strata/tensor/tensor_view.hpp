// tensor_view<T, Tier>: a non-owning, contiguous, row-major view of elements in one tier.
//
// What host code may do with a view depends on its tier, at compile time:
//  - host_tier: data(), span(), operator[].
//  - device_tier: only device_data(), a device_ptr that kernels take and host code cannot
//    dereference (no operator*, no operator[]).
//  - storage_tier: nothing but its location (file, byte offset); it moves only by copies.
#pragma once

#include <strata/core/error.hpp>            // strata::error
#include <strata/core/shape.hpp>            // shape
#include <strata/storage/storage_file.hpp>  // storage_file
#include <strata/tier/tier.hpp>             // Tier, HostAccessible, Addressable

#include <concepts>     // std::same_as
#include <cstddef>      // std::size_t
#include <span>         // std::span
#include <string>       // std::to_string
#include <type_traits>  // std::conditional_t, std::is_const_v, std::remove_const_t

namespace strata {

// A pointer to device memory. Kernels (and backends) take the address with get();
// host code cannot read through it by accident.
template <class T>
class device_ptr {
public:
    device_ptr() = default;
    explicit device_ptr(T* p) : m_p(p) {}
    T* get() const { return m_p; }
    device_ptr operator+(std::size_t n) const { return device_ptr(m_p + n); }
    explicit operator bool() const { return m_p != nullptr; }

private:
    T* m_p = nullptr;
};

template <class T, Tier Home>
class tensor_view {
    using file_type = std::conditional_t<std::is_const_v<T>, const storage_file, storage_file>;

public:
    using element_type = T;
    using tier = Home;

    tensor_view() = default;

    // An addressable view (device or host memory).
    tensor_view(T* data, strata::shape s)
        requires Addressable<Home>
        : m_data(data), m_shape(std::move(s)) {}

    // A storage view: `byte_offset` into `file`.
    tensor_view(file_type* file, std::size_t byte_offset, strata::shape s)
        requires std::same_as<Home, storage_tier>
        : m_file(file), m_offset(byte_offset), m_shape(std::move(s)) {}

    // A view of T converts to a view of const T.
    template <class U>
        requires std::same_as<T, const U>
    tensor_view(const tensor_view<U, Home>& other)  // NOLINT(google-explicit-constructor)
        : m_data(other.m_data), m_file(other.m_file), m_offset(other.m_offset), m_shape(other.m_shape) {}

    const strata::shape& shape() const { return m_shape; }
    std::size_t numel() const { return m_shape.numel(); }
    std::size_t bytes() const { return numel() * sizeof(T); }

    // ---- host access: host_tier only ----
    T* data() const
        requires HostAccessible<Home>
    {
        return m_data;
    }
    std::span<T> span() const
        requires HostAccessible<Home>
    {
        return {m_data, numel()};
    }
    T& operator[](std::size_t i) const
        requires HostAccessible<Home>
    {
        return m_data[i];
    }

    // ---- kernel access: device_tier only ----
    device_ptr<T> device_data() const
        requires std::same_as<Home, device_tier>
    {
        return device_ptr<T>(m_data);
    }

    // ---- location: storage_tier only ----
    file_type* file() const
        requires std::same_as<Home, storage_tier>
    {
        return m_file;
    }
    std::size_t byte_offset() const
        requires std::same_as<Home, storage_tier>
    {
        return m_offset;
    }

    // Rows [first, first + count) along axis 0.
    tensor_view slice(std::size_t first, std::size_t count) const {
        const std::size_t rows = m_shape.rank() ? m_shape[0] : 1;
        if (first > rows || count > rows - first)
            throw error("slice [" + std::to_string(first) + ", " + std::to_string(first + count) +
                        ") is out of range for a tensor of shape " + m_shape.to_string());
        auto extents = m_shape.extents();
        const std::size_t row = m_shape.rank() ? m_shape.inner().numel() : 1;
        if (!extents.empty()) extents[0] = count;
        return at_element(first * row, strata::shape(std::move(extents)));
    }

    // The same elements with another shape of the same element count.
    tensor_view reshape(strata::shape s) const {
        if (s.numel() != numel())
            throw error("cannot reshape " + m_shape.to_string() + " (" + std::to_string(numel()) + " elements) to " +
                        s.to_string() + " (" + std::to_string(s.numel()) + " elements)");
        return at_element(0, std::move(s));
    }

    // Elements [offset, offset + s.numel()) of the flat view, with shape s.
    tensor_view flat(std::size_t offset, strata::shape s) const {
        if (offset > numel() || s.numel() > numel() - offset)
            throw error("flat view [" + std::to_string(offset) + ", " + std::to_string(offset + s.numel()) +
                        ") is out of range for " + std::to_string(numel()) + " elements");
        return at_element(offset, std::move(s));
    }

private:
    template <class, Tier>
    friend class tensor_view;
    template <class U, Tier H>
    friend U* address_of(const tensor_view<U, H>&)
        requires Addressable<H>;

    tensor_view at_element(std::size_t offset, strata::shape s) const {
        tensor_view v = *this;
        if constexpr (Addressable<Home>)
            v.m_data = m_data + offset;
        else
            v.m_offset = m_offset + offset * sizeof(T);
        v.m_shape = std::move(s);
        return v;
    }

    T* m_data = nullptr;
    file_type* m_file = nullptr;
    std::size_t m_offset = 0;
    strata::shape m_shape;
};

// The raw address of an addressable view, for backends moving bytes. Not for host code:
// use span() on host views, device_data() for kernels.
template <class U, Tier H>
U* address_of(const tensor_view<U, H>& v)
    requires Addressable<H>
{
    return v.m_data;
}

}  // namespace strata
