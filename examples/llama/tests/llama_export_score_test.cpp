// strata-llama export and score, below the CLI (hf_export.hpp, score.hpp): an export loads back
// (load_llama_files) as exactly the checkpoint's weights in float32 and exactly their
// round-to-nearest-even bfloat16 / float16 values otherwise, carries the tokenizer and generation
// config but no training state, and refuses to write over anything; score's logits are the
// model's forward logits bit for bit, its loss the model's loss.
#include "../hf_export.hpp"    // llama::export_llama_directory, weight_dtype
#include "../llama_model.hpp"  // llama::make_llama_model, write_model_files, load_llama_files
#include "../score.hpp"        // llama::make_scoring_model, score_tokens, write_scores
#include "hf_fixture.hpp"      // llama_fixture::forward_logits

#include <strata/core/float_formats.hpp>  // float_to_bf16, bf16_to_float, float_to_f16, f16_to_float
#include <strata/io/json_file.hpp>        // read_json_file, write_json_file
#include <strata/io/safetensors.hpp>      // safetensors_file, safetensors_writer
#include <strata/strata.hpp>              // cpu_backend
#include <strata/train/tiered_trainer.hpp>       // trainer, train_options

#include <doctest/doctest.h>  // TEST_CASE, CHECK, CHECK_THROWS_WITH_AS

#include <cmath>       // std::sin
#include <cstddef>     // std::size_t
#include <cstdint>     // std::uint16_t
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ofstream
#include <span>        // std::span, std::as_bytes
#include <string>      // std::string
#include <unistd.h>    // ::getpid
#include <vector>      // std::vector

namespace llama_export_score_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
using llama::llama_config;
namespace fs = std::filesystem;

namespace {

// Qwen2-shaped (q/k/v biases), grouped-query, untied: every kind of tensor an export writes.
const llama_config small{.vocab = 37, .max_seq = 16, .n_layer = 2, .n_head = 4, .n_embd = 24, .hidden = 40,
                         .n_kv_head = 2, .tie_word_embeddings = false, .qkv_bias = true, .arch = llama::llama_arch::qwen2};

fs::path scratch(const std::string& what) {
    const fs::path dir = fs::temp_directory_path() / ("strata-test-llama-" + what + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    return dir;
}

// Weights with full float mantissas and magnitudes from 1e-3 to 1e3, so that rounding matters (the
// entries only: the padding between them is not a weight, and stays 0 as a load leaves it).
std::vector<std::vector<float>> varied_blocks(const llama::llama_model<cpu_backend>& model) {
    std::vector<std::vector<float>> blocks;
    std::size_t k = 0;
    for (const auto& group : model.groups()) {
        blocks.emplace_back(group.numel(), 0.0f);
        for (const auto& entry : group.entries())
            for (std::size_t i = 0; i < entry.spec.shape.numel(); ++i, ++k)
                blocks.back()[entry.offset + i] =
                    static_cast<float>(std::sin(0.37 * double(k)) * std::pow(10.0, double(k % 7) - 3.0));
    }
    return blocks;
}

// A checkpoint directory as strata-llama writes one: the model files, training state, tokenizer.
fs::path make_checkpoint(const fs::path& dir, const std::vector<std::vector<float>>& blocks) {
    const auto model = llama::make_llama_model<cpu_backend>(small);
    fs::create_directories(dir);
    llama::write_model_files(model, blocks, dir);
    for (const char* name : {"optimizer.safetensors", "trainer_state.json", "tokenizer.json", "generation_config.json"})
        std::ofstream(dir / name) << "{\"file\": \"" << name << "\"}\n";
    return dir;
}

template <class Round>
std::vector<std::vector<float>> rounded(std::vector<std::vector<float>> blocks, Round round) {
    for (auto& block : blocks)
        for (float& x : block) x = round(x);
    return blocks;
}

}  // namespace

TEST_CASE("llama export: float32 loads back bitwise; bfloat16 and float16 as the values rounded to nearest even") {
    const fs::path root = scratch("export");
    const auto model = llama::make_llama_model<cpu_backend>(small);
    const auto blocks = varied_blocks(model);
    const fs::path ckpt = make_checkpoint(root / "ckpt", blocks);
    struct dtype_case {
        llama::weight_dtype dtype;
        const char* name;
        safetensors_dtype stored;
        std::vector<std::vector<float>> want;
    };
    const std::vector<dtype_case> cases{
        {llama::weight_dtype::float32, "float32", safetensors_dtype::f32, blocks},
        {llama::weight_dtype::bfloat16, "bfloat16", safetensors_dtype::bf16,
         rounded(blocks, [](float x) { return bf16_to_float(float_to_bf16(x)); })},
        {llama::weight_dtype::float16, "float16", safetensors_dtype::f16,
         rounded(blocks, [](float x) { return f16_to_float(float_to_f16(x)); })}};
    for (const auto& c : cases) {
        INFO(std::string(c.name));
        const fs::path out = root / c.name;
        llama::export_llama_directory(ckpt, out, c.dtype);
        const auto loaded = llama::load_llama_files(out);
        CHECK(loaded.config == small);
        REQUIRE(loaded.blocks.size() == c.want.size());
        for (std::size_t g = 0; g < c.want.size(); ++g) CHECK(loaded.blocks[g] == c.want[g]);  // exact
        const auto file = safetensors_file::open(out / "model.safetensors");
        for (const auto& name : file.names()) CHECK(file.info(name).dtype == c.stored);
        CHECK(read_json_file(out / "config.json").at("torch_dtype") == c.name);
        CHECK(fs::exists(out / "tokenizer.json"));
        CHECK(fs::exists(out / "generation_config.json"));
        CHECK_FALSE(fs::exists(out / "optimizer.safetensors"));
        CHECK_FALSE(fs::exists(out / "trainer_state.json"));
    }
    if (!cases.empty()) {  // the bfloat16 case really rounds (the weights are not all bfloat16 values)
        std::size_t changed = 0;
        for (std::size_t g = 0; g < blocks.size(); ++g)
            for (std::size_t i = 0; i < blocks[g].size(); ++i) changed += blocks[g][i] != cases[1].want[g][i];
        CHECK(changed > 0);
    }
    fs::remove_all(root);
}

TEST_CASE("llama load: a sharded checkpoint (index + shards) of mixed F32 / BF16 tensors loads exactly; export reads it") {
    const fs::path root = scratch("sharded");
    const auto model = llama::make_llama_model<cpu_backend>(small);
    const auto blocks = varied_blocks(model);
    const fs::path ckpt = make_checkpoint(root / "ckpt", blocks);
    // the hub's layout: model-0000N-of-00002.safetensors listed by model.safetensors.index.json;
    // the first shard in bfloat16, the second in float32
    const auto whole = safetensors_file::open(ckpt / "model.safetensors");
    const fs::path hub = root / "hub";
    fs::create_directories(hub);
    fs::copy_file(ckpt / "config.json", hub / "config.json");
    safetensors_writer shard[2];
    nlohmann::json map = nlohmann::json::object();
    const auto names = whole.names();
    for (std::size_t i = 0; i < names.size(); ++i) {
        const int k = i < names.size() / 2 ? 0 : 1;
        const auto values = whole.get<float>(names[i]);
        const auto& shape = whole.info(names[i]).shape;
        if (k == 0) {
            std::vector<std::uint16_t> bits(values.size());
            for (std::size_t j = 0; j < values.size(); ++j) bits[j] = float_to_bf16(values[j]);
            shard[0].add(names[i], safetensors_dtype::bf16, shape, std::as_bytes(std::span<const std::uint16_t>(bits)));
        } else {
            shard[1].add(names[i], shape, std::vector<float>(values.begin(), values.end()));
        }
        map[names[i]] = "model-0000" + std::to_string(k + 1) + "-of-00002.safetensors";
    }
    shard[0].write(hub / "model-00001-of-00002.safetensors");
    shard[1].write(hub / "model-00002-of-00002.safetensors");
    write_json_file(hub / "model.safetensors.index.json", nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}});
    // what the shards hold, in the model's layout: the first shard's tensors rounded to bfloat16
    const auto loaded = llama::load_llama_files(hub);
    const auto float32_weights = llama::load_llama_files(ckpt);  // the unsharded float32 file
    std::size_t exact = 0, rounded_count = 0;
    for (std::size_t g = 0; g < blocks.size(); ++g)
        for (std::size_t i = 0; i < blocks[g].size(); ++i) {
            const float x = float32_weights.blocks[g][i], got = loaded.blocks[g][i];
            exact += got == x;
            rounded_count += got != x && got == bf16_to_float(float_to_bf16(x));
            CHECK((got == x || got == bf16_to_float(float_to_bf16(x))));
        }
    CHECK(exact > 0);
    CHECK(rounded_count > 0);
    llama::export_llama_directory(hub, root / "export", llama::weight_dtype::float32);
    CHECK(llama::load_llama_files(root / "export").blocks == loaded.blocks);
    fs::remove_all(root);
}

TEST_CASE("llama export: refuses a non-empty target, the checkpoint itself and a directory inside it; leaves nothing") {
    const fs::path root = scratch("export-refuse");
    const auto model = llama::make_llama_model<cpu_backend>(small);
    const fs::path ckpt = make_checkpoint(root / "ckpt", varied_blocks(model));
    fs::create_directories(root / "full");
    std::ofstream(root / "full" / "keep.txt") << "mine\n";
    CHECK_THROWS_WITH_AS(llama::export_llama_directory(ckpt, root / "full", llama::weight_dtype::float32),
                         doctest::Contains("not an empty directory"), error);
    CHECK(fs::exists(root / "full" / "keep.txt"));
    CHECK_THROWS_WITH_AS(llama::export_llama_directory(ckpt, ckpt, llama::weight_dtype::bfloat16),
                         doctest::Contains("is the checkpoint"), error);
    CHECK_THROWS_WITH_AS(llama::export_llama_directory(ckpt, ckpt / "export", llama::weight_dtype::bfloat16),
                         doctest::Contains("inside it"), error);
    CHECK_FALSE(fs::exists(ckpt / "export"));
    // an empty directory is taken; a failing export (a checkpoint without weights) leaves nothing
    fs::create_directories(root / "empty");
    llama::export_llama_directory(ckpt, root / "empty", llama::weight_dtype::float16);
    CHECK(fs::exists(root / "empty" / "model.safetensors"));
    fs::remove(ckpt / "model.safetensors");
    CHECK_THROWS_AS(llama::export_llama_directory(ckpt, root / "none", llama::weight_dtype::float32), error);
    std::size_t entries = 0;
    for (const auto& e : fs::directory_iterator(root)) entries += e.path().filename() != "ckpt" && e.path().filename() != "full" &&
                                                                   e.path().filename() != "empty";
    CHECK(entries == 0);  // no "none", no temporary directory
    fs::remove_all(root);
}

TEST_CASE("llama score: the logits are the model's forward logits bitwise, the loss the model's mean next-token loss") {
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    const auto blocks = varied_blocks(llama::make_llama_model<cpu_backend>(small));
    // modest weights: a loss of a few nats, not of the varied magnitudes' thousands
    const auto weights = rounded(blocks, [](float x) { return x > 1 || x < -1 ? x * 1e-3f : x; });
    const std::vector<token_id> ids{3, 17, 0, 36, 5, 5, 21, 9, 30};
    const std::size_t T = ids.size(), V = small.vocab;
    const auto model = llama::make_scoring_model<cpu_backend>(small, T);
    generator<llama::llama_model<cpu_backend>> gen(backend, model, weights);
    const auto scores = llama::score_tokens(gen, ids, V);

    data::batch b{{ids.begin(), ids.end()}, {ids.begin() + 1, ids.end()}, {}};
    b.targets.push_back(-100);  // the last position predicts nothing
    const auto want = llama_fixture::forward_logits(backend, model, weights, b, 1, T);
    REQUIRE(scores.logits.size() == T * V);
    CHECK(scores.logits == want);  // bitwise
    // the last row is what the uncached forward reads (sampling reads it with the KV cache)
    CHECK(gen.logits_uncached(ids) == std::vector<float>(want.end() - long(V), want.end()));

    using llama_trainer = tiered_trainer<float, cpu_backend, llama::llama_model<cpu_backend>>;
    train_options o{.batch = 1, .seq = T, .accum = 1};
    llama_trainer t(backend, model, o);
    for (std::size_t g = 0; g < weights.size(); ++g) t.upload(llama_trainer::state_kind::params, g, weights[g]);
    const double model_loss = t.evaluate(std::vector<data::batch>{b});
    CHECK(std::abs(scores.loss - model_loss) < 1e-6 * model_loss);  // float kernels vs the host's double sum
    MESSAGE("score loss ", scores.loss, ", the trainer's ", model_loss);

    const fs::path file = scratch("score") += ".safetensors";
    llama::write_scores(file, scores);
    const auto read = safetensors_file::open(file);
    const auto read_ids = read.get<std::int32_t>("input_ids", {T});
    CHECK(std::vector<std::int32_t>(read_ids.begin(), read_ids.end()) == std::vector<std::int32_t>(ids.begin(), ids.end()));
    const auto read_logits = read.get<float>("logits", {T, V});
    CHECK(std::vector<float>(read_logits.begin(), read_logits.end()) == want);
    CHECK(read.get<double>("loss", {1})[0] == scores.loss);
    fs::remove(file);

    CHECK_THROWS_WITH_AS(llama::score_tokens(gen, std::vector<token_id>{4}, V), doctest::Contains("at least 2"), error);
}

}  // namespace llama_export_score_test
