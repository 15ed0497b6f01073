// The group protocol between a model and whoever owns its parameters (the trainer's device-resident
// groups, or prefetch_pipeline's streamed ones): the model asks for a group's parameters and
// gradients on a stream, for a forward or a backward use, and says when the work that used them is
// enqueued. The pipeline prefetches in the order of these uses.
#pragma once

#include <concepts>  // std::same_as
#include <cstddef>   // std::size_t

namespace strata {

// When the model uses a group, and for what.
enum class group_use { forward, backward };

// What the model needs from whoever owns the parameters (resident trainer or pipeline).
template <class X, class R, class Stream>
concept GroupBinder = requires(X& x, std::size_t g, Stream& s, group_use u) {
    { x.params(g, s, u) } -> std::same_as<const R*>;  // device address, ready for work on s
    { x.grads(g, s) } -> std::same_as<R*>;            // device address of the group's gradients
    x.done(g, s, u);                                  // work on s that used the group is enqueued
};

}  // namespace strata
