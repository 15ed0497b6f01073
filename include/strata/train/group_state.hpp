// group_state: one layer group's training state in the trainer (train/tiered_trainer.hpp), in
// the manner of FSDP2's FSDPParamGroup (unshard / wait_for_unshard / reshard). It holds the
// group's home (tier/group_home.hpp) and its tensors in each tier, and answers for them:
//
//   device-homed  weights, gradients and the optimizer's state on the device (on a data-parallel
//                 rank: weights and gradients on every rank, the state on the rank that keeps it);
//   host-homed    weights and gradients in pinned host memory, the optimizer's state on the host
//                 or in storage files (host_group, below); "pinned" groups (used at both ends of
//                 a pass: embeddings, final norm) add a device copy of weights and gradients for
//                 the whole step; the others stream through the pipeline's slots.
//
// The verbs, in the order a step uses them:
//   begin_pass     the pass starts: device gradients from zero (a step's), weights not yet up;
//   wait_updated   named host wait: the previous step's host update of the group has finished;
//   upload         a pinned group's weights to its device copy at first use in the pass
//                  (behind wait_updated), and compute waits for them;
//   store          a pinned group's accumulated gradients home, behind compute;
//   update_device  the optimizer's update on the device (device-homed, on the rank keeping the
//                  state), after the clip scaling: the resident trainer's kernels, in its order;
//   update_host    the optimizer's update on the host, tensor by tensor, the clip folded in;
//   copy           checkpoint I/O of one of its blocks, wherever it lives.
// The optimizer is called in three places only: allocate_state, update_device, update_host.
//
// Data-parallel ranks share the host side: rank 0 makes one host_store, ranks above 0 are given
// it (tiered_trainer::host_state()). Only rank 0 (owns_host) writes it: its gradients come home
// and its optimizer thread runs the host updates; the others stream the weights from it and wait
// for its update events.
#pragma once

#include <strata/backend/backend.hpp>           // Backend
#include <strata/backend/cpu/stream.hpp>        // cpu::event (the host updates)
#include <strata/core/error.hpp>                // strata::error
#include <strata/nn/ops.hpp>                    // ops (scale_inplace)
#include <strata/optim/device_update.hpp>       // device_update
#include <strata/optim/optimizer.hpp>           // optimizer_state
#include <strata/optim/state_layout.hpp>        // optimizer_state_layout
#include <strata/stream/prefetch_pipeline.hpp>  // transfer_counters
#include <strata/tensor/param_layout.hpp>       // param_layout
#include <strata/tensor/tiered_tensor.hpp>      // tiered_tensor
#include <strata/tier/group_home.hpp>           // group_home
#include <strata/train/train_options.hpp>       // trainer_state_kind

#include <algorithm>  // std::copy, std::fill
#include <cstddef>    // std::size_t
#include <memory>     // std::shared_ptr
#include <optional>   // std::optional
#include <span>       // std::span
#include <string>     // std::string
#include <vector>     // std::vector

namespace strata {

// The host side of one host-homed group: weights and gradients (none when frozen) in pinned host
// memory, the optimizer's state tensors (state_names() order) in the host tier or in storage
// files, and the event of its last scheduled update (empty: none pending).
template <class R, Backend B>
struct host_group {
    std::optional<tiered_tensor<R, host_tier, B>> params, grads;
    std::vector<tiered_tensor<R, host_tier, B>> state;            // moments home: host
    std::vector<tiered_tensor<R, storage_tier, B>> stored_state;  // moments home: storage
    cpu::event updated;
};

// The host side of every group (empty for device-homed ones), one for all the ranks of a
// data-parallel group: rank 0 makes it; it names the model and homes it was made for, so that a
// rank of another plan is refused.
template <class R, Backend B>
struct host_store {
    host_store(const void* model, std::vector<group_home> homes)
        : model(model), homes(std::move(homes)), groups(this->homes.size()) {}
    const void* model;
    std::vector<group_home> homes;
    std::vector<host_group<R, B>> groups;  // by group
};

template <class R, Backend B>
class group_state {
public:
    using stream = typename B::stream;
    using event = typename B::event;
    using op = ops<B>;
    using state_kind = trainer_state_kind;

    // Group g of `layout`, at `home`. both_ends: used at both ends of a pass (when host-homed,
    // pinned on the device for the step). keeps_state: a device-homed group's optimizer state is
    // this rank's (device_state_owners). host: its host side when host-homed (null otherwise);
    // owns_host: this rank makes and writes it (rank 0), else it is shared from rank 0.
    template <class Optimizer>
    group_state(B& backend, std::size_t g, const param_layout& layout, group_home home, bool both_ends,
                bool keeps_state, std::shared_ptr<host_group<R, B>> host, bool owns_host, const Optimizer& optimizer)
        : m_backend(backend),
          m_index(g),
          m_layout(&layout),
          m_home(home),
          m_both_ends(both_ends),
          m_keeps_state(keeps_state),
          m_host(std::move(host)),
          m_owns_host(owns_host),
          m_state_layout(optimizer_state_layout::of<R>(optimizer, layout)) {
        const std::string name = "g" + std::to_string(g);
        const shape s{layout.numel()}, ts{layout.trainable_numel()};
        if (on_device()) {
            m_dev_params.emplace(backend, s, "params." + name);
            if (frozen()) return;  // no gradients, no optimizer state
            m_dev_grads.emplace(backend, ts, "grads." + name);
            if (m_keeps_state) allocate_state(optimizer);  // data parallel: one rank keeps it
            return;
        }
        if (m_host == nullptr)
            throw error("group " + std::to_string(g) + " is homed on the host without a host side", "a bug in the trainer");
        if (pinned()) {  // a device copy for the whole step
            m_dev_params.emplace(backend, s, "pinned.params." + name);
            if (!frozen()) m_dev_grads.emplace(backend, ts, "pinned.grads." + name);
        }
        if (!m_owns_host) return;  // rank 0's
        m_host->params.emplace(backend, s, "params." + name);
        std::fill(m_host->params->span().begin(), m_host->params->span().end(), R(0));
        if (frozen()) return;
        m_host->grads.emplace(backend, ts, "grads." + name);
        std::fill(m_host->grads->span().begin(), m_host->grads->span().end(), R(0));
        allocate_state(optimizer);
    }

    std::size_t index() const { return m_index; }
    const param_layout& layout() const { return *m_layout; }
    const group_home& home() const { return m_home; }
    bool frozen() const { return m_layout->frozen(); }
    // Where each of the optimizer's state tensors has each trainable tensor's part (none: frozen).
    const optimizer_state_layout& state_layout() const { return m_state_layout; }
    bool on_device() const { return m_home.weights == tier_id::device; }
    // Host-homed and used at both ends of a pass: on the device for the whole step.
    bool pinned() const { return !on_device() && m_both_ends; }
    // Host-homed and streamed block by block through the pipeline's slots.
    bool streams() const { return !on_device() && !m_both_ends; }
    // Device-homed with its optimizer state on this rank, which updates it.
    bool keeps_state() const { return on_device() && !frozen() && m_keeps_state; }
    // This rank writes the host side (rank 0); false on ranks above 0 and for device-homed groups.
    bool owns_host() const { return m_host != nullptr && m_owns_host; }
    // The optimizer's state is in storage files (read before the update, written back after it).
    bool state_on_storage() const { return m_host != nullptr && !m_host->stored_state.empty(); }

    // The host side (host-homed groups; on ranks above 0, rank 0's).
    host_group<R, B>& host() { return *m_host; }
    // The device copy's addresses (device-homed or pinned; gradients null when frozen).
    R* device_params() { return m_dev_params->device_data().get(); }
    R* device_grads() { return m_dev_grads ? m_dev_grads->device_data().get() : nullptr; }
    std::size_t device_grads_numel() const { return m_dev_grads ? m_dev_grads->numel() : 0; }
    bool has_device_grads() const { return m_dev_grads.has_value(); }

    // The pass starts: the device gradients start from zero (a step's pass, not an
    // evaluation's); a pinned group's weights go up again at first use (upload).
    void begin_pass(stream& compute, bool zero_grads) {
        m_uploaded = false;
        if (zero_grads && m_dev_grads) zero_device(*m_dev_grads, compute);
    }

    // Named host wait: the previous step's update of the host side has finished, so its host
    // weights are final. Called just before they are first copied to the device in a pass.
    void wait_updated() const {
        if (m_host) m_host->updated.wait();
    }
    // Whether wait_updated() would return at once.
    bool updated() const { return !m_host || m_host->updated.ready(); }

    // A pinned group's device weights for this pass, uploaded on h2d at first use (after its last
    // update: wait_updated); compute waits for them.
    const R* upload(stream& h2d, stream& compute, transfer_counters& counters) {
        if (!m_uploaded) {
            wait_updated();
            compute.wait(m_dev_params->copy_from(*m_host->params, h2d));
            counters.h2d_bytes += m_dev_params->bytes();
            m_uploaded = true;
        }
        return device_params();
    }

    // A pinned group's accumulated gradients home on d2h, behind compute (rank 0 only: the host
    // side is its; nothing for a frozen group). The copy's event, or none.
    std::optional<event> store(stream& d2h, stream& compute, transfer_counters& counters) {
        if (!pinned() || !owns_host() || frozen()) return std::nullopt;
        d2h.wait(compute.record());
        auto& grads = *m_host->grads;
        counters.d2h_bytes += grads.bytes();
        return grads.copy_from(*m_dev_grads, d2h);
    }

    // The optimizer's update of a device-homed group whose state this rank keeps, on compute, as
    // the resident trainer runs it: the gradients scaled in place by the clip coefficient when it
    // is < 1, then the optimizer's kernel per tensor (weight decay per tensor).
    template <class Optimizer>
    void update_device(stream& compute, const Optimizer& optimizer, double coefficient, double lr, long update) {
        if (!keeps_state()) return;
        R* params = device_params();
        R* grad = device_grads();
        if (coefficient < 1) op::scale_inplace(compute, grad, coefficient, m_layout->trainable_numel());
        std::vector<R*> state(m_dev_state.size());
        const auto& entries = m_layout->entries();
        for (std::size_t e = 0; e < entries.size(); ++e) {
            const auto& entry = entries[e];
            if (!entry.spec.trainable) continue;
            const std::size_t o = entry.offset, n = entry.spec.shape.numel();
            for (std::size_t i = 0; i < state.size(); ++i)
                state[i] = m_dev_state[i].device_data().get() + m_state_layout.at(i, e).offset;
            device_update<B>(compute, optimizer, params + o, grad + o, n, std::span<R* const>(state),
                             {.lr = lr, .step = update, .decay = entry.spec.decay, .shape = entry.spec.shape});
        }
    }

    // The optimizer's update of a host-homed group on the host (the offloaded optimizer's
    // threads), tensor by tensor (weight decay per tensor), the clip folded in as grad_scale (1:
    // none), with its state tensors at `state` (the host side's, or the storage staging), one
    // pointer per state name.
    template <class Offloaded>
    void update_host(Offloaded& optimizer, std::span<R* const> state, double lr, long update, R grad_scale) {
        R* p = m_host->params->data();
        R* grad = m_host->grads->data();
        std::vector<std::span<R>> slices(state.size());
        const auto& entries = m_layout->entries();
        for (std::size_t e = 0; e < entries.size(); ++e) {
            const auto& entry = entries[e];
            if (!entry.spec.trainable) continue;
            const std::size_t o = entry.offset, n = entry.spec.shape.numel();
            for (std::size_t i = 0; i < state.size(); ++i) {
                const auto& part = m_state_layout.at(i, e);
                slices[i] = {state[i] + part.offset, part.numel};
            }
            optimizer.step_block(std::span<R>(p + o, n), std::span<const R>(grad + o, n), optimizer_state<R>(slices),
                                 {.lr = lr, .step = update, .decay = entry.spec.decay, .shape = entry.spec.shape},
                                 grad_scale);
        }
    }

    // The host-tier state tensors' addresses (moments home: host).
    std::vector<R*> host_state() {
        std::vector<R*> out;
        for (auto& t : m_host->state) out.push_back(t.data());
        return out;
    }

    // Device gradients and the optimizer state (device and host tier) start at zero; storage
    // state is zeroed through `staging` (copy). Host weights and gradients are zero-filled when made.
    void zero(stream& compute, stream& io, std::span<tiered_tensor<R, host_tier, B>> staging) {
        if (m_dev_grads) zero_device(*m_dev_grads, compute);
        for (auto& t : m_dev_state) zero_device(t, compute);
        if (!owns_host()) return;
        for (auto& t : m_host->state) std::fill(t.span().begin(), t.span().end(), R(0));
        for (std::size_t i = 0; i < m_host->stored_state.size(); ++i) {
            std::vector<R> zeros(m_host->stored_state[i].numel(), R(0));
            copy(state_kind::optimizer_state(i), zeros, /*to_host=*/false, compute, io, staging);
        }
    }

    // Checkpoint I/O: block k of the group to (to_host) or from buf, wherever it lives: device
    // tensors on the compute stream (behind the device updates), storage files through `staging`
    // (one host buffer per state tensor, each as large as that state's largest stored block)
    // (free between steps) on io. Named waits. The caller checks the rank and the kind.
    void copy(state_kind k, std::span<R> buf, bool to_host, stream& compute, stream& io,
              std::span<tiered_tensor<R, host_tier, B>> staging) {
        using part = state_kind::part;
        auto check_size = [&](std::size_t numel) {
            if (buf.size() != numel) throw error("trainer: block size mismatch for group " + std::to_string(m_index));
        };
        if (on_device()) {
            auto& t = k.of == part::params ? *m_dev_params : k.of == part::grads ? *m_dev_grads : m_dev_state[k.index];
            check_size(t.numel());
            if (to_host)
                m_backend.copy(buf.data(), tier_id::host, t.device_data().get(), tier_id::device, t.bytes(), compute)
                    .wait();  // named: checkpoint I/O
            else
                m_backend.copy(t.device_data().get(), tier_id::device, buf.data(), tier_id::host, t.bytes(), compute)
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
        if (k.of == part::params) return host(*m_host->params);
        if (k.of == part::grads) return host(*m_host->grads);
        if (m_host->stored_state.empty()) return host(m_host->state[k.index]);
        auto& t = m_host->stored_state[k.index];
        check_size(t.numel());
        auto staged = staging[k.index].view().flat(0, t.shape());
        if (to_host) {
            copy_async(m_backend, staged, t.view(), io).wait();  // named: checkpoint I/O
            std::copy(staged.data(), staged.data() + staged.numel(), buf.begin());
        } else {
            std::copy(buf.begin(), buf.end(), staged.data());
            copy_async(m_backend, t.view(), staged, io).wait();  // named: checkpoint I/O
        }
    }

private:
    // A device tensor to zero on `s` (the backend's zero, in stream order).
    void zero_device(tiered_tensor<R, device_tier, B>& t, stream& s) {
        m_backend.zero(t.device_data().get(), tier_id::device, t.bytes(), s);
    }

    // The optimizer's state tensors (state_names() order) in the group's home, each laid out by
    // the optimizer's state shapes (m_state_layout: AdamW's as long as the trainable prefix):
    // "adamw.m.g3" (the optimizer's name, the state's, the group's: storage files are named so).
    template <class Optimizer>
    void allocate_state(const Optimizer& optimizer) {
        const auto names = optimizer.state_names();
        for (std::size_t i = 0; i < names.size(); ++i) {
            const shape ts{m_state_layout.numel(i)};
            const std::string name =
                std::string(optimizer.name()) + "." + std::string(names[i]) + ".g" + std::to_string(m_index);
            if (on_device())
                m_dev_state.emplace_back(m_backend, ts, name);
            else if (m_home.moments == tier_id::storage)
                m_host->stored_state.emplace_back(m_backend, ts, name);
            else
                m_host->state.emplace_back(m_backend, ts, name);
        }
    }

    B& m_backend;
    std::size_t m_index;
    const param_layout* m_layout;
    group_home m_home;
    bool m_both_ends;
    bool m_keeps_state;
    std::shared_ptr<host_group<R, B>> m_host;  // host-homed: its host side (rank 0's)
    bool m_owns_host;
    optimizer_state_layout m_state_layout;  // where each state tensor's parts are
    // Device-homed: its home; pinned: the step's copy of weights and gradients.
    std::optional<tiered_tensor<R, device_tier, B>> m_dev_params, m_dev_grads;
    std::vector<tiered_tensor<R, device_tier, B>> m_dev_state;  // device-homed, on the rank keeping it
    bool m_uploaded = false;  // this pass: a pinned group's weights are on the device
};

}  // namespace strata
