// tiered_tensor<T, Home, Backend>: owns storage for a shaped tensor in its home tier.
//
// Allocation reserves the bytes in the home tier's budget first (over budget: a strata::error
// naming the tier, the bytes asked for and the bytes left). Host code touches the elements only
// when Home is host-accessible; anything else moves through copy_to/copy_from, which take a
// stream and yield an event.
//
// Lifetime rule: the owner must make sure no queued copy still uses a tensor when it is
// destroyed (wait for the copy's event first). Destruction never waits implicitly.
#pragma once

#include <strata/backend/backend.hpp>       // Backend
#include <strata/backend/cpu_backend.hpp>   // cpu_backend (the default backend)
#include <strata/core/shape.hpp>            // shape
#include <strata/storage/storage_file.hpp>  // storage_file
#include <strata/tensor/copy.hpp>           // copy_async
#include <strata/tensor/tensor_view.hpp>    // tensor_view, device_ptr
#include <strata/tier/tier.hpp>             // Tier, HostAccessible, Addressable, id_of

#include <concepts>  // std::same_as
#include <cstddef>   // std::size_t
#include <memory>    // std::unique_ptr
#include <span>      // std::span
#include <string>    // std::string
#include <utility>   // std::exchange, std::move

namespace strata {

template <class T, Tier Home, Backend B = cpu_backend>
class tiered_tensor {
public:
    using element_type = T;
    using tier = Home;
    using backend_type = B;

    tiered_tensor(B& backend, strata::shape s, std::string name = "tensor")
        : m_backend(&backend), m_shape(std::move(s)), m_name(std::move(name)) {
        if constexpr (Addressable<Home>)
            m_data = static_cast<T*>(backend.allocate(id_of<Home>, bytes(), m_name));
        else
            m_file = backend.create_file(m_name, bytes());
    }

    tiered_tensor(const tiered_tensor&) = delete;
    tiered_tensor& operator=(const tiered_tensor&) = delete;
    tiered_tensor(tiered_tensor&& other) noexcept
        : m_backend(other.m_backend),
          m_shape(std::move(other.m_shape)),
          m_name(std::move(other.m_name)),
          m_data(std::exchange(other.m_data, nullptr)),
          m_file(std::move(other.m_file)) {}
    tiered_tensor& operator=(tiered_tensor&& other) noexcept {
        if (this != &other) {
            release();
            m_backend = other.m_backend;
            m_shape = std::move(other.m_shape);
            m_name = std::move(other.m_name);
            m_data = std::exchange(other.m_data, nullptr);
            m_file = std::move(other.m_file);
        }
        return *this;
    }
    ~tiered_tensor() { release(); }

    const strata::shape& shape() const { return m_shape; }
    std::size_t numel() const { return m_shape.numel(); }
    std::size_t bytes() const { return numel() * sizeof(T); }
    const std::string& name() const { return m_name; }
    B& backend() const { return *m_backend; }

    tensor_view<T, Home> view() {
        if constexpr (Addressable<Home>)
            return {m_data, m_shape};
        else
            return {m_file.get(), 0, m_shape};
    }
    tensor_view<const T, Home> view() const {
        if constexpr (Addressable<Home>)
            return {m_data, m_shape};
        else
            return {static_cast<const storage_file*>(m_file.get()), 0, m_shape};
    }

    // ---- host access: host_tier only ----
    T* data()
        requires HostAccessible<Home>
    {
        return m_data;
    }
    const T* data() const
        requires HostAccessible<Home>
    {
        return m_data;
    }
    std::span<T> span()
        requires HostAccessible<Home>
    {
        return {m_data, numel()};
    }
    std::span<const T> span() const
        requires HostAccessible<Home>
    {
        return {m_data, numel()};
    }
    T& operator[](std::size_t i)
        requires HostAccessible<Home>
    {
        return m_data[i];
    }
    const T& operator[](std::size_t i) const
        requires HostAccessible<Home>
    {
        return m_data[i];
    }

    // ---- kernel access: device_tier only ----
    device_ptr<T> device_data()
        requires std::same_as<Home, device_tier>
    {
        return device_ptr<T>(m_data);
    }

    // ---- asynchronous copies to and from any tier ----
    template <Tier Dst>
    typename B::event copy_to(tiered_tensor<T, Dst, B>& dst, typename B::stream& s) const {
        return copy_async(*m_backend, dst.view(), view(), s);
    }
    template <Tier Src>
    typename B::event copy_from(const tiered_tensor<T, Src, B>& src, typename B::stream& s) {
        return copy_async(*m_backend, view(), src.view(), s);
    }

private:
    void release() noexcept {
        if constexpr (Addressable<Home>) {
            if (m_data) m_backend->deallocate(id_of<Home>, m_data, bytes());
            m_data = nullptr;
        } else {
            if (m_file) m_backend->destroy_file(std::move(m_file));
        }
    }

    B* m_backend;
    strata::shape m_shape;
    std::string m_name;
    T* m_data = nullptr;
    std::unique_ptr<storage_file> m_file;
};

}  // namespace strata
