// See activation_in_place.h.
#include "backends/cpu/activation_in_place.h"

#include <cstring>

#include "backends/cpu/exp_neg.h"
#include "backends/cpu/vec_math.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry::cpu {
namespace {

#if defined(__x86_64__)
// SiLU of 16 floats: x / (1 + e^-x), with e^-x = 2^v, v = -x log2(e) = n + f (n = round(v), |f| <= 1/2,
// f from two FMAs with log2(e) in two parts, so it carries no error from v's rounding), 2^f a
// degree-5 polynomial (fitted to 2^f's relative error on [-1/2, 1/2]: 1.0e-7) and 2^n by scalef; one
// division. x is clamped above at 104 only (2^-150 rounds to 0, so +inf gives inf); far below,
// 2^n overflows to inf and x / inf is -0, as x * sigmoid(x) is (NaN for -inf, as vec::sigmoid gives).
// 11 vector ops on the FMA ports against 15 for the Cephes e^x form it replaced (range reduction in
// ln 2, a degree-7 polynomial, clamps on both sides and a fix-up below them): 64K floats in cache,
// 1 thread, 1.55 ns per 16 floats against 2.36 (bench/silu_probe.cpp, best of 7 x 50 calls); max
// relative error 2.4e-7 against double precision on a sweep of [-100, 100] (1.4e-7 before).
__attribute__((target("avx512f"))) inline __m512 silu16(__m512 x) {
  return _mm512_div_ps(x, one_plus_exp_neg16(x));  // exp_neg.h
}

__attribute__((target("avx512f"))) void silu_avx512(float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, silu16(_mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, silu16(_mm512_maskz_loadu_ps(m, y + i)));
  }
}

// silu16 on 8 lanes (one_plus_exp_neg8: the same bits). The compiler-vectorized loop below it was
// left scalar by gcc 12 in the AVX2 clone: EfficientNet-B0 at 1 thread on a Zen 3 core (AVX2, no
// AVX-512) spent 64% of its time there (perf), 54.6 ms CPU per run against ONNX Runtime's 16.8.
__attribute__((target("avx2,fma"))) inline __m256 silu8(__m256 x) { return _mm256_div_ps(x, one_plus_exp_neg8(x)); }

__attribute__((target("avx2,fma"))) void silu_avx2(float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(y + i)));
  if (i < n) {
    float t[8] = {};
    std::memcpy(t, y + i, static_cast<size_t>(n - i) * sizeof(float));
    _mm256_storeu_ps(t, silu8(_mm256_loadu_ps(t)));
    std::memcpy(y + i, t, static_cast<size_t>(n - i) * sizeof(float));
  }
}
#endif

}  // namespace

FERRY_VEC void activate_in_place(float* y, int64_t n, ActKind kind, float alpha, float beta) {
  switch (kind) {
    case ActKind::kNone: return;
    case ActKind::kRelu: for (int64_t i = 0; i < n; ++i) y[i] = y[i] < 0.f ? 0.f : y[i]; return;  // NaN stays NaN
    case ActKind::kLeakyRelu: for (int64_t i = 0; i < n; ++i) y[i] = y[i] >= 0.f ? y[i] : alpha * y[i]; return;
    case ActKind::kClip: for (int64_t i = 0; i < n; ++i) y[i] = vec::clampf(y[i], alpha, beta); return;
    case ActKind::kSigmoid: for (int64_t i = 0; i < n; ++i) y[i] = vec::sigmoid(y[i]); return;
    case ActKind::kHardSigmoid: for (int64_t i = 0; i < n; ++i) y[i] = vec::clampf(alpha * y[i] + beta, 0.f, 1.f); return;
    case ActKind::kHardSwish:
      for (int64_t i = 0; i < n; ++i) y[i] = y[i] * vec::clampf(y[i] * (1.f / 6.f) + 0.5f, 0.f, 1.f);
      return;
    case ActKind::kTanh: for (int64_t i = 0; i < n; ++i) y[i] = vec::tanh(y[i]); return;
    case ActKind::kSilu:
#if defined(__x86_64__)
      if (__builtin_cpu_supports("avx512f")) return silu_avx512(y, n);
      if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return silu_avx2(y, n);
#endif
      for (int64_t i = 0; i < n; ++i) y[i] = y[i] * vec::sigmoid(y[i]);
      return;
    case ActKind::kGelu: for (int64_t i = 0; i < n; ++i) y[i] = vec::gelu_erf(y[i]); return;
    case ActKind::kGeluTanh: for (int64_t i = 0; i < n; ++i) y[i] = vec::gelu_tanh(y[i]); return;
  }
}

}  // namespace ferry::cpu
