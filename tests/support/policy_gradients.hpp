// The gradients of one forward_backward of a decoder model (strata::decoder_model of any Block)
// under an activation policy, for the tests that every policy (recompute, offloaded inputs, kept
// parts) gives the gradients of keeping every block, bitwise:
//
//   test::policy_gradients<float, B, decltype(model)> grads(backend, model, vocab, 5);
//   grads.check_every_policy({.rows = 3, .cols = 16, .batch = 2, .seq = 11});  // doctest CHECKs
//   const auto all = grads(kept_activations::all(), shape);                  // or one policy's
//
// Every tensor's weights are drawn from the seed (a normal of deviation 0.2), not the model's own
// initialization: a fresh LoRA adapter's B is zero, which would make its A's gradient zero under
// any policy. The tokens are a fixed pattern of the vocabulary. The activations are allocated for
// rows x cols and the micro-batch is batch x seq inside them (a smaller micro-batch must find its
// kept parts and inputs at its own shape).
#pragma once

#include <strata/core/rng.hpp>                // rng
#include <strata/model/activations.hpp>       // kept_activations
#include <strata/nn/ops.hpp>                  // ops<B>::zero
#include <strata/stream/group_binder.hpp>     // group_use
#include <strata/core/shape.hpp>            // shape
#include <strata/tensor/tiered_tensor.hpp>    // tiered_tensor, host_tier, device_tier

#include <doctest/doctest.h>  // CHECK, CAPTURE

#include <cstddef>  // std::size_t
#include <cstdint>  // std::int32_t, std::uint64_t
#include <cstring>  // std::memcmp
#include <vector>   // std::vector

namespace strata::test {

struct micro_batch_shape {
    std::size_t rows = 1, cols = 1;    // the activations' allocation
    std::size_t batch = 1, seq = 1;    // the micro-batch run in them
};

template <class R, class B, class Model>
class policy_gradients {
public:
    policy_gradients(B& backend, const Model& model, std::size_t vocab, std::uint64_t seed)
        : m_backend(backend), m_model(model), m_vocab(vocab), m_stream(backend.make_stream("policy gradients")) {
        rng gen(seed);
        for (std::size_t g = 0; g < model.groups().size(); ++g) {
            const std::size_t n = model.groups()[g].numel();
            tiered_tensor<R, host_tier, B> host(backend, shape{n}, "weights");
            for (R& w : host.span()) w = static_cast<R>(gen.normal(0.0, 0.2));
            m_bind.weights.emplace_back(backend, shape{n}, "params");
            m_bind.weights.back().copy_from(host, m_stream).wait();
            m_bind.gradients.emplace_back(backend, shape{n}, "grads");
        }
    }

    // Every group's gradient block after one forward_backward under `kept`.
    std::vector<std::vector<R>> operator()(kept_activations kept, micro_batch_shape m) {
        typename Model::activations act(m_backend, m_model, m.rows, m.cols, kept);
        tiered_tensor<std::int32_t, host_tier, B> tokens(m_backend, shape{m.rows * m.cols}, "tokens");
        for (std::size_t i = 0; i < m.rows * m.cols; ++i)
            tokens.span()[i] = static_cast<std::int32_t>((7 * i + 3) % m_vocab);  // the first batch x seq are read
        act.tokens_tensor().copy_from(tokens, m_stream);
        act.targets_tensor().copy_from(tokens, m_stream);
        for (auto& g : m_bind.gradients) ops<B>::zero(m_stream, g.device_data().get(), g.shape().numel());
        m_model.forward_backward(m_bind, act, m.batch, m.seq, 1.0, m_stream);
        std::vector<std::vector<R>> out;
        for (auto& g : m_bind.gradients) {
            tiered_tensor<R, host_tier, B> h(m_backend, shape{g.shape().numel()}, "grads");
            h.copy_from(g, m_stream).wait();
            out.emplace_back(h.span().begin(), h.span().end());
        }
        return out;
    }

    // Every policy that recomputes (none kept; some kept; inputs offloaded; kept parts with each)
    // gives the gradients of keeping every block, bitwise (doctest CHECKs, the policy captured).
    void check_every_policy(micro_batch_shape m) {
        const auto all = (*this)(kept_activations::all(), m);
        for (kept_activations kept : {kept_activations{0, false, true}, kept_activations{1, false, true},
                                      kept_activations{0, true, true}, kept_activations::none()}) {
            CAPTURE(kept.count);
            CAPTURE(kept.offload_inputs);
            CAPTURE(kept.keep_parts);
            CHECK(same_bits((*this)(kept, m), all));
        }
    }

    // The same bits in every group (== would take -0 for 0 and refuse NaN for NaN).
    static bool same_bits(const std::vector<std::vector<R>>& a, const std::vector<std::vector<R>>& b) {
        if (a.size() != b.size()) return false;
        for (std::size_t g = 0; g < a.size(); ++g)
            if (a[g].size() != b[g].size() || std::memcmp(a[g].data(), b[g].data(), a[g].size() * sizeof(R)) != 0)
                return false;
        return true;
    }

private:
    // Each group's weights and gradient block, on the device (strata's GroupBinder).
    struct binder {
        std::vector<tiered_tensor<R, device_tier, B>> weights, gradients;
        const R* params(std::size_t g, typename B::stream&, group_use) { return weights[g].device_data().get(); }
        R* grads(std::size_t g, typename B::stream&) { return gradients[g].device_data().get(); }
        void done(std::size_t, typename B::stream&, group_use) {}
    };

    B& m_backend;
    const Model& m_model;
    std::size_t m_vocab;
    typename B::stream m_stream;
    binder m_bind;
};

}  // namespace strata::test
