// gpt_sampler: the KV-cached forward against the full reference forward (and against the
// trainer's own model), greedy and seeded sampling, the sliding context window, and input errors.
#include <strata/backend/cpu_backend.hpp>  // cpu_backend
#include <strata/core/error.hpp>           // strata::error
#include <strata/core/rng.hpp>             // rng
#include <strata/model/gpt.hpp>            // gpt_model
#include <strata/model/sampler.hpp>        // gpt_sampler, sample_options, sample_token
#include <strata/nn/cpu_ops.hpp>           // ops<cpu_backend>, for the trainer
#include <strata/train/trainer.hpp>        // trainer

#include <doctest/doctest.h>  // TEST_CASE, TEST_CASE_TEMPLATE, CHECK, REQUIRE, INFO, MESSAGE

#include <algorithm>  // std::max, std::min
#include <cmath>      // std::abs, std::exp, std::log
#include <cstddef>    // std::size_t
#include <cstdint>    // std::uint64_t
#include <limits>     // std::numeric_limits
#include <span>       // std::span
#include <string>     // std::string
#include <vector>     // std::vector

namespace sampler_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

gpt_config small() { return {.vocab_size = 13, .max_seq = 8, .n_layer = 2, .n_head = 2, .n_embd = 8}; }

// Every parameter N(0, 0.5) (biases too, so they matter), layernorm gains 1, alignment gaps 0:
// logits far from flat, so a wrong cache or a misplaced parameter shows.
template <class R>
std::vector<std::vector<R>> random_blocks(const gpt_config& c, std::uint64_t seed) {
    const gpt_model<R, cpu_backend> model(c);
    rng gen(seed);
    std::vector<std::vector<R>> blocks;
    for (const auto& layout : model.groups()) {
        auto& block = blocks.emplace_back(layout.numel(), R(0));
        for (const auto& slot : layout.slots()) {
            const bool gain = slot.spec.name.starts_with("ln_") && slot.spec.name.ends_with(".weight");
            for (std::size_t i = 0; i < slot.spec.shape.numel(); ++i)
                block[slot.offset + i] = gain ? R(1) : static_cast<R>(gen.normal(0.0, 0.5));
        }
    }
    return blocks;
}

template <class R>
token_id argmax(const std::vector<R>& x) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < x.size(); ++i)
        if (x[i] > x[best]) best = i;
    return static_cast<token_id>(best);
}

template <class R>
double max_abs_diff(const std::vector<R>& a, const std::vector<R>& b) {
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
    return worst;
}

// The last min(size, n) tokens.
std::vector<token_id> last(const std::vector<token_id>& v, std::size_t n) {
    return {v.end() - static_cast<std::ptrdiff_t>(std::min(v.size(), n)), v.end()};
}

// Pearson's statistic of observed counts against probabilities.
double chi_square(const std::vector<std::size_t>& counts, const std::vector<double>& p, std::size_t draws) {
    double chi2 = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        const double expected = p[i] * static_cast<double>(draws);
        if (expected == 0) {
            CHECK(counts[i] == 0);
            continue;
        }
        const double d = static_cast<double>(counts[i]) - expected;
        chi2 += d * d / expected;
    }
    return chi2;
}

std::vector<double> softmax(const std::vector<double>& z, double temperature) {
    double top = z[0];
    for (double x : z) top = std::max(top, x);
    std::vector<double> p;
    double sum = 0;
    for (double x : z) sum += p.emplace_back(std::exp((x - top) / temperature));
    for (double& x : p) x /= sum;
    return p;
}

template <class R>
struct tolerance;
template <>
struct tolerance<float> {
    static constexpr double logits = 1e-5;
};
template <>
struct tolerance<double> {
    static constexpr double logits = 1e-12;
};

template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE_TEMPLATE("cached logits equal the uncached forward at every position", R, float, double) {
    const gpt_config c = small();
    gpt_sampler<R> s(c, random_blocks<R>(c, 1));
    const std::vector<token_id> tokens{3, 1, 4, 1, 5, 9, 2, 6};  // the whole context
    double worst = 0;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
        const std::vector<R> cached = s.feed(tokens[t]);
        const std::vector<R> reference = s.logits_uncached(std::span(tokens).first(t + 1));
        INFO("position " << t);
        REQUIRE(cached.size() == c.vocab_size);
        // not flat: otherwise equality would say little
        double lo = reference[0], hi = reference[0];
        for (R x : reference) lo = std::min<double>(lo, x), hi = std::max<double>(hi, x);
        CHECK(hi - lo > 1.0);
        const double diff = max_abs_diff(cached, reference);
        worst = std::max(worst, diff);
        CHECK(diff < tolerance<R>::logits);
    }
    CHECK(s.length() == tokens.size());
    MESSAGE("largest |cached - uncached| over 8 positions: " << worst);

    // Chunked prefills fill the same cache as single feeds.
    s.reset();
    CHECK(s.length() == 0);
    const auto a = s.prefill(std::span(tokens).first(3));
    CHECK(max_abs_diff(a, s.logits_uncached(std::span(tokens).first(3))) < tolerance<R>::logits);
    const auto b = s.prefill(std::span(tokens).subspan(3, 4));
    CHECK(max_abs_diff(b, s.logits_uncached(std::span(tokens).first(7))) < tolerance<R>::logits);
    const auto d = s.feed(tokens[7]);
    CHECK(max_abs_diff(d, s.logits_uncached(tokens)) < tolerance<R>::logits);
    CHECK(std::vector<token_id>(s.cached_tokens().begin(), s.cached_tokens().end()) == tokens);
}

TEST_CASE("the sampler computes the trainer's model: per-position losses agree") {
    // The CLI's path: blocks downloaded from a trainer. The trainer's loss at position p with
    // target v is lse(z_p) - z_p[v]; the sampler's z_p is logits_uncached(tokens[0..p]).
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    const gpt_config c = small();
    const gpt_model<double, cpu_backend> model(c);
    const std::size_t T = 6;
    trainer<double, cpu_backend> t(backend, model, {.batch = 1, .seq = T, .accum = 1});
    using kind = trainer<double, cpu_backend>::state_kind;
    const auto uploaded = random_blocks<double>(c, 5);
    std::vector<std::vector<double>> blocks;
    for (std::size_t g = 0; g < model.group_count(); ++g) {
        t.upload(kind::params, g, uploaded[g]);
        t.download(kind::params, g, blocks.emplace_back(model.groups()[g].numel()));
    }
    gpt_sampler<double> s(c, std::move(blocks));

    const std::vector<token_id> tokens{7, 0, 12, 3, 3, 8};
    double worst = 0;
    for (std::size_t p = 0; p < T; ++p) {
        const auto z = s.logits_uncached(std::span(tokens).first(p + 1));
        double top = z[0], sum = 0;
        for (double x : z) top = std::max(top, x);
        for (double x : z) sum += std::exp(x - top);
        const double lse = top + std::log(sum);
        for (token_id v = 0; v < static_cast<token_id>(c.vocab_size); v += 3) {
            data::batch b;
            b.inputs = tokens;
            b.targets.assign(T, kernels::cpu::ignore_index);
            b.targets[p] = v;
            const double trainer_loss = t.evaluate(std::span(&b, 1));
            INFO("position " << p << ", target " << v);
            const double diff = std::abs(trainer_loss - (lse - z[v]));
            worst = std::max(worst, diff);
            CHECK(diff < 1e-10);
        }
    }
    MESSAGE("largest loss difference sampler vs trainer: " << worst);
}

TEST_CASE("greedy generation is the argmax of the uncached logits, step by step") {
    const gpt_config c = small();
    gpt_sampler<float> s(c, random_blocks<float>(c, 2));
    const std::vector<token_id> prompt{3, 1, 4};
    std::vector<token_id> streamed;
    const auto out = s.generate(prompt, {.max_new_tokens = 5, .temperature = 0},
                                [&](token_id id) { streamed.push_back(id); });
    REQUIRE(out.size() == 5);
    CHECK(streamed == out);
    std::vector<token_id> context = prompt;
    for (std::size_t i = 0; i < out.size(); ++i) {
        INFO("step " << i);
        CHECK(out[i] == argmax(s.logits_uncached(context)));
        context.push_back(out[i]);
    }
    // A greedy run is not a constant sequence for this model (else the check above is weak).
    bool varied = false;
    for (token_id id : out) varied = varied || id != out[0];
    CHECK(varied);
}

TEST_CASE("past the context the window slides: each token sees the last max_seq tokens") {
    const gpt_config c = small();  // max_seq 8
    gpt_sampler<double> s(c, random_blocks<double>(c, 3));

    SUBCASE("greedy, prompt shorter than the context") {
        const std::vector<token_id> prompt{3, 1, 4};
        const auto out = s.generate(prompt, {.max_new_tokens = 15, .temperature = 0});
        REQUIRE(out.size() == 15);
        std::vector<token_id> context = prompt;
        for (std::size_t i = 0; i < out.size(); ++i) {
            INFO("step " << i << ", context " << context.size());
            CHECK(out[i] == argmax(s.logits_uncached(last(context, c.max_seq))));
            context.push_back(out[i]);
        }
        // The cache holds the window the last token was chosen from.
        context.pop_back();
        const auto cached = s.cached_tokens();
        CHECK(std::vector<token_id>(cached.begin(), cached.end()) == last(context, c.max_seq));
    }
    SUBCASE("sampling with top-k, prompt longer than the context: a reference loop without the cache") {
        const std::vector<token_id> prompt{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
        const sample_options o{.max_new_tokens = 12, .temperature = 0.8, .top_k = 5, .seed = 7};
        const auto out = s.generate(prompt, o);
        std::vector<token_id> context = prompt, expected;
        rng gen(o.seed);
        for (std::size_t i = 0; i < o.max_new_tokens; ++i) {
            const auto z = s.logits_uncached(last(context, c.max_seq));
            expected.push_back(sample_token<double>(z, o.temperature, o.top_k, gen));
            context.push_back(expected.back());
        }
        CHECK(out == expected);
    }
    SUBCASE("feed and prefill do not slide by themselves") {
        const std::vector<token_id> full{1, 2, 3, 4, 5, 6, 7, 8};
        s.prefill(full);
        CHECK(error_of([&] { s.feed(1); }).find("KV cache is full") != std::string::npos);
        CHECK(error_of([&] { s.prefill(std::span(full).first(1)); }).find("exceed the model's context of 8") !=
              std::string::npos);
        CHECK(s.length() == 8);
        s.reset();
        CHECK(error_of([&] { s.prefill(std::vector<token_id>(9, 1)); }).find("0 cached + 9 new") != std::string::npos);
        CHECK(error_of([&] { s.logits_uncached(std::vector<token_id>(9, 1)); }).find("context of 8") !=
              std::string::npos);
    }
}

TEST_CASE("the same seed gives the same tokens, another seed other tokens") {
    const gpt_config c = small();
    gpt_sampler<float> s(c, random_blocks<float>(c, 4));
    const std::vector<token_id> prompt{5, 5};
    sample_options o{.max_new_tokens = 20, .temperature = 1.0, .seed = 1};
    const auto a = s.generate(prompt, o);
    const auto b = s.generate(prompt, o);
    o.seed = 2;
    const auto d = s.generate(prompt, o);
    CHECK(a.size() == 20);
    CHECK(a == b);
    CHECK(a != d);
}

TEST_CASE("top_k = 1 is greedy at any temperature and seed") {
    const gpt_config c = small();
    gpt_sampler<float> s(c, random_blocks<float>(c, 6));
    const std::vector<token_id> prompt{0, 9};
    const auto greedy = s.generate(prompt, {.max_new_tokens = 12, .temperature = 0});
    for (double temperature : {0.5, 1.0, 3.0})
        for (std::uint64_t seed : {0u, 1u, 99u}) {
            INFO("temperature " << temperature << ", seed " << seed);
            CHECK(s.generate(prompt, {.max_new_tokens = 12, .temperature = temperature, .top_k = 1, .seed = seed}) ==
                  greedy);
        }
}

TEST_CASE("sample_token: frequencies follow the softmax, top-k and ties keep the lower ids") {
    const std::size_t draws = 20000;
    const std::vector<double> z{1.0, 0.2, -0.5, 2.0, 0.0};
    auto count = [&](const std::vector<double>& logits, double temperature, std::size_t top_k) {
        rng gen(11);
        std::vector<std::size_t> counts(logits.size());
        for (std::size_t i = 0; i < draws; ++i) ++counts[sample_token<double>(logits, temperature, top_k, gen)];
        return counts;
    };
    SUBCASE("all ids, temperature 0.7") {
        const double chi2 = chi_square(count(z, 0.7, 0), softmax(z, 0.7), draws);
        MESSAGE("chi-square, 4 degrees of freedom: " << chi2);
        CHECK(chi2 < 25);  // p ~ 5e-5 for a correct sampler
    }
    SUBCASE("temperature 2 is flatter than 0.7") {
        const auto hot = count(z, 2.0, 0);
        CHECK(chi_square(hot, softmax(z, 2.0), draws) < 25);
        CHECK(hot[3] < count(z, 0.7, 0)[3]);
    }
    SUBCASE("top_k = 3 renormalizes over ids 3, 0, 1") {
        const auto counts = count(z, 1.0, 3);
        CHECK(counts[2] == 0);
        CHECK(counts[4] == 0);
        const double chi2 = chi_square(counts, softmax({1.0, 0.2, -1e300, 2.0, -1e300}, 1.0), draws);
        CHECK(chi2 < 20);
    }
    SUBCASE("ties at the cut keep the lower ids") {
        const auto counts = count({0.0, 1.0, 1.0, 1.0, -1.0}, 1.0, 2);
        CHECK(counts[0] == 0);
        CHECK(counts[3] == 0);
        CHECK(counts[4] == 0);
        CHECK(chi_square(counts, {0, 0.5, 0.5, 0, 0}, draws) < 15);
    }
    SUBCASE("greedy and top_k = 1 take the lowest of equal maxima") {
        rng gen(0);
        const std::vector<float> tied{0.f, 3.f, 3.f, -2.f};
        CHECK(sample_token<float>(tied, 0.0, 0, gen) == 1);
        CHECK(sample_token<float>(tied, 1.0, 1, gen) == 1);
        // A tiny temperature leaves only the maximum, without NaN (equal maxima would share the mass).
        CHECK(sample_token<float>(std::vector<float>{0.f, 3.f, 2.5f, -2.f}, 1e-300, 0, gen) == 1);
    }
    SUBCASE("one uniform per draw, none for greedy") {
        rng gen(5), twin(5);
        sample_token<double>(z, 0.0, 0, gen);
        CHECK(gen == twin);
        sample_token<double>(z, 1.0, 2, gen);
        twin.uniform();
        CHECK(gen == twin);
    }
    SUBCASE("bad logits and options") {
        rng gen(0);
        const std::vector<double> bad{0.0, std::numeric_limits<double>::quiet_NaN()};
        CHECK(error_of([&] { sample_token<double>(bad, 1.0, 0, gen); }).find("logit of id 1") != std::string::npos);
        CHECK(error_of([&] { sample_token<double>(std::vector<double>{}, 1.0, 0, gen); }) != "(no error)");
        CHECK(error_of([&] { sample_token<double>(z, -0.1, 0, gen); }).find("temperature") != std::string::npos);
        CHECK(error_of([&] { sample_token<double>(z, 1.0, 6, gen); }).find("top_k 6") != std::string::npos);
    }
}

TEST_CASE("generate's first token follows the softmax of the model's logits") {
    // One token per seed: the draws of many generators against softmax(z / T) of a 5-id model.
    const gpt_config c{.vocab_size = 5, .max_seq = 8, .n_layer = 2, .n_head = 2, .n_embd = 8};
    gpt_sampler<double> s(c, random_blocks<double>(c, 8));
    const std::vector<token_id> prompt{4, 0, 2};
    const double temperature = 1.3;
    const std::size_t draws = 3000;
    std::vector<std::size_t> counts(c.vocab_size);
    for (std::uint64_t seed = 0; seed < draws; ++seed)
        ++counts[s.generate(prompt, {.max_new_tokens = 1, .temperature = temperature, .seed = seed})[0]];
    const auto z = s.logits_uncached(prompt);
    const auto p = softmax(std::vector<double>(z.begin(), z.end()), temperature);
    const double chi2 = chi_square(counts, p, draws);
    MESSAGE("chi-square, 4 degrees of freedom: " << chi2);
    CHECK(chi2 < 25);
}

TEST_CASE("stop_at_eot ends generation after that token; max_new_tokens = 0 generates nothing") {
    const gpt_config c = small();
    gpt_sampler<float> s(c, random_blocks<float>(c, 2));
    const std::vector<token_id> prompt{3, 1, 4};
    const auto greedy = s.generate(prompt, {.max_new_tokens = 10, .temperature = 0});
    const token_id stop = greedy[2];
    std::size_t first = 0;
    while (greedy[first] != stop) ++first;
    const auto stopped = s.generate(prompt, {.max_new_tokens = 10, .temperature = 0, .stop_at_eot = stop});
    CHECK(stopped == std::vector<token_id>(greedy.begin(), greedy.begin() + static_cast<std::ptrdiff_t>(first) + 1));

    bool called = false;
    CHECK(s.generate(prompt, {.max_new_tokens = 0}, [&](token_id) { called = true; }).empty());
    CHECK_FALSE(called);
}

TEST_CASE("an empty prompt starts from the bos id the caller passes") {
    const gpt_config c = small();
    gpt_sampler<float> s(c, random_blocks<float>(c, 2));
    const token_id eot = 12;
    const sample_options o{.max_new_tokens = 6, .temperature = 0.9, .seed = 3, .bos = eot};
    CHECK(s.generate({}, o) == s.generate(std::vector<token_id>{eot}, o));
    CHECK(error_of([&] { s.generate({}, {.max_new_tokens = 3}); }).find("sample_options::bos") != std::string::npos);
    CHECK(error_of([&] { s.generate({}, {.max_new_tokens = 3, .bos = 13}); }).find("bos is id 13") !=
          std::string::npos);
}

TEST_CASE("gpt_sampler refuses blocks of another layout, naming the group") {
    const gpt_config c = small();
    auto blocks = random_blocks<float>(c, 1);
    {
        auto fewer = blocks;
        fewer.pop_back();
        CHECK(error_of([&] { gpt_sampler<float>(c, fewer); }).find("3 parameter blocks for a model of 4 layer groups") !=
              std::string::npos);
    }
    auto resized = [&](std::size_t g, std::ptrdiff_t delta) {
        auto b = blocks;
        b[g].resize(static_cast<std::size_t>(static_cast<std::ptrdiff_t>(b[g].size()) + delta));
        return error_of([&] { gpt_sampler<float>(c, b); });
    };
    CHECK(resized(0, -1).find("group 0 (embeddings: wte, wpe)") != std::string::npos);
    CHECK(resized(2, 1).find("group 2 (transformer block 1)") != std::string::npos);
    CHECK(resized(3, 5).find("group 3 (final layernorm ln_f)") != std::string::npos);
    // Blocks of a model with another config.
    gpt_config wider = c;
    wider.n_embd = 16;
    CHECK(error_of([&] { gpt_sampler<float>(wider, blocks); }).find("the layout for this config has") !=
          std::string::npos);
    gpt_config broken = c;
    broken.n_head = 3;
    CHECK(error_of([&] { gpt_sampler<float>(broken, blocks); }).find("not a multiple of n_head") != std::string::npos);
    CHECK_NOTHROW(gpt_sampler<float>(c, blocks));
}

TEST_CASE("bad tokens and options are refused, and a refused feed leaves the cache intact") {
    const gpt_config c = small();
    gpt_sampler<float> s(c, random_blocks<float>(c, 1));
    const std::vector<token_id> prompt{3, 1};
    const std::string range = "outside [0, V=13)";
    CHECK(error_of([&] { s.logits_uncached(std::vector<token_id>{1, 13}); }).find(range) != std::string::npos);
    CHECK(error_of([&] { s.logits_uncached({}); }).find("no tokens") != std::string::npos);
    CHECK(error_of([&] { s.prefill({}); }).find("no tokens") != std::string::npos);
    CHECK(error_of([&] { s.prefill(std::vector<token_id>{2, -1}); }).find("token 1 is id -1") != std::string::npos);
    CHECK(error_of([&] { s.generate(std::vector<token_id>{2, 99}, {}); }).find("prompt token 1 is id 99") !=
          std::string::npos);
    CHECK(error_of([&] { s.generate(prompt, {.temperature = -1}); }).find("temperature") != std::string::npos);
    CHECK(error_of([&] { s.generate(prompt, {.temperature = std::numeric_limits<double>::infinity()}); })
              .find("temperature") != std::string::npos);
    CHECK(error_of([&] { s.generate(prompt, {.top_k = 14}); }).find("top_k 14") != std::string::npos);
    CHECK_NOTHROW(s.generate(prompt, {.max_new_tokens = 2, .top_k = 13}));
    CHECK(error_of([&] { s.generate(prompt, {.stop_at_eot = 13}); }).find("stop_at_eot is id 13") !=
          std::string::npos);

    s.reset();
    s.prefill(prompt);
    CHECK(error_of([&] { s.feed(13); }).find(range) != std::string::npos);
    CHECK(s.length() == 2);
    const auto next = s.feed(4);
    CHECK(max_abs_diff(next, s.logits_uncached(std::vector<token_id>{3, 1, 4})) < 1e-5);
}

}  // namespace sampler_test
