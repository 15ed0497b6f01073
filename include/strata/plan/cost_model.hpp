// The step's cost model: predict(plan, request, rates) simulates one optimizer step of the trainer
// (train/tiered_trainer.hpp, resident or streamed, any mix of homes) on a machine's rates
// (plan/machine.hpp) and says how long it takes, what bounds it, and how busy each resource is.
//
// It is an event simulation of the trainer's own streams and threads, issued in the trainer's
// order, not a sum of maxima:
//   host       the thread that calls step(): it enqueues everything below in program order and
//              blocks only where the trainer waits (each host group's previous update before its
//              weights first go up; the norm at the end of the backward; every gradient copy home);
//   compute    the device stream: per micro-batch the embeddings, each block's forward (offloaded
//              inputs saved to the host on this stream), the final norm and LM head forward and
//              backward, each block's backward in reverse (recomputing blocks first run their
//              forward again, or with kept parts the rest of it, offloaded inputs brought back
//              first), the embeddings' backward; then
//              the sums of squares, and the device-homed groups' optimizer updates;
//   h2d, d2h   pipeline_engine with `slots` slots: a streamed block's weights (and, after the first
//              micro-batch, its accumulated gradients) go up `slots - 1` uses ahead of compute into
//              a slot whose previous use has finished; its gradients come down after its backward;
//              the pinned groups go up once per step and their gradients come down at the end;
//   storage    the I/O stream, one FIFO: the first two storage groups' state is read as the step
//              starts (a task of the optimizer thread, behind the previous step's updates), each
//              group's written back after its update, and group j + 2's read behind group j's
//              write-back (two staging sets);
//   optimizer  the host optimizer's thread (all cores): after the norm, each host group in group
//              order (embeddings, blocks 0.., final norm), each behind its own last gradient copy.
// Every operation starts when the stream or thread it runs on is free, the operations it waits for
// have finished and it has been issued; so the next step's forward waits, block by block, for the
// host updates of the step before. Three steps are simulated; the third is the steady state.
//
// Durations: GEMMs at rates.gemm_flops (a block's backward is 2x its forward GEMMs, the LM head's
// forward and backward 3x, nn/layer.hpp's convention); attention at rates.attention_flops, counted
// as machine.hpp says (4 B T^2 C forward + 8 B T^2 C backward), of which the forward takes
// attention_forward_share of the time (the CUDA kernels: backward 3.2-4x the forward); elementwise
// passes (a block's saved activations written and read, the logits, the sums of squares) at
// rates.device_memory; the device optimizer at rates.device_optimizer[name] parameters per second
// (an optimizer without one: memory-bound, its tensors read and written at rates.device_memory);
// copies at rates.h2d and rates.d2h alone, and at their share of rates.duplex while both
// directions stream (backward uses); the host optimizer at
// rates.host_optimizer[name] parameters per second; storage at storage_read and storage_write.
// What the model leaves out: kernel launch gaps, the host's own enqueue time, copies competing with
// compute for device memory bandwidth, the I/O engine competing with the optimizer for cores.
#pragma once

#include <strata/core/error.hpp>         // strata::error
#include <strata/plan/machine.hpp>       // machine_rates
#include <strata/plan/memory_plan.hpp>   // memory_plan, placement
#include <strata/plan/plan_request.hpp>  // plan_request
#include <strata/tier/tier.hpp>          // tier_id

#include <algorithm>         // std::max, std::min, std::max_element
#include <array>             // std::array
#include <cstddef>           // std::size_t
#include <initializer_list>  // std::initializer_list
#include <map>               // std::map
#include <string>            // std::string
#include <string_view>       // std::string_view
#include <utility>           // std::pair
#include <vector>            // std::vector

namespace strata {

// What a step's time goes to: the resources of the simulation (device_optimizer is work on the
// compute stream, told apart because a plan changes it by where it homes groups).
enum class step_resource { compute, pcie_up, pcie_down, storage, host_optimizer, device_optimizer };
inline constexpr std::array<step_resource, 6> all_step_resources{
    step_resource::compute, step_resource::pcie_up,        step_resource::pcie_down,
    step_resource::storage, step_resource::host_optimizer, step_resource::device_optimizer};

constexpr std::string_view name_of(step_resource r) {
    switch (r) {
        case step_resource::compute: return "compute";
        case step_resource::pcie_up: return "PCIe up (H2D)";
        case step_resource::pcie_down: return "PCIe down (D2H)";
        case step_resource::storage: return "storage";
        case step_resource::host_optimizer: return "host optimizer";
        case step_resource::device_optimizer: return "device optimizer";
    }
    return "unknown";
}

// Of a causal attention's forward + backward time, the forward's (the two-kernel CUDA backward
// takes 4x the forward: kernels/cuda/attention.cuh). The key-tile backward that ops<cuda_backend>
// runs where its partials fit (kernels/cuda/attention_backward.cuh) is 1.21x (B=8 T=1024) to
// 1.26x (B=1 T=32768) faster than the two kernels, so about 3.2-3.3x the forward, a share of
// 0.23-0.24 if the 4x holds; kept at 0.2 until strata_bench_attention's bwd/fwd column measures
// both (scripts/gpu-attention-check.sh). Only the split moves: the total is rates.attention_flops,
// which plan/calibrate.hpp measures through ops<B>, so with the backward the model runs.
inline constexpr double attention_forward_share = 0.2;

struct step_prediction {
    double seconds = 0;            // one optimizer step (steady state)
    std::size_t tokens = 0;        // per step: accum x B x T
    double tokens_per_second = 0;
    // The resource with the most time on the step's critical path.
    step_resource bottleneck = step_resource::compute;
    std::array<double, all_step_resources.size()> busy_seconds{};      // each resource's work in a step
    std::array<double, all_step_resources.size()> critical_seconds{};  // its time on the critical path
    // Where a link, the disk or the host optimizer bounds the step: the least accum at which
    // compute does, and tokens/s then (0: none up to 256x the request's).
    std::size_t compute_bound_accum = 0;
    double compute_bound_tokens_per_second = 0;

    double busy(step_resource r) const { return busy_seconds[static_cast<std::size_t>(r)]; }
    double busy_fraction(step_resource r) const { return seconds > 0 ? busy(r) / seconds : 0.0; }
    double critical(step_resource r) const { return critical_seconds[static_cast<std::size_t>(r)]; }
};

namespace detail::cost {

// The streams and threads of the simulation; each runs its operations one after another (FIFO).
enum class lane { host, compute, h2d, d2h, io, optimizer };

struct operation {
    double start = 0, end = 0;
    int cause = -1;  // the operation whose end set this one's start (-1: time 0)
    step_resource resource = step_resource::compute;
    lane where = lane::host;
    int step = 0;
};

// Operations in issue order, each started as early as its lane, its issuer and its dependencies allow.
class timeline {
public:
    timeline() { m_ops.push_back({}); }  // 0: the host at time 0

    int host() const { return m_host; }
    int step = 0;  // the step the next operations belong to
    const std::vector<operation>& ops() const { return m_ops; }
    double end_of(int op) const { return op < 0 ? 0.0 : m_ops[op].end; }

    // `seconds` of work on `l`, enqueued when `issuer` ended, after every op of `deps` (-1: none).
    int run(lane l, step_resource r, double seconds, int issuer, std::initializer_list<int> deps) {
        operation o{.resource = r, .where = l, .step = step};
        auto later = [&](int op) {
            if (op >= 0 && (o.cause < 0 || m_ops[op].end > o.start)) {
                o.start = m_ops[op].end;
                o.cause = op;
            }
        };
        for (int d : deps) later(d);
        later(m_last[static_cast<std::size_t>(l)]);
        later(issuer);
        o.end = o.start + seconds;
        m_ops.push_back(o);
        const int id = static_cast<int>(m_ops.size()) - 1;
        m_last[static_cast<std::size_t>(l)] = id;
        return id;
    }
    // The host blocks until `event` has finished (a named wait of the trainer).
    void host_wait(int event) {
        if (event >= 0 && m_ops[event].end > m_ops[m_host].end)
            m_host = run(lane::host, step_resource::compute, 0.0, m_host, {event});
    }
    // The last operation of a lane (-1: none yet).
    int last(lane l) const { return m_last[static_cast<std::size_t>(l)]; }

private:
    std::vector<operation> m_ops;
    std::array<int, 6> m_last{-1, -1, -1, -1, -1, -1};
    int m_host = 0;
};

// Seconds of each piece of work, from the footprint, the plan and the rates.
struct work_times {
    double block_forward = 0, block_backward = 0;  // compute, per micro-batch
    double block_recompute = 0;  // a recomputing block's forward again (with kept parts: the rest of it)
    double input_save = 0, input_restore = 0;       // an offloaded block input, on the compute stream
    double head = 0;                                // final norm + LM head + cross-entropy, forward and backward
    double embeddings = 0;                          // the embeddings' forward (and again their backward)
    // Per group: weights up (alone, beside the gradients coming down), gradients up and down
    // (beside the other direction; alone for the pinned groups' once-a-step copies).
    std::vector<double> weights_up, weights_up_shared, grads_up_shared, grads_down, grads_down_shared;
    std::vector<double> zero_grads, sum_of_squares, device_update, host_update, state_read, state_write;
};

inline double seconds_of(double amount, double rate) { return amount <= 0 ? 0.0 : amount / rate; }

// The first rate the plan needs that `rates` does not know (0), as machine.hpp names it; "" when
// every one is known.
inline std::string missing_rate(const memory_plan& p, const plan_request& r, const machine_rates& m) {
    const model_footprint& f = r.model;
    if (f.block_gemm_flops <= 0 && f.head_flops <= 0) return "the model's FLOPs (footprint_of reads none)";
    if (f.block_gemm_flops + f.head_flops > 0 && m.gemm_flops <= 0) return "gemm_flops";
    if (f.block_attention_flops > 0 && m.attention_flops <= 0) return "attention_flops";
    if (m.device_memory <= 0) return "device_memory";
    bool host = false, storage = false;
    for (const group_home& h : p.homes) {
        host = host || h.weights == tier_id::host;
        storage = storage || h.moments == tier_id::storage;
    }
    if ((host || p.offloaded_inputs > 0) && (m.h2d <= 0 || m.d2h <= 0)) return m.h2d <= 0 ? "h2d" : "d2h";
    if (storage && (m.storage_read <= 0 || m.storage_write <= 0))
        return m.storage_read <= 0 ? "storage_read" : "storage_write";
    if (host) {
        const auto it = m.host_optimizer.find(std::string(r.optimizer.name()));
        if (it == m.host_optimizer.end() || it->second <= 0)
            return "host_optimizer[\"" + std::string(r.optimizer.name()) + "\"]";
    }
    return "";
}

inline work_times times_of(const memory_plan& p, const plan_request& r, const machine_rates& m) {
    const model_footprint& f = r.model;
    work_times w;
    const double mem = m.device_memory, eb = static_cast<double>(f.element_bytes);
    // Attention's forward + backward seconds for `flops` counted forward FLOPs.
    const auto attention_of = [&](double flops) { return 3.0 * flops / std::max(m.attention_flops, 1.0); };
    const double attention = attention_of(f.block_attention_flops);
    // A block's forward writes its saved activations and reads them in its backward, twice over
    // (elementwise work reads its input and writes its output).
    const auto forward_of = [&](double gemm_flops, double attention_flops, double activation_bytes) {
        return seconds_of(gemm_flops, m.gemm_flops) + attention_forward_share * attention_of(attention_flops) +
               2.0 * activation_bytes / mem;
    };
    const double elementwise = 2.0 * static_cast<double>(f.block_activation_bytes) / mem;
    w.block_forward = forward_of(f.block_gemm_flops, f.block_attention_flops, static_cast<double>(f.block_activation_bytes));
    w.block_backward = seconds_of(2.0 * f.block_gemm_flops, m.gemm_flops) + (1 - attention_forward_share) * attention +
                       2.0 * elementwise;
    w.block_recompute = w.block_forward;
    if (p.kept_parts > 0) {
        // The block's recompute from its part: its own FLOPs, the rest of the activations written,
        // and the part copied out after the forward and back before the recompute (read and write each).
        const double part = static_cast<double>(f.block_part_bytes);
        const double rest = std::max(0.0, static_cast<double>(f.block_activation_bytes) - part);
        w.block_recompute = forward_of(f.block_part_recompute_gemm_flops, f.block_part_recompute_attention_flops, rest) +
                            4.0 * part / mem;
    }
    const double input = static_cast<double>(f.block_input_bytes);
    w.input_save = seconds_of(input, m.d2h);
    w.input_restore = seconds_of(input, m.h2d);
    // The head's forward and backward: 3x its forward GEMMs; the logits written and read, their
    // gradient written and read.
    w.head = seconds_of(3.0 * f.head_flops, m.gemm_flops) + 4.0 * static_cast<double>(f.logits_bytes) / mem;
    w.embeddings = 2.0 * input / mem;

    // Each direction's share of the duplex rate while both stream.
    const double both = m.h2d + m.d2h;
    const double up_shared = m.duplex > 0 && m.duplex < both ? m.duplex * m.h2d / both : m.h2d;
    const double down_shared = m.duplex > 0 && m.duplex < both ? m.duplex * m.d2h / both : m.d2h;
    const auto rate_of = [&](const std::map<std::string, double>& rates) {
        const auto it = rates.find(std::string(r.optimizer.name()));
        return it == rates.end() ? 0.0 : it->second;
    };
    const double host_rate = rate_of(m.host_optimizer), device_rate = rate_of(m.device_optimizer);
    const std::size_t G = f.group_bytes.size();
    for (auto* v : {&w.weights_up, &w.weights_up_shared, &w.grads_up_shared, &w.grads_down, &w.grads_down_shared,
                    &w.zero_grads, &w.sum_of_squares, &w.device_update, &w.host_update, &w.state_read, &w.state_write})
        v->assign(G, 0.0);
    for (std::size_t g = 0; g < G; ++g) {
        const double bytes = static_cast<double>(f.group_bytes[g]), grads = static_cast<double>(f.trainable_bytes[g]);
        const double states = static_cast<double>(p.group_state_bytes[g]);  // every state tensor's
        const bool on_device = p.where == placement::resident || p.homes[g].weights == tier_id::device;
        w.zero_grads[g] = grads / mem;
        w.sum_of_squares[g] = grads / mem;
        if (on_device) {
            // At the optimizer's measured device rate; without one, memory-bound: it reads the
            // weights, the gradients and each state tensor, and writes the weights and the state.
            w.device_update[g] = device_rate > 0 ? grads / eb / device_rate : (3.0 * grads + 2.0 * states) / mem;
            continue;
        }
        w.weights_up[g] = seconds_of(bytes, m.h2d);
        w.weights_up_shared[g] = seconds_of(bytes, up_shared);
        w.grads_up_shared[g] = seconds_of(grads, up_shared);
        w.grads_down[g] = seconds_of(grads, m.d2h);
        w.grads_down_shared[g] = seconds_of(grads, down_shared);
        w.host_update[g] = seconds_of(grads / eb, host_rate);
        if (p.homes[g].moments == tier_id::storage) {
            w.state_read[g] = seconds_of(states, m.storage_read);
            w.state_write[g] = seconds_of(states, m.storage_write);
        }
    }
    return w;
}

// The trainer's step, issued in its order onto a timeline (train/tiered_trainer.hpp:
// step_or_throw, stream/prefetch_pipeline.hpp, model/decoder.hpp: forward_backward).
class step_simulator {
public:
    step_simulator(const memory_plan& p, const plan_request& r, const work_times& w, std::size_t accum)
        : m_plan(p), m_request(r), m_w(w), m_accum(accum) {
        const std::size_t G = r.model.group_bytes.size(), L = r.model.blocks;
        m_homes = p.where == placement::resident ? std::vector<group_home>(G, group_home::device()) : p.homes;
        m_slots = std::max<std::size_t>(p.slots, 2);
        for (std::size_t l = 0; l < L; ++l)
            if (streams(1 + l)) m_order.push_back({1 + l, false});
        for (std::size_t l = L; l-- > 0;)
            if (streams(1 + l)) m_order.push_back({1 + l, true});
        m_updated.assign(G, -1);
        m_last_d2h.assign(G, -1);
        m_param_free.assign(m_slots, -1);
        m_grad_free.assign(m_slots, -1);
        m_ready.assign(m_slots, -1);
    }

    timeline& time() { return m_t; }
    // One optimizer step; returns the host's operation when step() returns.
    int step() {
        const std::size_t G = m_homes.size(), L = m_request.model.blocks;
        std::vector<bool> uploaded(G, false);
        read_first_stored();
        double zero = 0;  // begin_pass: the device gradients start from zero
        for (std::size_t g = 0; g < G; ++g)
            if (!streams(g)) zero += m_w.zero_grads[g];
        compute(zero, {});
        for (std::size_t k = 0; k < m_accum; ++k) {
            m_first_micro = k == 0;
            const bool last_micro = k + 1 == m_accum;
            m_issued = m_used = 0;
            compute(m_w.embeddings, {pinned_params(0, uploaded)});
            for (std::size_t l = 0; l < L; ++l) {
                const int ready = params(1 + l);
                if (offloads(l)) compute(m_w.input_save, {ready});
                compute(m_w.block_forward, {ready});
                done(1 + l, false, last_micro);
            }
            const int final_norm = pinned_params(G - 1, uploaded);
            compute(m_w.head, {final_norm, pinned_params(0, uploaded)});
            for (std::size_t l = L; l-- > 0;) {
                const int ready = params(1 + l);
                if (l >= m_plan.kept_blocks) {
                    if (offloads(l)) compute(m_w.input_restore, {ready});
                    compute(m_w.block_recompute, {ready});
                }
                compute(m_w.block_backward, {ready});
                done(1 + l, true, last_micro);
            }
            compute(m_w.embeddings, {});
            m_base = (m_base + m_used) % m_slots;
        }
        // end_backward: the sums of squares of the groups with device gradients; the pinned ones home
        for (std::size_t g = 0; g < G; ++g)
            if (!streams(g)) compute(m_w.sum_of_squares[g], {});
        for (std::size_t g = 0; g < G; ++g)
            if (pinned(g) && trains(g))
                m_last_d2h[g] = m_t.run(lane::d2h, step_resource::pcie_down, m_w.grads_down[g], m_t.host(),
                                        {m_t.last(lane::compute)});
        m_t.host_wait(m_t.last(lane::compute));  // the norm (and the losses)
        for (std::size_t g = 0; g < G; ++g)
            if (on_device(g) && trains(g))
                m_t.run(lane::compute, step_resource::device_optimizer, m_w.device_update[g], m_t.host(), {});
        schedule_host_updates();
        for (std::size_t g = 0; g < G; ++g)  // every gradient copy has landed
            if (m_last_d2h[g] >= 0) m_t.host_wait(m_last_d2h[g]);
        return m_t.host();
    }

private:
    using lane = detail::cost::lane;

    bool on_device(std::size_t g) const { return m_homes[g].weights == tier_id::device; }
    bool used_at_both_ends(std::size_t g) const { return g == 0 || g + 1 == m_homes.size(); }
    bool pinned(std::size_t g) const { return !on_device(g) && used_at_both_ends(g); }
    bool streams(std::size_t g) const { return !on_device(g) && !used_at_both_ends(g); }
    bool trains(std::size_t g) const { return m_request.model.trainable_bytes[g] > 0; }
    bool offloads(std::size_t l) const { return m_plan.offloaded_inputs > 0 && l >= m_plan.kept_blocks; }
    std::size_t slot_of(std::size_t use) const { return (m_base + use) % m_slots; }

    int compute(double seconds, std::initializer_list<int> deps) {
        return m_t.run(lane::compute, step_resource::compute, seconds, m_t.host(), deps);
    }

    // A pinned group's device copy, uploaded at its first use in the step after its last update.
    int pinned_params(std::size_t g, std::vector<bool>& uploaded) {
        if (!pinned(g) || uploaded[g]) return -1;
        uploaded[g] = true;
        m_t.host_wait(m_updated[g]);
        return m_t.run(lane::h2d, step_resource::pcie_up, m_w.weights_up[g], m_t.host(), {});
    }

    // pipeline_engine::params: issue the use in progress (the host waits for its update if need
    // be), then up to slots - 1 uses ahead as long as their updates have finished by the host's
    // time (pass::h2d_ready); the use's slot is then ready.
    int params(std::size_t g) {
        if (!streams(g)) return -1;
        const std::size_t depth = m_slots - 1;
        while (m_issued <= m_used) issue(m_issued++);
        while (m_issued < m_order.size() && m_issued <= m_used + depth && updated_by_now(m_order[m_issued].first))
            issue(m_issued++);
        return m_ready[slot_of(m_used)];
    }

    // pass::h2d_ready: group g's update of the last step has finished by the host's time.
    bool updated_by_now(std::size_t g) const {
        return m_updated[g] < 0 || m_t.end_of(m_updated[g]) <= m_t.end_of(m_t.host());
    }

    void issue(std::size_t i) {
        const auto [g, backward] = m_order[i];
        const std::size_t k = slot_of(i);
        m_t.host_wait(m_updated[g]);  // before_h2d: the previous step's update of g has finished
        int ready = m_t.run(lane::h2d, step_resource::pcie_up,
                            backward ? m_w.weights_up_shared[g] : m_w.weights_up[g], m_t.host(), {m_param_free[k]});
        if (backward && trains(g)) {
            if (m_first_micro)  // the slot zeroed on the h2d stream
                ready = m_t.run(lane::h2d, step_resource::pcie_up, m_w.zero_grads[g], m_t.host(), {m_grad_free[k]});
            else
                ready = m_t.run(lane::h2d, step_resource::pcie_up, m_w.grads_up_shared[g], m_t.host(),
                                {m_grad_free[k], m_last_d2h[g]});
        }
        m_ready[k] = ready;
    }

    void done(std::size_t g, bool backward, bool last_micro) {
        if (!streams(g)) return;
        const std::size_t k = slot_of(m_used);
        if (backward && trains(g)) {
            if (last_micro) compute(m_w.sum_of_squares[g], {});
            const int finished = m_t.last(lane::compute);
            m_last_d2h[g] = m_grad_free[k] =
                m_t.run(lane::d2h, step_resource::pcie_down, m_w.grads_down_shared[g], m_t.host(), {finished});
        }
        m_param_free[k] = m_t.last(lane::compute);
        ++m_used;
    }

    // The host-homed groups that train with their state on storage, in group order.
    std::vector<std::size_t> stored_groups() const {
        std::vector<std::size_t> stored;
        for (std::size_t g = 0; g < m_homes.size(); ++g)
            if (!on_device(g) && trains(g) && m_homes[g].moments == tier_id::storage) stored.push_back(g);
        return stored;
    }

    // As the step starts, a task of the optimizer thread reads the first two storage groups' state.
    void read_first_stored() {
        const std::vector<std::size_t> stored = stored_groups();
        if (stored.empty()) return;
        const int task = m_t.run(lane::optimizer, step_resource::host_optimizer, 0.0, m_t.host(), {});
        m_read[0] = m_t.run(lane::io, step_resource::storage, m_w.state_read[stored[0]], task, {});
        if (stored.size() > 1) m_read[1] = m_t.run(lane::io, step_resource::storage, m_w.state_read[stored[1]], task, {});
    }

    // The optimizer thread's tasks, in group order, each behind its group's last gradient copy; a
    // storage group's task writes its state back and then reads the state of the storage group two
    // after it into the staging set it used.
    void schedule_host_updates() {
        const std::size_t G = m_homes.size();
        const std::vector<std::size_t> stored = stored_groups();
        std::size_t next_stored = 0;
        for (std::size_t g = 0; g < G; ++g) {
            if (on_device(g) || !trains(g)) continue;
            if (m_homes[g].moments != tier_id::storage) {
                m_updated[g] = m_t.run(lane::optimizer, step_resource::host_optimizer, m_w.host_update[g], m_t.host(),
                                       {m_last_d2h[g]});
                continue;
            }
            const std::size_t j = next_stored++;
            const int task = m_t.run(lane::optimizer, step_resource::host_optimizer, 0.0, m_t.host(), {});
            m_updated[g] = m_t.run(lane::optimizer, step_resource::host_optimizer, m_w.host_update[g], task,
                                   {m_last_d2h[g], m_read[j % 2]});
            m_t.run(lane::io, step_resource::storage, m_w.state_write[g], m_updated[g], {});
            if (j + 2 < stored.size())
                m_read[j % 2] = m_t.run(lane::io, step_resource::storage, m_w.state_read[stored[j + 2]], m_updated[g], {});
        }
    }

    const memory_plan& m_plan;
    const plan_request& m_request;
    const work_times& m_w;
    std::size_t m_accum;
    std::vector<group_home> m_homes;
    std::size_t m_slots = 2;
    std::vector<std::pair<std::size_t, bool>> m_order;  // the streamed uses of a pass: (group, backward)
    timeline m_t;
    std::vector<int> m_updated, m_last_d2h;            // by group
    std::vector<int> m_param_free, m_grad_free, m_ready;  // by slot
    std::array<int, 2> m_read{-1, -1};                  // by staging set
    std::size_t m_issued = 0, m_used = 0, m_base = 0;
    bool m_first_micro = true;
};

// Simulates three steps with `accum` micro-batches and reads the third.
inline step_prediction simulate(const memory_plan& p, const plan_request& r, const work_times& w, std::size_t accum) {
    step_simulator sim(p, r, w, accum);
    constexpr int steps = 3;
    std::array<int, steps> ends{};
    for (int s = 0; s < steps; ++s) {
        sim.time().step = s;
        ends[static_cast<std::size_t>(s)] = sim.step();
    }
    const timeline& t = sim.time();
    const auto& ops = t.ops();
    const double from = t.end_of(ends[steps - 2]), to = t.end_of(ends[steps - 1]);
    step_prediction out;
    out.seconds = to - from;
    out.tokens = accum * r.model.batch * r.model.seq;
    out.tokens_per_second = out.seconds > 0 ? static_cast<double>(out.tokens) / out.seconds : 0.0;
    for (const operation& o : ops)
        if (o.step == steps - 1 && o.where != lane::host)
            out.busy_seconds[static_cast<std::size_t>(o.resource)] += o.end - o.start;
    // The critical path: back from the step's end through what set each start, within the step.
    for (int op = ends[steps - 1]; op >= 0 && ops[op].end > from; op = ops[op].cause)
        if (ops[op].where != lane::host)
            out.critical_seconds[static_cast<std::size_t>(ops[op].resource)] += ops[op].end - std::max(ops[op].start, from);
    const auto most = std::max_element(out.critical_seconds.begin(), out.critical_seconds.end());
    out.bottleneck = all_step_resources[static_cast<std::size_t>(most - out.critical_seconds.begin())];
    return out;
}

// The step's compute alone (every operation of the compute stream in one step): no placement of
// this plan's activations and homes can be faster. The planner's search skips a candidate whose
// bound is no better than the best plan so far.
inline double compute_bound(const memory_plan& p, const plan_request& r, const work_times& w) {
    const std::size_t L = r.model.blocks, recomputing = L - std::min(p.kept_blocks, L);
    double micro = w.embeddings * 2 + w.head + static_cast<double>(L) * (w.block_forward + w.block_backward) +
                   static_cast<double>(recomputing) * w.block_recompute;
    if (p.offloaded_inputs > 0) micro += static_cast<double>(recomputing) * (w.input_save + w.input_restore);
    double once = 0;
    for (std::size_t g = 0; g < w.device_update.size(); ++g) once += w.device_update[g];
    return static_cast<double>(r.accum) * micro + once;
}

}  // namespace detail::cost

// The predicted step of plan `p` (planned for request `r`) on a machine of rates `m`; for a step
// that a link, the disk or the host optimizer bounds, also the accum at which compute does.
// Throws a strata::error naming the first rate the plan needs and `m` lacks.
inline step_prediction predict(const memory_plan& p, const plan_request& r, const machine_rates& m) {
    if (const std::string missing = detail::cost::missing_rate(p, r, m); !missing.empty())
        throw error("step prediction: the machine's rates lack " + missing + " (0: unknown), which this plan needs",
                    "calibrate this machine or give a machine file with it");
    if (r.accum == 0) throw error("step prediction: accum must be positive");
    const detail::cost::work_times w = detail::cost::times_of(p, r, m);
    step_prediction out = detail::cost::simulate(p, r, w, r.accum);
    if (out.bottleneck == step_resource::compute || out.bottleneck == step_resource::device_optimizer) return out;
    // The least accum in (accum, 256 accum] at which compute bounds the step: doubling, then halving.
    auto bound_by_compute = [&](std::size_t accum) {
        const step_prediction q = detail::cost::simulate(p, r, w, accum);
        return std::pair{q.bottleneck == step_resource::compute, q.tokens_per_second};
    };
    std::size_t below = r.accum, above = 0;
    for (std::size_t a = 2 * r.accum; a <= 256 * r.accum; a *= 2) {
        if (bound_by_compute(a).first) {
            above = a;
            break;
        }
        below = a;
    }
    if (above == 0) return out;
    while (above - below > 1) {
        const std::size_t mid = below + (above - below) / 2;
        (bound_by_compute(mid).first ? above : below) = mid;
    }
    out.compute_bound_accum = above;
    out.compute_bound_tokens_per_second = bound_by_compute(above).second;
    return out;
}

}  // namespace strata
