// The GPT-2 block as a Layer (nn/gpt2_block.hpp): the contract fits the model strata already
// trains. The harness on it, on every backend this build has.
#include "support/backends.hpp"  // STRATA_TESTS_WITH_CUDA

#include <strata/model/gpt.hpp>              // gpt_config, gpt_model
#include <strata/nn/gpt2_block.hpp>          // gpt2_block
#include <strata/nn/cpu_ops.hpp>             // ops<cpu_backend>
#include <strata/nn/layer.hpp>               // check_layer, check_decodes, sizes_of
#include <strata/testing/layer_harness.hpp>  // check_gradients, check_checkpointing, check_backend_parity, check_decoding

#include <doctest/doctest.h>  // TEST_CASE, CHECK_MESSAGE, MESSAGE

#include <algorithm>  // std::max
#include <cstddef>    // std::size_t
#include <vector>     // std::vector

namespace gpt2_block_test {  // this file's names: an area's files compile as one unit (unity build)

using namespace strata;

namespace {

static_assert(check_layer<gpt2_block<float, cpu_backend>>());
static_assert(overwrites_dinp_v<gpt2_block<float, cpu_backend>>);  // its residual gradient lives in dinp
static_assert(check_decodes<gpt2_block<float, cpu_backend>>());
static_assert(check_recomputes_part<gpt2_block<float, cpu_backend>>());  // keeps attention's output when recomputing

const gpt_config tiny{.vocab_size = 11, .max_seq = 8, .n_layer = 1, .n_head = 2, .n_embd = 6};

TEST_CASE("GPT-2 block as a Layer: every gradient matches FP64 central differences") {
    const auto r = testing::check_gradients<gpt2_block>(tiny, 2, 5);
    CHECK_MESSAGE(r.ok(), r.describe());
    CHECK(r.tensors.size() == 13);  // 12 parameter tensors and the input
}

TEST_CASE("GPT-2 block as a Layer: checkpointed == plain bitwise, dinp = null leaves the parameter gradients") {
    const auto f = testing::check_checkpointing<gpt2_block>(tiny, 2, 5);
    CHECK_MESSAGE(f.ok(), f.describe());
}

TEST_CASE("GPT-2 block as a Layer: the same parameter block as gpt_model's block groups") {
    gpt_model<float, cpu_backend> model(tiny);
    const auto layout = param_layout::of<float>(gpt2_block<float, cpu_backend>::params(tiny));
    CHECK(layout.numel() == model.groups()[model.block_group(0)].numel());
    CHECK(sizes_of<gpt2_block<float, cpu_backend>>(tiny, 2, 5).params == layout.numel());
}

TEST_CASE("GPT-2 block decodes with a KV cache: a prompt, single rows and a rewind give forward's rows") {
    // 3 heads of 4, 9 positions: the prompt is 4 rows, then 5 single rows, then rows 1 .. 8 again.
    const gpt_config c{.vocab_size = 11, .max_seq = 9, .n_layer = 1, .n_head = 3, .n_embd = 12};
    const auto d = testing::check_decoding<gpt2_block, double>(c, 9);
    CHECK_MESSAGE(d.ok(), d.describe());
    CHECK(d.tensors.size() == 7);
    const auto f = testing::check_decoding<gpt2_block, float>(c, 9);
    CHECK_MESSAGE(f.ok(), f.describe());
    MESSAGE("largest |decode - forward| / max |forward|: double " << d.worst_error() << ", float " << f.worst_error());
}

#ifdef STRATA_TESTS_WITH_CUDA
TEST_CASE("GPT-2 block decodes with a KV cache on CUDA: forward's rows") {
    const gpt_config c{.vocab_size = 11, .max_seq = 150, .n_layer = 1, .n_head = 3, .n_embd = 12};
    // 150 positions: the kernel's keys run in chunks of 128, so a row sees two chunks.
    const auto d = testing::check_decoding<gpt2_block, float, cuda_backend>(c, 150);
    if (d.skipped) strata::test::skip(d.describe());
    CHECK_MESSAGE(d.ok(), d.describe());
    MESSAGE("largest |decode - forward| / max |forward| on CUDA: " << d.worst_error());
}

TEST_CASE("GPT-2 block as a Layer: CUDA against the CPU, and checkpointing on CUDA") {
    const auto p = testing::check_backend_parity<gpt2_block, cuda_backend>(tiny, 2, 5);
    if (p.skipped) strata::test::skip(p.describe());
    CHECK_MESSAGE(p.ok(), p.describe());
    const auto c = testing::check_checkpointing<gpt2_block, float, cuda_backend>(tiny, 2, 5);
    if (c.skipped) strata::test::skip(c.describe());
    CHECK_MESSAGE(c.ok(), c.describe());
}
#endif

}  // namespace

}  // namespace gpt2_block_test
