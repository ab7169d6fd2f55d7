// The one matrix-multiply loop of the reference kernels (Conv, ConvTranspose, Gemm, MatMul).
// Plain i-k-j order with a contiguous inner loop over j (the compiler vectorizes it at -O3),
// blocked over j and k so the touched part of B stays in cache. No threads, no intrinsics.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ferry {
namespace gemm_detail {

// c[j] = (((c[j] + a0*b0[j]) + a1*b1[j]) + a2*b2[j]) + a3*b3[j]: four k steps in increasing order.
template <typename T>
inline void axpy4(int64_t n, T* __restrict c, const T* __restrict b0, const T* __restrict b1,
                  const T* __restrict b2, const T* __restrict b3, T a0, T a1, T a2, T a3) {
  for (int64_t j = 0; j < n; ++j) c[j] = static_cast<T>(c[j] + a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j]);
}

template <typename T>
inline void axpy1(int64_t n, T* __restrict c, const T* __restrict b0, T a0) {
  for (int64_t j = 0; j < n; ++j) c[j] = static_cast<T>(c[j] + a0 * b0[j]);
}

}  // namespace gemm_detail

/// C = A * B for an M x K matrix A and a K x N matrix B (C is overwritten, not accumulated into).
///   A(i, k) is A[i * a_rs + k * a_cs]   (any layout: a_rs = K, a_cs = 1 row-major; a_rs = 1, a_cs = M transposed)
///   B(k, j) is B[k * ldb + j]           (rows contiguous)
///   C(i, j) is C[i * ldc + j]
/// Every C(i, j) is the sum over k = 0..K-1 in increasing order, accumulated in T (float for f32).
/// K == 0 gives zeros. C must not overlap A or B.
template <typename T>
void gemm_ref(int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_cs, const T* B, int64_t ldb, T* C,
              int64_t ldc) {
  constexpr int64_t kBlockN = 512;  // columns of C kept hot while a block of B rows streams by
  constexpr int64_t kBlockK = 128;  // rows of B per block: kBlockK x kBlockN elements stay in L2
  for (int64_t j0 = 0; j0 < N; j0 += kBlockN) {
    const int64_t nb = std::min(kBlockN, N - j0);
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc + j0, C + i * ldc + j0 + nb, T(0));
    for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
      const int64_t k1 = std::min(K, k0 + kBlockK);
      for (int64_t i = 0; i < M; ++i) {
        T* c = C + i * ldc + j0;
        const T* a = A + i * a_rs;
        const T* b = B + j0;
        int64_t k = k0;
        for (; k + 4 <= k1; k += 4)
          gemm_detail::axpy4<T>(nb, c, b + k * ldb, b + (k + 1) * ldb, b + (k + 2) * ldb, b + (k + 3) * ldb,
                                a[k * a_cs], a[(k + 1) * a_cs], a[(k + 2) * a_cs], a[(k + 3) * a_cs]);
        for (; k < k1; ++k) gemm_detail::axpy1<T>(nb, c, b + k * ldb, a[k * a_cs]);
      }
    }
  }
}

}  // namespace ferry
