// The LSTM gate rows on AVX-512 and AVX2 + FMA; see rnn_gates.h. The compiler-vectorized rows
// (lstm_row) and the rest of the kernel are in rnn.cpp.
#include "backends/cpu/rnn_gates.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/exp_neg.h"
#include "common/env_switch.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry::cpu {
namespace {

// Spans never overlap (restrict), as rnn.cpp's.
using In = const float* __restrict;
using Out = float* __restrict;

#if defined(__x86_64__)
// ---- LSTM gate equations on AVX-512, below on AVX2 + FMA (FERRY_RNN_AVX512_GATES=0: lstm_row instead) ----
// The compiler-vectorized lstm_row spends most of its time in the masks and blends of vec::exp's
// range checks and the infinite clip; here sigmoid is 1 / (1 + 2^n p(f)) with scalef (exp_neg.h, shared with SiLU
// in activation_in_place.cpp), tanh vec::tanh's rational form with min/max clamps, and the recurrent product
// already carries both biases (Wb + Rb), so a gate is x + g. BiLSTM gates, 8 rows x H 128 x 100
// steps, 1 thread: 36-52 ns per 16 floats -> 14-18 (bench/lstm_gates_probe.cpp);
// max abs error of h and c against double precision 5.1e-7 (lstm_row: 4.8e-7).

// 1 / (1 + e^-x): 0 where e^-x overflows (x below about -88.7), 1 for large x; NaN stays NaN.
__attribute__((target("avx512f"))) inline __m512 sigmoid16(__m512 x) {
  return _mm512_div_ps(_mm512_set1_ps(1.f), one_plus_exp_neg16(x));  // exp_neg.h
}

// vec::tanh's rational approximation (saturating beyond |x| = 7.9; NaN stays NaN).
__attribute__((target("avx512f"))) inline __m512 tanh16(__m512 x) {
  const __m512 lim = _mm512_set1_ps(7.90531110763549805f);
  x = _mm512_maskz_max_ps(0xFFFF, _mm512_set1_ps(-7.90531110763549805f), _mm512_maskz_min_ps(0xFFFF, lim, x));
  const __m512 x2 = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-2.76076847742355e-16f);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.00018790482477e-13f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-8.60467152213735e-11f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(5.12229709037114e-08f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(1.48572235717979e-05f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(6.37261928875436e-04f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(4.89352455891786e-03f));
  p = _mm512_mul_ps(p, x);
  __m512 q = _mm512_set1_ps(1.19825839466702e-06f);
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(1.18534705686654e-04f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(2.26843463243900e-03f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(4.89352518554385e-03f));
  return _mm512_div_ps(p, q);
}

__attribute__((target("avx512f"))) inline __m512 gate16(__mmask16 m, In x, In g, int64_t off) {
  return _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + off), _mm512_maskz_loadu_ps(m, g + off));
}

template <bool kClip>
__attribute__((target("avx512f"))) inline __m512 clamp16(__m512 v, __m512 lo, __m512 hi) {
  if constexpr (kClip) return _mm512_maskz_max_ps(0xFFFF, lo, _mm512_maskz_min_ps(0xFFFF, hi, v));
  return v;
}

// lstm_row with g = H(t-1) * R^T + Wb + Rb. kPeep: peepholes pi / po / pf; kClip: clip the gate inputs.
template <bool kPeep, bool kClip>
__attribute__((target("avx512f"))) void lstm_row16(int64_t H, const float* x_, const float* g_, const float* pi_,
                                                   const float* po_, const float* pf_, float clip, bool input_forget,
                                                   float* c_, float* h_) {
  In x = x_, g = g_, pi = pi_, po = po_, pf = pf_;
  Out c = c_, h = h_;
  const __m512 hi = _mm512_set1_ps(clip), lo = _mm512_set1_ps(-clip), one = _mm512_set1_ps(1.f);
  for (int64_t j = 0; j < H; j += 16) {
    const __mmask16 m = H - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (H - j)) - 1);
    const __m512 cv = _mm512_maskz_loadu_ps(m, c + j);
    __m512 xi = gate16(m, x, g, j), xf = gate16(m, x, g, 2 * H + j);
    if constexpr (kPeep) {
      xi = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, pi + j), cv, xi);
      xf = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, pf + j), cv, xf);
    }
    const __m512 ig = sigmoid16(clamp16<kClip>(xi, lo, hi));
    const __m512 fg = input_forget ? _mm512_sub_ps(one, ig) : sigmoid16(clamp16<kClip>(xf, lo, hi));
    const __m512 cc = tanh16(clamp16<kClip>(gate16(m, x, g, 3 * H + j), lo, hi));
    const __m512 cn = _mm512_fmadd_ps(fg, cv, _mm512_mul_ps(ig, cc));
    __m512 xo = gate16(m, x, g, H + j);
    if constexpr (kPeep) xo = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, po + j), cn, xo);
    const __m512 og = sigmoid16(clamp16<kClip>(xo, lo, hi));
    _mm512_mask_storeu_ps(c + j, m, cn);
    _mm512_mask_storeu_ps(h + j, m, _mm512_mul_ps(og, tanh16(cn)));
  }
}

// ---- the same gate equations on AVX2 + FMA, 8 lanes: the same operations, so the same bits ----------
// gcc 12 leaves lstm_row's AVX2 clone scalar: on a Zen 3 core (no AVX-512) it took 33% of the BiLSTM's
// time at 1 thread (perf). The tail of H goes through masked loads and stores (zeros in the masked lanes).

__attribute__((target("avx2,fma"))) inline __m256 sigmoid8(__m256 x) {
  return _mm256_div_ps(_mm256_set1_ps(1.f), one_plus_exp_neg8(x));  // exp_neg.h
}

__attribute__((target("avx2,fma"))) inline __m256 tanh8(__m256 x) {
  const __m256 lim = _mm256_set1_ps(7.90531110763549805f);
  x = _mm256_max_ps(_mm256_set1_ps(-7.90531110763549805f), _mm256_min_ps(lim, x));
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-2.76076847742355e-16f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.00018790482477e-13f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-8.60467152213735e-11f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(5.12229709037114e-08f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.48572235717979e-05f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(6.37261928875436e-04f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(4.89352455891786e-03f));
  p = _mm256_mul_ps(p, x);
  __m256 q = _mm256_set1_ps(1.19825839466702e-06f);
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(1.18534705686654e-04f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(2.26843463243900e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(4.89352518554385e-03f));
  return _mm256_div_ps(p, q);
}

__attribute__((target("avx2,fma"))) inline __m256 gate8(__m256i m, In x, In g, int64_t off) {
  return _mm256_add_ps(_mm256_maskload_ps(x + off, m), _mm256_maskload_ps(g + off, m));
}

template <bool kClip>
__attribute__((target("avx2,fma"))) inline __m256 clamp8(__m256 v, __m256 lo, __m256 hi) {
  if constexpr (kClip) return _mm256_max_ps(lo, _mm256_min_ps(hi, v));
  return v;
}

template <bool kPeep, bool kClip>
__attribute__((target("avx2,fma"))) void lstm_row8(int64_t H, const float* x_, const float* g_, const float* pi_,
                                                   const float* po_, const float* pf_, float clip, bool input_forget,
                                                   float* c_, float* h_) {
  In x = x_, g = g_, pi = pi_, po = po_, pf = pf_;
  Out c = c_, h = h_;
  const __m256 hi = _mm256_set1_ps(clip), lo = _mm256_set1_ps(-clip), one = _mm256_set1_ps(1.f);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t j = 0; j < H; j += 8) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(8, H - j))), lane);
    const __m256 cv = _mm256_maskload_ps(c + j, m);
    __m256 xi = gate8(m, x, g, j), xf = gate8(m, x, g, 2 * H + j);
    if constexpr (kPeep) {
      xi = _mm256_fmadd_ps(_mm256_maskload_ps(pi + j, m), cv, xi);
      xf = _mm256_fmadd_ps(_mm256_maskload_ps(pf + j, m), cv, xf);
    }
    const __m256 ig = sigmoid8(clamp8<kClip>(xi, lo, hi));
    const __m256 fg = input_forget ? _mm256_sub_ps(one, ig) : sigmoid8(clamp8<kClip>(xf, lo, hi));
    const __m256 cc = tanh8(clamp8<kClip>(gate8(m, x, g, 3 * H + j), lo, hi));
    const __m256 cn = _mm256_fmadd_ps(fg, cv, _mm256_mul_ps(ig, cc));
    __m256 xo = gate8(m, x, g, H + j);
    if constexpr (kPeep) xo = _mm256_fmadd_ps(_mm256_maskload_ps(po + j, m), cn, xo);
    const __m256 og = sigmoid8(clamp8<kClip>(xo, lo, hi));
    _mm256_maskstore_ps(c + j, m, cn);
    _mm256_maskstore_ps(h + j, m, _mm256_mul_ps(og, tanh8(cn)));
  }
}
#endif

}  // namespace

LstmGatesFn lstm_gates_avx512(bool peepholes, bool clip) {
#if defined(__x86_64__)
  static const bool on = __builtin_cpu_supports("avx512f") && env_switch_on("FERRY_RNN_AVX512_GATES");
  if (on) {
    return peepholes ? (clip ? lstm_row16<true, true> : lstm_row16<true, false>)
                     : (clip ? lstm_row16<false, true> : lstm_row16<false, false>);
  }
#endif
  return nullptr;
}

LstmGatesFn lstm_gates_avx2(bool peepholes, bool clip) {
#if defined(__x86_64__)
  static const bool on = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         env_switch_on("FERRY_RNN_AVX512_GATES");
  if (on) {
    return peepholes ? (clip ? lstm_row8<true, true> : lstm_row8<true, false>)
                     : (clip ? lstm_row8<false, true> : lstm_row8<false, false>);
  }
#endif
  return nullptr;
}

}  // namespace ferry::cpu
