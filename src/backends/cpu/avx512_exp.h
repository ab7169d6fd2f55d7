// 1 + e^-x for 16 floats on AVX-512, shared by SiLU (x / that: dnnl_conv.cpp) and the LSTM's
// sigmoid (1 / that: rnn.cpp).
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

}  // namespace ferry::cpu
#endif
