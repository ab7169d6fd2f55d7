// Micro-benchmark of the LSTM gate equations of src/backends/cpu/rnn.cpp: "old" is the compiler-
// vectorized lstm_row (vec_math.h's sigmoid / tanh with clamps to an infinite clip), "new" the AVX-512
// lstm_row16 kept (scalef sigmoid, min/max-clamped rational tanh, x + g with both biases in g), "merged-div"
// the same with 3 divisions instead of 5 (sigmoid(a) * tanh(b) as one quotient; not kept: ~5% faster
// here, within the noise of the model). BiLSTM b8 geometry (8 rows x H 128 x 100 steps, the inputs in
// cache), best of 20 per round, plus max abs error of h and c against double precision.
// Build: g++ -O3 -std=c++20 -Wno-psabi -Isrc bench/lstm_gates_probe.cpp -o /tmp/lstm_gates_probe && /tmp/lstm_gates_probe
// Findings (issue 22, Dec 5, 1 thread, load 3-4): old 36-52 ns per 16 floats, new 14-18, merged-div 14-17;
// errors 4.8e-7 / 5.1e-7 / 5.1e-7.
#include <immintrin.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
#include <algorithm>
#include "backends/cpu/vec_math.h"
using namespace ferry;
using In = const float* __restrict;
using Out = float* __restrict;
FERRY_VEC void lstm_row(int64_t H, In x, In wb, In g, In pi, In po, In pf, float clip, bool input_forget, Out c,
                        Out h) {
  for (int64_t j = 0; j < H; ++j) {
    const float ig = vec::sigmoid(vec::clampf(x[j] + wb[j] + g[j] + pi[j] * c[j], -clip, clip));
    const float fv = vec::sigmoid(vec::clampf(x[2 * H + j] + wb[2 * H + j] + g[2 * H + j] + pf[j] * c[j], -clip, clip));
    const float fg = input_forget ? 1.f - ig : fv;
    const float cc = vec::tanh(vec::clampf(x[3 * H + j] + wb[3 * H + j] + g[3 * H + j], -clip, clip));
    const float cn = fg * c[j] + ig * cc;
    const float og = vec::sigmoid(vec::clampf(x[H + j] + wb[H + j] + g[H + j] + po[j] * cn, -clip, clip));
    c[j] = cn;
    h[j] = og * vec::tanh(cn);
  }
}
#define AVX __attribute__((target("avx512f")))
AVX inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 xc = _mm512_maskz_min_ps(0xFFFF, _mm512_set1_ps(104.f), x);
  const __m512 n = _mm512_maskz_roundscale_ps(0xFFFF, _mm512_mul_ps(xc, _mm512_set1_ps(-1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_fnmsub_ps(xc, _mm512_set1_ps(1.4426950216293335f), n);
  f = _mm512_fnmadd_ps(xc, _mm512_set1_ps(1.925963033500011e-08f), f);
  __m512 p = _mm512_set1_ps(1.3308821944519877e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.67151764780283e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550582334399223e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022242426872253f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931470632553101f));
  p = _mm512_fmadd_ps(p, f, one);
  const __m512 d = _mm512_add_ps(_mm512_maskz_scalef_ps(0xFFFF, p, n), one);
  return _mm512_div_ps(one, d);
}
// rational tanh as vec::tanh, clamp by min/max
AVX inline __m512 tanh16(__m512 x) {
  const __m512 lim = _mm512_set1_ps(7.90531110763549805f);
  x = _mm512_maskz_max_ps(0xFFFF, _mm512_sub_ps(_mm512_setzero_ps(), lim), _mm512_maskz_min_ps(0xFFFF, lim, x));
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
#define ld(p) _mm512_maskz_loadu_ps(m, (p) + j)
AVX void lstm_row_avx(int64_t H, In x, In g, Out c, Out h) {
  for (int64_t j = 0; j < H; j += 16) {
    const __mmask16 m = H - j >= 16 ? 0xFFFF : (1u << (H - j)) - 1;
    const __m512 ig = sigmoid16(_mm512_add_ps(ld(x), ld(g)));
    const __m512 fg = sigmoid16(_mm512_add_ps(ld(x + 2 * H), ld(g + 2 * H)));
    const __m512 cc = tanh16(_mm512_add_ps(ld(x + 3 * H), ld(g + 3 * H)));
    const __m512 cn = _mm512_fmadd_ps(fg, ld(c), _mm512_mul_ps(ig, cc));
    const __m512 og = sigmoid16(_mm512_add_ps(ld(x + H), ld(g + H)));
    _mm512_mask_storeu_ps(c + j, m, cn);
    _mm512_mask_storeu_ps(h + j, m, _mm512_mul_ps(og, tanh16(cn)));
  }
}

// e^-x parts: returns 1 + e^-x
AVX inline __m512 onepexp16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 xc = _mm512_maskz_min_ps(0xFFFF, _mm512_set1_ps(104.f), x);
  const __m512 n = _mm512_maskz_roundscale_ps(0xFFFF, _mm512_mul_ps(xc, _mm512_set1_ps(-1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_fnmsub_ps(xc, _mm512_set1_ps(1.4426950216293335f), n);
  f = _mm512_fnmadd_ps(xc, _mm512_set1_ps(1.925963033500011e-08f), f);
  __m512 p = _mm512_set1_ps(1.3308821944519877e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.67151764780283e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550582334399223e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022242426872253f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931470632553101f));
  p = _mm512_fmadd_ps(p, f, one);
  return _mm512_add_ps(_mm512_maskz_scalef_ps(0xFFFF, p, n), one);
}
// tanh as p / q
AVX inline void tanhpq16(__m512 x, __m512* pp, __m512* qq) {
  const __m512 lim = _mm512_set1_ps(7.90531110763549805f);
  x = _mm512_maskz_max_ps(0xFFFF, _mm512_sub_ps(_mm512_setzero_ps(), lim), _mm512_maskz_min_ps(0xFFFF, lim, x));
  const __m512 x2 = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-2.76076847742355e-16f);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.00018790482477e-13f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-8.60467152213735e-11f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(5.12229709037114e-08f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(1.48572235717979e-05f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(6.37261928875436e-04f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(4.89352455891786e-03f));
  *pp = _mm512_mul_ps(p, x);
  __m512 q = _mm512_set1_ps(1.19825839466702e-06f);
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(1.18534705686654e-04f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(2.26843463243900e-03f));
  *qq = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(4.89352518554385e-03f));
}
AVX void lstm_row_m(int64_t H, In x, In g, Out c, Out h) {
  const __m512 one = _mm512_set1_ps(1.f);
  for (int64_t j = 0; j < H; j += 16) {
    const __mmask16 m = H - j >= 16 ? 0xFFFF : (1u << (H - j)) - 1;
    const __m512 di = onepexp16(_mm512_add_ps(ld(x), ld(g)));
    const __m512 df = onepexp16(_mm512_add_ps(ld(x + 2 * H), ld(g + 2 * H)));
    __m512 pc, qc; tanhpq16(_mm512_add_ps(ld(x + 3 * H), ld(g + 3 * H)), &pc, &qc);
    const __m512 cn = _mm512_add_ps(_mm512_div_ps(ld(c), df), _mm512_div_ps(pc, _mm512_mul_ps(qc, di)));
    const __m512 dO = onepexp16(_mm512_add_ps(ld(x + H), ld(g + H)));
    __m512 ph, qh; tanhpq16(cn, &ph, &qh);
    _mm512_mask_storeu_ps(c + j, m, cn);
    _mm512_mask_storeu_ps(h + j, m, _mm512_div_ps(ph, _mm512_mul_ps(qh, dO)));
    (void)one;
  }
}
int main() {
  const int H = 128, B = 8, S = 100;
  std::mt19937 rng(1); std::normal_distribution<float> nd(0, 2.f);
  std::vector<float> x(S * B * 4 * H), g(B * 4 * H), z(4 * H, 0.f), c0(B * H), c(B * H), h(B * H), c2(B*H), h2(B*H);
  for (auto& v : x) v = nd(rng);
  for (auto& v : g) v = nd(rng);
  for (auto& v : c0) v = nd(rng);
  const float inf = INFINITY;
  // accuracy vs double
  double e1 = 0, e2 = 0, e3 = 0;
  for (int kk = 0; kk < 3; ++kk) {
    c = c0; c2 = c0; std::vector<float> c3 = c0, h3(B * H);
    for (int b = 0; b < B; ++b) {
      lstm_row(H, x.data() + b * 4 * H, z.data(), g.data() + b * 4 * H, z.data(), z.data(), z.data(), inf, false, c.data() + b * H, h.data() + b * H);
      lstm_row_avx(H, x.data() + b * 4 * H, g.data() + b * 4 * H, c2.data() + b * H, h2.data() + b * H);
      lstm_row_m(H, x.data() + b * 4 * H, g.data() + b * 4 * H, c3.data() + b * H, h3.data() + b * H);
      for (int j = 0; j < H; ++j) {
        auto X = [&](int q) { return double(x[b * 4 * H + q * H + j]) + g[b * 4 * H + q * H + j]; };
        auto sg = [](double v) { return 1 / (1 + std::exp(-v)); };
        double cn = sg(X(2)) * c0[b * H + j] + sg(X(0)) * std::tanh(X(3));
        double hh = sg(X(1)) * std::tanh(cn);
        e1 = std::max(e1, std::fabs(hh - h[b * H + j]) + std::fabs(cn - c[b * H + j]));
        e2 = std::max(e2, std::fabs(hh - h2[b * H + j]) + std::fabs(cn - c2[b * H + j]));
        e3 = std::max(e3, std::fabs(hh - h3[b * H + j]) + std::fabs(cn - c3[b * H + j]));
      }
    }
  }
  printf("max abs err: old %.3g new %.3g merged-div %.3g\n", e1, e2, e3);
  for (int round = 0; round < 5; ++round) {
    double best[3] = {1e9, 1e9, 1e9};
    for (int rep = 0; rep < 20; ++rep)
      for (int v = 0; v < 3; ++v) {
        c = c0;
        auto t0 = std::chrono::steady_clock::now();
        for (int s = 0; s < S; ++s)
          for (int b = 0; b < B; ++b) {
            const float* xr = x.data() + (s * B + b) * 4 * H;
            if (v == 0) lstm_row(H, xr, z.data(), g.data() + b * 4 * H, z.data(), z.data(), z.data(), inf, false, c.data() + b * H, h.data() + b * H);
            else if (v == 1) lstm_row_avx(H, xr, g.data() + b * 4 * H, c.data() + b * H, h.data() + b * H);
            else lstm_row_m(H, xr, g.data() + b * 4 * H, c.data() + b * H, h.data() + b * H);
          }
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        best[v] = std::min(best[v], us);
      }
    printf("100 steps x 8 rows x H128: old %.1f us  new %.1f us  merged-div %.1f us  (ns per 16: %.2f %.2f %.2f)\n", best[0], best[1], best[2],
           best[0] * 1e3 / (S * B * H / 16), best[1] * 1e3 / (S * B * H / 16), best[2] * 1e3 / (S * B * H / 16));
  }
}
