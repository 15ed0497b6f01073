// The memory planner: given a model (a GPT config, or the footprint of any decoder_model), the
// micro-batch, and each tier's byte budget, decide
// where the training state lives (resident on the device, or streamed through device slots from
// the host and storage), account for every byte per tier, print it as a table, and refuse with
// the numbers BEFORE anything is allocated when nothing fits.
//
// The arithmetic is the model's own, not an estimate: parameter blocks come from the same
// param_layout (page-padded groups), activations from the model's list of device tensors
// (gpt_model::activations, decoder_model::activation_buffers) with each allocation padded to whole
// pages, as every backend charges its budget. Frozen tensors (param_spec::trainable = false) count
// as weights only: no gradients, no optimizer state, no gradient slots (model_footprint).
//
// The optimizer's state is one block per state tensor it names (optim/optimizers.hpp:
// state_names_of; AdamW m, v; SGD momentum), each the size of the gradients: the table's optimizer
// row ("AdamW m, v", "SGD momentum") counts them all.
//
// Placements:
// - resident: weights, grads, the optimizer's state of every group, the activations and the step's
//   staging live in the device tier (trainer<R, B>: tiered_trainer with every group on the device).
// - streamed: what tiered_trainer<R, B, Depth, MomentsTier> (train/streamed_trainer.hpp)
//   allocates, chosen as trainer_t<R, B, prefetch_pipeline<slots - 1>, moments_in<host_tier or
//   storage_tier>>. Weights and grads of every group live in the host tier (pinned), the
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
//
// plan<B> sizes the activations with ops<B>::attention_saved, so the backend's ops header
// (nn/cpu_ops.hpp, nn/cuda_ops.hpp) must be included before plan<B> is used.
#pragma once

#include <strata/backend/backend.hpp>       // Backend
#include <strata/core/bytes.hpp>            // format_bytes, page_size, round_up
#include <strata/core/error.hpp>            // strata::error
#include <strata/model/activations.hpp>     // activation_policy, kept_activations
#include <strata/model/gpt.hpp>             // gpt_model (activations' block sizes), gpt_*_params
#include <strata/nn/gpt2_config.hpp>        // gpt_config
#include <strata/nn/ops.hpp>                // detail::norm_workspace_doubles
#include <strata/optim/optimizers.hpp>      // optimizer_kind, state_names_of, display_name_of
#include <strata/tensor/param_layout.hpp>   // param_layout
#include <strata/tensor/tiered_tensor.hpp>  // tiered_tensor (measure_links)
#include <strata/tier/group_home.hpp>       // group_home
#include <strata/tier/resources.hpp>        // physical_memory_bytes, free_disk_bytes
#include <strata/tier/tier.hpp>             // tier_id, name_of

#include <strata/core/format.hpp>  // fmt::format (host only)

#include <algorithm>    // std::max, std::find
#include <initializer_list>  // std::initializer_list
#include <array>        // std::array
#include <chrono>       // std::chrono::steady_clock
#include <cstddef>      // std::size_t
#include <cstdint>      // std::int32_t
#include <filesystem>   // std::filesystem::path, temp_directory_path
#include <optional>     // std::optional
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace strata {

// Where the training state lives. `automatic` is only a request: a plan is resident or streamed.
enum class placement { automatic, resident, streamed };

constexpr std::string_view name_of(placement p) {
    switch (p) {
        case placement::automatic: return "auto";
        case placement::resident: return "resident";
        case placement::streamed: return "streamed";
    }
    return "unknown";
}

// "auto" | "resident" | "streamed", as a command line writes it.
inline placement placement_from_string(std::string_view text) {
    for (placement p : {placement::automatic, placement::resident, placement::streamed})
        if (text == name_of(p)) return p;
    throw error("unknown placement '" + std::string(text) + "'", "use auto, resident or streamed");
}

// Bytes per tier (a budget, or what one category takes in each tier).
struct tier_bytes {
    std::size_t device = 0;
    std::size_t host = 0;
    std::size_t storage = 0;

    std::size_t& operator[](tier_id t) { return t == tier_id::device ? device : t == tier_id::host ? host : storage; }
    std::size_t operator[](tier_id t) const {
        return t == tier_id::device ? device : t == tier_id::host ? host : storage;
    }
};

inline constexpr std::array<tier_id, 3> all_tiers{tier_id::device, tier_id::host, tier_id::storage};

// The machine's budgets, as tier_resources would default them: host = 90 % of RAM, storage = the
// free disk at `storage_dir` (empty: the temp directory, where tier_resources puts its files).
// The device budget comes from the caller: only the backend knows its free memory.
inline tier_bytes default_budgets(std::size_t device_bytes, const std::filesystem::path& storage_dir = {}) {
    return {.device = device_bytes,
            .host = physical_memory_bytes() / 10 * 9,
            .storage = free_disk_bytes(storage_dir.empty() ? std::filesystem::temp_directory_path() : storage_dir)};
}

// What the planner needs to know of a model: the bytes of its groups and of its activations. Made
// by footprint_of<B>(model, batch, seq) from the model itself.
struct model_footprint {
    std::size_t max_seq = 0;
    std::size_t parameters = 0, trainable_parameters = 0;
    std::vector<std::size_t> group_bytes;      // weights of each group, page-padded (group order)
    std::vector<std::size_t> trainable_bytes;  // its gradients (= each optimizer state tensor): the trainable prefix; 0: frozen
    // Activations: every allocation but the blocks' saved activations, page-padded (tokens and
    // targets included), and one block's saved activations in bytes (unpadded: kept blocks and the
    // shared recompute buffer are one allocation of kept_activations::buffers blocks).
    // The block inputs are apart: one input (B x T x C) in bytes, times kept_activations::input_slots.
    std::size_t activation_fixed_bytes = 0;
    std::size_t block_activation_bytes = 0;
    std::size_t block_input_bytes = 0;
    std::size_t blocks = 0;                    // transformer blocks (groups 1 .. n-2)
    std::size_t norm_workspace_bytes = 0;      // sum_of_squares' workspace (the trainers')

    // Device bytes of the activations when `kept` blocks keep theirs (block inputs included).
    std::size_t activation_bytes(kept_activations kept) const {
        return activation_fixed_bytes + round_up(std::max<std::size_t>(kept.input_slots(blocks) * block_input_bytes, 1),
                                                 page_size) +
               round_up(std::max<std::size_t>(kept.buffers(blocks) * block_activation_bytes, 1), page_size);
    }
    // Pinned host bytes of the offloaded block inputs.
    std::size_t offloaded_input_bytes(kept_activations kept) const {
        const std::size_t n = kept.offloaded(blocks);
        return n == 0 ? 0 : round_up(n * block_input_bytes, page_size);
    }
    // Groups 1 .. n-2 are the streamed blocks; 0 (embeddings) and n-1 (final norm) are pinned.
};

// Bytes per second of each link the training state crosses; 0: unknown.
struct link_bandwidths {
    double h2d = 0, d2h = 0, storage_read = 0, storage_write = 0;
};

// Bytes one optimizer step moves over each link (what transfer_counters count in a step).
struct link_bytes {
    std::size_t h2d = 0, d2h = 0, storage_read = 0, storage_write = 0;
};

struct plan_request {
    gpt_config model;                          // the GPT to plan, unless `footprint` is set
    std::optional<model_footprint> footprint;  // any other model (decoder_model): footprint_of<B>
    std::size_t batch = 4;       // micro-batch B
    std::size_t seq = 128;       // T
    std::size_t accum = 1;       // micro-batches per optimizer step
    // keep: every block keeps its activations; recompute: none does; automatic: as many as the
    // device budget holds once everything else is planned (memory_plan::kept_blocks).
    activation_policy activations = activation_policy::automatic;
    std::size_t element_bytes = 4;  // 4: float, 8: double (the model's R)
    tier_bytes budgets;
    placement where = placement::automatic;
    bool moments_on_storage = false;  // the user gave a storage directory: the optimizer's state goes to storage when streamed
    std::optional<std::size_t> slots;  // device slots when streamed (>= 2); empty: 3 if it fits, else 2
    link_bandwidths links;             // measured or told; 0: unknown (the table then gives bytes only)
    optimizer_kind optimizer = optimizer_kind::adamw;  // whose state tensors to count (train_options::optimizer)
};

// What the bytes are for: the rows of the plan's table. `moments` is the optimizer's state (every
// state tensor; the table labels it with their names: memory_plan::label_of). `slots` and `pinned`
// are the device copies of streamed and pinned groups (weights + grads) whose homes are on the host.
enum class plan_category { weights, grads, moments, activations, slots, pinned, staging };
inline constexpr std::array<plan_category, 7> all_plan_categories{
    plan_category::weights, plan_category::grads,  plan_category::moments, plan_category::activations,
    plan_category::slots,   plan_category::pinned, plan_category::staging};

constexpr std::string_view name_of(plan_category c) {
    switch (c) {
        case plan_category::weights: return "weights";
        case plan_category::grads: return "grads";
        case plan_category::moments: return "optimizer state";
        case plan_category::activations: return "activations";
        case plan_category::slots: return "device slots";
        case plan_category::pinned: return "pinned groups";
        case plan_category::staging: return "staging";
    }
    return "unknown";
}

struct memory_plan {
    placement where = placement::resident;
    tier_id weights_home = tier_id::device;
    tier_id grads_home = tier_id::device;
    // The optimizer's state: the slowest tier any group's state uses. m_home and v_home are
    // AdamW's names for it, kept for callers that name them (both equal state_home).
    tier_id state_home = tier_id::device;
    tier_id m_home = tier_id::device;
    tier_id v_home = tier_id::device;
    tier_id activations_home = tier_id::device;  // block inputs and kept activations
    std::size_t block_count = 0;   // transformer blocks
    std::size_t kept_blocks = 0;   // of them, those that keep their activations (the first ones)
    std::size_t offloaded_inputs = 0;  // of the others, those whose inputs wait in pinned host memory
    std::size_t block_input_bytes = 0;  // one block's input (B x T x C)
    std::size_t block_activation_bytes = 0;  // one block's saved activations
    // streamed: device buffers for block weights, and as many for their gradients (prefetch depth
    // + 1); resident: 0
    std::size_t slots = 0;
    // Each group's home (streamed plans; the trainer's train_options::homes): a prefix of groups
    // on the device (embeddings and final norm first, then blocks 0, 1, ...), the rest streamed
    // from the host, the last ones' optimizer state on storage when the host cannot hold them.
    // weights_home / state_home above are the slowest tier any group's weights / state use.
    std::vector<group_home> homes;
    // Streamed plans: the bytes a step moves per link, and the bandwidths the estimate uses.
    link_bytes per_step;
    link_bandwidths links;

    std::size_t parameters = 0;           // real parameters of the model
    std::size_t trainable_parameters = 0; // of them, the trainable ones (the rest is frozen)
    std::size_t trainable_state_bytes = 0;  // one kind of gradient/state blocks (the trainable prefixes)
    optimizer_kind optimizer = optimizer_kind::adamw;  // whose state the moments row counts
    std::size_t optimizer_states = 2;       // its state tensors per trainable parameter
    std::size_t group_count = 0;          // layer groups (embeddings, blocks, final layernorm)
    std::size_t state_bytes = 0;          // one kind (e.g. the weights) of every group, page-padded
    std::size_t largest_group_bytes = 0;  // the largest trainable prefix of any group (state staging)
    std::size_t largest_block_bytes = 0;  // weights of the largest transformer block: one weight slot
    std::size_t largest_block_grad_bytes = 0;  // its largest trainable prefix: one gradient slot
    std::size_t pinned_group_bytes = 0;   // weights of the pinned groups (embeddings + final norm)
    std::size_t pinned_grad_bytes = 0;    // their gradients (0 when frozen)
    std::size_t activation_bytes = 0;     // the model's activations on the device (kept_blocks kept)
    std::size_t fewest_activation_bytes = 0;  // ... with every block recomputing
    std::size_t device_staging_bytes = 0;  // the grad-norm partial sums and workspace (both placements)
    std::size_t norm_partials_bytes = 0;   // the grad-norm partial sums (on the device and the host)
    // The least device memory any streamed plan needs: 2 slots x (the largest block's weights +
    // gradients) + the pinned groups (weights + grads) + activations (every block recomputing) +
    // the grad norm's staging.
    std::size_t min_streamed_device_bytes = 0;

    tier_bytes budgets;
    std::array<tier_bytes, all_plan_categories.size()> bytes{};  // by plan_category

    tier_bytes& of(plan_category c) { return bytes[static_cast<std::size_t>(c)]; }
    const tier_bytes& of(plan_category c) const { return bytes[static_cast<std::size_t>(c)]; }
    std::size_t bytes_of(plan_category c, tier_id t) const { return of(c)[t]; }

    std::size_t total(tier_id t) const {
        std::size_t sum = 0;
        for (const auto& row : bytes) sum += row[t];
        return sum;
    }
    bool fits() const {
        for (tier_id t : all_tiers)
            if (total(t) > budgets[t]) return false;
        return true;
    }

    // What the trainers' train_options::activations must be for this plan.
    kept_activations kept() const { return {kept_blocks, offloaded_inputs > 0}; }
    // What train_options::homes must be: the streamed plans' homes; resident: none (all device).
    std::vector<group_home> trainer_homes() const { return where == placement::resident ? std::vector<group_home>{} : homes; }
    // "embeddings, final norm, blocks 0-23: device; blocks 24-31: host; blocks 32-39: host, AdamW
    // m, v on storage": the homes as runs of groups.
    std::string homes_summary() const;
    // "AdamW m, v", "SGD momentum": the optimizer's state, as the table and messages name it.
    std::string state_label() const {
        return strata::state_label(display_name_of(optimizer), state_names_of(optimizer));
    }
    // A table row's label: the category's name, the optimizer's state for `moments`.
    std::string label_of(plan_category c) const {
        return c == plan_category::moments ? state_label() : std::string(name_of(c));
    }
    // "H2D 38.20 GiB (0.76 s at 50.1 GB/s), D2H ...": per_step per link, with the seconds the
    // bandwidths give (bytes only where a bandwidth is unknown).
    std::string traffic_summary() const;

    std::string to_table() const;
};

namespace detail {

// Calls f(R{}) with the element type of `element_bytes`.
template <class F>
decltype(auto) with_element_type(std::size_t element_bytes, F&& f) {
    if (element_bytes == sizeof(float)) return f(float{});
    if (element_bytes == sizeof(double)) return f(double{});
    throw error("memory plan: element size " + std::to_string(element_bytes) + " bytes is not supported",
                "use 4 (float) or 8 (double)");
}

// What a backend charges its budget for one allocation of `bytes`.
constexpr std::size_t charged(std::size_t bytes) { return round_up(bytes == 0 ? 1 : bytes, page_size); }

// "12.00 MiB": short enough for a table column ("-" for nothing).
inline std::string short_bytes(std::size_t bytes) { return bytes == 0 ? "-" : format_bytes_short(bytes); }

inline std::string percent_of(std::size_t part, std::size_t whole) {
    if (whole == 0) return part == 0 ? "-" : "over";
    return fmt::format("{:.1f} %", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// "124.44 M", "1.77 B" parameters.
inline std::string parameter_count(std::size_t n) {
    const double x = static_cast<double>(n);
    return x >= 1e9 ? fmt::format("{:.2f} B", x / 1e9) : fmt::format("{:.2f} M", x / 1e6);
}

}  // namespace detail

// Page-padded bytes of one kind (weights, or grads, or m, or v) of each layer group, in group
// order: the same blocks gpt_model<R, B>(config).groups()[g].bytes() allocates.
inline std::vector<std::size_t> gpt_group_bytes(const gpt_config& config, std::size_t element_bytes) {
    config.validate();
    return detail::with_element_type(element_bytes, [&]<class R>(R) {
        std::vector<std::size_t> out;
        out.push_back(param_layout::of<R>(gpt_embedding_params(config)).bytes());
        const std::size_t block = param_layout::of<R>(gpt_block_params(config)).bytes();
        for (std::size_t l = 0; l < config.n_layer; ++l) out.push_back(block);
        out.push_back(param_layout::of<R>(gpt_final_params(config)).bytes());
        return out;
    });
}

// The footprint of a model for B x T micro-batches: Model is gpt_model or a decoder_model (any
// model with groups() and activation_buffers(batch, seq, kept_activations)).
template <Backend B, class Model>
model_footprint footprint_of(const Model& model, std::size_t batch, std::size_t seq) {
    using R = typename Model::value_type;
    model_footprint f;
    f.max_seq = model.max_seq();
    for (const auto& g : model.groups()) {
        f.parameters += g.parameter_count();
        f.trainable_parameters += g.trainable_parameter_count();
        f.group_bytes.push_back(g.bytes());
        f.trainable_bytes.push_back(g.trainable_bytes());
    }
    f.blocks = model.block_count();
    // Entry 1 is the blocks' saved activations: with none kept, one block's (the shared buffer).
    const auto buffers = model.activation_buffers(batch, seq, kept_activations::none());
    f.activation_fixed_bytes = 2 * detail::charged(batch * seq * sizeof(std::int32_t));  // tokens, targets
    for (std::size_t i = 2; i < buffers.size(); ++i) f.activation_fixed_bytes += detail::charged(buffers[i] * sizeof(R));
    // Entry 0 is the block inputs (every block's and the final norm's), entry 1 one block's saved activations.
    f.block_input_bytes = buffers[0] / (f.blocks + 1) * sizeof(R);
    f.block_activation_bytes = buffers[1] * sizeof(R);
    f.norm_workspace_bytes = detail::charged(detail::norm_workspace_doubles<B>(model.groups()) * sizeof(double));
    return f;
}

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
    // The optimizer's state tensors per trainable parameter (AdamW: m, v).
    std::size_t states = 2;
};

inline memory_plan base_plan(const plan_request& r, const plan_inputs& in, kept_activations kept) {
    memory_plan p;
    const std::size_t activations = in.model.activation_bytes(kept);
    p.block_count = in.model.blocks;
    p.kept_blocks = kept.of(in.model.blocks);
    p.offloaded_inputs = kept.offloaded(in.model.blocks);
    p.block_input_bytes = in.model.block_input_bytes;
    p.block_activation_bytes = in.model.block_activation_bytes;
    p.parameters = in.model.parameters;
    p.trainable_parameters = in.model.trainable_parameters;
    p.group_count = in.model.group_bytes.size();
    p.state_bytes = in.state;
    p.trainable_state_bytes = in.trainable_state;
    p.optimizer = r.optimizer;
    p.optimizer_states = in.states;
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
    return p;
}

inline memory_plan resident_plan(const plan_request& r, const plan_inputs& in, kept_activations kept) {
    memory_plan p = base_plan(r, in, kept);
    p.where = placement::resident;
    p.of(plan_category::weights).device = in.state;
    p.of(plan_category::grads).device = in.trainable_state;
    p.of(plan_category::moments).device = in.states * in.trainable_state;
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
    std::size_t largest_block = 0, largest_block_grads = 0, largest_stored = 0;
    p.pinned_group_bytes = p.pinned_grad_bytes = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
        const group_home h = homes[g];
        const std::size_t w = groups[g], t = trainable[g];
        p.of(plan_category::weights)[h.weights] += w;
        p.of(plan_category::grads)[h.weights] += t;
        p.of(plan_category::moments)[h.moments] += in.states * t;
        if (h.weights == tier_id::device) continue;
        p.weights_home = p.grads_home = tier_id::host;
        if (h.moments == tier_id::storage) {
            p.state_home = tier_id::storage;
            largest_stored = std::max(largest_stored, t);
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
            p.per_step.storage_read += in.states * t;
            p.per_step.storage_write += in.states * t;
        }
    }
    p.links = r.links;
    // No block streams: no slots (the trainer's pipeline allocates none).
    p.of(plan_category::slots).device = largest_block == 0 ? 0 : slots * (largest_block + largest_block_grads);
    p.of(plan_category::pinned).device = p.pinned_group_bytes + p.pinned_grad_bytes;
    // State on storage: the host optimizer reads a group's state tensors into host buffers (two
    // sets of the largest storage group's size: the next group is read while one is updated).
    p.of(plan_category::staging).host += 2 * in.states * largest_stored;
    p.m_home = p.v_home = p.state_home;
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
        add("lower the micro-batch (now " + std::to_string(r.batch) + ") or the sequence length (now " +
                std::to_string(r.seq) + ")",
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

inline void validate(const plan_request& r, const model_footprint& model) {
    auto positive = [](std::size_t v, const char* name) {
        if (v == 0) throw error(std::string("memory plan: ") + name + " must be positive");
    };
    positive(r.batch, "the micro-batch");
    positive(r.seq, "the sequence length");
    positive(r.accum, "accum");
    if (r.seq > model.max_seq)
        throw error("memory plan: sequence length " + std::to_string(r.seq) + " exceeds the model's context " +
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

// Chooses a placement for `request` on backend B, or throws a strata::error with every tier's
// needed and available bytes. Nothing is allocated.
//
// auto: resident when everything fits the device budget; otherwise streamed, with the optimizer's
// state on the host unless moments_on_storage asks for storage or the host cannot hold it (then
// storage must).
// Streamed takes the requested slots, else 3 when they fit the device, else 2; the trainer that
// allocates exactly this plan is trainer_t<R, B, prefetch_pipeline<slots - 1>, moments_in<T>>,
// T = host_tier or storage_tier as state_home says.
// moments_on_storage only shapes streamed plans: a resident plan keeps everything on the device.
// Activations come last: the placement is chosen with the policy's fewest kept blocks (recompute
// and auto: none; keep: all), then auto keeps as many blocks' activations as the device budget
// still holds; the trainer takes memory_plan::kept() as train_options::activations.
template <Backend B>
memory_plan plan(const plan_request& request) {
    detail::plan_inputs in;
    if (request.footprint) {
        in.model = *request.footprint;
    } else {
        request.model.validate();
        in.model = detail::with_element_type(request.element_bytes, [&]<class R>(R) {
            return footprint_of<B>(gpt_model<R, B>(request.model), request.batch, request.seq);
        });
    }
    detail::validate(request, in.model);
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
    const std::size_t BT = request.batch * request.seq;
    in.partials = detail::charged(groups.size() * sizeof(double));
    in.norm_workspace = in.model.norm_workspace_bytes;
    in.states = state_names_of(request.optimizer).size();
    in.step_staging = request.accum * (2 * detail::charged(BT * sizeof(std::int32_t)) +
                                       detail::charged(BT * request.element_bytes));

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
        memory_plan resident = most_kept([&](kept_activations k) { return detail::resident_plan(request, in, k); });
        if (resident.fits()) return resident;
        if (request.where == placement::resident) {
            const std::string states = state_label("", state_names_of(request.optimizer));  // " m, v"
            detail::refuse(request, resident, "resident placement does not fit (weights, grads," + states + ": " +
                                                  format_bytes(in.state + (1 + in.states) * in.trainable_state) +
                                                  ", activations " + format_bytes(resident.activation_bytes) + ")");
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
        if (request.moments_on_storage)
            for (std::size_t g = 0; g < G; ++g) to_storage(g);
        memory_plan p = detail::streamed_plan(request, in, slots, homes, k);
        for (std::size_t g = G; g-- > 0 && p.total(tier_id::host) > p.budgets.host;) {
            if (homes[g].weights != tier_id::host || homes[g].moments == tier_id::storage || trainable[g] == 0) continue;
            to_storage(g);
            p = detail::streamed_plan(request, in, slots, homes, k);
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
        auto homes = detail::uniform_homes(G, tier_id::host);
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
    // Activations come first: as many blocks keep theirs as leave a plan that fits (the groups
    // fill what the device has left).
    auto streamed = [&](std::size_t slots) {
        return most_kept([&](kept_activations k) { return placed(slots, k); });
    };
    // Why the optimizer's state is on storage when nobody asked: the host alone cannot hold it.
    auto moments_note = [&](const memory_plan& p) -> std::string {
        if (request.moments_on_storage || p.state_home != tier_id::storage) return "";
        const memory_plan on_host =
            detail::streamed_plan(request, in, p.slots, detail::uniform_homes(G, tier_id::host), p.kept());
        return " (" + p.state_label() + " went to storage: with them the host would need " +
               format_bytes(on_host.total(tier_id::host)) + ")";
    };
    const std::size_t slots = request.slots.value_or(3);
    memory_plan p = streamed(slots);
    if (p.fits()) return p;
    if (!request.slots) {
        p = streamed(2);
        if (p.fits()) return p;
    }
    detail::refuse(request, p,
                   "streamed placement with " + std::to_string(p.slots) + " slots does not fit" + moments_note(p));
}

inline std::string memory_plan::homes_summary() const {
    auto where_of = [&](const group_home& h) -> std::string {
        if (h.weights == tier_id::device) return "device";
        return h.moments == tier_id::storage ? "host, " + state_label() + " on storage" : "host";
    };
    const std::size_t G = homes.size();
    if (G < 3) return "";
    // Runs of blocks with one home: "blocks 0-23: device".
    std::string blocks;
    for (std::size_t g = 1; g + 1 < G;) {
        std::size_t e = g;
        while (e + 2 < G && homes[e + 1] == homes[g]) ++e;
        const std::size_t first = g - 1, last = e - 1;
        if (!blocks.empty()) blocks += "; ";
        blocks += first == last ? "block " + std::to_string(first) : "blocks " + std::to_string(first) + "-" + std::to_string(last);
        blocks += ": " + where_of(homes[g]);
        g = e + 1;
    }
    return "embeddings: " + where_of(homes.front()) + "; " + blocks + "; final norm: " + where_of(homes.back());
}

inline std::string memory_plan::traffic_summary() const {
    std::string out;
    auto link = [&](const char* name, std::size_t bytes, double bandwidth) {
        if (!out.empty()) out += ", ";
        out += fmt::format("{} {}", name, detail::short_bytes(bytes));
        if (bytes > 0 && bandwidth > 0)
            out += fmt::format(" ({:.2f} s at {:.1f} GB/s)", static_cast<double>(bytes) / bandwidth, bandwidth / 1e9);
    };
    link("H2D", per_step.h2d, links.h2d);
    link("D2H", per_step.d2h, links.d2h);
    link("storage read", per_step.storage_read, links.storage_read);
    link("storage write", per_step.storage_write, links.storage_write);
    return out;
}

// Rows = categories, columns = tiers, then the total, the budget and the share of it used.
inline std::string memory_plan::to_table() const {
    std::string out = "memory plan: " + std::string(name_of(where)) + " placement";
    if (where == placement::streamed)
        out += ", " + std::to_string(slots) + " device slots (prefetch depth " + std::to_string(slots - 1) +
               ") of the largest block " + detail::short_bytes(largest_block_bytes) + " each";
    out += fmt::format(", {} parameters", detail::parameter_count(parameters));
    if (trainable_parameters != parameters)
        out += fmt::format(" ({} trainable, the rest frozen)", detail::parameter_count(trainable_parameters));
    out += fmt::format(" in {} groups\n", group_count);
    if (where == placement::resident)
        out += "homes: every group on the device";
    else
        out += "homes: " + homes_summary();
    out += fmt::format("\nactivations {}: {} of {} blocks keep theirs ({} each), {} recompute from their input",
                       name_of(activations_home), kept_blocks, block_count, detail::short_bytes(block_activation_bytes),
                       block_count - kept_blocks);
    if (offloaded_inputs > 0)
        out += fmt::format(" (their inputs in pinned host memory: {} x {})", offloaded_inputs,
                           detail::short_bytes(block_input_bytes));
    out += "\n";
    if (where == placement::streamed) out += "per step: " + traffic_summary() + "\n";

    auto row = [&](const std::string& label, auto cell) {
        out += fmt::format("{:<14}", label);
        for (tier_id t : all_tiers) out += fmt::format("{:>13}", cell(t));
        out += "\n";
    };
    row("", [](tier_id t) { return std::string(name_of(t)); });
    for (plan_category c : all_plan_categories)
        row(label_of(c), [&](tier_id t) { return detail::short_bytes(bytes_of(c, t)); });
    row("total", [&](tier_id t) { return detail::short_bytes(total(t)); });
    row("budget", [&](tier_id t) { return detail::short_bytes(budgets[t]); });
    row("used", [&](tier_id t) { return detail::percent_of(total(t), budgets[t]); });
    return out;
}

}  // namespace strata
