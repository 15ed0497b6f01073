// copy_async: the one way data moves between tiers. It takes a stream and yields an event;
// nothing waits implicitly. Every Dst x Src pair of tiers is supported: memory <-> memory by
// one memcpy/DMA, memory <-> storage by pread/pwrite, and the rest staged through the host.
#pragma once

#include <strata/backend/backend.hpp>      // Backend
#include <strata/core/error.hpp>           // strata::error
#include <strata/tensor/tensor_view.hpp>   // tensor_view, address_of
#include <strata/tier/tier.hpp>            // Tier, Addressable, id_of

#include <concepts>  // std::same_as
#include <string>    // std::string

namespace strata {

template <Backend B, class T, Tier Dst, Tier Src>
typename B::event copy_async(B& backend, tensor_view<T, Dst> dst, tensor_view<const T, Src> src,
                             typename B::stream& s) {
    static_assert(!std::is_const_v<T>, "copy_async: the destination view must be writable, not a view of const");
    if (dst.numel() != src.numel())
        throw error("copy from " + std::string(Src::name) + " tier " + src.shape().to_string() + " to " +
                        std::string(Dst::name) + " tier " + dst.shape().to_string() + ": element counts differ",
                    "copy between views of the same size");
    const std::size_t bytes = src.bytes();
    if constexpr (Addressable<Dst> && Addressable<Src>) {
        return backend.copy(address_of(dst), id_of<Dst>, address_of(src), id_of<Src>, bytes, s);
    } else if constexpr (Addressable<Dst>) {  // storage -> memory
        return backend.read(address_of(dst), id_of<Dst>, *src.file(), src.byte_offset(), bytes, s);
    } else if constexpr (Addressable<Src>) {  // memory -> storage
        return backend.write(*dst.file(), dst.byte_offset(), address_of(src), id_of<Src>, bytes, s);
    } else {  // storage -> storage
        return backend.copy(*dst.file(), dst.byte_offset(), *src.file(), src.byte_offset(), bytes, s);
    }
}

// Convenience: a non-const source view.
template <Backend B, class T, Tier Dst, Tier Src>
    requires(!std::is_const_v<T>)
typename B::event copy_async(B& backend, tensor_view<T, Dst> dst, tensor_view<T, Src> src, typename B::stream& s) {
    return copy_async(backend, dst, tensor_view<const T, Src>(src), s);
}

}  // namespace strata
