// The Llama model (llama_model.hpp): its final norm against the layer contract, training with
// strata's trainers (loss falls; streamed == resident bit for bit: losses, gradient norms,
// weights, AdamW m and v), its Hugging Face files (names, layouts, config; export -> load is
// bitwise; a trainer checkpoint is such a directory), and generation with a KV cache against the
// model's forward (and, with CUDA, against the CPU).
// Every backend of the build; CUDA cases skip, visibly, without a GPU.
#include "support/placements.hpp"  // test::streamed_trainer
#include "../llama_lora_model.hpp"  // llama::llama_lora_model (generation with adapters)
#include "../llama_model.hpp"  // llama::llama_model, rmsnorm_layer, write_model_files, load_llama_files
#ifdef STRATA_TESTS_WITH_CUDA
#include "../llama_ops_cuda.hpp"  // llama_ops<cuda_backend> (definitions: strata_llama_cuda_ops)
#endif
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, make_backend

#include <strata/io/json_file.hpp>           // strata::read_json_file
#include <strata/io/safetensors.hpp>         // strata::safetensors_file
#include <strata/model/generator.hpp>        // strata::generator
#include <strata/nn/layer.hpp>               // strata::check_layer
#include <strata/strata.hpp>                 // tier_options, cpu_backend
#include <strata/testing/layer_harness.hpp>  // strata::testing::check_*
#include <strata/train/checkpoint.hpp>       // download_blocks, host_blocks
#include <strata/train/tiered_trainer.hpp>  // tiered_trainer

#include <doctest/doctest.h>  // TEST_CASE, TEST_CASE_TEMPLATE, CHECK, MESSAGE

#include <unistd.h>  // getpid

#include <algorithm>   // std::fill, std::max, std::max_element
#include <cmath>       // std::exp, std::log
#include <cstdint>     // std::uint64_t
#include <cstring>     // std::memcmp
#include <filesystem>  // std::filesystem
#include <span>        // std::span
#include <string>      // std::string
#include <utility>     // std::pair
#include <vector>      // std::vector

namespace llama_model_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
using llama::llama_config;
using llama::llama_model;
using llama::rmsnorm_config;
using llama::rmsnorm_layer;
namespace fs = std::filesystem;
namespace st = strata::testing;

namespace {

static_assert(check_layer<rmsnorm_layer<float, cpu_backend>>());
static_assert(check_layer<rmsnorm_layer<double, cpu_backend>>());
#ifdef STRATA_TESTS_WITH_CUDA
static_assert(check_layer<rmsnorm_layer<float, cuda_backend>>());
#endif

// ---- the final norm ----

TEST_CASE("rmsnorm layer: gradients of the gain and the input match FP64 central differences") {
    const auto report = st::check_gradients<rmsnorm_layer>(rmsnorm_config{.channels = 7, .eps = 1e-6}, 2, 3);
    MESSAGE(report.describe());
    CHECK_MESSAGE(report.ok(), report.describe());
    CHECK(report.tensors.size() == 2);  // dweight and dinp
}

TEST_CASE_TEMPLATE("rmsnorm layer: recomputed forward + backward equals plain backward bitwise; dinp may be null", Bk,
                   STRATA_TEST_BACKENDS) {
    for (bool trainable : {true, false}) {
        INFO("trainable " << trainable);
        const auto f = st::check_checkpointing<rmsnorm_layer, float, Bk>({.channels = 9, .trainable = trainable}, 2, 5);
        if (f.skipped) strata::test::skip(f.describe());
        CHECK_MESSAGE(f.ok(), f.describe());
    }
}

TEST_CASE("rmsnorm layer: a bad config is refused with a hint") {
    using norm = rmsnorm_layer<float, cpu_backend>;
    CHECK_THROWS_WITH_AS(norm({.channels = 0}), doctest::Contains("channels must be positive"), error);
}

#ifdef STRATA_TESTS_WITH_CUDA
TEST_CASE("rmsnorm layer: CUDA matches the CPU (normalized squared error)") {
    const auto report = st::check_backend_parity<rmsnorm_layer, cuda_backend>({.channels = 80}, 2, 37);
    if (report.skipped) strata::test::skip(report.describe());
    CHECK_MESSAGE(report.ok(), report.describe());
}
#endif

// ---- training ----

// vocab 29, 3 layers, C 16, 2 heads of 8, hidden 40, context 8.
const llama_config tiny{.vocab = 29, .max_seq = 8, .n_layer = 3, .n_head = 2, .n_embd = 16, .hidden = 40};

// A learnable task: each target is a fixed function of its input token.
std::vector<data::batch> micro_batches(int step, std::size_t accum, std::size_t B, std::size_t T) {
    std::vector<data::batch> out;
    rng gen(900 + step);
    for (std::size_t k = 0; k < accum; ++k) {
        data::batch b;
        for (std::size_t i = 0; i < B * T; ++i) {
            b.inputs.push_back(static_cast<token_id>(gen.next_u64() % tiny.vocab));
            b.targets.push_back(static_cast<token_id>((b.inputs.back() * 5 + 2) % tiny.vocab));
        }
        out.push_back(std::move(b));
    }
    return out;
}

struct run_result {
    std::vector<double> losses, norms;
    host_blocks<float> initial, params, m, v;
};

template <class Trainer, class B>
run_result run(B& backend, const llama_model<B>& model, const train_options& o, int steps) {
    run_result r;
    Trainer t(backend, model, o);
    t.initialize(11);
    using kind = typename Trainer::state_kind;
    r.initial = download_blocks(t, kind::params);
    for (int s = 0; s < steps; ++s) {
        const auto res = t.step(micro_batches(s, o.accum, o.batch, o.seq));
        r.losses.push_back(res.loss);
        r.norms.push_back(res.grad_norm);
    }
    r.params = download_blocks(t, kind::params);
    r.m = download_blocks(t, kind::adam_m);
    r.v = download_blocks(t, kind::adam_v);
    return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);  // memcmp of null is UB
}
bool same_bits(const host_blocks<float>& a, const host_blocks<float>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t g = 0; g < a.size(); ++g)
        if (!same_bits(a[g], b[g])) return false;
    return true;
}

void check_equal(const run_result& a, const run_result& b) {
    REQUIRE(a.losses.size() == b.losses.size());
    for (std::size_t i = 0; i < a.losses.size(); ++i) {
        INFO("step " << i + 1);
        CHECK(a.losses[i] == b.losses[i]);  // bitwise
        CHECK(a.norms[i] == b.norms[i]);
    }
    CHECK(same_bits(a.params, b.params));
    CHECK(same_bits(a.m, b.m));
    CHECK(same_bits(a.v, b.v));
}

fs::path scratch_dir(const std::string& what) {
    return fs::temp_directory_path() / ("strata-test-llama-" + what + "-" + std::to_string(::getpid()));
}

tier_options tiers() {
    // no storage_dir: the backend's own temporary directory, removed at the end
    return {.device_bytes = 256 << 20, .host_bytes = 256 << 20, .storage_bytes = 256 << 20};
}

train_options options() {
    train_options o{.batch = 2, .seq = 8, .accum = 2, .clip = 0.5};
    o.schedule = {.kind = lr_kind::constant, .lr = 1e-2, .min_lr = 1e-2, .warmup_steps = 0, .total_steps = 10};
    return o;
}

template <class B>
using resident_t = tiered_trainer<float, B, llama_model<B>>;

TEST_CASE_TEMPLATE("llama model: trains with accumulation and clipping, the loss falls", B, STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    const auto model = llama::make_llama_model<B>(tiny);
    CHECK(model.group_count() == tiny.n_layer + 2);
    std::size_t parameters = 0;
    for (const auto& g : model.groups()) parameters += g.parameter_count();
    CHECK(parameters == tiny.parameter_count());
    const auto r = run<resident_t<B>>(*made, model, options(), 10);
    std::string curve;
    for (double l : r.losses) curve += " " + std::to_string(l);
    MESSAGE("losses:" << curve);
    CHECK(r.losses.front() > 3.0);  // about ln 29 = 3.37 at the start
    CHECK(r.losses.back() < r.losses.front() - 0.5);
    CHECK(*std::max_element(r.norms.begin(), r.norms.end()) > options().clip);  // clipping really happened
}

TEST_CASE_TEMPLATE("llama model: streamed == resident bitwise (prefetch 1 and 2, moments on host and storage)", B,
                   STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    B& backend = *made;
    const auto model = llama::make_llama_model<B>(tiny);
    const auto o = options();
    const auto resident = run<resident_t<B>>(backend, model, o, 6);
    SUBCASE("prefetch 1, moments on the host") {
        check_equal(resident,
                    run<test::streamed_trainer<tiered_trainer<float, B, llama_model<B>>, 2, host_tier>>(backend, model, o, 6));
    }
    SUBCASE("prefetch 2, moments on the host") {
        check_equal(resident,
                    run<test::streamed_trainer<tiered_trainer<float, B, llama_model<B>>, 3, host_tier>>(backend, model, o, 6));
    }
    SUBCASE("prefetch 1, moments on storage") {
        check_equal(resident, run<test::streamed_trainer<tiered_trainer<float, B, llama_model<B>>, 2, storage_tier>>(
                                  backend, model, o, 6));
    }
    SUBCASE("prefetch 2, moments on storage") {
        check_equal(resident, run<test::streamed_trainer<tiered_trainer<float, B, llama_model<B>>, 3, storage_tier>>(
                                  backend, model, o, 6));
    }
    SUBCASE("no clipping") {
        auto unclipped = o;
        unclipped.clip = 0;
        check_equal(run<resident_t<B>>(backend, model, unclipped, 4),
                    run<test::streamed_trainer<tiered_trainer<float, B, llama_model<B>>, 3, host_tier>>(backend, model,
                                                                                                       unclipped, 4));
    }
}

// ---- Hugging Face files ----

// Blocks of a model with every value distinct (padding stays zero, as in a trainer's blocks).
template <class Model>
host_blocks<float> numbered_blocks(const Model& model) {
    host_blocks<float> blocks;
    float next = 1.0f;
    for (const auto& g : model.groups()) {
        blocks.emplace_back(g.numel(), 0.0f);
        for (const auto& entry : g.entries())
            for (std::size_t i = 0; i < entry.spec.shape.numel(); ++i) blocks.back()[entry.offset + i] = next++ / 4096.0f;
    }
    return blocks;
}

TEST_CASE("llama model: HF Llama names, nn.Linear layouts, split q/k/v and config; export -> load is bitwise") {
    const auto dir = scratch_dir("export");
    fs::remove_all(dir);
    fs::create_directories(dir);
    const auto model = llama::make_llama_model<cpu_backend>(tiny);
    const auto blocks = numbered_blocks(model);
    llama::write_model_files(model, blocks, dir);

    const auto file = safetensors_file::open(dir / "model.safetensors");
    const std::size_t C = tiny.n_embd, H = tiny.hidden;
    CHECK(file.size() == 1 + tiny.n_layer * 9 + 1);  // embed_tokens, 9 per layer, norm; no lm_head (tied)
    CHECK_FALSE(file.contains("lm_head.weight"));
    CHECK(file.info("model.embed_tokens.weight").shape == std::vector<std::size_t>{tiny.vocab, C});
    CHECK(file.info("model.norm.weight").shape == std::vector<std::size_t>{C});
    CHECK(file.info("model.layers.2.mlp.gate_proj.weight").shape == std::vector<std::size_t>{H, C});
    CHECK(file.info("model.layers.2.mlp.down_proj.weight").shape == std::vector<std::size_t>{C, H});
    for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"})
        CHECK(file.info("model.layers.0.self_attn." + std::string(p) + ".weight").shape == std::vector<std::size_t>{C, C});

    // nn.Linear (out, in): HF's k_proj[o][i] is the fused (in, 3C) matrix's [i][C + o]; gate_proj[h][i] is [i][h].
    const auto& layout = model.groups()[1];
    const float* qkv = blocks[1].data() + layout.entries()[1].offset;
    const float* gate = blocks[1].data() + layout.entries()[4].offset;
    REQUIRE(layout.entries()[1].spec.name == "self_attn.qkv_proj.weight");
    REQUIRE(layout.entries()[4].spec.name == "mlp.gate_proj.weight");
    const auto k_proj = file.get<float>("model.layers.0.self_attn.k_proj.weight");
    const auto gate_proj = file.get<float>("model.layers.0.mlp.gate_proj.weight");
    for (std::size_t o : {std::size_t{0}, std::size_t{5}, C - 1})
        for (std::size_t i : {std::size_t{0}, std::size_t{3}, C - 1}) {
            CHECK(k_proj[o * C + i] == qkv[i * 3 * C + C + o]);
            CHECK(gate_proj[(H - 1 - o) * C + i] == gate[i * H + H - 1 - o]);
        }

    const auto config = read_json_file(dir / "config.json");
    CHECK(config["architectures"][0] == "LlamaForCausalLM");
    CHECK(config["tie_word_embeddings"] == true);
    CHECK(config["num_key_value_heads"] == tiny.n_head);
    CHECK(config["intermediate_size"] == H);
    CHECK(config["hidden_act"] == "silu");
    CHECK(config["rms_norm_eps"] == tiny.eps);
    CHECK(config["rope_theta"] == tiny.rope_theta);

    const auto loaded = llama::load_llama_files(dir);
    CHECK(loaded.config.n_layer == tiny.n_layer);
    CHECK(loaded.config.hidden == tiny.hidden);
    CHECK(loaded.config.max_seq == tiny.max_seq);
    CHECK(same_bits(loaded.blocks, blocks));
    fs::remove_all(dir);
}

TEST_CASE("llama model: loading refuses what the model cannot represent, by name") {
    const auto dir = scratch_dir("refuse");
    fs::remove_all(dir);
    fs::create_directories(dir);
    const auto model = llama::make_llama_model<cpu_backend>(tiny);
    llama::write_model_files(model, numbered_blocks(model), dir);
    auto config = read_json_file(dir / "config.json");
    auto with = [&](const char* key, nlohmann::json value) {
        auto c = config;
        c[key] = std::move(value);
        write_json_file(dir / "config.json", c);
    };
    with("num_key_value_heads", 3);  // does not divide 2 heads
    CHECK_THROWS_WITH_AS(llama::load_llama_files(dir), doctest::Contains("num_key_value_heads 3 of 2 heads"), error);
    with("num_key_value_heads", 1);  // grouped-query attention: the file's k_proj is of 2 heads
    CHECK_THROWS_WITH_AS(llama::load_llama_files(dir), doctest::Contains("k_proj.weight"), error);
    with("attention_bias", true);
    CHECK_THROWS_WITH_AS(llama::load_llama_files(dir), doctest::Contains("attention_bias true"), error);
    with("mlp_bias", true);
    CHECK_THROWS_WITH_AS(llama::load_llama_files(dir), doctest::Contains("mlp_bias true"), error);
    with("num_local_experts", 8);
    CHECK_THROWS_WITH_AS(llama::load_llama_files(dir), doctest::Contains("num_local_experts"), error);
    with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}});
    CHECK_THROWS_WITH_AS(llama::load_llama_files(dir), doctest::Contains("rope_scaling"), error);
    with("tie_word_embeddings", false);  // then lm_head.weight must be there
    CHECK_THROWS_WITH_AS(llama::load_llama_files(dir), doctest::Contains("lm_head.weight"), error);
    with("model_type", "gemma");
    CHECK_THROWS_WITH_AS(llama::load_llama_files(dir), doctest::Contains("model_type \"gemma\""), error);
    with("hidden_act", "gelu");
    CHECK_THROWS_WITH_AS(llama::load_llama_files(dir), doctest::Contains("hidden_act"), error);
    with("num_hidden_layers", tiny.n_layer + 1);
    CHECK_THROWS_WITH_AS(llama::load_llama_files(dir), doctest::Contains("model.layers.3.self_attn.q_proj.weight"), error);
    fs::remove_all(dir);
}

TEST_CASE_TEMPLATE("llama model: a trainer checkpoint is an HF Llama directory; it loads back bitwise and resumes", B,
                   STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    const auto dir = scratch_dir("checkpoint");
    fs::remove_all(dir);
    const auto model = llama::make_llama_model<B>(tiny);
    const auto o = options();
    test::streamed_trainer<tiered_trainer<float, B, llama_model<B>>, 2, host_tier> t(*made, model, o);
    t.initialize(3);
    t.step(micro_batches(0, o.accum, o.batch, o.seq));
    const auto saved = llama::save_llama_checkpoint(t, dir, {{"tokenizer", "byte"}});
    CHECK(saved == dir / "step-000001");
    CHECK(safetensors_file::open(saved / "model.safetensors").contains("model.layers.0.self_attn.q_proj.weight"));
    CHECK(safetensors_file::open(saved / "optimizer.safetensors").contains("m.model.norm.weight"));
    using kind = typename decltype(t)::state_kind;
    CHECK(same_bits(llama::load_llama_files(saved).blocks, download_blocks(t, kind::params)));
    // group by group (what --init-from uploads, one group in host memory at a time): the same blocks
    const llama::llama_weights weights(saved);
    CHECK(weights.config() == tiny);
    const auto trained = download_blocks(t, kind::params);
    REQUIRE(weights.group_count() == trained.size());
    for (std::size_t g = 0; g < trained.size(); ++g) CHECK(same_bits(weights.group(g), trained[g]));

    // Resumed into a resident trainer, the next step is the one the first trainer takes.
    resident_t<B> resumed(*made, model, o);
    llama::load_llama_checkpoint(resumed, saved);
    CHECK(resumed.step_count() == 1);
    CHECK(same_bits(download_blocks(resumed, kind::adam_v), download_blocks(t, kind::adam_v)));
    const auto next = micro_batches(1, o.accum, o.batch, o.seq);
    CHECK(resumed.step(next).loss == t.step(next).loss);
    CHECK(same_bits(download_blocks(resumed, kind::params), download_blocks(t, kind::params)));

    // Another shape is refused by name.
    auto other = tiny;
    other.hidden = 48;
    const auto wider = llama::make_llama_model<B>(other);
    resident_t<B> mismatched(*made, wider, o);
    CHECK_THROWS_WITH_AS(llama::load_llama_checkpoint(mismatched, saved), doctest::Contains("different Llama shape"), error);
    fs::remove_all(dir);
}

// ---- generation ----

TEST_CASE_TEMPLATE("llama model: generation reads the last position's logits of the model's forward", B,
                   STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    const auto model = llama::make_llama_model<B>(tiny);
    const auto o = options();
    resident_t<B> t(*made, model, o);
    t.initialize(5);
    for (int s = 0; s < 40; ++s) t.step(micro_batches(s, o.accum, o.batch, o.seq));
    generator<llama_model<B>> gen(*made, model, download_blocks(t, resident_t<B>::state_kind::params));

    // The loss of one target at the last position, through the trainer's evaluate (a 2 x 8
    // batch, every other target ignored), is -log softmax of the generator's logits there.
    data::batch b = micro_batches(99, 1, o.batch, o.seq)[0];
    const std::vector<token_id> context(b.inputs.begin(), b.inputs.begin() + o.seq);
    const token_id target = b.targets[o.seq - 1];
    std::fill(b.targets.begin(), b.targets.end(), kernels::cpu::ignore_index);
    b.targets[o.seq - 1] = target;
    const double evaluated = t.evaluate(std::vector<data::batch>{b});
    const auto loss_of = [&](const std::vector<float>& logits) {
        double top = logits[0], sum = 0;
        for (float x : logits) top = std::max(top, static_cast<double>(x));
        for (float x : logits) sum += std::exp(static_cast<double>(x) - top);
        return top + std::log(sum) - logits[target];
    };
    const double uncached = loss_of(gen.logits_uncached(context)), cached = loss_of(gen.prefill(context));
    MESSAGE("loss at the last position: evaluate " << evaluated << ", from the generator's logits " << uncached
                                                   << " (full forward), " << cached << " (KV cache)");
    CHECK(uncached == doctest::Approx(evaluated).epsilon(1e-5));
    CHECK(cached == doctest::Approx(evaluated).epsilon(1e-5));

    // The model learned target = (5 x + 2) mod 29 of the last token: greedy decoding follows it.
    const std::vector<token_id> prompt{3, 17, 4};
    const auto greedy = gen.generate(prompt, {.max_new_tokens = 12, .temperature = 0});
    REQUIRE(greedy.size() == 12);
    int followed = 0;
    token_id last = prompt.back();
    for (token_id next : greedy) {
        followed += next == (last * 5 + 2) % 29;
        last = next;
    }
    MESSAGE("greedy continuation follows the rule " << followed << " times of 12");
    CHECK(followed >= 10);

    // Past the context (8) the window slides; a seed fixes a sampled continuation.
    const sample_options sampled{.max_new_tokens = 20, .temperature = 0.8, .top_k = 5, .seed = 9};
    const auto a = gen.generate(prompt, sampled), c = gen.generate(prompt, sampled);
    CHECK(a.size() == 20);
    CHECK(a == c);
    for (token_id id : a) CHECK((id >= 0 && id < 29));
}


// ---- the Llama family (issue 16): GQA, q/k/v biases, head_dim, llama3 rope, untied head ----

// Qwen2-shaped: 6 query heads of 4 (A = 24 != C = 16), 2 key/value heads, q/k/v biases, untied head.
const llama_config qwen{.vocab = 29,
                        .max_seq = 8,
                        .n_layer = 2,
                        .n_head = 6,
                        .n_embd = 16,
                        .hidden = 24,
                        .n_kv_head = 2,
                        .head_dim = 4,
                        .tie_word_embeddings = false,
                        .qkv_bias = true,
                        .arch = llama::llama_arch::qwen2};

TEST_CASE("llama family: GQA + q/k/v biases + untied head export HF names (q/k/v_proj.bias, lm_head.weight); load is bitwise") {
    const auto dir = scratch_dir("family-export");
    fs::remove_all(dir);
    fs::create_directories(dir);
    const auto model = llama::make_llama_model<cpu_backend>(qwen);
    const auto blocks = numbered_blocks(model);
    llama::write_model_files(model, blocks, dir);
    const auto file = safetensors_file::open(dir / "model.safetensors");
    const std::size_t C = qwen.n_embd, A = 24, KV = 8;
    CHECK(file.size() == 1 + 1 + qwen.n_layer * 12 + 1);  // embed, lm_head, 9 weights + 3 biases per layer, norm
    CHECK(file.info("lm_head.weight").shape == std::vector<std::size_t>{qwen.vocab, C});
    CHECK(file.info("model.layers.1.self_attn.q_proj.weight").shape == std::vector<std::size_t>{A, C});
    CHECK(file.info("model.layers.1.self_attn.k_proj.weight").shape == std::vector<std::size_t>{KV, C});
    CHECK(file.info("model.layers.1.self_attn.v_proj.weight").shape == std::vector<std::size_t>{KV, C});
    CHECK(file.info("model.layers.1.self_attn.o_proj.weight").shape == std::vector<std::size_t>{C, A});
    CHECK(file.info("model.layers.1.self_attn.q_proj.bias").shape == std::vector<std::size_t>{A});
    CHECK(file.info("model.layers.1.self_attn.k_proj.bias").shape == std::vector<std::size_t>{KV});
    CHECK_FALSE(file.contains("model.layers.1.self_attn.o_proj.bias"));
    // v_proj.bias is elements [A + KV, A + 2 KV) of the fused bias
    const auto& layout = model.groups()[1];
    REQUIRE(layout.entries()[2].spec.name == "self_attn.qkv_proj.bias");
    const auto v_bias = file.get<float>("model.layers.0.self_attn.v_proj.bias");
    for (std::size_t i = 0; i < KV; ++i) CHECK(v_bias[i] == blocks[1][layout.entries()[2].offset + A + KV + i]);
    // lm_head is its own tensor, not a copy of embed_tokens
    const auto head = file.get<float>("lm_head.weight"), embed = file.get<float>("model.embed_tokens.weight");
    CHECK_FALSE(std::equal(head.begin(), head.end(), embed.begin()));

    const auto config = read_json_file(dir / "config.json");
    CHECK(config["architectures"][0] == "Qwen2ForCausalLM");
    CHECK(config["model_type"] == "qwen2");
    CHECK(config["num_key_value_heads"] == 2);
    CHECK(config["head_dim"] == 4);
    CHECK(config["tie_word_embeddings"] == false);
    CHECK(config["use_sliding_window"] == false);
    const auto loaded = llama::load_llama_files(dir);
    CHECK(loaded.config == qwen);
    CHECK(same_bits(loaded.blocks, blocks));
    fs::remove_all(dir);
}

TEST_CASE("llama family: parameter_count counts the untied head, the biases and GQA's smaller k/v") {
    const auto model = llama::make_llama_model<cpu_backend>(qwen);
    std::size_t n = 0;
    for (const auto& g : model.groups())
        for (const auto& entry : g.entries()) n += entry.spec.shape.numel();
    CHECK(qwen.parameter_count() == n);
    const auto mha = llama::make_llama_model<cpu_backend>(tiny);
    std::size_t m = 0;
    for (const auto& g : mha.groups())
        for (const auto& entry : g.entries()) m += entry.spec.shape.numel();
    CHECK(tiny.parameter_count() == m);
    const std::size_t V = tiny.vocab, C = tiny.n_embd, H = tiny.hidden, L = tiny.n_layer;
    CHECK(m == V * C + L * (2 * C + 4 * C * C + 3 * C * H) + C);  // today's formula, unchanged
}

TEST_CASE_TEMPLATE("llama family: an untied head equal to the embedding computes what the tied model does", B,
                   STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    auto untied_config = tiny;
    untied_config.tie_word_embeddings = false;
    const auto tied = llama::make_llama_model<B>(tiny);
    const auto untied = llama::make_llama_model<B>(untied_config);
    const auto o = options();
    resident_t<B> a(*made, tied, o), b(*made, untied, o);
    a.initialize(5);
    using kind = typename resident_t<B>::state_kind;
    auto blocks = download_blocks(a, kind::params);
    // group 0 of the untied model: embed_tokens, then lm_head (a copy)
    const auto& g0 = untied.groups()[0];
    REQUIRE(g0.entries().size() == 2);
    REQUIRE(g0.entries()[1].spec.name == "lm_head.weight");
    CHECK(untied.hf_name(0, g0.entries()[1]) == "lm_head.weight");
    std::vector<float> group0(g0.numel(), 0.0f);
    const std::size_t VC = tiny.vocab * tiny.n_embd;
    std::copy(blocks[0].begin(), blocks[0].begin() + VC, group0.begin() + g0.entries()[0].offset);
    std::copy(blocks[0].begin(), blocks[0].begin() + VC, group0.begin() + g0.entries()[1].offset);
    for (std::size_t g = 0; g < blocks.size(); ++g) b.upload(kind::params, g, g == 0 ? group0 : blocks[g]);
    const auto batches = micro_batches(0, o.accum, o.batch, o.seq);
    const auto ra = a.step(batches), rb = b.step(batches);
    CHECK(ra.loss == rb.loss);  // the same logits, bit for bit
    // after the step the head and the embedding have moved apart (each got its own gradient)
    const auto after = download_blocks(b, kind::params);
    CHECK_FALSE(std::equal(after[0].begin() + g0.entries()[0].offset, after[0].begin() + g0.entries()[0].offset + VC,
                           after[0].begin() + g0.entries()[1].offset));
    // and the loss falls when it trains on
    double last = rb.loss;
    for (int s = 1; s < 6; ++s) last = b.step(micro_batches(s, o.accum, o.batch, o.seq)).loss;
    CHECK(last < rb.loss);
}

TEST_CASE_TEMPLATE("llama family: a GQA + bias + llama3 model trains, streamed == resident bit for bit", B,
                   STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    auto c = qwen;
    c.arch = llama::llama_arch::qwen2;
    const auto model = llama::make_llama_model<B>(c);
    const auto o = options();
    const auto resident = run<resident_t<B>>(*made, model, o, 4);
    const auto streamed =
        run<test::streamed_trainer<tiered_trainer<float, B, llama_model<B>>, 2, host_tier>>(*made, model, o, 4);
    check_equal(resident, streamed);
    CHECK(resident.losses.back() < resident.losses.front());
}

// ---- generation with a KV cache, the family's shapes ----

// Weights far from flat (N(0, 0.3), gains 1), so a wrong cache row, position or head shows.
template <class Model>
host_blocks<float> varied_weights(const Model& model, std::uint64_t seed) {
    rng gen(seed);
    host_blocks<float> blocks;
    for (const auto& g : model.groups()) {
        blocks.emplace_back(g.numel(), 0.0f);
        for (const auto& entry : g.entries())
            for (std::size_t i = 0; i < entry.spec.shape.numel(); ++i)
                blocks.back()[entry.offset + i] =
                    !entry.spec.decay && entry.spec.name.ends_with("weight") ? 1.0f : static_cast<float>(gen.normal(0.0, 0.3));
    }
    return blocks;
}

double relative_difference(const std::vector<float>& x, const std::vector<float>& ref) {
    double worst = 0, scale = 1;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(x[i]) - ref[i]));
        scale = std::max(scale, std::abs(static_cast<double>(ref[i])));
    }
    return worst / scale;
}

// The shapes: multi-head tied (tiny); Qwen2's GQA + q/k/v biases + head_dim + untied head; Llama
// 3.1's GQA + llama3 rope (no biases: the two do not go together in one architecture).
std::vector<std::pair<std::string, llama_config>> generation_shapes() {
    auto llama31 = qwen;
    llama31.qkv_bias = false;
    llama31.arch = llama::llama_arch::llama;
    llama31.rope_theta = 100.0;
    llama31.rope_factor = 8.0;
    llama31.rope_original_max = 4;
    return {{"multi-head", tiny}, {"GQA + biases + head_dim + untied head", qwen}, {"GQA + llama3 rope", llama31}};
}

TEST_CASE_TEMPLATE("llama family: KV-cached logits are the model's forward at every position; greedy past the context "
                   "is the argmax of the forward",
                   B, STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    for (const auto& [name, c] : generation_shapes()) {
        INFO(name);
        const auto model = llama::make_llama_model<B>(c);
        generator<llama_model<B>> gen(*made, model, varied_weights(model, 3));
        static_assert(generator<llama_model<B>>::cached);
        const std::vector<token_id> tokens{3, 17, 4, 28, 0, 9, 9, 21};  // the whole context (8)
        double worst = 0;
        for (std::size_t t = 0; t < tokens.size(); ++t)
            worst = std::max(worst, relative_difference(gen.feed(tokens[t]),
                                                        gen.logits_uncached(std::span(tokens).first(t + 1))));
        MESSAGE(name << " on " << B::name << ": largest |cached - forward| / max |logit| " << worst);
        CHECK(worst < 1e-5);  // the same ops on one row, attention summed in another order: a few ulps

        // greedy, 12 tokens after a prompt of 3: the window slides after 5
        const std::vector<token_id> prompt{3, 17, 4};
        const auto greedy = gen.generate(prompt, {.max_new_tokens = 12, .temperature = 0});
        std::vector<token_id> context = prompt;
        for (std::size_t i = 0; i < greedy.size(); ++i) {
            const auto window = std::span<const token_id>(context).last(std::min(context.size(), c.max_seq));
            const auto z = gen.logits_uncached(window);
            CHECK(greedy[i] == static_cast<token_id>(std::max_element(z.begin(), z.end()) - z.begin()));
            context.push_back(greedy[i]);
        }
    }
}

TEST_CASE_TEMPLATE("llama family: a LoRA model decodes with the adapters, its KV-cached logits are its forward's", B,
                   STRATA_TEST_BACKENDS) {
    auto made = test::make_backend<B>(tiers());
    if (!made) return;
    const llama::llama_lora_config lc{.base = qwen.block(), .rank = 2, .alpha = 3.0};
    const llama::llama_lora_model<B> model(qwen.decoder(), lc, qwen.norm());
    generator<llama::llama_lora_model<B>> gen(*made, model, varied_weights(model, 4));  // adapters B != 0
    const std::vector<token_id> tokens{1, 2, 3, 5, 8, 13, 21, 5};
    const auto prompt = std::span<const token_id>(tokens).first(5);
    double worst = relative_difference(gen.prefill(prompt), gen.logits_uncached(prompt));
    for (std::size_t t = 5; t < tokens.size(); ++t)
        worst = std::max(worst, relative_difference(gen.feed(tokens[t]), gen.logits_uncached(std::span(tokens).first(t + 1))));
    CHECK(worst < 1e-5);
}

#ifdef STRATA_TESTS_WITH_CUDA
TEST_CASE("llama family: CUDA generation follows the CPU's: cached logits at every position, the same greedy text") {
    auto gpu = test::make_backend<cuda_backend>(tiers());
    if (!gpu) return;
    cpu_backend cpu(tiers());
    for (const auto& [name, shape] : generation_shapes()) {
        INFO(name);
        auto c = shape;
        c.max_seq = 140;  // attention_decode's keys in two chunks of 128
        const auto cpu_model = llama::make_llama_model<cpu_backend>(c);
        const auto gpu_model = llama::make_llama_model<cuda_backend>(c);
        const auto weights = varied_weights(cpu_model, 5);
        generator<llama_model<cpu_backend>> on_cpu(cpu, cpu_model, weights);
        generator<llama_model<cuda_backend>> on_gpu(*gpu, gpu_model, weights);
        std::vector<token_id> tokens;
        rng draw(6);
        for (std::size_t i = 0; i < c.max_seq; ++i) tokens.push_back(static_cast<token_id>(draw.next_u64() % c.vocab));
        const auto prompt = std::span<const token_id>(tokens).first(10);
        // cuBLAS vs Eigen GEMMs, the kernels' other summation orders: ~1e-6 per op.
        double worst = relative_difference(on_gpu.prefill(prompt), on_cpu.prefill(prompt));
        for (std::size_t t = prompt.size(); t < tokens.size(); ++t)
            worst = std::max(worst, relative_difference(on_gpu.feed(tokens[t]), on_cpu.feed(tokens[t])));
        MESSAGE(name << ": largest |GPU - CPU| / max |logit| over 140 cached positions: " << worst);
        CHECK(worst < 1e-4);
        const std::vector<token_id> start(tokens.begin(), tokens.begin() + 4);
        const sample_options greedy{.max_new_tokens = 150, .temperature = 0};  // slides past 140
        CHECK(on_gpu.generate(start, greedy) == on_cpu.generate(start, greedy));
    }
}
#endif

TEST_CASE("llama config: a directory's architecture and token ids are written back as they were read") {
    auto mistral = tiny;
    mistral.arch = llama::llama_arch::mistral;
    nlohmann::json j = mistral.to_hf_json();
    j["bos_token_id"] = 1;
    j["eos_token_id"] = nlohmann::json::array({2, 5});  // Llama 3.1 Instruct-style: several end tokens
    const llama_config read = llama_config::from_hf_json(j);
    CHECK(read.bos_token_id == 1);
    CHECK(read.eos_token_id == nlohmann::json::array({2, 5}));
    const auto model = llama::make_llama_model<cpu_backend>(read);
    CHECK(llama::config_of(model).arch == llama::llama_arch::llama);  // the shape alone: a Llama
    const auto written = llama::written_config(model, llama::hf_identity::of(read)).to_hf_json();
    CHECK(written["architectures"][0] == "MistralForCausalLM");
    CHECK(written["bos_token_id"] == 1);
    CHECK(written["eos_token_id"] == nlohmann::json::array({2, 5}));
    CHECK(llama_config::from_hf_json(written) == read);
    // V - 1 is what no id stands for; a Qwen2 identity on a model without biases stays a Llama
    CHECK(llama::written_config(model, {}).to_hf_json()["eos_token_id"] == tiny.vocab - 1);
    CHECK(llama::written_config(model, {.arch = llama::llama_arch::qwen2}).arch == llama::llama_arch::llama);
    j["eos_token_id"] = "</s>";
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(j), doctest::Contains("eos_token_id"), error);
}

TEST_CASE("llama config: Llama 3.1 rope_scaling llama3, Mistral and Qwen2 configs read; what the block lacks is refused by field") {
    nlohmann::json j = tiny.to_hf_json();
    j["num_key_value_heads"] = 1u;
    j["rope_theta"] = 500000.0;
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192u}};
    auto c = llama_config::from_hf_json(j);
    CHECK(c.kv_heads() == 1);
    CHECK(c.rope_factor == 8.0);
    CHECK(c.rope_original_max == 8192);
    CHECK(llama_config::from_hf_json(c.to_hf_json()) == c);  // round trip
    j["rope_scaling"].erase("low_freq_factor");
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(j), doctest::Contains("lacks a field of rope_type llama3"), error);
    j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(j), doctest::Contains("rope_scaling"), error);
    j.erase("rope_scaling");
    j.erase("tie_word_embeddings");  // LlamaConfig's default: untied
    CHECK_FALSE(llama_config::from_hf_json(j).tie_word_embeddings);

    auto mistral = tiny;
    mistral.arch = llama::llama_arch::mistral;
    mistral.n_kv_head = 1;
    auto m = mistral.to_hf_json();
    CHECK(m["architectures"][0] == "MistralForCausalLM");
    CHECK(m["sliding_window"].is_null());
    CHECK(llama_config::from_hf_json(m) == mistral);
    m["sliding_window"] = tiny.max_seq;  // the window covers the whole context: plain causal attention
    CHECK(llama_config::from_hf_json(m) == mistral);
    m["sliding_window"] = tiny.max_seq - 1;
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(m), doctest::Contains("sliding_window 7"), error);
    m["sliding_window"] = nullptr;
    m["num_local_experts"] = 8;  // Mixtral
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(m), doctest::Contains("num_local_experts"), error);

    auto q = qwen.to_hf_json();
    CHECK(llama_config::from_hf_json(q) == qwen);
    q["use_sliding_window"] = true;
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(q), doctest::Contains("use_sliding_window true"), error);
    q["use_sliding_window"] = false;
    q["layer_types"] = {"full_attention", "sliding_attention"};
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(q), doctest::Contains("layer_types entry \"sliding_attention\""), error);
    q["layer_types"] = {"full_attention", "full_attention"};
    CHECK(llama_config::from_hf_json(q) == qwen);
    q["num_experts"] = 4;  // Qwen2-MoE
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(q), doctest::Contains("num_experts"), error);
    q.erase("num_experts");
    q["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192u}};
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(q), doctest::Contains("rope_scaling llama3 with model_type"), error);
    q.erase("rope_scaling");
    q["num_key_value_heads"] = 4u;  // does not divide 6
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(q), doctest::Contains("num_key_value_heads 4 of 6 heads"), error);
    q["num_key_value_heads"] = 2u;
    q["head_dim"] = 5u;
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(q), doctest::Contains("head_dim 5"), error);
}

}  // namespace

// Found by fuzz/checkpoint_json.cpp: j.value(key, default) threw nlohmann's type_error for a
// config.json that is not an object, or whose rms_norm_eps or *_bias has another type.
TEST_CASE("llama config: a field of the wrong type or a non-object config.json is a strata::error") {
    const nlohmann::json good = tiny.to_hf_json();
    CHECK(llama_config::from_hf_json(good) == tiny);
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(nlohmann::json::array({good})), doctest::Contains("not an object"), error);
    auto with = [&](const char* key, nlohmann::json value) {
        auto c = good;
        c[key] = std::move(value);
        return c;
    };
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(with("rms_norm_eps", "small")),
                         doctest::Contains("'rms_norm_eps' is \"small\", not a positive number"), error);
    CHECK_THROWS_AS(llama_config::from_hf_json(with("rope_theta", -1.0)), error);
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(with("mlp_bias", 1)), doctest::Contains("mlp_bias 1"), error);
    CHECK(llama_config::from_hf_json(with("rms_norm_eps", nullptr)).eps == 1e-6);
    auto without_heads = good;
    without_heads.erase("num_attention_heads");  // was read through const operator[]: undefined
    CHECK_THROWS_WITH_AS(llama_config::from_hf_json(without_heads),
                         doctest::Contains("missing or non-integer field 'num_attention_heads'"), error);
}

}  // namespace llama_model_test
