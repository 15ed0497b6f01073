// tiered_trainer: the one trainer, for any placement of the model's state across the three tiers
// (trainer<R, B, Model> is its resident configuration, trainer_t picks it for every plan). Each layer group has a home (tier/group_home.hpp, the planner's per-group answer,
// train_options::homes):
//   device   weights, gradients and the optimizer's state (AdamW m and v, SGD momentum) on the
//            device: the group never moves, and its update runs on the device after the norm
//            (scale + the optimizer's ops<B> kernel: the resident trainer's kernels, in its order);
//   host     weights and gradients in pinned host memory, the optimizer state on the host: the transformer
//            blocks stream through device slots by prefetch_pipeline<Depth>; the groups used at
//            both ends of a pass (embeddings, final layernorm) go to the device once per step
//            ("pinned groups"); the update runs on the host;
//   storage  as host, with the optimizer state in files on the storage tier, read before the
//            group's update and written back after it, double-buffered (the next storage group's
//            state is read while the current one is updated).
// Without homes, every group is homed by MomentsTier: device_tier puts every group on the device
// (the resident plan: trainer<R, B, Model>), host_tier or storage_tier streams every group from
// the host with its optimizer state in that tier (the plain streamed plan). Model: gpt_model (default:
// GPT-2) or another decoder_model of Layers; frozen tensors have no gradients and no optimizer state,
// and a frozen
// block's weights stream to the device but nothing comes back.
//
// The global gradient norm is computed on the device, where the gradients are anyway: right after
// a streamed block's backward of the last micro-batch, its gradient slot holds the block's final
// accumulated gradients, and ops<B>::sum_of_squares writes their sum of squares (in double, in the
// canonical chunked order: the CPU kernel's bits) into that group's entry of a small device array
// of per-group partials, on the compute stream, before the slot is released; the groups with a
// device copy (device-homed, pinned) once the backward is over. One copy brings the partials to
// the host ("grad norm" wait), which adds them in group order and takes the sqrt: the resident
// trainer's grad_norm(), bit for bit. No host thread reads the gradients for the norm.
//
// The host optimizer (offloaded_optimizer of train_options::optimizer: vectorized, multi-threaded,
// bitwise equal to the device update) runs on its own thread, off the critical path. Once the loss
// and the norm are known to be finite (the backward is over; the last gradients may still be on
// their way to the host), the update runs per host group in the order the NEXT step uses them
// (embeddings, blocks 0..L-1, final norm), each waiting for its own gradient copy. With clip > 0
// the clip coefficient is folded into the update (step_block's grad_scale: g * coefficient, the one rounding the resident
// trainer's scale_inplace makes), so there is no separate pass over the gradients. With clip == 0
// too, no update starts before the norm is known: a NaN step must leave the state untouched, as
// the resident trainer does (an update started during the backward could not be taken back).
// step() returns without waiting for the updates: they overlap the next step's forward. Each
// group's update records an event, and the next step waits for it (a named host wait) just
// before that group's weights are first copied to the device; nothing else waits. So the
// forward of step N+1 reaches block g only once block g holds step N's update: no stale weights,
// nothing speculative. evaluate(), download()/upload() (checkpoints), initialize() and the
// destructor first complete every pending update (finish_updates(), public).
// Every mix of homes gives bitwise the same weights and moments as the resident trainer
// (tests/stream/, tests/plan/). One difference: after a clipped step the host gradients
// (download(grads)) of host groups are the accumulated gradients before the clip, where the
// resident trainer's are scaled in place.
//
// Host staging is allocated once, in the constructor, as in the resident trainer: tokens, targets
// and losses per micro-batch, the norm's partials, and with the optimizer state on storage two
// sets of its state buffers (the largest storage group's size; each group uses their front). No
// pinned allocation, hence no implicit synchronization, happens inside a step.
#pragma once

#include <strata/backend/backend.hpp>            // Backend
#include <strata/backend/cpu/stream.hpp>         // cpu::stream (the optimizer's host thread)
#include <strata/kernels/cpu/cross_entropy.hpp>  // kernels::cpu::ignore_index
#include <strata/model/gpt.hpp>                  // gpt_model
#include <strata/optim/offloaded_optimizer.hpp>  // offloaded_optimizer
#include <strata/optim/optimizers.hpp>           // any_optimizer, device_update
#include <strata/optim/state_layout.hpp>         // optimizer_state_layout
#include <strata/stream/prefetch_pipeline.hpp>   // prefetch_pipeline, pipeline_engine
#include <strata/tensor/tiered_tensor.hpp>       // tiered_tensor
#include <strata/tier/group_home.hpp>            // group_home
#include <strata/train/initialize.hpp>           // initialize_groups
#include <strata/train/rank_link.hpp>            // rank_link
#include <strata/train/trainer.hpp>              // train_options, step_result, trainer

#include <array>        // std::array
#include <cmath>        // std::sqrt, std::isfinite
#include <mutex>        // std::mutex, std::lock_guard
#include <optional>     // std::optional
#include <string_view>  // std::string_view
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

namespace strata {

// Opt: the optimizer (any_optimizer, from train_options::optimizer, unless a caller brings its own
// Optimizer: then the constructor that takes one).
template <class R, Backend B, std::size_t Depth, Tier MomentsTier = host_tier, class Model = gpt_model<R, B>,
          Optimizer Opt = any_optimizer>
class tiered_trainer {
public:
    using model_type = Model;
    using stream = typename B::stream;
    using event = typename B::event;
    using op = ops<B>;
    using state_kind = trainer_state_kind;
    using link = rank_link<R, stream, event>;

    // `dp` and `owner`: one rank of a data-parallel group (train/data_parallel.hpp builds them):
    // rank 0 (owner null) owns the host state; rank r > 0 names rank 0's trainer as its owner and
    // allocates no host state of its own. Default: a single-device trainer.
    tiered_trainer(B& backend, const model_type& model, train_options options, link dp = {},
                   tiered_trainer* owner = nullptr)
        requires std::same_as<Opt, any_optimizer>
        : tiered_trainer(backend, model, options, options.optimizer, std::move(dp), owner) {}
    // With an optimizer of the caller's (train_options::optimizer is not read).
    tiered_trainer(B& backend, const model_type& model, train_options options, Opt chosen, link dp = {},
                   tiered_trainer* owner = nullptr)
        : m_backend(backend),
          m_model(model),
          m_options(std::move(options)),
          m_homes(homes_of(model, m_options)),
          m_link(std::move(dp)),
          m_owner(check_owner(m_link, owner, model, m_homes)),
          m_compute(backend.make_stream("compute")),
          m_optimizer_thread("optimizer"),
          m_io(backend.make_stream("storage I/O")),
          m_optimizer(std::move(chosen)),
          m_engine(backend, largest_streamed_block(model, m_homes, false), largest_streamed_block(model, m_homes, true)),
          m_act(backend, model, m_options.batch, m_options.seq, m_options.activations),
          m_norm_partials(backend, shape{model.groups().size()}, "grad_norm.partials"),
          m_norm_workspace(backend, shape{detail::norm_workspace_doubles<B>(model.groups())}, "grad_norm.workspace"),
          m_norm_partials_host(backend, shape{model.groups().size()}, "grad_norm.partials.host") {
        const auto& groups = model.groups();
        const std::size_t n = groups.size();
        for (auto* v : {&m_params, &m_grads}) v->resize(n);
        for (auto* v : {&m_dev_params, &m_dev_grads}) v->resize(n);
        m_state.resize(n);
        m_stored_state.resize(n);
        m_dev_state.resize(n);
        for (const auto& layout : groups) m_state_layout.push_back(optimizer_state_layout::of<R>(optimizer(), layout));
        const auto states = optimizer().state_names();
        // "adamw.m.g3": the optimizer's name, the state's, the group's (storage files are named so)
        auto state_name = [&](std::size_t i, const std::string& suffix) {
            return std::string(optimizer().name()) + "." + std::string(states[i]) + "." + suffix;
        };
        std::vector<std::size_t> largest_stored(states.size(), 0);  // by state tensor
        if (m_link.parallel()) m_reduce.emplace(backend.make_stream("reduce"));
        std::vector<bool> device_state(n);
        for (std::size_t g = 0; g < n; ++g) device_state[g] = on_device(g) && !groups[g].frozen();
        m_state_owner = device_state_owners(device_state, m_link.ranks);
        for (std::size_t g = 0; g < n; ++g) {
            const std::string name = "g" + std::to_string(g);
            const shape s{groups[g].numel()}, ts{groups[g].trainable_numel()};
            const bool trains = !groups[g].frozen();
            if (on_device(g)) {
                m_dev_params[g].emplace(backend, s, "params." + name);
                if (trains) {
                    m_dev_grads[g].emplace(backend, ts, "grads." + name);
                    if (m_link.rank == m_state_owner[g])  // data parallel: one rank keeps it
                        for (std::size_t i = 0; i < states.size(); ++i)
                            m_dev_state[g].emplace_back(backend, state_shape(g, i), state_name(i, name));
                }
                continue;
            }
            if (used_at_both_ends(g)) {  // pinned: a device copy for the whole step
                m_dev_params[g].emplace(backend, s, "pinned.params." + name);
                if (trains) m_dev_grads[g].emplace(backend, ts, "pinned.grads." + name);
            }
            if (m_owner) continue;  // the host state is the owner's
            m_params[g].emplace(backend, s, "params." + name);
            std::fill(m_params[g]->span().begin(), m_params[g]->span().end(), R(0));
            if (trains) {
                m_grads[g].emplace(backend, ts, "grads." + name);
                std::fill(m_grads[g]->span().begin(), m_grads[g]->span().end(), R(0));
                for (std::size_t i = 0; i < states.size(); ++i) {
                    if (m_homes[g].moments == tier_id::storage) {
                        m_stored_state[g].emplace_back(backend, state_shape(g, i), state_name(i, name));
                        largest_stored[i] = std::max(largest_stored[i], state_shape(g, i).numel());
                    } else {
                        m_state[g].emplace_back(backend, state_shape(g, i), state_name(i, name));
                    }
                }
            }
        }
        m_last_d2h.resize(n);
        m_updated.resize(n);
        m_uploaded.assign(n, false);
        const std::size_t BT = m_options.batch * m_options.seq;
        for (std::size_t k = 0; k < std::max<std::size_t>(m_options.accum, 1); ++k) {
            m_staged_tokens.emplace_back(backend, shape{BT}, "tokens.host");
            m_staged_tokens.emplace_back(backend, shape{BT}, "targets.host");
            m_staged_losses.emplace_back(backend, shape{BT}, "losses.host");
        }
        // Two sets: one group's state is updated while the next one's is read.
        if (!states.empty() && largest_stored[0] > 0)
            for (const char* set : {"0", "1"})
                for (std::size_t i = 0; i < states.size(); ++i)
                    m_state_staging.emplace_back(backend, shape{largest_stored[i]}, state_name(i, std::string("staging.") + set));
        zero_state();
    }

    // Queued work (the optimizer's updates; after a failed step, the rest of that step) uses the
    // members: it finishes before any is destroyed.
    ~tiered_trainer() { drain(); }
    tiered_trainer(const tiered_trainer&) = delete;
    tiered_trainer& operator=(const tiered_trainer&) = delete;

    // Named host wait: every update a step scheduled has finished, optimizer state written back to
    // storage included (rethrows an update's failure). step() does not wait for them: they
    // overlap the next step, which waits per group.
    void finish_updates() {
        m_optimizer_thread.synchronize();
        m_io.synchronize();
        if (m_owner)
            for (const auto& e : m_owner->m_updated) e.wait();  // named: the owner's updates of the host state
    }

    // This trainer's place in a data-parallel group (rank 0 of 1 when it trains alone).
    const link& rank() const { return m_link; }
    // The rank that keeps device-homed group g's optimizer state and updates it (0 alone).
    std::size_t state_owner(std::size_t g) const { return m_state_owner.at(g); }

    const model_type& model() const { return m_model; }
    const train_options& options() const { return m_options; }
    // The optimizer (train_options::optimizer): its state names are the trainer's state tensors.
    const Opt& optimizer() const { return m_optimizer.optimizer(); }
    // Each group's home (train_options::homes, or the default: host, moments in MomentsTier).
    const std::vector<group_home>& homes() const { return m_homes; }
    long step_count() const { return m_step; }
    void set_step_count(long step) { m_step = step; }
    B& backend() { return m_backend; }
    // Bytes moved per link since construction: H2D, D2H, and the storage tier's reads and writes
    // of optimizer state during steps (not checkpoint I/O), each counted when issued (a step's
    // state I/O when its updates are scheduled). Read between steps.
    const transfer_counters& counters() const { return m_engine.counters(); }

    // Every stream of the trainer with its trace track name (H2D, compute, D2H, optimizer, storage I/O).
    template <class F>
    void for_each_stream(F&& f) {
        f("H2D", m_engine.h2d());
        f("compute", m_compute);
        if (m_reduce) f("reduce", *m_reduce);
        f("D2H", m_engine.d2h());
        f("optimizer", m_optimizer_thread);
        f("storage I/O", m_io);
    }

    // The model's initialization from a seed (initialize_groups: one generator per group, all
    // cores), straight into each group's home.
    void initialize(std::uint64_t seed) {
        if (m_owner)
            throw error("initialize() on data-parallel rank " + std::to_string(m_link.rank) +
                            ": the host state is rank 0's",
                        "initialize rank 0 and copy the device-homed groups to the others (data_parallel_trainer does)");
        finish_updates();
        std::mutex copying;  // device-homed groups: one copy at a time on the compute stream
        auto home = [&](std::size_t g) { return m_params[g] ? m_params[g]->span() : std::span<R>{}; };
        initialize_groups(m_model, seed, home, [&](std::size_t g, std::span<const R> block) {
            std::lock_guard lock(copying);
            m_backend.copy(m_dev_params[g]->device_data().get(), tier_id::device, block.data(), tier_id::host,
                           block.size_bytes(), m_compute)
                .wait();  // named: the worker refills its buffer next
        });
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

    // One rank's share of a data-parallel step (train/data_parallel.hpp): `share` holds accum
    // micro-batches, `counted` the targets that count over the whole step (every rank's share),
    // so that every rank scales its gradients and its loss alike. Every rank of the group calls
    // it at once, each on its own thread; each returns the same result.
    step_result step_share(std::span<const data::batch> share, std::size_t counted) {
        const std::size_t mine = detail::check_micro_batches(share, m_options, m_step + 1, m_model.vocab_size());
        if (counted < mine)
            throw error("step_share: " + std::to_string(counted) + " counted targets over the step, fewer than this rank's " +
                        std::to_string(mine));
        try {
            return step_or_throw(share, counted);
        } catch (...) {
            drain();
            throw;
        }
    }

    double evaluate(std::span<const data::batch> batches) {
        const std::size_t BT = m_options.batch * m_options.seq;
        finish_updates();
        begin_pass(/*zero_grads=*/false);
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
        begin_pass(/*zero_grads=*/true);
        for (std::size_t k = 0; k < micro.size(); ++k) {
            stage_tokens(micro[k], k);
            m_engine.begin(make_pass(/*backward=*/true, k == 0));
            binder bind{*this, /*last_micro=*/k + 1 == micro.size()};
            m_model.forward_backward(bind, m_act, m_options.batch, m_options.seq, 1.0 / static_cast<double>(counted),
                                     m_compute);
            m_engine.end();
            copy_async(m_backend, m_staged_losses[k].view(), m_act.losses_tensor().view().flat(0, shape{BT}), m_compute);
        }
        end_backward();  // the sums of squares of the groups with a device copy; pinned gradients home

        step_result r;
        r.step = update;
        r.tokens = BT * micro.size();
        r.counted = counted;
        r.lr = lr_at(m_options.schedule, m_step);
        // The per-group partials follow the losses on the compute stream: one wait for both, while
        // the last gradient copies may still be landing.
        m_norm_partials_host.copy_from(m_norm_partials, m_compute).wait();  // named: grad norm (and the losses)
        r.grad_norm = detail::global_norm(m_model.groups(), m_norm_partials_host.span());
        for (std::size_t k = 0; k < micro.size(); ++k)
            for (R x : m_staged_losses[k].span()) r.loss += static_cast<double>(x);
        if (m_link.parallel()) {  // the whole step's loss, the same bits on every rank
            r.loss = m_link.exchange->sum(m_link.rank, r.loss);
            r.tokens *= m_link.ranks;
        }
        r.loss /= static_cast<double>(counted);
        detail::check_finite(r, update);  // before any update is scheduled, clipping or not
        // As the resident trainer: scale only when the norm is over the max, by R(coefficient).
        const double coefficient = m_options.clip > 0 ? clip_coefficient(r.grad_norm, m_options.clip, update) : 1.0;
        update_device_groups(coefficient, r.lr, update);
        schedule_host_updates(r.lr, update, coefficient < 1 ? static_cast<R>(coefficient) : R(1));
        // No wait for the updates: the device ones are ahead of the next step on the compute
        // stream, and the next step waits for each host group's just before its weights go to the
        // device (wait_updated).
        for (auto& e : m_last_d2h) e.wait();  // named: every gradient copy of the step has landed
                                              // (the pinned groups' device gradients are zeroed next)
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

    static std::vector<group_home> homes_of(const model_type& model, const train_options& o) {
        // (first, before any allocation: a context the model cannot take)
        if (o.seq > model.max_seq())
            throw error("sequence length " + std::to_string(o.seq) + " exceeds the model's context " +
                            std::to_string(model.max_seq()),
                        "lower the sequence length or build the model with a longer context", {"seq_len"});
        const std::size_t n = model.groups().size();
        if (o.homes.empty())
            return std::vector<group_home>(n, std::is_same_v<MomentsTier, device_tier>
                                                  ? group_home::device()
                                                  : group_home{tier_id::host, id_of<MomentsTier>});
        if (o.homes.size() != n)
            throw error("train_options::homes has " + std::to_string(o.homes.size()) + " entries for a model of " +
                            std::to_string(n) + " layer groups",
                        "give one home per group (memory_plan::homes), or none");
        for (std::size_t g = 0; g < n; ++g) validate(o.homes[g], g);
        return o.homes;
    }

    static tiered_trainer* check_owner(const link& dp, tiered_trainer* owner, const model_type& model,
                                       const std::vector<group_home>& homes) {
        if (dp.ranks == 0 || dp.rank >= dp.ranks)
            throw error("rank_link: rank " + std::to_string(dp.rank) + " of " + std::to_string(dp.ranks) + " ranks");
        const bool linked = dp.all_reduce && dp.broadcast && dp.exchange != nullptr && dp.exchange->size() == dp.ranks;
        if (dp.parallel() && !linked)
            throw error("rank_link of " + std::to_string(dp.ranks) + " ranks without its all_reduce, broadcast or exchange",
                        "make the ranks with data_parallel_trainer");
        if ((dp.rank == 0) != (owner == nullptr))
            throw error("data-parallel rank " + std::to_string(dp.rank) +
                            (owner ? " names an owner: rank 0 owns the host state itself"
                                   : " names no owner: ranks above 0 stream rank 0's host state"));
        if (owner && (&owner->m_model != &model || owner->m_homes != homes))
            throw error("data-parallel rank " + std::to_string(dp.rank) + " has another model or other homes than rank 0",
                        "every rank trains the same model object with the same plan");
        return owner;
    }

    // The host state of group g: this trainer's, or on a rank above 0 the owner's.
    tiered_trainer& host_side() { return m_owner ? *m_owner : *this; }

    bool on_device(std::size_t g) const { return m_homes[g].weights == tier_id::device; }
    // Group g's block of state tensor i (optimizer_state_layout: the gradients' size for AdamW and SGD).
    shape state_shape(std::size_t g, std::size_t i) const { return shape{m_state_layout[g].numel(i)}; }
    // Groups used at both ends of a pass: when host-homed, on the device for the whole step.
    bool used_at_both_ends(std::size_t g) const { return g == 0 || g == m_model.final_group(); }
    // Host-homed groups that do not stream block by block (their device copy is the step's).
    bool pinned(std::size_t g) const { return !on_device(g) && used_at_both_ends(g); }
    bool streams(std::size_t g) const { return !on_device(g) && !used_at_both_ends(g); }

    // Elements of the largest streamed transformer block (trainable: of its trainable prefix);
    // 0 when none streams.
    static std::size_t largest_streamed_block(const model_type& model, const std::vector<group_home>& homes,
                                              bool trainable) {
        std::size_t n = 0;
        for (std::size_t l = 0; l < model.block_count(); ++l) {
            const std::size_t g = model.block_group(l);
            if (homes[g].weights == tier_id::device) continue;
            const auto& layout = model.groups()[g];
            n = std::max(n, trainable ? layout.trainable_numel() : layout.numel());
        }
        return n;
    }

    // group g's sum of squares into its partial, on the compute stream, from its device gradients
    // (none for a frozen group).
    void sum_of_squares(std::size_t g, const R* grads) { sum_of_squares(m_compute, g, grads); }
    void sum_of_squares(stream& s, std::size_t g, const R* grads) {
        if (m_model.groups()[g].frozen()) return;
        op::sum_of_squares(s, m_norm_partials.device_data().get() + g, m_norm_workspace.device_data().get(), grads,
                           m_model.groups()[g].trainable_numel());
    }

    struct binder {
        tiered_trainer& t;
        bool last_micro;
        const R* params(std::size_t g, stream& s, group_use u) {
            if (t.on_device(g)) return t.m_dev_params[g]->device_data().get();
            if (t.pinned(g)) return t.pinned_params(g);
            return t.m_engine.params(g, s, u);
        }
        R* grads(std::size_t g, stream& s) {
            if (!t.streams(g)) {
                auto& grads = t.m_dev_grads[g];
                return grads ? grads->device_data().get() : nullptr;
            }
            return t.m_engine.grads(g, s);
        }
        void done(std::size_t g, stream& s, group_use u) {
            if (t.m_link.parallel() && u == group_use::backward) return t.done_parallel(g, s, last_micro);
            if (!t.streams(g)) return;  // summed in end_backward, after their last use
            // The slot holds the block's final gradients; summed before done() releases the slot
            // (its "free" event, which the D2H copy and the slot's next user wait for, follows).
            if (last_micro && u == group_use::backward) t.sum_of_squares(g, t.m_engine.grads_in_use());
            t.m_engine.done(g, s, u);
        }
    };

    // Data-parallel: group g's backward of this micro-batch is enqueued on compute. Its gradients
    // are summed over the ranks on the reduce stream, behind it, while compute goes on with the
    // blocks before it:
    //   streamed  every micro-batch: the slot holds this rank's micro-batch (on the owner, plus
    //             the step's gradients so far, brought back from the host); after the sum the
    //             owner's slot goes home, the others' is free;
    //   on the device (device-homed, pinned) at the last micro-batch: each rank's accumulated
    //             gradients, summed once; group 0 in end_backward (its backward ends there).
    // The sums of squares of the norm follow each sum on the reduce stream, of the summed
    // gradients, so every rank computes the same norm.
    void done_parallel(std::size_t g, stream& s, bool last_micro) {
        stream& reduce = *m_reduce;
        if (streams(g)) {
            R* slot = m_engine.grads_in_use();
            if (slot == nullptr) return m_engine.done(g, s, group_use::backward);  // frozen
            reduce.wait(s.record());
            m_link.all_reduce(reduce, slot, m_model.groups()[g].trainable_numel());
            if (last_micro) sum_of_squares(reduce, g, slot);
            const event reduced = reduce.record();
            return m_engine.done(g, s, group_use::backward, &reduced);
        }
        if (last_micro && g != 0 && m_dev_grads[g]) reduce_device_grads(g, s);
    }

    // Group g's device gradients summed over the ranks, then its sum of squares, on the reduce stream.
    void reduce_device_grads(std::size_t g, stream& s) {
        stream& reduce = *m_reduce;
        R* grads = m_dev_grads[g]->device_data().get();
        reduce.wait(s.record());
        m_link.all_reduce(reduce, grads, m_model.groups()[g].trainable_numel());
        sum_of_squares(reduce, g, grads);
    }

    typename pipeline_engine<R, B, Depth>::pass make_pass(bool backward, bool first_micro) {
        typename pipeline_engine<R, B, Depth>::pass p;
        const std::size_t L = m_model.block_count();
        for (std::size_t l = 0; l < L; ++l)
            if (streams(m_model.block_group(l))) p.order.push_back({m_model.block_group(l), group_use::forward});
        if (backward)
            for (std::size_t l = L; l-- > 0;)
                if (streams(m_model.block_group(l))) p.order.push_back({m_model.block_group(l), group_use::backward});
        const std::size_t n = m_homes.size();
        p.host_params.assign(n, nullptr);
        p.host_grads.assign(n, nullptr);
        p.bytes.assign(n, 0);
        p.grad_bytes.assign(n, 0);
        auto& home = host_side();
        for (std::size_t g = 0; g < n; ++g)
            if (streams(g)) {
                p.host_params[g] = home.m_params[g]->data();
                p.bytes[g] = home.m_params[g]->bytes();
                if (home.m_grads[g]) {
                    p.host_grads[g] = m_owner ? nullptr : home.m_grads[g]->data();
                    p.grad_bytes[g] = home.m_grads[g]->bytes();
                }
            }
        p.grads_home = m_owner == nullptr;
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

    // Named host wait: the previous step's update of host group g has finished, so its host
    // weights are final. Called just before they are first copied to the device in a pass.
    void wait_updated(std::size_t g) { host_side().m_updated[g].wait(); }

    // At the start of a pass: the device gradients of the groups that keep them on the device
    // start from zero (a step's, not an evaluation's); the pinned groups' weights go up at first
    // use (pinned_params), once their update has finished: the final norm's comes last.
    void begin_pass(bool zero_grads) {
        std::fill(m_uploaded.begin(), m_uploaded.end(), false);
        if (!zero_grads) return;
        for (auto& grads : m_dev_grads)
            if (grads) op::zero(m_compute, grads->device_data().get(), grads->numel());
    }
    // The device copy of pinned group g for this step, uploaded at its first use (compute waits).
    const R* pinned_params(std::size_t g) {
        auto& dev = *m_dev_params[g];
        if (!m_uploaded[g]) {
            wait_updated(g);
            m_compute.wait(dev.copy_from(*host_side().m_params[g], m_engine.h2d()));
            m_engine.counters().h2d_bytes += dev.bytes();
            m_uploaded[g] = true;
        }
        return dev.device_data().get();
    }
    // After the last backward: the sums of squares of the groups whose gradients are on the device
    // (device-homed and pinned), and the pinned groups' gradients to the host.
    // Data-parallel: group 0's gradients are summed over the ranks first (the others were, as
    // their backward ended: done_parallel), and compute and the copies home wait for every sum.
    void end_backward() {
        if (m_link.parallel()) {
            if (m_dev_grads[0]) reduce_device_grads(0, m_compute);
            m_compute.wait(m_reduce->record());
        } else {
            for (std::size_t g = 0; g < m_homes.size(); ++g)
                if (!streams(g) && m_dev_grads[g]) sum_of_squares(g, m_dev_grads[g]->device_data().get());
        }
        for (std::size_t g = 0; g < m_homes.size(); ++g) {
            if (!pinned(g) || !m_grads[g]) continue;  // frozen, or not this rank's to bring home
            m_engine.d2h().wait(m_compute.record());
            m_last_d2h[g] = m_grads[g]->copy_from(*m_dev_grads[g], m_engine.d2h());
            m_engine.counters().d2h_bytes += m_grads[g]->bytes();
        }
    }

    // The device-homed groups' updates, on the compute stream, as the resident trainer runs them:
    // gradients scaled in place by the clip coefficient when it is < 1, then the optimizer's
    // kernel per tensor. Data parallel: only the rank that keeps the group's state updates it
    // (device_state_owners), then broadcasts the weights, in group order on every rank.
    void update_device_groups(double coefficient, double lr, long update) {
        const auto& groups = m_model.groups();
        std::vector<R*> state(optimizer().state_names().size());
        for (std::size_t g = 0; g < groups.size(); ++g) {
            if (!on_device(g) || groups[g].frozen()) continue;
            R* params = m_dev_params[g]->device_data().get();
            if (m_link.rank == m_state_owner[g]) {
                R* grad = m_dev_grads[g]->device_data().get();
                if (coefficient < 1) op::scale_inplace(m_compute, grad, coefficient, groups[g].trainable_numel());
                for (std::size_t e = 0; e < groups[g].entries().size(); ++e) {
                    const auto& entry = groups[g].entries()[e];
                    if (!entry.spec.trainable) continue;
                    const std::size_t o = entry.offset, n = entry.spec.shape.numel();
                    for (std::size_t i = 0; i < state.size(); ++i)
                        state[i] = m_dev_state[g][i].device_data().get() + m_state_layout[g].at(i, e).offset;
                    device_update<B>(m_compute, optimizer(), params + o, grad + o, n, std::span<R* const>(state),
                                     {.lr = lr, .step = update, .decay = entry.spec.decay, .shape = entry.spec.shape});
                }
            }
            // Data parallel: the owner's updated weights reach every rank before its next step.
            if (m_link.parallel()) m_link.broadcast(m_compute, params, m_dev_params[g]->numel(), m_state_owner[g]);
        }
    }

    // Once the loss and the norm are known to be finite: the update of every host group on the
    // optimizer thread, each behind its own last gradient copy, in the order the next step uses
    // them, so that its forward waits as little as possible (group order: embeddings, blocks,
    // final norm). Storage groups' state is read one group ahead (read_stored).
    void schedule_host_updates(double lr, long update, R grad_scale) {
        std::vector<std::size_t> stored;
        for (std::size_t g = 0; g < m_homes.size(); ++g)
            if (!m_stored_state[g].empty()) stored.push_back(g);
        const char* task = optimizer().name().data();  // a literal's: null-terminated
        std::size_t next_stored = 0;
        for (std::size_t g = 0; g < m_homes.size(); ++g) {
            if (!m_grads[g]) continue;  // frozen, or on the device
            event landed = m_last_d2h[g];
            if (!m_stored_state[g].empty()) {
                const std::size_t j = next_stored++;
                const std::size_t following = j + 1 < stored.size() ? stored[j + 1] : m_homes.size();
                m_optimizer_thread.enqueue(
                    [this, landed, g, j, following, lr, update, grad_scale] {
                        if (j == 0) read_stored(g, 0);
                        if (following < m_homes.size()) read_stored(following, (j + 1) % 2);
                        landed.wait();
                        m_read[j % 2].wait();  // named: this group's state is in its staging
                        std::vector<R*> state;
                        for (std::size_t i = 0; i < m_stored_state[g].size(); ++i)
                            state.push_back(staged(j % 2, i, g).data());
                        update_group(g, state, lr, update, grad_scale);
                        for (std::size_t i = 0; i < state.size(); ++i)  // written back behind the next
                            copy_async(m_backend, m_stored_state[g][i].view(), staged(j % 2, i, g), m_io);  // group's read
                    },
                    task);
                for (const auto& t : m_stored_state[g]) {
                    m_engine.counters().storage_read_bytes += t.bytes();
                    m_engine.counters().storage_write_bytes += t.bytes();
                }
            } else {
                m_optimizer_thread.enqueue(
                    [this, landed, g, lr, update, grad_scale] {
                        landed.wait();
                        std::vector<R*> state;
                        for (auto& t : m_state[g]) state.push_back(t.data());
                        update_group(g, state, lr, update, grad_scale);
                    },
                    task);
            }
            m_updated[g] = m_optimizer_thread.record();
        }
    }

    // State tensor i's staging buffer of set `set`, as long as storage group g's state.
    auto staged(std::size_t set, std::size_t i, std::size_t g) {
        return m_state_staging[set * m_stored_state[g].size() + i].view().flat(0, m_stored_state[g][i].shape());
    }

    // Storage group g's state into staging set `set`, on the storage I/O stream (behind the
    // write-back of the set's previous group). Optimizer thread only.
    void read_stored(std::size_t g, std::size_t set) {
        for (std::size_t i = 0; i < m_stored_state[g].size(); ++i)
            m_read[set] = copy_async(m_backend, staged(set, i, g), m_stored_state[g][i].view(), m_io);
    }

    // The optimizer's update of one host group, tensor by tensor (weight decay per tensor), the
    // clip folded in as grad_scale (1: none), with its state tensors at `state` (host homes, or
    // the storage staging), one pointer per state name.
    void update_group(std::size_t g, const std::vector<R*>& state, double lr, long update, R grad_scale) {
        R* p = m_params[g]->data();
        R* grad = m_grads[g]->data();
        std::vector<std::span<R>> slices(state.size());
        for (std::size_t e = 0; e < m_model.groups()[g].entries().size(); ++e) {
            const auto& entry = m_model.groups()[g].entries()[e];
            if (!entry.spec.trainable) continue;
            const std::size_t o = entry.offset, n = entry.spec.shape.numel();
            for (std::size_t i = 0; i < state.size(); ++i) {
                const auto& part = m_state_layout[g].at(i, e);
                slices[i] = {state[i] + part.offset, part.numel};
            }
            m_optimizer.step_block(std::span<R>(p + o, n), std::span<const R>(grad + o, n), optimizer_state<R>(slices),
                                   {.lr = lr, .step = update, .decay = entry.spec.decay, .shape = entry.spec.shape},
                                   grad_scale);
        }
    }

    // Gradients and optimizer state start at zero (host weights and gradients are zero-filled when made).
    void zero_state() {
        for (auto& grads : m_dev_grads)
            if (grads) op::zero(m_compute, grads->device_data().get(), grads->numel());
        for (auto& set : m_dev_state)
            for (auto& t : set) op::zero(m_compute, t.device_data().get(), t.numel());
        for (auto& set : m_state)
            for (auto& t : set) std::fill(t.span().begin(), t.span().end(), R(0));
        for (std::size_t g = 0; g < m_homes.size(); ++g)
            for (std::size_t i = 0; i < m_stored_state[g].size(); ++i)
                upload(state_kind::optimizer_state(i), g, std::vector<R>(m_stored_state[g][i].numel(), R(0)));
        m_compute.synchronize();  // named: the state is ready before the first step
    }

    void host_copy(state_kind k, std::size_t g, std::span<R> buf, bool to_host) {
        if (m_owner && !on_device(g))
            throw error("data-parallel rank " + std::to_string(m_link.rank) + " keeps no host state of group " +
                            std::to_string(g) + ": rank 0 does",
                        "read and write host-homed groups through rank 0 (data_parallel_trainer does)");
        finish_updates();  // the state of the last step, complete
        using part = state_kind::part;
        if (k.of != part::params && m_model.groups()[g].frozen())
            throw error("group " + std::to_string(g) + " is frozen: it has no gradients and no optimizer state");
        const auto states = optimizer().state_names();
        if (k.of == part::optimizer && k.index >= states.size())
            throw error("optimizer state " + std::to_string(k.index) + " asked for; " +
                            std::string(optimizer().display_name()) + " keeps " + std::to_string(states.size()) +
                            " (" + state_label("", states).substr(1) + ")",
                        "ask for trainer_state_kind::optimizer_state(i) with i < the count of state_names()");
        auto check_size = [&](std::size_t numel) {
            if (buf.size() != numel)
                throw error("trainer: block size mismatch for group " + std::to_string(g));
        };
        if (on_device(g)) {  // behind the device updates, on the compute stream
            if (k.of == part::optimizer && m_link.rank != m_state_owner[g])
                throw error("data-parallel rank " + std::to_string(m_link.rank) + " keeps no optimizer state of group " +
                                std::to_string(g) + ": rank " + std::to_string(m_state_owner[g]) + " does",
                            "read and write it through its owner (data_parallel_trainer does)");
            auto& t = k.of == part::params  ? *m_dev_params[g]
                      : k.of == part::grads ? *m_dev_grads[g]
                                            : m_dev_state[g][k.index];
            check_size(t.numel());
            if (to_host)
                m_backend.copy(buf.data(), tier_id::host, t.device_data().get(), tier_id::device, t.bytes(), m_compute)
                    .wait();  // named: checkpoint I/O
            else
                m_backend.copy(t.device_data().get(), tier_id::device, buf.data(), tier_id::host, t.bytes(), m_compute)
                    .wait();  // named: checkpoint I/O
            return;
        }
        auto host = [&](tiered_tensor<R, host_tier, B>& t) {
            check_size(t.numel());
            if (to_host)
                std::copy(t.span().begin(), t.span().end(), buf.begin());
            else
                std::copy(buf.begin(), buf.end(), t.span().begin());
        };
        if (k.of == part::params) return host(*m_params[g]);
        if (k.of == part::grads) return host(*m_grads[g]);
        if (m_stored_state[g].empty()) return host(m_state[g][k.index]);
        auto& t = m_stored_state[g][k.index];
        check_size(t.numel());
        auto staging = m_state_staging[0].view().flat(0, t.shape());  // between steps: free
        if (to_host) {
            copy_async(m_backend, staging, t.view(), m_io).wait();  // named: checkpoint I/O
            std::copy(staging.data(), staging.data() + staging.numel(), buf.begin());
        } else {
            std::copy(buf.begin(), buf.end(), staging.data());
            copy_async(m_backend, t.view(), staging, m_io).wait();  // named: checkpoint I/O
        }
    }

    B& m_backend;
    const model_type& m_model;
    train_options m_options;
    std::vector<group_home> m_homes;  // by group
    link m_link;
    tiered_trainer* m_owner;  // data-parallel ranks above 0: rank 0's trainer, which holds the host state
    std::optional<stream> m_reduce;  // data-parallel: the gradients' sums over the ranks
    std::vector<std::size_t> m_state_owner;  // by group: the rank that keeps its device optimizer state
    stream m_compute;
    cpu::stream m_optimizer_thread;
    stream m_io;
    offloaded_optimizer<Opt> m_optimizer;  // train_options::optimizer (or the caller's), with its host threads
    pipeline_engine<R, B, Depth> m_engine;
    typename model_type::activations m_act;
    // By group; empty where the group has no such state in that tier (frozen, or another home).
    std::vector<std::optional<tiered_tensor<R, host_tier, B>>> m_params, m_grads;  // host homes
    // Device homes; for pinned groups, the step's device copies of weights and gradients.
    std::vector<std::optional<tiered_tensor<R, device_tier, B>>> m_dev_params, m_dev_grads;
    // The optimizer's state by group, then by state name (state_names() order), in the group's
    // home: the host, storage files, or the device; empty in the other tiers and for frozen groups.
    std::vector<std::vector<tiered_tensor<R, host_tier, B>>> m_state;
    std::vector<std::vector<tiered_tensor<R, storage_tier, B>>> m_stored_state;
    std::vector<std::vector<tiered_tensor<R, device_tier, B>>> m_dev_state;
    std::vector<optimizer_state_layout> m_state_layout;  // by group: where each state tensor's parts are
    tiered_tensor<double, device_tier, B> m_norm_partials;   // (groups) sum of squares per group
    tiered_tensor<double, device_tier, B> m_norm_workspace;  // sum_of_squares' workspace
    tiered_tensor<double, host_tier, B> m_norm_partials_host;  // their copy on the host
    std::vector<tiered_tensor<std::int32_t, host_tier, B>> m_staged_tokens;  // (accum x 2) tokens, targets
    std::vector<tiered_tensor<R, host_tier, B>> m_staged_losses;             // (accum) per-token losses
    // State on storage: two sets of one buffer per state name (set-major), each of the largest
    // storage group's size.
    std::vector<tiered_tensor<R, host_tier, B>> m_state_staging;
    std::array<event, 2> m_read;  // by staging set: its state has been read (optimizer thread)
    std::vector<event> m_last_d2h;
    std::vector<cpu::event> m_updated;  // by group: its last scheduled update (empty: none pending)
    std::vector<bool> m_uploaded;       // this pass: the pinned group's weights are on the device
    long m_step = 0;
};

}  // namespace strata

namespace strata {

// The resident configuration: every group on the device (no slots, no host state).
template <class R, Backend B, class Model = gpt_model<R, B>>
using trainer = tiered_trainer<R, B, 1, device_tier, Model>;

template <class R, Backend B, class Model>
struct select_trainer<R, B, resident_placement, moments_in<device_tier>, Model> {
    using type = trainer<R, B, Model>;
};
template <class R, Backend B, std::size_t Depth, Tier M, class Model>
struct select_trainer<R, B, prefetch_pipeline<Depth>, moments_in<M>, Model> {
    static_assert(!std::is_same_v<M, device_tier>,
                  "prefetch_pipeline streams from the host: use moments_in<host_tier> or moments_in<storage_tier>");
    using type = tiered_trainer<R, B, Depth, M, Model>;
};
}  // namespace strata
