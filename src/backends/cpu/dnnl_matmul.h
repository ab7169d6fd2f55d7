// Observability of the cpu MatMul / Gemm kernel (dnnl_matmul.cpp) for tests: which paths ran.
#pragma once

#include <cstdint>

namespace ferry::cpu {

/// Process-wide count of products run split over N columns, one single-thread oneDNN primitive per
/// thread (constant f32 weights, 2+ threads, at most FERRY_MATMUL_NSPLIT rows; default 128).
int64_t matmul_column_split_runs();

}  // namespace ferry::cpu
