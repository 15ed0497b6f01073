// Moved to <strata/core/rng.hpp> (the generator is core, used by layers and models); this header stays so that
// existing includes keep working.
#pragma once

#include <strata/core/rng.hpp>
