// Skinny matrix products for the recurrent kernels (rnn.cpp): C = A * B + bias with few rows in A
// (the batch) and B resident in cache (a recurrent weight, packed once). oneDNN's per-call overhead
// is larger than the product itself at these sizes, so this is a register-blocked AVX-512 loop
// (chosen at run time; a plain vectorizable loop elsewhere).
#pragma once

#include <cstdint>

namespace ferry::cpu {

/// C[m, n] = bias[n] + sum_k A[m, k] * B[k, n] for m < M, n < N, all row-major with leading
/// dims lda / ldb / ldc. `bias` may be null (zero). C must not alias A or B.
void small_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                const float* bias, float* C, int64_t ldc);

}  // namespace ferry::cpu
