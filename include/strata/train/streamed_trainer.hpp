// streamed_trainer: the trainer of trainer.hpp with the model's state in the host (and storage)
// tier, and the transformer blocks streamed through device slots by prefetch_pipeline<Depth>.
// Model: gpt_model (default) or a decoder_model of Layers, as for the resident trainer; frozen
// tensors have no gradients and no moments, and a frozen block's weights stream to the device
// but nothing comes back.
//
// Homes: weights and gradients of every group in pinned host memory; AdamW moments in the host
// tier or, with MomentsTier = storage_tier, in files on the storage tier (read and written back
// around each group's update). The embeddings and the final layernorm are used at both ends of
// a pass, so they are copied to the device once per step ("pinned groups").
//
// The global gradient norm is computed on the device, where the gradients are anyway: right after
// a block's backward of the last micro-batch, its gradient slot holds the block's final
// accumulated gradients, and ops<B>::sum_of_squares writes their sum of squares (in double, in the
// canonical chunked order: the CPU kernel's bits) into that group's entry of a small device array
// of per-group partials, on the compute stream, before the slot is released; the pinned groups
// once the backward is over. One copy brings the partials to the host ("grad norm" wait), which
// adds them in group order and takes the sqrt: the resident trainer's grad_norm(), bit for bit.
// No host thread reads the gradients for the norm.
//
// The optimizer runs on the host (offloaded_adamw: vectorized, multi-threaded, bitwise equal to
// the resident trainer's AdamW), on its own thread, and off the critical path. Once the loss and
// the norm are known to be finite (the backward is over; the last gradients may still be on their
// way to the host), AdamW runs per group in the order the NEXT step uses them (embeddings, blocks
// 0..L-1, final norm), each waiting for its own gradient copy. With clip > 0 the clip coefficient
// is folded into AdamW (step_block's grad_scale: g * coefficient, the one rounding the resident
// trainer's scale_inplace makes), so there is no separate pass over the gradients. With clip == 0
// too, no update starts before the norm is known: a NaN step must leave the state untouched, as
// the resident trainer does (an update started during the backward could not be taken back).
// step() returns without waiting for the updates: they overlap the next step's forward. Each
// group's update records an event, and the next step waits for it (a named host wait) just
// before that group's weights are first copied to the device; nothing else waits. So the
// forward of step N+1 reaches block g only once block g holds step N's update: no stale weights,
// nothing speculative. evaluate(), download()/upload() (checkpoints), initialize() and the
// destructor first complete every pending update (finish_updates(), public).
// Both give bitwise the same weights and moments as the resident trainer (tests/stream/). One
// difference: after a clipped step the host gradients (download(grads)) are the accumulated
// gradients before the clip, where the resident trainer's are scaled in place.
//
// Host staging is allocated once, in the constructor, as in the resident trainer: tokens, targets
// and losses per micro-batch, the norm's partials, and with moments on storage the optimizer's m
// and v buffers (the largest group's size; each group uses their front). No pinned allocation,
// hence no implicit synchronization, happens inside a step.
#pragma once

#include <strata/backend/backend.hpp>            // Backend
#include <strata/backend/cpu/stream.hpp>         // cpu::stream (the optimizer's host thread)
#include <strata/kernels/cpu/cross_entropy.hpp>  // kernels::cpu::ignore_index
#include <strata/model/gpt.hpp>                  // gpt_model
#include <strata/optim/offloaded_adamw.hpp>      // offloaded_adamw
#include <strata/stream/prefetch_pipeline.hpp>   // prefetch_pipeline, pipeline_engine
#include <strata/tensor/tiered_tensor.hpp>       // tiered_tensor
#include <strata/train/trainer.hpp>              // train_options, step_result, trainer

#include <array>        // std::array
#include <cmath>        // std::sqrt, std::isfinite
#include <memory>       // std::unique_ptr
#include <optional>     // std::optional
#include <string_view>  // std::string_view
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

namespace strata {

template <class R, Backend B, std::size_t Depth, Tier MomentsTier = host_tier, class Model = gpt_model<R, B>>
class streamed_trainer {
    static_assert(std::is_same_v<MomentsTier, host_tier> || std::is_same_v<MomentsTier, storage_tier>,
                  "AdamW moments of a streamed trainer live in the host or the storage tier");

public:
    using model_type = Model;
    using stream = typename B::stream;
    using event = typename B::event;
    using op = ops<B>;
    using state_kind = typename trainer<R, B, Model>::state_kind;

    streamed_trainer(B& backend, const model_type& model, train_options options)
        : m_backend(backend),
          m_model(model),
          m_options(std::move(options)),
          m_compute(backend.make_stream("compute")),
          m_optimizer("optimizer"),
          m_io(backend.make_stream("storage I/O")),
          m_adamw(m_options.adamw),
          m_engine(backend, largest_block(model, false), largest_block(model, true)),
          m_act(backend, model, m_options.batch, m_options.seq, m_options.activations),
          m_norm_partials(backend, shape{model.groups().size()}, "grad_norm.partials"),
          m_norm_workspace(backend, shape{detail::norm_workspace_doubles<B>(model.groups())}, "grad_norm.workspace"),
          m_norm_partials_host(backend, shape{model.groups().size()}, "grad_norm.partials.host") {
        const auto& groups = model.groups();
        for (std::size_t g = 0; g < groups.size(); ++g) {
            const std::string n = "g" + std::to_string(g);
            const shape s{groups[g].numel()}, ts{groups[g].trainable_numel()};
            const bool trains = !groups[g].frozen();
            m_params.emplace_back(backend, s, "params." + n);
            std::fill(m_params.back().span().begin(), m_params.back().span().end(), R(0));
            m_grads.emplace_back();
            m_m.emplace_back();
            m_v.emplace_back();
            if (trains) {
                m_grads.back().emplace(backend, ts, "grads." + n);
                m_m.back().emplace(backend, ts, "adam_m." + n);
                m_v.back().emplace(backend, ts, "adam_v." + n);
                std::fill(m_grads.back()->span().begin(), m_grads.back()->span().end(), R(0));
            }
            if (pinned(g)) {
                m_pinned_params.emplace_back(backend, s, "pinned.params." + n);
                m_pinned_grads.emplace_back();
                if (trains) m_pinned_grads.back().emplace(backend, ts, "pinned.grads." + n);
            }
        }
        m_last_d2h.resize(groups.size());
        const std::size_t BT = m_options.batch * m_options.seq;
        for (std::size_t k = 0; k < std::max<std::size_t>(m_options.accum, 1); ++k) {
            m_staged_tokens.emplace_back(backend, shape{BT}, "tokens.host");
            m_staged_tokens.emplace_back(backend, shape{BT}, "targets.host");
            m_staged_losses.emplace_back(backend, shape{BT}, "losses.host");
        }
        if constexpr (std::is_same_v<MomentsTier, storage_tier>) {
            std::size_t largest = 0;
            for (const auto& g : groups) largest = std::max(largest, g.trainable_numel());
            if (largest > 0) {  // (nothing trains: no moments, no staging; the planner counts 0)
                m_moments_staging.emplace_back(backend, shape{largest}, "adam_m.staging");
                m_moments_staging.emplace_back(backend, shape{largest}, "adam_v.staging");
            }
        }
        m_updated.resize(groups.size());
        zero_moments();
    }

    // Queued work (the optimizer's updates; after a failed step, the rest of that step) uses the
    // members: it finishes before any is destroyed.
    ~streamed_trainer() { drain(); }
    streamed_trainer(const streamed_trainer&) = delete;
    streamed_trainer& operator=(const streamed_trainer&) = delete;

    // Named host wait: every update a step scheduled has finished (rethrows an update's failure).
    // step() does not wait for them: they overlap the next step, which waits per group.
    void finish_updates() { m_optimizer.synchronize(); }

    const model_type& model() const { return m_model; }
    const train_options& options() const { return m_options; }
    long step_count() const { return m_step; }
    void set_step_count(long step) { m_step = step; }
    B& backend() { return m_backend; }
    // Bytes moved per link since construction: H2D, D2H, and the storage tier's reads and writes
    // of AdamW moments during steps (not checkpoint I/O), each counted when issued (a step's
    // moment I/O when its updates are scheduled). Read between steps.
    const transfer_counters& counters() const { return m_engine.counters(); }

    // Every stream of the trainer with its trace track name (H2D, compute, D2H, optimizer, storage I/O).
    template <class F>
    void for_each_stream(F&& f) {
        f("H2D", m_engine.h2d());
        f("compute", m_compute);
        f("D2H", m_engine.d2h());
        f("optimizer", m_optimizer);
        f("storage I/O", m_io);
    }

    void initialize(std::uint64_t seed) {
        finish_updates();
        rng gen(seed);
        for (std::size_t g = 0; g < m_params.size(); ++g) m_model.initialize(g, m_params[g].span(), gen);
    }

    void download(state_kind k, std::size_t g, std::span<R> out) { host_copy(k, g, out, /*to_host=*/true); }
    void upload(state_kind k, std::size_t g, std::span<const R> in) {
        host_copy(k, g, std::span<R>(const_cast<R*>(in.data()), in.size()), /*to_host=*/false);
    }

    step_result step(std::span<const data::batch> micro) {
        const std::size_t counted = detail::check_micro_batches(micro, m_options, m_step + 1, m_model.vocab_size());
        try {
            return step_or_throw(micro, counted);
        } catch (...) {
            drain();  // named: nothing of the failed step runs after the error leaves
            throw;
        }
    }

    double evaluate(std::span<const data::batch> batches) {
        const std::size_t BT = m_options.batch * m_options.seq;
        finish_updates();
        begin_pinned();
        double total = 0;
        std::size_t counted = 0;
        for (const auto& b : batches) {
            detail::check_token_ids(b, m_model.vocab_size());
            stage_tokens(b, 0);
            for (auto t : b.targets) counted += t != kernels::cpu::ignore_index;
            m_engine.begin(make_pass(/*backward=*/false, true));
            binder bind{*this, /*last_micro=*/false};
            m_model.forward(bind, m_act, m_options.batch, m_options.seq, m_compute);
            m_engine.end();
            copy_async(m_backend, m_staged_losses[0].view(), m_act.losses_tensor().view().flat(0, shape{BT}), m_compute)
                .wait();  // named: evaluation losses (the staging is reused by the next batch)
            for (R x : m_staged_losses[0].span()) total += static_cast<double>(x);
        }
        return counted ? total / static_cast<double>(counted) : 0.0;
    }

private:
    step_result step_or_throw(std::span<const data::batch> micro, std::size_t counted) {
        const long update = m_step + 1;
        const std::size_t BT = m_options.batch * m_options.seq;
        begin_pinned();
        for (std::size_t k = 0; k < micro.size(); ++k) {
            stage_tokens(micro[k], k);
            m_engine.begin(make_pass(/*backward=*/true, k == 0));
            binder bind{*this, /*last_micro=*/k + 1 == micro.size()};
            m_model.forward_backward(bind, m_act, m_options.batch, m_options.seq, 1.0 / static_cast<double>(counted),
                                     m_compute);
            m_engine.end();
            copy_async(m_backend, m_staged_losses[k].view(), m_act.losses_tensor().view().flat(0, shape{BT}), m_compute);
        }
        download_pinned_grads();  // also the pinned groups' sums of squares

        step_result r;
        r.step = update;
        r.tokens = BT * micro.size();
        r.counted = counted;
        r.lr = lr_at(m_options.schedule, m_step);
        // The per-group partials follow the losses on the compute stream: one wait for both, while
        // the last gradient copies may still be landing.
        m_norm_partials_host.copy_from(m_norm_partials, m_compute).wait();  // named: grad norm (and the losses)
        r.grad_norm = grad_norm(m_norm_partials_host);
        for (std::size_t k = 0; k < micro.size(); ++k)
            for (R x : m_staged_losses[k].span()) r.loss += static_cast<double>(x);
        r.loss /= static_cast<double>(counted);
        detail::check_finite(r, update);  // before any update is scheduled, clipping or not
        // As the resident trainer: scale only when the norm is over the max, by R(coefficient).
        const double coefficient = m_options.clip > 0 ? clip_coefficient(r.grad_norm, m_options.clip, update) : 1.0;
        schedule_adamw_in_use_order(r.lr, update, coefficient < 1 ? static_cast<R>(coefficient) : R(1));
        // No wait for the updates: the next step waits for each group's just before its weights
        // go to the device (wait_updated).
        wait_gradients();  // named: every copy of the step has finished (the pinned gradients' device
                           // buffers are zeroed by the next step)
        m_step = update;
        return r;
    }

    // Named host wait on every stream, failures ignored (the first one is already on its way to
    // the caller, or nobody is left to hear of it): after a failed step, queued work still points
    // into the members.
    void drain() noexcept {
        for_each_stream([](std::string_view, auto& s) {
            try {
                s.synchronize();
            } catch (...) {
            }
        });
    }

    // Groups used at both ends of a pass stay on the device for the whole step.
    bool pinned(std::size_t g) const { return g == 0 || g == m_model.final_group(); }
    std::size_t pinned_index(std::size_t g) const { return g == 0 ? 0 : 1; }

    // Elements of the largest transformer block (trainable: of its trainable prefix).
    static std::size_t largest_block(const model_type& model, bool trainable) {
        std::size_t n = 0;
        for (std::size_t l = 0; l < model.block_count(); ++l) {
            const auto& layout = model.groups()[model.block_group(l)];
            n = std::max(n, trainable ? layout.trainable_numel() : layout.numel());
        }
        return n;
    }

    // group g's sum of squares into its partial, on the compute stream, from its device gradients
    // (none for a frozen group).
    void sum_of_squares(std::size_t g, const R* grads) {
        if (!m_grads[g]) return;
        op::sum_of_squares(m_compute, m_norm_partials.device_data().get() + g, m_norm_workspace.device_data().get(), grads,
                           m_grads[g]->numel());
    }

    struct binder {
        streamed_trainer& t;
        bool last_micro;
        const R* params(std::size_t g, stream& s, group_use u) {
            if (t.pinned(g)) return t.pinned_params(g);
            return t.m_engine.params(g, s, u);
        }
        R* grads(std::size_t g, stream& s) {
            if (t.pinned(g)) {
                auto& grads = t.m_pinned_grads[t.pinned_index(g)];
                return grads ? grads->device_data().get() : nullptr;
            }
            return t.m_engine.grads(g, s);
        }
        void done(std::size_t g, stream& s, group_use u) {
            if (t.pinned(g)) return;  // summed in download_pinned_grads, after their last use
            // The slot holds the block's final gradients; summed before done() releases the slot
            // (its "free" event, which the D2H copy and the slot's next user wait for, follows).
            if (last_micro && u == group_use::backward) t.sum_of_squares(g, t.m_engine.grads_in_use());
            t.m_engine.done(g, s, u);
        }
    };

    typename pipeline_engine<R, B, Depth>::pass make_pass(bool backward, bool first_micro) {
        typename pipeline_engine<R, B, Depth>::pass p;
        const std::size_t L = m_model.block_count();
        for (std::size_t l = 0; l < L; ++l) p.order.push_back({m_model.block_group(l), group_use::forward});
        if (backward)
            for (std::size_t l = L; l-- > 0;) p.order.push_back({m_model.block_group(l), group_use::backward});
        p.host_params.assign(m_params.size(), nullptr);
        p.host_grads.assign(m_params.size(), nullptr);
        p.bytes.assign(m_params.size(), 0);
        p.grad_bytes.assign(m_params.size(), 0);
        for (std::size_t g = 0; g < m_params.size(); ++g)
            if (!pinned(g)) {
                p.host_params[g] = m_params[g].data();
                p.bytes[g] = m_params[g].bytes();
                if (m_grads[g]) {
                    p.host_grads[g] = m_grads[g]->data();
                    p.grad_bytes[g] = m_grads[g]->bytes();
                }
            }
        p.last_d2h = &m_last_d2h;
        p.first_micro = first_micro;
        p.before_h2d = [this](std::size_t g) { wait_updated(g); };
        return p;
    }

    // Micro-batch k's tokens and targets into their staging, and on to the device (asynchronous).
    void stage_tokens(const data::batch& b, std::size_t k) {
        auto& tok = m_staged_tokens[2 * k];
        auto& tgt = m_staged_tokens[2 * k + 1];
        std::copy(b.inputs.begin(), b.inputs.end(), tok.span().begin());
        std::copy(b.targets.begin(), b.targets.end(), tgt.span().begin());
        m_act.tokens_tensor().copy_from(tok, m_compute);
        m_act.targets_tensor().copy_from(tgt, m_compute);
    }

    // Named host wait: the previous step's update of group g has finished, so its host weights
    // are final. Called just before they are first copied to the device in a pass.
    void wait_updated(std::size_t g) { m_updated[g].wait(); }

    // Pinned groups at the start of a pass: zeroed gradients; their weights go up at first use
    // (pinned_params), once their update has finished: the final norm's comes last.
    void begin_pinned() {
        m_pinned_uploaded = {false, false};
        for (std::size_t g : {std::size_t{0}, m_model.final_group()})
            if (auto& grads = m_pinned_grads[pinned_index(g)]) op::zero(m_compute, grads->device_data().get(), grads->numel());
    }
    // The device copy of pinned group g for this step, uploaded at its first use (compute waits).
    const R* pinned_params(std::size_t g) {
        const std::size_t i = pinned_index(g);
        auto& dev = m_pinned_params[i];
        if (!m_pinned_uploaded[i]) {
            wait_updated(g);
            m_compute.wait(dev.copy_from(m_params[g], m_engine.h2d()));
            m_engine.counters().h2d_bytes += dev.bytes();
            m_pinned_uploaded[i] = true;
        }
        return dev.device_data().get();
    }
    void download_pinned_grads() {
        for (std::size_t g : {std::size_t{0}, m_model.final_group()})
            if (auto& grads = m_pinned_grads[pinned_index(g)]) sum_of_squares(g, grads->device_data().get());
        for (std::size_t g : {std::size_t{0}, m_model.final_group()}) {
            auto& grads = m_pinned_grads[pinned_index(g)];
            if (!grads) continue;  // frozen: nothing comes back
            m_engine.d2h().wait(m_compute.record());
            m_last_d2h[g] = m_grads[g]->copy_from(*grads, m_engine.d2h());
            m_engine.counters().d2h_bytes += m_grads[g]->bytes();
        }
    }
    void wait_gradients() {
        for (auto& e : m_last_d2h) e.wait();
        m_compute.synchronize();
    }

    // Exact global norm: the device's per-group partials summed in group order on the host, then
    // sqrt: the resident trainer's grad_norm(), bit for bit.
    double grad_norm(const tiered_tensor<double, host_tier, B>& partials) const {
        return detail::global_norm(m_model.groups(), partials.span());
    }


    // Once the loss and the norm are known to be finite: AdamW of every group on the optimizer
    // thread, each behind its own last gradient copy, in the order the next step uses the groups,
    // so that its forward waits as little as possible (group order: embeddings, blocks, final norm).
    void schedule_adamw_in_use_order(double lr, long update, R grad_scale) {
        for (std::size_t g = 0; g < m_grads.size(); ++g) enqueue_adamw(g, lr, update, grad_scale);
    }
    void enqueue_adamw(std::size_t g, double lr, long update, R grad_scale) {
        if (!m_grads[g]) return;  // frozen
        event landed = m_last_d2h[g];
        m_optimizer.enqueue(
            [this, landed, g, lr, update, grad_scale] {
                landed.wait();
                adamw_group(g, lr, update, grad_scale);
            },
            "adamw");
        m_updated[g] = m_optimizer.record();
        if constexpr (std::is_same_v<MomentsTier, storage_tier>) {  // counted when issued, on this thread
            m_engine.counters().storage_read_bytes += m_m[g]->bytes() + m_v[g]->bytes();
            m_engine.counters().storage_write_bytes += m_m[g]->bytes() + m_v[g]->bytes();
        }
    }

    // AdamW over one group, tensor by tensor (weight decay per tensor), the clip folded in as
    // grad_scale (1: none); moments read from and written back to the storage tier when they live there.
    void adamw_group(std::size_t g, double lr, long update, R grad_scale) {
        R* p = m_params[g].data();
        R* grad = m_grads[g]->data();
        auto run = [&](R* m, R* v) {
            for (const auto& slot : m_model.groups()[g].slots()) {
                if (!slot.spec.trainable) continue;
                const std::size_t o = slot.offset, n = slot.spec.shape.numel();
                if constexpr (std::is_same_v<R, float>)
                    m_adamw.step_block({p + o, n}, {grad + o, n}, {m + o, n}, {v + o, n}, lr, update, slot.spec.decay,
                                       grad_scale);
                else
                    adamw_update<R>({p + o, n}, {grad + o, n}, {m + o, n}, {v + o, n}, m_options.adamw, lr, update,
                                    slot.spec.decay, grad_scale);
            }
        };
        auto& mg = *m_m[g];
        auto& vg = *m_v[g];
        if constexpr (std::is_same_v<MomentsTier, host_tier>) {
            run(mg.data(), vg.data());
        } else {
            auto m = m_moments_staging[0].view().flat(0, mg.shape());
            auto v = m_moments_staging[1].view().flat(0, vg.shape());
            copy_async(m_backend, m, mg.view(), m_io);
            copy_async(m_backend, v, vg.view(), m_io).wait();  // named: moments read from storage
            run(m.data(), v.data());
            copy_async(m_backend, mg.view(), m, m_io);
            copy_async(m_backend, vg.view(), v, m_io).wait();  // named: moments written back before the staging is reused
        }
    }

    void zero_moments() {
        for (std::size_t g = 0; g < m_m.size(); ++g) {
            if (!m_m[g]) continue;  // frozen
            std::vector<R> zeros(m_m[g]->numel(), R(0));
            upload(state_kind::adam_m, g, zeros);
            upload(state_kind::adam_v, g, zeros);
        }
    }

    void host_copy(state_kind k, std::size_t g, std::span<R> buf, bool to_host) {
        finish_updates();  // the state of the last step, complete
        auto frozen = [&] {
            return error("group " + std::to_string(g) + " is frozen: it has no gradients and no AdamW moments");
        };
        if (k == state_kind::params || k == state_kind::grads) {
            if (k == state_kind::grads && !m_grads[g]) throw frozen();
            auto& t = k == state_kind::params ? m_params[g] : *m_grads[g];
            if (buf.size() != t.numel()) throw error("streamed_trainer: block size mismatch for group " + std::to_string(g));
            if (to_host)
                std::copy(t.span().begin(), t.span().end(), buf.begin());
            else
                std::copy(buf.begin(), buf.end(), t.span().begin());
            return;
        }
        if (!m_m[g]) throw frozen();
        auto& t = k == state_kind::adam_m ? *m_m[g] : *m_v[g];
        if (buf.size() != t.numel()) throw error("streamed_trainer: block size mismatch for group " + std::to_string(g));
        if constexpr (std::is_same_v<MomentsTier, host_tier>) {
            if (to_host)
                std::copy(t.span().begin(), t.span().end(), buf.begin());
            else
                std::copy(buf.begin(), buf.end(), t.span().begin());
        } else {
            // between steps: the optimizer's staging is free
            auto staging = m_moments_staging[0].view().flat(0, t.shape());
            if (to_host) {
                copy_async(m_backend, staging, t.view(), m_io).wait();  // named: checkpoint I/O
                std::copy(staging.data(), staging.data() + staging.numel(), buf.begin());
            } else {
                std::copy(buf.begin(), buf.end(), staging.data());
                copy_async(m_backend, t.view(), staging, m_io).wait();  // named: checkpoint I/O
            }
        }
    }

    B& m_backend;
    const model_type& m_model;
    train_options m_options;
    stream m_compute;
    cpu::stream m_optimizer;
    stream m_io;
    offloaded_adamw m_adamw;
    pipeline_engine<R, B, Depth> m_engine;
    typename model_type::activations m_act;
    std::vector<tiered_tensor<R, host_tier, B>> m_params;
    std::vector<std::optional<tiered_tensor<R, host_tier, B>>> m_grads;  // empty: a frozen group
    std::vector<std::optional<tiered_tensor<R, MomentsTier, B>>> m_m, m_v;
    std::vector<tiered_tensor<R, device_tier, B>> m_pinned_params;
    std::vector<std::optional<tiered_tensor<R, device_tier, B>>> m_pinned_grads;
    tiered_tensor<double, device_tier, B> m_norm_partials;   // (groups) sum of squares per group
    tiered_tensor<double, device_tier, B> m_norm_workspace;  // sum_of_squares' workspace
    tiered_tensor<double, host_tier, B> m_norm_partials_host;  // their copy on the host
    std::vector<tiered_tensor<std::int32_t, host_tier, B>> m_staged_tokens;  // (accum x 2) tokens, targets
    std::vector<tiered_tensor<R, host_tier, B>> m_staged_losses;             // (accum) per-token losses
    std::vector<tiered_tensor<R, host_tier, B>> m_moments_staging;           // moments on storage: m, v of one group
    std::vector<event> m_last_d2h;
    std::vector<cpu::event> m_updated;  // by group: its last scheduled update (empty: none pending)
    std::array<bool, 2> m_pinned_uploaded{};  // this pass: the pinned groups' weights are on the device
    long m_step = 0;
};

}  // namespace strata

namespace strata {
template <class R, Backend B, std::size_t Depth, Tier M, class Model>
struct select_trainer<R, B, prefetch_pipeline<Depth>, moments_in<M>, Model> {
    using type = streamed_trainer<R, B, Depth, M, Model>;
};
}  // namespace strata
