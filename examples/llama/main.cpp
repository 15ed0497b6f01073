// strata-llama: train the example Llama-style model (llama_model.hpp: the block of llama_block.hpp
// assembled into a decoder_model) with strata's trainers, resident or streamed, and sample from it.
// The data, tokenizer, schedule, metrics and progress conventions are strata-gpt's.
//
//   strata-llama train [--data FILE] [options]    (strata-llama train --help)
//   strata-llama sample --checkpoint DIR --prompt TEXT [--tokens N --temperature T --top-k K --seed S]
//   strata-llama export --checkpoint DIR --out DIR [--dtype float32|bfloat16|float16]
//   strata-llama score --checkpoint DIR (--prompt TEXT | --tokens-file FILE) --out FILE.safetensors
//
// Without --data it trains on the licence texts every Debian system has in
// /usr/share/common-licenses (the corpus of scripts/train-demo.sh), written to OUT/corpus.txt.
// Checkpoints are Hugging Face Llama directories (model.safetensors, config.json) with strata's
// trainer state (optimizer.safetensors, trainer_state.json): transformers.LlamaForCausalLM loads
// them; `--resume`, `--init-from` and `sample` take them (and `--init-from` and `sample` Hugging
// Face Llamas of a shape the block has).
#include "../common/command_line.hpp"   // parse_command_line, usage_error
#include "../common/config_file.hpp"    // apply_config_file
#include "../common/backends.hpp"       // with_backend, on_backend, make_backends, default_device_bytes
#include "../common/example_cli.hpp"    // make_tokenizer, use_cuda, with_planned_trainer (strata-gpt's)
#include "../common/train_flags.hpp"    // train_flags, add_train_options, apply_resume_defaults
#include "../common/run_checks.hpp"     // check_resumed_options, add_optimizer_options
#include "../common/run_directory.hpp"  // prepare_run_directory, check_outputs, resolve_checkpoint
#include "../common/machine_cli.hpp"    // add_machine_options, machine_for_plan, budgets_for, predicted_step
#include "../common/train_run.hpp"      // check_run_flags, train_options_of, run_inputs, build_and_train, finish_run
#include "hf_export.hpp"    // llama::export_llama_directory, parse_weight_dtype
#include "llama_lora_model.hpp"  // llama::llama_lora_model, make_llama_lora_model, upload_base_weights
#include "llama_model.hpp"  // llama::llama_model, llama_config, load_llama_files, write_model_files
#include "score.hpp"        // llama::make_scoring_model, score_tokens, write_scores
#ifdef STRATA_WITH_CUDA
#include "llama_ops_cuda.hpp"  // llama_ops<cuda_backend>, ops<cuda_backend>
#include <strata/cuda.hpp>     // cuda_backend
#endif

#include <strata/data/records.hpp>         // data::read_records, parse_record_format
#include <strata/data/tokenize.hpp>        // data::prepare_data
#include <strata/io/json_file.hpp>         // read_json_file
#include <strata/plan/planner.hpp>         // plan, footprint_of, default_budgets
#include <strata/report/progress.hpp>      // format_loss
#include <strata/strata.hpp>               // cpu_backend, tier_options
#include <strata/text/byte_tokenizer.hpp>  // byte_tokenizer
#include <strata/text/gpt2_tokenizer.hpp>  // gpt2_tokenizer
#include <strata/train/run.hpp>               // run_hooks, run_result
#include <strata/train/tiered_trainer.hpp>  // tiered_trainer

#include <CLI/CLI.hpp>
#include <Eigen/Core>  // Eigen::setNbThreads

#include <algorithm>   // std::sort
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ofstream, std::ifstream
#include <iostream>    // std::cout, std::cerr
#include <limits>      // std::numeric_limits
#include <optional>    // std::optional
#include <sstream>     // std::istringstream
#include <string>      // std::string
#include <variant>     // std::variant, std::visit
#include <vector>      // std::vector

namespace fs = std::filesystem;
using namespace strata;

namespace {

using examples::make_tokenizer;
using examples::tokenizer_of_checkpoint;

using examples::on_backend;

// ---- train ----

// The train flags: the ones strata-gpt shares (examples/common/train_flags.hpp), and the Llama
// shape's and strata-llama's own.
struct train_args : examples::train_flags {
    std::size_t hidden = 0;                   // SwiGLU width; 0: 8/3 n_embd rounded up to a multiple of 8
    std::size_t n_kv_head = 0, head_dim = 0;  // 0: n_head key/value heads, heads of n_embd / n_head
    std::size_t vocab = 0;                    // embedding rows; 0: the tokenizer's (or the checkpoint's)
    bool untied_head = false, qkv_bias = false;
    double rope_theta = 10000.0, norm_eps = 1e-5;
    std::string moments = "host";  // the optimizer state's home when streamed (host, storage)
    std::string lora_targets = "qkv_proj,o_proj,gate_proj,up_proj,down_proj";
    train_args() { out = "runs/llama"; }
};

void print_line(const std::string& s) { std::cout << s << std::endl; }

// The licence texts of /usr/share/common-licenses (every regular file, sorted by name, as
// scripts/train-demo.sh builds its corpus) into OUT/corpus.txt, written atomically; an existing
// OUT/corpus.txt is kept when it is that text, and refused (never overwritten) when it is not.
fs::path default_corpus(const fs::path& out) {
    const fs::path licenses = "/usr/share/common-licenses";
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(licenses, ec))
        if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path());
    if (files.empty())
        throw error("no --data given and " + licenses.string() + " has no licence texts to train on",
                    "pass --data FILE (plain text, JSONL or instruction records)");
    std::sort(files.begin(), files.end());
    std::ostringstream text;
    for (const auto& f : files) text << std::ifstream(f, std::ios::binary).rdbuf();
    fs::create_directories(out);
    const fs::path corpus = out / "corpus.txt";
    if (fs::exists(fs::symlink_status(corpus))) {
        std::ostringstream existing;
        existing << std::ifstream(corpus, std::ios::binary).rdbuf();
        if (fs::is_regular_file(fs::symlink_status(corpus)) && existing.str() == text.str()) return corpus;
        throw error("'" + corpus.string() + "' exists and is not the licence corpus strata-llama writes there without "
                        "--data: refusing to overwrite it",
                    "pass it as --data to train on it, move it away, or pick another --out");
    }
    write_file_atomically(corpus, std::string_view(text.str()));
    return corpus;
}

struct run_context {
    const train_args& a;
    std::string data;  // the data file used
    data::prepared_data& prepared;
    token_id eot;
    std::string tokenizer;                  // "byte", "gpt2:DIR" or "hf:PATH"
    const llama::llama_weights* init = nullptr;  // --init-from's weights (null: random initialization)
    llama::llama_config config;             // the model's shape (a LoRA run's base), architecture and token ids
    bool streamed = false;                  // a streamed plan: every step traced (transfer time hidden under compute)
    double predicted_step_seconds = 0;      // the cost model's, for the run's summary (0: none)
};

// ---- LoRA (--lora-rank): adapters trained on a frozen base, the base's or random weights ----

llama::llama_lora_config lora_config_of(const train_args& a) {
    return {.rank = a.lora_rank, .alpha = a.lora_alpha > 0 ? a.lora_alpha : 2.0 * static_cast<double>(a.lora_rank),
            .targets = llama::parse_lora_targets(a.lora_targets)};
}

template <class Model>
constexpr bool is_lora = std::is_same_v<typename Model::block_type,
                                        llama::llama_lora_block<float, typename Model::backend_type>>;

// After initialize(): --init-from's weights (a LoRA model: its base tensors, by name; without
// --init-from the base keeps its random initialization).
template <class Trainer, class Model>
void upload_initial_weights(Trainer& t, const Model& model, const run_context& ctx) {
    if constexpr (is_lora<Model>) {
        if (ctx.init) llama::upload_base_weights(t, model, *ctx.init);  // group by group
    } else if (ctx.init) {  // one group at a time through host memory
        for (std::size_t g = 0; g < ctx.init->group_count(); ++g) {
            const std::vector<float> block = ctx.init->group(g);
            t.upload(Trainer::state_kind::params, g, std::span<const float>(block));
        }
    }
}

// adapter_config.json of a LoRA checkpoint: what the adapters adapt, and the base they were trained on.
nlohmann::json lora_adapter_config(const train_args& a) {
    const auto lc = lora_config_of(a);
    return {{"format", "strata.lora.llama/1"}, {"adapters", lora::adapters_file}, {"rank", lc.rank},
            {"alpha", lc.alpha}, {"targets", lc.ordered_targets()},
            {"base", a.init_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(fs::absolute(a.init_from).string())},
            {"base_seed", a.init_from.empty() ? nlohmann::json(a.seed) : nlohmann::json(nullptr)}};
}

// A checkpoint's model files (strata::model_files): the Llama directory (model.safetensors,
// config.json with the run's architecture and token ids), or (LoRA) the adapters and
// adapter_config.json.
template <class Model>
strata::model_files<Model> model_files_of(const train_args& a, const llama::llama_config& config) {
    if constexpr (is_lora<Model>)
        return {.adapter_config = lora_adapter_config(a)};
    else
        return {.identity = llama::hf_identity::of(config)};
}

// The model's fields of trainer_state.json.
template <class Model>
void add_model_state(nlohmann::json& state, const train_args& a) {
    state["model"] = "strata-llama";
    if constexpr (is_lora<Model>) state["lora"] = lora_adapter_config(a);
}

// The LoRA flags, refused where they do not fit, before any data is read.
void check_lora_options(const train_args& a) {
    if (a.lora_rank == 0) {
        if (a.lora_alpha > 0) throw error("--lora-alpha without --lora-rank", "add --lora-rank R (e.g. 8), or drop --lora-alpha");
        return;
    }
    if (!a.resume.empty())
        throw error("--resume of a LoRA run (--lora-rank) is not supported yet",
                    "start a new LoRA run; its checkpoints hold the adapters (adapters.safetensors)");
    (void)lora_config_of(a);  // the targets are projections of the block
}

// The line that says what a LoRA run trains, and on which base.
template <class Model>
std::string lora_line(const Model& model, const train_args& a) {
    std::size_t trainable = 0;
    for (const auto& g : model.groups()) trainable += g.trainable_parameter_count();
    const auto lc = lora_config_of(a);
    std::string targets;
    for (const auto& t : lc.ordered_targets()) targets += (targets.empty() ? "" : ",") + t;
    return "LoRA: rank " + std::to_string(lc.rank) + ", alpha " + format_loss(lc.alpha) + " on " + targets + ": " +
           std::to_string(trainable) + " trainable parameters; base " +
           (a.init_from.empty() ? "randomly initialized (seed " + std::to_string(a.seed) + "; no --init-from)"
                                : a.init_from + ", frozen");
}

// The plan's trainer (Trainer) for the model, from --init-from's weights or the seed's, trained by
// strata::run_training with the model's checkpoint files (examples/common/train_run.hpp).
// --gpus N > 1: a data_parallel_trainer of Trainer, one rank per backend.
template <class Trainer, class B, class Model>
int train_planned(const std::vector<B*>& backends, const Model& model, const train_options& o, run_context& ctx) {
    const examples::run_inputs in{"strata-llama", ctx.data, ctx.tokenizer, ctx.prepared, ctx.eot, ctx.streamed,
                                  ctx.predicted_step_seconds};
    const auto upload = [&](auto& t) { upload_initial_weights(t, model, ctx); };
    const auto model_state = [&](nlohmann::json& state) { add_model_state<Model>(state, ctx.a); };
    const strata::model_files<Model> files = model_files_of<Model>(ctx.a, ctx.config);
    const run_result r =
        backends.size() > 1
            ? examples::build_and_train_parallel<Trainer>(backends, model, o, ctx.a, in, upload, model_state, files)
            : examples::build_and_train<Trainer>(*backends[0], model, o, ctx.a, in, upload, model_state, files);
    return examples::finish_run(r, ctx.a);
}

// The trainer the plan asks for.
template <class B, class Model>
int train_on(const std::vector<B*>& backends, const memory_plan& p, const Model& model, const train_options& o,
             run_context& ctx) {
    return examples::with_planned_trainer<B, Model>(
        p, [&]<class Trainer>() { return train_planned<Trainer>(backends, model, o, ctx); });
}

using examples::inputs_of;

// Flags that do not fit together, and a resume with other options than the run's.
void check_consistency(const train_args& a) {
    examples::check_run_flags(a);
    examples::check_machine_flags(a);
    check_lora_options(a);
    if (!a.init_from.empty() && !a.resume.empty())
        throw error("--resume and --init-from both given: --resume continues a run (its weights), --init-from starts a new one",
                    "drop --init-from to continue the run, or --resume to start afresh from the weights");
    // the shape options, each named (a checkpoint's config.json gives the shape with --init-from / --resume)
    if (a.n_kv_head != 0 && a.n_head % a.n_kv_head != 0)
        throw error("--n-kv-head " + std::to_string(a.n_kv_head) + " does not divide --n-head " + std::to_string(a.n_head),
                    "each key/value head serves n-head / n-kv-head query heads: pick a divisor of --n-head");
    if (a.head_dim != 0 && a.head_dim % 2 != 0)
        throw error("--head-dim " + std::to_string(a.head_dim) + " is odd",
                    "rotary embedding rotates pairs of channels: pick an even --head-dim");
    if (a.head_dim == 0 && (a.n_embd % a.n_head != 0 || (a.n_embd / a.n_head) % 2 != 0))
        throw error("--n-embd " + std::to_string(a.n_embd) + " does not split into --n-head " + std::to_string(a.n_head) +
                        " heads of an even size",
                    "choose --n-head so that n-embd / n-head is even, or give --head-dim");
    if (a.resume.empty()) return;
    examples::check_resumed_options(a, read_json_file(fs::path(a.resume) / "trainer_state.json"));
}

// The train command on backend B (--device's).
template <class B>
int train_with(const train_args& a) {
    constexpr bool cuda = !std::is_same_v<B, cpu_backend>;
    examples::set_gemm_math<B>(a.tf32);  // --tf32 refused on the CPU; the GEMM math calibrated is the run's
    examples::check_ranks<B>(a.gpus);
    check_consistency(a);
    examples::check_outputs(a);
    // --out: writable, no file of the user's where the run writes, locked for the run's life, no
    // checkpoint the run would replace (unless --overwrite, at its first save)
    const auto lock = examples::prepare_run_directory(a);
    if (a.threads > 0) Eigen::setNbThreads(a.threads);

    // --init-from (weights) and --resume (weights, optimizer state, step, data cursor) take the model's
    // shape, and unless --tokenizer says otherwise the tokenizer, from the checkpoint. Its weights
    // are read later, group by group, straight into the trainer.
    const std::string from = a.resume.empty() ? a.init_from : a.resume;
    std::optional<llama::llama_weights> init;
    std::string tokenizer_spec = a.tokenizer;
    if (!from.empty()) {
        init.emplace(from);
        if (!a.tokenizer_given) tokenizer_spec = tokenizer_of_checkpoint(from);
    }
    const auto tok = make_tokenizer(tokenizer_spec);
    const token_id eot = std::visit([](const auto& t) { return t.eot_id(); }, tok);
    const auto vocab = static_cast<std::size_t>(std::visit([](const auto& t) { return t.vocab_size(); }, tok));
    if (a.vocab != 0 && a.vocab < vocab)
        throw error("--vocab " + std::to_string(a.vocab) + " is smaller than the tokenizer's " + std::to_string(vocab) +
                        " tokens (" + tokenizer_spec + ")",
                    "pass --vocab 0 (the tokenizer's) or at least " + std::to_string(vocab));
    llama::llama_config config{.vocab = a.vocab ? a.vocab : vocab, .max_seq = a.seq_len, .n_layer = a.n_layer, .n_head = a.n_head,
                               .n_embd = a.n_embd, .hidden = a.hidden ? a.hidden : llama::default_hidden(a.n_embd),
                               .eps = a.norm_eps, .rope_theta = a.rope_theta,
                               .n_kv_head = a.n_kv_head == a.n_head ? 0 : a.n_kv_head,
                               .head_dim = a.head_dim == a.n_embd / a.n_head && a.n_embd % a.n_head == 0 ? 0 : a.head_dim,
                               .tie_word_embeddings = !a.untied_head, .qkv_bias = a.qkv_bias,
                               .arch = a.qkv_bias ? llama::llama_arch::qwen2 : llama::llama_arch::llama};
    if (init) {
        // A model may have more embedding rows than its tokenizer has tokens (Qwen2.5: 152064 rows,
        // 151665 tokens; the rows past the tokenizer are never an input), never fewer.
        if (init->config().vocab < vocab)
            throw error(from + " has a vocabulary of " + std::to_string(init->config().vocab) + " tokens, fewer than the " +
                            std::to_string(vocab) + " of the tokenizer " + tokenizer_spec,
                        "train with the tokenizer the model was trained with (--tokenizer)");
        if (a.vocab != 0 && a.vocab != init->config().vocab)
            throw error("--vocab " + std::to_string(a.vocab) + " differs from the " + std::to_string(init->config().vocab) +
                            " rows of " + from,
                        "leave --vocab out: the checkpoint's shape is used");
        if (a.seq_len > init->config().max_seq)
            throw error("--seq-len " + std::to_string(a.seq_len) + " exceeds the context of " + from + " (" +
                            std::to_string(init->config().max_seq) + ")",
                        "lower --seq-len");
        config = init->config();
    }
    if (!init && eot != static_cast<token_id>(config.vocab - 1))  // --vocab pads: name the tokenizer's end of text
        config.bos_token_id = config.eos_token_id = eot;
    config.validate();
    const std::string data_path = a.data.empty() ? default_corpus(a.out).string() : a.data;
    const auto records = data::read_records(data_path, data::parse_record_format(a.format));
    data::data_options data_options{.seq_len = a.seq_len, .val_fraction = a.val_fraction};
    data_options.chat = examples::chat_template_for(a.chat_template, records.kind, tokenizer_spec, from, tok);
    if (data_options.chat) print_line("chat template: " + data_options.chat->summary());
    data::prepared_data prepared = std::visit([&](const auto& t) { return data::prepare_data(records, t, data_options); }, tok);
    print_line("data: " + data_path + ": " + prepared.stats.summary());

    train_options o = examples::train_options_of(a);

    const std::size_t device_bytes = examples::default_device_bytes<B>();
    // The machine planned for: --machine's file, or this one's calibration at the model's shapes
    // (q/k/v, output, gate, up and down projections; attention over the query heads).
    calibration_options shapes;
    {
        const std::size_t rows = a.batch * a.seq_len, C = config.n_embd, HS = config.head_size();
        const std::size_t A = config.n_head * HS, KV = config.kv_heads() * HS, H = config.hidden;
        shapes.gemms = {{rows, A + 2 * KV, C}, {rows, C, A}, {rows, H, C}, {rows, H, C}, {rows, C, H}};
        shapes.attention = {.batch = a.batch, .seq = a.seq_len, .channels = A, .heads = config.n_head};
    }
    const machine_rates machine = examples::machine_for_plan<B>(a, shapes);
    const tier_bytes budgets = examples::budgets_for(a, machine, default_budgets(device_bytes, a.storage_dir));
    // No --storage-dir: the backend's own temporary directory, removed at the end.
    const tier_options tiers{.device_bytes = budgets.device, .host_bytes = budgets.host,
                             .storage_bytes = budgets.storage, .storage_dir = a.storage_dir,
                             .io = examples::io_options_of(a)};
    run_context ctx{a, data_path, prepared, eot, tokenizer_spec, {}, config};
    if (init && a.resume.empty()) ctx.init = &*init;

    const auto owned = examples::make_backends<B>(tiers, a.gpus);
    const std::vector<B*> backends = examples::pointers_of(owned);
    {
        // the Llama model, or (--lora-rank) its LoRA model: adapters on the frozen base
        auto plan_and_train = [&]<class Model>(const Model& model) {
            const plan_request request{.model = footprint_of<B>(model, a.batch, a.seq_len), .accum = a.accum,
                                       .activations = examples::activation_policy_of(a), .budgets = budgets,
                                       .where = placement_from_string(a.placement),
                                       .state_on_storage = a.moments == "storage" || a.state_on_storage,
                                       .links = examples::links_of(machine), .optimizer = o.optimizer,
                                       .ranks = a.gpus, .rates = examples::search_rates(a, cuda, machine)};
            const memory_plan p = plan(request);
            const std::optional<step_prediction> prediction = examples::predicted_step(p, request, machine);
            if (prediction) ctx.predicted_step_seconds = prediction->seconds;
            o.activations = p.kept();  // the blocks whose activations the plan keeps on the device
            o.homes = p.trainer_homes();  // each group's tier (streamed plans)
            o.slots = p.slots;
            print_line(fmt::format(
                "model: Llama architecture, {} layers, {} heads{}{}, {} channels, hidden {}, vocab {}, context {}: {} "
                "parameters; {}",
                config.n_layer, config.n_head,
                config.n_kv_head ? fmt::format(" ({} key/value)", config.kv_heads()) : std::string(),
                config.head_dim ? fmt::format(" of {}", config.head_dim) : std::string(), config.n_embd, config.hidden,
                config.vocab, config.max_seq, config.parameter_count(), examples::batch_and_backend<B>(a)));
            if constexpr (is_lora<Model>) print_line(lora_line(model, a));
            if (const std::string math = examples::gemm_math_line<B>(a.tf32); !math.empty()) print_line(math);
            print_line(examples::machine_line(a, machine));
            print_line(plan_table(p));
            if (prediction) std::cout << prediction_table(*prediction) << std::flush;
            if (a.plan_only) return 0;
            ctx.streamed = p.where == placement::streamed;
            return train_on(backends, p, model, o, ctx);
        };
        if (a.lora_rank > 0) return plan_and_train(llama::make_llama_lora_model<B>(config, lora_config_of(a)));
        return plan_and_train(llama::make_llama_model<B>(config));
    }
}

int run_train(const train_args& a) {
    const bool cuda = examples::use_cuda(a.device, "strata-llama");
    return examples::with_backend(cuda, [&]<class B>() { return train_with<B>(a); });
}

// ---- sample ----

struct sample_args {
    std::string checkpoint, prompt, device = "auto";
    std::size_t tokens = 200, top_k = 40;
    double temperature = 0.8;
    std::uint64_t seed = 42;
    int threads = 0;  // CPU threads for matrix products (0: all)
};

int run_sample(const sample_args& a) {
    examples::check_threads(a.threads);
    if (a.threads > 0) Eigen::setNbThreads(a.threads);
    const fs::path checkpoint = examples::resolve_checkpoint(a.checkpoint);
    auto loaded = llama::load_llama_files(checkpoint);
    const auto tok = make_tokenizer(tokenizer_of_checkpoint(checkpoint));
    // the prompt begins a document as in training (an hf tokenizer's BOS first, as tokenizer(text))
    const std::vector<token_id> prompt = std::visit([&](const auto& t) { return data::encode_document(t, a.prompt); }, tok);
    const sample_options so{.max_new_tokens = a.tokens, .temperature = a.temperature, .top_k = a.top_k,
                            .seed = a.seed, .bos = std::visit([](const auto& t) { return t.eot_id(); }, tok)};
    // The weights and the KV cache live in the device tier (the tiers' default budgets).
    return on_backend(examples::use_cuda(a.device, "strata-llama"), tier_options{}, [&]<class B>(B& backend) {
        const auto model = llama::make_llama_model<B>(loaded.config);
        generator<llama::llama_model<B>> gen(backend, model, loaded.blocks);
        loaded.blocks = {};  // uploaded: the host copy is not needed again
        const auto ids = gen.generate(prompt, so);
        std::cout << a.prompt << std::visit([&](const auto& t) { return t.decode(ids); }, tok) << std::endl;
        return 0;
    });
}

// ---- export ----

struct export_args {
    std::string checkpoint, out, dtype = "float32";
};

int run_export(const export_args& a) {
    const fs::path checkpoint = examples::resolve_checkpoint(a.checkpoint);
    llama::export_llama_directory(checkpoint, a.out, llama::parse_weight_dtype(a.dtype));
    print_line("exported " + checkpoint.string() + " to " + a.out + " (" + a.dtype +
               " weights, config.json, tokenizer files; no optimizer or trainer state)");
    return 0;
}

// ---- score ----

struct score_args {
    std::string checkpoint, prompt, tokens_file, out, device = "auto";
    bool overwrite = false;
};

// Token ids written as integers separated by white space or commas (a JSON list too).
std::vector<token_id> read_token_ids(const fs::path& file) {
    std::ifstream in(file);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (char& c : text)
        if (c == ',' || c == '[' || c == ']') c = ' ';
    std::istringstream words(text);
    std::vector<token_id> ids;
    std::string word;
    while (words >> word) {
        std::size_t used = 0;
        long long id = -1;
        try {
            id = std::stoll(word, &used);
        } catch (const std::exception&) {
        }
        if (used != word.size() || id < 0 || id > std::numeric_limits<token_id>::max())
            throw error("--tokens-file '" + file.string() + "': '" + word + "' is not a token id",
                        "write non-negative integers separated by spaces or commas");
        ids.push_back(static_cast<token_id>(id));
    }
    return ids;
}

int run_score(const score_args& a) {
    const fs::path checkpoint = examples::resolve_checkpoint(a.checkpoint);
    const std::vector<examples::named_path> inputs{{"--checkpoint", checkpoint}, {"--tokens-file", a.tokens_file}};
    for (const auto& [flag, in] : inputs)
        if (!in.empty() && examples::is_within(a.out, in))
            throw error("--out '" + a.out + "' is the " + flag + " input '" + in.string() +
                            "' or inside it: writing it would change the input",
                        "pick another path for --out");
    if (fs::is_directory(a.out)) throw error("--out '" + a.out + "' is a directory", "pass a file path for --out");
    if (fs::exists(a.out) && !a.overwrite)
        throw error("--out '" + a.out + "' exists: refusing to overwrite it", "pick another path, or pass --overwrite");
    auto loaded = llama::load_llama_files(checkpoint);
    std::vector<token_id> ids;
    if (!a.tokens_file.empty()) {
        ids = read_token_ids(a.tokens_file);
    } else {
        const auto tok = make_tokenizer(tokenizer_of_checkpoint(checkpoint));
        ids = std::visit([&](const auto& t) { return data::encode_document(t, a.prompt); }, tok);
    }
    if (ids.size() > loaded.config.max_seq)
        throw error(std::to_string(ids.size()) + " tokens to score; the model's context is " +
                        std::to_string(loaded.config.max_seq),
                    "score a shorter text (at most max_position_embeddings tokens)");
    const tier_options tiers{.device_bytes = physical_memory_bytes() / 4, .host_bytes = physical_memory_bytes() / 4};
    return on_backend(examples::use_cuda(a.device, "strata-llama"), tiers, [&]<class B>(B& backend) {
        const auto model = llama::make_scoring_model<B>(loaded.config, ids.size());
        generator<llama::llama_model<B>> gen(backend, model, loaded.blocks);
        const auto scores = llama::score_tokens(gen, ids, loaded.config.vocab);
        llama::write_scores(a.out, scores);
        print_line("scored " + std::to_string(ids.size()) + " tokens: mean next-token loss " + format_loss(scores.loss) +
                   "; input_ids, logits (" + std::to_string(ids.size()) + " x " + std::to_string(loaded.config.vocab) +
                   ") and loss written to " + a.out);
        return 0;
    });
}


}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"strata-llama: train a small Llama-style model with strata, and sample from it", "strata-llama"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("strata-llama ") + STRATA_VERSION);
    using examples::count_in, examples::real_in, examples::unsigned_number;

    train_args t;
    auto* train = app.add_subcommand("train", "train a Llama-style model on a text or JSON file");
    // strata-llama's own options (its data, its kind of model directory, the Llama shape beyond layers,
    // heads and channels, its projections) around the ones strata-gpt shares
    train->add_option("--data", t.data, "training data: plain text, JSONL/JSON {\"text\"}, instruction records or chat records {\"messages\"} (default: the licence texts of /usr/share/common-licenses)")->check(CLI::ExistingFile);
    train->add_option("--init-from", t.init_from, "start from the weights of a Llama directory (strata-llama's or Hugging Face's); its config gives the model's shape")->check(CLI::ExistingDirectory);
    examples::add_train_options(*train, t);
    train->add_option("--n-kv-head", t.n_kv_head, "key/value heads, grouped-query attention (0: --n-head; must divide --n-head)")->capture_default_str()->check(count_in(0, 4096));
    train->add_option("--head-dim", t.head_dim, "channels per attention head, even (0: n-embd / n-head, which must then be even)")->capture_default_str()->check(count_in(0, 1L << 16));
    train->add_option("--vocab", t.vocab, "embedding rows (0: the tokenizer's; more pads the vocabulary, e.g. 128256 for Llama 3's shape)")->capture_default_str()->check(count_in(0, 1L << 24));
    train->add_flag("--untied-head", t.untied_head, "an LM head of its own (lm_head.weight) instead of the token embedding's transpose");
    train->add_flag("--qkv-bias", t.qkv_bias, "biases on the q, k and v projections (Qwen2's; written back as Qwen2ForCausalLM)");
    train->add_option("--hidden", t.hidden, "SwiGLU width (0: 8/3 n-embd rounded up to a multiple of 8)")->capture_default_str()->check(count_in(0, 1L << 22));
    train->add_option("--rope-theta", t.rope_theta, "rotary embedding base")->capture_default_str()->check(real_in(1e-6, 1e12));
    train->add_option("--norm-eps", t.norm_eps, "RMSNorm epsilon")->capture_default_str()->check(real_in(1e-30, 1));
    train->add_option("--moments", t.moments, "home of the optimizer's state (AdamW's moments, SGD's momentum) when streamed: host or storage (files in --storage-dir; the same as --state-on-storage)")->check(CLI::IsMember({"host", "storage"}))->capture_default_str();
    train->add_option("--lora-targets", t.lora_targets, "LoRA: comma-separated projections to adapt (qkv_proj: q|k|v fused, o_proj, gate_proj, up_proj, down_proj); without --init-from the base is randomly initialized in the shape of the flags")->capture_default_str();

    sample_args s;
    auto* sample = app.add_subcommand("sample", "generate text from a checkpoint");
    sample->add_option("--checkpoint", s.checkpoint, "checkpoint directory (strata-llama's OUT/step-N, OUT for its latest, or a Hugging Face Llama directory)")->required()->check(CLI::ExistingDirectory);
    sample->add_option("--prompt", s.prompt, "text to continue")->required();
    sample->add_option("--max-new-tokens,--tokens", s.tokens, "tokens to generate")->capture_default_str()->check(count_in(0, 1L << 24));
    sample->add_option("--temperature", s.temperature, "softmax temperature (0: greedy)")->capture_default_str()->check(real_in(0, 1e6));
    sample->add_option("--top-k", s.top_k, "sample among the k most likely tokens (0: all)")->capture_default_str()->check(count_in(0, 1L << 24));
    sample->add_option("--seed", s.seed, "sampling seed")->capture_default_str()->check(unsigned_number);
    sample->add_option("--device", s.device, "cpu, cuda or auto")->capture_default_str();
    sample->add_option("--threads", s.threads, "CPU threads for matrix products (0: all)")->check(count_in(0, 1 << 20));

    export_args e;
    auto* exporter = app.add_subcommand("export", "write a checkpoint as a Hugging Face directory (weights, config, tokenizer) that transformers loads");
    exporter->add_option("--checkpoint", e.checkpoint, "checkpoint directory (OUT/step-N, or OUT for its latest)")->required()->check(CLI::ExistingDirectory);
    exporter->add_option("--out", e.out, "the directory to write (must not exist, or be empty)")->required();
    exporter->add_option("--dtype", e.dtype, "dtype of the exported weights (bfloat16 and float16: rounded to nearest even)")->check(CLI::IsMember({"float32", "bfloat16", "float16"}))->capture_default_str();

    score_args sc;
    auto* scorer = app.add_subcommand("score", "write a checkpoint's logits and mean next-token loss on a text or token ids to a safetensors file");
    scorer->add_option("--checkpoint", sc.checkpoint, "checkpoint directory (OUT/step-N, OUT for its latest, or a Hugging Face Llama directory)")->required()->check(CLI::ExistingDirectory);
    auto* score_prompt = scorer->add_option("--prompt", sc.prompt, "text to score (the checkpoint's tokenizer encodes it)");
    auto* score_ids = scorer->add_option("--tokens-file", sc.tokens_file, "token ids to score: integers separated by spaces or commas")->check(CLI::ExistingFile);
    score_prompt->excludes(score_ids);
    scorer->add_option("--out", sc.out, "safetensors file to write: input_ids (T), logits (T, V), loss")->required();
    scorer->add_option("--device", sc.device, "cpu, cuda or auto")->capture_default_str();
    scorer->add_flag("--overwrite", sc.overwrite, "replace an existing --out file");

    if (const auto code = examples::parse_command_line(app, argc, argv)) return *code;
    try {
        if (train->parsed()) {
            if (!t.config.empty()) examples::apply_config_file(*train, t.config);
            t.tokenizer_given = train->count("--tokenizer") > 0;
            if (!t.resume.empty())  // the model's shape and tokenizer come from the checkpoint's own files
                examples::apply_resume_defaults(*train, t, [](const fs::path&, const nlohmann::json&) { return nlohmann::json::object(); });
            return run_train(t);
        }
        if (exporter->parsed()) return run_export(e);
        if (scorer->parsed()) {
            if (!scorer->count("--prompt") && !scorer->count("--tokens-file"))
                throw error("score needs --prompt TEXT or --tokens-file FILE", "give one of them");
            return run_score(sc);
        }
        return run_sample(s);
    } catch (const std::exception& e) {
        std::cerr << "strata-llama: error: " << e.what() << std::endl;
        if (const auto hint = examples::flag_hint_for(e); !hint.empty()) std::cerr << "strata-llama: " << hint << std::endl;
        return 1;
    }
}
