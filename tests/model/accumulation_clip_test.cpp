// Gradient accumulation and clipping, on the resident trainer.
#include <strata/nn/cpu_ops.hpp>
#include <strata/strata.hpp>
#include <strata/train/checkpoint.hpp>  // host_blocks
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

namespace accumulation_clip_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {
const gpt_config config{.vocab_size = 17, .max_seq = 8, .n_layer = 2, .n_head = 2, .n_embd = 12};

std::vector<data::batch> rows(std::size_t count) {  // `count` sequences of 8 tokens, one per batch
    std::vector<data::batch> out;
    rng gen(77);
    for (std::size_t r = 0; r < count; ++r) {
        data::batch b;
        for (int i = 0; i < 8; ++i) {
            b.inputs.push_back(static_cast<token_id>(gen.next_u64() % 17));
            b.targets.push_back(i == 2 ? kernels::cpu::ignore_index : static_cast<token_id>(gen.next_u64() % 17));
        }
        out.push_back(b);
    }
    return out;
}

data::batch concat(const std::vector<data::batch>& parts) {
    data::batch all;
    for (const auto& p : parts) {
        all.inputs.insert(all.inputs.end(), p.inputs.begin(), p.inputs.end());
        all.targets.insert(all.targets.end(), p.targets.begin(), p.targets.end());
    }
    return all;
}

host_blocks<float> grads_of(gpt_trainer<float, cpu_backend>& t) {
    host_blocks<float> out;
    for (std::size_t g = 0; g < t.model().group_count(); ++g) {
        out.emplace_back(t.model().groups()[g].numel());
        t.download(gpt_trainer<float, cpu_backend>::state_kind::grads, g, out.back());
    }
    return out;
}
}  // namespace

// 4 micro-batches of 1 sequence and 1 batch of 4 sequences see the same tokens. The losses and
// gradients agree up to FP32 rounding: the sums run in another order (per-micro-batch GEMMs
// accumulated vs one GEMM over 4x the rows), so each gradient element may differ by a few ulps
// of the largest partial sum: we allow 1e-5 relative to the largest gradient of each group.
TEST_CASE("4 micro-batches x 1 equals 1 batch x 4 up to FP32 summation order") {
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    gpt_model<float, cpu_backend> model(config);
    const auto parts = rows(4);
    gpt_trainer<float, cpu_backend> micro(backend, model, {.batch = 1, .seq = 8, .accum = 4, .clip = 0});
    gpt_trainer<float, cpu_backend> whole(backend, model, {.batch = 4, .seq = 8, .accum = 1, .clip = 0});
    micro.initialize(3);
    whole.initialize(3);
    const auto rm = micro.step(parts);
    const std::vector<data::batch> one{concat(parts)};
    const auto rw = whole.step(one);
    CHECK(rm.counted == rw.counted);
    CHECK(rm.loss == doctest::Approx(rw.loss).epsilon(1e-6));
    CHECK(rm.grad_norm == doctest::Approx(rw.grad_norm).epsilon(1e-5));
    const auto gm = grads_of(micro), gw = grads_of(whole);
    for (std::size_t g = 0; g < gm.size(); ++g) {
        double largest = 0, worst = 0;
        for (std::size_t i = 0; i < gm[g].size(); ++i) {
            largest = std::max(largest, std::abs(double(gw[g][i])));
            worst = std::max(worst, std::abs(double(gm[g][i]) - double(gw[g][i])));
        }
        INFO("group " << g << ": largest |grad| " << largest << ", worst difference " << worst);
        CHECK(worst <= 1e-5 * largest);
    }
}

TEST_CASE("clipping scales the gradients to the max norm, and only when the norm exceeds it") {
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    gpt_model<float, cpu_backend> model(config);
    const std::vector<data::batch> batch{rows(1)[0]};
    gpt_trainer<float, cpu_backend> probe(backend, model, {.batch = 1, .seq = 8, .accum = 1, .clip = 0});
    probe.initialize(5);
    const double norm = probe.step(batch).grad_norm;
    REQUIRE(norm > 0.1);
    auto norm_of = [](const host_blocks<float>& grads) {
        double s = 0;
        for (const auto& g : grads)
            for (float x : g) s += double(x) * double(x);
        return std::sqrt(s);
    };
    {
        gpt_trainer<float, cpu_backend> t(backend, model, {.batch = 1, .seq = 8, .accum = 1, .clip = norm / 4});
        t.initialize(5);
        const auto r = t.step(batch);
        CHECK(r.grad_norm == doctest::Approx(norm).epsilon(1e-12));  // reported before clipping
        CHECK(norm_of(grads_of(t)) == doctest::Approx(norm / 4).epsilon(1e-5));  // applied: scaled to max_norm
    }
    {
        gpt_trainer<float, cpu_backend> t(backend, model, {.batch = 1, .seq = 8, .accum = 1, .clip = norm * 4});
        t.initialize(5);
        t.step(batch);
        CHECK(norm_of(grads_of(t)) == doctest::Approx(norm).epsilon(1e-6));  // untouched below max_norm
    }
}

}  // namespace accumulation_clip_test
