// Observability of the cpu MatMul / Gemm kernel (dnnl_matmul.cpp) for tests: which paths ran.
#pragma once

#include <cstdint>

namespace ferry::cpu {

/// Process-wide count of products run split over N columns, one single-thread oneDNN primitive per
/// thread (constant f32 weights, 2+ threads, at most FERRY_MATMUL_NSPLIT rows; default 128).
int64_t matmul_column_split_runs();

/// Process-wide count of the weight forms the kernel made that pack_counts() does not count: plain
/// (padded) copies in oneDNN's layout, per-thread column blocks, RowGemm's packings.
int64_t matmul_weight_packings();

}  // namespace ferry::cpu
