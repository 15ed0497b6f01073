// strata-gpt train (train.hpp): from the flags to the plan; the training itself (train_model, one
// unit per backend and model: train_model.hpp) is compiled apart.
#include "train.hpp"
#include "train_model.hpp"  // run_context, train_model

#include <strata/data/records.hpp>            // data::read_records, parse_record_format
#include <strata/data/tokenize.hpp>           // data::prepare_data, prepared_data
#include <strata/io/json_file.hpp>            // read_json_file
#include <strata/model/gpt.hpp>               // gpt_model
#include <strata/nn/cpu_ops.hpp>              // ops<cpu_backend>
#include <strata/plan/planner.hpp>            // plan, plan_request, footprint_of, placement_from_string
#include <strata/report/progress.hpp>         // format_loss
#include <strata/strata.hpp>                  // cpu_backend, tier_options
#ifdef STRATA_WITH_CUDA
#include <strata/cuda.hpp>  // cuda_backend, ops<cuda_backend>: the CUDA trainers
#endif

#include "../common/backends.hpp"       // with_backend, make_backends, default_device_bytes, apply_backend_flags
#include "../common/example_cli.hpp"    // make_tokenizer, use_cuda
#include "../common/machine_cli.hpp"    // check_machine_flags, machine_for_plan, budgets_for, predicted_step
#include "../common/run_checks.hpp"     // check_resumed_options
#include "../common/run_directory.hpp"  // prepare_run_directory, check_outputs, inputs_of
#include "../common/train_run.hpp"      // check_run_flags, train_options_of
#include "../lora/lora_model.hpp"       // LoRA: gpt2_lora_model, adapters

#include <Eigen/Core>  // Eigen::setNbThreads

#include <algorithm>    // std::min
#include <filesystem>   // std::filesystem
#include <iostream>     // std::cout
#include <memory>       // std::unique_ptr
#include <type_traits>  // std::is_same_v
#include <optional>     // std::optional
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <variant>      // std::visit
#include <vector>       // std::vector

namespace strata::gpt_cli {

namespace fs = std::filesystem;

namespace {

using examples::make_tokenizer;
using examples::tokenizer_of_checkpoint;

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

using examples::print_line;

// "model: GPT-2 architecture, 4 layers, ...; batch 8 x 128 x accum 1, CPU backend"
template <class B>
std::string model_line(const gpt_config& c, const train_args& a) {
    return fmt::format("model: GPT-2 architecture, {} layers, {} heads, {} channels, vocab {}, context {}: {} parameters; {}",
                       c.n_layer, c.n_head, c.n_embd, c.vocab_size, c.max_seq, c.parameter_count(),
                       examples::batch_and_backend<B>(a));
}

// One backend per rank (--gpus), the GPT or (LoRA) its LoRA model, the plan's trainer.
template <class B>
int train_on(const tier_options& tiers, const memory_plan& p, const gpt_config& config, const train_options& o,
             run_context& ctx) {
    const auto owned = examples::make_backends<B>(tiers, ctx.a.gpus);
    const std::vector<B*> backends = examples::pointers_of(owned);
    if (ctx.a.lora_rank > 0)
        return train_model(backends, p, lora::make_gpt2_lora_model<B>(config, lora_config_of(ctx.a)), o, ctx);
    return train_model(backends, p, gpt_model<float, B>(config), o, ctx);
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
    examples::check_run_flags(a);
    examples::check_machine_flags(a);
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
    examples::check_resumed_options(a, state);
}

// The train command on backend B (--device's).
template <class B>
int train_with(const train_args& a) {
    constexpr bool cuda = !std::is_same_v<B, cpu_backend>;
    examples::apply_backend_flags<B>(a.tf32, a.gpus);
    check_consistency(a);
    // --out: writable, no file of the user's where the run writes, locked for the run's life, no
    // checkpoint the run would replace (unless --overwrite, at its first save); the outputs destroy
    // no input and no file strata did not write. All before the data is read, let alone step 1.
    std::optional<examples::run_lock> lock;
    if (!a.plan_only) {
        examples::check_outputs(a);
        lock.emplace(examples::prepare_run_directory(a));
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
    } else if (!a.resume.empty() && !a.tokenizer_given) {
        tokenizer_spec = tokenizer_of_checkpoint(a.resume);  // the run's own, kept in its checkpoints
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
    train_options o = examples::train_options_of(a);

    // The plan: placement and bytes per tier, refused before anything is allocated.
    const fs::path storage_dir = a.storage_dir.empty() ? fs::temp_directory_path() / ("strata-" + std::to_string(::getpid()))
                                                       : fs::path(a.storage_dir);
    const std::size_t default_device = examples::default_device_bytes<B>();
    // The machine planned for: --machine's file, or this one's calibration at the model's shapes.
    calibration_options shapes;
    shapes.gemms = gpt_block_gemms(a.batch * a.seq_len, config.n_embd);
    shapes.attention = {.batch = a.batch, .seq = a.seq_len, .channels = config.n_embd, .heads = config.n_head};
    const machine_rates machine = examples::machine_for_plan<B>(a, shapes);
    const tier_bytes budgets = examples::budgets_for(a, machine, default_budgets(default_device, storage_dir));
    plan_request request{.accum = a.accum, .activations = examples::activation_policy_of(a), .budgets = budgets,
                         .where = placement_from_string(a.placement), .state_on_storage = a.state_on_storage};
    request.optimizer = o.optimizer;
    request.ranks = a.gpus;
    request.links = examples::links_of(machine);
    request.rates = examples::search_rates(a, cuda, machine);  // the fitting plan with the least predicted step
    request.model = footprint_for<B>(a, config);
    const memory_plan p = plan(request);
    const std::optional<step_prediction> prediction = examples::predicted_step(p, request, machine);
    o.activations = p.kept();  // the blocks whose activations the plan keeps on the device
    o.homes = p.trainer_homes();  // each group's tier (streamed plans)
    o.slots = p.slots;
    print_line(model_line<B>(config, a));
    if (a.lora_rank > 0) {
        const auto lc = lora_config_of(a);
        print_line("LoRA: rank " + std::to_string(lc.rank) + ", alpha " + format_loss(lc.alpha) + " on " + a.lora_targets +
                   "; every other weight frozen (base: " + a.init_from + ")");
    }
    if (const std::string math = examples::gemm_math_line<B>(a.tf32); !math.empty()) print_line(math);
    print_line(examples::machine_line(a, machine));
    print_line(plan_table(p));
    if (prediction) std::cout << prediction_table(*prediction) << std::flush;
    if (a.plan_only) return 0;

    const tier_options tiers{.device_bytes = budgets.device, .host_bytes = budgets.host, .storage_bytes = budgets.storage,
                             .storage_dir = a.storage_dir.empty() ? fs::path() : storage_dir,
                             .io = examples::io_options_of(a)};
    run_context ctx{a, prepared, eot, p.where == placement::streamed, {}, config, tokenizer_spec};
    if (init) ctx.init_blocks = std::move(init->blocks);
    if (prediction) ctx.predicted_step_seconds = prediction->seconds;
    return train_on<B>(tiers, p, config, o, ctx);
}

}  // namespace

int run_train(const train_args& a) {
    const bool cuda = examples::use_cuda(a.device, "strata-gpt");
    return examples::with_backend(cuda, [&]<class B>() { return train_with<B>(a); });
}

}  // namespace strata::gpt_cli
