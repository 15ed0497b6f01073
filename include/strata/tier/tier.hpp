// Memory tiers as types, and the concepts that say which tiers host code may touch.
//
// A tier is an empty tag (like cuda::mr's properties or Kokkos memory spaces): where memory lives
// is part of a tensor's type, so touching device or storage memory from host code fails to compile
// instead of crashing at run time.
#pragma once

#include <concepts>     // std::same_as
#include <string_view>  // std::string_view

namespace strata {

// GPU memory (on the CPU backend: a bounded arena in host memory that stands in for it).
struct device_tier {
    static constexpr std::string_view name = "device";
    static constexpr bool host_accessible = false;  // host code must copy, never dereference
    static constexpr bool addressable = true;       // has addresses that kernels can use
};

// Pinned host RAM where the backend can pin (page-locked memory makes DMA run at link speed).
struct host_tier {
    static constexpr std::string_view name = "host";
    static constexpr bool host_accessible = true;
    static constexpr bool addressable = true;
};

// A file on local disk/NVMe. Reached only through asynchronous reads and writes, never by address.
struct storage_tier {
    static constexpr std::string_view name = "storage";
    static constexpr bool host_accessible = false;
    static constexpr bool addressable = false;
};

template <class T>
concept Tier = std::same_as<T, device_tier> || std::same_as<T, host_tier> || std::same_as<T, storage_tier>;

// Host code may read and write it through pointers, spans and operator[].
template <class T>
concept HostAccessible = Tier<T> && T::host_accessible;

// Memory with addresses (device or host): a backend copies it with memcpy/DMA. Storage is not.
template <class T>
concept Addressable = Tier<T> && T::addressable;

enum class tier_id { device, host, storage };

template <Tier T>
inline constexpr tier_id id_of = std::same_as<T, device_tier> ? tier_id::device
                                 : std::same_as<T, host_tier> ? tier_id::host
                                                              : tier_id::storage;

constexpr std::string_view name_of(tier_id t) {
    switch (t) {
        case tier_id::device: return device_tier::name;
        case tier_id::host: return host_tier::name;
        case tier_id::storage: return storage_tier::name;
    }
    return "unknown";
}

// How a copy from Src to Dst travels. One fact per line, as a Dst x Src table.
enum class copy_path {
    direct,             // one memcpy / DMA / pread / pwrite
    staged_through_host  // device <-> storage: through a pinned host staging buffer, in chunks
};

template <Tier Dst, Tier Src>
inline constexpr copy_path path_of = copy_path::direct;
template <>
inline constexpr copy_path path_of<device_tier, storage_tier> = copy_path::staged_through_host;
template <>
inline constexpr copy_path path_of<storage_tier, device_tier> = copy_path::staged_through_host;
template <>
inline constexpr copy_path path_of<storage_tier, storage_tier> = copy_path::staged_through_host;

}  // namespace strata
