// generator (model/generator.hpp): KV-cached generation against the model's own full forward (and
// the trainer's model), chunked prefills, greedy and seeded sampling, the sliding context window, a
// block without decode, and input errors; with CUDA, the GPU's cached logits and greedy
// continuation against the CPU's.
#include "sample_support.hpp"    // gpt2_model, make_gpt2, small, random_blocks, helpers
#include "support/backends.hpp"  // make_backend, STRATA_TESTS_WITH_CUDA

#include <strata/backend/cpu_backend.hpp>  // cpu_backend
#include <strata/core/rng.hpp>             // rng
#include <strata/model/generator.hpp>      // generator, generator_options
#include <strata/model/gpt.hpp>            // gpt_model (the trainer's model: the CLI's checkpoints)
#include <strata/model/sampler.hpp>        // sample_options, sample_token
#include <strata/nn/cpu_ops.hpp>           // ops<cpu_backend>
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>  // TEST_CASE, TEST_CASE_TEMPLATE, SUBCASE, CHECK, REQUIRE, INFO, MESSAGE

#include <algorithm>  // std::max, std::min
#include <cmath>      // std::abs, std::exp, std::log
#include <cstddef>    // std::size_t
#include <cstdint>    // std::uint64_t
#include <limits>     // std::numeric_limits
#include <span>       // std::span
#include <string>     // std::string
#include <type_traits>  // std::is_same_v
#include <vector>     // std::vector

namespace generator_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
using namespace sample_support;

namespace {

template <class R>
using cpu_generator = generator<gpt2_model<R, cpu_backend>>;

tier_options tiers() { return {.device_bytes = 64 << 20, .host_bytes = 64 << 20}; }

// |cached - uncached| on logits of magnitude ~10: the same ops on 1 row instead of T rows, the
// attention summed in another order (attention_decode vs attention_forward's GEMMs): a few ulps
// through two blocks. A wrong position, cache row or mask is off by O(1).
template <class R>
constexpr double tolerance = std::is_same_v<R, float> ? 1e-5 : 1e-12;

// gpt2_block with the Layer members only: no decode, so the generator takes its uncached path.
template <class R, class B>
class forward_only {
public:
    using config_type = gpt_config;
    using value_type = R;
    using backend_type = B;
    using inner = gpt2_block<R, B>;
    static auto params(const gpt_config& c) { return inner::params(c); }
    static std::size_t in_features(const gpt_config& c) { return inner::in_features(c); }
    static std::size_t out_features(const gpt_config& c) { return inner::out_features(c); }
    static std::size_t activation_floats(const gpt_config& c, std::size_t Bn, std::size_t T) {
        return inner::activation_floats(c, Bn, T);
    }
    static std::size_t workspace_floats(const gpt_config& c, std::size_t Bn, std::size_t T) {
        return inner::workspace_floats(c, Bn, T);
    }
    static double flops(const gpt_config& c, std::size_t Bn, std::size_t T) { return inner::flops(c, Bn, T); }
    explicit forward_only(const gpt_config& c) : m_inner(c) {}
    void forward(typename B::stream& s, const R* p, R* out, R* acts, const R* inp, R* w, std::size_t Bn,
                 std::size_t T) const {
        m_inner.forward(s, p, out, acts, inp, w, Bn, T);
    }
    void backward(typename B::stream& s, const R* p, R* g, R* dinp, const R* dout, const R* acts, const R* inp, R* w,
                  std::size_t Bn, std::size_t T) const {
        m_inner.backward(s, p, g, dinp, dout, acts, inp, w, Bn, T);
    }

private:
    inner m_inner;
};
static_assert(check_layer<forward_only<float, cpu_backend>>() && !Decodes<forward_only<float, cpu_backend>>);
static_assert(Decodes<gpt2_block<float, cpu_backend>>);

}  // namespace

TEST_CASE_TEMPLATE("cached logits equal the uncached forward at every position", R, float, double) {
    cpu_backend backend(tiers());
    const auto model = make_gpt2<R, cpu_backend>(small());
    cpu_generator<R> g(backend, model, random_blocks<R>(model, 1));
    static_assert(cpu_generator<R>::cached);
    const std::vector<token_id> tokens{3, 1, 4, 1, 5, 9, 2, 6};  // the whole context
    double worst = 0;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
        const std::vector<R> cached = g.feed(tokens[t]);
        const std::vector<R> reference = g.logits_uncached(std::span(tokens).first(t + 1));
        INFO("position " << t);
        REQUIRE(cached.size() == model.vocab_size());
        // not flat: otherwise equality would say little
        double lo = reference[0], hi = reference[0];
        for (R x : reference) lo = std::min<double>(lo, x), hi = std::max<double>(hi, x);
        CHECK(hi - lo > 1.0);
        const double diff = max_abs_diff(cached, reference);
        worst = std::max(worst, diff);
        CHECK(diff < tolerance<R>);
    }
    CHECK(g.length() == tokens.size());
    MESSAGE("largest |cached - uncached| over 8 positions: " << worst);

    // Prefills of several tokens fill the same cache as single feeds.
    g.reset();
    CHECK(g.length() == 0);
    const auto a = g.prefill(std::span(tokens).first(3));
    CHECK(max_abs_diff(a, g.logits_uncached(std::span(tokens).first(3))) < tolerance<R>);
    const auto b = g.prefill(std::span(tokens).subspan(3, 4));
    CHECK(max_abs_diff(b, g.logits_uncached(std::span(tokens).first(7))) < tolerance<R>);
    const auto d = g.feed(tokens[7]);
    CHECK(max_abs_diff(d, g.logits_uncached(tokens)) < tolerance<R>);
    CHECK(std::vector<token_id>(g.cached_tokens().begin(), g.cached_tokens().end()) == tokens);
}

TEST_CASE("a prompt longer than prefill_rows runs in chunks and fills the cache single feeds fill") {
    cpu_backend backend(tiers());
    const auto model = make_gpt2<double, cpu_backend>(small());
    const auto blocks = random_blocks<double>(model, 9);
    cpu_generator<double> chunked(backend, model, blocks, {.prefill_rows = 3}), whole(backend, model, blocks);
    const std::vector<token_id> tokens{7, 0, 12, 3, 3, 8, 1, 5};
    const auto a = chunked.prefill(std::span(tokens).first(7));  // rows 0-2, 3-5, 6
    const auto b = whole.prefill(std::span(tokens).first(7));
    CHECK(max_abs_diff(a, b) < tolerance<double>);
    CHECK(max_abs_diff(chunked.feed(tokens[7]), whole.logits_uncached(tokens)) < tolerance<double>);
}

TEST_CASE("the generator computes the trainer's model: per-position losses agree") {
    // The CLI's path: a GPT-2 checkpoint's blocks (gpt_model's layout, from a trainer) into the
    // generator's decoder_model of GPT-2 blocks. The trainer's loss at position p with target v is
    // lse(z_p) - z_p[v]; the generator's z_p is its logits after tokens[0..p], cached.
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    const gpt_config c = small();
    const gpt_model<double, cpu_backend> trained(c);
    const std::size_t T = 6;
    gpt_trainer<double, cpu_backend> t(backend, trained, {.batch = 1, .seq = T, .accum = 1});
    using kind = gpt_trainer<double, cpu_backend>::state_kind;
    const auto model = make_gpt2<double, cpu_backend>(c);
    const auto uploaded = random_blocks<double>(model, 5);
    std::vector<std::vector<double>> blocks;
    for (std::size_t g = 0; g < trained.group_count(); ++g) {
        t.upload(kind::params, g, uploaded[g]);
        t.download(kind::params, g, blocks.emplace_back(trained.groups()[g].numel()));
    }
    cpu_generator<double> g(backend, model, blocks);

    const std::vector<token_id> tokens{7, 0, 12, 3, 3, 8};
    double worst = 0;
    for (std::size_t p = 0; p < T; ++p) {
        const auto z = g.feed(tokens[p]);
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
    MESSAGE("largest loss difference generator vs trainer: " << worst);
}

TEST_CASE("greedy generation is the argmax of the uncached logits, step by step") {
    cpu_backend backend(tiers());
    const auto model = make_gpt2<float, cpu_backend>(small());
    cpu_generator<float> g(backend, model, random_blocks<float>(model, 2));
    const std::vector<token_id> prompt{3, 1, 4};
    std::vector<token_id> streamed;
    const auto out = g.generate(prompt, {.max_new_tokens = 5, .temperature = 0},
                                [&](token_id id) { streamed.push_back(id); });
    REQUIRE(out.size() == 5);
    CHECK(streamed == out);
    std::vector<token_id> context = prompt;
    for (std::size_t i = 0; i < out.size(); ++i) {
        INFO("step " << i);
        CHECK(out[i] == argmax(g.logits_uncached(context)));
        context.push_back(out[i]);
    }
    // A greedy run is not a constant sequence for this model (else the check above is weak).
    bool varied = false;
    for (token_id id : out) varied = varied || id != out[0];
    CHECK(varied);
}

TEST_CASE("past the context the window slides: each token sees the last max_seq tokens") {
    cpu_backend backend(tiers());
    const auto model = make_gpt2<double, cpu_backend>(small());  // max_seq 8
    cpu_generator<double> g(backend, model, random_blocks<double>(model, 3));
    const std::size_t maxT = model.max_seq();

    SUBCASE("greedy, prompt shorter than the context") {
        const std::vector<token_id> prompt{3, 1, 4};
        const auto out = g.generate(prompt, {.max_new_tokens = 15, .temperature = 0});
        REQUIRE(out.size() == 15);
        std::vector<token_id> context = prompt;
        for (std::size_t i = 0; i < out.size(); ++i) {
            INFO("step " << i << ", context " << context.size());
            CHECK(out[i] == argmax(g.logits_uncached(last(context, maxT))));
            context.push_back(out[i]);
        }
        // The cache holds the window the last token was chosen from.
        context.pop_back();
        const auto cached = g.cached_tokens();
        CHECK(std::vector<token_id>(cached.begin(), cached.end()) == last(context, maxT));
    }
    SUBCASE("sampling with top-k, prompt longer than the context: a reference loop without the cache") {
        const std::vector<token_id> prompt{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
        const sample_options o{.max_new_tokens = 12, .temperature = 0.8, .top_k = 5, .seed = 7};
        const auto out = g.generate(prompt, o);
        std::vector<token_id> context = prompt, expected;
        rng gen(o.seed);
        for (std::size_t i = 0; i < o.max_new_tokens; ++i) {
            const auto z = g.logits_uncached(last(context, maxT));
            expected.push_back(sample_token<double>(z, o.temperature, o.top_k, gen));
            context.push_back(expected.back());
        }
        CHECK(out == expected);
    }
    SUBCASE("feed and prefill do not slide by themselves") {
        const std::vector<token_id> full{1, 2, 3, 4, 5, 6, 7, 8};
        g.prefill(full);
        CHECK(error_of([&] { g.feed(1); }).find("KV cache is full") != std::string::npos);
        CHECK(error_of([&] { g.prefill(std::span(full).first(1)); }).find("exceed the model's context of 8") !=
              std::string::npos);
        CHECK(g.length() == 8);
        g.reset();
        CHECK(error_of([&] { g.prefill(std::vector<token_id>(9, 1)); }).find("0 cached + 9 new") != std::string::npos);
        CHECK(error_of([&] { g.logits_uncached(std::vector<token_id>(9, 1)); }).find("context of 8") !=
              std::string::npos);
    }
}

TEST_CASE("a block without decode generates through the model's full forward: the same tokens") {
    cpu_backend backend(tiers());
    using plain = decoder_model<forward_only<double, cpu_backend>, layernorm_layer<double, cpu_backend>>;
    static_assert(!generator<plain>::cached);
    const gpt_config c = small();
    const plain plain_model({.vocab_size = c.vocab_size, .max_seq = c.max_seq, .n_layer = c.n_layer, .n_embd = c.n_embd},
                            c, layernorm_config{.channels = c.n_embd});
    const auto model = make_gpt2<double, cpu_backend>(c);
    const auto blocks = random_blocks<double>(model, 4);
    generator<plain> uncached(backend, plain_model, blocks);
    cpu_generator<double> cached(backend, model, blocks);
    const std::vector<token_id> prompt{5, 0, 5};
    // past the context (8) both slide the same way
    for (const sample_options o : {sample_options{.max_new_tokens = 14, .temperature = 0},
                                   sample_options{.max_new_tokens = 14, .temperature = 0.9, .top_k = 4, .seed = 3}}) {
        INFO("temperature " << o.temperature);
        CHECK(uncached.generate(prompt, o) == cached.generate(prompt, o));
    }
}

TEST_CASE("the same seed gives the same tokens, another seed other tokens") {
    cpu_backend backend(tiers());
    const auto model = make_gpt2<float, cpu_backend>(small());
    cpu_generator<float> g(backend, model, random_blocks<float>(model, 4));
    const std::vector<token_id> prompt{5, 5};
    sample_options o{.max_new_tokens = 20, .temperature = 1.0, .seed = 1};
    const auto a = g.generate(prompt, o);
    const auto b = g.generate(prompt, o);
    o.seed = 2;
    const auto d = g.generate(prompt, o);
    CHECK(a.size() == 20);
    CHECK(a == b);
    CHECK(a != d);
}

TEST_CASE("top_k = 1 is greedy at any temperature and seed") {
    cpu_backend backend(tiers());
    const auto model = make_gpt2<float, cpu_backend>(small());
    cpu_generator<float> g(backend, model, random_blocks<float>(model, 6));
    const std::vector<token_id> prompt{0, 9};
    const auto greedy = g.generate(prompt, {.max_new_tokens = 12, .temperature = 0});
    for (double temperature : {0.5, 1.0, 3.0})
        for (std::uint64_t seed : {0u, 1u, 99u}) {
            INFO("temperature " << temperature << ", seed " << seed);
            CHECK(g.generate(prompt, {.max_new_tokens = 12, .temperature = temperature, .top_k = 1, .seed = seed}) ==
                  greedy);
        }
}

TEST_CASE("generate's first token follows the softmax of the model's logits") {
    // One token per seed: the draws of many generators against softmax(z / T) of a 5-id model.
    cpu_backend backend(tiers());
    const gpt_config c{.vocab_size = 5, .max_seq = 8, .n_layer = 2, .n_head = 2, .n_embd = 8};
    const auto model = make_gpt2<double, cpu_backend>(c);
    cpu_generator<double> g(backend, model, random_blocks<double>(model, 8));
    const std::vector<token_id> prompt{4, 0, 2};
    const double temperature = 1.3;
    const std::size_t draws = 3000;
    std::vector<std::size_t> counts(c.vocab_size);
    for (std::uint64_t seed = 0; seed < draws; ++seed)
        ++counts[g.generate(prompt, {.max_new_tokens = 1, .temperature = temperature, .seed = seed})[0]];
    const auto z = g.logits_uncached(prompt);
    const auto p = softmax(std::vector<double>(z.begin(), z.end()), temperature);
    const double chi2 = chi_square(counts, p, draws);
    MESSAGE("chi-square, 4 degrees of freedom: " << chi2);
    CHECK(chi2 < 25);
}

TEST_CASE("stop_at_eot ends generation after that token; max_new_tokens = 0 generates nothing") {
    cpu_backend backend(tiers());
    const auto model = make_gpt2<float, cpu_backend>(small());
    cpu_generator<float> g(backend, model, random_blocks<float>(model, 2));
    const std::vector<token_id> prompt{3, 1, 4};
    const auto greedy = g.generate(prompt, {.max_new_tokens = 10, .temperature = 0});
    const token_id stop = greedy[2];
    std::size_t first = 0;
    while (greedy[first] != stop) ++first;
    const auto stopped = g.generate(prompt, {.max_new_tokens = 10, .temperature = 0, .stop_at_eot = stop});
    CHECK(stopped == std::vector<token_id>(greedy.begin(), greedy.begin() + static_cast<std::ptrdiff_t>(first) + 1));

    bool called = false;
    CHECK(g.generate(prompt, {.max_new_tokens = 0}, [&](token_id) { called = true; }).empty());
    CHECK_FALSE(called);
}

TEST_CASE("an empty prompt starts from the bos id the caller passes") {
    cpu_backend backend(tiers());
    const auto model = make_gpt2<float, cpu_backend>(small());
    cpu_generator<float> g(backend, model, random_blocks<float>(model, 2));
    const token_id eot = 12;
    const sample_options o{.max_new_tokens = 6, .temperature = 0.9, .seed = 3, .bos = eot};
    CHECK(g.generate({}, o) == g.generate(std::vector<token_id>{eot}, o));
    CHECK(error_of([&] { g.generate({}, {.max_new_tokens = 3}); }).find("sample_options::bos") != std::string::npos);
    CHECK(error_of([&] { g.generate({}, {.max_new_tokens = 3, .bos = 13}); }).find("bos is id 13") !=
          std::string::npos);
}

TEST_CASE("the generator refuses blocks of another layout, naming the group") {
    cpu_backend backend(tiers());
    const auto model = make_gpt2<float, cpu_backend>(small());
    const auto blocks = random_blocks<float>(model, 1);
    {
        auto fewer = blocks;
        fewer.pop_back();
        CHECK(error_of([&] { cpu_generator<float>(backend, model, fewer); })
                  .find("3 parameter blocks for a model of 4 layer groups") != std::string::npos);
    }
    auto resized = [&](std::size_t g, std::ptrdiff_t delta) {
        auto b = blocks;
        b[g].resize(static_cast<std::size_t>(static_cast<std::ptrdiff_t>(b[g].size()) + delta));
        return error_of([&] { cpu_generator<float>(backend, model, b); });
    };
    CHECK(resized(0, -1).find("group 0 (embeddings)") != std::string::npos);
    CHECK(resized(2, 1).find("group 2 (block 1)") != std::string::npos);
    CHECK(resized(3, 5).find("group 3 (final norm)") != std::string::npos);
    // Blocks of a model with another shape.
    gpt_config wider = small();
    wider.n_embd = 16;
    CHECK(error_of([&] { cpu_generator<float>(backend, make_gpt2<float, cpu_backend>(wider), blocks); })
              .find("the model's layout") != std::string::npos);
    CHECK_NOTHROW(cpu_generator<float>(backend, model, blocks));
}

TEST_CASE("bad tokens and options are refused, and a refused feed leaves the cache intact") {
    cpu_backend backend(tiers());
    const auto model = make_gpt2<float, cpu_backend>(small());
    cpu_generator<float> g(backend, model, random_blocks<float>(model, 1));
    const std::vector<token_id> prompt{3, 1};
    const std::string range = "outside [0, V=13)";
    CHECK(error_of([&] { g.logits_uncached(std::vector<token_id>{1, 13}); }).find(range) != std::string::npos);
    CHECK(error_of([&] { g.logits_uncached({}); }).find("no tokens") != std::string::npos);
    CHECK(error_of([&] { g.prefill({}); }).find("no tokens") != std::string::npos);
    CHECK(error_of([&] { g.prefill(std::vector<token_id>{2, -1}); }).find("token 1 is id -1") != std::string::npos);
    CHECK(error_of([&] { g.generate(std::vector<token_id>{2, 99}, {}); }).find("prompt token 1 is id 99") !=
          std::string::npos);
    CHECK(error_of([&] { g.generate(prompt, {.temperature = -1}); }).find("temperature") != std::string::npos);
    CHECK(error_of([&] { g.generate(prompt, {.temperature = std::numeric_limits<double>::infinity()}); })
              .find("temperature") != std::string::npos);
    CHECK(error_of([&] { g.generate(prompt, {.top_k = 14}); }).find("top_k 14") != std::string::npos);
    CHECK_NOTHROW(g.generate(prompt, {.max_new_tokens = 2, .top_k = 13}));
    CHECK(error_of([&] { g.generate(prompt, {.stop_at_eot = 13}); }).find("stop_at_eot is id 13") !=
          std::string::npos);

    g.reset();
    g.prefill(prompt);
    CHECK(error_of([&] { g.feed(13); }).find(range) != std::string::npos);
    CHECK(g.length() == 2);
    const auto next = g.feed(4);
    CHECK(max_abs_diff(next, g.logits_uncached(std::vector<token_id>{3, 1, 4})) < tolerance<float>);
}

#ifdef STRATA_TESTS_WITH_CUDA
TEST_CASE("CUDA generator: cached logits follow the CPU's at every position, the greedy continuation is the CPU's") {
    auto gpu = test::make_backend<cuda_backend>({.device_bytes = 256 << 20, .host_bytes = 256 << 20});
    if (!gpu) return;
    cpu_backend cpu({.device_bytes = 256 << 20, .host_bytes = 256 << 20});
    // Three blocks of 3 heads of 12; 150 positions, so attention_decode walks two chunks of 128 keys.
    const gpt_config c{.vocab_size = 67, .max_seq = 150, .n_layer = 3, .n_head = 3, .n_embd = 36};
    const auto cpu_model = make_gpt2<float, cpu_backend>(c);
    const auto gpu_model = make_gpt2<float, cuda_backend>(c);
    const auto blocks = random_blocks<float>(cpu_model, 21);
    generator<gpt2_model<float, cpu_backend>> on_cpu(cpu, cpu_model, blocks);
    generator<gpt2_model<float, cuda_backend>> on_gpu(*gpu, gpu_model, blocks);

    // cuBLAS against Eigen GEMMs and the two attention kernels sum in other orders: ~1e-6 relative
    // per op, a few 1e-6 through three blocks. A wrong position or cache row is off by O(1).
    std::vector<token_id> tokens;
    rng draw(77);
    for (std::size_t i = 0; i < c.max_seq; ++i) tokens.push_back(static_cast<token_id>(draw.next_u64() % c.vocab_size));
    double worst_cpu = 0, worst_uncached = 0;
    const auto prompt = std::span<const token_id>(tokens).first(20);
    auto relative = [](const std::vector<float>& x, const std::vector<float>& ref) {
        return max_abs_diff(x, ref) / std::max(1.0, max_abs(ref));
    };
    worst_cpu = relative(on_gpu.prefill(prompt), on_cpu.prefill(prompt));
    for (std::size_t t = prompt.size(); t < tokens.size(); ++t) {
        const auto got = on_gpu.feed(tokens[t]);
        worst_cpu = std::max(worst_cpu, relative(got, on_cpu.feed(tokens[t])));
        if (t % 13 == 0 || t + 1 == tokens.size())
            worst_uncached = std::max(worst_uncached, relative(got, on_gpu.logits_uncached(std::span(tokens).first(t + 1))));
    }
    MESSAGE("largest |GPU - CPU| / max |logit|, cached, 150 positions: " << worst_cpu
            << "; GPU cached vs GPU uncached: " << worst_uncached);
    CHECK(worst_cpu < 1e-4);
    CHECK(worst_uncached < 1e-4);

    // The acceptance check of `strata-gpt sample --device cuda`: greedy text equals the CPU's, here
    // past the context too (the window slides at 150).
    const std::vector<token_id> start(tokens.begin(), tokens.begin() + 5);
    const auto greedy_cpu = on_cpu.generate(start, {.max_new_tokens = 160, .temperature = 0});
    const auto greedy_gpu = on_gpu.generate(start, {.max_new_tokens = 160, .temperature = 0});
    CHECK(greedy_gpu == greedy_cpu);
    std::size_t agree = 0;
    while (agree < greedy_gpu.size() && greedy_gpu[agree] == greedy_cpu[agree]) ++agree;
    MESSAGE("greedy tokens equal on GPU and CPU: " << agree << " of " << greedy_cpu.size());
}
#endif

}  // namespace generator_test
