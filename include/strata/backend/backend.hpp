// The Backend concept: what tiered_tensor, the pipeline and the trainer need from a backend.
// cpu_backend and cuda_backend model it; a new backend (another GPU API) would too.
#pragma once

#include <strata/storage/storage_file.hpp>  // storage_file
#include <strata/tier/budget.hpp>           // tier_budget
#include <strata/tier/tier.hpp>             // tier_id

#include <concepts>     // std::same_as, std::convertible_to
#include <cstddef>      // std::size_t
#include <memory>       // std::unique_ptr
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace strata {

template <class B>
concept Backend = requires(B& b, typename B::stream& s, const typename B::event& e, tier_id t, void* p,
                           const void* cp, std::size_t n, storage_file& f, const std::string& name) {
    { B::name } -> std::convertible_to<std::string_view>;
    { b.make_stream(name) } -> std::same_as<typename B::stream>;
    { s.record() } -> std::same_as<typename B::event>;
    s.wait(e);         // later work on s waits for e
    s.synchronize();   // named host wait
    e.wait();          // named host wait
    { e.ready() } -> std::same_as<bool>;
    { b.budget(t) } -> std::same_as<tier_budget&>;
    { b.allocate(t, n, name) } -> std::same_as<void*>;
    b.deallocate(t, p, n);
    { b.create_file(name, n) } -> std::same_as<std::unique_ptr<storage_file>>;
    { b.copy(p, t, cp, t, n, s) } -> std::same_as<typename B::event>;
    { b.zero(p, t, n, s) } -> std::same_as<typename B::event>;
    { b.read(p, t, f, n, n, s) } -> std::same_as<typename B::event>;
    { b.write(f, n, cp, t, n, s) } -> std::same_as<typename B::event>;
    { b.copy(f, n, f, n, n, s) } -> std::same_as<typename B::event>;
};

}  // namespace strata
