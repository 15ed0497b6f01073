// docs/layers.md's tutorial, exactly as the document has it: CMake extracts the code blocks it
// marks <!-- tutorial_test: ... --> (tests/layers/extract_tutorial.cmake) into layers_tutorial.inc,
// compiled here. Steps 1 and 2 write the layer, step 3 tests it with the harness, step 4 trains it
// in a model, resident and streamed, and checks the same numbers. Only what the document leaves to
// the reader is written here: the data, batches(step). A compile error in the document is reported
// at its line in docs/layers.md.
#include <strata/data/loader.hpp>  // data::batch

#include <doctest/doctest.h>  // TEST_CASE (the document's steps 3 and 4)

#include <cstddef>  // std::size_t
#include <vector>   // std::vector

namespace {

// Step 4's data: sequences that count up by one, modulo the vocabulary of 16, learnable from the
// current token alone; one micro-batch of 4 x 8 tokens per step.
std::vector<strata::data::batch> batches(int step) {
    const std::size_t B = 4, T = 8, V = 16;
    strata::data::batch b;
    for (std::size_t i = 0; i < B; ++i)
        for (std::size_t t = 0; t < T; ++t) {
            const auto token = static_cast<strata::token_id>((i * 5 + t + static_cast<std::size_t>(step)) % V);
            b.inputs.push_back(token);
            b.targets.push_back(static_cast<strata::token_id>((token + 1) % V));
        }
    return {b};
}

}  // namespace

#include "layers_tutorial.inc"  // generated from docs/layers.md
