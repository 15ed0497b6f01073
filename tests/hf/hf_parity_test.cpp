// Numerical parity of strata's GPT with Hugging Face transformers' GPT2LMHeadModel (torch, FP32)
// on small random models: fixtures from tools/make_hf_fixtures.py, tolerances argued in
// docs/parity.md. For every shape of tests/fixtures/hf/ the HF directory loads through
// load_model_files, and on the fixture's batch strata gives torch's logits, loss, the gradient of
// every parameter and a 10-step AdamW trajectory (losses, gradient norms, final weights); writing
// the loaded model back gives the HF file's tensors byte for byte. The numeric cases run on every
// backend (on the GPU: the CUDA kernels against torch, same tolerances).
#include <strata/nn/cpu_ops.hpp>  // ops<cpu_backend>: first, so the CPU kernels are seen

#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, make_backend
#include "support/parity.hpp"    // test::compare, relative, forward_logits

#include <strata/data/loader.hpp>       // data::batch
#include <strata/io/json_file.hpp>      // read_json_file
#include <strata/io/safetensors.hpp>    // safetensors_file
#include <strata/model/gpt.hpp>         // gpt_model, group_use
#include <strata/strata.hpp>            // cpu_backend, tiered_tensor, copy_async
#include <strata/train/checkpoint.hpp>  // load_model_files, write_model_files, download_blocks
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE, MESSAGE

#include <unistd.h>  // getpid

#include <algorithm>   // std::any_of, std::max, std::min, std::swap_ranges
#include <array>       // std::array
#include <cmath>       // std::abs
#include <cstddef>     // std::size_t
#include <cstdio>      // std::snprintf
#include <cstring>     // std::memcmp
#include <filesystem>  // std::filesystem
#include <span>        // std::span
#include <string>      // std::string
#include <vector>      // std::vector

namespace hf_parity_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
using test::compare, test::difference, test::relative;
namespace fs = std::filesystem;

namespace {

// Tolerances (docs/parity.md says why each fits FP32 with a different summation order than torch's):
// normalized errors are max |strata - torch| / max |torch| over a tensor; relative ones |a - b| / |b|.
constexpr double logits_tolerance = 1e-5;       // normalized, whole (B, T, V) logits
constexpr double loss_tolerance = 1e-6;         // relative, the step-1 loss (a mean of B*T terms)
constexpr double gradient_tolerance = 1e-4;     // normalized, per parameter tensor
constexpr double grad_norm_tolerance = 1e-5;    // relative, the global L2 norm before clipping
constexpr double trajectory_tolerance = 1e-4;   // relative, each of the 10 losses and norms
constexpr double final_weight_tolerance = 1e-3; // of the largest change torch made to that tensor
// The key third of c_attn.bias has an exact gradient of zero (softmax ignores a constant added to
// all scores of a query), so both sides compute rounding noise there and AdamW turns it into moves
// of at most steps * lr * |noise| / eps: compared as "barely moves" (10 steps * lr 1e-3 * 1e-10 / 1e-8
// = 1e-4), not against torch's noise.
constexpr double key_bias_tolerance = 1e-4;  // absolute, on both strata's and torch's key biases

constexpr std::array<const char*, 3> shapes = {"l2_h2_c48_v101", "l3_h3_c36_v257", "l1_h4_c40_v67"};

using model_t = gpt_model<float, cpu_backend>;  // layouts and names: the same for every backend

fs::path fixtures_dir() {
#ifdef STRATA_SOURCE_DIR
    return fs::path(STRATA_SOURCE_DIR) / "tests" / "fixtures" / "hf";
#else
    return fs::path(__FILE__).parent_path().parent_path() / "fixtures" / "hf";
#endif
}

// One shape: the HF directory as strata loads it, and torch's reference.
struct fixture : test::reference {
    std::string name;
    fs::path dir;
    loaded_model<float> hf;

    explicit fixture(const std::string& shape_name)
        : reference(fixtures_dir() / shape_name / "reference.safetensors"),
          name(shape_name),
          dir(fixtures_dir() / shape_name),
          hf(load_model_files<float>(dir)) {}

    train_options options(double clip) const {
        train_options o{.batch = batch, .seq = seq, .accum = 1, .clip = clip};
        const double lr = scalar("hp.lr");
        const auto steps = static_cast<long>(scalar("hp.steps"));
        o.schedule = {.kind = lr_kind::constant, .lr = lr, .min_lr = lr, .warmup_steps = 0, .total_steps = steps};
        o.optimizer = adamw_optimizer({.beta1 = scalar("hp.beta1"), .beta2 = scalar("hp.beta2"), .eps = scalar("hp.eps"),
                                       .weight_decay = scalar("hp.weight_decay")});
        return o;
    }
};

std::vector<float> entry_values(const host_blocks<float>& blocks, std::size_t g, const param_entry& entry) {
    const float* p = blocks[g].data() + entry.offset;
    return {p, p + entry.spec.shape.numel()};
}

// strata's logits (B, T, V) for the fixture's batch with `blocks` as weights.
template <class B>
std::vector<float> strata_logits(B& backend, const fixture& f, const host_blocks<float>& blocks) {
    return test::forward_logits(backend, gpt_model<float, B>(f.hf.config), blocks, f.tokens(), f.batch, f.seq,
                                kept_activations::all());
}

template <class Trainer>
void upload_weights(Trainer& t, const host_blocks<float>& blocks) {
    for (std::size_t g = 0; g < blocks.size(); ++g) t.upload(Trainer::state_kind::params, g, blocks[g]);
}

}  // namespace

TEST_CASE_TEMPLATE("HF parity: logits of the same batch", B, STRATA_TEST_BACKENDS) {
    auto backend = test::make_backend<B>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    if (!backend) return;
    for (const std::string name : shapes) {
        CAPTURE(name);
        const fixture f(name);
        const auto& c = f.hf.config;
        const auto want = f.tensor("logits", {f.batch, f.seq, c.vocab_size});
        const auto d = compare(name + " logits", strata_logits(*backend, f, f.hf.blocks), want);
        CHECK_MESSAGE(d.normalized() < logits_tolerance, d.report);
        MESSAGE(d.report);
    }
}

TEST_CASE("HF parity: the comparison catches a misplaced tensor") {
    // ln_1's gain and bias of the first block swapped: a loader bug of the kind parity must expose.
    const fixture f(shapes[0]);
    auto blocks = f.hf.blocks;
    const model_t model(f.hf.config);
    const auto& entries = model.groups()[model.block_group(0)].entries();
    REQUIRE(entries[0].spec.name == "ln_1.weight");
    REQUIRE(entries[1].spec.name == "ln_1.bias");
    float* block = blocks[model.block_group(0)].data();
    std::swap_ranges(block + entries[0].offset, block + entries[0].offset + entries[0].spec.shape.numel(), block + entries[1].offset);
    const auto& c = f.hf.config;
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    const auto d = compare("swapped ln_1", strata_logits(backend, f, blocks), f.tensor("logits", {f.batch, f.seq, c.vocab_size}));
    CHECK_MESSAGE(d.normalized() > 100 * logits_tolerance, d.report);
}

TEST_CASE_TEMPLATE("HF parity: loss and every parameter's gradient after one backward", B, STRATA_TEST_BACKENDS) {
    using resident_trainer = gpt_trainer<float, B>;
    for (const std::string name : shapes) {
        CAPTURE(name);
        const fixture f(name);
        auto made = test::make_backend<B>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
        if (!made) return;
        B& backend = *made;
        const gpt_model<float, B> model(f.hf.config);
        // clip 0: step() leaves the gradients as backward made them (a clipping step scales them in place)
        resident_trainer t(backend, model, f.options(0.0));
        upload_weights(t, f.hf.blocks);
        const std::vector<data::batch> micro{f.tokens()};

        const double want_loss = f.scalar("loss");
        const double eval_loss = t.evaluate(micro);
        CHECK_MESSAGE(relative(eval_loss, want_loss) < loss_tolerance, name, " evaluate loss ", eval_loss, " vs torch ", want_loss);
        const auto r = t.step(micro);
        CHECK_MESSAGE(relative(r.loss, want_loss) < loss_tolerance, name, " step loss ", r.loss, " vs torch ", want_loss);
        const double want_norm = f.series("train.grad_norms")[0];
        CHECK_MESSAGE(relative(r.grad_norm, want_norm) < grad_norm_tolerance, name, " grad norm ", r.grad_norm, " vs torch ", want_norm);

        const auto grads = download_blocks(t, resident_trainer::state_kind::grads);
        double worst = 0;
        std::string worst_name;
        std::size_t compared = 0;
        for (std::size_t g = 0; g < model.group_count(); ++g)
            for (const auto& entry : model.groups()[g].entries()) {
                const std::string hf = model.hf_name(g, entry);
                const auto d = compare(hf, entry_values(grads, g, entry), f.tensor("grad." + hf, entry.spec.shape.extents()));
                CHECK_MESSAGE(d.normalized() < gradient_tolerance, d.report);
                if (d.normalized() >= worst) worst = d.normalized(), worst_name = hf;
                ++compared;
            }
        CHECK(compared == 2 + 12 * f.hf.config.n_layer + 2);
        MESSAGE(name, ": loss ", eval_loss, " (torch ", want_loss, ", rel ", relative(eval_loss, want_loss), "), grad norm rel ",
                relative(r.grad_norm, want_norm), ", worst normalized gradient error ", worst, " (", worst_name, ")");
    }
}

TEST_CASE_TEMPLATE("HF parity: a 10-step AdamW trajectory with clipping on one batch", B, STRATA_TEST_BACKENDS) {
    using resident_trainer = gpt_trainer<float, B>;
    for (const std::string name : shapes) {
        CAPTURE(name);
        const fixture f(name);
        auto made = test::make_backend<B>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
        if (!made) return;
        B& backend = *made;
        const gpt_model<float, B> model(f.hf.config);
        resident_trainer t(backend, model, f.options(f.scalar("hp.max_norm")));
        upload_weights(t, f.hf.blocks);
        const std::vector<data::batch> micro{f.tokens()};
        const auto losses = f.series("train.losses");
        const auto norms = f.series("train.grad_norms");
        REQUIRE(losses.size() == static_cast<std::size_t>(f.scalar("hp.steps")));
        double worst_loss = 0, worst_norm = 0;
        for (std::size_t i = 0; i < losses.size(); ++i) {
            const auto r = t.step(micro);
            CHECK_MESSAGE(relative(r.loss, losses[i]) < trajectory_tolerance, name, " step ", i + 1, " loss ", r.loss, " vs torch ", losses[i]);
            CHECK_MESSAGE(relative(r.grad_norm, norms[i]) < trajectory_tolerance, name, " step ", i + 1, " grad norm ", r.grad_norm, " vs torch ", norms[i]);
            worst_loss = std::max(worst_loss, relative(r.loss, losses[i]));
            worst_norm = std::max(worst_norm, relative(r.grad_norm, norms[i]));
        }
        CHECK(losses.back() < losses.front());  // the fixture really trains
        const double max_norm = f.scalar("hp.max_norm");
        CHECK(std::any_of(norms.begin(), norms.end(), [&](double n) { return n > max_norm; }));  // and clips

        // Final weights, each tensor's error measured against the largest change torch made to it;
        // the key part of c_attn.bias apart (see key_bias_slice).
        const auto final_blocks = download_blocks(t, resident_trainer::state_kind::params);
        const std::size_t C = f.hf.config.n_embd;
        double worst_weight = 0, worst_key_move = 0;
        std::string worst_name;
        for (std::size_t g = 0; g < model.group_count(); ++g)
            for (const auto& entry : model.groups()[g].entries()) {
                const std::string hf = model.hf_name(g, entry);
                const auto want_all = f.tensor("final." + hf, entry.spec.shape.extents());
                std::vector<float> want(want_all.begin(), want_all.end());
                std::vector<float> got = entry_values(final_blocks, g, entry), start = entry_values(f.hf.blocks, g, entry);
                if (hf.ends_with("attn.c_attn.bias")) {
                    for (const auto* v : {&got, &want})
                        for (std::size_t i = C; i < 2 * C; ++i)
                            worst_key_move = std::max(worst_key_move, std::abs(static_cast<double>((*v)[i]) - start[i]));
                    for (auto* v : {&got, &want, &start}) v->erase(v->begin() + C, v->begin() + 2 * C);
                }
                double moved = 0;
                for (std::size_t i = 0; i < want.size(); ++i)
                    moved = std::max(moved, std::abs(static_cast<double>(want[i]) - static_cast<double>(start[i])));
                const auto d = compare(hf + " after training", got, want);
                const double error = moved > 0 ? d.max_diff / moved : d.max_diff;
                CHECK_MESSAGE(error < final_weight_tolerance, d.report, "; largest change by torch ", moved);
                if (error >= worst_weight) worst_weight = error, worst_name = hf;
            }
        CHECK_MESSAGE(worst_key_move < key_bias_tolerance, name, ": a key bias moved by ", worst_key_move,
                      " though its exact gradient is zero");
        MESSAGE(name, ": worst relative loss error ", worst_loss, ", grad norm ", worst_norm,
                "; worst final-weight error ", worst_weight, " of torch's largest change (", worst_name,
                "); largest key-bias move ", worst_key_move);
    }
}

TEST_CASE("HF parity: HF -> strata -> HF writes every tensor byte for byte") {
    const fs::path out = fs::temp_directory_path() / ("strata-test-hf-" + std::to_string(::getpid()));
    for (const std::string name : shapes) {
        CAPTURE(name);
        const fixture f(name);
        fs::remove_all(out);
        fs::create_directories(out);
        const model_t model(f.hf.config);
        write_model_files(model, f.hf.blocks, out);
        const auto hf = safetensors_file::open(f.dir / "model.safetensors");
        const auto ours = safetensors_file::open(out / "model.safetensors");
        std::size_t hf_params = 0;
        for (const auto& key : hf.names())
            hf_params += key != "lm_head.weight" && !key.ends_with(".attn.bias") && !key.ends_with(".attn.masked_bias");
        CHECK(ours.size() == hf_params);
        for (const auto& key : ours.names()) {
            CAPTURE(key);
            // HF files name parameters with or without the "transformer." prefix.
            const std::string bare = key.substr(std::string("transformer.").size());
            const std::string hf_key = hf.contains(key) ? key : bare;
            REQUIRE(hf.contains(hf_key));
            const auto& a = ours.info(key);
            const auto& b = hf.info(hf_key);
            CHECK(a.dtype == b.dtype);
            CHECK(a.shape == b.shape);
            REQUIRE(a.bytes.size() == b.bytes.size());
            CHECK(std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0);
        }
        const auto again = load_model_files<float>(out);
        CHECK(again.blocks == f.hf.blocks);
        const auto& c = again.config;
        CHECK((c.vocab_size == f.hf.config.vocab_size && c.max_seq == f.hf.config.max_seq &&
               c.n_layer == f.hf.config.n_layer && c.n_head == f.hf.config.n_head && c.n_embd == f.hf.config.n_embd));
    }
    fs::remove_all(out);
}

}  // namespace hf_parity_test
