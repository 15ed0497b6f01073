// Checkpoints: a directory per save, OUT/step-<N>/, holding
//   model.safetensors     the weights under Hugging Face GPT-2 names and layouts (Conv1D [in, out]),
//                         loadable by transformers.GPT2LMHeadModel.from_pretrained
//   config.json           Hugging Face's GPT2 config
//   optimizer.safetensors AdamW's m and v under the same names, prefixed "m." / "v."
//   trainer_state.json    step, data cursor, seeds, tokenizer, options: what a resume needs
//   + any extra files (the GPT-2 tokenizer's vocab.json and merges.txt)
// The directory is written as OUT/step-<N>.tmp-<pid>/ and renamed into place once complete and
// fsynced, so a crash never leaves a half-written checkpoint where a resume would look.
#pragma once

#include <strata/core/error.hpp>          // strata::error
#include <strata/io/atomic_write.hpp>     // commit_directory_atomically
#include <strata/io/json_file.hpp>        // read_json_file, write_json_file
#include <strata/io/safetensors.hpp>      // safetensors_writer, safetensors_file
#include <strata/model/gpt.hpp>           // gpt_model
#include <strata/model/gpt_config.hpp>    // gpt_config
#include <strata/train/trainer.hpp>       // trainer

#include <nlohmann/json.hpp>  // nlohmann::json

#include <unistd.h>  // getpid

#include <cstdio>      // std::snprintf
#include <filesystem>  // std::filesystem
#include <set>         // std::set
#include <string>      // std::string
#include <vector>      // std::vector

namespace strata {

inline std::string checkpoint_dir_name(long step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "step-%06ld", step);
    return buf;
}

// Host copies of every parameter block of a model, in the model's group layout.
template <class R>
using host_blocks = std::vector<std::vector<R>>;

// The weights of a GPT-2 directory (strata's or Hugging Face's) in strata's group layout.
template <class R>
struct loaded_model {
    gpt_config config;
    host_blocks<R> blocks;
};

namespace detail {
// Entries of HF GPT-2 files that are not parameters: causal-mask buffers of older exports.
inline bool is_hf_buffer(const std::string& name) {
    return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}
// HF files name parameters with or without the "transformer." prefix.
inline std::string hf_key(const safetensors_file& f, const std::string& name) {
    if (f.contains(name)) return name;
    const std::string bare = name.substr(std::string("transformer.").size());
    if (f.contains(bare)) return bare;
    return {};
}
}  // namespace detail

template <class R, Backend B>
void write_model_files(const gpt_model<R, B>& model, const host_blocks<R>& blocks, const std::filesystem::path& dir) {
    safetensors_writer w;
    w.set_metadata("format", "pt");
    for (std::size_t g = 0; g < model.group_count(); ++g)
        for (const auto& slot : model.groups()[g].slots()) {
            const R* p = blocks[g].data() + slot.offset;
            w.add(model.hf_name(g, slot), slot.spec.shape.extents(), std::span<const R>(p, slot.spec.shape.numel()));
        }
    w.write(dir / "model.safetensors");
    write_json_file(dir / "config.json", model.config().to_hf_json());
}

// Reads config.json + model.safetensors. Tied weights: lm_head.weight, when present, must equal
// wte. Causal-mask buffers are skipped; any other unknown tensor and any missing one is an error
// naming it.
template <class R>
loaded_model<R> load_model_files(const std::filesystem::path& dir) {
    if (!std::filesystem::exists(dir / "config.json") || !std::filesystem::exists(dir / "model.safetensors"))
        throw error("'" + dir.string() + "' is not a GPT-2 checkpoint: config.json or model.safetensors is missing",
                    "pass a directory written by strata-gpt (OUT/step-N) or a Hugging Face GPT-2 directory");
    loaded_model<R> out;
    out.config = gpt_config::from_hf_json(read_json_file(dir / "config.json"), (dir / "config.json").string());
    gpt_model<R, cpu_backend> model(out.config);
    const auto file = safetensors_file::open(dir / "model.safetensors");
    std::set<std::string> used;
    std::vector<std::string> missing;
    for (std::size_t g = 0; g < model.group_count(); ++g) {
        out.blocks.emplace_back(model.groups()[g].numel(), R(0));
        for (const auto& slot : model.groups()[g].slots()) {
            const std::string name = model.hf_name(g, slot);
            const std::string key = detail::hf_key(file, name);
            if (key.empty()) {
                missing.push_back(name);
                continue;
            }
            used.insert(key);
            const auto& info = file.info(key);
            std::span<R> dst(out.blocks[g].data() + slot.offset, slot.spec.shape.numel());
            if (info.dtype == safetensors_dtype_v<R>) {
                file.copy_to<R>(key, dst, slot.spec.shape.extents());
            } else if (info.dtype == safetensors_dtype::f32) {  // e.g. float file into a double model
                std::vector<float> tmp(dst.size());
                file.copy_to<float>(key, std::span<float>(tmp), slot.spec.shape.extents());
                std::copy(tmp.begin(), tmp.end(), dst.begin());
            } else {
                throw error("'" + (dir / "model.safetensors").string() + "': tensor '" + key + "' has dtype " +
                                std::string(detail::dtype_row(info.dtype).name) + "; strata trains in FP32",
                            "convert the checkpoint to float32 (torch_dtype float32)");
            }
        }
    }
    if (!missing.empty()) {
        std::string list;
        for (auto& m : missing) list += (list.empty() ? "" : ", ") + m;
        throw error("'" + (dir / "model.safetensors").string() + "' lacks " + std::to_string(missing.size()) +
                        " tensor(s): " + list,
                    "the file does not match config.json (n_layer, n_embd, vocab_size)");
    }
    std::vector<std::string> unknown;
    for (const auto& name : file.names()) {
        if (used.count(name) || detail::is_hf_buffer(name)) continue;
        if (name == "lm_head.weight") {  // tied: must be a copy of wte
            const std::string wte_key = detail::hf_key(file, "transformer.wte.weight");
            std::vector<float> wte(file.info(wte_key).bytes.size() / sizeof(float));
            std::vector<float> head(file.info(name).bytes.size() / sizeof(float));
            file.copy_to<float>(wte_key, std::span<float>(wte));
            file.copy_to<float>(name, std::span<float>(head));
            if (wte != head)
                throw error("'" + (dir / "model.safetensors").string() +
                                "': lm_head.weight differs from transformer.wte.weight",
                            "strata's GPT ties the LM head to the token embedding; untied heads are not supported");
            continue;
        }
        unknown.push_back(name);
    }
    if (!unknown.empty()) {
        std::string list;
        for (auto& u : unknown) list += (list.empty() ? "" : ", ") + u;
        throw error("'" + (dir / "model.safetensors").string() + "' has tensor(s) a GPT-2 model does not: " + list,
                    "is this a GPT-2 (GPT2LMHeadModel) checkpoint?");
    }
    return out;
}

// One host block per group: the weights' whole blocks, or for gradients and moments the
// trainable prefixes (empty for a frozen group).
template <class Trainer, class R = typename Trainer::model_type::value_type>
host_blocks<R> download_blocks(Trainer& t, typename Trainer::state_kind kind) {
    host_blocks<R> blocks;
    for (std::size_t g = 0; g < t.model().group_count(); ++g) {
        const auto& layout = t.model().groups()[g];
        const bool whole = kind == Trainer::state_kind::params;
        blocks.emplace_back(whole ? layout.numel() : layout.trainable_numel());
        if (whole || !layout.frozen()) t.download(kind, g, blocks.back());
    }
    return blocks;
}

// Saves everything a resume needs into OUT/step-<N>/ atomically; returns that directory.
// write_weights(dir) writes the weights' files into the directory being assembled; the default
// (the overload below) writes a GPT-2 model.safetensors + config.json. A model whose weights are
// saved otherwise (LoRA: only the adapters) passes its own. AdamW's m and v of every trainable
// tensor go to optimizer.safetensors, named "m." / "v." + the model's hf_name.
template <class Trainer, class WriteWeights>
std::filesystem::path save_checkpoint(Trainer& t, const std::filesystem::path& out_dir, nlohmann::json trainer_state,
                                      const std::vector<std::filesystem::path>& extra_files,
                                      WriteWeights&& write_weights) {
    using kind = typename Trainer::state_kind;
    using R = typename Trainer::model_type::value_type;
    const auto final_dir = out_dir / checkpoint_dir_name(t.step_count());
    const auto tmp_dir = out_dir / (checkpoint_dir_name(t.step_count()) + ".tmp-" + std::to_string(::getpid()));
    std::filesystem::remove_all(tmp_dir);
    std::filesystem::create_directories(tmp_dir);
    try {
        write_weights(tmp_dir);
        safetensors_writer opt;
        opt.set_metadata("format", "pt");
        const auto m = download_blocks(t, kind::adam_m);
        const auto v = download_blocks(t, kind::adam_v);
        for (std::size_t g = 0; g < t.model().group_count(); ++g)
            for (const auto& slot : t.model().groups()[g].slots()) {
                if (!slot.spec.trainable) continue;  // frozen: no moments
                const std::size_t n = slot.spec.shape.numel();
                opt.add("m." + t.model().hf_name(g, slot), slot.spec.shape.extents(),
                        std::span<const R>(m[g].data() + slot.offset, n));
                opt.add("v." + t.model().hf_name(g, slot), slot.spec.shape.extents(),
                        std::span<const R>(v[g].data() + slot.offset, n));
            }
        opt.write(tmp_dir / "optimizer.safetensors");
        trainer_state["step"] = t.step_count();
        trainer_state["format"] = "strata-gpt checkpoint 1";
        write_json_file(tmp_dir / "trainer_state.json", trainer_state);
        for (const auto& f : extra_files) std::filesystem::copy_file(f, tmp_dir / f.filename());
        commit_directory_atomically(tmp_dir, final_dir, {.replace_existing = true});
    } catch (...) {
        std::error_code ignored;
        std::filesystem::remove_all(tmp_dir, ignored);
        throw;
    }
    return final_dir;
}

template <class Trainer>
std::filesystem::path save_checkpoint(Trainer& t, const std::filesystem::path& out_dir, nlohmann::json trainer_state,
                                      const std::vector<std::filesystem::path>& extra_files = {}) {
    using kind = typename Trainer::state_kind;
    return save_checkpoint(t, out_dir, std::move(trainer_state), extra_files, [&](const std::filesystem::path& dir) {
        write_model_files(t.model(), download_blocks(t, kind::params), dir);
    });
}

// Restores weights, AdamW moments and the step count; returns trainer_state.json. read_weights(dir)
// puts the weights into the trainer (the default, below: a GPT-2 model.safetensors of the same
// shape); the moments come from optimizer.safetensors.
template <class Trainer, class ReadWeights>
nlohmann::json load_checkpoint(Trainer& t, const std::filesystem::path& dir, ReadWeights&& read_weights) {
    using kind = typename Trainer::state_kind;
    using R = typename Trainer::model_type::value_type;
    const auto state_path = dir / "trainer_state.json";
    if (!std::filesystem::exists(state_path) || !std::filesystem::exists(dir / "optimizer.safetensors"))
        throw error("'" + dir.string() + "' cannot be resumed: trainer_state.json or optimizer.safetensors is missing",
                    "resume from a directory strata-gpt wrote (OUT/step-N); to start from weights only, use --init-from");
    auto state = read_json_file(state_path);
    read_weights(dir);
    const auto opt = safetensors_file::open(dir / "optimizer.safetensors");
    for (std::size_t g = 0; g < t.model().group_count(); ++g) {
        if (t.model().groups()[g].frozen()) continue;
        std::vector<R> m(t.model().groups()[g].trainable_numel(), R(0)), v(m.size(), R(0));
        for (const auto& slot : t.model().groups()[g].slots()) {
            if (!slot.spec.trainable) continue;
            const std::size_t n = slot.spec.shape.numel();
            opt.copy_to<R>("m." + t.model().hf_name(g, slot), std::span<R>(m.data() + slot.offset, n),
                           slot.spec.shape.extents());
            opt.copy_to<R>("v." + t.model().hf_name(g, slot), std::span<R>(v.data() + slot.offset, n),
                           slot.spec.shape.extents());
        }
        t.upload(kind::adam_m, g, m);
        t.upload(kind::adam_v, g, v);
    }
    t.set_step_count(json_field<long>(state, "step", state_path.string()));
    return state;
}

template <class Trainer>
nlohmann::json load_checkpoint(Trainer& t, const std::filesystem::path& dir) {
    using kind = typename Trainer::state_kind;
    using R = typename Trainer::model_type::value_type;
    return load_checkpoint(t, dir, [&](const std::filesystem::path& from) {
        auto loaded = load_model_files<R>(from);
        const auto& c = t.model().config();
        if (loaded.config.n_layer != c.n_layer || loaded.config.n_embd != c.n_embd || loaded.config.n_head != c.n_head ||
            loaded.config.vocab_size != c.vocab_size || loaded.config.max_seq != c.max_seq)
            throw error("checkpoint '" + from.string() + "' holds a different model shape than the one being trained",
                        "resume with the same --n-layer/--n-head/--n-embd/--seq-len and tokenizer");
        for (std::size_t g = 0; g < loaded.blocks.size(); ++g) t.upload(kind::params, g, loaded.blocks[g]);
    });
}

}  // namespace strata
