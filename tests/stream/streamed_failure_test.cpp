// The streamed trainer when a step fails: a non-finite loss or gradient norm, and an exception on
// the optimizer thread.
//
// - A NaN loss or norm throws strata::error from step() before any update touches the state,
//   with clipping on and off, exactly as the resident trainer refuses: weights and moments stay
//   bitwise what they were (with clip == 0 the streamed trainer used to schedule AdamW before the
//   norm was known, so a NaN step wrote NaN into every group before the error left step()), and
//   the trainer goes on training from there, bitwise as resident.
// - A diverging learning rate stops both trainers at the same step with the same state.
// - A storage I/O failure inside an overlapped update (moments on the storage tier, a storage
//   file truncated under the run) surfaces as strata::error at the next step or finish_updates,
//   naming the file; the trainer is then failed for good (each later call rethrows) and is
//   destroyed without hanging or touching freed memory (TSan/ASan in CI).
#include "support/placements.hpp"  // test::streamed_trainer
#include "stream/stream_test_support.hpp"  // tiny_gpt, micro_batches, state_of, scratch_tiers

#include <doctest/doctest.h>

#include <cmath>       // std::isfinite, NAN
#include <filesystem>  // std::filesystem
#include <limits>      // std::numeric_limits
#include <optional>    // std::optional
#include <string>      // std::string

namespace streamed_failure_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
using test::micro_batches;
using test::state_of;
using test::tiny_gpt;

namespace {

using resident = gpt_trainer<float, cpu_backend>;
using streamed_host = test::streamed_trainer<gpt_trainer<float, cpu_backend>, 2, host_tier>;
using streamed_storage = test::streamed_trainer<gpt_trainer<float, cpu_backend>, 3, storage_tier>;

train_options options_with_clip(double clip) {
    train_options o{.batch = 2, .seq = 8, .accum = 2, .clip = clip};
    o.schedule = {.kind = lr_kind::constant, .lr = 3e-3, .min_lr = 3e-3, .warmup_steps = 0, .total_steps = 10};
    return o;
}

// One good step, then a NaN written into block 1's first weight: the next step must refuse and
// change nothing; with the weight restored, training goes on.
struct poisoned_run {
    test::trainer_state<float> poisoned, after_error, after_recovery;
    std::string message;
    long step_count_after_error = -1;
    double recovered_loss = 0;
};

template <class Trainer>
poisoned_run run_poisoned(const train_options& o, const std::string& name) {
    test::scratch_tiers tiers(name);
    cpu_backend backend(tiers.options());
    gpt_model<float, cpu_backend> model(tiny_gpt);
    Trainer t(backend, model, o);
    t.initialize(21);
    (void)t.step(micro_batches(0, o.accum, o.batch, o.seq));  // moments are no longer zero

    using kind = typename Trainer::state_kind;
    const std::size_t g = model.block_group(1);
    std::vector<float> good(model.groups()[g].numel());
    t.download(kind::params, g, good);
    std::vector<float> bad = good;
    bad[0] = std::numeric_limits<float>::quiet_NaN();
    t.upload(kind::params, g, bad);

    poisoned_run r;
    r.poisoned = state_of(t);
    try {
        (void)t.step(micro_batches(1, o.accum, o.batch, o.seq));
    } catch (const error& e) {
        r.message = e.what();
    }
    r.step_count_after_error = t.step_count();
    r.after_error = state_of(t);

    t.upload(kind::params, g, good);
    r.recovered_loss = t.step(micro_batches(1, o.accum, o.batch, o.seq)).loss;
    r.after_recovery = state_of(t);
    return r;
}

bool all_finite(const host_blocks<float>& blocks) {
    for (const auto& b : blocks)
        for (float x : b)
            if (!std::isfinite(x)) return false;
    return true;
}

}  // namespace

TEST_CASE_TEMPLATE("a NaN step throws before any update, with clipping on and off, as the resident trainer does",
                   Streamed, streamed_host, streamed_storage) {
    for (double clip : {0.0, 0.05}) {
        CAPTURE(clip);
        const train_options o = options_with_clip(clip);
        const poisoned_run ref = run_poisoned<resident>(o, "nan-resident");
        const poisoned_run got = run_poisoned<Streamed>(o, "nan-streamed");

        CHECK(ref.message.find("loss is") != std::string::npos);
        CHECK(got.message == ref.message);  // thrown from step(), with the step's number
        CHECK(got.message.find("at step 2") != std::string::npos);
        CHECK(got.step_count_after_error == 1);
        // Nothing moved: not the weights (the poisoned block is still poisoned, the others are
        // intact), not the moments. A NaN update would have spread NaN into every group.
        CHECK(got.after_error == got.poisoned);
        CHECK(all_finite(got.after_error.m));
        CHECK(ref.after_error == ref.poisoned);
        // The failed step left no half-done work behind: the same step again, on the repaired
        // weights, is bitwise the resident trainer's.
        CHECK(got.recovered_loss == ref.recovered_loss);
        CHECK(got.after_recovery == ref.after_recovery);
        CHECK(all_finite(got.after_recovery.params));
    }
}

TEST_CASE_TEMPLATE("a diverging learning rate stops the streamed trainer at the resident trainer's step, same state",
                   Streamed, streamed_host, streamed_storage) {
    for (double clip : {0.0, 1.0}) {
        CAPTURE(clip);
        train_options o = options_with_clip(clip);
        o.schedule.lr = o.schedule.min_lr = 1e30;  // one step puts the weights near 1e30: the next overflows
        auto diverge = [&]<class Trainer>(const std::string& name) {
            test::scratch_tiers tiers(name);
            cpu_backend backend(tiers.options());
            gpt_model<float, cpu_backend> model(tiny_gpt);
            Trainer t(backend, model, o);
            t.initialize(21);
            std::optional<long> failed_at;
            for (int s = 0; s < 4 && !failed_at; ++s) {
                try {
                    (void)t.step(micro_batches(s, o.accum, o.batch, o.seq));
                } catch (const error& e) {
                    failed_at = s + 1;
                    CHECK(std::string(e.what()).find("at step " + std::to_string(s + 1)) != std::string::npos);
                }
            }
            REQUIRE(failed_at.has_value());
            CHECK(t.step_count() == *failed_at - 1);
            return std::pair{*failed_at, state_of(t)};
        };
        const auto [resident_step, resident_state] = diverge.template operator()<resident>("diverge-resident");
        const auto [streamed_step, streamed_state] = diverge.template operator()<Streamed>("diverge-streamed");
        CHECK(resident_step >= 2);  // the first step is finite: the blow-up comes from its update
        CHECK(streamed_step == resident_step);
        CHECK(streamed_state == resident_state);
        CHECK(all_finite(streamed_state.params));  // huge, but the NaN step changed nothing
    }
}

TEST_CASE("a storage failure inside an overlapped update surfaces at the next step or finish_updates") {
    const train_options o = options_with_clip(0.05);
    test::scratch_tiers tiers("optimizer-failure");
    // Every storage-tier file (the AdamW moments) cut to zero bytes: the next read of a moment
    // finds an unexpected end of file, on the storage I/O stream, inside an update.
    auto truncate_storage_files = [&] {
        std::size_t files = 0;
        for (const auto& entry : std::filesystem::recursive_directory_iterator(tiers.dir))
            if (entry.is_regular_file()) {
                std::filesystem::resize_file(entry.path(), 0);
                ++files;
            }
        REQUIRE(files > 0);
    };
    auto expect_storage_error = [](auto&& call) {
        std::string message;
        try {
            call();
        } catch (const error& e) {
            message = e.what();
        }
        CHECK(message.find("end of file") != std::string::npos);
        CHECK(message.find(".strata") != std::string::npos);  // names the storage file
    };
    cpu_backend backend(tiers.options());
    gpt_model<float, cpu_backend> model(tiny_gpt);
    {
        streamed_storage t(backend, model, o);
        t.initialize(21);
        (void)t.step(micro_batches(0, o.accum, o.batch, o.seq));
        t.finish_updates();  // step 1's updates are done and fine
        truncate_storage_files();
        // Step 2 schedules its updates and returns: they fail on the optimizer thread.
        CHECK_NOTHROW((void)t.step(micro_batches(1, o.accum, o.batch, o.seq)));
        SUBCASE("at the next step, in the middle of its forward") {
            expect_storage_error([&] { (void)t.step(micro_batches(2, o.accum, o.batch, o.seq)); });
            CHECK(t.step_count() == 2);
        }
        SUBCASE("at finish_updates") {
            expect_storage_error([&] { t.finish_updates(); });
        }
        // The trainer stays failed: the moments are lost, so nothing may pretend to go on.
        expect_storage_error([&] { (void)t.step(micro_batches(3, o.accum, o.batch, o.seq)); });
        expect_storage_error([&] { (void)t.evaluate(micro_batches(9, 1, o.batch, o.seq)); });
    }  // destroyed with work of the failed step possibly still queued: no hang, no use after free
}

}  // namespace streamed_failure_test
