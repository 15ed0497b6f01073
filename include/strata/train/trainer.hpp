// trainer<R, Backend, Model>: one optimizer step = forward/backward over the micro-batches of
// gradient accumulation, the exact global gradient norm, clipping, AdamW. Model is the example
// GPT (gpt_model, the default) or any decoder_model assembled from Layers (model/decoder.hpp).
//
// Frozen tensors (param_spec::trainable = false) have no gradients and no AdamW moments: each
// group's gradient and moment blocks hold its trainable prefix (param_layout::trainable_numel),
// and a wholly frozen group has none (its binder gradients are null).
//
// This is the resident configuration: weights, gradients and both AdamW moments of every layer
// group live in the device tier, one page-aligned block per group and per kind, and AdamW runs
// where they live. Only the micro-batch tokens travel host -> device, and the per-token losses
// and the norm's partial sums device -> host.
//
// Named host waits per step: (1) "grad norm": the partial sums of squares reach the host, which
// computes the clip coefficient; (2) "step end": the losses, for the metrics.
//
// Host staging (pinned with CUDA: copies from it are asynchronous) is allocated once, here: per
// micro-batch a tokens, a targets and a losses buffer, and the norm's partial sums. Allocating
// pinned memory inside a step would be an implicit synchronization (cudaHostAlloc/cudaFreeHost).
#pragma once

#include <strata/backend/backend.hpp>       // Backend
#include <strata/core/error.hpp>            // strata::error
#include <strata/data/loader.hpp>           // data::batch
#include <strata/kernels/cpu/cross_entropy.hpp>  // kernels::cpu::ignore_index
#include <strata/model/activations.hpp>     // kept_activations
#include <strata/model/gpt.hpp>             // gpt_model, GroupBinder
#include <strata/nn/ops.hpp>                // ops
#include <strata/tensor/tiered_tensor.hpp>  // tiered_tensor
#include <strata/tier/group_home.hpp>        // group_home
#include <strata/train/adamw.hpp>           // adamw_hparams
#include <strata/train/clip.hpp>            // clip_coefficient, require_finite_grad_norm
#include <strata/train/initialize.hpp>      // initialize_groups
#include <strata/train/rng.hpp>             // rng
#include <strata/train/schedule.hpp>        // lr_schedule, lr_at

#include <algorithm>  // std::max
#include <cmath>    // std::sqrt, std::isfinite
#include <cstddef>  // std::size_t
#include <mutex>    // std::mutex, std::lock_guard
#include <optional> // std::optional
#include <span>     // std::span
#include <string>   // std::string
#include <vector>   // std::vector

namespace strata {

struct train_options {
    std::size_t batch = 4;       // micro-batch B
    std::size_t seq = 128;       // T
    std::size_t accum = 1;       // micro-batches per optimizer step
    lr_schedule schedule{};
    adamw_hparams adamw{};
    double clip = 1.0;           // max global gradient norm; 0 disables clipping
    // Blocks whose forward activations stay for the backward (the first ones); the others keep
    // only their input and recompute (model/activations.hpp). The planner's memory_plan::kept
    // says how many fit; none() keeps the least memory, all() recomputes nothing.
    kept_activations activations = kept_activations::none();
    // Where each layer group's state lives (memory_plan::homes), for the streamed trainer; empty:
    // its default. The resident trainer keeps every group on the device and takes only that.
    std::vector<group_home> homes;
};

struct step_result {
    long step = 0;           // 1-based number of this update
    double loss = 0;         // mean over the counted tokens of the effective batch
    double grad_norm = 0;    // global L2 norm before clipping
    double lr = 0;
    std::size_t tokens = 0;  // tokens processed (B * T * accum)
    std::size_t counted = 0; // tokens that counted in the loss
};

namespace detail {
// Token ids outside [0, V) are refused on the host: a GPU kernel cannot throw, and would skip them.
inline void check_token_ids(const data::batch& b, std::size_t vocab) {
    auto bad = [&](const char* what, std::size_t i, std::int32_t id) {
        throw error(std::string(what) + " id " + std::to_string(id) + " at position " + std::to_string(i) +
                        " is outside the model's vocabulary [0, " + std::to_string(vocab) + ")",
                    "the data was tokenized with a larger vocabulary than the model's: use the same tokenizer");
    };
    for (std::size_t i = 0; i < b.inputs.size(); ++i)
        if (b.inputs[i] < 0 || static_cast<std::size_t>(b.inputs[i]) >= vocab) bad("input token", i, b.inputs[i]);
    for (std::size_t i = 0; i < b.targets.size(); ++i)
        if (b.targets[i] != kernels::cpu::ignore_index && (b.targets[i] < 0 || static_cast<std::size_t>(b.targets[i]) >= vocab))
            bad("target token", i, b.targets[i]);
}

// Checks the micro-batches of one step and returns the targets that count in the loss.
inline std::size_t check_micro_batches(std::span<const data::batch> micro, const train_options& o, long update,
                                       std::size_t vocab) {
    if (micro.size() != o.accum)
        throw error("trainer::step got " + std::to_string(micro.size()) + " micro-batches, expected accum = " +
                    std::to_string(o.accum));
    const std::size_t BT = o.batch * o.seq;
    std::size_t counted = 0;
    for (const auto& b : micro) {
        if (b.inputs.size() != BT || b.targets.size() != BT)
            throw error("micro-batch has " + std::to_string(b.inputs.size()) + " tokens, expected B x T = " +
                        std::to_string(BT));
        check_token_ids(b, vocab);
        for (auto t : b.targets) counted += t != kernels::cpu::ignore_index;
    }
    if (counted == 0)
        throw error("step " + std::to_string(update) + ": no target token counts in the loss (all are ignored)",
                    "instruction data needs responses that fit in --seq-len");
    return counted;
}

// sqrt of the per-group sums of squares added in group order, frozen groups skipped: both trainers.
template <class Groups>
double global_norm(const Groups& groups, std::span<const double> partials) {
    double sum = 0;
    for (std::size_t g = 0; g < groups.size(); ++g)
        if (!groups[g].frozen()) sum += partials[g];
    return std::sqrt(sum);
}

// A NaN loss or gradient norm stops training before the update can destroy the weights.
inline void check_finite(const step_result& r, long update) {
    if (!std::isfinite(r.loss))
        throw error("loss is " + std::to_string(r.loss) + " at step " + std::to_string(update),
                    "training diverged: lower --lr or lengthen --warmup, and resume from the last checkpoint");
    require_finite_grad_norm(r.grad_norm, update);
}
}  // namespace detail

namespace detail {
// Doubles of sum_of_squares workspace for the largest trainable block of any group (at least one):
// what both trainers allocate and the planner counts.
template <Backend B, class Groups>
std::size_t norm_workspace_doubles(const Groups& groups) {
    std::size_t n = 1;
    for (const auto& g : groups)
        if (!g.frozen()) n = std::max(n, ops<B>::sum_of_squares_workspace(g.trainable_numel()));
    return n;
}
}  // namespace detail

template <class R, Backend B, class Model = gpt_model<R, B>>
class trainer {
public:
    using model_type = Model;
    using stream = typename B::stream;
    using op = ops<B>;

    trainer(B& backend, const model_type& model, train_options options)
        : m_backend(backend),
          m_model(model),
          m_options(std::move(options)),
          m_compute(backend.make_stream("compute")),
          m_act(backend, model, m_options.batch, m_options.seq, m_options.activations) {
        validate(m_options.adamw);
        for (std::size_t g = 0; g < m_options.homes.size(); ++g)
            if (m_options.homes[g] != group_home::device())
                throw error("the resident trainer keeps every group on the device; group " + std::to_string(g) +
                                "'s home has weights in the " + std::string(name_of(m_options.homes[g].weights)) +
                                " tier",
                            "train a plan with host or storage homes with the streamed trainer (with_planned_trainer)");
        if (m_options.seq > model.max_seq())
            throw error("sequence length " + std::to_string(m_options.seq) + " exceeds the model's context " +
                            std::to_string(model.max_seq()),
                        "lower --seq-len or build the model with a longer context");
        const auto& groups = model.groups();
        for (std::size_t g = 0; g < groups.size(); ++g) {
            const std::string n = "g" + std::to_string(g);
            m_params.emplace_back(backend, shape{groups[g].numel()}, "params." + n);
            m_grads.emplace_back();
            m_m.emplace_back();
            m_v.emplace_back();
            if (groups[g].frozen()) continue;
            const shape s{groups[g].trainable_numel()};
            m_grads.back().emplace(backend, s, "grads." + n);
            m_m.back().emplace(backend, s, "adam_m." + n);
            m_v.back().emplace(backend, s, "adam_v." + n);
        }
        m_norm_partials_dev.emplace_back(backend, shape{groups.size()}, "grad_norm.partials");
        m_norm_workspace.emplace_back(backend, shape{detail::norm_workspace_doubles<B>(groups)}, "grad_norm.workspace");
        m_norm_partials_host.emplace_back(backend, shape{groups.size()}, "grad_norm.partials.host");
        const std::size_t BT = m_options.batch * m_options.seq;
        for (std::size_t k = 0; k < std::max<std::size_t>(m_options.accum, 1); ++k) {
            m_staged_tokens.emplace_back(backend, shape{BT}, "tokens.host");
            m_staged_tokens.emplace_back(backend, shape{BT}, "targets.host");
            m_staged_losses.emplace_back(backend, shape{BT}, "losses.host");
        }
        for (auto* set : {&m_m, &m_v, &m_grads})
            for (auto& t : *set)
                if (t) op::zero(m_compute, t->device_data().get(), t->numel());
        m_compute.synchronize();  // named: the state is ready before the first step
    }

    const model_type& model() const { return m_model; }
    const train_options& options() const { return m_options; }
    long step_count() const { return m_step; }
    B& backend() { return m_backend; }
    stream& compute_stream() { return m_compute; }

    // Every stream of the trainer with its trace track name (resident: compute only).
    template <class F>
    void for_each_stream(F&& f) {
        f("compute", m_compute);
    }

    // The model's initialization from a seed (initialize_groups: one generator per group, all
    // cores); each group reaches the device by one copy from its worker's buffer.
    void initialize(std::uint64_t seed) {
        std::mutex copying;  // one copy at a time on the compute stream
        initialize_groups(m_model, seed, [](std::size_t) { return std::span<R>{}; }, [&](std::size_t g, std::span<const R> block) {
            std::lock_guard lock(copying);
            m_backend.copy(m_params[g].device_data().get(), tier_id::device, block.data(), tier_id::host,
                           block.size_bytes(), m_compute)
                .wait();  // named: the worker refills its buffer next
        });
    }

    // ---- state, for checkpoints: one group's block of weights / m / v, to and from the host ----
    // (weights: the whole block; gradients, m, v: the trainable prefix, nothing for a frozen group)
    enum class state_kind { params, adam_m, adam_v, grads };
    void download(state_kind k, std::size_t g, std::span<R> out) {
        auto& t = pick(k, g);
        tiered_tensor<R, host_tier, B> host(m_backend, t.shape(), "download.host");
        host.copy_from(t, m_compute).wait();  // named: checkpoint I/O
        std::copy(host.span().begin(), host.span().end(), out.begin());
    }
    void upload(state_kind k, std::size_t g, std::span<const R> in) {
        auto& t = pick(k, g);
        if (in.size() != t.numel()) throw error("upload: block size mismatch for group " + std::to_string(g));
        tiered_tensor<R, host_tier, B> host(m_backend, t.shape(), "upload.host");
        std::copy(in.begin(), in.end(), host.span().begin());
        t.copy_from(host, m_compute).wait();  // named: checkpoint I/O
    }
    void set_step_count(long step) { m_step = step; }

    // One optimizer step over `micro` (accum micro-batches of B x T tokens each).
    step_result step(std::span<const data::batch> micro) {
        const long update = m_step + 1;
        const std::size_t counted = detail::check_micro_batches(micro, m_options, update, m_model.vocab_size());
        const std::size_t BT = m_options.batch * m_options.seq;

        for (auto& g : m_grads)
            if (g) op::zero(m_compute, g->device_data().get(), g->numel());
        resident_binder bind{*this};
        for (std::size_t k = 0; k < micro.size(); ++k) {
            stage_tokens(micro[k], k);
            m_model.forward_backward(bind, m_act, m_options.batch, m_options.seq, 1.0 / static_cast<double>(counted),
                                     m_compute);
            copy_async(m_backend, m_staged_losses[k].view(), m_act.losses_tensor().view().flat(0, shape{BT}), m_compute);
        }

        step_result r;
        r.step = update;
        r.tokens = BT * micro.size();
        r.counted = counted;
        r.grad_norm = grad_norm();  // named wait inside
        for (std::size_t k = 0; k < micro.size(); ++k)  // the losses precede the norm's partials on the stream
            for (R x : m_staged_losses[k].span()) r.loss += static_cast<double>(x);
        r.loss /= static_cast<double>(counted);
        detail::check_finite(r, update);

        r.lr = lr_at(m_options.schedule, m_step);
        const double coefficient = m_options.clip > 0 ? clip_coefficient(r.grad_norm, m_options.clip, update) : 1.0;
        const auto& groups = m_model.groups();
        for (std::size_t g = 0; g < groups.size(); ++g) {
            if (groups[g].frozen()) continue;
            R* grad = m_grads[g]->device_data().get();
            if (coefficient < 1) op::scale_inplace(m_compute, grad, coefficient, groups[g].trainable_numel());
            for (const auto& slot : groups[g].slots()) {
                if (!slot.spec.trainable) continue;
                const std::size_t o = slot.offset, n = slot.spec.shape.numel();
                op::adamw(m_compute, m_params[g].device_data().get() + o, grad + o, m_m[g]->device_data().get() + o,
                          m_v[g]->device_data().get() + o, n, m_options.adamw, r.lr, update, slot.spec.decay);
            }
        }
        m_compute.synchronize();  // named: step end (the staging is reused by the next step)
        m_step = update;
        return r;
    }

    // Mean loss over the given batches, without touching gradients or the optimizer.
    double evaluate(std::span<const data::batch> batches) {
        const std::size_t BT = m_options.batch * m_options.seq;
        double total = 0;
        std::size_t counted = 0;
        resident_binder bind{*this};
        for (const auto& b : batches) {
            detail::check_token_ids(b, m_model.vocab_size());
            for (auto t : b.targets) counted += t != kernels::cpu::ignore_index;
            stage_tokens(b, 0);
            m_model.forward(bind, m_act, m_options.batch, m_options.seq, m_compute);
            copy_async(m_backend, m_staged_losses[0].view(), m_act.losses_tensor().view().flat(0, shape{BT}), m_compute)
                .wait();  // named: evaluation losses (the staging is reused by the next batch)
            for (R x : m_staged_losses[0].span()) total += static_cast<double>(x);
        }
        return counted ? total / static_cast<double>(counted) : 0.0;
    }

private:
    struct resident_binder {
        trainer& t;
        const R* params(std::size_t g, stream&, group_use) { return t.m_params[g].device_data().get(); }
        R* grads(std::size_t g, stream&) { return t.m_grads[g] ? t.m_grads[g]->device_data().get() : nullptr; }
        void done(std::size_t, stream&, group_use) {}
    };

    // Micro-batch k's tokens and targets into their staging, and on to the device (asynchronous).
    void stage_tokens(const data::batch& b, std::size_t k) {
        auto& tok = m_staged_tokens[2 * k];
        auto& tgt = m_staged_tokens[2 * k + 1];
        std::copy(b.inputs.begin(), b.inputs.end(), tok.span().begin());
        std::copy(b.targets.begin(), b.targets.end(), tgt.span().begin());
        m_act.tokens_tensor().copy_from(tok, m_compute);
        m_act.targets_tensor().copy_from(tgt, m_compute);
    }

    tiered_tensor<R, device_tier, B>& pick(state_kind k, std::size_t g) {
        if (k == state_kind::params) return m_params[g];
        auto& t = k == state_kind::adam_m ? m_m[g] : k == state_kind::adam_v ? m_v[g] : m_grads[g];
        if (!t) throw error("group " + std::to_string(g) + " is frozen: it has no gradients and no AdamW moments");
        return *t;
    }

    // Exact global L2 norm: per-group sums of squares in double, summed on the host in group order
    // (frozen groups have none).
    double grad_norm() {
        double* partials = m_norm_partials_dev[0].device_data().get();
        for (std::size_t g = 0; g < m_grads.size(); ++g)
            if (m_grads[g])
                op::sum_of_squares(m_compute, partials + g, m_norm_workspace[0].device_data().get(),
                                   m_grads[g]->device_data().get(), m_grads[g]->numel());
        m_norm_partials_host[0].copy_from(m_norm_partials_dev[0], m_compute).wait();  // named: grad norm
        return detail::global_norm(m_model.groups(), m_norm_partials_host[0].span());
    }

    B& m_backend;
    const model_type& m_model;
    train_options m_options;
    stream m_compute;
    typename model_type::activations m_act;
    std::vector<tiered_tensor<R, device_tier, B>> m_params;
    std::vector<std::optional<tiered_tensor<R, device_tier, B>>> m_grads, m_m, m_v;  // empty: a frozen group
    std::vector<tiered_tensor<double, device_tier, B>> m_norm_partials_dev, m_norm_workspace;
    std::vector<tiered_tensor<double, host_tier, B>> m_norm_partials_host;
    std::vector<tiered_tensor<std::int32_t, host_tier, B>> m_staged_tokens;  // (accum x 2) tokens, targets
    std::vector<tiered_tensor<R, host_tier, B>> m_staged_losses;             // (accum) per-token losses
    long m_step = 0;
};

}  // namespace strata

namespace strata {

// Compile-time composition: trainer_t<R, Backend, Placement, Moments>.
//   trainer_t<float, cpu_backend>                                              resident
//   trainer_t<float, cuda_backend, prefetch_pipeline<2>, moments_in<host_tier>>    streamed
//   trainer_t<float, cuda_backend, prefetch_pipeline<2>, moments_in<storage_tier>> streamed, moments on disk
struct resident_placement {};
template <Tier Home>
struct moments_in {
    using tier = Home;
};

template <class R, Backend B, class Placement, class Moments, class Model = gpt_model<R, B>>
struct select_trainer {
    static_assert(sizeof(Placement) == 0,
                  "no trainer for this Placement/Moments pair: use resident_placement with moments_in<device_tier>, "
                  "or prefetch_pipeline<N> with moments_in<host_tier> or moments_in<storage_tier>");
};
template <class R, Backend B, class Model>
struct select_trainer<R, B, resident_placement, moments_in<device_tier>, Model> {
    using type = trainer<R, B, Model>;
};

// Model: gpt_model<R, B> (default) or a decoder_model of Layers.
template <class R, Backend B, class Placement = resident_placement, class Moments = moments_in<device_tier>,
          class Model = gpt_model<R, B>>
using trainer_t = typename select_trainer<R, B, Placement, Moments, Model>::type;

}  // namespace strata
