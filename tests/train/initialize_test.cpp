// initialize_groups: one generator per group, so the weights do not depend on threads or homes.
#include <strata/nn/cpu_ops.hpp>          // ops<cpu_backend>
#include <strata/model/gpt.hpp>           // gpt_model
#include <strata/strata.hpp>              // cpu_backend
#include <strata/train/initialize.hpp>    // initialize_groups

#include <doctest/doctest.h>

#include <atomic>     // std::atomic
#include <mutex>      // std::mutex
#include <stdexcept>  // std::runtime_error
#include <vector>     // std::vector

namespace initialize_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {
const gpt_config config{.vocab_size = 37, .max_seq = 8, .n_layer = 5, .n_head = 2, .n_embd = 16};

// Every group filled directly (home spans), or every one through buffers and store().
std::vector<std::vector<float>> initialized(const gpt_model<float, cpu_backend>& model, bool direct,
                                            std::size_t buffered_workers) {
    std::vector<std::vector<float>> blocks;
    for (const auto& g : model.groups()) blocks.emplace_back(g.numel(), -1.0f);
    std::mutex m;
    std::size_t stored = 0;
    initialize_groups(
        model, 7, [&](std::size_t g) { return direct ? std::span<float>(blocks[g]) : std::span<float>{}; },
        [&](std::size_t g, std::span<const float> block) {
            std::lock_guard lock(m);
            REQUIRE(block.size() == blocks[g].size());
            std::copy(block.begin(), block.end(), blocks[g].begin());
            ++stored;
        },
        buffered_workers);
    CHECK(stored == (direct ? 0 : blocks.size()));
    return blocks;
}
}  // namespace

TEST_CASE("initialize_groups: the weights depend on the seed and the group only") {
    const gpt_model<float, cpu_backend> model(config);
    const auto direct = initialized(model, true, 4);
    CHECK(initialized(model, false, 1) == direct);
    CHECK(initialized(model, false, 3) == direct);
    // group g is what its own generator gives, whatever ran before it
    for (std::size_t g = 0; g < direct.size(); ++g) {
        std::vector<float> expect(direct[g].size());
        rng gen = rng::stream(7, g);
        model.initialize(g, expect, gen);
        CHECK(expect == direct[g]);
    }
    // the blocks differ from one another (independent streams), and weights were drawn
    CHECK(direct[1] != direct[2]);
    CHECK(rng::stream(7, 1).next_u64() != rng::stream(7, 2).next_u64());
    CHECK(rng::stream(7, 1).next_u64() != rng::stream(8, 1).next_u64());
}

TEST_CASE("initialize_groups: a failure in store() reaches the caller, and the others stop") {
    const gpt_model<float, cpu_backend> model(config);
    std::atomic<int> calls{0};
    CHECK_THROWS_WITH_AS(initialize_groups(
                             model, 1, [](std::size_t) { return std::span<float>{}; },
                             [&](std::size_t g, std::span<const float>) {
                                 ++calls;
                                 if (g == 2) throw std::runtime_error("device copy failed");
                             },
                             1),
                         "device copy failed", std::runtime_error);
    CHECK(calls.load() == 3);  // one worker: groups 0, 1, 2, then nothing more
}

}  // namespace initialize_test
