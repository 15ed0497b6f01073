// A streamed run on the CPU backend hides its transfers under compute, measured from its trace
// as strata-gpt --trace records it (every stream's tasks on its track, steps 2 and 3) and scored
// by trace_recorder::transfer_hidden_fraction().
//
// Host <-> device copies on the CPU backend are memcpy's of microseconds, which any schedule
// would hide; here they are made slow (a backend that sleeps in every copy of a block, a few
// times shorter than the block's compute), so the fraction measures the pipeline: the next
// blocks' weights go to free slots on the H2D stream while compute runs, and each block's
// gradients go home while the next block computes. Measured: 0.75-0.82 here; with the slots cut
// to one (each copy then waits for the previous block's compute), 0.25-0.34, and the test fails.
// Under a sanitizer it skips: there the copy threads wait for the two cores that the sanitized
// compute and the other tests hold (CI's ASan stage measured 0.47 on 2026-12-06), which measures
// the machine's scheduler, not the pipeline.
#include "support/placements.hpp"  // test::streamed_trainer
#include "stream/stream_test_support.hpp"  // micro_batches
#include "support/skip.hpp"  // test::skip, test::address_sanitizer_build, test::thread_sanitizer_build

#include <strata/report/trace.hpp>  // trace_recorder, trace_track
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>

#include <chrono>   // std::chrono
#include <cstring>  // std::memcpy
#include <string>   // std::string
#include <thread>   // std::this_thread::sleep_for

namespace strata::test {

// cpu_backend whose copies of a whole block or more (>= 4 KiB: not the tokens, losses or norm
// partials) take at least `copy_time`, like a slow PCIe link. Everything else is cpu_backend's.
class slow_copy_backend : public cpu_backend {
public:
    static constexpr std::string_view name = "cpu with slow copies";
    static constexpr auto copy_time = std::chrono::microseconds(150);

    using cpu_backend::cpu_backend;
    using cpu_backend::copy;  // storage to storage, unchanged

    event copy(void* dst, tier_id, const void* src, tier_id, std::size_t bytes, stream& s) {
        if (bytes)
            s.enqueue(
                [=] {
                    if (bytes >= 4096) std::this_thread::sleep_for(copy_time);
                    std::memcpy(dst, src, bytes);
                },
                "copy");
        return s.record();
    }
};

}  // namespace strata::test

template <>
struct strata::ops<strata::test::slow_copy_backend> : strata::ops<strata::cpu_backend> {};

namespace streamed_overlap_test {  // this file's names: an area's files compile as one unit (unity build)
using namespace strata;

TEST_CASE("a streamed CPU run with slow copies hides most of its transfer time under compute") {
    if (test::address_sanitizer_build || test::thread_sanitizer_build) {
        test::skip("a sanitizer build: copy threads wait for the sanitized compute's cores, so the hidden fraction "
                   "measures the scheduler (the Release build runs this case)");
        return;
    }
    using backend_type = test::slow_copy_backend;
    static_assert(Backend<backend_type>);
    test::scratch_tiers tiers("overlap");
    backend_type backend(tiers.options());
    // Blocks of 64 channels: each block's compute (forward, recompute, backward) takes several
    // times a copy, so with prefetch compute never waits for a copy once the pipeline has started.
    const gpt_config c{.vocab_size = 29, .max_seq = 32, .n_layer = 4, .n_head = 2, .n_embd = 64};
    gpt_model<float, backend_type> model(c);
    const train_options o{.batch = 4, .seq = 32, .accum = 2, .clip = 1.0};
    test::streamed_trainer<gpt_trainer<float, backend_type>, 3, host_tier> t(backend, model, o);
    t.initialize(21);

    trace_recorder trace;
    t.for_each_stream([&](std::string_view track, auto& s) {
        s.set_tracer([rec = &trace, name = std::string(track)](std::string_view what, auto begin, auto end) {
            rec->add(name, what, begin, end);
        });
    });
    for (int s = 0; s < 3; ++s) {
        if (s == 1) trace.clear();  // as strata-gpt --trace: steps 2 and 3, past the first step's cold start
        (void)t.step(test::micro_batches(s, o.accum, o.batch, o.seq, c.vocab_size));
    }
    t.finish_updates();
    t.for_each_stream([](std::string_view, auto& s) { s.set_tracer({}); });

    // The slow copies really are in the trace: 2 steps x 2 micro-batches x (weights of 4 blocks
    // forward and backward, gradients of 4 blocks home) at >= 150 us each.
    const double transfer_us = covered_length(trace.busy(trace_track::transfers));
    const double h2d_us = covered_length(trace.busy(trace_track::h2d)), d2h_us = covered_length(trace.busy(trace_track::d2h));
    const double compute_us = covered_length(trace.busy(trace_track::compute));
    const double hidden = trace.transfer_hidden_fraction();
    MESSAGE("H2D " << h2d_us << " us, D2H " << d2h_us << " us, compute " << compute_us << " us, hidden fraction "
                   << hidden);
    CHECK(h2d_us >= 2 * 2 * 8 * 150.0);
    CHECK(d2h_us >= 2 * 2 * 4 * 150.0);
    CHECK(transfer_us < compute_us);  // the run is compute-bound: all of it can hide
    CHECK(hidden > 0.5);
}

}  // namespace streamed_overlap_test
