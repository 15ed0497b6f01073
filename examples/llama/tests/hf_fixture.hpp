// What the Hugging Face parity tests of the Llama example share (hf_llama_fixture_test.cpp,
// hf_llama_trajectory_test.cpp): where the fixtures made by tools/make_llama_fixture.py live, a
// fixture directory as strata's loader reads it with torch's reference beside it, the comparison
// that prints the largest difference and the first value pairs, a model's blocks in HF's names,
// and a model's forward logits on a batch (forward_logits).
#pragma once

#include "../llama_model.hpp"  // llama::load_llama_files, hf_tensors_of, detail::to_hf
#include "support/parity.hpp"    // test::compare, relative, forward_logits (tests/support)

#include <strata/data/loader.hpp>       // data::batch
#include <strata/io/safetensors.hpp>    // safetensors_file
#include <strata/strata.hpp>            // tiered_tensor, copy_async, kept_activations, group_use
#include <strata/train/checkpoint.hpp>  // host_blocks

#include <algorithm>   // std::max, std::min
#include <cmath>       // std::abs
#include <cstddef>     // std::size_t
#include <cstdint>     // std::int32_t
#include <cstdio>      // std::snprintf
#include <filesystem>  // std::filesystem
#include <span>        // std::span
#include <string>      // std::string
#include <vector>      // std::vector

namespace llama_fixture {

using namespace strata;
using test::compare, test::difference, test::relative;  // support/parity.hpp
namespace fs = std::filesystem;

inline fs::path fixtures_dir() {
#ifdef STRATA_SOURCE_DIR
    return fs::path(STRATA_SOURCE_DIR) / "tests" / "fixtures" / "hf_llama";
#else
    return fs::path(__FILE__).parent_path().parent_path().parent_path().parent_path() / "tests" / "fixtures" / "hf_llama";
#endif
}

// The HF directory as strata's loader reads it, and torch's reference beside it.
struct fixture : test::reference {
    fs::path dir;
    llama::loaded_llama hf;

    explicit fixture(const fs::path& d) : reference(d / "reference.safetensors"), dir(d), hf(llama::load_llama_files(d)) {}
};

inline constexpr const char* family_shapes[] = {"llama3_l2_h6_kv2_c42_d8_f60_v71", "qwen2_l2_h6_kv2_c36_f52_v73",
                                                "mistral_l2_h4_kv1_c32_f56_v61"};

inline fs::path family_dir() { return fixtures_dir().parent_path() / "hf_llama_family"; }

// Every HF tensor of a model's blocks (weights or gradients in the model's layout), in HF's name,
// shape and layout (q, k, v split; nn.Linear (out, in)): visit(hf_tensor, values).
template <class Model, class Visit>
void for_each_hf_tensor(const Model& model, const std::vector<std::vector<float>>& blocks, Visit&& visit) {
    for (std::size_t g = 0; g < model.group_count(); ++g)
        for (const auto& entry : model.groups()[g].entries()) {
            const float* p = blocks[g].data() + entry.offset;
            for (const llama::hf_tensor& hf : llama::hf_tensors_of(model, g, entry))
                visit(hf, hf.transposed ? llama::detail::to_hf(p, entry.spec.shape.extents()[1], hf)
                                        : std::vector<float>(p + hf.column, p + hf.column + shape(hf.shape).numel()));
        }
}

// strata's logits of `model` with `blocks` as weights on a batch (support/parity.hpp).
template <class B>
std::vector<float> forward_logits(B& backend, const llama::llama_model<B>& model, const host_blocks<float>& blocks,
                                  const data::batch& b, std::size_t batch, std::size_t seq) {
    return test::forward_logits(backend, model, blocks, b, batch, seq, kept_activations::none());
}

}  // namespace llama_fixture
