// Checkpoints: a directory per save, OUT/step-<N>/, holding
//   the model's files     what model_files<Model> writes (model/model_files.hpp: the model's own
//                         customization point; a GPT-2's model.safetensors + config.json,
//                         loadable by transformers.GPT2LMHeadModel.from_pretrained; a LoRA
//                         model's adapters), passed in as a model_files object (by default
//                         value-initialized): this file names no model
//   optimizer.safetensors the optimizer's state tensors under the same names, prefixed by the
//                         state's name (AdamW: "m." / "v."; SGD: "momentum."), group by group
//                         (the group's tensors of its first state, then of the next); absent
//                         when the checkpoint holds the weights only (checkpoint_contents::weights)
//   trainer_state.json    step, data cursor, seeds, tokenizer, options, the optimizer and its
//                         hyperparameters ("optimizer"), whether its state was saved
//                         ("moments_saved"): what a resume needs; and "files", each other file's
//                         size and fingerprint (file_fingerprint.hpp), which load_checkpoint
//                         compares, so that a file from another step or run is refused
//   + any extra files (the GPT-2 tokenizer's vocab.json and merges.txt)
// The directory is written as OUT/step-<N>.tmp-<pid>/ and renamed into place once complete and
// fsynced, so a crash never leaves a half-written checkpoint where a resume would look.
// The tensors go from the trainer to the files group by group through one host buffer of the
// largest group's block: saving needs that much memory, not the whole state's.
// checkpoint_bytes() gives a checkpoint's size before anything is written (from the group
// layouts: the safetensors headers and data), and check_checkpoint_fits() compares it with the
// free space, so a run can refuse before step 1 instead of failing its final save.
#pragma once

#include <strata/core/bytes.hpp>       // format_bytes
#include <strata/core/error.hpp>       // strata::error
#include <strata/core/format.hpp>      // fmt::format (host only)
#include <strata/io/atomic_write.hpp>  // commit_directory_atomically
#include <strata/io/file_fingerprint.hpp>  // fingerprint_of
#include <strata/io/json_file.hpp>     // read_json_file, write_json_file, json_file_text
#include <strata/io/safetensors.hpp>   // safetensors_writer, safetensors_file
#include <strata/model/model_files.hpp>  // model_files, HasModelFiles, host_blocks, largest_block
#include <strata/optim/optimizers.hpp> // any_optimizer (AdamW by default)
#include <strata/optim/state_layout.hpp> // optimizer_state_layout
#include <strata/train/tiered_trainer.hpp>    // trainer

#include <nlohmann/json.hpp>  // nlohmann::json

#include <unistd.h>  // getpid

#include <algorithm>    // std::max
#include <cstdint>      // std::uint64_t
#include <filesystem>   // std::filesystem
#include <optional>     // std::optional
#include <regex>        // std::regex, std::regex_match
#include <span>         // std::span
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::move, std::pair
#include <vector>       // std::vector

namespace strata {

inline std::string checkpoint_dir_name(long step) {
    return fmt::format("step-{:06}", step);
}

// What a checkpoint holds besides the trainer state: everything a bitwise resume needs (FP32, per
// trained parameter: 4 bytes of weights and 4 per optimizer state tensor, 12 with AdamW's m and
// v), or the weights without the optimizer's state (4 bytes per parameter; a resume from it
// starts that state from zero).
enum class checkpoint_contents { full, weights };

// Hands one kind of the trainer's state to visit(g, block) group by group, in group order, through
// one host buffer of the largest block (block is valid until visit returns): the weights' whole
// blocks, the gradients' trainable prefixes, or the optimizer's state blocks as it lays them out
// (optim/state_layout.hpp); frozen groups are skipped.
template <class Trainer, class Visit>
void for_each_block(Trainer& t, typename Trainer::state_kind kind, Visit&& visit) {
    using R = typename Trainer::model_type::value_type;
    const bool whole = kind == Trainer::state_kind::params;
    const bool state = kind.of == Trainer::state_kind::part::optimizer;
    std::vector<R> buffer(state ? 0 : largest_block(t.model(), whole));
    for (std::size_t g = 0; g < t.model().group_count(); ++g) {
        const auto& layout = t.model().groups()[g];
        const std::size_t n = state ? (layout.frozen() ? 0 : optimizer_state_layout::of<R>(t.optimizer(), layout).numel(kind.index))
                                    : whole ? layout.numel() : layout.trainable_numel();
        buffer.resize(std::max(buffer.size(), n));  // optimizer state: each block as the optimizer lays it out
        const std::span<R> block(buffer.data(), n);
        if (block.empty()) continue;
        t.download(kind, g, block);
        visit(g, std::span<const R>(block));
    }
}

// A trainer's weights as model_files reads and writes them (WeightBlocks: whole parameter blocks).
template <class Trainer>
struct trainer_weights {
    using R = typename Trainer::model_type::value_type;
    Trainer& t;
    void download(std::size_t g, std::span<R> out) { t.download(Trainer::state_kind::params, g, out); }
    void upload(std::size_t g, std::span<const R> in) { t.upload(Trainer::state_kind::params, g, in); }
};
template <class Trainer>
trainer_weights(Trainer&) -> trainer_weights<Trainer>;

// One host block per group: the weights' whole blocks, or for gradients and optimizer state the
// trainable prefixes (empty for a frozen group). The whole state in memory at once: for tests and
// small models; checkpoints go through for_each_block instead.
template <class Trainer, class R = typename Trainer::model_type::value_type>
host_blocks<R> download_blocks(Trainer& t, typename Trainer::state_kind kind) {
    host_blocks<R> blocks;
    for (std::size_t g = 0; g < t.model().group_count(); ++g) {
        const auto& layout = t.model().groups()[g];
        const bool whole = kind == Trainer::state_kind::params;
        if (kind.of == Trainer::state_kind::part::optimizer && !layout.frozen())  // the optimizer's own sizes
            blocks.emplace_back(optimizer_state_layout::of<R>(t.optimizer(), layout).numel(kind.index));
        else
            blocks.emplace_back(whole ? layout.numel() : layout.trainable_numel());
        if (whole || !layout.frozen()) t.download(kind, g, blocks.back());
    }
    return blocks;
}

// optimizer.safetensors of a model, declared: for each group with trainable tensors, for each
// state tensor the optimizer names (AdamW's m, v by default), "<state>." + the hf_name of each
// trainable tensor, in the shape the optimizer gives it (state_shape: AdamW's like the parameter,
// Adafactor's row_var of a (R, C) weight (R, 1)); a state an optimizer keeps none of for a tensor
// (Adafactor's variance of a matrix) is not written. The order one group's block of each state
// reaches the file in.
template <class Model, Optimizer O = any_optimizer>
safetensors_writer declared_optimizer_tensors(const Model& model, const O& optimizer = O{}) {
    using R = typename Model::value_type;
    safetensors_writer w;
    w.set_metadata("format", "pt");
    const auto states = optimizer.state_names();
    for (std::size_t g = 0; g < model.group_count(); ++g)
        for (std::size_t i = 0; i < states.size(); ++i)
            for (const auto& entry : model.groups()[g].entries())
                if (entry.spec.trainable)
                    if (const shape s = optimizer.state_shape(i, entry.spec.shape); s.numel() > 0)
                        w.declare<R>(std::string(states[i]) + "." + model.hf_name(g, entry), s.extents());
    return w;
}

// The bytes of optimizer.safetensors, exactly (for `optimizer`'s state tensors).
template <class Model, Optimizer O = any_optimizer>
std::uint64_t optimizer_file_bytes(const Model& model, const O& optimizer = O{}) {
    return declared_optimizer_tensors(model, optimizer).file_size();
}

// The bytes one checkpoint of `model` writes: the weights' files (weights_bytes: its
// model_files' bytes), optimizer.safetensors when `contents`
// is full, trainer_state.json (state_bytes: the caller's bound, since the loss curve it holds grows
// with the run) and the extra files as they are now. File-system blocks (a few KiB per file) are
// not counted. `optimizer` is the one that trains the model (a trainer's: t.optimizer()), with no
// default: a default of AdamW's would count a second state tensor for an SGD run and refuse
// checkpoints that fit.
template <class Model, Optimizer O>
std::uint64_t checkpoint_bytes(const Model& model, const O& optimizer,
                               checkpoint_contents contents, std::uint64_t weights_bytes, std::uint64_t state_bytes,
                               const std::vector<std::filesystem::path>& extra_files = {}) {
    std::uint64_t bytes = weights_bytes + state_bytes;
    if (contents == checkpoint_contents::full) bytes += optimizer_file_bytes(model, optimizer);
    for (const auto& f : extra_files) bytes += std::filesystem::file_size(f);
    return bytes;
}

// Refuses, before any is written, `copies` checkpoints of `bytes` each that do not fit in the `free`
// bytes of `where` (the directory they go to; the caller measures free, e.g. with free_disk_bytes).
// The error names the bytes needed and free; `hint` says what the caller can do instead.
inline void check_checkpoint_fits(std::uint64_t bytes, std::uint64_t free, long copies, const std::string& where,
                                  const std::string& hint = "write the checkpoints to a disk with more free space, "
                                                            "save the weights without the optimizer's state, or save none") {
    if (copies <= 0) return;
    std::uint64_t needed = 0;
    const bool overflows = __builtin_mul_overflow(bytes, static_cast<std::uint64_t>(copies), &needed);
    if (!overflows && needed <= free) return;
    const std::string count = copies == 1 ? std::string("a checkpoint of ")
                                          : std::to_string(copies) + " checkpoints of ";
    throw error("the checkpoints will not fit in '" + where + "': " + count + format_bytes(bytes) +
                    (copies == 1 ? std::string() : " each") + " need " +
                    (overflows ? std::string("more than 2^64 bytes") : format_bytes(needed)) + ", and " +
                    format_bytes(free) + " are free there",
                hint);
}

// Whether a checkpoint's trainer_state.json says the optimizer's state was saved (checkpoints
// written before this field existed always saved it).
inline bool moments_saved(const nlohmann::json& trainer_state) {
    return !trainer_state.is_object() || trainer_state.value("moments_saved", true);
}

// The optimizer a checkpoint's trainer_state.json names ("optimizer": {"name": ..., its
// hyperparameters}); checkpoints written before this field existed were AdamW's.
inline std::string checkpoint_optimizer(const nlohmann::json& trainer_state) {
    if (!trainer_state.is_object() || !trainer_state.contains("optimizer")) return std::string(adamw_optimizer::name());
    const auto& o = trainer_state.at("optimizer");
    return o.is_object() ? o.value("name", std::string()) : std::string();
}

// What trainer_state.json's "format" says in every checkpoint save_checkpoint writes.
inline constexpr const char* checkpoint_format = "strata-gpt checkpoint 1";

// trainer_state.json's "files": each file of a checkpoint directory (but trainer_state.json) by
// name, with its size and fingerprint: {"model.safetensors": {"bytes": N, "hash": "..."}, ...}.
inline nlohmann::json checkpoint_files_json(const std::filesystem::path& dir) {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        if (name == "trainer_state.json" || !e.is_regular_file()) continue;
        const file_fingerprint f = fingerprint_of(e.path());
        files[name] = {{"bytes", f.bytes}, {"hash", f.hash}};
    }
    return files;
}

// Whether checkpoint `dir`, whose trainer_state.json is `state`, holds what it recorded: the step
// its name says (step-N), and each file of "files" (checkpoints written before it was recorded
// have none to compare) with its size and fingerprint. Throws strata::error naming the file.
inline void check_checkpoint_consistent(const std::filesystem::path& dir, const nlohmann::json& state) {
    const std::string where = (dir / "trainer_state.json").string();
    const std::string hint = "the checkpoint was changed after it was saved (a file copied in from another step or "
                             "run, or trainer_state.json edited): resume from a checkpoint as strata saved it";
    const long step = json_field<long>(state, "step", where);
    static const std::regex step_name("step-([0-9]+)");
    std::smatch m;
    const std::string name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
    if (std::regex_match(name, m, step_name) && std::stol(m[1].str()) != step)
        throw error("'" + dir.string() + "' is the checkpoint of step " + std::to_string(std::stol(m[1].str())) + ", and " +
                        where + " says step " + std::to_string(step),
                    hint);
    if (!state.contains("files")) return;
    for (const auto& [file, recorded] : state.at("files").items()) {
        const std::filesystem::path path = dir / file;
        if (!std::filesystem::is_regular_file(path))
            throw error("'" + path.string() + "' is missing: " + where + " records it", hint);
        const file_fingerprint now = fingerprint_of(path);
        if (!recorded.is_object() || now.bytes != recorded.value("bytes", std::uint64_t{0}) ||
            now.hash != recorded.value("hash", std::string()))
            throw error("'" + path.string() + "' is not the file this checkpoint saved (" + std::to_string(now.bytes) +
                            " bytes, fingerprint " + now.hash + "; " + where + " records " + recorded.dump() + ")",
                        hint);
    }
}

// What a checkpoint of a trainer of Model needs: its files (model/model_files.hpp).
template <class Model>
constexpr void check_model_has_files() {
    static_assert(HasModelFiles<Model>,
                  "this model has no checkpoint files: specialize strata::model_files<Model> next to the model "
                  "(model/model_files.hpp: bytes, write and read), as model/gpt.hpp does for gpt_model");
}

// Saves what a resume needs into OUT/step-<N>/ atomically; returns that directory.
// The weights go to the model's files (`files`, model_files<Model>: a GPT-2's model.safetensors +
// config.json; a LoRA model's adapters), taken from the trainer group by group. With
// checkpoint_contents::full, every state tensor of the optimizer (AdamW: m and v) of every
// trainable tensor goes to optimizer.safetensors, named "<state>." + the model's hf_name; with
// ::weights there is no such file and trainer_state.json says "moments_saved": false.
// trainer_state.json's "optimizer" names the optimizer and its hyperparameters.
template <class Trainer>
std::filesystem::path save_checkpoint(Trainer& t, const std::filesystem::path& out_dir, nlohmann::json trainer_state,
                                      const std::vector<std::filesystem::path>& extra_files = {},
                                      checkpoint_contents contents = checkpoint_contents::full,
                                      const model_files<typename Trainer::model_type>& files = {}) {
    check_model_has_files<typename Trainer::model_type>();
    using kind = typename Trainer::state_kind;
    using R = typename Trainer::model_type::value_type;
    const auto final_dir = out_dir / checkpoint_dir_name(t.step_count());
    const auto tmp_dir = out_dir / (checkpoint_dir_name(t.step_count()) + ".tmp-" + std::to_string(::getpid()));
    std::filesystem::remove_all(tmp_dir);
    std::filesystem::create_directories(tmp_dir);
    try {
        trainer_weights<Trainer> weights{t};
        files.write(t.model(), weights, tmp_dir);
        const bool with_moments = contents == checkpoint_contents::full;
        const auto states = t.optimizer().state_names();
        if (with_moments) {
            const auto& model = t.model();
            // One host buffer, refilled per group and state (as large as the largest state block).
            std::vector<R> buffer;
            declared_optimizer_tensors(model, t.optimizer()).write_streamed(
                tmp_dir / "optimizer.safetensors", [&](safetensors_writer::stream& out) {
                    for (std::size_t g = 0; g < model.group_count(); ++g) {
                        const auto& entries = model.groups()[g].entries();
                        const auto layout = optimizer_state_layout::of<R>(t.optimizer(), model.groups()[g]);
                        for (std::size_t i = 0; i < layout.state_count(); ++i) {  // frozen: none
                            buffer.resize(std::max(buffer.size(), layout.numel(i)));
                            const std::span<R> block(buffer.data(), layout.numel(i));
                            t.download(kind::optimizer_state(i), g, block);
                            for (std::size_t e = 0; e < entries.size(); ++e)
                                if (const auto& part = layout.at(i, e); entries[e].spec.trainable && part.numel > 0)
                                    out.write(std::string(states[i]) + "." + model.hf_name(g, entries[e]),
                                              std::span<const R>(block.subspan(part.offset, part.numel)));
                        }
                    }
                });
        }
        for (const auto& f : extra_files) std::filesystem::copy_file(f, tmp_dir / f.filename());
        trainer_state["step"] = t.step_count();
        trainer_state["format"] = checkpoint_format;
        trainer_state["moments_saved"] = with_moments;
        nlohmann::json optimizer = t.optimizer().hparams_json();
        optimizer["name"] = std::string(t.optimizer().name());
        trainer_state["optimizer"] = std::move(optimizer);
        trainer_state["files"] = checkpoint_files_json(tmp_dir);
        write_json_file(tmp_dir / "trainer_state.json", trainer_state);
        commit_directory_atomically(tmp_dir, final_dir, {.replace_existing = true});
    } catch (...) {
        std::error_code ignored;
        std::filesystem::remove_all(tmp_dir, ignored);
        throw;
    }
    return final_dir;
}

// Restores weights, the optimizer's state and the step count; returns trainer_state.json.
// The weights come from the model's files (`files`, model_files<Model>, which refuse files of
// another shape); the state comes from optimizer.safetensors, by the names
// of the trainer's optimizer's state tensors. The checkpoint's optimizer must be the trainer's
// (checkpoint_optimizer: AdamW for checkpoints that do not say); its hyperparameters are the
// caller's to compare. A checkpoint saved without the optimizer's state (moments_saved(state) is
// false) sets it to zero: the optimizer starts afresh, and the run no longer equals one never
// interrupted (the caller says so).
template <class Trainer>
nlohmann::json load_checkpoint(Trainer& t, const std::filesystem::path& dir,
                               const model_files<typename Trainer::model_type>& files = {}) {
    check_model_has_files<typename Trainer::model_type>();
    using kind = typename Trainer::state_kind;
    using R = typename Trainer::model_type::value_type;
    const auto state_path = dir / "trainer_state.json";
    if (!std::filesystem::exists(state_path))
        throw error("'" + dir.string() + "' cannot be resumed: trainer_state.json is missing",
                    "resume from a checkpoint directory a trainer saved (its trainer_state.json and optimizer.safetensors beside the weights); to start from the weights only, load them as initial weights", {"init_from"});
    auto state = read_json_file(state_path);
    check_checkpoint_consistent(dir, state);
    if (const std::string saved_with = checkpoint_optimizer(state); saved_with != t.optimizer().name())
        throw error("'" + dir.string() + "' was trained with the optimizer '" + saved_with + "', this trainer runs '" +
                        std::string(t.optimizer().name()) + "'",
                    "resume with the checkpoint's optimizer (its trainer_state.json names it)", {"optimizer"});
    const bool with_moments = moments_saved(state);
    if (with_moments && !std::filesystem::exists(dir / "optimizer.safetensors"))
        throw error("'" + dir.string() + "' cannot be resumed: optimizer.safetensors is missing",
                    "resume from a checkpoint directory a trainer saved (its trainer_state.json and optimizer.safetensors beside the weights); to start from the weights only, load them as initial weights", {"init_from"});
    trainer_weights<Trainer> weights{t};
    files.read(t.model(), weights, dir);
    std::optional<safetensors_file> opt;  // none: the state starts from zero
    if (with_moments) opt.emplace(safetensors_file::open(dir / "optimizer.safetensors"));
    const auto states = t.optimizer().state_names();
    for (std::size_t g = 0; g < t.model().group_count(); ++g) {
        const auto& entries = t.model().groups()[g].entries();
        const auto layout = optimizer_state_layout::of<R>(t.optimizer(), t.model().groups()[g]);
        for (std::size_t i = 0; i < layout.state_count(); ++i) {  // frozen: none
            std::vector<R> block(layout.numel(i), R(0));
            for (std::size_t e = 0; e < entries.size(); ++e) {
                const auto& part = layout.at(i, e);
                if (!entries[e].spec.trainable || part.numel == 0 || !opt) continue;
                opt->copy_to<R>(std::string(states[i]) + "." + t.model().hf_name(g, entries[e]),
                                std::span<R>(block.data() + part.offset, part.numel), part.shape.extents());
            }
            t.upload(kind::optimizer_state(i), g, block);
        }
    }
    t.set_step_count(json_field<long>(state, "step", state_path.string()));
    return state;
}

}  // namespace strata
