// model_files<Model>: a model's checkpoint files are the model's own. A model defined here, with
// files of its own (one raw file of its weights, under a name its model_files object holds), is
// saved, resumed and trained through save_checkpoint, load_checkpoint and run_training, which
// name no model: its file is what the checkpoint holds (no GPT-2 files), its bytes are what the
// space check counts, and a run stopped and resumed through it equals the run never stopped.
#include "io/scratch_dir.hpp"  // test::scratch_dir

#include <strata/data/loader.hpp>         // data::make_train_loader
#include <strata/io/json_file.hpp>        // read_json_file
#include <strata/model/gpt.hpp>           // gpt_model
#include <strata/model/model_files.hpp>   // model_files, WeightBlocks, for_each_weight_block
#include <strata/nn/cpu_ops.hpp>          // ops<cpu_backend>
#include <strata/strata.hpp>              // cpu_backend
#include <strata/train/checkpoint.hpp>    // save_checkpoint, load_checkpoint, download_blocks
#include <strata/train/run.hpp>           // run_training
#include <strata/train/tiered_trainer.hpp>  // tiered_trainer

#include <doctest/doctest.h>

#include <cstdint>     // std::uint64_t
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ofstream, std::ifstream
#include <iterator>    // std::istreambuf_iterator
#include <span>        // std::span
#include <sstream>     // std::ostringstream
#include <string>      // std::string
#include <vector>      // std::vector

namespace model_files_test {  // this file's names: an area's files compile as one unit (unity build)

// The GPT under a type of its own, so that its files can be its own.
struct raw_gpt : strata::gpt_model<float, strata::cpu_backend> {
    using strata::gpt_model<float, strata::cpu_backend>::gpt_model;
};
// ... and one that has none.
struct unfiled_gpt : strata::gpt_model<float, strata::cpu_backend> {
    using strata::gpt_model<float, strata::cpu_backend>::gpt_model;
};

}  // namespace model_files_test

// raw_gpt's files: every weight block, in group order, as raw floats in one file named `file`.
template <>
struct strata::model_files<model_files_test::raw_gpt> {
    std::string file = "weights.raw";

    std::uint64_t bytes(const model_files_test::raw_gpt& model) const {
        std::uint64_t n = 0;
        for (const auto& g : model.groups()) n += g.numel() * sizeof(float);
        return n;
    }
    template <WeightBlocks<float> Weights>
    void write(const model_files_test::raw_gpt& model, Weights& weights, const std::filesystem::path& dir) const {
        std::ofstream out(dir / file, std::ios::binary);
        for_each_weight_block(model, weights, [&](std::size_t, std::span<const float> block) {
            out.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(block.size_bytes()));
        });
    }
    template <WeightBlocks<float> Weights>
    void read(const model_files_test::raw_gpt& model, Weights& weights, const std::filesystem::path& dir) const {
        std::ifstream in(dir / file, std::ios::binary);
        for (std::size_t g = 0; g < model.group_count(); ++g) {
            std::vector<float> block(model.groups()[g].numel());
            in.read(reinterpret_cast<char*>(block.data()), static_cast<std::streamsize>(block.size() * sizeof(float)));
            REQUIRE(in.good());
            weights.upload(g, std::span<const float>(block));
        }
    }
};

namespace model_files_test {

using namespace strata;
namespace fs = std::filesystem;

static_assert(HasModelFiles<raw_gpt>);
static_assert(HasModelFiles<gpt_model<float, cpu_backend>>);
static_assert(!HasModelFiles<unfiled_gpt>);  // save_checkpoint refuses it with a static_assert

const gpt_config config{.vocab_size = 23, .max_seq = 8, .n_layer = 2, .n_head = 2, .n_embd = 8};
using raw_trainer = tiered_trainer<float, cpu_backend, raw_gpt>;

train_options options_of(long steps) {
    train_options o{.batch = 2, .seq = 8, .accum = 2};
    o.schedule = {.kind = lr_kind::cosine, .lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 1, .total_steps = steps};
    return o;
}

data::batch_loader train_loader() {
    std::vector<token_id> stream;
    for (int i = 0; i < 1500; ++i) stream.push_back(static_cast<token_id>((i * 7 + i / 13) % 23));
    return data::make_train_loader(data::token_dataset::packed(stream, 8), 2, 11);
}

TEST_CASE("a model's own files: save_checkpoint and load_checkpoint write and read them through model_files") {
    test::scratch_dir dir;
    cpu_backend backend(tier_options{.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    const raw_gpt model(config);
    raw_trainer t(backend, model, options_of(4));
    t.initialize(3);
    auto loader = train_loader();
    (void)t.step(std::vector<data::batch>{loader.next(), loader.next()});
    const model_files<raw_gpt> files{.file = "mine.raw"};
    const fs::path saved = save_checkpoint(t, dir / "out", {{"data_cursor", loader.cursor()}}, {},
                                           checkpoint_contents::full, files);
    CHECK(fs::file_size(saved / "mine.raw") == files.bytes(model));
    CHECK_FALSE(fs::exists(saved / "model.safetensors"));
    CHECK_FALSE(fs::exists(saved / "config.json"));
    CHECK(read_json_file(saved / "trainer_state.json").at("files").contains("mine.raw"));

    raw_trainer resumed(backend, model, options_of(4));
    resumed.initialize(99);  // other weights: the checkpoint's must replace them
    (void)load_checkpoint(resumed, saved, files);
    const auto want = download_blocks(t, raw_trainer::state_kind::params);
    const auto got = download_blocks(resumed, raw_trainer::state_kind::params);
    CHECK(got == want);
    CHECK(resumed.step_count() == 1);
}

TEST_CASE("run_training saves and resumes a model through its model_files, bitwise as a run never stopped") {
    test::scratch_dir dir;
    cpu_backend backend(tier_options{.device_bytes = 64 << 20, .host_bytes = 64 << 20});
    const raw_gpt model(config);
    const model_files<raw_gpt> files{.file = "mine.raw"};
    std::ostringstream log;

    raw_trainer whole(backend, model, options_of(4));
    whole.initialize(5);
    auto whole_loader = train_loader();
    (void)run_training(whole, whole_loader, nullptr, {.out = dir / "whole", .log = &log}, {}, files);

    raw_trainer first(backend, model, options_of(4));
    first.initialize(5);
    auto first_loader = train_loader();
    run_hooks hooks;
    checkpoint_plan plan;
    hooks.check_checkpoints = [&](const checkpoint_plan& p) { plan = p; };
    (void)run_training(first, first_loader, nullptr, {.out = dir / "half", .stop_at = 2, .log = &log}, hooks, files);
    const fs::path half = dir / "half" / checkpoint_dir_name(2);
    REQUIRE(fs::exists(half / "mine.raw"));
    CHECK_FALSE(fs::exists(half / "model.safetensors"));
    CHECK(plan.bytes_each > files.bytes(model));  // the space check counted the model's own file

    raw_trainer second(backend, model, options_of(4));
    second.initialize(77);
    auto second_loader = train_loader();
    (void)run_training(second, second_loader, nullptr, {.out = dir / "half", .resume = half, .log = &log}, {}, files);
    CHECK(second.step_count() == 4);
    CHECK(download_blocks(second, raw_trainer::state_kind::params) == download_blocks(whole, raw_trainer::state_kind::params));
    std::ifstream a(dir / "whole" / checkpoint_dir_name(4) / "mine.raw", std::ios::binary);
    std::ifstream b(dir / "half" / checkpoint_dir_name(4) / "mine.raw", std::ios::binary);
    CHECK(std::string(std::istreambuf_iterator<char>(a), {}) == std::string(std::istreambuf_iterator<char>(b), {}));
}

}  // namespace model_files_test
