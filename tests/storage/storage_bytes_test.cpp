// The storage tier's bytes per step in the streamed trainer's counters (the metrics' bytes_storage_read
// and bytes_storage_write): with the AdamW moments on storage, every step reads and writes both
// moments of every group once, whatever the accumulation or clipping; with moments on the host
// nothing; checkpoint I/O of the moments is not step traffic.
#include "support/placements.hpp"  // test::streamed_trainer
#include <strata/nn/cpu_ops.hpp>
#include "support/random_batch.hpp"  // test::random_batches
#include <strata/strata.hpp>
#include <strata/train/checkpoint.hpp>
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace storage_bytes_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

const gpt_config config{.vocab_size = 23, .max_seq = 8, .n_layer = 3, .n_head = 2, .n_embd = 16};

std::vector<data::batch> micro_batches(std::size_t accum, std::size_t BT, int seed) {  // random targets
    return test::random_batches(static_cast<std::uint64_t>(seed),
                                {.vocab = config.vocab_size, .tokens = BT, .count = accum, .scale = 0});
}

tier_options tiers() {
    return {.device_bytes = 64 << 20,
            .host_bytes = 64 << 20,
            .storage_bytes = 64 << 20,
            .storage_dir = std::filesystem::temp_directory_path() / ("strata-test-bytes-" + std::to_string(::getpid()))};
}

// Both AdamW moments of every group, in bytes: what one optimizer step reads and writes back.
std::size_t moment_bytes(const gpt_model<float, cpu_backend>& model) {
    std::size_t n = 0;
    for (const auto& g : model.groups()) n += 2 * g.numel() * sizeof(float);
    return n;
}

// Removes the storage directory once the backend (declared after it) is gone.
struct remove_dir_at_end {
    std::filesystem::path dir;
    ~remove_dir_at_end() { std::filesystem::remove_all(dir); }
};

template <Tier Moments>
void check_step_bytes(double clip, std::size_t accum, std::size_t expected_per_step) {
    const remove_dir_at_end cleanup{tiers().storage_dir};
    cpu_backend backend(tiers());
    gpt_model<float, cpu_backend> model(config);
    train_options o{.batch = 2, .seq = 8, .accum = accum, .clip = clip};
    test::streamed_trainer<gpt_trainer<float, cpu_backend>, 2, Moments> t(backend, model, o);
    t.initialize(3);
    CHECK(t.counters().storage_read_bytes == 0);  // zeroing the moments at construction is not a step
    CHECK(t.counters().storage_write_bytes == 0);
    transfer_counters before = t.counters();
    for (int step = 1; step <= 2; ++step) {
        CAPTURE(step);
        t.step(micro_batches(accum, o.batch * o.seq, step));
        const transfer_counters now = t.counters();
        CHECK(now.storage_read_bytes - before.storage_read_bytes == expected_per_step);
        CHECK(now.storage_write_bytes - before.storage_write_bytes == expected_per_step);
        CHECK(now.h2d_bytes > before.h2d_bytes);  // the other links still count
        CHECK(now.d2h_bytes > before.d2h_bytes);
        before = now;
    }
    // Reading the moments for a checkpoint is not a training step's traffic.
    download_blocks(t, decltype(t)::state_kind::adam_m);
    CHECK(t.counters().storage_read_bytes == before.storage_read_bytes);
}

}  // namespace

TEST_CASE("a streamed step with moments on storage reads and writes both moments of every group once") {
    const std::size_t per_step = moment_bytes(gpt_model<float, cpu_backend>(config));
    REQUIRE(per_step > 0);
    SUBCASE("clipping on, accumulation 2") { check_step_bytes<storage_tier>(1.0, 2, per_step); }
    SUBCASE("clipping off") { check_step_bytes<storage_tier>(0.0, 1, per_step); }
    SUBCASE("moments in the host tier: no storage traffic") { check_step_bytes<host_tier>(1.0, 1, 0); }
}

}  // namespace storage_bytes_test
