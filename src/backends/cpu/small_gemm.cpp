// Skinny matrix products for the recurrent kernels; see small_gemm.h.
//
// AVX-512 path: an MR x (16 * NV) block of C stays in registers (MR * NV <= 16 accumulators) while
// k runs over the rows of B; each B vector loaded is used MR times. N tails use masked loads/stores.
#include "backends/cpu/small_gemm.h"

#include "backends/cpu/vec_math.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry::cpu {
namespace {

FERRY_VEC void small_gemm_generic(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                                  int64_t ldb, const float* bias, float* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m) {
    float* c = C + m * ldc;
    for (int64_t n = 0; n < N; ++n) c[n] = bias ? bias[n] : 0.f;
    for (int64_t k = 0; k < K; ++k) {
      const float a = A[m * lda + k];
      const float* b = B + k * ldb;
      for (int64_t n = 0; n < N; ++n) c[n] += a * b[n];
    }
  }
}

#if defined(__x86_64__)

template <int MR, int NV>
__attribute__((target("avx512f"))) void block_avx512(int64_t N, int64_t K, const float* A, int64_t lda,
                                                     const float* B, int64_t ldb, const float* bias, float* C,
                                                     int64_t ldc) {
  constexpr int64_t kWidth = 16 * NV;
  int64_t n = 0;
  for (; n + kWidth <= N; n += kWidth) {
    __m512 acc[MR][NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const __m512 b0 = bias ? _mm512_loadu_ps(bias + n + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) acc[m][v] = b0;
    }
    const float* bk = B + n;
    for (int64_t k = 0; k < K; ++k, bk += ldb) {
      __m512 bv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(bk + 16 * v);
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const __m512 a = _mm512_set1_ps(A[m * lda + k]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(a, bv[v], acc[m][v]);
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + m * ldc + n + 16 * v, acc[m][v]);
  }
  for (; n < N; n += 16) {
    const __mmask16 mask = N - n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (N - n)) - 1);
    __m512 acc[MR];
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(mask, bias + n) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) acc[m] = b0;
    const float* bk = B + n;
    for (int64_t k = 0; k < K; ++k, bk += ldb) {
      const __m512 bv = _mm512_maskz_loadu_ps(mask, bk);
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(A[m * lda + k]), bv, acc[m]);
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) _mm512_mask_storeu_ps(C + m * ldc + n, mask, acc[m]);
  }
}

void small_gemm_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                       const float* bias, float* C, int64_t ldc) {
  for (int64_t m0 = 0; m0 < M;) {
    const int64_t rows = M - m0;
    const float* a = A + m0 * lda;
    float* c = C + m0 * ldc;
    switch (rows >= 8 ? 8 : rows) {
      case 1: block_avx512<1, 8>(N, K, a, lda, B, ldb, bias, c, ldc); break;
      case 2: block_avx512<2, 8>(N, K, a, lda, B, ldb, bias, c, ldc); break;
      case 3: block_avx512<3, 4>(N, K, a, lda, B, ldb, bias, c, ldc); break;
      case 4: block_avx512<4, 4>(N, K, a, lda, B, ldb, bias, c, ldc); break;
      case 5: block_avx512<5, 2>(N, K, a, lda, B, ldb, bias, c, ldc); break;
      case 6: block_avx512<6, 2>(N, K, a, lda, B, ldb, bias, c, ldc); break;
      case 7: block_avx512<7, 2>(N, K, a, lda, B, ldb, bias, c, ldc); break;
      default: block_avx512<8, 2>(N, K, a, lda, B, ldb, bias, c, ldc); break;
    }
    m0 += rows >= 8 ? 8 : rows;
  }
}

#endif

}  // namespace

void small_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                const float* bias, float* C, int64_t ldc) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) {
    small_gemm_avx512(M, N, K, A, lda, B, ldb, bias, C, ldc);
    return;
  }
#endif
  small_gemm_generic(M, N, K, A, lda, B, ldb, bias, C, ldc);
}

}  // namespace ferry::cpu
