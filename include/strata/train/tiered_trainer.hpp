// tiered_trainer<R, B, Model>: the one trainer, for any placement of the model's state across the
// three tiers. Placement is data: each layer group has a home (tier/group_home.hpp, the planner's
// per-group answer, train_options::homes; none: every group on the device, the resident plan),
// and the streamed blocks go through train_options::slots device slots. Each group's state is a
// group_state (train/group_state.hpp: its tensors in each tier and the verbs upload, store,
// update_device, update_host, copy); the trainer holds one per group and runs the step over them:
//   device   weights, gradients and the optimizer's state (AdamW m and v, SGD momentum) on the
//            device: the group never moves, and its update runs on the device after the norm
//            (scale + the optimizer's ops<B> kernel: the resident plan's kernels, in its order);
//   host     weights and gradients in pinned host memory, the optimizer state on the host: the transformer
//            blocks stream through device slots (stream/prefetch_pipeline.hpp: pipeline_engine); the groups used at
//            both ends of a pass (embeddings, final layernorm) go to the device once per step
//            ("pinned groups"); the update runs on the host;
//   storage  as host, with the optimizer state in files on the storage tier, read before the
//            group's update and written back after it, through two staging sets: the first two
//            storage groups' state is read as the step starts (the disk works through the forward
//            and backward), each later group's behind the write-back of the group two before it.
// Model: a decoder_model of Layers (gpt_model, Llama's, a LoRA model; strata/train.hpp's
// gpt_trainer<R, B> names GPT-2's: the train layer names no model); frozen tensors have no
// gradients and no optimizer state, and a frozen block's weights stream to the device but nothing
// comes back.
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
#include <strata/model/decoder.hpp>              // decoder_model (the form of every model it trains)
#include <strata/optim/offloaded_optimizer.hpp>  // offloaded_optimizer
#include <strata/optim/optimizers.hpp>           // any_optimizer
#include <strata/optim/state_layout.hpp>         // optimizer_state_layout
#include <strata/stream/prefetch_pipeline.hpp>   // prefetch_pipeline, pipeline_engine
#include <strata/tensor/tiered_tensor.hpp>       // tiered_tensor
#include <strata/tier/group_home.hpp>            // group_home
#include <strata/train/group_state.hpp>          // group_state, host_store
#include <strata/train/initialize.hpp>           // initialize_groups
#include <strata/train/rank_link.hpp>            // rank_link
#include <strata/train/train_options.hpp>        // train_options, step_result

#include <array>        // std::array
#include <cmath>        // std::sqrt, std::isfinite
#include <memory>       // std::shared_ptr
#include <mutex>        // std::mutex, std::lock_guard
#include <optional>     // std::optional
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace strata {

// Opt: the optimizer (any_optimizer, from train_options::optimizer, unless a caller brings its own
// Optimizer: then the constructor that takes one).
template <class R, Backend B, class Model, Optimizer Opt = any_optimizer>
class tiered_trainer {
public:
    using model_type = Model;
    using stream = typename B::stream;
    using event = typename B::event;
    using op = ops<B>;
    using state_kind = trainer_state_kind;
    using link = rank_link<R, stream, event>;
    using host_state_type = host_store<R, B>;

    // `dp` and `shared`: one rank of a data-parallel group (train/data_parallel.hpp builds them):
    // rank 0 (shared null) makes the host state; rank r > 0 is given rank 0's (host_state()) and
    // allocates none of its own. Default: a single-device trainer.
    tiered_trainer(B& backend, const model_type& model, train_options options, link dp = {},
                   std::shared_ptr<host_state_type> shared = nullptr)
        requires std::same_as<Opt, any_optimizer>
        : tiered_trainer(backend, model, options, options.optimizer, std::move(dp), std::move(shared)) {}
    // With an optimizer of the caller's (train_options::optimizer is not read).
    tiered_trainer(B& backend, const model_type& model, train_options options, Opt chosen, link dp = {},
                   std::shared_ptr<host_state_type> shared = nullptr)
        : m_backend(backend),
          m_model(model),
          m_options(std::move(options)),
          m_homes(homes_of(model, m_options)),
          m_link(std::move(dp)),
          m_host(host_state_of(m_link, std::move(shared), model, m_homes)),
          m_compute(backend.make_stream("compute")),
          m_optimizer_thread("optimizer"),
          m_io(backend.make_stream("storage I/O")),
          m_optimizer(std::move(chosen)),
          m_engine(backend, m_options.slots, largest_streamed_block(model, m_homes, false),
                   largest_streamed_block(model, m_homes, true)),
          m_act(backend, model, m_options.batch, m_options.seq, m_options.activations),
          m_norm_partials(backend, shape{model.groups().size()}, "grad_norm.partials"),
          m_norm_workspace(backend, shape{detail::norm_workspace_doubles<B>(model.groups())}, "grad_norm.workspace"),
          m_norm_partials_host(backend, shape{model.groups().size()}, "grad_norm.partials.host") {
        const auto& groups = model.groups();
        const std::size_t n = groups.size();
        if (m_link.parallel()) m_reduce.emplace(backend.make_stream("reduce"));
        std::vector<bool> device_state(n);
        for (std::size_t g = 0; g < n; ++g) device_state[g] = m_homes[g].weights == tier_id::device && !groups[g].frozen();
        m_state_owner = device_state_owners(device_state, m_link.ranks);  // data parallel: one rank keeps it
        const bool owns_host = m_link.owns_host_state();
        const auto states = optimizer().state_names();
        std::vector<std::size_t> largest_stored(states.size(), 0);  // by state tensor
        m_groups.reserve(n);
        for (std::size_t g = 0; g < n; ++g) {
            std::shared_ptr<host_group<R, B>> host;  // host-homed: its part of the host state
            if (m_homes[g].weights != tier_id::device) host = std::shared_ptr<host_group<R, B>>(m_host, &m_host->groups[g]);
            m_groups.emplace_back(backend, g, groups[g], m_homes[g], used_at_both_ends(g),
                                  m_link.rank == m_state_owner[g], std::move(host), owns_host, optimizer());
            if (m_groups[g].owns_host() && m_groups[g].state_on_storage())
                for (std::size_t i = 0; i < states.size(); ++i)
                    largest_stored[i] = std::max(largest_stored[i], m_groups[g].state_layout().numel(i));
        }
        m_last_d2h.resize(n);
        const std::size_t BT = m_options.batch * m_options.seq;
        for (std::size_t k = 0; k < std::max<std::size_t>(m_options.accum, 1); ++k) {
            m_staged_tokens.emplace_back(backend, shape{BT}, "tokens.host");
            m_staged_tokens.emplace_back(backend, shape{BT}, "targets.host");
            m_staged_losses.emplace_back(backend, shape{BT}, "losses.host");
        }
        // Two sets: one group's state is updated while the next one's is read. "adamw.m.staging.0":
        // the optimizer's name, the state's, the set's.
        if (!states.empty() && largest_stored[0] > 0)
            for (const char* set : {"0", "1"})
                for (std::size_t i = 0; i < states.size(); ++i)
                    m_state_staging.emplace_back(backend, shape{largest_stored[i]}, std::string(optimizer().name()) + "." +
                                                                                       std::string(states[i]) + ".staging." + set);
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
        for (const auto& group : m_groups)
            if (!group.owns_host()) group.wait_updated();  // named: rank 0's updates of the shared host state
    }

    // The host state of every host-homed group, which the ranks above 0 of a data-parallel group
    // share (data_parallel_trainer gives rank 0's to the others).
    std::shared_ptr<host_state_type> host_state() const { return m_host; }

    // This trainer's place in a data-parallel group (rank 0 of 1 when it trains alone).
    const link& rank() const { return m_link; }
    // The rank that keeps device-homed group g's optimizer state and updates it (0 alone).
    std::size_t state_owner(std::size_t g) const { return m_state_owner.at(g); }

    const model_type& model() const { return m_model; }
    const train_options& options() const { return m_options; }
    // The optimizer (train_options::optimizer): its state names are the trainer's state tensors.
    const Opt& optimizer() const { return m_optimizer.optimizer(); }
    // Each group's home (train_options::homes, or the default: every group on the device).
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
        if (!m_link.owns_host_state())
            throw error("initialize() on data-parallel rank " + std::to_string(m_link.rank) +
                            ": the host state is rank 0's",
                        "initialize rank 0 and copy the device-homed groups to the others (data_parallel_trainer does)");
        finish_updates();
        std::mutex copying;  // device-homed groups: one copy at a time on the compute stream
        auto home = [&](std::size_t g) {
            return m_groups[g].on_device() ? std::span<R>{} : m_groups[g].host().params->span();
        };
        initialize_groups(m_model, seed, home, [&](std::size_t g, std::span<const R> block) {
            std::lock_guard lock(copying);
            m_backend.copy(m_groups[g].device_params(), tier_id::device, block.data(), tier_id::host,
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
        read_first_stored();
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
        if (o.homes.empty()) return every_group(n, group_home::device());  // the resident plan
        if (o.homes.size() != n)
            throw error("train_options::homes has " + std::to_string(o.homes.size()) + " entries for a model of " +
                            std::to_string(n) + " layer groups",
                        "give one home per group (memory_plan::homes), or none");
        for (std::size_t g = 0; g < n; ++g) validate(o.homes[g], g);
        return o.homes;
    }

    // Rank 0's host state: made here on rank 0 (shared null), given to the ranks above 0.
    static std::shared_ptr<host_state_type> host_state_of(const link& dp, std::shared_ptr<host_state_type> shared,
                                                          const model_type& model, const std::vector<group_home>& homes) {
        if (dp.ranks == 0 || dp.rank >= dp.ranks)
            throw error("rank_link: rank " + std::to_string(dp.rank) + " of " + std::to_string(dp.ranks) + " ranks");
        const bool linked = dp.all_reduce && dp.broadcast && dp.exchange != nullptr && dp.exchange->size() == dp.ranks;
        if (dp.parallel() && !linked)
            throw error("rank_link of " + std::to_string(dp.ranks) + " ranks without its all_reduce, broadcast or exchange",
                        "make the ranks with data_parallel_trainer");
        if (dp.owns_host_state() != (shared == nullptr))
            throw error("data-parallel rank " + std::to_string(dp.rank) +
                        (shared ? " is given a host state: rank 0 makes its own"
                                : " is given no host state: ranks above 0 stream rank 0's"));
        if (!shared) return std::make_shared<host_state_type>(&model, homes);
        if (shared->model != &model || shared->homes != homes)
            throw error("data-parallel rank " + std::to_string(dp.rank) + " has another model or other homes than rank 0",
                        "every rank trains the same model object with the same plan");
        return shared;
    }

    // Groups used at both ends of a pass: when host-homed, on the device for the whole step.
    bool used_at_both_ends(std::size_t g) const { return g == 0 || g == m_model.final_group(); }
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
            auto& group = t.m_groups[g];
            if (group.on_device()) return group.device_params();
            if (group.pinned()) return group.upload(t.m_engine.h2d(), t.m_compute, t.m_engine.counters());
            return t.m_engine.params(g, s, u);
        }
        R* grads(std::size_t g, stream& s) {
            if (!t.m_groups[g].streams()) return t.m_groups[g].device_grads();
            return t.m_engine.grads(g, s);
        }
        void done(std::size_t g, stream& s, group_use u) {
            if (t.m_link.parallel() && u == group_use::backward) return t.done_parallel(g, s, last_micro);
            if (!t.m_groups[g].streams()) return;  // summed in end_backward, after their last use
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
        if (m_groups[g].streams()) {
            R* slot = m_engine.grads_in_use();
            if (slot == nullptr) return m_engine.done(g, s, group_use::backward);  // frozen
            reduce.wait(s.record());
            m_link.all_reduce(reduce, slot, m_model.groups()[g].trainable_numel());
            if (last_micro) sum_of_squares(reduce, g, slot);
            const event reduced = reduce.record();
            return m_engine.done(g, s, group_use::backward, &reduced);
        }
        if (last_micro && g != 0 && m_groups[g].has_device_grads()) reduce_device_grads(g, s);
    }

    // Group g's device gradients summed over the ranks, then its sum of squares, on the reduce stream.
    void reduce_device_grads(std::size_t g, stream& s) {
        stream& reduce = *m_reduce;
        R* grads = m_groups[g].device_grads();
        reduce.wait(s.record());
        m_link.all_reduce(reduce, grads, m_model.groups()[g].trainable_numel());
        sum_of_squares(reduce, g, grads);
    }

    typename pipeline_engine<R, B>::pass make_pass(bool backward, bool first_micro) {
        typename pipeline_engine<R, B>::pass p;
        const std::size_t L = m_model.block_count();
        for (std::size_t l = 0; l < L; ++l)
            if (m_groups[m_model.block_group(l)].streams()) p.order.push_back({m_model.block_group(l), group_use::forward});
        if (backward)
            for (std::size_t l = L; l-- > 0;)
                if (m_groups[m_model.block_group(l)].streams())
                    p.order.push_back({m_model.block_group(l), group_use::backward});
        const std::size_t n = m_homes.size();
        p.host_params.assign(n, nullptr);
        p.host_grads.assign(n, nullptr);
        p.bytes.assign(n, 0);
        p.grad_bytes.assign(n, 0);
        for (auto& group : m_groups) {
            if (!group.streams()) continue;
            auto& host = group.host();
            const std::size_t g = group.index();
            p.host_params[g] = host.params->data();
            p.bytes[g] = host.params->bytes();
            if (host.grads) {
                p.host_grads[g] = group.owns_host() ? host.grads->data() : nullptr;
                p.grad_bytes[g] = host.grads->bytes();
            }
        }
        p.grads_home = m_link.owns_host_state();
        p.last_d2h = &m_last_d2h;
        p.first_micro = first_micro;
        p.before_h2d = [this](std::size_t g) { m_groups[g].wait_updated(); };
        p.h2d_ready = [this](std::size_t g) { return m_groups[g].updated(); };
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

    // At the start of a pass: the device gradients of the groups that keep them on the device
    // start from zero (a step's, not an evaluation's); the pinned groups' weights go up at first
    // use (group_state::upload), once their update has finished: the final norm's comes last.
    void begin_pass(bool zero_grads) {
        for (auto& group : m_groups) group.begin_pass(m_compute, zero_grads);
    }
    // After the last backward: the sums of squares of the groups whose gradients are on the device
    // (device-homed and pinned), and the pinned groups' gradients to the host.
    // Data-parallel: group 0's gradients are summed over the ranks first (the others were, as
    // their backward ended: done_parallel), and compute and the copies home wait for every sum.
    void end_backward() {
        if (m_link.parallel()) {
            if (m_groups[0].has_device_grads()) reduce_device_grads(0, m_compute);
            m_compute.wait(m_reduce->record());
        } else {
            for (auto& group : m_groups)
                if (!group.streams() && group.has_device_grads()) sum_of_squares(group.index(), group.device_grads());
        }
        for (auto& group : m_groups)  // pinned, trainable, this rank's to bring home
            if (auto copied = group.store(m_engine.d2h(), m_compute, m_engine.counters())) m_last_d2h[group.index()] = *copied;
    }

    // The device-homed groups' updates, on the compute stream, as the resident trainer runs them:
    // gradients scaled in place by the clip coefficient when it is < 1, then the optimizer's
    // kernel per tensor. Data parallel: only the rank that keeps the group's state updates it
    // (device_state_owners), then broadcasts the weights, in group order on every rank.
    void update_device_groups(double coefficient, double lr, long update) {
        for (auto& group : m_groups) {
            if (!group.on_device() || group.frozen()) continue;
            group.update_device(m_compute, optimizer(), coefficient, lr, update);  // where this rank keeps its state
            // Data parallel: the owner's updated weights reach every rank before its next step.
            if (m_link.parallel())
                m_link.broadcast(m_compute, group.device_params(), group.layout().numel(), m_state_owner[group.index()]);
        }
    }

    // The host groups this rank updates whose optimizer state lives on storage, in group order.
    std::vector<std::size_t> stored_groups() const {
        std::vector<std::size_t> stored;
        for (const auto& group : m_groups)
            if (group.owns_host() && !group.frozen() && group.state_on_storage()) stored.push_back(group.index());
        return stored;
    }

    // As the step starts: the first two storage groups' state into the two staging sets, by a task
    // on the optimizer thread, so behind the previous step's updates and their write-backs on the
    // I/O stream. The disk reads through the forward and backward instead of idling until the
    // norm. A step that fails before its updates leaves nothing behind but these reads (drain()).
    void read_first_stored() {
        const std::vector<std::size_t> stored = stored_groups();
        if (stored.empty()) return;
        m_optimizer_thread.enqueue(
            [this, stored] {
                read_stored(stored[0], 0);
                if (stored.size() > 1) read_stored(stored[1], 1);
            },
            "read optimizer state");
    }

    // Once the loss and the norm are known to be finite: the update of every host group on the
    // optimizer thread, each behind its own last gradient copy, in the order the next step uses
    // them, so that its forward waits as little as possible (group order: embeddings, blocks,
    // final norm). Storage group j's state is in staging set j % 2 (read_first_stored for the
    // first two); its task reads group j + 2's into that set after writing its own back.
    void schedule_host_updates(double lr, long update, R grad_scale) {
        const std::vector<std::size_t> stored = stored_groups();
        const char* task = optimizer().name().data();  // a literal's: null-terminated
        const std::size_t n = m_groups.size();
        std::size_t next_stored = 0;
        for (auto& group : m_groups) {
            if (!group.owns_host() || group.frozen()) continue;  // on the device, rank 0's, or frozen
            const std::size_t g = group.index();
            event landed = m_last_d2h[g];
            if (group.state_on_storage()) {
                const std::size_t j = next_stored++;
                const std::size_t after_next = j + 2 < stored.size() ? stored[j + 2] : n;
                m_optimizer_thread.enqueue(
                    [this, landed, g, j, after_next, n, lr, update, grad_scale] {
                        landed.wait();
                        m_read[j % 2].wait();  // named: this group's state is in its staging
                        auto& stored_state = m_groups[g].host().stored_state;
                        std::vector<R*> state;
                        for (std::size_t i = 0; i < stored_state.size(); ++i) state.push_back(staged(j % 2, i, g).data());
                        m_groups[g].update_host(m_optimizer, state, lr, update, grad_scale);
                        for (std::size_t i = 0; i < state.size(); ++i)
                            copy_async(m_backend, stored_state[i].view(), staged(j % 2, i, g), m_io);
                        // behind that write-back on the I/O stream, which frees the set
                        if (after_next < n) read_stored(after_next, j % 2);
                    },
                    task);
                for (const auto& t : group.host().stored_state) {
                    m_engine.counters().storage_read_bytes += t.bytes();
                    m_engine.counters().storage_write_bytes += t.bytes();
                }
            } else {
                m_optimizer_thread.enqueue(
                    [this, landed, g, lr, update, grad_scale] {
                        landed.wait();
                        m_groups[g].update_host(m_optimizer, m_groups[g].host_state(), lr, update, grad_scale);
                    },
                    task);
            }
            group.host().updated = m_optimizer_thread.record();
        }
    }

    // State tensor i's staging buffer of set `set`, as long as storage group g's state.
    auto staged(std::size_t set, std::size_t i, std::size_t g) {
        const auto& stored_state = m_groups[g].host().stored_state;
        return m_state_staging[set * stored_state.size() + i].view().flat(0, stored_state[i].shape());
    }

    // Storage group g's state into staging set `set`, on the storage I/O stream (behind the
    // write-back of the set's previous group). Optimizer thread only.
    void read_stored(std::size_t g, std::size_t set) {
        const auto& stored_state = m_groups[g].host().stored_state;
        for (std::size_t i = 0; i < stored_state.size(); ++i)
            m_read[set] = copy_async(m_backend, staged(set, i, g), stored_state[i].view(), m_io);
    }

    // Gradients and optimizer state start at zero (host weights and gradients are zero-filled when made).
    void zero_state() {
        for (auto& group : m_groups) group.zero(m_compute, m_io, staging());
        m_compute.synchronize();  // named: the state is ready before the first step
    }

    // The first set of storage staging buffers, one per state tensor (free between steps:
    // checkpoint I/O), or none.
    std::span<tiered_tensor<R, host_tier, B>> staging() {
        return m_state_staging.empty() ? std::span<tiered_tensor<R, host_tier, B>>()
                                       : std::span(m_state_staging).first(optimizer().state_names().size());
    }

    void host_copy(state_kind k, std::size_t g, std::span<R> buf, bool to_host) {
        auto& group = m_groups.at(g);
        if (!group.on_device() && !group.owns_host())
            throw error("data-parallel rank " + std::to_string(m_link.rank) + " keeps no host state of group " +
                            std::to_string(g) + ": rank 0 does",
                        "read and write host-homed groups through rank 0 (data_parallel_trainer does)");
        finish_updates();  // the state of the last step, complete
        using part = state_kind::part;
        if (k.of != part::params && group.frozen())
            throw error("group " + std::to_string(g) + " is frozen: it has no gradients and no optimizer state");
        const auto states = optimizer().state_names();
        if (k.of == part::optimizer && k.index >= states.size())
            throw error("optimizer state " + std::to_string(k.index) + " asked for; " +
                            std::string(optimizer().display_name()) + " keeps " + std::to_string(states.size()) +
                            " (" + state_label("", states).substr(1) + ")",
                        "ask for trainer_state_kind::optimizer_state(i) with i < the count of state_names()");
        if (group.on_device() && k.of == part::optimizer && !group.keeps_state())
            throw error("data-parallel rank " + std::to_string(m_link.rank) + " keeps no optimizer state of group " +
                            std::to_string(g) + ": rank " + std::to_string(m_state_owner[g]) + " does",
                        "read and write it through its owner (data_parallel_trainer does)");
        group.copy(k, buf, to_host, m_compute, m_io, staging());
    }

    B& m_backend;
    const model_type& m_model;
    train_options m_options;
    std::vector<group_home> m_homes;  // by group
    link m_link;
    std::shared_ptr<host_state_type> m_host;  // the host-homed groups' host side (rank 0's, shared by all ranks)
    std::optional<stream> m_reduce;  // data-parallel: the gradients' sums over the ranks
    std::vector<std::size_t> m_state_owner;  // by group: the rank that keeps its device optimizer state
    stream m_compute;
    cpu::stream m_optimizer_thread;
    stream m_io;
    offloaded_optimizer<Opt> m_optimizer;  // train_options::optimizer, with its host threads
    pipeline_engine<R, B> m_engine;
    typename model_type::activations m_act;
    std::vector<group_state<R, B>> m_groups;  // by group: its home and its tensors in each tier
    tiered_tensor<double, device_tier, B> m_norm_partials;   // (groups) sum of squares per group
    tiered_tensor<double, device_tier, B> m_norm_workspace;  // sum_of_squares' workspace
    tiered_tensor<double, host_tier, B> m_norm_partials_host;  // their copy on the host
    std::vector<tiered_tensor<std::int32_t, host_tier, B>> m_staged_tokens;  // (accum x 2) tokens, targets
    std::vector<tiered_tensor<R, host_tier, B>> m_staged_losses;             // (accum) per-token losses
    // State on storage: two sets of one buffer per state name (set-major), each of the largest
    // storage group's size.
    std::vector<tiered_tensor<R, host_tier, B>> m_state_staging;
    std::array<event, 2> m_read;  // by staging set: its state has been read (optimizer thread)
    std::vector<event> m_last_d2h;  // by group: the step's newest gradient copy home
    long m_step = 0;
};

}  // namespace strata
