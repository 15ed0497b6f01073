// Initialization of a model's weights from a seed, group by group on several host threads.
//
// Group g draws from its own generator, rng::stream(seed, g), so the weights depend on the seed
// and the model only: not on the number of threads, the order in which they finish, or where
// each group lives. At 10B parameters the single-generator loop took minutes; with one generator
// per group it runs on every core.
#pragma once

#include <strata/core/rng.hpp>  // rng

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

namespace detail {
// f(item) for every item, on up to `workers` threads (the caller's included); the first failure
// stops the others at their next item and is rethrown.
template <class F>
void parallel_for_each(const std::vector<std::size_t>& items, std::size_t workers, F&& f) {
    std::atomic<std::size_t> next{0};
    std::mutex failure_mutex;
    std::exception_ptr failure;
    auto work = [&] {
        try {
            for (std::size_t i; (i = next++) < items.size();) f(items[i]);
        } catch (...) {
            std::lock_guard lock(failure_mutex);
            if (!failure) failure = std::current_exception();
            next = items.size();
        }
    };
    {
        std::vector<std::jthread> threads;
        for (std::size_t w = 1; w < std::min(workers, items.size()); ++w) threads.emplace_back(work);
        work();
    }  // joined
    if (failure) std::rethrow_exception(failure);
}
}  // namespace detail

// Fills every group of `model`. home(g) is the group's host memory when it has one that threads
// may write (a std::span<R> of numel elements), else an empty span: then the group is filled in a
// worker's buffer and handed to store(g, std::span<const R>). Host groups use every core; groups
// without a host home use at most `buffered_workers` buffers of the largest group at once, so
// the transient host memory stays bounded beside a full pinned tier.
template <class Model, class Home, class Store>
void initialize_groups(const Model& model, std::uint64_t seed, Home&& home, Store&& store,
                       std::size_t buffered_workers = 4) {
    using R = typename Model::value_type;
    const auto& groups = model.groups();
    std::vector<std::size_t> direct, buffered;
    std::size_t largest = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
        if (home(g).empty()) {
            buffered.push_back(g);
            largest = std::max(largest, groups[g].numel());
        } else {
            direct.push_back(g);
        }
    }
    const std::size_t cores = std::max<std::size_t>(1, std::thread::hardware_concurrency());
    detail::parallel_for_each(direct, cores, [&](std::size_t g) {
        rng gen = rng::stream(seed, g);
        model.initialize(g, home(g), gen);
    });
    if (buffered.empty()) return;
    std::mutex buffers_mutex;
    std::vector<std::vector<R>> free_buffers;
    detail::parallel_for_each(buffered, std::min(cores, std::max<std::size_t>(buffered_workers, 1)), [&](std::size_t g) {
        std::vector<R> buffer;
        {
            std::lock_guard lock(buffers_mutex);
            if (!free_buffers.empty()) {
                buffer = std::move(free_buffers.back());
                free_buffers.pop_back();
            }
        }
        buffer.resize(largest);
        std::span<R> block(buffer.data(), groups[g].numel());
        rng gen = rng::stream(seed, g);
        model.initialize(g, block, gen);
        store(g, std::span<const R>(block));
        std::lock_guard lock(buffers_mutex);
        free_buffers.push_back(std::move(buffer));
    });
}

}  // namespace strata
