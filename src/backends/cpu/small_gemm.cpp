// Skinny matrix products for the recurrent kernels; see small_gemm.h.
//
// AVX-512 path: an MR x (16 * NV) block of C stays in registers (MR * NV <= 16 accumulators) while
// k runs down a panel of B; each B vector loaded is used MR times. Up to 4 rows take a whole panel
// (NV = 4), 5 to 8 rows take it in two halves (NV = 2). Column tails use masked stores (the panel is
// zero-padded, so loads need no mask).
#include "backends/cpu/small_gemm.h"

#include <algorithm>

#include "backends/cpu/vec_math.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry::cpu {
namespace {

constexpr int64_t kP = PanelMatrix::kPanel;

FERRY_VEC void small_gemm_generic(int64_t M, const float* A, int64_t lda, const PanelMatrix& B, const float* bias,
                                  float* C, int64_t ldc, int64_t n_begin, int64_t N) {
  const int64_t K = B.rows;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n0 = n_begin; n0 < N; n0 += kP) {
      const float* panel = B.data.data() + (n0 / kP) * K * kP;
      float acc[kP] = {};
      for (int64_t k = 0; k < K; ++k) {
        const float a = A[m * lda + k];
        for (int64_t j = 0; j < kP; ++j) acc[j] += a * panel[k * kP + j];
      }
      for (int64_t j = 0; j < kP && n0 + j < N; ++j) C[m * ldc + n0 + j] = acc[j] + (bias ? bias[n0 + j] : 0.f);
    }
}

#if defined(__x86_64__)

// Rows [0, MR) of A times columns [n0, n0 + 16 * NV) of B (`bp`: that column block's top, row stride kP).
template <int MR, int NV>
__attribute__((target("avx512f"))) void block_avx512(int64_t K, int64_t width, const float* A, int64_t lda,
                                                     const float* bp, const float* bias, float* C, int64_t ldc) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const int64_t left = width - 16 * v;
    const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : left > 0 ? __mmask16((1u << left) - 1) : __mmask16(0);
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(mask, bias + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) acc[m][v] = b0;
  }
  for (int64_t k = 0; k < K; ++k, bp += kP) {
    __m512 bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(bp + 16 * v);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m512 a = _mm512_set1_ps(A[m * lda + k]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(a, bv[v], acc[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const int64_t left = width - 16 * v;
    if (left <= 0) break;
    const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) _mm512_mask_storeu_ps(C + m * ldc + 16 * v, mask, acc[m][v]);
  }
}

template <int MR>
void rows_avx512(const float* A, int64_t lda, const PanelMatrix& B, const float* bias, float* C, int64_t ldc,
                 int64_t n_begin, int64_t N) {
  const int64_t K = B.rows;
  for (int64_t n0 = n_begin; n0 < N; n0 += kP) {
    const float* panel = B.data.data() + (n0 / kP) * K * kP;
    const float* bn = bias ? bias + n0 : nullptr;
    if constexpr (MR <= 4) {
      block_avx512<MR, 4>(K, std::min(kP, N - n0), A, lda, panel, bn, C + n0, ldc);
    } else {
      for (int64_t h = 0; h < kP && n0 + h < N; h += 32)
        block_avx512<MR, 2>(K, std::min<int64_t>(32, N - n0 - h), A, lda, panel + h, bn ? bn + h : nullptr,
                            C + n0 + h, ldc);
    }
  }
}

void small_gemm_avx512(int64_t M, const float* A, int64_t lda, const PanelMatrix& B, const float* bias, float* C,
                       int64_t ldc, int64_t n_begin, int64_t n_end) {
  for (int64_t m0 = 0; m0 < M;) {
    const int64_t rows = std::min<int64_t>(8, M - m0);
    const float* a = A + m0 * lda;
    float* c = C + m0 * ldc;
    switch (rows) {
      case 1: rows_avx512<1>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
      case 2: rows_avx512<2>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
      case 3: rows_avx512<3>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
      case 4: rows_avx512<4>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
      case 5: rows_avx512<5>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
      case 6: rows_avx512<6>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
      case 7: rows_avx512<7>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
      default: rows_avx512<8>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
    }
    m0 += rows;
  }
}

// The same blocks on AVX2 + FMA (8 lanes, 16 ymm registers): MR <= 3 rows x 32 columns (NV = 4) or
// MR <= 6 rows x 16 columns (NV = 2). Each element is its bias, then its products by FMA with k
// ascending, as block_avx512: the same bits. The compiler-vectorized loop (no FMA in its AVX2 clone)
// took 27% of the BiLSTM's time at 1 thread on a Zen 3 core (perf).
template <int MR, int NV>
__attribute__((target("avx2,fma"))) void block_avx2(int64_t K, int64_t width, const float* A, int64_t lda,
                                                    const float* bp, const float* bias, float* C, int64_t ldc) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i mask[NV];
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const int64_t left = std::clamp<int64_t>(width - 8 * v, 0, 8);
    mask[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), lane);
    const __m256 b0 = bias ? _mm256_maskload_ps(bias + 8 * v, mask[v]) : _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) acc[m][v] = b0;
  }
  for (int64_t k = 0; k < K; ++k, bp += kP) {
    __m256 bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(bp + 8 * v);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m256 a = _mm256_broadcast_ss(A + m * lda + k);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm256_fmadd_ps(a, bv[v], acc[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    if (width - 8 * v <= 0) break;
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) _mm256_maskstore_ps(C + m * ldc + 8 * v, mask[v], acc[m][v]);
  }
}

template <int MR>
void rows_avx2(const float* A, int64_t lda, const PanelMatrix& B, const float* bias, float* C, int64_t ldc,
               int64_t n_begin, int64_t N) {
  const int64_t K = B.rows;
  constexpr int NV = MR <= 3 ? 4 : 2;
  for (int64_t n0 = n_begin; n0 < N; n0 += kP) {
    const float* panel = B.data.data() + (n0 / kP) * K * kP;
    for (int64_t h = 0; h < kP && n0 + h < N; h += 8 * NV)
      block_avx2<MR, NV>(K, std::min<int64_t>(8 * NV, N - n0 - h), A, lda, panel + h,
                         bias ? bias + n0 + h : nullptr, C + n0 + h, ldc);
  }
}

void small_gemm_avx2(int64_t M, const float* A, int64_t lda, const PanelMatrix& B, const float* bias, float* C,
                     int64_t ldc, int64_t n_begin, int64_t n_end) {
  for (int64_t m0 = 0; m0 < M;) {
    const int64_t rows = std::min<int64_t>(6, M - m0);
    const float* a = A + m0 * lda;
    float* c = C + m0 * ldc;
    switch (rows) {
      case 1: rows_avx2<1>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
      case 2: rows_avx2<2>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
      case 3: rows_avx2<3>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
      case 4: rows_avx2<4>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
      case 5: rows_avx2<5>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
      default: rows_avx2<6>(a, lda, B, bias, c, ldc, n_begin, n_end); break;
    }
    m0 += rows;
  }
}

#endif

}  // namespace

PanelMatrix pack_panels(int64_t K, int64_t N, const float* src, int64_t stride_k, int64_t stride_n) {
  PanelMatrix p;
  p.rows = K;
  p.cols = N;
  const int64_t panels = (N + kP - 1) / kP;
  p.data.assign(static_cast<size_t>(panels * K * kP), 0.f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) p.data[(n / kP) * K * kP + k * kP + n % kP] = src[k * stride_k + n * stride_n];
  return p;
}

void unpack_panels(const PanelMatrix& p, float* dst, int64_t stride_k, int64_t stride_n) {
  const int64_t K = p.rows, N = p.cols;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) dst[k * stride_k + n * stride_n] = p.data[static_cast<size_t>((n / kP) * K * kP + k * kP + n % kP)];
}

void small_gemm(int64_t M, const float* A, int64_t lda, const PanelMatrix& B, const float* bias, float* C,
                int64_t ldc) {
  small_gemm_panels(M, A, lda, B, bias, C, ldc, 0, (B.cols + kP - 1) / kP);
}

void small_gemm_panels(int64_t M, const float* A, int64_t lda, const PanelMatrix& B, const float* bias, float* C,
                       int64_t ldc, int64_t panel_begin, int64_t panel_end) {
  const int64_t n_begin = std::min(panel_begin * kP, B.cols), n_end = std::min(panel_end * kP, B.cols);
  if (n_begin >= n_end) return;
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) {
    small_gemm_avx512(M, A, lda, B, bias, C, ldc, n_begin, n_end);
    return;
  }
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) {
    small_gemm_avx2(M, A, lda, B, bias, C, ldc, n_begin, n_end);
    return;
  }
#endif
  small_gemm_generic(M, A, lda, B, bias, C, ldc, n_begin, n_end);
}

}  // namespace ferry::cpu
