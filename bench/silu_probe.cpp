// Micro-benchmark of the SiLU pass's 16-float kernel (src/backends/cpu/dnnl_conv.cpp, silu16): the old
// Cephes e^x form ("old"), the 2^f form kept ("new": 2^f polynomial, reduction with log2(e) in two parts)
// and the same with a one-part reduction ("1-part"). 64K floats in cache, best of 7 x 50 calls, then max
// relative error against double precision on a sweep of [-100, 100] plus special values (bad: NaN/inf
// mismatches). Build: g++ -O3 -std=c++17 -Wno-psabi bench/silu_probe.cpp -o /tmp/silu_probe && /tmp/silu_probe
// Findings (issue 22, Dec 5): old 2.33-2.38 ns per 16 floats, new 1.55, 1-part 1.35 (but 3.7e-6 error).
#include <immintrin.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>
#include <random>
#include <cstring>
__attribute__((target("avx512f"))) inline __m512 silu_old(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f), lo = _mm512_set1_ps(-88.3762626647949f);
  const __m512 t = _mm512_maskz_min_ps(0xFFFF, _mm512_set1_ps(87.3365447505531f), _mm512_maskz_max_ps(0xFFFF, lo, x));
  const __m512 n = _mm512_maskz_roundscale_ps(0xFFFF, _mm512_mul_ps(t, _mm512_set1_ps(-1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmsub_ps(n, _mm512_set1_ps(0.693359375f), t);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  p = _mm512_fmadd_ps(p, r, one);
  const __m512 d = _mm512_add_ps(_mm512_maskz_scalef_ps(0xFFFF, _mm512_fmadd_ps(p, r, one), n), one);
  const __m512 y = _mm512_div_ps(x, d);
  return _mm512_mask_mul_ps(y, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), x, _mm512_setzero_ps());
}
// e^-x = 2^v, v = -x log2 e, clamped below at -150 (x -> +inf); n = round(v), f = v - n in [-0.5, 0.5]
// kRcp = true: the kept form (dnnl_conv.cpp silu16); false: f = v - n after rounding v (one op less,
// 3.7e-6 relative error at x = -73)
template <bool kRcp>
__attribute__((target("avx512f"))) inline __m512 silu_new(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 xc = kRcp ? _mm512_maskz_min_ps(0xFFFF, _mm512_set1_ps(104.f), x) : x;
  const __m512 v = kRcp ? _mm512_mul_ps(xc, _mm512_set1_ps(-1.44269504088896341f)) : _mm512_maskz_max_ps(0xFFFF, _mm512_set1_ps(-150.f), _mm512_mul_ps(x, _mm512_set1_ps(-1.44269504088896341f)));
  const __m512 n = _mm512_maskz_roundscale_ps(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_sub_ps(v, n);
  if (kRcp) {  // f = -x log2e - n with log2e in two parts (2 fma)
    f = _mm512_fnmsub_ps(xc, _mm512_set1_ps(1.4426950216293335f), n);
    f = _mm512_fnmadd_ps(xc, _mm512_set1_ps(1.925963033500011e-08f), f);
  }
  __m512 p = _mm512_set1_ps(0.0013308821944519877f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.00967151764780283f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05550582334399223f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022242426872253f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931470632553101f));
  p = _mm512_fmadd_ps(p, f, one);
  const __m512 d = _mm512_add_ps(_mm512_maskz_scalef_ps(0xFFFF, p, n), one);
  return _mm512_div_ps(x, d);
  __m512 r = _mm512_maskz_rcp14_ps(0xFFFF, d);
  r = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, one), r);
  return _mm512_mul_ps(x, r);
}
template <class F> __attribute__((target("avx512f"))) void run(F f, float* y, const float* x, long n) {
  for (long i = 0; i < n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
}
double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
int main() {
  long n = 65536;
  std::vector<float> x(n), y(n);
  std::mt19937 g(1); std::uniform_real_distribution<float> u(-12, 12);
  for (auto& v : x) v = u(g);
  auto bench = [&](const char* name, auto f) {
    double best = 1e9;
    for (int r = 0; r < 7; ++r) { double t = now(); for (int k = 0; k < 50; ++k) run(f, y.data(), x.data(), n); best = std::min(best, (now() - t) / 50); }
    // accuracy sweep
    double maxrel = 0, maxabs = 0; float worst = 0;
    std::vector<float> xs; for (float v = -100.f; v <= 100.f; v += 0.00123f) xs.push_back(v);
    const float sp[] = {0.f, -0.f, 1e-30f, -1e-30f, 87.f, -87.f, 88.5f, -88.5f, 89.f, -89.f, 103.f, -103.f, 104.f, -104.f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN, 3.4e38f, -3.4e38f};
    for (float v : sp) xs.push_back(v);
    while (xs.size() % 16) xs.push_back(0.f);
    std::vector<float> ys(xs.size()); run(f, ys.data(), xs.data(), xs.size());
    int bad = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      double xd = xs[i], ref = std::isinf(xd) ? (xd > 0 ? xd : NAN) : xd / (1.0 + std::exp(-xd));
      if (std::isnan(ref) != std::isnan(ys[i])) { if (bad++ < 5) printf("  nan mismatch x=%g y=%g ref=%g\n", xd, ys[i], ref); continue; }
      if (std::isnan(ref)) continue;
      if (std::isinf(ref)) { if (ys[i] != ref) { if (bad++ < 5) printf("  inf mismatch x=%g y=%g\n", xd, ys[i]); } continue; }
      double rel = std::fabs(ys[i] - ref) / std::max(std::fabs(ref), 1e-30);
      if (std::fabs(ref) < 1e-30) rel = std::fabs(ys[i] - ref) > 1e-30 ? 1.0 : 0.0;
      if (rel > maxrel) { maxrel = rel; worst = xs[i]; }
      maxabs = std::max(maxabs, std::fabs(ys[i] - ref));
    }
    printf("%-10s %.4f us per 64K  (%.2f ns/vec)  maxrel %.3g at %g  bad %d\n", name, best * 1e6, best * 1e9 / (n / 16), maxrel, worst, bad);
  };
  for (int rep = 0; rep < 2; ++rep) {
    bench("old", [](__m512 v) { return silu_old(v); });
    bench("1-part", [](__m512 v) { return silu_new<false>(v); });
    bench("new", [](__m512 v) { return silu_new<true>(v); });
    
  }
}
