// generator<Model>: text generation from a decoder_model (model/decoder.hpp) on the model's
// backend, with a KV cache.
//
// Glossary: T tokens in the context, n new tokens of one call, C channels, V vocab, L blocks,
// maxT the model's context (max_seq).
//
// Weights: uploaded once into device-tier blocks, one per layer group, in the model's layout (a
// checkpoint's, a trainer's download). Nothing else of a trainer is needed.
//
// KV cache, when the Block decodes (Decodes, nn/layer.hpp): each block has a device-tier cache of
// Block::cache_floats(maxT) elements. prefill() runs new tokens at positions length() .. through
// the token embedding (learned positions from row length() on), every block's decode, and, for the
// last row only, the final Norm's forward and the LM head; feed() is prefill() of one token. So a
// new token costs its own row through the model (GEMVs and attention over the cache), not the
// whole context again. A long prompt runs in chunks of at most options.prefill_rows rows, which
// bounds the scratch whatever maxT. The final Norm runs on one row: a norm is row-wise.
// A Block without decode falls back to the model's own forward (decoder_model::forward, the
// trainers' code) over the whole window for every token: correct, O(T) times slower; feed() and
// prefill() do not exist then.
//
// The reference: logits_uncached() is the model's full forward over tokens at positions 0 ..
// (the last position's logits), all_logits() every position's (the model's head_chunk_rows must
// hold T rows). Tests hold the cached logits to it.
//
// Context window, sliding: the model knows maxT positions, so generate() keeps at most the last
// maxT tokens. A prompt longer than maxT is cut to its last maxT tokens; when the cache is full,
// it is rebuilt from the last maxT - 1 tokens and the new token is appended (one prefill of maxT
// tokens per generated token from then on). Every next-token distribution is therefore the
// model's over the last min(length, maxT) tokens of the context, at positions 0, 1, ...: what
// cropping the context in nanoGPT's generate() computes. feed() and prefill() never slide: they
// refuse to go past maxT.
//
// Sampling: sample_token (model/sampler.hpp): temperature (0: greedy), top-k, one draw per token
// from an rng seeded by sample_options::seed, so a seed fixes the text on any backend whose
// logits agree.
//
// Memory (device tier): the weights; on first use of the cache, L x cache_floats(maxT), the
// decode scratch of prefill_rows rows and two residual buffers of them; on first use of the full
// forward, the model's activations for one maxT context (a scorer that only calls all_logits
// makes no cache; a cached generator that is never compared makes no activations).
//
// Synchronization: the upload waits for each block (its host staging is freed next); every call
// that returns logits waits for them (named: the host samples from them); nothing else waits. Not
// thread-safe (the cache is a member): one generator per thread.
#pragma once

#include <strata/core/error.hpp>            // strata::error
#include <strata/core/rng.hpp>              // rng
#include <strata/model/activations.hpp>     // kept_activations
#include <strata/model/decoder.hpp>         // decoder_model
#include <strata/model/sampler.hpp>         // sample_options, sample_token, detail::check_*
#include <strata/nn/layer.hpp>              // Decodes
#include <strata/nn/ops.hpp>                // ops
#include <strata/stream/group_binder.hpp>   // group_use
#include <strata/tensor/copy.hpp>           // copy_async
#include <strata/tensor/tensor_view.hpp>    // tensor_view
#include <strata/tensor/tiered_tensor.hpp>  // tiered_tensor
#include <strata/text/tokenizer.hpp>        // token_id

#include <algorithm>   // std::copy, std::fill, std::max, std::min
#include <cstddef>     // std::size_t
#include <cstdint>     // std::int32_t
#include <functional>  // std::function
#include <optional>    // std::optional
#include <span>        // std::span
#include <string>      // std::string, std::to_string
#include <utility>     // std::swap
#include <vector>      // std::vector

namespace strata {

struct generator_options {
    // Rows per decode call of a prefill: the decode scratch holds this many rows (at most maxT).
    std::size_t prefill_rows = 512;
};

template <class Model>
class generator {
public:
    using R = typename Model::value_type;
    using backend_type = typename Model::backend_type;
    using block_type = typename Model::block_type;
    using norm_type = typename Model::norm_type;
    using stream = typename backend_type::stream;
    // Whether the Block decodes with a KV cache (else every token runs the model's full forward).
    static constexpr bool cached = Decodes<block_type>;

    // blocks[g]: group g's parameter block in the model's layout, model.groups()[g].numel() values.
    generator(backend_type& backend, const Model& model, const std::vector<std::vector<R>>& blocks,
              generator_options options = {})
        : m_backend(backend),
          m_model(model),
          m_stream(backend.make_stream("generate")),
          m_block(model.block_layer_config()),
          m_norm(model.norm_layer_config()),
          m_rows(std::max<std::size_t>(1, std::min(options.prefill_rows, model.max_seq()))),
          m_logits(backend, shape{model.vocab_size()}, "generate.logits") {
        const auto& groups = model.groups();
        if (blocks.size() != groups.size())
            throw error("generator: " + std::to_string(blocks.size()) + " parameter blocks for a model of " +
                            std::to_string(groups.size()) + " layer groups (embeddings, " +
                            std::to_string(model.block_count()) + " blocks, final norm)",
                        "pass one block per group of the model, in the order of model.groups()");
        for (std::size_t g = 0; g < groups.size(); ++g) {
            if (blocks[g].size() != groups[g].numel())
                throw error("generator: " + group_name(g) + " has " + std::to_string(blocks[g].size()) +
                                " values, the model's layout " + std::to_string(groups[g].numel()) + " (" +
                                std::to_string(groups[g].parameter_count()) + " parameters plus alignment)",
                            "the blocks come from a model of another shape, or a block was not copied whole");
            m_params.emplace_back(backend, shape{groups[g].numel()}, "generate.params.g" + std::to_string(g));
            tiered_tensor<R, host_tier, backend_type> host(backend, m_params.back().shape(), "generate.upload");
            std::copy(blocks[g].begin(), blocks[g].end(), host.span().begin());
            m_params.back().copy_from(host, m_stream).wait();  // named: the host buffer is freed next
        }
        const decoder_config& c = model.config();
        const param_layout& embeddings = groups[0];
        m_wte = embeddings.find(c.token_embedding).offset;
        if (c.learned_positions) m_wpe = embeddings.find(c.position_embedding).offset;
        m_head = c.tied_head ? m_wte : embeddings.find(c.lm_head).offset;
    }

    const Model& model() const { return m_model; }
    // Tokens in the cache, at positions 0 .. length() - 1.
    std::size_t length() const { return m_tokens.size(); }
    std::span<const token_id> cached_tokens() const { return m_tokens; }
    // Empties the cache (its memory stays allocated; nothing is cleared: decode overwrites).
    void reset() { m_tokens.clear(); }

    // Appends one token at position length() and returns that position's logits (V).
    std::vector<R> feed(token_id token)
        requires cached
    {
        if (length() == m_model.max_seq())
            throw error("generator::feed: the KV cache is full (" + std::to_string(m_model.max_seq()) +
                            " tokens, the model's context)",
                        "reset() and prefill() the last max_seq - 1 tokens to slide the window; generate() does so");
        detail::check_token(token, m_model.vocab_size(), "generator::feed: the token");
        return append(std::span<const token_id>(&token, 1));
    }

    // Appends `tokens` at positions length() .. length() + size - 1 (chunks of prefill_rows rows)
    // and returns the last one's logits (V). After reset() this is the prompt.
    std::vector<R> prefill(std::span<const token_id> tokens)
        requires cached
    {
        check_window(length(), tokens.size(), "generator::prefill");
        detail::check_tokens(tokens, m_model.vocab_size(), "generator::prefill:");
        return append(tokens);
    }

    // The reference: the model's forward over `tokens` (positions 0 .. size - 1) without the cache,
    // the last position's logits (V). The cache is not touched.
    std::vector<R> logits_uncached(std::span<const token_id> tokens) {
        check_window(0, tokens.size(), "generator::logits_uncached");
        detail::check_tokens(tokens, m_model.vocab_size(), "generator::logits_uncached:");
        const std::size_t T = tokens.size();
        return read_logits(full_forward(tokens).logits(1, T, T - 1), 1);
    }

    // The logits (T, V) of every position of `tokens` (1 <= T <= maxT), one forward without the
    // cache: what the model predicts after each prefix. Needs a model whose head_chunk_rows >= T
    // (the LM head keeps only its last chunk of rows).
    std::vector<R> all_logits(std::span<const token_id> tokens) {
        check_window(0, tokens.size(), "generator::all_logits");
        detail::check_tokens(tokens, m_model.vocab_size(), "generator::all_logits:");
        const std::size_t T = tokens.size();
        return read_logits(full_forward(tokens).logits(1, T, 0, T), T);
    }

    // Generates up to o.max_new_tokens tokens after `prompt` and returns them (the new tokens only).
    // An empty prompt starts from o.bos. Generation stops early after o.stop_at_eot (which is
    // returned). on_token, when given, sees each token as soon as it is chosen. With the cache, it
    // is rebuilt from the prompt and holds the context's last window afterwards; beyond maxT the
    // window slides (see the top of this file).
    std::vector<token_id> generate(std::span<const token_id> prompt, const sample_options& o,
                                   const std::function<void(token_id)>& on_token = {}) {
        const std::size_t V = m_model.vocab_size(), maxT = m_model.max_seq();
        detail::check_sampling(V, o.temperature, o.top_k);
        if (o.stop_at_eot != -1) detail::check_token(o.stop_at_eot, V, "generate: stop_at_eot");
        std::vector<token_id> context(prompt.begin(), prompt.end());
        if (context.empty()) {
            if (o.bos == -1)
                throw error("generate: the prompt is empty and no start token was given",
                            "set sample_options::bos to the tokenizer's end-of-text id (eot_id())");
            detail::check_token(o.bos, V, "generate: bos");
            context.push_back(o.bos);
        }
        detail::check_tokens(context, V, "generate: prompt");
        std::vector<token_id> out;
        if (o.max_new_tokens == 0) return out;

        const auto last_window = [&] {
            return std::span<const token_id>(context).last(std::min(context.size(), maxT));
        };
        rng gen(o.seed);
        std::vector<R> logits;
        if constexpr (cached) {
            reset();
            logits = append(last_window());
        } else {
            logits = logits_uncached(last_window());
        }
        for (;;) {
            const token_id next = sample_token<R>(logits, o.temperature, o.top_k, gen);
            out.push_back(next);
            context.push_back(next);
            if (on_token) on_token(next);
            if (next == o.stop_at_eot || out.size() == o.max_new_tokens) break;
            if constexpr (cached) {
                if (length() < maxT) {
                    logits = append(std::span<const token_id>(&next, 1));
                } else {  // full: slide, rebuilding the cache from the last maxT - 1 tokens plus `next`
                    reset();
                    logits = append(last_window());
                }
            } else {
                logits = logits_uncached(last_window());
            }
        }
        return out;
    }

private:
    using op = ops<backend_type>;
    using int_device = tiered_tensor<std::int32_t, device_tier, backend_type>;
    using int_host = tiered_tensor<std::int32_t, host_tier, backend_type>;

    std::string group_name(std::size_t g) const {
        if (g == 0) return "group 0 (embeddings)";
        if (g == m_model.final_group()) return "group " + std::to_string(g) + " (final norm)";
        return "group " + std::to_string(g) + " (block " + std::to_string(g - 1) + ")";
    }

    void check_window(std::size_t first, std::size_t n, const std::string& what) const {
        if (n == 0) throw error(what + ": no tokens", "pass at least one token (the bos id for an empty prompt)");
        if (first + n > m_model.max_seq())
            throw error(what + ": " + std::to_string(first) + " cached + " + std::to_string(n) +
                            " new tokens exceed the model's context of " + std::to_string(m_model.max_seq()),
                        "keep at most max_seq tokens (generate() slides the window by itself)");
    }

    R* params(std::size_t group) { return m_params[group].device_data().get(); }

    // rows x V logits from the device to the caller; waits for them.
    std::vector<R> read_logits(const R* device, std::size_t rows) {
        const std::size_t n = rows * m_model.vocab_size();
        tiered_tensor<R, host_tier, backend_type>* host = &m_logits;
        std::optional<tiered_tensor<R, host_tier, backend_type>> more;
        if (rows > 1) host = &more.emplace(m_backend, shape{n}, "generate.all_logits");
        copy_async(m_backend, host->view(), tensor_view<const R, device_tier>(device, shape{n}), m_stream)
            .wait();  // named: the logits, to sample from or to hand to the caller
        return {host->span().begin(), host->span().begin() + static_cast<std::ptrdiff_t>(n)};
    }

    // The KV-cache path's device buffers, made on first use (a generator that only scores needs none).
    void make_cache()
        requires cached
    {
        if (m_cache) return;
        const std::size_t maxT = m_model.max_seq(), C = m_model.config().n_embd;
        const auto& bc = m_model.block_layer_config();
        const auto& nc = m_model.norm_layer_config();
        m_cache_floats = block_type::cache_floats(bc, maxT);
        m_cache.emplace(m_backend, shape{std::max<std::size_t>(1, m_model.block_count() * m_cache_floats)},
                        "generate.kv_cache");
        m_work.emplace(m_backend, shape{std::max<std::size_t>(1, block_type::decode_workspace_floats(bc, m_rows))},
                       "generate.decode_workspace");
        m_x.emplace(m_backend, shape{2 * m_rows * C}, "generate.residual");
        m_head_buffers.emplace(m_backend,
                               shape{C + std::max<std::size_t>(1, norm_type::activation_floats(nc, 1, 1)) +
                                     std::max<std::size_t>(1, norm_type::workspace_floats(nc, 1, 1)) +
                                     m_model.vocab_size()},
                               "generate.head");
        m_token_ids.emplace(m_backend, shape{maxT}, "generate.tokens");
        m_token_staging.emplace(m_backend, shape{maxT}, "generate.tokens.staging");
    }

    // Checked tokens at positions length() ..: through the embeddings and the blocks' decode in
    // chunks of m_rows, then the final norm and the head on the last row.
    std::vector<R> append(std::span<const token_id> tokens)
        requires cached
    {
        make_cache();
        const decoder_config& c = m_model.config();
        const std::size_t C = c.n_embd, V = c.vocab_size, maxT = c.max_seq, first = length();
        std::copy(tokens.begin(), tokens.end(), m_token_staging->span().begin() + static_cast<std::ptrdiff_t>(first));
        R* x = m_x->device_data().get();  // (2, rows, C): a block's input and output, in turn
        R* const cache = m_cache->device_data().get();
        R* const work = m_work->device_data().get();
        const R* last_row = nullptr;
        for (std::size_t done = 0; done < tokens.size();) {
            const std::size_t pos = first + done, n = std::min(m_rows, tokens.size() - done);
            std::int32_t* ids = m_token_ids->device_data().get() + pos;
            copy_async(m_backend, tensor_view<std::int32_t, device_tier>(ids, shape{n}),
                       tensor_view<const std::int32_t, host_tier>(m_token_staging->span().data() + pos, shape{n}),
                       m_stream);
            const R* p0 = params(0);
            // positions pos ..: the position table from row pos (the kernel's t = 0 is position pos)
            op::embedding_forward(m_stream, x, ids, p0 + m_wte, c.learned_positions ? p0 + m_wpe + pos * C : nullptr,
                                  1, n, C, V, maxT - pos);
            R* in = x;
            R* out = x + m_rows * C;
            for (std::size_t l = 0; l < m_model.block_count(); ++l) {
                m_block.decode(m_stream, params(m_model.block_group(l)), out, in, cache + l * m_cache_floats, work,
                               pos, n);
                std::swap(in, out);
            }
            last_row = in + (n - 1) * C;
            done += n;
        }
        // the final norm and the head, on the last row only
        const auto& nc = m_model.norm_layer_config();
        R* norm_out = m_head_buffers->device_data().get();
        R* norm_acts = norm_out + C;
        R* norm_work = norm_acts + std::max<std::size_t>(1, norm_type::activation_floats(nc, 1, 1));
        R* logits = norm_work + std::max<std::size_t>(1, norm_type::workspace_floats(nc, 1, 1));
        m_norm.forward(m_stream, params(m_model.final_group()), norm_out, norm_acts, last_row, norm_work, 1, 1);
        op::lm_head_forward(m_stream, logits, static_cast<const R*>(norm_out), params(0) + m_head, 1, 1, C, V);
        auto result = read_logits(logits, 1);
        // Only now: a throw above leaves the cache's token list as it was (rows past it are scratch).
        m_tokens.insert(m_tokens.end(), tokens.begin(), tokens.end());
        return result;
    }

    // The model's own forward over checked `window` (1 <= size <= maxT) at positions 0, 1, ...;
    // returns the activations holding its logits. The activations are made on first use.
    typename Model::activations& full_forward(std::span<const token_id> window) {
        const std::size_t T = window.size(), maxT = m_model.max_seq();
        if (!m_act) {
            m_act.emplace(m_backend, m_model, 1, maxT, kept_activations::none());
            m_window.emplace(m_backend, shape{maxT}, "generate.window");
            m_targets.emplace(m_backend, shape{maxT}, "generate.targets");
            std::fill(m_targets->span().begin(), m_targets->span().end(), 0);  // the forward's loss needs valid targets
        }
        std::copy(window.begin(), window.end(), m_window->span().begin());
        using int_view = tensor_view<std::int32_t, device_tier>;
        using const_int_view = tensor_view<const std::int32_t, host_tier>;
        copy_async(m_backend, int_view(m_act->tokens(), shape{T}), const_int_view(m_window->span().data(), shape{T}),
                   m_stream);
        copy_async(m_backend, int_view(m_act->targets(), shape{T}), const_int_view(m_targets->span().data(), shape{T}),
                   m_stream);
        binder bind{*this};
        m_model.forward(bind, *m_act, 1, T, m_stream);
        return *m_act;
    }

    // The GroupBinder of the forward: the uploaded blocks, no gradients.
    struct binder {
        generator& g;
        const R* params(std::size_t group, stream&, group_use) { return g.params(group); }
        R* grads(std::size_t, stream&) { return nullptr; }
        void done(std::size_t, stream&, group_use) {}
    };

    backend_type& m_backend;
    Model m_model;
    stream m_stream;
    block_type m_block;
    norm_type m_norm;
    std::size_t m_rows;  // rows per decode call
    std::vector<tiered_tensor<R, device_tier, backend_type>> m_params;  // one block per group
    tiered_tensor<R, host_tier, backend_type> m_logits;                 // (V), staging
    std::size_t m_wte = 0, m_wpe = 0, m_head = 0;                       // offsets in group 0
    std::vector<token_id> m_tokens;                                     // the cached tokens, position order
    // KV-cache path (a Block that decodes): made on first use
    std::size_t m_cache_floats = 0;                                     // per block
    std::optional<tiered_tensor<R, device_tier, backend_type>> m_cache;  // (L, cache_floats)
    std::optional<tiered_tensor<R, device_tier, backend_type>> m_work;   // decode workspace of m_rows rows
    std::optional<tiered_tensor<R, device_tier, backend_type>> m_x;      // (2, rows, C)
    std::optional<tiered_tensor<R, device_tier, backend_type>> m_head_buffers;  // norm out, acts, workspace; logits
    std::optional<int_device> m_token_ids;                               // (maxT), by position
    std::optional<int_host> m_token_staging;                             // (maxT), by position
    // The full forward (reference, all_logits, a Block without decode): made on first use.
    std::optional<typename Model::activations> m_act;
    std::optional<int_host> m_window, m_targets;  // (maxT) staging
};

}  // namespace strata
