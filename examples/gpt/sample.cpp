// strata-gpt sample (sample.hpp): a checkpoint's model continues a prompt.
#include "sample.hpp"

#include <strata/data/tokenize.hpp>     // data::encode_document
#include <strata/model/generator.hpp>   // generator, sample_options: the KV cache on either backend
#include <strata/model/gpt.hpp>         // gpt_model, load_model_files
#include <strata/nn/cpu_ops.hpp>        // ops<cpu_backend>
#include <strata/strata.hpp>            // cpu_backend, tier_options
#ifdef STRATA_WITH_CUDA
#include <strata/cuda.hpp>  // cuda_backend, ops<cuda_backend>
#endif

#include "../common/backends.hpp"       // on_backend
#include "../common/example_cli.hpp"    // make_tokenizer, tokenizer_of_checkpoint, use_cuda
#include "../common/run_checks.hpp"     // check_threads
#include "../common/run_directory.hpp"  // resolve_checkpoint

#include <Eigen/Core>  // Eigen::setNbThreads

#include <filesystem>  // std::filesystem::path
#include <iostream>    // std::cout
#include <variant>     // std::visit
#include <vector>      // std::vector

namespace strata::gpt_cli {

int run_sample(const sample_args& a) {
    examples::check_threads(a.threads);
    if (a.threads > 0) Eigen::setNbThreads(a.threads);
    const std::filesystem::path checkpoint = examples::resolve_checkpoint(a.checkpoint);
    auto loaded = load_model_files<float>(checkpoint);
    auto tok = examples::make_tokenizer(examples::tokenizer_of_checkpoint(checkpoint));
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
    const std::vector<token_id> ids = examples::on_backend(cuda, tier_options{}, [&]<class B>(B& backend) {
        const gpt_model<float, B> model(loaded.config);  // its blocks decode with a KV cache
        generator<gpt_model<float, B>> gen(backend, model, loaded.blocks);
        loaded.blocks = {};  // uploaded: the host copy is not needed again
        return gen.generate(prompt, so);
    });
    std::cout << a.prompt << std::visit([&](const auto& t) { return t.decode(ids); }, tok) << std::endl;
    return 0;
}

}  // namespace strata::gpt_cli
