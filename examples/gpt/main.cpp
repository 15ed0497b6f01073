// strata-gpt: train a GPT-2-architecture model with strata, and sample from it.
//
//   strata-gpt train --data FILE [options]      (strata-gpt train --help)
//   strata-gpt train --init-from CKPT --lora-rank R --data FILE    (LoRA: only adapters train)
//   strata-gpt export --adapters DIR --out DIR  (a LoRA run's adapters merged into its base)
//   strata-gpt sample --checkpoint DIR --prompt TEXT [--device cpu|cuda] [options]
#include <strata/data/loader.hpp>
#include <strata/data/records.hpp>
#include <strata/data/tokenize.hpp>
#include <strata/io/json_file.hpp>
#include <strata/model/gpt.hpp>
#include <strata/model/generator.hpp>  // sample: generator over GPT-2 as a decoder_model
#include <strata/nn/gpt2_block.hpp>
#include <strata/nn/layernorm_layer.hpp>
#include <strata/plan/planner.hpp>
#include <strata/report/trace.hpp>
#include <strata/train/streamed_trainer.hpp>
#include <strata/nn/cpu_ops.hpp>
#include <strata/report/loss_plot.hpp>
#include <strata/report/metrics.hpp>
#include <strata/report/progress.hpp>
#include <strata/strata.hpp>
#include <strata/text/byte_tokenizer.hpp>
#include <strata/text/gpt2_tokenizer.hpp>
#include <strata/train/checkpoint.hpp>
#include <strata/train/trainer.hpp>
#ifdef STRATA_WITH_CUDA
#include <strata/cuda.hpp>  // cuda_backend, ops<cuda_backend>
#endif

#include "../common/config_file.hpp"    // apply_config_file
#include "../common/example_cli.hpp"    // make_tokenizer, use_cuda, with_planned_trainer
#include "../common/run_checks.hpp"     // validators, check_resume_options, require_saveable_loss, interrupt_guard
#include "../common/run_directory.hpp"  // run_lock, probe_writable, check_outputs, write_latest
#include "../lora/lora_model.hpp"        // LoRA: gpt2_lora_model, adapters, merging

#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace fs = std::filesystem;
using namespace strata;

namespace {

using examples::make_tokenizer;
using examples::tokenizer_of_checkpoint;

struct train_args {
    std::string data, format = "auto", tokenizer = "byte";
    std::string chat_template;  // --chat-template: "" (auto for chat records, none otherwise), auto, none or FILE
    std::size_t n_layer = 4, n_head = 4, n_embd = 128, seq_len = 128;
    std::size_t batch = 8, accum = 1;
    long steps = 300, warmup = -1, eval_every = 50, save_every = 0, eval_batches = 8;
    double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, clip = 1.0, val_fraction = 0.05;
    std::string optimizer = "adamw";  // adamw or sgd (with momentum)
    double momentum = 0.9;            // SGD's
    std::string schedule = "cosine";
    std::uint64_t seed = 1337;
    std::string out = "runs/gpt", resume, metrics, device = "auto";
    std::string save = "full";  // what each checkpoint holds: full, weights (no AdamW moments) or none
    long stop_at = 0;  // stop (and save) after this step without changing the schedule
    std::string placement = "auto", device_budget, host_budget, storage_dir, storage_budget, trace;
    std::string io_engine = "auto";  // the storage tier's I/O engine
    std::size_t io_workers = 0;
    bool plan_only = false;
    std::string init_from;
    bool tokenizer_given = false;
    int threads = 0;
    bool no_checkpointing = false;  // the older name of --activations keep
    std::string activations = "auto";
    bool tf32 = false;
    std::size_t lora_rank = 0;  // 0: full fine-tuning / pre-training; > 0: LoRA adapters only
    double lora_alpha = 0;      // 0: 2 x rank
    std::string lora_targets = "attn.c_attn,attn.c_proj,mlp.c_fc,mlp.c_proj";
    std::string config;                 // --config FILE (applied in main)
    bool overwrite = false;             // replace another run's checkpoints / a file strata did not write
    bool allow_option_changes = false;  // resume with options that differ from the checkpoint's
};

using examples::resolved_warmup;
using examples::run_options;

// "a,b,c" -> {"a", "b", "c"}
std::vector<std::string> split_list(const std::string& text) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= text.size()) {
        const std::size_t end = std::min(text.find(',', start), text.size());
        if (end > start) out.push_back(text.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

lora::gpt2_lora_config lora_config_of(const train_args& a) {
    return {.rank = a.lora_rank, .alpha = a.lora_alpha > 0 ? a.lora_alpha : 2.0 * static_cast<double>(a.lora_rank),
            .targets = split_list(a.lora_targets)};
}

void print_line(const std::string& s) { std::cout << s << std::endl; }

std::string fmt_model(const gpt_config& c, const train_options& o, std::string_view backend) {
    return "model: GPT-2 architecture, " + std::to_string(c.n_layer) + " layers, " + std::to_string(c.n_head) +
           " heads, " + std::to_string(c.n_embd) + " channels, vocab " + std::to_string(c.vocab_size) + ", context " +
           std::to_string(c.max_seq) + ": " + std::to_string(c.parameter_count()) + " parameters; batch " +
           std::to_string(o.batch) + " x " + std::to_string(o.seq) + " x accum " + std::to_string(o.accum) + ", " +
           std::string(backend) + " backend";
}

// Everything the training loop needs besides the trainer.
struct run_context {
    const train_args& a;
    data::prepared_data& prepared;
    token_id eot;
    std::optional<trace_recorder> trace;  // per-step recorder: transfer time hidden under compute
    host_blocks<float> init_blocks;       // --init-from: weights to start from (empty: random init)
    gpt_config init_config;               // --init-from: its shape
    std::string tokenizer;                // "byte", "gpt2:DIR" or "hf:PATH", as used
};

// strata-gpt trains two models, both decoder_models: the GPT (gpt_model: of gpt2_blocks) and,
// with --lora-rank, its LoRA model (of gpt2_lora_blocks).
template <class Model>
constexpr bool is_lora = !is_gpt_model<Model>::value;

template <class Trainer, class B, class Model>
int train_loop(B& backend, const Model& model, const train_options& o, run_context& ctx) {
    const train_args& a = ctx.a;
    using kind = typename Trainer::state_kind;
    const auto built = std::chrono::steady_clock::now();
    Trainer t(backend, model, o);
    print_line(format_pinning(backend.pinning()));
    t.initialize(a.seed);
    print_line(fmt::format("trainer built and {} groups initialized in {:.1f} s", model.groups().size(),
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - built).count()));
    if constexpr (is_lora<Model>) {  // the base checkpoint's weights by name; the adapters as initialized
        lora::upload_base_weights(t, model, ctx.init_config, ctx.init_blocks);
    } else {
        for (std::size_t g = 0; g < ctx.init_blocks.size(); ++g) t.upload(kind::params, g, ctx.init_blocks[g]);
    }
    if (ctx.trace)
        t.for_each_stream([&](std::string_view track, auto& s) {
            if constexpr (requires { s.set_tracer(cpu::stream_tracer{}); })
                s.set_tracer([rec = &*ctx.trace, name = std::string(track)](std::string_view what, auto b, auto e) {
                    rec->add(name, what, b, e);
                });
        });
    auto train_loader = data::make_train_loader(ctx.prepared.train, a.batch, a.seed);
    std::optional<data::batch_loader> val_loader;
    if (!ctx.prepared.validation.empty())
        val_loader.emplace(data::make_validation_loader(ctx.prepared.validation, a.batch, ctx.eot));
    // The loss curve of the whole run (a resumed run continues the checkpoint's), and its first
    // loss, the reference of the divergence policy.
    std::vector<loss_point> train_curve, val_curve;
    double first_loss = std::numeric_limits<double>::quiet_NaN();
    if (!a.resume.empty()) {
        nlohmann::json state;
        if constexpr (is_lora<Model>)
            state = load_checkpoint(t, a.resume, [&](const fs::path& dir) {
                lora::load_model_adapters(t, model, dir / "adapters.safetensors");
            });
        else
            state = load_checkpoint(t, a.resume);
        train_loader.restore(json_field<data::loader_cursor>(state, "data_cursor", a.resume + "/trainer_state.json"));
        examples::restore_loss_curve(state, train_curve, val_curve, first_loss);
        print_line("resumed from " + a.resume + " at step " + std::to_string(t.step_count()));
        if (!moments_saved(state)) print_line(examples::fresh_optimizer_note(a.resume, t.step_count()));
    }

    std::optional<metrics_writer> metrics;
    if (!a.metrics.empty()) metrics.emplace(a.metrics, /*append=*/!a.resume.empty());
    const std::vector<fs::path> extra_files = examples::tokenizer_files(ctx.tokenizer);
    auto trainer_state = [&] {
        nlohmann::json state{{"data_cursor", train_loader.cursor()},
                             {"seed", a.seed},
                             {"tokenizer", examples::tokenizer_kind(ctx.tokenizer)},
                             {"data", a.data},
                             {"options", run_options(a, o.schedule.warmup_steps)},
                             {"first_loss", first_loss},
                             {"loss_curve", examples::loss_curve_json(train_curve, val_curve)}};
        if constexpr (is_lora<Model>)  // the adapters alone (the base is --init-from's, unchanged): export merges them
            state["lora"] = {{"rank", a.lora_rank}, {"base", fs::absolute(a.init_from).string()},
                             {"adapters", "adapters.safetensors"}};
        return state;
    };
    const checkpoint_contents contents = examples::contents_of_save(a.save);
    auto save = [&] {
        if constexpr (is_lora<Model>) {
            return save_checkpoint(
                t, a.out, trainer_state(), extra_files,
                [&](const fs::path& dir) { lora::save_model_adapters(t, model, dir / "adapters.safetensors"); }, contents);
        } else {
            return save_checkpoint(t, a.out, trainer_state(), extra_files, contents);
        }
    };

    progress_reporter progress(a.steps, std::cout, stdout_is_terminal(), {.print_every = 10, .start_step = t.step_count()});
    // --trace keeps steps 2 and 3 (past the first step's cold caches) and writes them after step 3.
    const auto traced = [&](long step) { return !a.trace.empty() && (step == 2 || step == 3); };
    bool trace_written = false;
    fs::path last_saved;
    const long stop = a.stop_at > 0 ? std::min(a.stop_at, a.steps) : a.steps;
    // Before step 1: every checkpoint this run writes fits in --out (its exact bytes, from the
    // model's group layouts), or the run is refused now rather than at its final save.
    const std::uint64_t weights_bytes = [&] {
        if constexpr (is_lora<Model>)
            return lora::model_adapters_bytes(model);
        else
            return model_files_bytes(model);
    }();
    const std::uint64_t one_checkpoint = examples::mean_checkpoint_bytes(
        checkpoint_bytes(model, contents, weights_bytes, 0, extra_files), trainer_state(), t.step_count(), stop,
        a.save_every, a.save);
    examples::check_checkpoints_fit(a, one_checkpoint, t.step_count(), stop);
    transfer_counters before{};
    // A checkpoint is written last, then OUT/latest names it; never one of a diverged run. With
    // --save none only the loss curve is written.
    auto save_and_plot = [&](long step, double loss) {
        if (a.save != "none") {
            examples::require_saveable_loss(loss, first_loss, step, last_saved.string());
            last_saved = save();
            examples::write_latest(a.out, last_saved);
        }
        write_loss_svg(fs::path(a.out) / "loss.svg", train_curve, val_curve, "strata-gpt: " + a.data);
    };
    examples::interrupt_guard interrupt;  // SIGINT / SIGTERM: finish the step, save, stop
    while (t.step_count() < stop && !interrupt.interrupted()) {
        std::vector<data::batch> micro;
        for (std::size_t i = 0; i < a.accum; ++i) micro.push_back(train_loader.next());
        if (ctx.trace && !(traced(t.step_count() + 1) && t.step_count() + 1 == 3)) ctx.trace->clear();
        const auto start = std::chrono::steady_clock::now();
        const step_result r = t.step(micro);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (ctx.trace)  // GPU streams time their ops with events: collect them now that the step is done
            t.for_each_stream([](std::string_view, auto& s) {
                if constexpr (requires { s.flush_trace(); }) s.flush_trace();
            });
        const double tps = static_cast<double>(r.tokens) / seconds;
        train_curve.push_back({static_cast<double>(r.step), r.loss});
        if (std::isnan(first_loss)) first_loss = r.loss;
        nlohmann::json record{{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                              {"tokens_per_s", tps}, {"tokens", r.tokens},
                              {"bytes_storage_read", 0}, {"bytes_storage_write", 0}};  // resident: no storage tier
        if constexpr (requires { t.counters(); }) {
            const transfer_counters now = t.counters();
            record["bytes_h2d"] = now.h2d_bytes - before.h2d_bytes;
            record["bytes_d2h"] = now.d2h_bytes - before.d2h_bytes;
            record["bytes_storage_read"] = now.storage_read_bytes - before.storage_read_bytes;
            record["bytes_storage_write"] = now.storage_write_bytes - before.storage_write_bytes;
            before = now;
        }
        if (ctx.trace) {
            record["transfer_hidden_fraction"] = ctx.trace->transfer_hidden_fraction();
            if (traced(r.step) && (r.step == 3 || r.step == stop)) {
                ctx.trace->write(a.trace);
                trace_written = true;
            }
        }
        if (metrics) metrics->write(record);
        progress.update(r.step, r.loss, tps);
        const bool last = r.step == stop;
        if (val_loader && a.eval_every > 0 && (r.step % a.eval_every == 0 || last)) {
            val_loader->reset();
            std::vector<data::batch> batches;
            const long n = std::min<long>(a.eval_batches, static_cast<long>(val_loader->batches_per_epoch()));
            for (long i = 0; i < n; ++i) batches.push_back(val_loader->next());
            const double val = t.evaluate(batches);
            val_curve.push_back({static_cast<double>(r.step), val});
            if (metrics) metrics->write({{"step", r.step}, {"val_loss", val}});
            progress.note("step " + std::to_string(r.step) + ": val_loss " + format_loss(val));
        }
        if ((a.save_every > 0 && r.step % a.save_every == 0) || last || interrupt.interrupted())
            save_and_plot(r.step, r.loss);
    }
    progress.finish();
    if (trace_written) print_line("trace of steps 2-3: " + a.trace + " (open it in ui.perfetto.dev)");
    if (!last_saved.empty())
        print_line("saved " + last_saved.string() + (a.save == "weights" ? " (weights only: no AdamW moments)" : "") +
                   " (loss curve: " + (fs::path(a.out) / "loss.svg").string() + ")");
    if (a.save == "none")
        print_line("no checkpoint saved (--save none); loss curve: " + (fs::path(a.out) / "loss.svg").string());
    if (is_lora<Model> && !last_saved.empty())
        print_line("adapters only; a merged GPT-2 checkpoint: strata-gpt export --adapters " + last_saved.string() +
                   " --out DIR");
    if (interrupt.interrupted() && t.step_count() < stop) {
        const std::string from = last_saved.empty() ? a.resume : last_saved.string();
        print_line(std::string("stopped by ") + interrupt.name() + " after step " + std::to_string(t.step_count()) +
                   (a.save == "none" ? std::string("; no checkpoint saved (--save none)")
                    : from.empty()   ? std::string()
                                     : "; continue with --resume " + from));
        return interrupt.exit_code();
    }
    return 0;
}

// The trainer the plan asks for, on backend B, for the model (the GPT, or its LoRA model).
template <class B, class Model>
int train_model(B& backend, const memory_plan& p, const Model& model, const train_options& o, run_context& ctx) {
    return examples::with_planned_trainer<B, Model>(
        p, [&]<class Trainer>() { return train_loop<Trainer>(backend, model, o, ctx); });
}

template <class B>
int train_on(B& backend, const memory_plan& p, const gpt_config& config, const train_options& o, run_context& ctx) {
    if (ctx.a.lora_rank > 0)
        return train_model(backend, p, lora::make_gpt2_lora_model<B>(config, lora_config_of(ctx.a)), o, ctx);
    return train_model(backend, p, gpt_model<float, B>(config), o, ctx);
}

// What the plan is for: the footprint on B of the GPT, or (LoRA) of its LoRA model.
template <class B>
model_footprint footprint_for(const train_args& a, const gpt_config& config) {
    if (a.lora_rank > 0)
        return footprint_of<B>(lora::make_gpt2_lora_model<B>(config, lora_config_of(a)), a.batch, a.seq_len);
    return footprint_of<B>(gpt_model<float, B>(config), a.batch, a.seq_len);
}

using examples::inputs_of;

// Flags that do not fit together, and a resume with other options than the run's.
void check_consistency(const train_args& a) {
    examples::check_threads(a.threads);
    examples::check_stop_at(a.stop_at, a.steps);
    examples::check_save_options(a.save, a.save_every, a.stop_at);
    if (!a.resume.empty() && !a.init_from.empty() && a.lora_rank == 0)
        throw error("--resume and --init-from both given: --resume continues a run (its weights), --init-from starts a new one",
                    "drop --init-from to continue the run, or --resume to start afresh from the weights");
    if (a.resume.empty()) return;
    const auto state = read_json_file(fs::path(a.resume) / "trainer_state.json");
    if (a.lora_rank > 0 && state.contains("lora") &&
        examples::resolved(state["lora"].value("base", "")) != examples::resolved(a.init_from))
        throw error("--resume " + a.resume + " is a LoRA run on the base " + state["lora"].value("base", "") +
                        ", not on --init-from " + a.init_from,
                    "pass the run's base model as --init-from");
    nlohmann::json saved = state.value("options", nlohmann::json::object());
    if (saved.contains("warmup") && saved["warmup"] == -1 && saved.contains("steps"))  // older checkpoints: -1 = the default
        saved["warmup"] = resolved_warmup(-1, saved["steps"].get<long>());
    if (state.contains("seed")) saved["seed"] = state["seed"];
    nlohmann::json now = run_options(a, resolved_warmup(a.warmup, a.steps));
    now["seed"] = a.seed;
    examples::check_resume_options(saved, now, a.resume, a.allow_option_changes);
}

int run_train(const train_args& a) {
    const bool cuda = examples::use_cuda(a.device, "strata-gpt");
    if (a.tf32 && !cuda) throw error("--tf32 applies to the CUDA backend's GEMMs only", "drop --tf32, or use --device cuda");
    check_consistency(a);
    // --out: writable, locked for the run's life, no other run's checkpoints (unless --resume or
    // --overwrite); the outputs destroy no input. All before the data is read, let alone step 1.
    std::optional<examples::run_lock> lock;
    if (!a.plan_only) {
        examples::check_outputs(a.out, {{"--metrics", a.metrics}, {"--trace", a.trace}}, inputs_of(a), a.overwrite);
        lock.emplace(examples::prepare_run_directory(a.out, !a.resume.empty(), a.overwrite, inputs_of(a)));
    }
    if (a.threads > 0) Eigen::setNbThreads(a.threads);

    // --init-from: a GPT-2 directory (Hugging Face's or strata's) gives the shape and the weights,
    // and its vocab.json + merges.txt the tokenizer unless --tokenizer says otherwise.
    std::optional<loaded_model<float>> init;
    std::string tokenizer_spec = a.tokenizer;
    if (a.lora_rank > 0 && a.init_from.empty())
        throw error("--lora-rank fine-tunes adapters on a trained model, and no model was given",
                    "pass --init-from CKPT (a strata-gpt checkpoint or a Hugging Face GPT-2 directory)");
    if (a.lora_rank == 0 && (a.lora_alpha > 0))
        throw error("--lora-alpha without --lora-rank", "add --lora-rank R (e.g. 8), or drop --lora-alpha");
    if (!a.init_from.empty()) {
        init = load_model_files<float>(a.init_from);
        if (!a.tokenizer_given) tokenizer_spec = tokenizer_of_checkpoint(a.init_from);
        if (a.seq_len > init->config.max_seq)
            throw error("--seq-len " + std::to_string(a.seq_len) + " exceeds the context of " + a.init_from + " (" +
                            std::to_string(init->config.max_seq) + ")",
                        "lower --seq-len");
    }
    auto tok = make_tokenizer(tokenizer_spec);
    const auto records = data::read_records(a.data, data::parse_record_format(a.format));
    data::data_options data_options{.seq_len = a.seq_len, .val_fraction = a.val_fraction};
    data_options.chat = examples::chat_template_for(a.chat_template, records.kind, tokenizer_spec,
                                                    a.init_from.empty() ? a.resume : a.init_from, tok);
    if (data_options.chat) print_line("chat template: " + data_options.chat->summary());
    data::prepared_data prepared = std::visit([&](const auto& t) { return data::prepare_data(records, t, data_options); }, tok);
    const token_id eot = std::visit([](const auto& t) { return t.eot_id(); }, tok);
    const auto vocab = static_cast<std::size_t>(std::visit([](const auto& t) { return t.vocab_size(); }, tok));
    print_line("data: " + a.data + ": " + prepared.stats.summary());

    gpt_config config{.vocab_size = vocab, .max_seq = a.seq_len, .n_layer = a.n_layer, .n_head = a.n_head, .n_embd = a.n_embd};
    if (init) {
        if (init->config.vocab_size != vocab)
            throw error(a.init_from + " has a vocabulary of " + std::to_string(init->config.vocab_size) +
                            " tokens, the tokenizer " + tokenizer_spec + " has " + std::to_string(vocab),
                        "train with the tokenizer the model was trained with (--tokenizer)");
        config = init->config;
    }
    config.validate();
    train_options o{.batch = a.batch, .seq = a.seq_len, .accum = a.accum};
    const long warmup = resolved_warmup(a.warmup, a.steps);
    o.schedule = {.kind = parse_lr_kind(a.schedule), .lr = a.lr, .min_lr = a.min_lr, .warmup_steps = warmup,
                  .total_steps = a.steps, .step_size = std::max<long>(1, a.steps / 3), .gamma = 0.1};
    validate(o.schedule);
    o.adamw.weight_decay = a.weight_decay;
    o.optimizer = optimizer_kind_from_string(a.optimizer);
    o.sgd = {.momentum = a.momentum, .weight_decay = a.weight_decay};
    o.clip = a.clip;

    // The plan: placement and bytes per tier, refused before anything is allocated.
    const fs::path storage_dir = a.storage_dir.empty() ? fs::temp_directory_path() / ("strata-" + std::to_string(::getpid()))
                                                       : fs::path(a.storage_dir);
    std::size_t default_device = physical_memory_bytes() / 4;  // the CPU backend's "device" is host memory
#ifdef STRATA_WITH_CUDA
    if (cuda) default_device = cuda_backend::default_device_budget();
#endif
    const tier_bytes budgets = examples::budgets_of(a, default_device, storage_dir);
    plan_request request{.accum = a.accum, .activations = examples::activation_policy_of(a), .budgets = budgets,
                         .where = placement_from_string(a.placement), .moments_on_storage = !a.storage_dir.empty()};
    request.optimizer = o.optimizer;
#ifdef STRATA_WITH_CUDA
    if (cuda) {  // the links the plan's transfer estimate uses, measured (a moment, 256 MiB each way)
        cuda_backend probe(tier_options{});
        request.links = measure_links(probe);
    }
    request.model = cuda ? footprint_for<cuda_backend>(a, config) : footprint_for<cpu_backend>(a, config);
#else
    request.model = footprint_for<cpu_backend>(a, config);
#endif
    const memory_plan p = plan(request);
    o.activations = p.kept();  // the blocks whose activations the plan keeps on the device
    o.homes = p.trainer_homes();  // each group's tier (streamed plans)
    print_line(fmt_model(config, o, cuda ? "CUDA" : "CPU"));
    if (a.lora_rank > 0) {
        const auto lc = lora_config_of(a);
        print_line("LoRA: rank " + std::to_string(lc.rank) + ", alpha " + format_loss(lc.alpha) + " on " + a.lora_targets +
                   "; every other weight frozen (base: " + a.init_from + ")");
    }
    if (cuda) print_line(std::string("GEMM math: ") + (a.tf32 ? "TF32 tensor cores (--tf32)" : "strict FP32"));
    print_line(plan_table(p));
    if (a.plan_only) return 0;

    const tier_options tiers{.device_bytes = budgets.device, .host_bytes = budgets.host, .storage_bytes = budgets.storage,
                             .storage_dir = a.storage_dir.empty() ? fs::path() : storage_dir,
                             .io = examples::io_options_of(a)};
    run_context ctx{a, prepared, eot, std::nullopt, {}, config, tokenizer_spec};
    if (init) ctx.init_blocks = std::move(init->blocks);
    if (p.where == placement::streamed || !a.trace.empty()) ctx.trace.emplace();
#ifdef STRATA_WITH_CUDA
    if (cuda) {
        ops<cuda_backend>::set_tf32(a.tf32);
        cuda_backend backend(tiers);
        return train_on(backend, p, config, o, ctx);
    }
#endif
    cpu_backend backend(tiers);
    return train_on(backend, p, config, o, ctx);
}

// export: a LoRA run's adapters merged into its base model, written as a plain GPT-2 checkpoint
// (model.safetensors + config.json, loadable by strata-gpt sample, --init-from and transformers).
struct export_args {
    std::string adapters, base, out;
    bool overwrite = false;
};

// export replaces --out whole: never an input, and only a previous export unless --overwrite.
void check_export_out(const export_args& a, const fs::path& adapters, const std::string& base) {
    for (const auto& [flag, in] : std::vector<examples::named_path>{{"--adapters", adapters}, {"--base", base}})
        if (examples::is_within(a.out, in) || examples::is_within(in, a.out))
            throw error("--out '" + a.out + "' is or holds the " + flag + " input '" + in.string() +
                            "': writing it would destroy the input",
                        "pick another --out");
    const fs::path state = fs::path(a.out) / "trainer_state.json";
    const bool previous_export = fs::exists(state) && read_json_file(state).value("format", "") == "strata-gpt LoRA merge 1";
    if (fs::exists(a.out) && !fs::is_empty(a.out) && !previous_export && !a.overwrite)
        throw error("--out '" + a.out + "' exists and is not a merge strata-gpt export wrote: refusing to replace it",
                    "pick another --out, or pass --overwrite");
}

int run_export(const export_args& a) {
    fs::path adapters = a.adapters;
    std::string base = a.base;
    if (fs::is_directory(adapters)) {  // a checkpoint directory of a LoRA run: its state names the base
        const auto state_path = adapters / "trainer_state.json";
        if (base.empty() && fs::exists(state_path)) {
            const auto state = read_json_file(state_path);
            if (state.contains("lora") && state["lora"].contains("base")) base = state["lora"]["base"].get<std::string>();
        }
        adapters /= "adapters.safetensors";
    }
    if (!fs::exists(adapters))
        throw error("'" + adapters.string() + "' does not exist", "pass a LoRA run's checkpoint (OUT/step-N) or its adapters.safetensors");
    if (base.empty())
        throw error("the base model of '" + adapters.string() + "' is unknown", "pass --base DIR (the --init-from of the LoRA run)");
    check_export_out(a, adapters, base);
    auto loaded = load_model_files<float>(base);
    auto lc = lora::config_of(adapters);
    lc.n_head = loaded.config.n_head;
    const auto merged = lora::merged_blocks(loaded.config, lc, loaded.blocks, adapters);
    const fs::path tmp = fs::path(a.out).string() + ".tmp-" + std::to_string(::getpid());
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    write_model_files(gpt_model<float, cpu_backend>(loaded.config), merged, tmp);
    for (const char* f : {"vocab.json", "merges.txt"})
        if (fs::exists(fs::path(base) / f)) fs::copy_file(fs::path(base) / f, tmp / f);
    write_json_file(tmp / "trainer_state.json", nlohmann::json{{"format", "strata-gpt LoRA merge 1"},
                                                 {"tokenizer", examples::tokenizer_kind(tokenizer_of_checkpoint(base))},
                                                 {"base", fs::absolute(base).string()},
                                                 {"adapters", fs::absolute(adapters).string()}});
    commit_directory_atomically(tmp, a.out, {.replace_existing = true});
    print_line("merged " + adapters.string() + " (rank " + std::to_string(lc.rank) + ", " +
               std::to_string(lc.targets.size()) + " projections x " + std::to_string(lc.n_layer) + " layers) into " +
               base + ": " + a.out);
    return 0;
}

struct sample_args {
    std::string checkpoint, prompt, device = "auto";
    std::size_t max_new_tokens = 200, top_k = 40;
    double temperature = 0.8;
    std::uint64_t seed = 42;
};

// GPT-2 from Layers (gpt2_block, layernorm_layer): gpt_model's layout, so a checkpoint's blocks
// load as they are, and its blocks decode with a KV cache on either backend.
template <class B>
using gpt2_layers = decoder_model<gpt2_block<float, B>, layernorm_layer<float, B>>;

int run_sample(const sample_args& a) {
    const fs::path checkpoint = examples::resolve_checkpoint(a.checkpoint);
    auto loaded = load_model_files<float>(checkpoint);
    auto tok = make_tokenizer(tokenizer_of_checkpoint(checkpoint));
    const token_id eot = std::visit([](const auto& t) { return t.eot_id(); }, tok);
    const bool cuda = examples::use_cuda(a.device, "strata-gpt");
    // the prompt begins a document as in training (an hf tokenizer's BOS first, as tokenizer(text))
    std::vector<token_id> prompt = std::visit([&](const auto& t) { return data::encode_document(t, a.prompt); }, tok);
    sample_options so;
    so.max_new_tokens = a.max_new_tokens;
    so.temperature = a.temperature;
    so.top_k = a.top_k;
    so.seed = a.seed;
    so.bos = eot;
    // The weights and the KV cache live in the device tier (the tiers' default budgets).
    auto generate = [&]<class B>(B& backend) {
        const gpt_config& c = loaded.config;
        const gpt2_layers<B> model({.vocab_size = c.vocab_size, .max_seq = c.max_seq, .n_layer = c.n_layer,
                                    .n_embd = c.n_embd},
                                   c, layernorm_config{.channels = c.n_embd});
        generator<gpt2_layers<B>> gen(backend, model, loaded.blocks);
        loaded.blocks = {};  // uploaded: the host copy is not needed again
        return gen.generate(prompt, so);
    };
    std::vector<token_id> ids;
#ifdef STRATA_WITH_CUDA
    if (cuda) {
        cuda_backend backend(tier_options{});
        ids = generate(backend);
    }
#endif
    if (!cuda) {
        cpu_backend backend(tier_options{});
        ids = generate(backend);
    }
    std::cout << a.prompt << std::visit([&](const auto& t) { return t.decode(ids); }, tok) << std::endl;
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"strata-gpt: train a GPT-2-architecture model with strata, and sample from it"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("strata-gpt ") + STRATA_VERSION);
    using examples::count_in, examples::real_in, examples::unsigned_number;
    constexpr long max_count = 1L << 40;  // far beyond any real value; a typo or a wrapped negative is not

    train_args t;
    auto* train = app.add_subcommand("train", "train (pre-train or fine-tune) a GPT on a text or JSON file");
    train->add_option("--config", t.config, "read options from a TOML/INI file: keys are the long flag names (steps = 600), at the top or in [train]; the command line wins")->check(CLI::ExistingFile);
    train->add_option("--data", t.data, "training data: plain text, JSONL/JSON {\"text\"} or instruction records (required)")->check(CLI::ExistingFile);
    train->add_option("--format", t.format, "data format")->check(CLI::IsMember({"auto", "text", "jsonl", "instruct", "chat"}))->capture_default_str();
    train->add_option("--chat-template", t.chat_template, examples::chat_template_help);
    train->add_option("--tokenizer", t.tokenizer, examples::tokenizer_help)->capture_default_str();
    train->add_option("--init-from", t.init_from, "start from the weights of a GPT-2 directory (Hugging Face's or strata's); its config gives the model's shape")->check(CLI::ExistingDirectory);
    train->add_option("--n-layer", t.n_layer, "transformer blocks")->capture_default_str()->check(count_in(1, 4096));
    train->add_option("--n-head", t.n_head, "attention heads")->capture_default_str()->check(count_in(1, 4096));
    train->add_option("--n-embd", t.n_embd, "channels")->capture_default_str()->check(count_in(1, 1L << 20));
    train->add_option("--seq-len", t.seq_len, "tokens per sequence (the model's context)")->capture_default_str()->check(count_in(1, 1L << 24));
    train->add_option("--batch", t.batch, "sequences per micro-batch")->capture_default_str()->check(count_in(1, 1L << 24));
    train->add_option("--accum", t.accum, "micro-batches per optimizer step")->capture_default_str()->check(count_in(1, 1L << 24));
    train->add_option("--steps", t.steps, "optimizer steps")->capture_default_str()->check(count_in(1, max_count));
    train->add_option("--lr", t.lr, "peak learning rate")->capture_default_str()->check(real_in(0, 1e6));
    train->add_option("--min-lr", t.min_lr, "final learning rate of the decay")->capture_default_str()->check(real_in(0, 1e6));
    train->add_option("--warmup", t.warmup, "linear warmup steps (default: a tenth of --steps, at most 20)")->check(count_in(0, max_count));
    train->add_option("--schedule", t.schedule, "learning-rate schedule")->check(CLI::IsMember({"cosine", "linear", "constant", "step"}))->capture_default_str();
    train->add_option("--optimizer", t.optimizer, "adamw, or sgd (with --momentum; torch.optim.SGD's step)")->check(CLI::IsMember({"adamw", "sgd"}))->capture_default_str();
    train->add_option("--momentum", t.momentum, "SGD's momentum (0: plain SGD)")->capture_default_str()->check(real_in(0, 1));
    train->add_option("--weight-decay", t.weight_decay, "weight decay of 2-D weights and embeddings: AdamW's decoupled, SGD's coupled (added to the gradient)")->capture_default_str()->check(real_in(0, 1e6));
    train->add_option("--clip", t.clip, "max global gradient norm (0: no clipping)")->capture_default_str()->check(real_in(0, 1e30));
    train->add_option("--val-fraction", t.val_fraction, "fraction of sequences held out for validation")->capture_default_str()->check(real_in(0, 0.9));
    train->add_option("--eval-every", t.eval_every, "evaluate every N steps (0: never)")->capture_default_str()->check(count_in(0, max_count));
    train->add_option("--eval-batches", t.eval_batches, "validation batches per evaluation")->capture_default_str()->check(count_in(1, max_count));
    train->add_option("--seed", t.seed, "seed of initialization and shuffling")->capture_default_str()->check(unsigned_number);
    train->add_option("--out", t.out, "directory for checkpoints (OUT/step-N) and loss.svg")->capture_default_str();
    train->add_option("--save-every", t.save_every, "save a checkpoint every N steps (0: only at the end); every one is kept")->capture_default_str()->check(count_in(0, max_count));
    examples::add_save_option(*train, t.save);
    train->add_option("--resume", t.resume, "resume from a checkpoint directory (OUT/step-N, or OUT: its latest), with the run's options")->check(CLI::ExistingDirectory);
    train->add_flag("--allow-option-changes", t.allow_option_changes, "resume with options that differ from the checkpoint's (each change is printed; the run no longer equals one never interrupted)");
    train->add_flag("--overwrite", t.overwrite, "start afresh in an --out holding another run's checkpoints (they are removed), and overwrite --metrics/--trace files strata did not write");
    train->add_option("--metrics", t.metrics, "write per-step metrics as JSON lines to FILE");
    train->add_option("--stop-at", t.stop_at, "stop and save after this step, keeping the schedule of --steps (resume later)")->check(count_in(1, max_count));
    train->add_option("--placement", t.placement, "where the training state lives: auto (the planner decides), resident, streamed")->check(CLI::IsMember({"auto", "resident", "streamed"}))->capture_default_str();
    examples::add_tier_options(*train, t);
    train->add_option("--storage-dir", t.storage_dir, "directory for storage-tier files; puts the AdamW moments there when streaming");
    train->add_flag("--plan", t.plan_only, "print the memory plan and exit");
    train->add_option("--trace", t.trace, "write a Chrome/Perfetto trace of steps 2-3 to FILE.json");
    train->add_option("--device", t.device, "cpu, cuda or auto (auto: CUDA when a GPU is present)")->capture_default_str();
    train->add_flag("--tf32", t.tf32, "CUDA: let the GEMMs use TF32 tensor cores (default: strict FP32)");
    train->add_option("--threads", t.threads, "CPU threads for matrix products (0: all)")->check(count_in(0, 1 << 20));
    examples::add_activation_options(*train, t);
    train->add_option("--lora-rank", t.lora_rank, "LoRA: train only rank-R adapters on the projections of --init-from's model (0: off)")->capture_default_str()->check(count_in(0, 1L << 20));
    train->add_option("--lora-alpha", t.lora_alpha, "LoRA: the adapters' outputs are scaled by alpha / rank (default: 2 x rank)")->check(real_in(0, 1e6));
    train->add_option("--lora-targets", t.lora_targets, "LoRA: comma-separated projections to adapt (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj)")->capture_default_str();

    export_args x;
    auto* exporter = app.add_subcommand("export", "merge a LoRA run's adapters into its base model (a plain GPT-2 checkpoint)");
    exporter->add_option("--adapters", x.adapters, "a LoRA run's checkpoint directory (OUT/step-N) or its adapters.safetensors")->required()->check(CLI::ExistingPath);
    exporter->add_option("--base", x.base, "the base model (default: the --init-from the LoRA run recorded)")->check(CLI::ExistingDirectory);
    exporter->add_option("--out", x.out, "directory to write the merged checkpoint to (replaced whole)")->required();
    exporter->add_flag("--overwrite", x.overwrite, "replace an --out that is not a previous export");

    sample_args s;
    auto* sample = app.add_subcommand("sample", "generate text from a checkpoint");
    sample->add_option("--checkpoint", s.checkpoint, "checkpoint directory (strata's OUT/step-N, OUT for its latest, or a Hugging Face GPT-2 directory)")->required()->check(CLI::ExistingDirectory);
    sample->add_option("--prompt", s.prompt, "text to continue")->required();
    sample->add_option("--max-new-tokens", s.max_new_tokens, "tokens to generate")->capture_default_str()->check(count_in(0, 1L << 24));
    sample->add_option("--temperature", s.temperature, "softmax temperature (0: greedy)")->capture_default_str()->check(real_in(0, 1e6));
    sample->add_option("--top-k", s.top_k, "sample among the k most likely tokens (0: all)")->capture_default_str()->check(count_in(0, 1L << 24));
    sample->add_option("--seed", s.seed, "sampling seed")->capture_default_str()->check(unsigned_number);
    sample->add_option("--device", s.device, "cpu, cuda or auto (auto: CUDA when a GPU is present)")->capture_default_str();

    CLI11_PARSE(app, argc, argv);
    try {
        if (train->parsed()) {
            if (!t.config.empty()) examples::apply_config_file(*train, t.config);
            if (t.data.empty()) throw error("--data is required", "pass --data FILE (or data = \"FILE\" in --config)");
            t.tokenizer_given = train->count("--tokenizer") > 0;
            if (!t.resume.empty()) t.resume = examples::resolve_checkpoint(t.resume).string();
            return run_train(t);
        }
        if (exporter->parsed()) return run_export(x);
        return run_sample(s);
    } catch (const std::exception& e) {
        std::cerr << "strata-gpt: error: " << e.what() << std::endl;
        if (const auto hint = examples::flag_hint_for(e); !hint.empty()) std::cerr << "strata-gpt: " << hint << std::endl;
        return 1;
    }
}
