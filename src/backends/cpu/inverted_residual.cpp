#include "backends/cpu/inverted_residual.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry::cpu {

namespace {
std::atomic<int64_t> g_calls{0};
int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Vectors per panel: at most 4, the panels as equal as they can be (144 columns: 3 x 48, not 64 + 64 + 16).
int64_t panel_vectors(int64_t n) {
  const int64_t vecs = (n + 15) / 16, panels = (vecs + 3) / 4;
  return (vecs + panels - 1) / panels;
}
// [panels][k][pv * 16]: column j of panel p is w[(pv 16 p + j) * k + kk] (OIHW 1x1 weights), zeros past n.
std::vector<float> pack_panels(const float* w, int64_t n, int64_t k, int64_t pv) {
  const int64_t pw = pv * 16, panels = (n + pw - 1) / pw;
  std::vector<float> out(static_cast<size_t>(panels * k * pw), 0.f);
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t j = 0; j < pw && p * pw + j < n; ++j) out[(p * k + kk) * pw + j] = w[(p * pw + j) * k + kk];
  return out;
}
std::vector<float> padded_bias(const float* b, int64_t n, int64_t to) {
  std::vector<float> out(static_cast<size_t>(to), 0.f);
  if (b) std::copy(b, b + n, out.begin());
  return out;
}
}  // namespace

InvertedResidual::InvertedResidual(const float* we, const float* be, int64_t cin, int64_t cmid, Clamp act_expand,
                                   const float* wd, const float* bd, int64_t stride, Clamp act_dw, const float* wp,
                                   const float* bp, int64_t cout, Clamp act_project)
    : cin_(cin), cmid_(cmid), cmid_pad_(round_up(cmid, 16)), cout_(cout), stride_(stride), act_e_(act_expand),
      act_d_(act_dw), act_p_(act_project) {
  if (we) {  // else no expand: the depthwise reads x (cmid == cin)
    we_pv_ = panel_vectors(cmid_pad_);
    we_ = pack_panels(we, cmid, cin, we_pv_);
    be_ = padded_bias(be, cmid, round_up(cmid, 64));
  }
  wd_.assign(static_cast<size_t>(cmid_pad_ * 9), 0.f);
  for (int64_t c = 0; c < cmid; ++c)
    for (int64_t t = 0; t < 9; ++t) wd_[((c / 16) * 9 + t) * 16 + c % 16] = wd[c * 9 + t];
  bd_ = padded_bias(bd, cmid, cmid_pad_);
  wp_pv_ = panel_vectors(cout);
  wp_ = pack_panels(wp, cout, cmid, wp_pv_);
  bp_ = padded_bias(bp, cout, round_up(cout, 64));
}

int64_t InvertedResidual::calls() { return g_calls.load(std::memory_order_relaxed); }

int64_t InvertedResidual::scratch_floats(int64_t w) const {
  // a ring of three expanded rows and a zero row, each with a zero pixel on both sides; the
  // depthwise output row
  return 4 * (w + 2) * cmid_pad_ + out_size(w) * cmid_pad_;
}

#if defined(__x86_64__)
bool InvertedResidual::available() { return __builtin_cpu_supports("avx512f"); }

namespace {

constexpr __mmask16 kAll = 0xFFFF;
// min(hi, max(lo, v)); NaN stays NaN (max / min return their second operand then). Masked forms:
// gcc 12 warns (-Wmaybe-uninitialized) on the unmasked ones' undefined source.
__attribute__((target("avx512f"))) inline __m512 clamp16(__m512 v, __m512 lo, __m512 hi) {
  return _mm512_maskz_min_ps(kAll, hi, _mm512_maskz_max_ps(kAll, lo, v));
}

// c[r, v] (vector v of row r at c + r ldc + v ldv) = clamp(bias + sum_kk a[r, kk] * b[kk, v] + z[r, v])
// for R rows and NV vectors of 16 columns; a[r, kk] at a + (kk / 16) lda_blk + r lda + kk % 16 (a
// pixel-major matrix: lda = K, lda_blk = 16; the depthwise row's [K/16][rows][16]: lda = 16); b
// [k][ldb]; z (c's layout) read and the last vector stored under `last`.
struct Mat {
  const float* a;
  int64_t lda, lda_blk;
};
struct Out {
  float* c;
  int64_t ldc, ldv;
  const float* z;
};

template <int R, int NV>
__attribute__((target("avx512f"))) void gemm_tile(Mat A, const float* b, int64_t ldb, int64_t k, const float* bias,
                                                  Out C, __mmask16 last, __m512 lo, __m512 hi) {
  __m512 acc[R][NV];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_loadu_ps(bias + 16 * j);
  for (int64_t kb = 0; kb < k; kb += 16) {
    const float* a = A.a + (kb / 16) * A.lda_blk;
    const float* bb = b + kb * ldb;
    const int64_t kn = std::min<int64_t>(16, k - kb);
    for (int64_t kk = 0; kk < kn; ++kk) {
      __m512 bv[NV];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) bv[j] = _mm512_loadu_ps(bb + kk * ldb + 16 * j);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const __m512 av = _mm512_set1_ps(a[r * A.lda + kk]);
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_fmadd_ps(av, bv[j], acc[r][j]);
      }
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      const __mmask16 m = j == NV - 1 ? last : kAll;
      __m512 v = acc[r][j];
      if (C.z) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, C.z + r * C.ldc + j * C.ldv));
      _mm512_mask_storeu_ps(C.c + r * C.ldc + j * C.ldv, m, clamp16(v, lo, hi));
    }
}

template <int NV, int R>
__attribute__((target("avx512f"))) void gemm_tail(int64_t rem, Mat A, const float* b, int64_t ldb, int64_t k,
                                                  const float* bias, Out C, __mmask16 last, __m512 lo, __m512 hi) {
  if constexpr (R > 0) {
    if (rem == R) return gemm_tile<R, NV>(A, b, ldb, k, bias, C, last, lo, hi);
    gemm_tail<NV, R - 1>(rem, A, b, ldb, k, bias, C, last, lo, hi);
  }
}

template <int NV>
__attribute__((target("avx512f"))) void gemm_panel(int64_t rows, Mat A, const float* b, int64_t ldb, int64_t k,
                                                   const float* bias, Out C, __mmask16 last, __m512 lo, __m512 hi) {
  // 21-24 accumulators. 8 rows x 3 vectors spilled a weight vector: 7 x 3 took the probe's wide blocks
  // (bench/inverted_residual_probe.cpp, hot, against oneDNN in the same run) from 0.94-1.04x to
  // 1.15-1.28x; 14 x 2 instead of 12 x 2 was slower.
  constexpr int R = NV >= 4 ? 6 : NV == 3 ? 7 : 12;
  int64_t r = 0;
  const auto at = [&](int64_t r0) {
    Mat a = A;
    a.a += r0 * A.lda;
    Out c = C;
    c.c += r0 * C.ldc;
    if (c.z) c.z += r0 * C.ldc;
    return std::make_pair(a, c);
  };
  for (; r + R <= rows; r += R) {
    const auto [a, c] = at(r);
    gemm_tile<R, NV>(a, b, ldb, k, bias, c, last, lo, hi);
  }
  if (r < rows) {
    const auto [a, c] = at(r);
    gemm_tail<NV, R - 1>(rows - r, a, b, ldb, k, bias, c, last, lo, hi);
  }
}

// c[rows, 0:n] = clamp(a[rows, 0:k] @ w + bias + z) for w packed by pack_panels (panels of `pv` vectors).
__attribute__((target("avx512f"))) void gemm(int64_t rows, Mat A, const float* packed, int64_t pv, int64_t k,
                                             const float* bias, int64_t n, Out C, InvertedResidual::Clamp act) {
  const __m512 lo = _mm512_set1_ps(act.lo), hi = _mm512_set1_ps(act.hi);
  const int64_t pw = pv * 16;
  for (int64_t p = 0; p * pw < n; ++p) {
    const int64_t cols = std::min<int64_t>(pw, n - p * pw);
    const int nv = static_cast<int>((cols + 15) / 16);
    const __mmask16 last = cols % 16 ? static_cast<__mmask16>((1u << (cols % 16)) - 1) : kAll;
    const float* b = packed + p * k * pw;
    const float* bp = bias + p * pw;
    Out c = C;
    c.c += p * pv * C.ldv;
    if (c.z) c.z += p * pv * C.ldv;
    switch (nv) {
      case 1: gemm_panel<1>(rows, A, b, pw, k, bp, c, last, lo, hi); break;
      case 2: gemm_panel<2>(rows, A, b, pw, k, bp, c, last, lo, hi); break;
      case 3: gemm_panel<3>(rows, A, b, pw, k, bp, c, last, lo, hi); break;
      default: gemm_panel<4>(rows, A, b, pw, k, bp, c, last, lo, hi); break;
    }
  }
}

// One output row of the depthwise 3x3 for one 16-channel vector: out[ow] = clamp(b + sum_{ky, kx}
// rows[ky][ow S + kx] * w[ky, kx]); rows and out are strips of 16-float pixels (the padded input
// row: a zero pixel on both sides), so every offset below is a constant.
template <int S, int OW>
__attribute__((target("avx512f"))) inline void dw_block(const float* r0, const float* r1, const float* r2,
                                                        const __m512* w, __m512 b, __m512 lo, __m512 hi, float* out) {
  __m512 acc[OW];
#pragma GCC unroll 8
  for (int o = 0; o < OW; ++o) acc[o] = b;
  const float* rows[3] = {r0, r1, r2};
#pragma GCC unroll 3
  for (int ky = 0; ky < 3; ++ky)
#pragma GCC unroll 3
    for (int kx = 0; kx < 3; ++kx)
#pragma GCC unroll 8
      for (int o = 0; o < OW; ++o)
        acc[o] = _mm512_fmadd_ps(_mm512_loadu_ps(rows[ky] + (o * S + kx) * 16), w[ky * 3 + kx], acc[o]);
#pragma GCC unroll 8
  for (int o = 0; o < OW; ++o) _mm512_storeu_ps(out + o * 16, clamp16(acc[o], lo, hi));
}

// The depthwise output row [cp / 16][wo][16] from three padded input rows [cp / 16][w + 2][16].
template <int S>
__attribute__((target("avx512f"))) void dw_row(const float* const* rows, int64_t w, int64_t wo, int64_t cp,
                                               const float* wd, const float* bd, InvertedResidual::Clamp act,
                                               float* out) {
  const __m512 lo = _mm512_set1_ps(act.lo), hi = _mm512_set1_ps(act.hi);
  const int64_t strip = (w + 2) * 16;
  for (int64_t j = 0; j < cp / 16; ++j) {
    __m512 wv[9];
    for (int t = 0; t < 9; ++t) wv[t] = _mm512_loadu_ps(wd + (j * 9 + t) * 16);
    const __m512 b = _mm512_loadu_ps(bd + j * 16);
    const float* r0 = rows[0] + j * strip;
    const float* r1 = rows[1] + j * strip;
    const float* r2 = rows[2] + j * strip;
    float* o = out + j * wo * 16;
    int64_t ow = 0;
    for (; ow + 8 <= wo; ow += 8)
      dw_block<S, 8>(r0 + ow * S * 16, r1 + ow * S * 16, r2 + ow * S * 16, wv, b, lo, hi, o + ow * 16);
    for (; ow < wo; ++ow)
      dw_block<S, 1>(r0 + ow * S * 16, r1 + ow * S * 16, r2 + ow * S * 16, wv, b, lo, hi, o + ow * 16);
  }
}

}  // namespace

void InvertedResidual::band(const float* x, int64_t h, int64_t w, const float* z, float* y, int64_t oh0, int64_t oh1,
                            float* scratch) const {
  // Expanded rows as [cp / 16][w + 2][16] (strips of one 16-channel vector, a zero pixel on both
  // sides), the depthwise row as [cp / 16][wo][16]: the depthwise loop's offsets are constants.
  const int64_t cp = cmid_pad_, rowf = (w + 2) * cp, strip = (w + 2) * 16, wo = out_size(w);
  float* ring = scratch;
  float* zero = scratch + 3 * rowf;
  float* dw = scratch + 4 * rowf;
  std::memset(zero, 0, static_cast<size_t>(rowf) * sizeof(float));
  for (int i = 0; i < 3; ++i)
    for (int64_t j = 0; j < cp / 16; ++j) {
      std::memset(ring + i * rowf + j * strip, 0, 16 * sizeof(float));
      std::memset(ring + i * rowf + j * strip + (w + 1) * 16, 0, 16 * sizeof(float));
    }
  int64_t held[3] = {-1, -1, -1};  // the input row each ring slot holds
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const float* rows[3];
    for (int64_t ky = 0; ky < 3; ++ky) {
      const int64_t ih = oh * stride_ - 1 + ky;
      if (ih < 0 || ih >= h) {
        rows[ky] = zero;
        continue;
      }
      float* slot = ring + (ih % 3) * rowf;
      if (held[ih % 3] != ih) {
        const float* xr = x + ih * w * cin_;
        if (!we_.empty()) {
          gemm(w, {xr, cin_, 16}, we_.data(), we_pv_, cin_, be_.data(), cp, {slot + 16, 16, strip, nullptr}, act_e_);
        } else {  // no expand: x's row into the strips, channels past cin zero
          for (int64_t j = 0; j < cp / 16; ++j) {
            const int64_t n = std::min<int64_t>(16, cin_ - j * 16);
            float* o = slot + j * strip + 16;
            for (int64_t px = 0; px < w; ++px) {
              std::memcpy(o + px * 16, xr + px * cin_ + j * 16, static_cast<size_t>(n) * sizeof(float));
              if (n < 16) std::memset(o + px * 16 + n, 0, static_cast<size_t>(16 - n) * sizeof(float));
            }
          }
        }
        held[ih % 3] = ih;
      }
      rows[ky] = slot;
    }
    if (stride_ == 1) dw_row<1>(rows, w, wo, cp, wd_.data(), bd_.data(), act_d_, dw);
    else dw_row<2>(rows, w, wo, cp, wd_.data(), bd_.data(), act_d_, dw);
    const int64_t off = oh * wo * cout_;
    gemm(wo, {dw, 16, wo * 16}, wp_.data(), wp_pv_, cmid_, bp_.data(), cout_, {y + off, cout_, 16, z ? z + off : nullptr},
         act_p_);
  }
}

void InvertedResidual::run(const float* x, int64_t n, int64_t h, int64_t w, const float* z, float* y,
                           int threads) const {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const int64_t ho = out_size(h), wo = out_size(w);
  const int64_t in_img = h * w * cin_, out_img = ho * wo * cout_;
  const size_t need = static_cast<size_t>(scratch_floats(w));
  if (threads <= 1 || omp_in_parallel()) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < need) scratch.resize(need);
    for (int64_t i = 0; i < n; ++i)
      band(x + i * in_img, h, w, z ? z + i * out_img : nullptr, y + i * out_img, 0, ho, scratch.data());
    return;
  }
  // Whole images per thread where there are enough of them; else each image in bands of output
  // rows, each band with its own ring (the rows on a band's edge are expanded twice).
  const int64_t bands = std::max<int64_t>(1, std::min<int64_t>((threads + n - 1) / n, ho / 2));
  const int64_t tasks = n * bands;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t t = 0; t < tasks; ++t) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < need) scratch.resize(need);
    const int64_t i = t / bands, b = t % bands;
    const int64_t oh0 = ho * b / bands, oh1 = ho * (b + 1) / bands;
    band(x + i * in_img, h, w, z ? z + i * out_img : nullptr, y + i * out_img, oh0, oh1, scratch.data());
  }
}

#else
bool InvertedResidual::available() { return false; }
void InvertedResidual::band(const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t, float*) const {}
void InvertedResidual::run(const float*, int64_t, int64_t, int64_t, const float*, float*, int) const {}
#endif

}  // namespace ferry::cpu
