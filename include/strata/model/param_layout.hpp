// Moved to <strata/tensor/param_layout.hpp> (a group's parameter layout is a tensor layout, used by layers); this header stays so that
// existing includes keep working.
#pragma once

#include <strata/tensor/param_layout.hpp>
