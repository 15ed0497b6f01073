// Moved to <strata/nn/gpt2_config.hpp> (the GPT-2 block is configured by it); this header stays so that
// existing includes keep working.
#pragma once

#include <strata/nn/gpt2_config.hpp>
