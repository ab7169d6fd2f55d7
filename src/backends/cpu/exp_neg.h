// 1 + e^-x for 16 floats on AVX-512 and for 8 on AVX2 + FMA (the same bits), shared by SiLU (x /
// that: dnnl_conv.cpp) and the LSTM's sigmoid (1 / that: rnn.cpp).
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

namespace ferry::cpu {

// e^-x = 2^v, v = -x log2(e) = n + f (n = round(v), |f| <= 1/2, f from two FMAs with log2(e) in two
// parts, so it carries no error from v's rounding), 2^f a degree-5 polynomial (fitted to 2^f's
// relative error on [-1/2, 1/2]: 1.0e-7) and 2^n by scalef. x is clamped above at 104 only (2^-150
// rounds to 0, so the result is 1 for +inf); far below, 2^n overflows to inf. NaN stays NaN (min
// returns its second operand, x, when x is NaN). The maskz forms throughout: gcc 12 warns that the
// unmasked ones read an undefined vector.
__attribute__((target("avx512f"))) inline __m512 one_plus_exp_neg16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 xc = _mm512_maskz_min_ps(0xFFFF, _mm512_set1_ps(104.f), x);
  const __m512 n = _mm512_maskz_roundscale_ps(0xFFFF, _mm512_mul_ps(xc, _mm512_set1_ps(-1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_fnmsub_ps(xc, _mm512_set1_ps(1.4426950216293335f), n);  // -x log2e_hi - n (one rounding)
  f = _mm512_fnmadd_ps(xc, _mm512_set1_ps(1.925963033500011e-08f), f);      // - x log2e_lo
  __m512 p = _mm512_set1_ps(1.3308821944519877e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.67151764780283e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550582334399223e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022242426872253f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931470632553101f));
  p = _mm512_fmadd_ps(p, f, one);
  return _mm512_add_ps(_mm512_maskz_scalef_ps(0xFFFF, p, n), one);
}

// one_plus_exp_neg16's operations on 8 lanes, without scalef: p 2^n is (p 2^a) 2^b with a = floor(n / 2),
// b = n - a, each power built in the exponent field. n lies in [-150, ...] (x <= 104); clamped above at
// 200, where p 2^n is inf either way. p 2^a is exact (p in [0.7, 1.5], a in [-75, 100]), so the one
// rounding is the last product's, as scalef's: the same bits as one_plus_exp_neg16 (NaN: p is NaN).
__attribute__((target("avx2,fma"))) inline __m256 one_plus_exp_neg8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 xc = _mm256_min_ps(_mm256_set1_ps(104.f), x);  // x when x is NaN, as above
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(-1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 f = _mm256_fnmsub_ps(xc, _mm256_set1_ps(1.4426950216293335f), n);
  f = _mm256_fnmadd_ps(xc, _mm256_set1_ps(1.925963033500011e-08f), f);
  __m256 p = _mm256_set1_ps(1.3308821944519877e-3f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.67151764780283e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550582334399223e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.24022242426872253f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.6931470632553101f));
  p = _mm256_fmadd_ps(p, f, one);
  const __m256i ni =
      _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-150.f)), _mm256_set1_ps(200.f)));
  const __m256i a = _mm256_srai_epi32(ni, 1), b = _mm256_sub_epi32(ni, a);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 pa = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(a, bias), 23));
  const __m256 pb = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(b, bias), 23));
  return _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, pa), pb), one);
}

}  // namespace ferry::cpu
#endif
