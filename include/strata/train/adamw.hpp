// Moved to <strata/optim/adamw.hpp> (AdamW's math lives with the optimizer); this header stays so that
// existing includes keep working.
#pragma once

#include <strata/optim/adamw.hpp>
