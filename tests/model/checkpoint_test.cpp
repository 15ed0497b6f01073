// Checkpoints: HF names and layouts, atomic step directories, and a resume that continues
// bitwise like the uninterrupted run (weights, AdamW moments, step, data cursor), on every backend.
#include "support/backends.hpp"  // STRATA_TEST_BACKENDS, make_backend

#include <strata/data/loader.hpp>
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model
#include <strata/nn/cpu_ops.hpp>
#include <strata/strata.hpp>
#include <strata/train/checkpoint.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <vector>

namespace checkpoint_test {  // this file's names: an area's files compile as one unit (unity build)

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

    gpt_trainer<float, B> straight(backend, model, options);
    straight.initialize(5);
    auto loader = data::make_train_loader(toy_data(8), 2, 11);
    const auto expected = run_steps(straight, loader, 8);

    fs::path saved;
    {
        gpt_trainer<float, B> first(backend, model, options);
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

    gpt_trainer<float, B> resumed(backend, model, options);
    resumed.initialize(999);  // different weights: the checkpoint must overwrite everything
    auto state = load_checkpoint(resumed, saved);
    CHECK(resumed.step_count() == 3);
    auto l2 = data::make_train_loader(toy_data(8), 2, 11);
    l2.restore(state.at("data_cursor").template get<data::loader_cursor>());
    const auto tail = run_steps(resumed, l2, 5);
    for (int i = 0; i < 5; ++i) CHECK(tail[i] == expected[3 + i]);  // bitwise, not approximately
}

TEST_CASE_TEMPLATE("checkpoint_bytes is what a save writes, computed before it, for full and weights-only checkpoints "
                   "of AdamW and of SGD", B, STRATA_TEST_BACKENDS) {
    scratch s;
    auto made = test::make_backend<B>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    if (!made) return;
    gpt_model<float, B> model(config);
    const nlohmann::json state{{"data_cursor", 17}};
    const std::uint64_t weights_data = declared_model_tensors(model).data_size();
    CHECK(weights_data == 4 * config.parameter_count());
    for (const any_optimizer optimizer :
         {any_optimizer(adamw_optimizer()), any_optimizer(sgd_optimizer()), any_optimizer(adafactor_optimizer())}) {
        train_options o = options;
        o.optimizer = optimizer;
        gpt_trainer<float, B> t(*made, model, o);
        t.initialize(3);
        const std::string name(t.optimizer().name());
        CAPTURE(name);
        const auto states = t.optimizer().state_names();
        CHECK(states.size() == (optimizer.name() == "sgd" ? 1u : optimizer.name() == "adamw" ? 2u : 3u));  // SGD: momentum; AdamW: m, v
        for (const auto contents : {checkpoint_contents::full, checkpoint_contents::weights}) {
            const fs::path dir = save_checkpoint(t, s.dir / name / (contents == checkpoint_contents::full ? "full" : "weights"),
                                                 state, {}, contents);
            const auto size_of = [&](const char* file) { return fs::exists(dir / file) ? fs::file_size(dir / file) : 0; };
            CHECK(size_of("model.safetensors") + size_of("config.json") == model_files_bytes(model));
            const std::uint64_t state_bytes = size_of("trainer_state.json");
            std::uint64_t on_disk = 0;
            for (const auto& e : fs::directory_iterator(dir)) on_disk += e.file_size();
            CHECK(on_disk == checkpoint_bytes(model, t.optimizer(), contents, model_files_bytes(model), state_bytes));
            if (contents == checkpoint_contents::full) {
                CHECK(size_of("optimizer.safetensors") == optimizer_file_bytes(model, t.optimizer()));
                // every parameter trains: each state tensor of AdamW and SGD is as large as the weights' data;
                // Adafactor's factored state far smaller
                const std::uint64_t data = declared_optimizer_tensors(model, t.optimizer()).data_size();
                if (name == "adafactor")
                    CHECK(data < weights_data / 2);
                else
                    CHECK(data == states.size() * weights_data);
            } else {
                CHECK_FALSE(fs::exists(dir / "optimizer.safetensors"));
            }
            CHECK(moments_saved(read_json_file(dir / "trainer_state.json")) == (contents == checkpoint_contents::full));
        }
    }
}

TEST_CASE_TEMPLATE("a weights-only checkpoint resumes with the weights and step, and AdamW's moments at zero", B,
                   STRATA_TEST_BACKENDS) {
    scratch s;
    auto made = test::make_backend<B>({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    if (!made) return;
    gpt_model<float, B> model(config);
    using kind = typename gpt_trainer<float, B>::state_kind;
    gpt_trainer<float, B> first(*made, model, options);
    first.initialize(5);
    auto loader = data::make_train_loader(toy_data(8), 2, 11);
    run_steps(first, loader, 3);
    const fs::path saved = save_checkpoint(first, s.dir, {{"data_cursor", loader.cursor()}}, {}, checkpoint_contents::weights);

    gpt_trainer<float, B> resumed(*made, model, options);
    resumed.initialize(999);
    run_steps(resumed, loader, 1);  // moments that are not zero, which the resume must clear
    const auto state = load_checkpoint(resumed, saved);
    CHECK_FALSE(moments_saved(state));
    CHECK(resumed.step_count() == 3);
    CHECK(download_blocks(resumed, kind::params) == download_blocks(first, kind::params));
    std::size_t nonzero = 0;
    for (const auto k : {kind::adam_m, kind::adam_v})
        for (const auto& block : download_blocks(resumed, k))
            for (float x : block) nonzero += x != 0.0f;
    CHECK(nonzero == 0);
    const auto losses = run_steps(resumed, loader, 2);
    CHECK(std::isfinite(losses[0]));
    CHECK(std::isfinite(losses[1]));

    // without the field, a missing optimizer file is still an error (a damaged full checkpoint)
    auto full_state = read_json_file(saved / "trainer_state.json");
    full_state.erase("moments_saved");
    write_json_file(saved / "trainer_state.json", full_state);
    CHECK_THROWS_WITH_AS(load_checkpoint(resumed, saved), doctest::Contains("optimizer.safetensors is missing"),
                         strata::error);
}

TEST_CASE("a save hands the trainer's state to the files group by group through one buffer") {
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    gpt_model<float, cpu_backend> model(config);
    gpt_trainer<float, cpu_backend> t(backend, model, options);
    t.initialize(2);
    using kind = gpt_trainer<float, cpu_backend>::state_kind;
    for (const auto k : {kind::params, kind::adam_m}) {
        const auto whole = download_blocks(t, k);
        std::vector<std::size_t> seen;
        std::set<const float*> buffers;
        for_each_block(t, k, [&](std::size_t g, std::span<const float> block) {
            seen.push_back(g);
            buffers.insert(block.data());
            CHECK(std::equal(block.begin(), block.end(), whole[g].begin(), whole[g].end()));
        });
        CHECK(seen == std::vector<std::size_t>{0, 1, 2, 3});
        CHECK(buffers.size() == 1);  // one buffer, reused: never the whole state at once
    }
    CHECK(largest_block(model, true) == model.groups()[1].numel());  // a transformer block, the largest group here
}

TEST_CASE("check_checkpoint_fits: copies x bytes against the free bytes, refused with both numbers") {
    CHECK_NOTHROW(check_checkpoint_fits(1000, 3000, 3, "/out"));  // exactly fits
    CHECK_NOTHROW(check_checkpoint_fits(1000, 0, 0, "/out"));     // nothing saved: nothing needed
    CHECK_THROWS_WITH_AS(check_checkpoint_fits(1000, 2999, 3, "/out"),
                         doctest::Contains("3 checkpoints of 1000 B each need 2.93 KiB (3000 B), and 2.93 KiB (2999 B) are free"),
                         strata::error);
    CHECK_THROWS_WITH_AS(check_checkpoint_fits(80ull << 30, 10ull << 30, 1, "/small"),
                         doctest::Contains("will not fit in '/small': a checkpoint of 80.00 GiB"), strata::error);
    CHECK_THROWS_WITH_AS(check_checkpoint_fits(1ull << 62, ~0ull, 8, "/out"), doctest::Contains("more than 2^64 bytes"),
                         strata::error);
    try {
        check_checkpoint_fits(2, 1, 1, "/out", "pass --save none");
        FAIL("not refused");
    } catch (const strata::error& e) {
        CHECK(std::string(e.hint()) == "pass --save none");
    }
}

TEST_CASE("model.safetensors uses Hugging Face GPT-2 names and Conv1D layouts") {
    scratch s;
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    gpt_model<float, cpu_backend> model(config);
    gpt_trainer<float, cpu_backend> t(backend, model, options);
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
    const auto blocks = download_blocks(t, gpt_trainer<float, cpu_backend>::state_kind::params);
    CHECK(loaded.blocks == blocks);
}

TEST_CASE("a corrupt or mismatched checkpoint is refused with its name") {
    scratch s;
    fs::create_directories(s.dir / "empty");
    CHECK_THROWS_WITH_AS(load_model_files<float>(s.dir / "empty"), doctest::Contains("is not a GPT-2 checkpoint"),
                         strata::error);
    cpu_backend backend({.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    gpt_model<float, cpu_backend> model(config);
    gpt_trainer<float, cpu_backend> t(backend, model, options);
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

}  // namespace checkpoint_test
