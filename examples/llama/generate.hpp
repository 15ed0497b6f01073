// generator<Model>: text generation with a decoder_model's own forward, on the model's backend.
//
// The weights are uploaded once into device-tier blocks, one per layer group; a binder hands the
// model their addresses (the GroupBinder protocol of the trainers, without gradients). Each new
// token runs the model's whole forward over the context (no KV cache: T forwards of up to maxT
// tokens, fine for a demo) and reads the logits of the last position from the activations.
//
// Context window: the activations hold maxT = max_seq positions, so every next-token
// distribution is the model's over the last min(length, maxT) tokens of the context, at positions
// 0, 1, ...: what cropping the context in nanoGPT's generate() computes, and what strata's
// gpt_sampler gives. Sampling is strata::sample_token (temperature, top-k, one draw per token from
// a seeded strata::rng), so a seed fixes the text.
//
// Glossary: T tokens in the context, V vocab, maxT the model's context.
#pragma once

#include <strata/core/error.hpp>            // strata::error
#include <strata/core/rng.hpp>              // strata::rng
#include <strata/model/gpt.hpp>             // strata::group_use
#include <strata/model/sampler.hpp>         // strata::sample_options, strata::sample_token
#include <strata/tensor/copy.hpp>           // strata::copy_async
#include <strata/tensor/tensor_view.hpp>    // strata::tensor_view
#include <strata/tensor/tiered_tensor.hpp>  // strata::tiered_tensor
#include <strata/text/tokenizer.hpp>        // strata::token_id

#include <algorithm>  // std::copy, std::fill, std::min
#include <cstddef>    // std::size_t
#include <span>       // std::span
#include <string>     // std::string, std::to_string
#include <vector>     // std::vector

namespace llama {

template <class Model>
class generator {
public:
    using R = typename Model::value_type;
    using backend_type = typename Model::backend_type;
    using stream = typename backend_type::stream;

    // blocks[g]: group g's parameter block in the model's layout (a checkpoint's, a trainer's).
    generator(backend_type& backend, const Model& model, const std::vector<std::vector<R>>& blocks)
        : m_backend(backend),
          m_model(model),
          m_stream(backend.make_stream("generate")),
          m_act(backend, model, 1, model.max_seq(), strata::kept_activations::none()),
          m_tokens(backend, strata::shape{model.max_seq()}, "generate.tokens"),
          m_targets(backend, strata::shape{model.max_seq()}, "generate.targets"),
          m_logits(backend, strata::shape{model.vocab_size()}, "generate.logits") {
        const auto& groups = model.groups();
        if (blocks.size() != groups.size())
            throw strata::error("generator: " + std::to_string(blocks.size()) + " parameter blocks for a model of " +
                                std::to_string(groups.size()) + " layer groups");
        for (std::size_t g = 0; g < groups.size(); ++g) {
            if (blocks[g].size() != groups[g].numel())
                throw strata::error("generator: group " + std::to_string(g) + " has " + std::to_string(blocks[g].size()) +
                                        " values, the model's layout " + std::to_string(groups[g].numel()),
                                    "pass blocks in the layout of this model (same config)");
            m_params.emplace_back(backend, strata::shape{groups[g].numel()}, "generate.params.g" + std::to_string(g));
            strata::tiered_tensor<R, strata::host_tier, backend_type> host(backend, m_params.back().shape(),
                                                                           "generate.upload");
            std::copy(blocks[g].begin(), blocks[g].end(), host.span().begin());
            m_params.back().copy_from(host, m_stream).wait();  // named: the host buffer is freed next
        }
        // The forward also computes the loss: any valid targets will do.
        std::fill(m_targets.span().begin(), m_targets.span().end(), 0);
    }

    // The model's next-token logits (V) after `context`: its last min(size, maxT) tokens.
    std::span<const R> next_logits(std::span<const strata::token_id> context) {
        if (context.empty()) throw strata::error("generator: an empty context", "start from the tokenizer's eot id");
        const std::size_t T = std::min(context.size(), m_model.max_seq()), V = m_model.vocab_size();
        forward(context.last(T));
        const strata::tensor_view<const R, strata::device_tier> last(m_act.logits(1, T, T - 1), strata::shape{V});
        strata::copy_async(m_backend, m_logits.view(), last, m_stream).wait();  // named: the logits, to sample
        return m_logits.span();
    }

    // The logits (T, V) of every position of `tokens` (1 <= T <= maxT), one forward: what the
    // model predicts after each prefix. Needs a model built with head_chunk_rows >= T (the LM head
    // keeps only its last chunk of rows).
    std::vector<R> all_logits(std::span<const strata::token_id> tokens) {
        const std::size_t T = tokens.size(), V = m_model.vocab_size();
        if (T == 0 || T > m_model.max_seq())
            throw strata::error("generator: " + std::to_string(T) + " tokens to score; the model's context holds 1 to " +
                                    std::to_string(m_model.max_seq()),
                                "score at most max_position_embeddings tokens");
        forward(tokens);
        strata::tiered_tensor<R, strata::host_tier, backend_type> host(m_backend, strata::shape{T * V}, "generate.all_logits");
        const strata::tensor_view<const R, strata::device_tier> rows(m_act.logits(1, T, 0, T), strata::shape{T * V});
        strata::copy_async(m_backend, host.view(), rows, m_stream).wait();  // named: the logits, to the caller
        return {host.span().begin(), host.span().end()};
    }

    // Up to o.max_new_tokens tokens after `prompt` (the new ones only); stops after o.stop_at_eot.
    // An empty prompt starts from o.bos.
    std::vector<strata::token_id> generate(std::span<const strata::token_id> prompt, const strata::sample_options& o) {
        std::vector<strata::token_id> context(prompt.begin(), prompt.end());
        if (context.empty()) {
            if (o.bos == -1)
                throw strata::error("generate: the prompt is empty and no start token was given",
                                    "set sample_options::bos to the tokenizer's end-of-text id");
            context.push_back(o.bos);
        }
        std::vector<strata::token_id> out;
        strata::rng gen(o.seed);
        while (out.size() < o.max_new_tokens) {
            const strata::token_id next = strata::sample_token<R>(next_logits(context), o.temperature, o.top_k, gen);
            out.push_back(next);
            context.push_back(next);
            if (next == o.stop_at_eot) break;
        }
        return out;
    }

private:
    // The model's forward over `window` (1 <= size <= maxT) at positions 0, 1, ...
    void forward(std::span<const strata::token_id> window) {
        const std::size_t T = window.size(), V = m_model.vocab_size();
        for (std::size_t i = 0; i < T; ++i)
            if (window[i] < 0 || static_cast<std::size_t>(window[i]) >= V)
                throw strata::error("generator: token id " + std::to_string(window[i]) + " is outside the vocabulary [0, " +
                                        std::to_string(V) + ")",
                                    "the tokenizer and the model must agree on the vocabulary size");
        std::copy(window.begin(), window.end(), m_tokens.span().begin());
        using int_view = strata::tensor_view<std::int32_t, strata::device_tier>;
        using const_int_view = strata::tensor_view<const std::int32_t, strata::host_tier>;
        strata::copy_async(m_backend, int_view(m_act.tokens(), strata::shape{T}),
                           const_int_view(m_tokens.span().data(), strata::shape{T}), m_stream);
        strata::copy_async(m_backend, int_view(m_act.targets(), strata::shape{T}),
                           const_int_view(m_targets.span().data(), strata::shape{T}), m_stream);
        binder bind{*this};
        m_model.forward(bind, m_act, 1, T, m_stream);
    }

    struct binder {
        generator& g;
        const R* params(std::size_t group, stream&, strata::group_use) { return g.m_params[group].device_data().get(); }
        R* grads(std::size_t, stream&) { return nullptr; }
        void done(std::size_t, stream&, strata::group_use) {}
    };

    backend_type& m_backend;
    const Model& m_model;
    stream m_stream;
    typename Model::activations m_act;
    std::vector<strata::tiered_tensor<R, strata::device_tier, backend_type>> m_params;
    strata::tiered_tensor<std::int32_t, strata::host_tier, backend_type> m_tokens, m_targets;  // staging
    strata::tiered_tensor<R, strata::host_tier, backend_type> m_logits;                        // (V)
};

}  // namespace llama
