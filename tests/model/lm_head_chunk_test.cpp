// The LM head and cross-entropy in chunks of positions (model/lm_head.hpp).
// - One chunk (B x T <= head_chunk_rows: today's benchmark shapes) makes exactly the calls the
//   unchunked head made on the whole micro-batch: bitwise the same losses, logits and gradients.
// - Several chunks (21 rows in chunks of 4, the last one a single row; and chunks of 1 row) agree
//   with one chunk, for GPT-2 (gpt_model: a decoder_model), up to the order of the sums (tolerances below).
// - A chunked run is deterministic, and bitwise the same whatever the activation policy and
//   whether the blocks are resident or streamed.
// - The activations hold one chunk of logits, and only the last chunk's logits can be read.
//
// Tolerances. Chunking changes no formula, only summation order: dwte (V, C) adds the chunks'
// dlogits^T @ inp one chunk after the other instead of in one GEMM over all rows, and each GEMM
// (logits, dinp, dwte) runs over fewer rows, which may change the BLAS blocking of its inner sums.
// Reordering a sum of n terms moves it by at most ~2 n u sum|terms| (u: unit roundoff), here with
// n <= 21 rows (dwte) or V, C <= 37 terms (logits, dinp), and the blocks' backward carries the
// difference on with factors of order one in these tiny models. We compare every group's
// gradients by the largest difference over the group's largest magnitude (a few ulps of the
// largest partial sum), as tests/model/accumulation_clip_test.cpp does for accumulation:
//   FP32: 1e-5 (u = 6e-8, 21 x 6e-8 x a few = ~1e-6, and a margin of 10 for the cancellation in
//         the sums of products of mixed signs);
//   FP64: 1e-12 (u = 1.1e-16, the same reasoning with a margin for the propagation).
// Losses are compared relatively with the same bounds.
#include "support/placements.hpp"  // test::streamed_trainer
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, make_backend
#include "support/random_batch.hpp"  // test::random_batches

#include <strata/model/lm_head.hpp>           // lm_head_loss_forward, lm_head_loss_backward
#include <strata/nn/cpu_ops.hpp>              // ops<cpu_backend>
#include <strata/strata.hpp>                  // gpt_model, cpu_backend
#include <strata/testing/layer_harness.hpp>   // testing::detail::device_buffer
#include <strata/train/checkpoint.hpp>        // host_blocks, download_blocks
#include <strata/train/tiered_trainer.hpp>           // tiered_trainer

#include <doctest/doctest.h>

#include <algorithm>   // std::max
#include <cmath>       // std::abs
#include <cstring>     // std::memcmp
#include <filesystem>  // std::filesystem
#include <string>      // std::string
#include <vector>      // std::vector

#include <unistd.h>  // getpid

namespace lm_head_chunk_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

template <class R>
struct tolerance;
template <>
struct tolerance<float> {
    static constexpr double relative = 1e-5;
};
template <>
struct tolerance<double> {
    static constexpr double relative = 1e-12;
};

template <class R>
bool same_bits(const std::vector<R>& a, const std::vector<R>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(R)) == 0);
}
template <class R>
bool same_bits(const host_blocks<R>& a, const host_blocks<R>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t g = 0; g < a.size(); ++g)
        if (!same_bits(a[g], b[g])) return false;
    return true;
}

// max |a - b| / max |b|: the difference in units of the tensor's largest value.
template <class R>
double relative_difference(const std::vector<R>& a, const std::vector<R>& b) {
    REQUIRE(a.size() == b.size());
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        diff = std::max(diff, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
        scale = std::max(scale, std::abs(static_cast<double>(b[i])));
    }
    return scale == 0 ? diff : diff / scale;
}

template <class R>
std::vector<R> random_values(std::size_t n, std::uint64_t seed, double stddev = 1.0) {
    rng gen(seed);
    std::vector<R> out(n);
    for (auto& x : out) x = static_cast<R>(gen.normal(0.0, stddev));
    return out;
}

// ---- the chunk loop alone, against the unchunked head's calls ----

// Everything the head reads and writes, on the device of Bk.
template <class R, class Bk>
struct head_rig {
    using buffer = testing::detail::device_buffer<R, Bk>;
    using stream = typename Bk::stream;
    static constexpr std::size_t batch = 3, seq = 7, rows = batch * seq, C = 8, V = 37;
    Bk& backend;
    stream s;
    std::vector<R> inp_values = random_values<R>(rows * C, 1), wte_values = random_values<R>(V * C, 2, 0.5);
    std::vector<R> dinp0 = random_values<R>(rows * C, 3), dwte0 = random_values<R>(V * C, 4);  // backward accumulates
    std::vector<std::int32_t> target_values;
    buffer inp, wte, dinp, dwte, losses, lse, logits, dlogits;
    testing::detail::device_buffer<std::int32_t, Bk> targets;

    explicit head_rig(Bk& b)
        : backend(b),
          s(b.make_stream("head")),
          inp(b, rows * C, "inp"),
          wte(b, V * C, "wte"),
          dinp(b, rows * C, "dinp"),
          dwte(b, V * C, "dwte"),
          losses(b, rows, "losses"),
          lse(b, rows, "lse"),
          logits(b, rows * V, "logits"),
          dlogits(b, rows * V, "dlogits"),
          targets(b, rows, "targets") {
        rng gen(5);
        for (std::size_t r = 0; r < rows; ++r) target_values.push_back(static_cast<std::int32_t>(gen.next_u64() % V));
        target_values[2] = target_values[rows - 1] = kernels::cpu::ignore_index;  // the last row: a chunk of its own
        inp.upload(inp_values, s);
        wte.upload(wte_values, s);
        targets.upload(target_values, s);
    }

    struct result {
        std::vector<R> losses, lse, dinp, dwte, last_logits;  // last_logits: the logits buffer's first rows
    };
    result reset_and(auto&& run) {
        dinp.upload(dinp0, s);
        dwte.upload(dwte0, s);
        losses.fill(R(-1), s);
        lse.fill(R(-1), s);
        run();
        return {losses.download(s), lse.download(s), dinp.download(s), dwte.download(s), logits.download(s)};
    }
    // The head before chunking: each op once over every row.
    result unchunked() {
        using op = ops<Bk>;
        return reset_and([&] {
            op::lm_head_forward(s, logits.get(), inp.get(), wte.get(), batch, seq, C, V);
            op::cross_entropy_forward(s, losses.get(), lse.get(), logits.get(), targets.get(), batch, seq, V);
            op::zero(s, dlogits.get(), rows * V);
            op::cross_entropy_backward(s, dlogits.get(), lse.get(), logits.get(), targets.get(), 0.25, batch, seq, V);
            op::lm_head_backward(s, dinp.get(), dwte.get(), dlogits.get(), inp.get(), wte.get(), batch, seq, C, V);
        });
    }
    result chunked(std::size_t chunk_rows) {
        return reset_and([&] {
            lm_head_loss_backward<Bk>(s, dinp.get(), dwte.get(), losses.get(), lse.get(), logits.get(), dlogits.get(),
                                      inp.get(), wte.get(), targets.get(), 0.25, batch, seq, C, V, chunk_rows);
        });
    }
    result chunked_forward(std::size_t chunk_rows) {
        return reset_and([&] {
            lm_head_loss_forward<Bk>(s, losses.get(), lse.get(), logits.get(), inp.get(), wte.get(), targets.get(), batch,
                                     seq, C, V, chunk_rows);
        });
    }
};

}  // namespace

TEST_CASE("row chunks: the whole micro-batch when it fits, else chunk_rows rows at a time in order") {
    std::vector<row_chunk> chunks;
    auto collect = [&](row_chunk c) { chunks.push_back(c); };
    for_each_row_chunk(3, 7, 21, collect);
    REQUIRE(chunks.size() == 1);
    CHECK((chunks[0].first == 0 && chunks[0].batch == 3 && chunks[0].seq == 7));  // the kernels see B x T as before
    chunks.clear();
    for_each_row_chunk(3, 7, 4, collect);
    REQUIRE(chunks.size() == 6);
    for (std::size_t i = 0; i < 6; ++i) {
        CHECK(chunks[i].first == 4 * i);
        CHECK(chunks[i].batch == 1);
        CHECK(chunks[i].seq == (i < 5 ? 4u : 1u));
    }
    CHECK(lm_head_buffer_rows(21, 4) == 4);
    CHECK(lm_head_buffer_rows(21, 8192) == 21);
    CHECK(lm_head_buffer_rows(8 * 1024, lm_head_chunk_rows) == 8192);  // GPT-2 124M's benchmark: one chunk
    CHECK_THROWS_AS(for_each_row_chunk(3, 7, 0, collect), error);

    // Only the last chunk's logits are held.
    CHECK(held_logits_row(3, 7, 4, 20, 1) == 0);
    CHECK(held_logits_row(3, 7, 8192, 0, 21) == 0);
    CHECK(held_logits_row(3, 7, 8192, 20, 1) == 20);
    CHECK_THROWS_WITH_AS(held_logits_row(3, 7, 4, 19, 1), doctest::Contains("only rows [20, 21)"), error);
    CHECK_THROWS_AS(held_logits_row(3, 7, 4, 0, 21), error);
}

TEST_CASE_TEMPLATE("one chunk is the unchunked head bit for bit; more chunks agree up to summation order", B,
                   STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    if (!made) return;
    using rig_t = head_rig<float, B>;
    rig_t rig(*made);
    const auto want = rig.unchunked();
    for (std::size_t chunk : {rig_t::rows, std::size_t{8192}}) {
        CAPTURE(chunk);
        const auto got = rig.chunked(chunk);
        CHECK(same_bits(got.losses, want.losses));
        CHECK(same_bits(got.lse, want.lse));
        CHECK(same_bits(got.dinp, want.dinp));
        CHECK(same_bits(got.dwte, want.dwte));
        CHECK(same_bits(got.last_logits, want.last_logits));
        CHECK(same_bits(rig.chunked_forward(chunk).losses, want.losses));
    }
    for (std::size_t chunk : {std::size_t{4}, std::size_t{1}}) {  // 21 rows: 5 x 4 + 1, and 21 x 1
        CAPTURE(chunk);
        const auto got = rig.chunked(chunk);
        const double tol = tolerance<float>::relative;
        CHECK(relative_difference(got.losses, want.losses) < tol);
        CHECK(relative_difference(got.lse, want.lse) < tol);
        CHECK(relative_difference(got.dinp, want.dinp) < tol);
        CHECK(relative_difference(got.dwte, want.dwte) < tol);
        MESSAGE("chunks of " << chunk << " rows: dwte differs by " << relative_difference(got.dwte, want.dwte)
                             << " of its largest value, dinp by " << relative_difference(got.dinp, want.dinp));
        // The forward alone computes the same per-chunk losses as the training loop.
        CHECK(same_bits(rig.chunked_forward(chunk).losses, got.losses));
        // The buffer ends holding the last chunk: row 20's logits.
        const std::vector<float> last(got.last_logits.begin(), got.last_logits.begin() + rig_t::V);
        const std::vector<float> want_last(want.last_logits.begin() + 20 * rig_t::V, want.last_logits.begin() + 21 * rig_t::V);
        CHECK(relative_difference(last, want_last) < tol);
    }
}

// ---- whole models through the trainers ----

namespace {

constexpr std::size_t batch = 3, seq = 7;  // 21 rows: not a multiple of the chunks below

gpt_config gpt_shape(std::size_t chunk_rows) {
    return {.vocab_size = 29, .max_seq = seq, .n_layer = 2, .n_head = 2, .n_embd = 16, .head_chunk_rows = chunk_rows};
}
template <class Model>
Model make_model(std::size_t chunk_rows) {
    return Model(gpt_shape(chunk_rows));
}

std::vector<data::batch> micro_batches(int step) {  // two micro-batches; the sixth target of each ignored
    return test::random_batches(900 + step, {.vocab = 29, .tokens = batch * seq, .count = 2, .scale = 7, .shift = 3,
                                             .ignore_every = batch * seq, .ignore_at = 5});
}

template <class R>
struct run_result {
    double evaluated = 0;                 // forward only, before the first step
    std::vector<double> losses;           // of each step
    host_blocks<R> first_grads, params;   // the first step's gradients (same weights for every run); the last weights
};

tier_options tiers() {
    return {.device_bytes = 128 << 20,
            .host_bytes = 128 << 20,
            .storage_bytes = 64 << 20,
            .storage_dir = std::filesystem::temp_directory_path() / ("strata-test-lm-head-" + std::to_string(::getpid()))};
}

template <class Trainer, class B, class Model>
run_result<typename Model::value_type> run(B& backend, const Model& model, kept_activations kept, int steps) {
    train_options o{.batch = batch, .seq = seq, .accum = 2, .clip = 0, .activations = kept};
    o.schedule = {.kind = lr_kind::constant, .lr = 3e-3, .min_lr = 3e-3, .warmup_steps = 0, .total_steps = 3};
    Trainer t(backend, model, o);
    t.initialize(11);
    using kind = typename Trainer::state_kind;
    run_result<typename Model::value_type> r;
    r.evaluated = t.evaluate(micro_batches(0));
    for (int i = 0; i < steps; ++i) {
        r.losses.push_back(t.step(micro_batches(i)).loss);
        if (i == 0) r.first_grads = download_blocks(t, kind::grads);
    }
    r.params = download_blocks(t, kind::params);
    return r;
}

template <class R>
void check_bitwise(const run_result<R>& a, const run_result<R>& b) {
    CHECK(a.evaluated == b.evaluated);
    CHECK(a.losses == b.losses);
    CHECK(same_bits(a.first_grads, b.first_grads));
    CHECK(same_bits(a.params, b.params));
}

template <class R>
void check_close(const run_result<R>& chunked, const run_result<R>& whole) {
    const double tol = tolerance<R>::relative;
    CHECK(std::abs(chunked.evaluated - whole.evaluated) <= tol * std::abs(whole.evaluated));
    CHECK(std::abs(chunked.losses[0] - whole.losses[0]) <= tol * std::abs(whole.losses[0]));
    REQUIRE(chunked.first_grads.size() == whole.first_grads.size());
    double worst = 0;
    for (std::size_t g = 0; g < whole.first_grads.size(); ++g) {
        CAPTURE(g);
        const double d = relative_difference(chunked.first_grads[g], whole.first_grads[g]);
        CHECK(d < tol);
        worst = std::max(worst, d);
    }
    MESSAGE("largest gradient difference over the group's largest gradient: " << worst << " (bound " << tol << ")");
}

template <class R, class B, class Model>
void chunked_against_one_chunk(B& backend) {
    using resident = tiered_trainer<R, B, Model>;
    const auto whole = run<resident>(backend, make_model<Model>(lm_head_chunk_rows), kept_activations::none(), 1);
    // B x T fits in the chunk, however large: the same calls, the same bits
    check_bitwise(whole, run<resident>(backend, make_model<Model>(batch * seq), kept_activations::none(), 1));
    for (std::size_t chunk : {std::size_t{4}, std::size_t{1}}) {
        CAPTURE(chunk);
        check_close(run<resident>(backend, make_model<Model>(chunk), kept_activations::none(), 1), whole);
    }
}

template <class B, class Model>
void chunked_is_deterministic_for_every_policy_and_placement(B& backend) {
    using resident = tiered_trainer<float, B, Model>;
    using streamed = test::streamed_trainer<tiered_trainer<float, B, Model>, 2, host_tier>;
    const Model model = make_model<Model>(4);
    const auto reference = run<resident>(backend, model, kept_activations::none(), 3);
    CHECK(reference.losses.back() < reference.losses.front());
    check_bitwise(reference, run<resident>(backend, model, kept_activations::none(), 3));  // the same run twice
    check_bitwise(reference, run<resident>(backend, model, kept_activations{1}, 3));
    check_bitwise(reference, run<resident>(backend, model, kept_activations::all(), 3));
    check_bitwise(reference, run<streamed>(backend, model, kept_activations::none(), 3));
    check_bitwise(reference, run<streamed>(backend, model, kept_activations::all(), 3));
    check_bitwise(reference, run<resident>(backend, model, kept_activations{0, true}, 3));  // inputs offloaded
    check_bitwise(reference, run<streamed>(backend, model, kept_activations{1, true}, 3));
    check_bitwise(reference, run<resident>(backend, model, kept_activations{0, false, true}, 3));  // kept parts
    check_bitwise(reference, run<streamed>(backend, model, kept_activations{1, true, true}, 3));
}

}  // namespace

TEST_CASE("gpt_model in FP64: chunked head == one chunk up to summation order (1e-12)") {
    cpu_backend backend(tiers());
    chunked_against_one_chunk<double, cpu_backend, gpt_model<double, cpu_backend>>(backend);
}

TEST_CASE_TEMPLATE("gpt_model in FP32: chunked head == one chunk up to summation order (1e-5)", B, STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    chunked_against_one_chunk<float, B, gpt_model<float, B>>(*made);
}

TEST_CASE_TEMPLATE("gpt_model, chunked head: deterministic, and bitwise alike for every policy, resident and streamed",
                   B, STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    chunked_is_deterministic_for_every_policy_and_placement<B, gpt_model<float, B>>(*made);
}

TEST_CASE("the activations hold one chunk of logits, and hand out only the last chunk's rows") {
    const auto model = make_model<gpt_model<float, cpu_backend>>(4);
    const std::size_t V = model.config().vocab_size;
    const auto buffers = model.activation_buffers(batch, seq, kept_activations::none());
    CHECK(buffers[5] == 4 * V);  // logits
    CHECK(buffers[8] == 4 * V);  // dlogits

    cpu_backend backend(tiers());
    gpt_model<float, cpu_backend>::activations act(backend, model, batch, seq, kept_activations::none());
    CHECK(act.logits(batch, seq, 20) == act.logits_chunk());
    CHECK_THROWS_AS(act.logits(batch, seq, 0, batch * seq), error);
    // Activations of another chunk size are refused, not overrun.
    const auto other = make_model<gpt_model<float, cpu_backend>>(8);
    struct binder {
        const float* params(std::size_t, cpu_backend::stream&, group_use) { return nullptr; }
        float* grads(std::size_t, cpu_backend::stream&) { return nullptr; }
        void done(std::size_t, cpu_backend::stream&, group_use) {}
    } bind;
    auto s = backend.make_stream("refused");
    CHECK_THROWS_WITH_AS(other.forward(bind, act, batch, seq, s), doctest::Contains("LM head chunks of 4"), error);
}

}  // namespace lm_head_chunk_test
