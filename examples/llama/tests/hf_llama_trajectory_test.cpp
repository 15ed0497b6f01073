// Ten AdamW steps of strata's trainer against PyTorch's (issue 16). Each Llama family fixture
// (tests/fixtures/hf_llama_family/<shape>/, tools/make_llama_fixture.py --family) holds
// trajectory.safetensors: ten batches, torch's loss and gradient norm at each step, and every
// parameter after the ten updates, made by torch.optim.AdamW (foreach=False) with strata's
// hyperparameters, decay grouping and clipping formula, stored beside them (hparams.*). strata
// trains llama_model from the fixture's weights with the trainer on the same batches, on every
// backend of the build, and must follow the same trajectory. Until the fixtures have the file,
// the cases skip, visibly, naming it. Negative controls: the same comparison with a wrong weight
// decay or a wrong beta2 fails by far.
#include "../llama_model.hpp"  // llama::make_llama_model, llama_model
#ifdef STRATA_TESTS_WITH_CUDA
#include "../llama_ops_cuda.hpp"  // llama_ops<cuda_backend> (definitions: strata_llama_cuda_ops)
#endif
#include "hf_fixture.hpp"        // llama_fixture::fixture, compare, relative, for_each_hf_tensor, family_dir
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, make_backend
#include "support/skip.hpp"      // strata::test::skip

#include <strata/data/loader.hpp>       // data::batch
#include <strata/io/safetensors.hpp>    // safetensors_file
#include <strata/strata.hpp>            // cpu_backend
#include <strata/train/checkpoint.hpp>  // download_blocks
#include <strata/train/tiered_trainer.hpp>     // trainer, train_options

#include <doctest/doctest.h>  // TEST_CASE, TEST_CASE_TEMPLATE, CHECK_MESSAGE, MESSAGE

#include <algorithm>   // std::sort, std::max
#include <cmath>       // std::sqrt, std::abs
#include <cstddef>     // std::size_t
#include <cstdint>     // std::int32_t
#include <filesystem>  // std::filesystem
#include <string>      // std::string
#include <vector>      // std::vector

namespace hf_llama_trajectory_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
using namespace llama_fixture;  // fixture, compare, relative, family_dir, family_shapes, for_each_hf_tensor
using llama::llama_model;
namespace fs = std::filesystem;

namespace {

// Tolerances. Both sides run the same float32 arithmetic except for summation order (the
// one-step parity test's tolerances: gradients agree to ~1e-6 normalized, loss to ~1e-7
// relative); the AdamW update itself is strata's restatement of torch's, operation for operation
// (bitwise on equal gradients, tests/train/adamw_test.cpp), and the clip uses the same formula.
// What 10 steps do to a gradient difference dg: Adam divides m by sqrt(v), so an update is
// lr * m_hat / (sqrt(v_hat) + eps) and its error is about lr * |dg / g| where |g| >> eps (sign
// and scale cancel): the weights part by ~lr * 1e-6 per step, against an update of up to lr per
// step. The exception are elements whose gradient is within dg of zero (the step-1 update
// lr * g / (|g| + eps) flips with the sign of g): their difference is of the order of lr and stays
// and grows (a perturbation of the whole trajectory moves single elements by ~1 lr, and by 3-4 lr
// with batches that change every step; see the negative controls' printed "largest"). No element can part by more than 2 * 1.01 lr per
// step: |m_hat| / sqrt(v_hat) <= sqrt(sum_i a_i^2 / b_i) = 1.01 at step 10 for betas (0.9, 0.95)
// (Cauchy-Schwarz over m's and v's weights a_i, b_i), so 21 lr over 10 steps bounds every element.
// Hence, over the whole model (n ~ 10^4 elements):
// - weights, bulk: ||p_strata - p_torch|| / ||p_torch - p_initial|| (the difference against the
//   whole update) leaving out the max(16, n / 1000) largest element differences: expected
//   ~1e-5, tolerance 1e-3. A wrong hyperparameter moves every element: a weight decay of 0
//   instead of 0.1 gives 3.1e-2 to 3.4e-2 on the three shapes (10 lr wd |p| against ~lr per
//   step), beta2 0.999 instead of 0.95 1.8e-2 to 2.1e-2 (strata against strata, measured), both
//   far more than control_margin x the tolerance.
// - weights, every element: |p_strata - p_torch| <= 21 lr (the bound above).
// - loss and gradient norm (before clipping) of each step: 1e-4 relative, the GPT-2 trajectory's
//   tolerance (tests/hf/hf_parity_test.cpp, docs/parity.md, held on the CPU and the H200); the loss
//   is a smooth function of the weights (their bulk difference changes it by ~|g| |dp| / sqrt(n),
//   ~1e-7 relative; a flipped element by ~|g_elem| lr with g_elem ~ 0), the norm moves also
//   through the Hessian. Step 1 has the one-step test's tolerances, 1e-6 and 1e-5.
constexpr double weights_tolerance = 1e-3;          // relative to the norm of the whole update, outliers left out
constexpr std::size_t min_outliers = 16;            // element differences left out of the bulk (or n / 1000)
constexpr double element_bound_lr = 21;             // any element: |difference| <= this x lr
constexpr double loss_tolerance = 1e-4;             // relative, each step
constexpr double first_loss_tolerance = 1e-6;       // relative, step 1 (the one-step parity test)
constexpr double grad_norm_tolerance = 1e-4;        // relative, each step
constexpr double first_grad_norm_tolerance = 1e-5;  // relative, step 1
constexpr double control_margin = 4;                // a wrong hyperparameter: at least this x the tolerance

// A fixture's trajectory.safetensors.
struct trajectory {
    safetensors_file file;
    std::size_t steps, batch, seq;

    explicit trajectory(const fs::path& path)
        : file(safetensors_file::open(path)),
          steps(file.info("trajectory.inputs").shape.at(0)),
          batch(file.info("trajectory.inputs").shape.at(1)),
          seq(file.info("trajectory.inputs").shape.at(2)) {}

    double hparam(const std::string& name) const { return file.get<double>("hparams." + name, {1})[0]; }
    std::span<const double> per_step(const std::string& name) const { return file.get<double>("trajectory." + name, {steps}); }
    data::batch batch_of(std::size_t step) const {
        const std::size_t n = batch * seq;
        const auto in = file.get<std::int32_t>("trajectory.inputs").subspan(step * n, n);
        const auto out = file.get<std::int32_t>("trajectory.targets").subspan(step * n, n);
        return {{in.begin(), in.end()}, {out.begin(), out.end()}, {}};
    }
    // torch's hyperparameters, as strata's options
    adamw_hparams adamw() const {
        return {.beta1 = hparam("beta1"), .beta2 = hparam("beta2"), .eps = hparam("eps"), .weight_decay = hparam("weight_decay")};
    }
};

// The family fixtures that have a trajectory; a visible skip naming the absent ones.
std::vector<fs::path> trajectory_dirs() {
    std::vector<fs::path> out;
    std::string absent;
    for (const char* name : family_shapes) {
        const fs::path dir = family_dir() / name;
        if (fs::exists(dir / "trajectory.safetensors") && fs::exists(dir / "reference.safetensors"))
            out.push_back(dir);
        else
            absent += (absent.empty() ? "" : ", ") + std::string(name);
    }
    if (!absent.empty())
        strata::test::skip("Llama family trajectory fixture(s) " + absent + " absent (no " + family_dir().string() +
                           "/<shape>/trajectory.safetensors): make them with tools/make_fixtures.sh OUTDIR "
                           "(make_llama_fixture.py --family) on a machine with torch and transformers, then copy "
                           "OUTDIR/hf_llama_family to tests/fixtures/");
    return out;
}

struct trained {
    std::vector<double> losses, grad_norms;
    std::vector<std::vector<float>> params;  // the model's blocks after the steps
};

// strata's trainer from the fixture's weights over the trajectory's batches, with its schedule
// (constant lr, no warmup), clip and the AdamW hyperparameters `h`.
template <class B>
trained train(B& backend, const fixture& f, const trajectory& tr, const adamw_hparams& h) {
    using llama_trainer = tiered_trainer<float, B, llama_model<B>>;
    const auto model = llama::make_llama_model<B>(f.hf.config);
    const double lr = tr.hparam("lr");
    train_options o{.batch = tr.batch, .seq = tr.seq, .accum = 1, .clip = tr.hparam("clip")};
    o.schedule = {.kind = lr_kind::constant, .lr = lr, .min_lr = lr, .warmup_steps = 0, .total_steps = long(tr.steps)};
    o.optimizer = adamw_optimizer(h);
    llama_trainer t(backend, model, o);
    for (std::size_t g = 0; g < f.hf.blocks.size(); ++g) t.upload(llama_trainer::state_kind::params, g, f.hf.blocks[g]);
    trained out;
    for (std::size_t s = 0; s < tr.steps; ++s) {
        const auto r = t.step(std::vector<data::batch>{tr.batch_of(s)});
        REQUIRE(r.lr == lr);
        out.losses.push_back(r.loss);
        out.grad_norms.push_back(r.grad_norm);
    }
    out.params = download_blocks(t, llama_trainer::state_kind::params);
    return out;
}

// ||strata - torch|| / ||torch - initial|| over every parameter, the largest element differences
// left out, and the largest element difference / lr.
struct weights_difference {
    double relative = 0, worst_over_lr = 0;
    std::size_t left_out = 0;
    std::string worst_name, report;
};

weights_difference compare_final_weights(const fixture& f, const trajectory& tr, const trained& got) {
    const auto model = llama::make_llama_model<cpu_backend>(f.hf.config);
    const double lr = tr.hparam("lr");
    std::vector<std::vector<float>> initial;  // the fixture's weights in HF's layout, in visiting order
    for_each_hf_tensor(model, f.hf.blocks, [&](const llama::hf_tensor&, const std::vector<float>& v) { initial.push_back(v); });
    std::vector<double> differences;  // |strata - torch| of every element
    double update2 = 0;
    weights_difference w;
    std::size_t k = 0;
    for_each_hf_tensor(model, got.params, [&](const llama::hf_tensor& hf, const std::vector<float>& mine) {
        const auto want = tr.file.get<float>("final." + hf.name, hf.shape);
        const auto& start = initial[k++];
        for (std::size_t i = 0; i < mine.size(); ++i) {
            differences.push_back(std::abs(double(mine[i]) - want[i]));
            update2 += (double(want[i]) - start[i]) * (double(want[i]) - start[i]);
        }
        const auto d = compare(hf.name, mine, want);
        if (d.max_diff / lr >= w.worst_over_lr) w.worst_over_lr = d.max_diff / lr, w.worst_name = d.report;
    });
    std::sort(differences.begin(), differences.end());
    w.left_out = std::max(min_outliers, differences.size() / 1000);
    double bulk2 = 0;
    for (std::size_t i = 0; i + w.left_out < differences.size(); ++i) bulk2 += differences[i] * differences[i];
    w.relative = std::sqrt(bulk2 / update2);
    w.report = "final weights: ||strata - torch|| / ||torch update|| " + std::to_string(w.relative) + " without the " +
               std::to_string(w.left_out) + " largest of " + std::to_string(differences.size()) +
               " element differences; the largest / lr " + std::to_string(w.worst_over_lr) + " (" + w.worst_name + ")";
    return w;
}

}  // namespace

TEST_CASE_TEMPLATE("HF Llama family trajectory: 10 AdamW steps (clip, decay groups, constant lr) follow torch's", B,
                   STRATA_TEST_BACKENDS) {
    auto backend = test::make_backend<B>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    if (!backend) return;
    for (const fs::path& dir : trajectory_dirs()) {
        INFO(dir.string());
        const fixture f(dir);
        const trajectory tr(dir / "trajectory.safetensors");
        REQUIRE(tr.steps == 10);
        const trained got = train(*backend, f, tr, tr.adamw());
        const auto want_loss = tr.per_step("loss"), want_norm = tr.per_step("grad_norm");
        std::string losses;
        for (std::size_t s = 0; s < tr.steps; ++s) {
            const double rl = relative(got.losses[s], want_loss[s]), rn = relative(got.grad_norms[s], want_norm[s]);
            CHECK_MESSAGE(rl < (s == 0 ? first_loss_tolerance : loss_tolerance),
                          "step ", s + 1, ": loss ", got.losses[s], " vs torch ", want_loss[s], " (rel ", rl, ")");
            CHECK_MESSAGE(rn < (s == 0 ? first_grad_norm_tolerance : grad_norm_tolerance),
                          "step ", s + 1, ": grad norm ", got.grad_norms[s], " vs torch ", want_norm[s], " (rel ", rn, ")");
            losses += " " + std::to_string(got.losses[s]) + " (rel " + std::to_string(rl) + ")";
        }
        const auto w = compare_final_weights(f, tr, got);
        CHECK_MESSAGE(w.relative < weights_tolerance, w.report);
        CHECK_MESSAGE(w.worst_over_lr <= element_bound_lr, w.report);
        MESSAGE("losses:", losses, "; ", w.report);
    }
}

TEST_CASE("HF Llama family trajectory: the comparison catches a wrong weight decay or beta2") {
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    for (const fs::path& dir : trajectory_dirs()) {
        INFO(dir.string());
        const fixture f(dir);
        const trajectory tr(dir / "trajectory.safetensors");
        auto no_decay = tr.adamw();
        REQUIRE(no_decay.weight_decay > 0);
        no_decay.weight_decay = 0;
        const auto decay = compare_final_weights(f, tr, train(backend, f, tr, no_decay));
        CHECK_MESSAGE(decay.relative > control_margin * weights_tolerance, "weight decay 0: ", decay.report);
        auto beta2 = tr.adamw();
        REQUIRE(beta2.beta2 != 0.999);
        beta2.beta2 = 0.999;
        const auto second = compare_final_weights(f, tr, train(backend, f, tr, beta2));
        CHECK_MESSAGE(second.relative > control_margin * weights_tolerance, "beta2 0.999: ", second.report);
        MESSAGE("weight decay 0: ", decay.report, "; beta2 0.999: ", second.report);
    }
}

}  // namespace hf_llama_trajectory_test

