// gpt_sampler<R>: text generation for the example GPT on the host, with a KV cache.
//
// Glossary: T positions so far, n new tokens, C channels, NH heads, HS head size (C / NH),
// V vocab, maxT the context (n_positions, the rows of wpe), L layers.
//
// The sampler owns host copies of the model's layer-group blocks, in exactly gpt_model's layout
// (group 0 = wte + wpe, groups 1..L = transformer blocks, group L+1 = ln_f; the LM head is tied
// to wte), as a checkpoint or trainer::download gives them. It computes with the CPU reference
// kernels; the one piece of its own is the attention of new tokens against the cache.
//
// KV cache: per layer, the keys and values of every cached position, (maxT, C) each, allocated
// once (2 L maxT C values). Appending a token costs its GEMVs plus O(T C) attention, instead of
// recomputing the whole prefix (O(T^2 C) attention and T times the GEMMs).
//
// Context window, sliding: the position table has maxT rows, so generate() keeps at most the
// last maxT tokens. A prompt longer than maxT is cut to its last maxT tokens; when the cache is
// full, the cache is rebuilt from the last maxT - 1 tokens and the new token is appended (one
// prefill of maxT tokens per generated token from then on). Every next-token distribution is
// therefore the model's over the last min(length, maxT) tokens of the context, at positions
// 0, 1, ...: what cropping the context in nanoGPT's generate() computes. feed() and prefill()
// themselves never slide: they refuse to go past maxT.
//
// Not thread-safe (the cache and the scratch are members): one sampler per thread.
#pragma once

#include <strata/backend/cpu_backend.hpp>    // cpu_backend (the layout is gpt_model<R, cpu_backend>'s)
#include <strata/core/error.hpp>             // strata::error
#include <strata/core/rng.hpp>               // rng
#include <strata/kernels/cpu/attention.hpp>  // attention_forward, attention_saved
#include <strata/kernels/cpu/embedding.hpp>  // embedding_forward
#include <strata/kernels/cpu/gelu.hpp>       // gelu_forward
#include <strata/kernels/cpu/layernorm.hpp>  // layernorm_forward
#include <strata/kernels/cpu/matmul.hpp>     // matmul_forward, lm_head_forward
#include <strata/kernels/cpu/residual.hpp>   // residual_forward
#include <strata/model/gpt.hpp>              // gpt_model
#include <strata/nn/gpt2_config.hpp>         // gpt_config
#include <strata/tensor/param_layout.hpp>    // param_layout
#include <strata/text/tokenizer.hpp>         // token_id

#include <algorithm>   // std::copy, std::fill, std::max, std::nth_element, std::sort
#include <cmath>       // std::exp, std::isfinite, std::sqrt
#include <concepts>    // std::floating_point
#include <cstddef>     // std::size_t
#include <cstdint>     // std::uint64_t
#include <functional>  // std::function
#include <limits>      // std::numeric_limits
#include <numeric>     // std::iota
#include <span>        // std::span
#include <string>      // std::string, std::to_string
#include <utility>     // std::move
#include <vector>      // std::vector

namespace strata {

struct sample_options {
    std::size_t max_new_tokens = 64;
    double temperature = 1.0;   // logits are divided by it; 0 = greedy (argmax, ties to the lower id)
    std::size_t top_k = 0;      // sample among the k largest logits (ties to the lower id); 0 = all V
    std::uint64_t seed = 0;     // strata::rng seed: the same seed gives the same tokens
    token_id stop_at_eot = -1;  // stop once this id is generated (it is returned too); -1 = never
    token_id bos = -1;          // an empty prompt starts from this id (the tokenizer's eot_id()); -1 = none
};

namespace detail {

inline void check_sampling(std::size_t V, double temperature, std::size_t top_k) {
    if (!std::isfinite(temperature) || temperature < 0)
        throw error("sampling: temperature " + std::to_string(temperature) + " is not a finite number >= 0",
                    "0 is greedy decoding, 1 samples the model's distribution, larger values flatten it");
    if (top_k > V)
        throw error("sampling: top_k " + std::to_string(top_k) + " is larger than the vocabulary (V=" +
                        std::to_string(V) + ")",
                    "use 0 to sample among all ids, or a k in [1, V]");
}

inline void check_token(token_id id, std::size_t V, const std::string& what) {
    if (id < 0 || static_cast<std::size_t>(id) >= V)
        throw error(what + " is id " + std::to_string(id) + ", outside [0, V=" + std::to_string(V) + ")",
                    "the tokenizer and the model must agree on the vocabulary size");
}

inline void check_tokens(std::span<const token_id> ids, std::size_t V, const std::string& what) {
    for (std::size_t i = 0; i < ids.size(); ++i) check_token(ids[i], V, what + " token " + std::to_string(i));
}

}  // namespace detail

// One draw from softmax(logits / temperature), restricted to the top_k largest logits (0 = all).
// temperature 0 is greedy: the argmax, the lowest id among equal maxima, and no draw. Otherwise
// the probabilities are computed in double and exactly one gen.uniform() is consumed, so a seed
// fixes the sequence. Ties at the top-k cut keep the lower ids.
template <std::floating_point R>
token_id sample_token(std::span<const R> logits,  // (V)
                      double temperature, std::size_t top_k, rng& gen) {
    const std::size_t V = logits.size();
    if (V == 0) throw error("sample_token: no logits to sample from", "pass the V logits of one position");
    detail::check_sampling(V, temperature, top_k);
    std::size_t best = 0;
    for (std::size_t i = 0; i < V; ++i) {
        if (!std::isfinite(logits[i]))
            throw error("sample_token: the logit of id " + std::to_string(i) + " is " + std::to_string(logits[i]),
                        "the weights hold NaN or infinity (a diverged run or a damaged checkpoint?)");
        if (logits[i] > logits[best]) best = i;
    }
    if (temperature == 0) return static_cast<token_id>(best);

    std::vector<token_id> ids(V);
    std::iota(ids.begin(), ids.end(), token_id{0});
    const std::size_t k = top_k == 0 ? V : top_k;
    if (k < V) {
        // A strict total order (larger logit first, then lower id), so the kept set is unique.
        const auto before = [&](token_id a, token_id b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        };
        std::nth_element(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k - 1), ids.end(), before);
        ids.resize(k);
        std::sort(ids.begin(), ids.end());  // the cumulative walk goes by id, whatever nth_element did
    }
    // Differences to the maximum, divided by the temperature: exp() <= 1 and no overflow even for
    // a tiny temperature (the others underflow to 0 and the argmax wins, as it should).
    std::vector<double> weight(k);
    double sum = 0;
    const double top = static_cast<double>(logits[best]);
    for (std::size_t j = 0; j < k; ++j) {
        weight[j] = std::exp((static_cast<double>(logits[ids[j]]) - top) / temperature);
        sum += weight[j];
    }
    const double target = gen.uniform() * sum;
    double cumulative = 0;
    std::size_t last_positive = 0;
    for (std::size_t j = 0; j < k; ++j) {
        cumulative += weight[j];
        if (weight[j] > 0) last_positive = j;
        if (target < cumulative) return ids[j];
    }
    return ids[last_positive];  // u * sum rounded up to sum: the last id that has any mass
}

template <std::floating_point R>
class gpt_sampler {
public:
    // `blocks[g]` is the host copy of layer group g, exactly gpt_model<R, cpu_backend>(config)
    // .groups()[g].numel() values (padding included).
    gpt_sampler(const gpt_config& config, std::vector<std::vector<R>> blocks)
        : m_config(config), m_blocks(std::move(blocks)) {
        const gpt_model<R, cpu_backend> model(config);  // validates the config
        const auto& groups = model.groups();
        if (m_blocks.size() != groups.size())
            throw error("gpt_sampler: " + std::to_string(m_blocks.size()) + " parameter blocks for a model of " +
                            std::to_string(groups.size()) + " layer groups (embeddings, " +
                            std::to_string(config.n_layer) + " transformer blocks, final layernorm)",
                        "pass one block per group of gpt_model(config).groups(), in that order");
        for (std::size_t g = 0; g < groups.size(); ++g) {
            if (m_blocks[g].size() != groups[g].numel())
                throw error("gpt_sampler: " + group_name(g) + " has " + std::to_string(m_blocks[g].size()) +
                                " values, the layout for this config has " + std::to_string(groups[g].numel()) +
                                " (" + std::to_string(groups[g].parameter_count()) + " parameters plus alignment)",
                            "the blocks come from a model with another config, or a block was not copied whole");
        }
        m_wte = groups[0].find("wte.weight").offset;
        m_wpe = groups[0].find("wpe.weight").offset;
        const param_layout& b = groups[model.block_group(0)];
        m_block = {b.find("ln_1.weight").offset,        b.find("ln_1.bias").offset,
                   b.find("attn.c_attn.weight").offset, b.find("attn.c_attn.bias").offset,
                   b.find("attn.c_proj.weight").offset, b.find("attn.c_proj.bias").offset,
                   b.find("ln_2.weight").offset,        b.find("ln_2.bias").offset,
                   b.find("mlp.c_fc.weight").offset,    b.find("mlp.c_fc.bias").offset,
                   b.find("mlp.c_proj.weight").offset,  b.find("mlp.c_proj.bias").offset};
        m_ln_f_weight = groups[model.final_group()].find("ln_f.weight").offset;
        m_ln_f_bias = groups[model.final_group()].find("ln_f.bias").offset;
        const std::size_t cache = config.n_layer * config.max_seq * config.n_embd;
        m_keys.assign(cache, R(0));
        m_values.assign(cache, R(0));
    }

    const gpt_config& config() const { return m_config; }
    // Tokens in the cache, at positions 0 .. length() - 1.
    std::size_t length() const { return m_tokens.size(); }
    std::span<const token_id> cached_tokens() const { return m_tokens; }

    // The reference: a full forward over `tokens` (positions 0 .. size-1) without the cache,
    // returning the last position's logits (V). The cache is not touched.
    std::vector<R> logits_uncached(std::span<const token_id> tokens) const {
        check_window(0, tokens.size(), "logits_uncached");
        detail::check_tokens(tokens, m_config.vocab_size, "logits_uncached:");
        const std::size_t T = tokens.size(), C = m_config.n_embd, NH = m_config.n_head;
        workspace w;
        std::vector<R> lse(kernels::cpu::attention_saved(1, T, NH));  // (NH, T), unused afterwards
        return forward_rows(tokens, 0, w, [&](std::size_t, workspace& ws) {
            kernels::cpu::attention_forward(ws.atty.data(), lse.data(), ws.qkv.data(), 1, T, C, NH);
        });
    }

    // Empties the cache (its memory stays allocated).
    void reset() { m_tokens.clear(); }

    // Appends one token at position length() and returns that position's logits (V).
    std::vector<R> feed(token_id token) {
        if (length() == m_config.max_seq)
            throw error("gpt_sampler::feed: the KV cache is full (" + std::to_string(m_config.max_seq) +
                            " tokens, the model's context)",
                        "reset() and prefill() the last max_seq - 1 tokens to slide the window; generate() does so");
        detail::check_token(token, m_config.vocab_size, "gpt_sampler::feed: the token");
        return append(std::span<const token_id>(&token, 1));
    }

    // Appends `tokens` at positions length() .. length() + size - 1 in one pass (GEMMs over the
    // new rows) and returns the last one's logits (V). After reset() this is the prompt.
    std::vector<R> prefill(std::span<const token_id> tokens) {
        check_window(length(), tokens.size(), "gpt_sampler::prefill");
        detail::check_tokens(tokens, m_config.vocab_size, "gpt_sampler::prefill:");
        return append(tokens);
    }

    // Generates up to o.max_new_tokens tokens after `prompt` and returns them (the new tokens
    // only). An empty prompt starts from o.bos. Generation stops early after o.stop_at_eot (which
    // is returned). on_token, when given, sees each token as soon as it is chosen. The cache is
    // rebuilt from the prompt, and holds the context's last window afterwards; beyond maxT the
    // window slides (see the top of this file).
    std::vector<token_id> generate(std::span<const token_id> prompt, const sample_options& o,
                                   const std::function<void(token_id)>& on_token = {}) {
        const std::size_t V = m_config.vocab_size, maxT = m_config.max_seq;
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
            const std::size_t n = std::min(context.size(), maxT);
            return std::span<const token_id>(context).last(n);
        };
        rng gen(o.seed);
        reset();
        std::vector<R> logits = append(last_window());
        for (;;) {
            const token_id next = sample_token<R>(logits, o.temperature, o.top_k, gen);
            out.push_back(next);
            context.push_back(next);
            if (on_token) on_token(next);
            if (next == o.stop_at_eot || out.size() == o.max_new_tokens) break;
            if (length() < maxT) {
                logits = append(std::span<const token_id>(&next, 1));
            } else {  // full: slide, rebuilding the cache from the last maxT - 1 tokens plus `next`
                reset();
                logits = append(last_window());
            }
        }
        return out;
    }

private:
    // Element offsets of a transformer block's parameters in its group's block.
    struct block_offsets {
        std::size_t ln_1_weight, ln_1_bias, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias;
        std::size_t ln_2_weight, ln_2_bias, c_fc_weight, c_fc_bias, fc_proj_weight, fc_proj_bias;
    };

    // Activations of n rows (one block at a time; the residual stream x carries across blocks).
    struct workspace {
        std::vector<R> x, ln, mean, rstd, qkv, atty, attproj, res2, fch, fch_gelu, fcproj, scores;
        void resize(std::size_t n, std::size_t C) {
            for (auto* v : {&x, &ln, &atty, &attproj, &res2, &fcproj}) v->resize(n * C);
            mean.resize(n);
            rstd.resize(n);
            qkv.resize(n * 3 * C);
            fch.resize(n * 4 * C);
            fch_gelu.resize(n * 4 * C);
        }
    };

    std::string group_name(std::size_t g) const {
        if (g == 0) return "group 0 (embeddings: wte, wpe)";
        if (g == m_config.n_layer + 1) return "group " + std::to_string(g) + " (final layernorm ln_f)";
        return "group " + std::to_string(g) + " (transformer block " + std::to_string(g - 1) + ")";
    }

    void check_window(std::size_t first, std::size_t n, const char* what) const {
        if (n == 0) throw error(std::string(what) + ": no tokens", "pass at least one token (the bos id for an empty prompt)");
        if (first + n > m_config.max_seq)
            throw error(std::string(what) + ": " + std::to_string(first) + " cached + " + std::to_string(n) +
                            " new tokens exceed the model's context of " + std::to_string(m_config.max_seq),
                        "keep at most max_seq tokens (generate() slides the window by itself)");
    }

    // The model over `tokens` at positions first .. first + n - 1: embeddings, the L blocks with
    // `attend(layer, w)` turning w.qkv (n, 3C) into w.atty (n, C), then ln_f and the tied head on
    // the last row only. Returns its logits (V).
    template <class Attend>
    std::vector<R> forward_rows(std::span<const token_id> tokens, std::size_t first, workspace& w,
                                Attend&& attend) const {
        namespace k = kernels::cpu;
        const std::size_t n = tokens.size(), C = m_config.n_embd, V = m_config.vocab_size;
        const std::size_t nC = n * C;
        w.resize(n, C);
        const R* g0 = m_blocks[0].data();
        // wpe from row `first`: the kernel's positions 0.. are the model's first..
        k::embedding_forward(w.x.data(), tokens.data(), g0 + m_wte, g0 + m_wpe + first * C, 1, n, C, V,
                             m_config.max_seq - first);
        const block_offsets& o = m_block;
        for (std::size_t l = 0; l < m_config.n_layer; ++l) {
            const R* p = m_blocks[1 + l].data();
            k::layernorm_forward(w.ln.data(), w.mean.data(), w.rstd.data(), w.x.data(), p + o.ln_1_weight,
                                 p + o.ln_1_bias, 1, n, C);
            k::matmul_forward(w.qkv.data(), w.ln.data(), p + o.c_attn_weight, p + o.c_attn_bias, 1, n, C, 3 * C);
            attend(l, w);
            k::matmul_forward(w.attproj.data(), w.atty.data(), p + o.c_proj_weight, p + o.c_proj_bias, 1, n, C, C);
            k::residual_forward(w.res2.data(), w.x.data(), w.attproj.data(), nC);
            k::layernorm_forward(w.ln.data(), w.mean.data(), w.rstd.data(), w.res2.data(), p + o.ln_2_weight,
                                 p + o.ln_2_bias, 1, n, C);
            k::matmul_forward(w.fch.data(), w.ln.data(), p + o.c_fc_weight, p + o.c_fc_bias, 1, n, C, 4 * C);
            k::gelu_forward(w.fch_gelu.data(), w.fch.data(), 4 * nC);
            k::matmul_forward(w.fcproj.data(), w.fch_gelu.data(), p + o.fc_proj_weight, p + o.fc_proj_bias, 1, n,
                              4 * C, C);
            k::residual_forward(w.x.data(), w.res2.data(), w.fcproj.data(), nC);
        }
        const R* pf = m_blocks[m_config.n_layer + 1].data();
        k::layernorm_forward(w.ln.data(), w.mean.data(), w.rstd.data(), w.x.data() + (n - 1) * C,
                             pf + m_ln_f_weight, pf + m_ln_f_bias, 1, 1, C);
        std::vector<R> logits(V);
        k::lm_head_forward(logits.data(), w.ln.data(), g0 + m_wte, 1, 1, C, V);
        return logits;
    }

    // Checked tokens at positions length() ..: through the blocks with the cached attention.
    std::vector<R> append(std::span<const token_id> tokens) {
        const std::size_t first = length();
        std::vector<R> logits = forward_rows(tokens, first, m_work, [&](std::size_t l, workspace& w) {
            cached_attention(l, first, tokens.size(), w);
        });
        // Only now: a throw above leaves the cache as it was (rows past length() are scratch).
        m_tokens.insert(m_tokens.end(), tokens.begin(), tokens.end());
        return logits;
    }

    // Stores the n new rows' k and v at positions first.. of layer l's cache, then attends each
    // new row (position first + i) to cached positions 0 .. first + i: the reference kernel's
    // arithmetic (scores q.k / sqrt(HS), max-shifted exp, sum in double), one row at a time.
    void cached_attention(std::size_t l, std::size_t first, std::size_t n, workspace& w) {
        const std::size_t C = m_config.n_embd, NH = m_config.n_head, HS = C / NH;
        R* keys = m_keys.data() + l * m_config.max_seq * C;      // (maxT, C)
        R* values = m_values.data() + l * m_config.max_seq * C;  // (maxT, C)
        for (std::size_t i = 0; i < n; ++i) {
            const R* row = w.qkv.data() + i * 3 * C;
            std::copy(row + C, row + 2 * C, keys + (first + i) * C);
            std::copy(row + 2 * C, row + 3 * C, values + (first + i) * C);
        }
        const R scale = static_cast<R>(1.0 / std::sqrt(static_cast<double>(HS)));
        w.scores.resize(first + n);
        R* score = w.scores.data();
        for (std::size_t i = 0; i < n; ++i) {
            const std::size_t T = first + i + 1;  // positions this row sees
            for (std::size_t h = 0; h < NH; ++h) {
                const R* q = w.qkv.data() + i * 3 * C + h * HS;
                R max_score = -std::numeric_limits<R>::infinity();
                for (std::size_t u = 0; u < T; ++u) {
                    const R* key = keys + u * C + h * HS;
                    R dot = 0;
                    for (std::size_t d = 0; d < HS; ++d) dot += q[d] * key[d];
                    score[u] = scale * dot;
                    max_score = std::max(max_score, score[u]);
                }
                double sum = 0;
                for (std::size_t u = 0; u < T; ++u) {
                    score[u] = std::exp(score[u] - max_score);
                    sum += score[u];
                }
                const R inv_sum = static_cast<R>(1.0 / sum);
                R* out = w.atty.data() + i * C + h * HS;
                std::fill(out, out + HS, R(0));
                for (std::size_t u = 0; u < T; ++u) {
                    const R a = score[u] * inv_sum;
                    const R* value = values + u * C + h * HS;
                    for (std::size_t d = 0; d < HS; ++d) out[d] += a * value[d];
                }
            }
        }
    }

    gpt_config m_config;
    std::vector<std::vector<R>> m_blocks;  // one per layer group, gpt_model's layout
    std::size_t m_wte = 0, m_wpe = 0, m_ln_f_weight = 0, m_ln_f_bias = 0;
    block_offsets m_block{};
    std::vector<R> m_keys, m_values;  // (L, maxT, C) each
    std::vector<token_id> m_tokens;   // the cached tokens, position order
    workspace m_work;
};

}  // namespace strata
