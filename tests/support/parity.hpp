// What the parity tests against PyTorch share (tests/hf/hf_parity_test.cpp for GPT-2,
// examples/llama/tests/ for the Llama family): the comparison that prints the largest difference
// and the first value pairs, a fixture's reference file, and a model's forward logits on one batch
// with given weights.
#pragma once

#include <strata/core/error.hpp>        // strata::error
#include <strata/data/loader.hpp>       // data::batch
#include <strata/io/safetensors.hpp>    // safetensors_file
#include <strata/strata.hpp>            // tiered_tensor, copy_async, tensor_view, kept_activations, group_use
#include <strata/train/checkpoint.hpp>  // host_blocks

#include <algorithm>  // std::copy, std::max, std::min
#include <cmath>      // std::abs
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int32_t
#include <cstdio>     // std::snprintf
#include <filesystem>  // std::filesystem::path
#include <span>       // std::span
#include <string>     // std::string, std::to_string
#include <vector>     // std::vector

namespace strata::test {

// torch's reference.safetensors of a parity fixture: one batch (inputs, targets: I32 (B, T)) and
// what torch computed on it (F64 scalars and series, F32 tensors).
struct reference {
    safetensors_file ref;
    std::size_t batch, seq;

    explicit reference(const std::filesystem::path& file)
        : ref(safetensors_file::open(file)), batch(ref.info("inputs").shape.at(0)), seq(ref.info("inputs").shape.at(1)) {}

    data::batch tokens() const {
        const auto in = ref.get<std::int32_t>("inputs"), out = ref.get<std::int32_t>("targets");
        return {{in.begin(), in.end()}, {out.begin(), out.end()}, {}};
    }
    double scalar(const std::string& key) const { return ref.get<double>(key, {1})[0]; }
    std::span<const double> series(const std::string& key) const { return ref.get<double>(key); }
    std::span<const float> tensor(const std::string& key, const std::vector<std::size_t>& shape) const {
        return ref.get<float>(key, shape);
    }
};

// The largest difference of two tensors, where it is, and the first value pairs: what a failure prints.
struct difference {
    double max_diff = 0, max_ref = 0;
    std::size_t worst = 0;
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
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double diff = std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
        if (!(diff <= d.max_diff)) d.max_diff = diff, d.worst = i;  // a NaN becomes the worst
        d.max_ref = std::max(d.max_ref, std::abs(static_cast<double>(want[i])));
    }
    char line[320];
    std::snprintf(line, sizeof line,
                  "%s: normalized error %.3g (max |strata - torch| %.3g at [%zu]: %.9g vs %.9g; max |torch| %.3g); first pairs:",
                  what.c_str(), d.normalized(), d.max_diff, d.worst, got.empty() ? 0.0 : static_cast<double>(got[d.worst]),
                  want.empty() ? 0.0 : static_cast<double>(want[d.worst]), d.max_ref);
    d.report = line;
    for (std::size_t i = 0; i < std::min<std::size_t>(4, got.size()); ++i) {
        std::snprintf(line, sizeof line, " (%.9g, %.9g)", static_cast<double>(got[i]), static_cast<double>(want[i]));
        d.report += line;
    }
    return d;
}

inline double relative(double got, double want) { return std::abs(got - want) / std::abs(want); }

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

// The logits (B, T, V) of `model` with `blocks` as weights on batch `b` (B x T tokens): one forward
// with activations that keep `kept`.
template <class B, class Model>
std::vector<float> forward_logits(B& backend, const Model& model, const host_blocks<float>& blocks, const data::batch& b,
                                  std::size_t batch, std::size_t seq, kept_activations kept) {
    auto s = backend.make_stream("parity");
    typename Model::activations act(backend, model, batch, seq, kept);
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

}  // namespace strata::test
