// Streamed == resident, bitwise, where streamed_test.cpp does not look: prefetch deeper than 2
// (slots wrap around inside a pass, and more slots than blocks), and double precision.
// Gradient accumulation and clipping are on, and the run is long enough for the slot ring to
// start passes at every offset.
#include "support/placements.hpp"  // test::streamed_trainer
#include "stream/stream_test_support.hpp"  // tiny_gpt, run, run_result

#include <doctest/doctest.h>

namespace streamed_depth_precision_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

train_options accumulating_and_clipping() {
    train_options o{.batch = 2, .seq = 8, .accum = 3, .clip = 0.05};  // a small max norm: clipping really happens
    o.schedule = {.kind = lr_kind::cosine, .lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 2, .total_steps = 7};
    return o;
}

template <class R>
void check_equal(const test::run_result<R>& resident, const test::run_result<R>& streamed) {
    REQUIRE(resident.losses.size() == streamed.losses.size());
    for (std::size_t i = 0; i < resident.losses.size(); ++i) {
        INFO("step " << i + 1);
        CHECK(resident.losses[i] == streamed.losses[i]);  // bitwise, not approximately
        CHECK(resident.norms[i] == streamed.norms[i]);
    }
    CHECK(resident.state.params == streamed.state.params);
    CHECK(resident.state == streamed.state);
}

template <std::size_t Depth, class M = host_tier>
using streamed = test::streamed_trainer<gpt_trainer<float, cpu_backend>, Depth + 1, M>;

}  // namespace

TEST_CASE("prefetch depth 3 and 4 stream bitwise as resident, with fewer and with more slots than blocks") {
    test::scratch_tiers tiers("depth");
    cpu_backend backend(tiers.options());
    const train_options o = accumulating_and_clipping();
    const int steps = 7;
    for (std::size_t layers : {3u, 6u}) {  // 3 blocks: 4 and 5 slots; 6 blocks: the ring wraps in a pass
        CAPTURE(layers);
        gpt_config c = test::tiny_gpt;
        c.n_layer = layers;
        const auto resident = test::run<gpt_trainer<float, cpu_backend>>(backend, c, o, steps);
        bool clipped = false;
        for (double n : resident.norms) clipped |= n > o.clip;
        CHECK(clipped);
        check_equal(resident, test::run<streamed<3>>(backend, c, o, steps));
        check_equal(resident, test::run<streamed<4, storage_tier>>(backend, c, o, steps));
    }
}

TEST_CASE("the streamed trainer in double precision equals the resident trainer in double, bitwise") {
    test::scratch_tiers tiers("double");
    cpu_backend backend(tiers.options());
    for (double clip : {0.0, 0.05}) {  // AdamW of doubles with the clip folded in, and without a clip
        CAPTURE(clip);
        train_options o = accumulating_and_clipping();
        o.clip = clip;
        const auto resident = test::run<gpt_trainer<double, cpu_backend>>(backend, test::tiny_gpt, o, 6);
        CHECK(resident.losses.back() < resident.losses.front());
        check_equal(resident, test::run<test::streamed_trainer<gpt_trainer<double, cpu_backend>, 3, host_tier>>(
                                  backend, test::tiny_gpt, o, 6));
        check_equal(resident, test::run<test::streamed_trainer<gpt_trainer<double, cpu_backend>, 2, storage_tier>>(
                                  backend, test::tiny_gpt, o, 6));
    }
}

}  // namespace streamed_depth_precision_test
