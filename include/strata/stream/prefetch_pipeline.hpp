// pipeline_engine: streams transformer blocks through a few device slots.
//
// The blocks' weights and gradients live in the host tier. The device holds `slots` weight slots
// (train_options::slots, the planner's memory_plan::slots) and as many gradient slots, each the size of one block, plus the small groups
// that are used at both ends of a pass (embeddings: tied LM head; final layernorm), which stay on
// the device for the whole step ("pinned"). Device memory is therefore O(slots x block +
// activations), independent of the number of layers. The prefetch depth is slots - 1: one slot
// computes while the others are filled.
//
// Three backend streams, ordered only by events:
//   h2d     weights (and, for micro-batches after the first, the accumulated gradients) into a
//           slot, slots - 1 uses ahead of compute, in forward order and then in reverse for backward;
//   compute waits for a slot's "ready" event, computes, records "free";
//   d2h     waits for a block's backward to finish and takes its gradients to the host at once
//           (work the trainer enqueues on compute before done(), such as the block's sum of
//           squares, is part of that "finished": the slot is reused only after it).
// Gradient accumulation is exact and bitwise equal to the resident trainer: a block's gradient
// slot starts from zero in the first micro-batch and from the host's accumulated gradients in
// the next ones, so the same kernels add the same numbers in the same order.
// Frozen tensors: a block's gradients are its trainable prefix (grad_bytes); a wholly frozen block
// streams host -> device only, with no gradient slot and no copy back.
#pragma once

#include <strata/backend/backend.hpp>       // Backend
#include <strata/core/error.hpp>            // strata::error
#include <strata/stream/group_binder.hpp>   // group_use
#include <strata/tensor/tiered_tensor.hpp>  // tiered_tensor

#include <cstddef>  // std::size_t
#include <functional>  // std::function
#include <string>   // std::string
#include <vector>   // std::vector

namespace strata {

// Bytes moved over each link, for the metrics (H2D and D2H counted when issued, storage once moved).
struct transfer_counters {
    std::size_t h2d_bytes = 0;
    std::size_t d2h_bytes = 0;
    std::size_t storage_read_bytes = 0;   // storage tier -> host: the training steps' reads
    std::size_t storage_write_bytes = 0;  // host -> storage tier: the training steps' writes
};

// The pipeline's slots, streams and events. Each pass lists the groups that stream (the
// transformer blocks); the others are pinned on the device by the trainer.
template <class R, Backend B>
class pipeline_engine {
public:
    using stream = typename B::stream;
    using event = typename B::event;

    // slots: device slots (2 at least when a block streams); block_numel: elements of the
    // largest streamed block (0: none streams, no slots); grad_numel: of the largest trainable
    // prefix of one (0: every streamed block is frozen, no gradient slots).
    pipeline_engine(B& backend, std::size_t slots, std::size_t block_numel, std::size_t grad_numel)
        : m_backend(backend), m_slots(block_numel > 0 ? slots : 1), m_h2d(backend.make_stream("h2d")), m_d2h(backend.make_stream("d2h")) {
        if (block_numel > 0 && slots < 2)
            throw error("train_options::slots is " + std::to_string(slots) +
                            ": streaming a block needs at least 2 device slots (one computes while the next is filled)",
                        "use the plan's slots (memory_plan::slots), 2 or more");
        for (std::size_t k = 0; k < m_slots && block_numel > 0; ++k) {  // 0: no block streams, no slots
            m_param_slots.emplace_back(backend, shape{block_numel}, "slot.params." + std::to_string(k));
            if (grad_numel > 0) m_grad_slots.emplace_back(backend, shape{grad_numel}, "slot.grads." + std::to_string(k));
        }
        m_param_ready.resize(m_slots);
        m_param_free.resize(m_slots);
        m_grad_ready.resize(m_slots);
        m_grad_free.resize(m_slots);
    }

    stream& h2d() { return m_h2d; }
    stream& d2h() { return m_d2h; }
    transfer_counters& counters() { return m_counters; }
    const transfer_counters& counters() const { return m_counters; }

    // One pass of the model over one micro-batch: the order in which it will use the streamed
    // groups, the host homes of their weights and gradients, and whether gradients start at zero.
    struct pass {
        std::vector<std::pair<std::size_t, group_use>> order;
        std::vector<R*> host_params;  // by group; null for groups that do not stream
        std::vector<R*> host_grads;   // by group
        std::vector<std::size_t> bytes;  // by group: its block's bytes (at most a slot's)
        std::vector<std::size_t> grad_bytes;  // by group: its gradients' bytes (0: frozen)
        std::vector<event>* last_d2h; // by group: the newest gradient copy to the host
        bool first_micro = true;
        // false on a data-parallel rank that does not own the host state (train/rank_link.hpp):
        // its gradients never go home: every micro-batch's slot starts from zero, and is free
        // again once done() is told that its reduction over the ranks is over.
        bool grads_home = true;
        // Called on the host just before group g's weights are copied to the device (may wait:
        // the trainer's optimizer may still be writing them); empty: nothing to wait for.
        std::function<void(std::size_t)> before_h2d;
        // Whether before_h2d(g) would return at once (group g's weights are written); empty:
        // always. A use ahead of the one in progress is issued only then, so that the host never
        // blocks on weights that compute does not need yet.
        std::function<bool(std::size_t)> h2d_ready;
    };

    void begin(pass p) {
        m_pass = std::move(p);
        m_issued = m_used = 0;
    }

    bool streams(std::size_t g) const { return g < m_pass.host_params.size() && m_pass.host_params[g] != nullptr; }

    // The use in progress is issued whatever it waits for; the uses after it (slots - 1 ahead at
    // most, in order) only where their weights are ready (pass::h2d_ready). Waiting here for a
    // later group's weights would hold this use's kernels back behind another group's update: in
    // a streamed step's forward the host optimizer is still updating the blocks ahead.
    const R* params(std::size_t g, stream& compute, group_use u) {
        check_next(g, u);
        while (m_issued <= m_used) issue(m_issued++);
        while (m_issued < m_pass.order.size() && m_issued < m_used + m_slots &&
               (!m_pass.h2d_ready || m_pass.h2d_ready(m_pass.order[m_issued].first)))
            issue(m_issued++);
        const std::size_t k = slot_of(m_used);
        compute.wait(m_param_ready[k]);
        return m_param_slots[k].device_data().get();
    }

    R* grads(std::size_t g, stream& compute) {
        if (m_used >= m_pass.order.size() || m_pass.order[m_used].first != g ||
            m_pass.order[m_used].second != group_use::backward)
            throw error("prefetch_pipeline: gradients of group " + std::to_string(g) + " asked for outside its backward");
        if (m_pass.grad_bytes[g] == 0) return nullptr;  // frozen
        const std::size_t k = slot_of(m_used);
        compute.wait(m_grad_ready[k]);
        return m_grad_slots[k].device_data().get();
    }

    // The gradient slot of the backward use in progress (grads() has handed it out): the trainer
    // reads it on compute before done(), e.g. for the block's sum of squares.
    R* grads_in_use() {
        if (m_used >= m_pass.order.size() || m_pass.order[m_used].second != group_use::backward)
            throw error("prefetch_pipeline: no backward use in progress (use " + std::to_string(m_used) + ")");
        if (m_pass.grad_bytes[m_pass.order[m_used].first] == 0) return nullptr;  // frozen
        return m_grad_slots[slot_of(m_used)].device_data().get();
    }

    // `reduced` (data-parallel): the event after which the slot's gradients are summed over the
    // ranks; they go home (or the slot is free) only then. Null: when compute has finished.
    void done(std::size_t g, stream& compute, group_use u, const event* reduced = nullptr) {
        // A wrong group or use here would release the wrong slot, or copy a slot's gradients into
        // another group's home.
        if (m_used >= m_pass.order.size() || m_pass.order[m_used].first != g || m_pass.order[m_used].second != u)
            throw error("prefetch_pipeline: done() for group " + std::to_string(g) + " (" +
                            (u == group_use::forward ? "forward" : "backward") +
                            ") does not end the use in progress (use " + std::to_string(m_used) + ")",
                        "the model's pass order and the pipeline's plan disagree: a bug in the model binder");
        const std::size_t k = slot_of(m_used);
        event finished = compute.record();
        m_param_free[k] = finished;
        if (u == group_use::backward && m_pass.grad_bytes[g] > 0) {
            const event& final_grads = reduced ? *reduced : finished;
            if (!m_pass.grads_home) {
                m_grad_free[k] = final_grads;
                ++m_used;
                return;
            }
            m_d2h.wait(final_grads);
            const std::size_t bytes = m_pass.grad_bytes[g];
            (*m_pass.last_d2h)[g] =
                m_backend.copy(m_pass.host_grads[g], tier_id::host, m_grad_slots[k].device_data().get(), tier_id::device,
                               bytes, m_d2h);
            m_grad_free[k] = (*m_pass.last_d2h)[g];
            m_counters.d2h_bytes += bytes;
        }
        ++m_used;
    }

private:
    std::size_t slot_of(std::size_t use) const { return (m_base + use) % m_slots; }

    void check_next(std::size_t g, group_use u) const {
        if (m_used >= m_pass.order.size() || m_pass.order[m_used].first != g || m_pass.order[m_used].second != u)
            throw error("prefetch_pipeline: the model used group " + std::to_string(g) +
                            " out of the planned order (use " + std::to_string(m_used) + ")",
                        "the model's pass order and the pipeline's plan disagree: a bug in the model binder");
    }

    // Brings use i's weights (and for backward its gradient slot) onto the device on h2d.
    void issue(std::size_t i) {
        const auto [g, u] = m_pass.order[i];
        const std::size_t k = slot_of(i);
        m_h2d.wait(m_param_free[k]);  // the slot's previous user has finished computing
        if (m_pass.before_h2d) m_pass.before_h2d(g);
        const std::size_t bytes = m_pass.bytes[g];
        m_backend.copy(m_param_slots[k].device_data().get(), tier_id::device, m_pass.host_params[g], tier_id::host,
                       bytes, m_h2d);
        m_counters.h2d_bytes += bytes;
        if (u == group_use::backward && m_pass.grad_bytes[g] > 0) {
            m_h2d.wait(m_grad_free[k]);  // the slot's previous gradients have reached the host
            R* slot = m_grad_slots[k].device_data().get();
            if (m_pass.first_micro || !m_pass.grads_home) {
                m_backend.zero(slot, tier_id::device, m_grad_slots[k].bytes(), m_h2d);
            } else {
                m_h2d.wait((*m_pass.last_d2h)[g]);  // the previous micro-batch's gradients are home
                m_backend.copy(slot, tier_id::device, m_pass.host_grads[g], tier_id::host, m_pass.grad_bytes[g], m_h2d);
                m_counters.h2d_bytes += m_pass.grad_bytes[g];
            }
            m_grad_ready[k] = m_h2d.record();
        }
        m_param_ready[k] = m_h2d.record();
    }

public:
    // Called after a pass: the next pass starts on the slot after the last one used.
    void end() { m_base = (m_base + m_used) % m_slots; }

private:
    B& m_backend;
    std::size_t m_slots;
    stream m_h2d, m_d2h;
    std::vector<tiered_tensor<R, device_tier, B>> m_param_slots, m_grad_slots;
    std::vector<event> m_param_ready, m_param_free, m_grad_ready, m_grad_free;
    pass m_pass;
    std::size_t m_issued = 0, m_used = 0, m_base = 0;
    transfer_counters m_counters;
};

}  // namespace strata
