// strata-llama's commands other than train (commands.hpp): sample, export, score.
#include "commands.hpp"

#include "../common/backends.hpp"       // on_backend
#include "../common/example_cli.hpp"    // make_tokenizer, use_cuda, tokenizer_of_checkpoint
#include "../common/run_checks.hpp"     // check_threads
#include "../common/run_directory.hpp"  // resolve_checkpoint, is_within, named_path
#include "hf_export.hpp"                // llama::export_llama_directory, parse_weight_dtype
#include "llama_model.hpp"              // llama::llama_model, load_llama_files
#include "score.hpp"                    // llama::make_scoring_model, score_tokens, write_scores
#ifdef STRATA_WITH_CUDA
#include "llama_ops_cuda.hpp"  // llama_ops<cuda_backend>, ops<cuda_backend>
#include <strata/cuda.hpp>     // cuda_backend
#endif

#include <strata/data/tokenize.hpp>    // data::encode_document
#include <strata/report/progress.hpp>  // format_loss
#include <strata/strata.hpp>           // generator, sample_options, tier_options, physical_memory_bytes

#include <Eigen/Core>  // Eigen::setNbThreads

#include <exception>   // std::exception
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ifstream
#include <iostream>    // std::cout
#include <iterator>    // std::istreambuf_iterator
#include <limits>      // std::numeric_limits
#include <sstream>     // std::istringstream
#include <string>      // std::string
#include <variant>     // std::visit
#include <vector>      // std::vector

namespace strata::llama_cli {

namespace fs = std::filesystem;

namespace {

using examples::make_tokenizer;
using examples::on_backend;
using examples::tokenizer_of_checkpoint;

using examples::print_line;


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

}  // namespace

// ---- sample ----

int run_sample(const sample_args& a) {
    examples::check_threads(a.threads);
    if (a.threads > 0) Eigen::setNbThreads(a.threads);
    const fs::path checkpoint = examples::resolve_checkpoint(a.checkpoint);
    auto loaded = llama::load_llama_files(checkpoint);
    const auto tok = make_tokenizer(tokenizer_of_checkpoint(checkpoint));
    // the prompt begins a document as in training (an hf tokenizer's BOS first, as tokenizer(text))
    const std::vector<token_id> prompt = std::visit([&](const auto& t) { return data::encode_document(t, a.prompt); }, tok);
    const sample_options so{.max_new_tokens = a.max_new_tokens, .temperature = a.temperature, .top_k = a.top_k,
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

int run_export(const export_args& a) {
    const fs::path checkpoint = examples::resolve_checkpoint(a.checkpoint);
    llama::export_llama_directory(checkpoint, a.out, llama::parse_weight_dtype(a.dtype));
    print_line("exported " + checkpoint.string() + " to " + a.out + " (" + a.dtype +
               " weights, config.json, tokenizer files; no optimizer or trainer state)");
    return 0;
}

// ---- score ----

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


}  // namespace strata::llama_cli
