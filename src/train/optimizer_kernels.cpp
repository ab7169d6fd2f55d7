// The optimizers' element loops, compiled twice: for baseline x86-64 and for AVX2+FMA (chosen at
// run time). std::fma is exact on both (an instruction with FMA, libm without), so both give
// torch's results; the AVX2 copy is compiled with fp-contract=off so GCC fuses nothing torch
// does not. Adam's AVX2 loop uses intrinsics because GCC does not vectorize sqrtf while
// -fmath-errno is on (ferry's default). Large tensors are split into chunks over OpenMP threads;
// element-wise results do not depend on the split.
#include "train/optimizer_kernels.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FERRY_OPT_X86 1
#include <immintrin.h>
#define FERRY_OPT_AVX2 __attribute__((target("avx2,fma"), optimize("fp-contract=off")))
#else
#define FERRY_OPT_X86 0
#endif
#define FERRY_OPT_INLINE __attribute__((always_inline)) inline

namespace ferry::optim {

namespace {

constexpr int64_t kChunk = int64_t{1} << 14;  // elements per parallel task

// Calls fn(begin, count) over [0, n) in chunks, on OpenMP threads when there are several chunks.
template <typename Fn>
void for_chunks(int64_t n, const Fn& fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks <= 2 || omp_in_parallel()) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    fn(begin, std::min(kChunk, n - begin));
  }
}

std::atomic<bool> g_force_baseline{false};

bool use_avx2_fma() {
#if FERRY_OPT_X86
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes && !g_force_baseline.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

// ---- SGD ------------------------------------------------------------------------------------

template <bool kWd, bool kMom, bool kFirst, bool kNesterov>
FERRY_OPT_INLINE void sgd_loop(float* p, const float* g, float* buf, int64_t n, const SgdArgs& a) {
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if constexpr (kWd) d = std::fma(p[i], a.weight_decay, d);  // d_p.add(param, alpha=wd)
    if constexpr (kMom) {
      // First step: buf = clone(d_p); then buf.mul_(momentum).add_(d_p, alpha=1 - dampening).
      const float b = kFirst ? d : std::fma(d, a.one_minus_dampening, buf[i] * a.momentum);
      buf[i] = b;
      d = kNesterov ? std::fma(b, a.momentum, d) : b;  // d_p.add(buf, alpha=momentum) or buf
    }
    p[i] = std::fma(d, a.neg_lr, p[i]);  // param.add_(d_p, alpha=-lr)
  }
}

template <bool kMom, bool kFirst, bool kNesterov>
FERRY_OPT_INLINE void sgd_wd(float* p, const float* g, float* buf, int64_t n, const SgdArgs& a) {
  if (a.has_weight_decay) {
    sgd_loop<true, kMom, kFirst, kNesterov>(p, g, buf, n, a);
  } else {
    sgd_loop<false, kMom, kFirst, kNesterov>(p, g, buf, n, a);
  }
}

FERRY_OPT_INLINE void sgd_select(float* p, const float* g, float* buf, int64_t n, const SgdArgs& a) {
  if (!a.has_momentum) return sgd_wd<false, false, false>(p, g, buf, n, a);
  if (a.first) {
    return a.nesterov ? sgd_wd<true, true, true>(p, g, buf, n, a) : sgd_wd<true, true, false>(p, g, buf, n, a);
  }
  return a.nesterov ? sgd_wd<true, false, true>(p, g, buf, n, a) : sgd_wd<true, false, false>(p, g, buf, n, a);
}

void sgd_base(float* p, const float* g, float* buf, int64_t n, const SgdArgs& a) { sgd_select(p, g, buf, n, a); }

#if FERRY_OPT_X86
FERRY_OPT_AVX2 void sgd_avx2(float* p, const float* g, float* buf, int64_t n, const SgdArgs& a) {
  sgd_select(p, g, buf, n, a);
}
#endif

// ---- Adam / AdamW ---------------------------------------------------------------------------

// torch.maximum: NaN when either is NaN.
FERRY_OPT_INLINE float max_nan(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return a + b;
  return a > b ? a : b;
}

FERRY_OPT_INLINE void adam_element(float* p, const float* g, float* m, float* v, float* vmax, int64_t i,
                                   const AdamArgs& a) {
  float gi = g[i];
  float pi = p[i];
  if (a.has_l2) gi = std::fma(pi, a.l2, gi);   // grad.add(param, alpha=weight_decay)
  if (a.has_decay) pi = pi * a.decay;          // param.mul_(1 - lr * weight_decay)
  const float mi = std::fma(gi, a.one_minus_beta1, m[i] * a.beta1);            // exp_avg
  const float vi = std::fma(a.one_minus_beta2 * gi, gi, v[i] * a.beta2);       // exp_avg_sq (addcmul)
  m[i] = mi;
  v[i] = vi;
  float s = vi;
  if (a.amsgrad) {
    s = max_nan(vmax[i], vi);
    vmax[i] = s;
  }
  const float denom = std::sqrt(s) / a.bias_correction2_sqrt + a.eps;
  p[i] = pi + a.neg_step_size * mi / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
}

void adam_base(float* p, const float* g, float* m, float* v, float* vmax, int64_t n, const AdamArgs& a) {
  for (int64_t i = 0; i < n; ++i) adam_element(p, g, m, v, vmax, i, a);
}

#if FERRY_OPT_X86
FERRY_OPT_AVX2 void adam_avx2(float* p, const float* g, float* m, float* v, float* vmax, int64_t n,
                              const AdamArgs& a) {
  const __m256 l2 = _mm256_set1_ps(a.l2), decay = _mm256_set1_ps(a.decay);
  const __m256 b1 = _mm256_set1_ps(a.beta1), omb1 = _mm256_set1_ps(a.one_minus_beta1);
  const __m256 b2 = _mm256_set1_ps(a.beta2), omb2 = _mm256_set1_ps(a.one_minus_beta2);
  const __m256 bc2 = _mm256_set1_ps(a.bias_correction2_sqrt), eps = _mm256_set1_ps(a.eps);
  const __m256 nss = _mm256_set1_ps(a.neg_step_size);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gi = _mm256_loadu_ps(g + i);
    __m256 pi = _mm256_loadu_ps(p + i);
    if (a.has_l2) gi = _mm256_fmadd_ps(pi, l2, gi);
    if (a.has_decay) pi = _mm256_mul_ps(pi, decay);
    const __m256 mi = _mm256_fmadd_ps(gi, omb1, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
    const __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(omb2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    __m256 s = vi;
    if (a.amsgrad) {
      const __m256 old = _mm256_loadu_ps(vmax + i);
      const __m256 nan = _mm256_cmp_ps(old, vi, _CMP_UNORD_Q);
      s = _mm256_blendv_ps(_mm256_max_ps(old, vi), _mm256_add_ps(old, vi), nan);
      _mm256_storeu_ps(vmax + i, s);
    }
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(s), bc2), eps);
    _mm256_storeu_ps(p + i, _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(nss, mi), denom)));
  }
  for (; i < n; ++i) adam_element(p, g, m, v, vmax, i, a);
}
#endif

// ---- Sum of squares ------------------------------------------------------------------------

// Eight double lanes (lane j takes elements j mod 8), combined in a fixed order. A float's square
// is exact in double, so fused or not, every path rounds the same sums: base and AVX2 agree.
FERRY_OPT_INLINE double sum_squares_loop(const float* x, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

double sum_squares_base(const float* x, int64_t n) { return sum_squares_loop(x, n); }

#if FERRY_OPT_X86
FERRY_OPT_AVX2 double sum_squares_avx2(const float* x, int64_t n) { return sum_squares_loop(x, n); }
#endif

}  // namespace

void sgd_update(float* p, const float* g, float* buf, int64_t n, const SgdArgs& a) {
#if FERRY_OPT_X86
  auto* fn = use_avx2_fma() ? &sgd_avx2 : &sgd_base;
#else
  auto* fn = &sgd_base;
#endif
  for_chunks(n, [&](int64_t b, int64_t c) { fn(p + b, g + b, buf ? buf + b : nullptr, c, a); });
}

void adam_update(float* p, const float* g, float* m, float* v, float* vmax, int64_t n, const AdamArgs& a) {
#if FERRY_OPT_X86
  auto* fn = use_avx2_fma() ? &adam_avx2 : &adam_base;
#else
  auto* fn = &adam_base;
#endif
  for_chunks(n, [&](int64_t b, int64_t c) { fn(p + b, g + b, m + b, v + b, vmax ? vmax + b : nullptr, c, a); });
}

double sum_of_squares(const float* x, int64_t n) {
  // Per-chunk partial sums added in chunk order: the same result for any thread count and ISA.
  const int64_t chunks = std::max<int64_t>(1, (n + kChunk - 1) / kChunk);
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#if FERRY_OPT_X86
  auto* fn = use_avx2_fma() ? &sum_squares_avx2 : &sum_squares_base;
#else
  auto* fn = &sum_squares_base;
#endif
  for_chunks(n, [&](int64_t b, int64_t c) {
    for (int64_t k = b; k < b + c; k += kChunk) {  // one chunk, or all of them when not split
      partial[static_cast<size_t>(k / kChunk)] = fn(x + k, std::min(kChunk, b + c - k));
    }
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void scale(float* x, int64_t n, float s) {
  for_chunks(n, [&](int64_t b, int64_t c) {
    float* y = x + b;
    for (int64_t i = 0; i < c; ++i) y[i] = y[i] * s;
  });
}

void force_baseline_for_testing(bool on) { g_force_baseline.store(on); }

}  // namespace ferry::optim
