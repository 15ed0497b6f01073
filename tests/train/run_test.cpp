// run_training: the hooks are called at the right steps; checkpoints, OUT/latest, the metrics and
// the loss plot are written; a run stopped (stop_at, or stop_requested) and resumed continues
// bitwise like one never stopped; a non-finite or diverged loss ends the run with an error and
// leaves the last checkpoint as it was.
#include "support/placements.hpp"  // test::streamed_trainer
#include "io/scratch_dir.hpp"  // test::scratch_dir

#include <strata/data/loader.hpp>             // data::make_train_loader, make_validation_loader
#include <strata/io/json_file.hpp>            // read_json_file
#include <strata/model/gpt.hpp>               // gpt_model
#include <strata/nn/cpu_ops.hpp>              // ops<cpu_backend>
#include <strata/report/metrics.hpp>          // read_metrics
#include <strata/strata.hpp>                  // cpu_backend
#include <strata/train/checkpoint.hpp>        // download_blocks, load_checkpoint
#include <strata/train/run.hpp>               // run_training
#include <strata/train.hpp>  // gpt_trainer: tiered_trainer of gpt_model

#include <doctest/doctest.h>

#include <cmath>       // std::isfinite
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ifstream
#include <functional>  // std::function
#include <iterator>    // std::istreambuf_iterator
#include <limits>      // std::numeric_limits
#include <sstream>     // std::ostringstream
#include <string>      // std::string
#include <vector>      // std::vector

namespace run_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;
namespace fs = std::filesystem;

namespace {

const gpt_config config{.vocab_size = 23, .max_seq = 8, .n_layer = 2, .n_head = 2, .n_embd = 8};
const tier_options tiers{.device_bytes = 64 << 20, .host_bytes = 64 << 20};

train_options options_of(long steps) {
    train_options o{.batch = 2, .seq = 8, .accum = 2, .clip = 0.5};
    o.schedule = {.kind = lr_kind::cosine, .lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 1, .total_steps = steps};
    return o;
}

data::token_dataset toy_data(int offset) {
    std::vector<token_id> stream;
    for (int i = offset; i < offset + 1500; ++i) stream.push_back(static_cast<token_id>((i * 7 + i / 13) % 23));
    return data::token_dataset::packed(stream, 8);
}

using resident = gpt_trainer<float, cpu_backend>;

// A resident trainer whose reported losses a test edits: run_training's own refusals without
// having to make a real run diverge.
struct edited_losses : resident {
    using resident::resident;
    std::function<void(step_result&)> edit;
    step_result step(std::span<const data::batch> micro) {
        step_result r = resident::step(micro);
        if (edit) edit(r);
        return r;
    }
};

// A run's loaders, from the same seeds every time.
struct loaders {
    data::batch_loader train = data::make_train_loader(toy_data(0), 2, 11);
    data::batch_loader validation = data::make_validation_loader(toy_data(5000), 2, 0);
};

std::string file_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The steps of the metrics records that are step records (not val_loss ones).
std::vector<long> step_records(const fs::path& metrics) {
    std::vector<long> steps;
    for (const auto& r : read_metrics(metrics))
        if (r.contains("loss")) steps.push_back(r.at("step").get<long>());
    return steps;
}

bool has_temporaries(const fs::path& dir) {
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string().find(".tmp") != std::string::npos) return true;
    return false;
}

// What every case starts from: a scratch directory, the CPU backend, the model, a log to read.
struct setup {
    test::scratch_dir dir;
    cpu_backend backend{tiers};
    gpt_model<float, cpu_backend> model{config};
    std::ostringstream log;
};

}  // namespace

TEST_CASE("run_training calls its hooks at the right steps and writes checkpoints, latest, metrics and the plot") {
    setup s;
    resident t(s.backend, s.model, options_of(6));
    t.initialize(5);
    loaders data;
    const run_options o{.out = s.dir / "run", .eval_every = 2, .save_every = 3, .metrics = s.dir / "metrics.jsonl",
                        .plot_title = "run_test", .log = &s.log};

    std::vector<long> stepped, evaluated, polled;
    std::vector<fs::path> saved;
    checkpoint_plan plan;
    run_hooks hooks;
    hooks.state = [] { return nlohmann::json{{"seed", 5}}; };
    hooks.check_checkpoints = [&](const checkpoint_plan& p) { plan = p; };
    hooks.on_step = [&](const step_result& r, nlohmann::json& record) {
        stepped.push_back(r.step);
        record["extra"] = r.step * 10;
    };
    hooks.on_eval = [&](long step, double val) {
        CHECK(std::isfinite(val));
        evaluated.push_back(step);
    };
    hooks.on_checkpoint = [&](const fs::path& ckpt) {
        CHECK(file_text(o.out / "latest") == ckpt.filename().string() + "\n");  // latest names it already
        saved.push_back(ckpt);
    };
    hooks.stop_requested = [&] {
        polled.push_back(t.step_count());
        return false;
    };
    const run_result r = run_training(t, data.train, &data.validation, o, hooks);

    CHECK(r.step == 6);
    CHECK_FALSE(r.stopped);
    CHECK(stepped == std::vector<long>{1, 2, 3, 4, 5, 6});
    CHECK(evaluated == std::vector<long>{2, 4, 6});
    REQUIRE(saved == std::vector<fs::path>{o.out / "step-000003", o.out / "step-000006"});
    CHECK(r.last_checkpoint == o.out / "step-000006");
    CHECK(file_text(o.out / "latest") == "step-000006\n");
    CHECK(r.loss_plot == o.out / "loss.svg");
    CHECK(file_text(r.loss_plot).find("run_test") != std::string::npos);
    CHECK_FALSE(has_temporaries(o.out));
    CHECK(polled == std::vector<long>{0, 1, 2, 3, 4, 5, 6});  // before step 1, and after each step

    // the plan before step 1: two checkpoints, whose mean size covers what was written
    CHECK(plan.saving);
    CHECK(plan.count == 2);
    std::uint64_t written = 0;
    for (const auto& ckpt : saved)
        for (const auto& e : fs::directory_iterator(ckpt)) written += e.file_size();
    CHECK(written <= static_cast<std::uint64_t>(plan.count) * plan.bytes_each);

    // metrics: a record per step (with the hook's field and the link bytes), a val_loss per evaluation
    const auto records = read_metrics(o.metrics);
    CHECK(records.size() == 6 + 3);
    for (const auto& rec : records) {
        if (!rec.contains("loss")) {
            CHECK(rec.contains("val_loss"));
            continue;
        }
        CHECK(rec.at("extra").get<long>() == 10 * rec.at("step").get<long>());
        for (const char* key : {"lr", "grad_norm", "tokens_per_s", "tokens", "bytes_h2d", "bytes_storage_read"})
            CHECK_MESSAGE(rec.contains(key), key);
    }

    // trainer_state.json: the program's fields, then the loop's
    const auto state = read_json_file(r.last_checkpoint / "trainer_state.json");
    CHECK(state.at("seed") == 5);
    CHECK(state.at("step") == 6);
    CHECK(state.at("loss_curve").at("train").size() == 6);
    CHECK(state.at("loss_curve").at("val").size() == 3);
    CHECK(state.at("data_cursor").get<data::loader_cursor>() == data.train.cursor());
    CHECK(state.at("first_loss").get<double>() == state.at("loss_curve").at("train").at(0).at(1).get<double>());
    CHECK(s.log.str().find("saved " + r.last_checkpoint.string()) != std::string::npos);
}

TEST_CASE("a run stopped at a step and resumed from its checkpoint continues bitwise like one never stopped") {
    setup s;

    // the uninterrupted run
    std::vector<step_result> straight;
    host_blocks<float> straight_weights;
    {
        resident t(s.backend, s.model, options_of(6));
        t.initialize(5);
        loaders data;
        run_hooks hooks;
        hooks.on_step = [&](const step_result& r, nlohmann::json&) { straight.push_back(r); };
        run_training(t, data.train, &data.validation,
                     {.out = s.dir / "straight", .eval_every = 2, .checkpoints = std::nullopt, .log = &s.log}, hooks);
        straight_weights = download_blocks(t, resident::state_kind::params);
    }
    REQUIRE(straight.size() == 6);

    // stopped after step 3 (the schedule stays that of 6 steps)...
    const run_options first{
        .out = s.dir / "run", .stop_at = 3, .eval_every = 2, .metrics = s.dir / "run.jsonl", .log = &s.log};
    std::vector<step_result> resumed;
    run_hooks hooks;
    hooks.on_step = [&](const step_result& r, nlohmann::json&) { resumed.push_back(r); };
    {
        resident t(s.backend, s.model, options_of(6));
        t.initialize(5);
        loaders data;
        const run_result r = run_training(t, data.train, &data.validation, first, hooks);
        CHECK(r.step == 3);
        CHECK_FALSE(r.stopped);  // stop_at is the end of this run, not a stop request
        CHECK(r.last_checkpoint == first.out / "step-000003");
    }
    // ...then resumed by a trainer with other weights and fresh loaders: the checkpoint restores all
    nlohmann::json resumed_state;
    run_hooks resume_hooks = hooks;
    resume_hooks.on_resume = [&](const nlohmann::json& state) { resumed_state = state; };
    resident t(s.backend, s.model, options_of(6));
    t.initialize(999);
    loaders data;
    run_options second = first;
    second.stop_at = 0;
    second.resume = first.out / "step-000003";
    const run_result r = run_training(t, data.train, &data.validation, second, resume_hooks);
    CHECK(r.step == 6);
    CHECK(resumed_state.at("step") == 3);
    CHECK(s.log.str().find("resumed from " + second.resume.string() + " at step 3") != std::string::npos);

    REQUIRE(resumed.size() == 6);
    for (std::size_t i = 0; i < 6; ++i) {  // bitwise, not approximately
        CHECK(resumed[i].step == straight[i].step);
        CHECK(resumed[i].loss == straight[i].loss);
        CHECK(resumed[i].grad_norm == straight[i].grad_norm);
        CHECK(resumed[i].lr == straight[i].lr);
    }
    CHECK(download_blocks(t, resident::state_kind::params) == straight_weights);
    CHECK(step_records(first.metrics) == std::vector<long>{1, 2, 3, 4, 5, 6});  // appended, not replaced
    const auto state = read_json_file(r.last_checkpoint / "trainer_state.json");
    CHECK(state.at("loss_curve").at("train").size() == 6);  // the whole run's curve
    CHECK(state.at("first_loss").get<double>() == straight[0].loss);
    CHECK(fs::exists(first.out / "step-000003"));  // every checkpoint is kept
}

TEST_CASE("the checkpoint plan counts the trainer's optimizer state: an SGD run's checkpoint is planned at its size") {
    setup s;
    train_options o = options_of(2);
    o.optimizer = sgd_optimizer();
    resident t(s.backend, s.model, o);
    t.initialize(5);
    loaders data;
    checkpoint_plan plan;
    run_hooks hooks;
    hooks.check_checkpoints = [&](const checkpoint_plan& p) { plan = p; };
    const run_result r = run_training(t, data.train, nullptr, {.out = s.dir / "run", .log = &s.log}, hooks);
    REQUIRE(plan.count == 1);
    std::uint64_t written = 0;
    for (const auto& e : fs::directory_iterator(r.last_checkpoint)) written += e.file_size();
    CHECK(written <= plan.bytes_each);
    // The plan's only slack is its bound on trainer_state.json's growth (a few hundred bytes);
    // counting AdamW's two state tensors would add a second optimizer file's worth.
    const std::uint64_t momentum_file = optimizer_file_bytes(s.model, sgd_optimizer());
    INFO("planned ", plan.bytes_each, ", written ", written, ", momentum file ", momentum_file);
    CHECK(plan.bytes_each - written < momentum_file / 4);
}

TEST_CASE("stop_requested ends the run after the step it is seen at, with a checkpoint of that step") {
    setup s;
    resident t(s.backend, s.model, options_of(6));
    t.initialize(5);
    loaders data;
    run_hooks hooks;
    hooks.stop_requested = [&] { return t.step_count() >= 2; };
    const run_result r = run_training(t, data.train, nullptr, {.out = s.dir / "run", .log = &s.log}, hooks);
    CHECK(r.step == 2);
    CHECK(r.stopped);
    CHECK(r.last_checkpoint == s.dir / "run" / "step-000002");
    CHECK(file_text(s.dir / "run" / "latest") == "step-000002\n");
}

TEST_CASE("a non-finite loss ends the run with an error, and the last checkpoint stays as it was") {
    setup s;
    const run_options o{.out = s.dir / "run", .save_every = 2, .metrics = s.dir / "run.jsonl", .log = &s.log};
    const fs::path kept = o.out / "step-000002";

    SUBCASE("a trainer that reports it") {
        edited_losses t(s.backend, s.model, options_of(6));
        t.initialize(5);
        t.edit = [](step_result& r) {
            if (r.step == 3) r.loss = std::numeric_limits<double>::quiet_NaN();
        };
        loaders data;
        std::string saved_weights;
        run_hooks hooks;
        hooks.on_checkpoint = [&](const fs::path& ckpt) { saved_weights = file_text(ckpt / "model.safetensors"); };
        CHECK_THROWS_WITH_AS(run_training(t, data.train, nullptr, o, hooks),
                             doctest::Contains("the loss at step 3 is nan: training diverged"), error);
        CHECK(file_text(kept / "model.safetensors") == saved_weights);
        CHECK(step_records(o.metrics) == std::vector<long>{1, 2});
    }
    SUBCASE("strata's trainer, whose weights went bad after a checkpoint") {
        resident t(s.backend, s.model, options_of(6));
        t.initialize(5);
        loaders data;
        host_blocks<float> saved_weights;
        run_hooks hooks;
        hooks.on_checkpoint = [&](const fs::path&) {
            saved_weights = download_blocks(t, resident::state_kind::params);
            std::vector<float> poisoned(s.model.groups()[0].numel(), std::numeric_limits<float>::quiet_NaN());
            t.upload(resident::state_kind::params, 0, poisoned);
        };
        CHECK_THROWS_AS(run_training(t, data.train, nullptr, o, hooks), error);
        CHECK(s.log.str().find("the last checkpoint, intact, is " + kept.string()) != std::string::npos);
        CHECK(step_records(o.metrics) == std::vector<long>{1, 2});
        // the checkpoint holds the weights of step 2, and resumes
        resident fresh(s.backend, s.model, options_of(6));
        fresh.initialize(1);
        load_checkpoint(fresh, kept);
        CHECK(fresh.step_count() == 2);
        CHECK(download_blocks(fresh, resident::state_kind::params) == saved_weights);
    }
    CHECK(file_text(o.out / "latest") == "step-000002\n");
    CHECK(fs::exists(kept / "trainer_state.json"));
    CHECK_FALSE(fs::exists(o.out / "step-000003"));
    CHECK_FALSE(has_temporaries(o.out));
}

TEST_CASE("a loss past the divergence limit is never saved") {
    setup s;
    edited_losses t(s.backend, s.model, options_of(6));
    t.initialize(5);
    double first = 0;
    t.edit = [&](step_result& r) {
        if (r.step == 1) first = r.loss;
        if (r.step == 2) r.loss = 4 * first;  // past 3 x the first loss
    };
    loaders data;
    const run_options o{.out = s.dir / "run", .save_every = 1, .log = &s.log};
    CHECK_THROWS_WITH_AS(run_training(t, data.train, nullptr, o), doctest::Contains("past the divergence limit (3 x"),
                         error);
    CHECK(fs::exists(o.out / "step-000001" / "model.safetensors"));
    CHECK_FALSE(fs::exists(o.out / "step-000002"));
    CHECK(file_text(o.out / "latest") == "step-000001\n");
}

TEST_CASE("a streamed trainer's records carry the bytes it moved and the transfer overlap; --trace keeps steps 2-3") {
    setup s;
    test::streamed_trainer<gpt_trainer<float, cpu_backend>, 2, host_tier> t(s.backend, s.model, options_of(4));
    t.initialize(5);
    loaders data;
    const run_options o{.out = s.dir / "run", .checkpoints = std::nullopt, .metrics = s.dir / "run.jsonl",
                        .trace = s.dir / "trace.json", .transfer_overlap = true, .log = &s.log};
    const run_result r = run_training(t, data.train, nullptr, o);
    CHECK(r.trace_written);
    CHECK(r.last_checkpoint.empty());
    CHECK(file_text(o.trace).find("\"traceEvents\"") != std::string::npos);
    const auto records = read_metrics(o.metrics);
    REQUIRE(records.size() == 4);
    for (const auto& rec : records) {
        CHECK(rec.at("bytes_h2d").get<std::size_t>() > 0);
        CHECK(rec.contains("transfer_hidden_fraction"));
    }
    CHECK(s.log.str().find("checkpoints: none") != std::string::npos);
}

TEST_CASE("run_training refuses options that cannot make a run, before any step") {
    setup s;
    resident t(s.backend, s.model, options_of(4));
    t.initialize(5);
    loaders data;
    CHECK_THROWS_WITH_AS(run_training(t, data.train, nullptr, {.out = s.dir / "run", .stop_at = 5, .log = &s.log}),
                         doctest::Contains("stop_at 5 is outside the run's steps 0..4"), error);
    CHECK_THROWS_WITH_AS(
        run_training(t, data.train, nullptr,
                     {.out = s.dir / "run", .stop_at = 2, .checkpoints = std::nullopt, .log = &s.log}),
        doctest::Contains("without checkpoints"), error);
    CHECK_THROWS_WITH_AS(run_training(t, data.train, nullptr, {.log = &s.log}), doctest::Contains("out is empty"),
                         error);
    CHECK(t.step_count() == 0);
}

TEST_CASE("a side output that fails (metrics on a full disk, a trace whose directory is gone) never costs the training") {
    setup s;
    resident t(s.backend, s.model, options_of(4));
    t.initialize(5);
    loaders data;
    fs::create_directories(s.dir / "traces");
    run_hooks hooks;
    hooks.on_step = [&](const step_result& r, nlohmann::json&) {
        if (r.step == 1) fs::remove_all(s.dir / "traces");  // the trace of steps 2-3 cannot be written at step 3
    };
    const run_options o{.out = s.dir / "run", .save_every = 2, .metrics = "/dev/full",
                        .trace = s.dir / "traces" / "trace.json", .log = &s.log};
    const run_result r = run_training(t, data.train, &data.validation, o, hooks);
    CHECK(r.step == 4);
    CHECK(r.last_checkpoint == o.out / "step-000004");
    CHECK(fs::exists(o.out / "step-000002"));
    CHECK_FALSE(r.trace_written);
    REQUIRE(r.lost_outputs.size() == 2);
    CHECK(r.lost_outputs[0].find("the metrics: metrics: writing to '/dev/full' failed") == 0);
    CHECK(r.lost_outputs[1].find("the trace: ") == 0);
    CHECK(s.log.str().find("metrics no longer written, training goes on") != std::string::npos);
}

TEST_CASE("a checkpoint is what it recorded: a file from another step, an edited step or first_loss is refused") {
    setup s;
    const run_options o{.out = s.dir / "run", .stop_at = 4, .save_every = 2, .log = &s.log};
    {
        resident t(s.backend, s.model, options_of(6));
        t.initialize(5);
        loaders data;
        run_training(t, data.train, &data.validation, o, {});
    }
    const fs::path four = o.out / "step-000004";
    const auto state = read_json_file(four / "trainer_state.json");
    REQUIRE(state.at("files").contains("model.safetensors"));
    REQUIRE(state.at("files").contains("optimizer.safetensors"));
    const auto resume = [&](const fs::path& from) {
        resident t(s.backend, s.model, options_of(6));
        t.initialize(5);
        loaders data;
        run_options again = o;
        again.stop_at = 0;
        again.resume = from;
        return run_training(t, data.train, &data.validation, again, {});
    };
    const auto copy_of = [&](const std::string& name) {
        const fs::path dir = s.dir / name / "step-000004";
        fs::create_directories(dir.parent_path());
        fs::copy(four, dir);
        return dir;
    };
    const fs::path mixed = copy_of("mixed");  // step 2's weights beside step 4's state
    fs::copy_file(o.out / "step-000002" / "model.safetensors", mixed / "model.safetensors",
                  fs::copy_options::overwrite_existing);
    CHECK_THROWS_WITH_AS(resume(mixed), doctest::Contains("is not the file this checkpoint saved"), error);
    const fs::path edited = copy_of("edited");
    nlohmann::json step3 = state;
    step3["step"] = 3;
    write_json_file(edited / "trainer_state.json", step3);
    CHECK_THROWS_WITH_AS(resume(edited), doctest::Contains("says step 3"), error);
    const fs::path first = copy_of("first");
    nlohmann::json negative = state;
    negative["first_loss"] = -1;
    write_json_file(first / "trainer_state.json", negative);
    CHECK_THROWS_WITH_AS(resume(first), doctest::Contains("first_loss -1 is no loss"), error);
    CHECK(resume(four).step == 6);  // the checkpoint as saved resumes
}

}  // namespace run_test
