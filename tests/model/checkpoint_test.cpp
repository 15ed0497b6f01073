// Checkpoints: HF names and layouts, atomic step directories, and a resume that continues
// bitwise like the uninterrupted run (weights, AdamW moments, step, data cursor), on every backend.
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, make_backend

#include <strata/data/loader.hpp>
#include <strata/nn/cpu_ops.hpp>
#include <strata/strata.hpp>
#include <strata/train/checkpoint.hpp>

#include <doctest/doctest.h>

#include <filesystem>
#include <vector>

using namespace strata;
namespace fs = std::filesystem;

namespace {

struct scratch {
    fs::path dir = fs::temp_directory_path() / ("strata-test-ckpt-" + std::to_string(::getpid()));
    scratch() { fs::remove_all(dir); }
    ~scratch() { fs::remove_all(dir); }
};

data::token_dataset toy_data(std::size_t T) {
    std::vector<token_id> stream;
    for (int i = 0; i < 3000; ++i) stream.push_back(static_cast<token_id>((i * 7 + i / 13) % 23));
    return data::token_dataset::packed(stream, T);
}

const gpt_config config{.vocab_size = 23, .max_seq = 8, .n_layer = 2, .n_head = 2, .n_embd = 8};
const train_options options{.batch = 2, .seq = 8, .accum = 2, .clip = 0.5};

template <class Trainer>
std::vector<double> run_steps(Trainer& t, data::batch_loader& loader, int n) {
    std::vector<double> losses;
    for (int i = 0; i < n; ++i) {
        std::vector<data::batch> micro{loader.next(), loader.next()};
        losses.push_back(t.step(micro).loss);
    }
    return losses;
}

}  // namespace

TEST_CASE_TEMPLATE("resuming from a checkpoint gives bitwise the same losses as an uninterrupted run", B,
                   STRATA_TEST_BACKENDS) {
    scratch s;
    auto made = test::make_backend<B>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    if (!made) return;
    B& backend = *made;
    gpt_model<float, B> model(config);

    trainer<float, B> straight(backend, model, options);
    straight.initialize(5);
    auto loader = data::make_train_loader(toy_data(8), 2, 11);
    const auto expected = run_steps(straight, loader, 8);

    fs::path saved;
    {
        trainer<float, B> first(backend, model, options);
        first.initialize(5);
        auto l1 = data::make_train_loader(toy_data(8), 2, 11);
        const auto head = run_steps(first, l1, 3);
        for (int i = 0; i < 3; ++i) CHECK(head[i] == expected[i]);
        saved = save_checkpoint(first, s.dir, {{"data_cursor", l1.cursor()}});
    }
    CHECK(saved.filename() == "step-000003");
    CHECK(fs::exists(saved / "model.safetensors"));
    CHECK(fs::exists(saved / "config.json"));
    CHECK(fs::exists(saved / "optimizer.safetensors"));

    trainer<float, B> resumed(backend, model, options);
    resumed.initialize(999);  // different weights: the checkpoint must overwrite everything
    auto state = load_checkpoint(resumed, saved);
    CHECK(resumed.step_count() == 3);
    auto l2 = data::make_train_loader(toy_data(8), 2, 11);
    l2.restore(state.at("data_cursor").template get<data::loader_cursor>());
    const auto tail = run_steps(resumed, l2, 5);
    for (int i = 0; i < 5; ++i) CHECK(tail[i] == expected[3 + i]);  // bitwise, not approximately
}

TEST_CASE("model.safetensors uses Hugging Face GPT-2 names and Conv1D layouts") {
    scratch s;
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    gpt_model<float, cpu_backend> model(config);
    trainer<float, cpu_backend> t(backend, model, options);
    t.initialize(2);
    const auto dir = save_checkpoint(t, s.dir, {});
    const auto f = safetensors_file::open(dir / "model.safetensors");
    const std::size_t C = config.n_embd;
    CHECK(f.info("transformer.wte.weight").shape == std::vector<std::size_t>{config.vocab_size, C});
    CHECK(f.info("transformer.wpe.weight").shape == std::vector<std::size_t>{config.max_seq, C});
    CHECK(f.info("transformer.h.1.attn.c_attn.weight").shape == std::vector<std::size_t>{C, 3 * C});
    CHECK(f.info("transformer.h.0.mlp.c_proj.weight").shape == std::vector<std::size_t>{4 * C, C});
    CHECK(f.info("transformer.ln_f.bias").shape == std::vector<std::size_t>{C});
    CHECK(f.size() == 2 + 12 * config.n_layer + 2);
    const auto hf = read_json_file(dir / "config.json");
    CHECK(hf["n_embd"] == C);
    CHECK(hf["model_type"] == "gpt2");

    // the weights load back exactly, and a missing tensor is named
    auto loaded = load_model_files<float>(dir);
    const auto blocks = download_blocks(t, trainer<float, cpu_backend>::state_kind::params);
    CHECK(loaded.blocks == blocks);
}

TEST_CASE("a corrupt or mismatched checkpoint is refused with its name") {
    scratch s;
    fs::create_directories(s.dir / "empty");
    CHECK_THROWS_WITH_AS(load_model_files<float>(s.dir / "empty"), doctest::Contains("is not a GPT-2 checkpoint"),
                         strata::error);
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    gpt_model<float, cpu_backend> model(config);
    trainer<float, cpu_backend> t(backend, model, options);
    t.initialize(2);
    const auto dir = save_checkpoint(t, s.dir, {});
    gpt_config other = config;
    other.n_layer = 3;
    write_json_file(dir / "config.json", other.to_hf_json());
    CHECK_THROWS_WITH_AS(load_model_files<float>(dir), doctest::Contains("transformer.h.2.ln_1.weight"), strata::error);
}

// Found by fuzz/checkpoint_json.cpp: n_inner of another type threw nlohmann's type_error.
TEST_CASE("config.json: an n_inner that is not null or 4 * n_embd is a strata::error") {
    auto j = config.to_hf_json();
    j["n_inner"] = "x";
    CHECK_THROWS_WITH_AS(gpt_config::from_hf_json(j), doctest::Contains("n_inner \"x\" is not supported"), error);
    j["n_inner"] = 4 * config.n_embd;
    CHECK(gpt_config::from_hf_json(j).n_embd == config.n_embd);
    j["n_inner"] = -32;
    CHECK_THROWS_AS(gpt_config::from_hf_json(j), error);
}
