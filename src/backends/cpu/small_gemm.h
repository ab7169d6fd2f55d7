// Skinny matrix products for the recurrent kernels (rnn.cpp): C = A * B + bias with few rows in A
// (the batch) and B a constant (a recurrent weight) packed once into column panels, so each step
// streams it from cache sequentially (a plain row-major B with a power-of-two row stride thrashes the
// cache sets: measured 2-3x slower). oneDNN's per-call overhead is larger than the product itself
// at these sizes, so this is a register-blocked AVX-512 loop (chosen at run time; plain loops elsewhere).
#pragma once

#include <cstdint>
#include <vector>

namespace ferry::cpu {

/// A [K, N] matrix stored as ceil(N / kPanel) panels of [K, kPanel] floats (the last one zero-padded).
struct PanelMatrix {
  static constexpr int64_t kPanel = 64;
  int64_t rows = 0, cols = 0;
  std::vector<float> data;
};

/// Packs the [K, N] matrix whose element (k, n) is src[k * stride_k + n * stride_n].
PanelMatrix pack_panels(int64_t K, int64_t N, const float* src, int64_t stride_k, int64_t stride_n);

/// The inverse of pack_panels: element (k, n) of `panels` into dst[k * stride_k + n * stride_n].
void unpack_panels(const PanelMatrix& panels, float* dst, int64_t stride_k, int64_t stride_n);

/// C[m, n] = bias[n] + sum_k A[m, k] * B[k, n] for m < M, n < B.cols, k < B.rows; A and C row-major
/// with leading dims lda / ldc. `bias` may be null (zero). C must not alias A.
void small_gemm(int64_t M, const float* A, int64_t lda, const PanelMatrix& B, const float* bias, float* C, int64_t ldc);

/// small_gemm on the columns of panels [panel_begin, panel_end) only (each PanelMatrix::kPanel
/// columns, the last one possibly fewer): C's other columns are not touched. Disjoint panel ranges
/// may run on different threads at once.
void small_gemm_panels(int64_t M, const float* A, int64_t lda, const PanelMatrix& B, const float* bias, float* C,
                       int64_t ldc, int64_t panel_begin, int64_t panel_end);

}  // namespace ferry::cpu
