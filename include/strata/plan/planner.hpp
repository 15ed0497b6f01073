// The memory planner: given a model's footprint for one micro-batch (plan/footprint.hpp: any
// decoder_model, GPT-2 included, read from the model itself) and each tier's byte budget, decide
// where the training state lives (resident on the device, or streamed through device slots from
// the host and storage), account for every byte per tier (plan/memory_plan.hpp; printed by
// plan/plan_table.hpp), and refuse with the numbers BEFORE anything is allocated when nothing fits.
// This header brings all four.
//
// The optimizer's state is one block per state tensor it names and group, as large as the
// optimizer's state shapes make it (optim/state_layout.hpp: AdamW m, v and SGD momentum the size of
// the gradients; Adafactor's factored row_var and col_var far smaller): the table's optimizer row
// ("AdamW m, v", "Adafactor row_var, col_var, variance") counts them all.
//
// Placements:
// - resident: weights, grads, the optimizer's state of every group, the activations and the step's
//   staging live in the device tier (tiered_trainer with no homes: every group on the device).
// - streamed: what tiered_trainer<R, B, Model> (train/tiered_trainer.hpp) allocates with
//   train_options::homes = memory_plan::trainer_homes() and train_options::slots = slots. Weights and grads of every group live in the host tier (pinned), the
//   optimizer's state in the host or the storage tier. The transformer blocks stream through the device: `slots`
//   weight buffers and as many gradient buffers, each the size of the largest transformer block
//   (not of the largest group: the embeddings never stream). A slot is filled host -> device while
//   the one before it computes, and its gradients drain device -> host, so slots = prefetch depth
//   + 1 (2 = one block in flight ahead of compute; 3 = two, which absorbs jitter of the link).
//   The groups used at both ends of a pass (group 0: wte + wpe; the final layernorm) are pinned:
//   their weights and grads are on the device for the whole step. Activations as resident. The
//   grad norm's per-group partial sums and the sum_of_squares workspace are on the device as in
//   the resident trainer, and the partials' host copy is staging. With the state on storage the
//   host optimizer reads one group's state tensors into host buffers the size of the largest
//   group (two sets: the next group's are read during the update), and writes them back.
// Every staging buffer (tokens, targets, losses per micro-batch, the partials' host copy, the
// optimizer's state buffers) is allocated with the trainer and kept: a pinned allocation inside a
// step would be an implicit synchronization on CUDA.
#pragma once

#include <strata/backend/backend.hpp>       // Backend
#include <strata/core/bytes.hpp>            // format_bytes
#include <strata/core/error.hpp>            // strata::error
#include <strata/model/activations.hpp>     // activation_policy, kept_activations
#include <strata/plan/footprint.hpp>        // model_footprint, footprint_of, detail::charged
#include <strata/plan/cost_model.hpp>       // predict, detail::cost (the search's time of a plan)
#include <strata/plan/machine.hpp>          // machine_rates
#include <strata/plan/memory_plan.hpp>      // memory_plan, placement, tier_bytes, plan_category
#include <strata/plan/plan_request.hpp>     // plan_request, default_budgets
#include <strata/optim/optimizers.hpp>      // any_optimizer, state_label
#include <strata/optim/state_layout.hpp>    // optimizer_state_layout
#include <strata/plan/plan_table.hpp>       // plan_table, homes_summary, traffic_summary
#include <strata/tensor/tiered_tensor.hpp>  // tiered_tensor (measure_links)
#include <strata/tier/group_home.hpp>       // group_home
#include <strata/tier/resources.hpp>        // physical_memory_bytes, free_disk_bytes
#include <strata/tier/tier.hpp>             // tier_id, name_of

#include <algorithm>         // std::max, std::min, std::find
#include <array>             // std::array
#include <chrono>            // std::chrono::steady_clock
#include <cstddef>           // std::size_t, std::byte
#include <cstdint>           // std::int32_t
#include <filesystem>        // std::filesystem::path, temp_directory_path
#include <initializer_list>  // std::initializer_list
#include <optional>          // std::optional
#include <string>            // std::string, std::to_string
#include <utility>           // std::move, std::as_const
#include <vector>            // std::vector

namespace strata {

namespace detail {

struct plan_inputs {
    model_footprint model;
    std::size_t state = 0, trainable_state = 0, largest = 0, largest_block = 0, largest_block_grads = 0;
    std::size_t pinned = 0, pinned_grads = 0;
    // The step's staging on the host: tokens, targets and losses of every micro-batch (both
    // trainers allocate them once, with the trainer).
    std::size_t step_staging = 0;
    // Both trainers' grad-norm partial sums, one on the device and one on the host.
    std::size_t partials = 0;
    // Both trainers' device workspace of sum_of_squares (the backend's, for the largest group).
    std::size_t norm_workspace = 0;
    // By group, then by state tensor: the bytes of the optimizer's state blocks (frozen: none).
    std::vector<std::vector<std::size_t>> state_blocks;
    std::vector<std::size_t> state_bytes;  // by group: their sum
    std::size_t all_state_bytes = 0;       // every group's
};

inline memory_plan base_plan(const plan_request& r, const plan_inputs& in, kept_activations kept) {
    memory_plan p;
    const std::size_t activations = in.model.activation_bytes(kept);
    p.block_count = in.model.blocks;
    p.kept_blocks = kept.of(in.model.blocks);
    p.offloaded_inputs = kept.offloaded(in.model.blocks);
    p.kept_parts = kept.parts(in.model.blocks);
    p.block_part_bytes = in.model.block_part_bytes;
    p.block_input_bytes = in.model.block_input_bytes;
    p.block_activation_bytes = in.model.block_activation_bytes;
    p.parameters = in.model.parameters;
    p.trainable_parameters = in.model.trainable_parameters;
    p.group_count = in.model.group_bytes.size();
    p.state_bytes = in.state;
    p.trainable_state_bytes = in.trainable_state;
    p.optimizer = r.optimizer;
    p.group_state_bytes = in.state_bytes;
    p.largest_group_bytes = in.largest;
    p.largest_block_bytes = in.largest_block;
    p.largest_block_grad_bytes = in.largest_block_grads;
    p.pinned_group_bytes = in.pinned;
    p.pinned_grad_bytes = in.pinned_grads;
    p.activation_bytes = activations;
    p.fewest_activation_bytes = in.model.activation_bytes(kept_activations::none());
    p.min_streamed_device_bytes = 2 * (in.largest_block + in.largest_block_grads) + in.pinned + in.pinned_grads +
                                  p.fewest_activation_bytes + in.partials + in.norm_workspace;
    p.budgets = r.budgets;
    p.of(plan_category::activations).device = activations;
    p.of(plan_category::activations).host = in.model.offloaded_input_bytes(kept);
    p.of(plan_category::staging).host = in.step_staging;
    // The grad norm's per-group partial sums: on the device with sum_of_squares' workspace, and
    // their copy on the host.
    p.device_staging_bytes = in.partials + in.norm_workspace;
    p.norm_partials_bytes = in.partials;
    p.of(plan_category::staging).device = in.partials + in.norm_workspace;
    p.of(plan_category::staging).host += in.partials;
    // Every rank stages its own micro-batches and norm partials on the host; the state is rank 0's.
    p.ranks = r.ranks;
    p.rank_staging_bytes = in.step_staging + in.partials;
    p.of(plan_category::staging).host += (r.ranks - 1) * p.rank_staging_bytes;
    return p;
}

// The device bytes of the optimizer state on the rank that keeps the most of it: with data
// parallelism each device-homed group's state is one rank's (device_state_owners, as the trainer
// assigns it); on one rank, all of it.
inline std::size_t largest_rank_device_state(const plan_inputs& in, const std::vector<group_home>& homes,
                                             std::size_t ranks) {
    const auto& trainable = in.model.trainable_bytes;
    std::vector<bool> device_state(trainable.size());
    for (std::size_t g = 0; g < trainable.size(); ++g)
        device_state[g] = homes[g].weights == tier_id::device && trainable[g] > 0;
    const auto owner = device_state_owners(device_state, ranks);
    std::vector<std::size_t> per_rank(ranks, 0);
    for (std::size_t g = 0; g < trainable.size(); ++g)
        if (device_state[g]) per_rank[owner[g]] += in.state_bytes[g];
    return *std::max_element(per_rank.begin(), per_rank.end());
}

inline memory_plan resident_plan(const plan_request& r, const plan_inputs& in, kept_activations kept) {
    memory_plan p = base_plan(r, in, kept);
    p.where = placement::resident;
    p.of(plan_category::weights).device = in.state;
    p.of(plan_category::grads).device = in.trainable_state;
    const std::vector<group_home> all_on_device(in.model.group_bytes.size(), group_home::device());
    p.of(plan_category::moments).device = largest_rank_device_state(in, all_on_device, r.ranks);
    return p;
}

// A streamed plan with `slots` device slots, `kept` blocks keeping their activations, and each
// group at its home: what tiered_trainer allocates for train_options::homes = homes.
inline memory_plan streamed_plan(const plan_request& r, const plan_inputs& in, std::size_t slots,
                                 const std::vector<group_home>& homes, kept_activations kept) {
    memory_plan p = base_plan(r, in, kept);
    p.where = placement::streamed;
    p.slots = slots;
    p.homes = homes;
    p.weights_home = p.grads_home = p.state_home = tier_id::device;
    const auto& groups = in.model.group_bytes;
    const auto& trainable = in.model.trainable_bytes;
    std::size_t largest_block = 0, largest_block_grads = 0;
    std::vector<std::size_t> largest_stored;  // by state tensor: its largest block of a storage group
    p.pinned_group_bytes = p.pinned_grad_bytes = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
        const group_home h = homes[g];
        const std::size_t w = groups[g], t = trainable[g];
        p.of(plan_category::weights)[h.weights] += w;
        p.of(plan_category::grads)[h.weights] += t;
        if (h.weights == tier_id::device) continue;  // its state: largest_rank_device_state, below
        p.of(plan_category::moments)[h.moments] += in.state_bytes[g];
        p.weights_home = p.grads_home = tier_id::host;
        if (h.moments == tier_id::storage) {
            p.state_home = tier_id::storage;
            largest_stored.resize(in.state_blocks[g].size());
            for (std::size_t i = 0; i < largest_stored.size(); ++i)
                largest_stored[i] = std::max(largest_stored[i], in.state_blocks[g][i]);
        } else if (p.state_home == tier_id::device) {
            p.state_home = tier_id::host;
        }
        if (g == 0 || g + 1 == groups.size()) {  // pinned: a device copy for the step
            p.pinned_group_bytes += w;
            p.pinned_grad_bytes += t;
        } else {
            largest_block = std::max(largest_block, w);
            largest_block_grads = std::max(largest_block_grads, t);
        }
    }
    p.of(plan_category::moments).device = largest_rank_device_state(in, homes, r.ranks);
    // A step's traffic: per micro-batch, each streamed block's weights go up for its forward and
    // again for its backward, its gradients come down after the backward and (after the first
    // micro-batch) go up again to accumulate; the pinned groups' weights go up and their gradients
    // come down once per step; each storage group's state tensors are read and written back once.
    const std::size_t A = r.accum;
    for (std::size_t g = 0; g < groups.size(); ++g) {
        const group_home h = homes[g];
        if (h.weights == tier_id::device) continue;
        const std::size_t w = groups[g], t = trainable[g];
        if (g == 0 || g + 1 == groups.size()) {
            p.per_step.h2d += w;
            p.per_step.d2h += t;
        } else {
            p.per_step.h2d += A * 2 * w + (A - 1) * t;
            p.per_step.d2h += A * t;
        }
        if (h.moments == tier_id::storage) {
            p.per_step.storage_read += in.state_bytes[g];
            p.per_step.storage_write += in.state_bytes[g];
        }
    }
    p.links = r.links;
    // No block streams: no slots (the trainer's pipeline allocates none).
    p.of(plan_category::slots).device = largest_block == 0 ? 0 : slots * (largest_block + largest_block_grads);
    p.of(plan_category::pinned).device = p.pinned_group_bytes + p.pinned_grad_bytes;
    // State on storage: the host optimizer reads a group's state tensors into host buffers (two
    // sets of the largest storage group's size: the next group is read while one is updated).
    for (const std::size_t b : largest_stored) p.of(plan_category::staging).host += 2 * b;
    return p;
}

// Every group streamed from the host, the optimizer's state on `moments` (host or storage).
inline std::vector<group_home> uniform_homes(std::size_t groups, tier_id moments) {
    return std::vector<group_home>(groups, {tier_id::host, moments});
}

// "device: needs X, budget Y (over by Z)" for every tier.
inline std::string needs_vs_budgets(const memory_plan& p) {
    std::string out;
    for (tier_id t : all_tiers) {
        if (!out.empty()) out += "; ";
        const std::size_t need = p.total(t), have = p.budgets[t];
        out += std::string(name_of(t)) + " needs " + format_bytes(need) + " of a " + format_bytes(have) + " budget";
        if (need > have) out += " (over by " + format_bytes(need - have) + ")";
    }
    return out;
}

inline std::string streaming_minimum(const memory_plan& p) {
    return "streaming needs at least " + format_bytes(p.min_streamed_device_bytes) +
           " on the device = 2 slots x (largest block's weights " + format_bytes(p.largest_block_bytes) + " + grads " +
           format_bytes(p.largest_block_grad_bytes) + ") + pinned groups " +
           format_bytes(p.pinned_group_bytes + p.pinned_grad_bytes) +
           " (embeddings and final layernorm, weights + grads) + activations with every block recomputing " +
           format_bytes(p.fewest_activation_bytes) +
           " + grad-norm staging " + format_bytes(p.device_staging_bytes);
}

// What to change when a plan does not fit, in the library's terms, with the settings it names
// (strata::error::settings(): a program shows its own flags for them).
struct plan_advice {
    std::string hint;
    std::vector<std::string> settings;
};

inline plan_advice plan_hint(const plan_request& r, const memory_plan& p) {
    plan_advice a;
    auto add = [&](const std::string& h, std::initializer_list<const char*> settings) {
        a.hint += (a.hint.empty() ? "" : "; ") + h;
        for (const char* s : settings)
            if (std::find(a.settings.begin(), a.settings.end(), s) == a.settings.end()) a.settings.emplace_back(s);
    };
    if (p.total(tier_id::device) > p.budgets.device) {
        add("lower the micro-batch (now " + std::to_string(r.model.batch) + ") or the sequence length (now " +
                std::to_string(r.model.seq) + ")",
            {"batch_size", "seq_len"});
        if (p.kept_blocks > 0) add("recompute the blocks' activations instead of keeping them", {"activations"});
        if (p.offloaded_inputs == 0 && p.kept_blocks < p.block_count)
            add("offload the recomputing blocks' inputs to host memory", {"activations"});
        add("raise the device budget", {"device_budget"});
    }
    if (p.total(tier_id::host) > p.budgets.host) {
        add("raise the host budget", {"host_budget"});
        if (p.state_home != tier_id::storage)
            add("keep the " + p.state_label() + " on storage (a storage directory)", {"storage_dir"});
    }
    if (p.total(tier_id::storage) > p.budgets.storage)
        add("choose a storage directory on a disk with more free space, or raise the storage budget",
            {"storage_dir", "storage_budget"});
    return a;
}

[[noreturn]] inline void refuse(const plan_request& r, const memory_plan& p, const std::string& why) {
    auto advice = plan_hint(r, p);
    throw error("memory plan: " + why + ": " + needs_vs_budgets(p) + "; " + streaming_minimum(p), std::move(advice.hint),
                std::move(advice.settings));
}

inline void validate(const plan_request& r) {
    const model_footprint& model = r.model;
    auto positive = [](std::size_t v, const char* name) {
        if (v == 0) throw error(std::string("memory plan: ") + name + " must be positive");
    };
    positive(r.ranks, "the count of data-parallel ranks");
    positive(model.batch, "the micro-batch");
    positive(model.seq, "the sequence length");
    positive(r.accum, "accum");
    if (model.seq > model.max_seq)
        throw error("memory plan: sequence length " + std::to_string(model.seq) + " exceeds the model's context " +
                        std::to_string(model.max_seq),
                    "lower the sequence length or build the model with a longer context", {"seq_len"});
    if (r.slots && *r.slots < 2)
        throw error("memory plan: " + std::to_string(*r.slots) + " device slot(s) asked for; streaming needs at least 2",
                    "one slot computes while the next one is filled: ask for 2 or more slots");
}

}  // namespace detail

// The host <-> device links of `backend`, measured: the best of three copies of `bytes` each way
// between pinned host memory and the device (allocated from the tiers' budgets, given back).
// Storage is not measured (the page cache would answer, not the disk): its entries stay 0.
template <Backend B>
link_bandwidths measure_links(B& backend, std::size_t bytes = std::size_t(256) << 20) {
    tiered_tensor<std::byte, host_tier, B> host(backend, shape{bytes}, "links.host");
    tiered_tensor<std::byte, device_tier, B> device(backend, shape{bytes}, "links.device");
    auto s = backend.make_stream("links");
    auto best = [&](auto copy) {
        double seconds = 0;
        for (int i = 0; i < 3; ++i) {
            const auto start = std::chrono::steady_clock::now();
            copy().wait();  // named: one timed copy
            const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            seconds = i == 0 ? t : std::min(seconds, t);
        }
        return seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0;
    };
    link_bandwidths l;
    l.h2d = best([&] { return device.copy_from(host, s); });
    l.d2h = best([&] { return host.copy_from(device, s); });
    return l;
}

namespace detail {

// The bytes of each state tensor's block of group g, as the trainer allocates them
// (optimizer_state_layout), for the optimizer o; none for a frozen group. A footprint without
// layouts (made by hand) counts the group's trainable prefix as one vector.
inline std::vector<std::size_t> state_block_bytes(const any_optimizer& o, const model_footprint& f, std::size_t g) {
    std::vector<std::size_t> out;
    if (f.trainable_bytes[g] == 0) return out;
    if (g < f.layouts.size()) {
        const auto layout = f.element_bytes == sizeof(double) ? optimizer_state_layout::of<double>(o, f.layouts[g])
                                                              : optimizer_state_layout::of<float>(o, f.layouts[g]);
        for (std::size_t i = 0; i < layout.state_count(); ++i) out.push_back(layout.numel(i) * f.element_bytes);
        return out;
    }
    const std::size_t eb = std::max<std::size_t>(f.element_bytes, 1), n = f.trainable_bytes[g] / eb;
    for (std::size_t i = 0; i < o.state_names().size(); ++i) {
        const std::size_t numel = o.state_shape(i, shape{n}).numel();
        out.push_back(charged(std::max<std::size_t>(numel, 1) * eb));
    }
    return out;
}

// What every plan of `request` shares: the model's groups summed up, and the trainers' staging.
inline plan_inputs inputs_of(const plan_request& request) {
    plan_inputs in;
    in.model = request.model;
    const auto& groups = in.model.group_bytes;
    const auto& trainable = in.model.trainable_bytes;
    if (groups.size() < 3 || trainable.size() != groups.size())
        throw error("memory plan: a model footprint needs the embeddings, at least one block and the final norm");
    for (std::size_t g = 0; g < groups.size(); ++g) {
        in.state += groups[g];
        in.trainable_state += trainable[g];
        in.largest = std::max(in.largest, trainable[g]);
    }
    // groups: embeddings, the blocks, the final norm
    for (std::size_t g = 1; g + 1 < groups.size(); ++g) {
        in.largest_block = std::max(in.largest_block, groups[g]);
        in.largest_block_grads = std::max(in.largest_block_grads, trainable[g]);
    }
    in.pinned = groups.front() + groups.back();
    in.pinned_grads = trainable.front() + trainable.back();
    // The trainers' staging: per micro-batch host copies of tokens, targets and losses; and the
    // grad-norm partial sums (one double per group) on the device and on the host.
    const std::size_t BT = in.model.batch * in.model.seq;
    in.partials = charged(groups.size() * sizeof(double));
    in.norm_workspace = in.model.norm_workspace_bytes;
    for (std::size_t g = 0; g < groups.size(); ++g) {
        in.state_blocks.push_back(state_block_bytes(request.optimizer, in.model, g));
        std::size_t sum = 0;
        for (const std::size_t b : in.state_blocks.back()) sum += b;
        in.state_bytes.push_back(sum);
        in.all_state_bytes += sum;
    }
    in.step_staging = request.accum * (2 * charged(BT * sizeof(std::int32_t)) + charged(BT * in.model.element_bytes));
    return in;
}

// A plan, and when it does not fit, why (the refusal's first words).
struct ruled_plan {
    memory_plan plan;
    std::string why;
};

// The fixed rules (the planner without a machine's rates):
// auto: resident when everything fits the device budget; otherwise streamed, with the optimizer's
// state on the host unless state_on_storage asks for storage or the host cannot hold it (then
// storage must, the last groups' first).
// Streamed takes the requested slots, else 3 when they fit the device, else 2.
// Activations come first: as many blocks keep theirs as leave a plan that fits (the groups fill
// what the device has left), within the policy (recompute: none; keep: all).
inline ruled_plan rule_plan(const plan_request& request, const plan_inputs& in) {
    const auto& groups = in.model.group_bytes;
    const auto& trainable = in.model.trainable_bytes;
    // The activations are planned last, on what the placement leaves of the device budget: the
    // policy's fewest kept blocks decide the placement, then as many blocks as fit keep theirs.
    const std::size_t L = in.model.blocks;
    const activation_policy policy = request.activations;
    const std::size_t fewest = policy == activation_policy::keep ? L : 0;
    const std::size_t most = policy == activation_policy::recompute ? 0 : L;
    // The plan make(kept) with the most kept blocks in [fewest, most] that fits (the device bytes
    // grow with them), or make(fewest) when even that does not fit; offload: the recomputing
    // blocks' inputs in host memory. auto offloads only when nothing fits otherwise (the copies
    // run on the compute stream: at short contexts they cost about what a recompute saves).
    auto most_kept_with = [&](auto make, bool offload) {
        memory_plan p = make(kept_activations{fewest, offload});
        if (!p.fits()) return p;
        std::size_t lo = fewest, hi = most;  // make(lo) fits
        while (lo < hi) {
            const std::size_t mid = lo + (hi - lo + 1) / 2;
            if (make(kept_activations{mid, offload}).fits())
                lo = mid;
            else
                hi = mid - 1;
        }
        return lo == fewest ? p : make(kept_activations{lo, offload});
    };
    auto most_kept = [&](auto make) {
        if (policy == activation_policy::offload) return most_kept_with(make, true);
        memory_plan p = most_kept_with(make, false);
        if (policy != activation_policy::automatic) return p;
        if (p.fits()) return p;
        memory_plan q = most_kept_with(make, true);
        return q.fits() ? q : p;
    };

    if (request.where != placement::streamed) {
        memory_plan resident = most_kept([&](kept_activations k) { return resident_plan(request, in, k); });
        if (resident.fits() || request.where == placement::resident) {
            const std::string states = state_label("", request.optimizer.state_names());  // " m, v"
            return {resident, "resident placement does not fit (weights, grads," + states + ": " +
                                  format_bytes(in.state + in.trainable_state + in.all_state_bytes) + ", activations " +
                                  format_bytes(resident.activation_bytes) + ")"};
        }
    }

    const std::size_t G = groups.size();
    // The plan for `homes` with the optimizer state of host groups on storage where the host cannot
    // hold them: the last groups' first (they are updated last, so their reads have the most time),
    // or every host group's when the user asked for storage.
    auto spill = [&](std::vector<group_home> homes, std::size_t slots, kept_activations k) {
        auto to_storage = [&](std::size_t g) {
            if (homes[g].weights == tier_id::host && trainable[g] > 0) homes[g].moments = tier_id::storage;
        };
        if (request.state_on_storage)
            for (std::size_t g = 0; g < G; ++g) to_storage(g);
        memory_plan p = streamed_plan(request, in, slots, homes, k);
        for (std::size_t g = G; g-- > 0 && p.total(tier_id::host) > p.budgets.host;) {
            if (homes[g].weights != tier_id::host || homes[g].moments == tier_id::storage || trainable[g] == 0) continue;
            to_storage(g);
            p = streamed_plan(request, in, slots, homes, k);
        }
        return p;
    };
    // The homes for `kept` blocks keeping their activations: every group streamed from the host;
    // then, unless the placement is forced to streamed, groups move to the device while it holds
    // them: the embeddings and the final norm (whose device copies exist anyway), then blocks 0,
    // 1, ... (the first blocks: the next step's forward uses them while the host still updates
    // the rest). What the device does not take stays on the host, and the optimizer state the
    // host cannot hold goes to storage.
    auto placed = [&](std::size_t slots, kept_activations kept) {
        auto homes = uniform_homes(G, tier_id::host);
        memory_plan p = spill(homes, slots, kept);
        if (request.where == placement::streamed) return p;
        std::vector<std::size_t> order{0, G - 1};
        for (std::size_t g = 1; g + 1 < G; ++g) order.push_back(g);
        for (std::size_t g : order) {
            auto trial = homes;
            trial[g] = group_home::device();
            memory_plan q = spill(trial, slots, kept);
            if (q.total(tier_id::device) > q.budgets.device) {
                if (g == 0 || g == G - 1) continue;
                break;  // the device-homed blocks stay a prefix
            }
            homes = std::move(trial);
            p = std::move(q);
        }
        return p;
    };
    auto streamed = [&](std::size_t slots) {
        return most_kept([&](kept_activations k) { return placed(slots, k); });
    };
    // Why the optimizer's state is on storage when nobody asked: the host alone cannot hold it.
    auto moments_note = [&](const memory_plan& p) -> std::string {
        if (request.state_on_storage || p.state_home != tier_id::storage) return "";
        const memory_plan on_host = streamed_plan(request, in, p.slots, uniform_homes(G, tier_id::host), p.kept());
        return " (" + p.state_label() + " went to storage: with them the host would need " +
               format_bytes(on_host.total(tier_id::host)) + ")";
    };
    const std::size_t slots = request.slots.value_or(3);
    memory_plan p = streamed(slots);
    if (!p.fits() && !request.slots) p = streamed(2);
    return {p, "streamed placement with " + std::to_string(p.slots) + " slots does not fit" + moments_note(p)};
}

// The fastest plan of `request` that fits on a machine of rates `m`, by the cost model
// (plan/cost_model.hpp), of the placements the trainer supports:
//   resident, with the most kept blocks the device holds (inputs offloaded or not; under auto
//   and offload, where the blocks name a part to keep (nn/layer.hpp, RecomputesPart), the
//   recomputing blocks keeping it or not: the step's time decides, not a rule);
//   streamed with 2 or 3 slots (or the requested count), the embeddings on the device or the
//   host (the final norm on the device: it is small), blocks 0 .. d-1 on the device for every d,
//   the most kept blocks the device then holds (the same choices), and the fewest host
//   groups' state on storage that the host and the storage budgets allow, the last groups' first
//   or the first groups' first (all of them when state_on_storage asks).
// Each choice the search does not enumerate is exact: keeping one more block's activations and
// spilling one group less never make a step slower (the simulation's times only grow with its
// work), so the most kept blocks and the fewest spills are the best of their kind. `first` (the
// fixed rules' plan) wins every near tie: another plan is chosen only when predicted faster by
// more than fastest_plan_margin (the model's differences below that are not worth a placement
// the user did not see before). Deterministic; plans that need a rate `m` lacks are skipped.
// Empty when no candidate fits.
inline constexpr double fastest_plan_margin = 0.02;

inline std::optional<memory_plan> fastest_plan(const plan_request& request, const plan_inputs& in,
                                               const machine_rates& m, const memory_plan* first) {
    std::optional<memory_plan> best;
    double best_seconds = 0;
    auto consider = [&](const memory_plan& p) {
        if (!p.fits() || !cost::missing_rate(p, request, m).empty()) return;
        const cost::work_times w = cost::times_of(p, request, m);
        const double margin = best ? best_seconds * (1 - 1e-9) : 0;
        if (best && cost::compute_bound(p, request, w) >= margin) return;
        const double seconds = cost::simulate(p, request, w, request.accum).seconds;
        if (best && seconds >= margin) return;
        best = p;
        best_seconds = seconds;
    };
    if (first) consider(*first);
    const bool first_counts = best.has_value();  // it fits, and the rates time it
    const double first_seconds = best_seconds;

    const std::size_t L = in.model.blocks, G = in.model.group_bytes.size();
    const auto& trainable = in.model.trainable_bytes;
    const activation_policy policy = request.activations;
    const std::size_t fewest = policy == activation_policy::keep ? L : 0;
    const std::size_t most = policy == activation_policy::recompute ? 0 : L;
    // How the recomputing blocks recompute (the count aside): inputs offloaded or not; keeping
    // their layer's part (selective recompute) or not, where the blocks name one and the policy
    // leaves the choice (auto, offload).
    std::vector<kept_activations> modes{{0, policy == activation_policy::offload}};
    if (policy == activation_policy::automatic) modes.push_back({0, true});
    if (in.model.block_part_bytes > 0 &&
        (policy == activation_policy::automatic || policy == activation_policy::offload))
        for (std::size_t i = 0, n = modes.size(); i < n; ++i) modes.push_back({0, modes[i].offload_inputs, true});
    // The plan make(k) with the most kept blocks in [fewest, most] whose device bytes fit (they
    // grow with the kept blocks; nothing else of the plan depends on them but time); empty if none.
    auto most_kept = [&](auto make, kept_activations mode) -> std::optional<std::size_t> {
        auto device_fits = [&](std::size_t kept) {
            mode.count = kept;
            const memory_plan p = make(mode);
            return p.total(tier_id::device) <= p.budgets.device;
        };
        if (!device_fits(fewest)) return std::nullopt;
        std::size_t lo = fewest, hi = most;
        while (lo < hi) {
            const std::size_t mid = lo + (hi - lo + 1) / 2;
            if (device_fits(mid))
                lo = mid;
            else
                hi = mid - 1;
        }
        return lo;
    };

    if (request.where != placement::streamed)
        for (kept_activations mode : modes) {
            auto make = [&](kept_activations k) { return resident_plan(request, in, k); };
            if (const auto kept = most_kept(make, mode)) consider(make({*kept, mode.offload_inputs, mode.keep_parts}));
        }
    if (request.where == placement::resident) return best;

    const bool forced = request.where == placement::streamed;  // every group on the host
    std::vector<std::size_t> slot_choices{3, 2};
    if (request.slots) slot_choices = {*request.slots};
    std::vector<tier_id> embedding_homes{tier_id::host};
    if (!forced) embedding_homes.insert(embedding_homes.begin(), tier_id::device);
    for (std::size_t slots : slot_choices)
        for (kept_activations mode : modes)
            for (tier_id embeddings : embedding_homes)
                for (std::size_t d = forced ? 0 : L + 1; d-- > 0;) {
                    std::vector<group_home> homes = uniform_homes(G, tier_id::host);
                    if (embeddings == tier_id::device) homes[0] = group_home::device();
                    if (!forced) homes[G - 1] = group_home::device();
                    for (std::size_t l = 0; l < d; ++l) homes[1 + l] = group_home::device();
                    auto make = [&](kept_activations k) { return streamed_plan(request, in, slots, homes, k); };
                    const auto kept = most_kept(make, mode);
                    if (!kept) continue;
                    const kept_activations k{*kept, mode.offload_inputs, mode.keep_parts};
                    // The host groups with state, in the two orders their state may go to storage.
                    std::vector<std::size_t> late;
                    for (std::size_t g = G; g-- > 0;)
                        if (homes[g].weights == tier_id::host && trainable[g] > 0) late.push_back(g);
                    const std::vector<std::size_t> early(late.rbegin(), late.rend());
                    for (const std::vector<std::size_t>* order : std::array{&std::as_const(late), &early}) {
                        // The fewest spilled groups (a prefix of the order) with which the host
                        // and storage budgets hold: host bytes fall with each spill after the
                        // first (its two staging sets), storage bytes grow.
                        std::vector<group_home> spilled = homes;
                        std::size_t count = request.state_on_storage ? order->size() : 0;
                        for (std::size_t i = 0; i < count; ++i) spilled[(*order)[i]].moments = tier_id::storage;
                        memory_plan p = streamed_plan(request, in, slots, spilled, k);
                        while (!p.fits() && count < order->size() && p.total(tier_id::storage) <= p.budgets.storage) {
                            spilled[(*order)[count++]].moments = tier_id::storage;
                            p = streamed_plan(request, in, slots, spilled, k);
                        }
                        consider(p);
                        if (request.state_on_storage) break;  // one order: all of them
                    }
                }
    if (first_counts && first_seconds <= best_seconds * (1 + fastest_plan_margin)) return *first;
    return best;
}

}  // namespace detail

// Chooses a placement for `request`, or throws a strata::error with every tier's needed and
// available bytes. Nothing is allocated.
//
// With the machine's rates (plan_request::rates, one rank, placement not forced resident): the
// fitting plan with the least predicted time per token (detail::fastest_plan; plan/cost_model.hpp),
// of which the fixed rules' plan is one, so no shape gets a plan predicted slower than theirs.
// Without rates: the fixed rules (detail::rule_plan).
// The trainer that allocates exactly a plan is tiered_trainer<R, B, Model> with train_options::homes =
// memory_plan::trainer_homes(), train_options::slots = memory_plan::slots and
// train_options::activations = memory_plan::kept().
// state_on_storage only shapes streamed plans: a resident plan keeps everything on the device.
inline memory_plan plan(const plan_request& request) {
    detail::validate(request);
    const detail::plan_inputs in = detail::inputs_of(request);
    const detail::ruled_plan ruled = detail::rule_plan(request, in);
    const bool fits = ruled.plan.fits();
    if (request.rates && request.ranks == 1 && request.where != placement::resident)
        if (auto fastest = detail::fastest_plan(request, in, *request.rates, fits ? &ruled.plan : nullptr))
            return *std::move(fastest);
    if (fits) return ruled.plan;
    detail::refuse(request, ruled.plan, ruled.why);
}

}  // namespace strata
