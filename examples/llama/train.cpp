// strata-llama train (train.hpp): from the flags to the plan; the training itself (train_on, one
// unit per backend and model: train_model.hpp) is compiled apart.
#include "train.hpp"
#include "train_model.hpp"  // run_context, train_on, is_lora

#include "../common/backends.hpp"       // with_backend, make_backends, default_device_bytes
#include "../common/example_cli.hpp"    // make_tokenizer, use_cuda
#include "../common/machine_cli.hpp"    // machine_for_plan, budgets_for, predicted_step
#include "../common/run_checks.hpp"     // check_resumed_options
#include "../common/run_directory.hpp"  // prepare_run_directory, check_outputs
#include "../common/train_run.hpp"      // check_run_flags, train_options_of
#include "llama_lora_model.hpp"  // llama::make_llama_lora_model, parse_lora_targets
#include "llama_model.hpp"       // llama::make_llama_model, llama_config, llama_weights

#include <strata/data/records.hpp>     // data::read_records, parse_record_format
#include <strata/data/tokenize.hpp>    // data::prepare_data
#include <strata/io/json_file.hpp>     // read_json_file
#include <strata/plan/planner.hpp>     // plan, footprint_of, default_budgets
#include <strata/report/progress.hpp>  // format_loss
#include <strata/strata.hpp>           // cpu_backend, tier_options

#include <Eigen/Core>  // Eigen::setNbThreads

#include <algorithm>   // std::sort
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ifstream
#include <iostream>    // std::cout
#include <optional>    // std::optional
#include <sstream>     // std::ostringstream
#include <string>      // std::string
#include <variant>     // std::visit
#include <vector>      // std::vector

namespace strata::llama_cli {

namespace fs = std::filesystem;

llama::llama_lora_config lora_config_of(const train_args& a) {
    return {.rank = a.lora_rank, .alpha = a.lora_alpha > 0 ? a.lora_alpha : 2.0 * static_cast<double>(a.lora_rank),
            .targets = llama::parse_lora_targets(a.lora_targets)};
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

namespace {

using examples::make_tokenizer;
using examples::tokenizer_of_checkpoint;

using examples::print_line;

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
    examples::apply_backend_flags<B>(a.tf32, a.gpus);
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

}  // namespace

int run_train(const train_args& a) {
    const bool cuda = examples::use_cuda(a.device, "strata-llama");
    return examples::with_backend(cuda, [&]<class B>() { return train_with<B>(a); });
}
}  // namespace strata::llama_cli
