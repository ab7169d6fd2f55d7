// Moved to ops/shape_inference.h (it needs only the op registry); include that instead.
#pragma once
#include "ops/shape_inference.h"  // IWYU pragma: export
