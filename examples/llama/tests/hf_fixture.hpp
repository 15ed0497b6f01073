// What the Hugging Face parity tests of the Llama example share (hf_llama_fixture_test.cpp,
// hf_llama_trajectory_test.cpp): where the fixtures made by tools/make_llama_fixture.py live, a
// fixture directory as strata's loader reads it with torch's reference beside it, the comparison
// that prints the largest difference and the first value pairs, a model's blocks in HF's names,
// and a model's forward logits on a batch (forward_logits).
#pragma once

#include "../llama_model.hpp"  // llama::load_llama_files, hf_tensors_of, detail::to_hf

#include <strata/data/loader.hpp>       // data::batch
#include <strata/io/safetensors.hpp>    // safetensors_file
#include <strata/strata.hpp>            // tiered_tensor, copy_async, kept_activations, group_use
#include <strata/train/checkpoint.hpp>  // host_blocks

#include <algorithm>   // std::max, std::min
#include <cmath>       // std::abs
#include <cstddef>     // std::size_t
#include <cstdint>     // std::int32_t
#include <cstdio>      // std::snprintf
#include <filesystem>  // std::filesystem
#include <span>        // std::span
#include <string>      // std::string
#include <vector>      // std::vector

namespace llama_fixture {

using namespace strata;
namespace fs = std::filesystem;

inline fs::path fixtures_dir() {
#ifdef STRATA_SOURCE_DIR
    return fs::path(STRATA_SOURCE_DIR) / "tests" / "fixtures" / "hf_llama";
#else
    return fs::path(__FILE__).parent_path().parent_path().parent_path().parent_path() / "tests" / "fixtures" / "hf_llama";
#endif
}

// The HF directory as strata's loader reads it, and torch's reference.
struct fixture {
    fs::path dir;
    llama::loaded_llama hf;
    safetensors_file ref;
    std::size_t batch, seq;

    explicit fixture(const fs::path& d)
        : dir(d),
          hf(llama::load_llama_files(d)),
          ref(safetensors_file::open(d / "reference.safetensors")),
          batch(ref.info("inputs").shape.at(0)),
          seq(ref.info("inputs").shape.at(1)) {}

    data::batch tokens() const {
        const auto in = ref.get<std::int32_t>("inputs"), out = ref.get<std::int32_t>("targets");
        return {{in.begin(), in.end()}, {out.begin(), out.end()}, {}};
    }
    double scalar(const std::string& key) const { return ref.get<double>(key, {1})[0]; }
    std::span<const float> tensor(const std::string& key, const std::vector<std::size_t>& shape) const {
        return ref.get<float>(key, shape);
    }
};

// The largest difference of two tensors, where it is, and the first value pairs: what a failure prints.
struct difference {
    double max_diff = 0, max_ref = 0;
    std::string report;

    double normalized() const { return max_ref > 0 ? max_diff / max_ref : (max_diff > 0 ? 1.0 : 0.0); }
};

inline difference compare(const std::string& what, std::span<const float> got, std::span<const float> want) {
    difference d;
    if (got.size() != want.size()) {
        d.max_diff = 1e30;
        d.report = what + ": " + std::to_string(got.size()) + " values, torch has " + std::to_string(want.size());
        return d;
    }
    std::size_t worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double diff = std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
        if (!(diff <= d.max_diff)) d.max_diff = diff, worst = i;  // a NaN becomes the worst
        d.max_ref = std::max(d.max_ref, std::abs(static_cast<double>(want[i])));
    }
    char line[320];
    std::snprintf(line, sizeof line,
                  "%s: normalized error %.3g (max |strata - torch| %.3g at [%zu]: %.9g vs %.9g; max |torch| %.3g); first pairs:",
                  what.c_str(), d.normalized(), d.max_diff, worst, got.empty() ? 0.0 : static_cast<double>(got[worst]),
                  want.empty() ? 0.0 : static_cast<double>(want[worst]), d.max_ref);
    d.report = line;
    for (std::size_t i = 0; i < std::min<std::size_t>(4, got.size()); ++i) {
        std::snprintf(line, sizeof line, " (%.9g, %.9g)", static_cast<double>(got[i]), static_cast<double>(want[i]));
        d.report += line;
    }
    return d;
}

inline double relative(double got, double want) { return std::abs(got - want) / std::abs(want); }

inline constexpr const char* family_shapes[] = {"llama3_l2_h6_kv2_c42_d8_f60_v71", "qwen2_l2_h6_kv2_c36_f52_v73",
                                                "mistral_l2_h4_kv1_c32_f56_v61"};

inline fs::path family_dir() { return fixtures_dir().parent_path() / "hf_llama_family"; }

// Every HF tensor of a model's blocks (weights or gradients in the model's layout), in HF's name,
// shape and layout (q, k, v split; nn.Linear (out, in)): visit(hf_tensor, values).
template <class Model, class Visit>
void for_each_hf_tensor(const Model& model, const std::vector<std::vector<float>>& blocks, Visit&& visit) {
    for (std::size_t g = 0; g < model.group_count(); ++g)
        for (const auto& slot : model.groups()[g].slots()) {
            const float* p = blocks[g].data() + slot.offset;
            for (const llama::hf_tensor& hf : llama::hf_tensors_of(model, g, slot))
                visit(hf, hf.transposed ? llama::detail::to_hf(p, slot.spec.shape.extents()[1], hf)
                                        : std::vector<float>(p + hf.column, p + hf.column + shape(hf.shape).numel()));
        }
}

// Gives the model device copies of the weights (forward only).
template <class B>
struct device_weights {
    std::vector<tiered_tensor<float, device_tier, B>> blocks;
    device_weights(B& backend, const host_blocks<float>& host, typename B::stream& s) {
        for (std::size_t g = 0; g < host.size(); ++g) {
            tiered_tensor<float, host_tier, B> staged(backend, shape{host[g].size()}, "weights.host");
            std::copy(host[g].begin(), host[g].end(), staged.span().begin());
            blocks.emplace_back(backend, shape{host[g].size()}, "weights");
            blocks.back().copy_from(staged, s).wait();  // named: the staging buffer is freed next
        }
    }
    const float* params(std::size_t g, typename B::stream&, group_use) { return blocks[g].device_data().get(); }
    float* grads(std::size_t g, typename B::stream&) {
        throw error("device_weights: gradients of group " + std::to_string(g) + " asked for in a forward pass",
                    "only model.forward may run with this binder");
    }
    void done(std::size_t, typename B::stream&, group_use) {}
};

// The logits (B, T, V) of `model` with `blocks` as weights on batch `b` (B x T tokens): one forward.
template <class B>
std::vector<float> forward_logits(B& backend, const llama::llama_model<B>& model, const host_blocks<float>& blocks,
                                  const data::batch& b, std::size_t batch, std::size_t seq) {
    auto s = backend.make_stream("parity");
    typename llama::llama_model<B>::activations act(backend, model, batch, seq, kept_activations::none());
    const std::size_t BT = batch * seq, V = model.vocab_size();
    tiered_tensor<std::int32_t, host_tier, B> tokens(backend, shape{BT}, "tokens"), targets(backend, shape{BT}, "targets");
    std::copy(b.inputs.begin(), b.inputs.end(), tokens.span().begin());
    std::copy(b.targets.begin(), b.targets.end(), targets.span().begin());
    act.tokens_tensor().copy_from(tokens, s);
    act.targets_tensor().copy_from(targets, s);
    device_weights<B> bind(backend, blocks, s);
    model.forward(bind, act, batch, seq, s);
    tiered_tensor<float, host_tier, B> logits(backend, shape{BT * V}, "logits");
    copy_async(backend, logits.view(), tensor_view<const float, device_tier>(act.logits(batch, seq, 0, BT), shape{BT * V}), s).wait();
    return {logits.span().begin(), logits.span().end()};
}

}  // namespace llama_fixture
