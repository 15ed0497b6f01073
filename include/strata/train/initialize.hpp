// Initialization of a model's weights from a seed, group by group on several host threads.
//
// Group g draws from its own generator, rng::stream(seed, g), so the weights depend on the seed
// and the model only: not on the number of threads, the order in which they finish, or where
// each group lives. At 10B parameters the single-generator loop took minutes; with one generator
// per group it runs on every core.
#pragma once

#include <strata/train/rng.hpp>  // rng

#include <algorithm>   // std::min, std::max
#include <atomic>      // std::atomic
#include <cstddef>     // std::size_t
#include <cstdint>     // std::uint64_t
#include <exception>   // std::exception_ptr
#include <mutex>       // std::mutex
#include <span>        // std::span
#include <thread>      // std::jthread
#include <vector>      // std::vector

namespace strata {

// Fills every group of `model` and hands it to store(g, std::span<const R>) (called from the
// worker threads; each group once). Each worker fills one host buffer of the largest group.
template <class Model, class Store>
void initialize_groups(const Model& model, std::uint64_t seed, Store&& store) {
    using R = typename Model::value_type;
    const auto& groups = model.groups();
    std::size_t largest = 0;
    for (const auto& g : groups) largest = std::max(largest, g.numel());
    const std::size_t workers =
        std::max<std::size_t>(1, std::min<std::size_t>(groups.size(), std::thread::hardware_concurrency()));
    std::atomic<std::size_t> next{0};
    std::mutex failure_mutex;
    std::exception_ptr failure;
    auto work = [&] {
        try {
            std::vector<R> buffer(largest);
            for (std::size_t g; (g = next++) < groups.size();) {
                std::span<R> block(buffer.data(), groups[g].numel());
                rng gen = rng::stream(seed, g);
                model.initialize(g, block, gen);
                store(g, std::span<const R>(block));
            }
        } catch (...) {
            std::lock_guard lock(failure_mutex);
            if (!failure) failure = std::current_exception();
            next = groups.size();  // the others stop at their next group
        }
    };
    {
        std::vector<std::jthread> threads;
        for (std::size_t w = 1; w < workers; ++w) threads.emplace_back(work);
        work();
    }  // joined
    if (failure) std::rethrow_exception(failure);
}

}  // namespace strata
