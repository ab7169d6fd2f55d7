#include "backends/cpu/conv_rows.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry::cpu {

ConvRows::ConvRows(const float* w, const float* bias, int64_t cout, int64_t cin, int64_t kh, int64_t kw,
                   int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w)
    : cout_(cout), cin_(cin), kh_(kh), kw_(kw), sh_(stride_h), sw_(stride_w), pad_h_(pad_h), pad_w_(pad_w) {
  // Panels of kc input channels x 64 output channels (128 KB at kc = 512) stay in L2 while every
  // block of output pixels uses them; cin is split into equal blocks of at most 512.
  const int64_t blocks = (cin + 511) / 512;
  kc_ = cin % blocks == 0 ? cin / blocks : cin;
  const int64_t taps = kh * kw, nb = cout / 64, cb = cin / kc_;
  packed_.resize(static_cast<size_t>(cout * cin * taps));
  float* p = packed_.data();
  for (int64_t c0 = 0; c0 < cb; ++c0)
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t k = 0; k < kc_; ++k)
          for (int64_t j = 0; j < 64; ++j) *p++ = w[((b * 64 + j) * cin + c0 * kc_ + k) * taps + t];
  bias_.assign(static_cast<size_t>(cout), 0.f);
  if (bias) std::copy(bias, bias + cout, bias_.begin());
  zeros_.assign(static_cast<size_t>(kc_), 0.f);
}

namespace {
std::atomic<int64_t> g_calls{0};
}  // namespace

int64_t ConvRows::calls() { return g_calls.load(std::memory_order_relaxed); }

#if defined(__x86_64__)
bool ConvRows::available() { return __builtin_cpu_supports("avx512f"); }

namespace {

// c[r, 0:64] (+)= sum_k a[r][k] * b[k, 0:64] for R rows; prefetches pf_lines lines from pf, one per k.
template <int R>
__attribute__((target("avx512f"))) void rows_kernel(const float* const* a, const float* b, int64_t kc, float* c,
                                                    int64_t ldc, const char* pf, int64_t pf_lines, bool relu) {
  __m512 acc[R][4];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_loadu_ps(c + r * ldc + 16 * j);
  const float* ar[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) ar[r] = a[r];
  int64_t k = 0;
  for (; k < kc; ++k) {
    if (k < pf_lines) _mm_prefetch(pf + 64 * k, _MM_HINT_T1);
    const __m512 b0 = _mm512_loadu_ps(b + 64 * k), b1 = _mm512_loadu_ps(b + 64 * k + 16),
                 b2 = _mm512_loadu_ps(b + 64 * k + 32);
    const __m512* b3 = reinterpret_cast<const __m512*>(b + 64 * k + 48);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 v = _mm512_set1_ps(ar[r][k]);
      acc[r][0] = _mm512_fmadd_ps(v, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(v, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(v, b2, acc[r][2]);
      // The fourth column block from memory (an L1 hit) in each FMA: 28 accumulators, 3 columns and
      // the broadcast fill the 32 registers (a fourth column register spilled an accumulator).
      __asm__("vfmadd231ps %[m], %[v], %[c]" : [c] "+v"(acc[r][3]) : [v] "v"(v), [m] "m"(*b3));
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(c + r * ldc + 16 * j, relu ? _mm512_maskz_max_ps(0xFFFF, acc[r][j], zero) : acc[r][j]);
}

// For 1x1 convolutions whose whole packed weights stay in L2 (run_1x1): c[r, 0:64] = relu?(bias + z[r] +
// sum_k a[r][k] * b[k, 0:64]) for R rows, accumulators started from the bias, the residual and ReLU
// applied before the only store (no pass over y before, no partial sums through memory).
// The products run over cb blocks of kc input channels: block i's panel at b + i * pass, its
// inputs at a[r] + i * kc.
template <int R>
__attribute__((target("avx512f"))) void pixels_kernel(const float* const* a, const float* b, int64_t kc, int64_t cb,
                                                      int64_t pass, const float* bias, const float* z, float* c,
                                                      int64_t ldc, bool relu) {
  __m512 acc[R][4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512 bj = _mm512_loadu_ps(bias + 16 * j);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][j] = bj;
  }
  const float* ar[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) ar[r] = a[r];
  for (int64_t i = 0; i < cb; ++i, b += pass) {
    for (int64_t k = 0; k < kc; ++k) {
      const __m512 b0 = _mm512_loadu_ps(b + 64 * k), b1 = _mm512_loadu_ps(b + 64 * k + 16),
                   b2 = _mm512_loadu_ps(b + 64 * k + 32);
      const __m512* b3 = reinterpret_cast<const __m512*>(b + 64 * k + 48);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 v = _mm512_set1_ps(ar[r][k]);
        acc[r][0] = _mm512_fmadd_ps(v, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(v, b1, acc[r][1]);
        acc[r][2] = _mm512_fmadd_ps(v, b2, acc[r][2]);
        __asm__("vfmadd231ps %[m], %[v], %[c]" : [c] "+v"(acc[r][3]) : [v] "v"(v), [m] "m"(*b3));  // as rows_kernel
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) ar[r] += kc;
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      __m512 v = acc[r][j];
      if (z) v = _mm512_add_ps(v, _mm512_loadu_ps(z + r * ldc + 16 * j));
      _mm512_storeu_ps(c + r * ldc + 16 * j, relu ? _mm512_maskz_max_ps(0xFFFF, v, zero) : v);
    }
}

using PixelsKernel = void (*)(const float* const*, const float*, int64_t, int64_t, int64_t, const float*, const float*, float*,
                              int64_t, bool);
constexpr PixelsKernel kPixelsKernels[8] = {nullptr,           pixels_kernel<1>, pixels_kernel<2>, pixels_kernel<3>,
                                            pixels_kernel<4>, pixels_kernel<5>, pixels_kernel<6>, pixels_kernel<7>};

using RowsKernel = void (*)(const float* const*, const float*, int64_t, float*, int64_t, const char*, int64_t, bool);
constexpr RowsKernel kKernels[8] = {nullptr,         rows_kernel<1>, rows_kernel<2>, rows_kernel<3>,
                                    rows_kernel<4>, rows_kernel<5>, rows_kernel<6>, rows_kernel<7>};

}  // namespace

bool ConvRows::pixel_major(int64_t pixels) const {
  return kh_ == 1 && kw_ == 1 && pad_h_ == 0 && pad_w_ == 0 && cin_ <= 2048 &&
         (cin_ * cout_ * 4 <= kPixelMajorWeightBytes || pixels > 49);
}

void ConvRows::run_1x1(const float* x, int64_t n, int64_t h, int64_t w, const float* z, float* y, bool relu) const {
  const int64_t oh = out_h(h), ow = out_w(w), nb = cout_ / 64, pixels = n * oh * ow, blocks = (pixels + 6) / 7;
  // Panels in chunks of at most kPixelMajorWeightBytes (each chunk's weights stay in L2 while every
  // pixel block runs it; x's rows are read once per chunk).
  const int64_t cb = cin_ / kc_, pass = nb * kc_ * 64;  // the packing's blocks of kc_ <= 512 input channels
  const int64_t chunk = std::max<int64_t>(1, std::min(nb, kPixelMajorWeightBytes / (cin_ * 64 * 4)));
  const int threads = static_cast<int>(std::min<int64_t>(std::max(1, omp_in_parallel() ? 1 : omp_get_max_threads()), blocks));
#pragma omp parallel num_threads(threads)
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    const float* a[7];
    for (int64_t b0 = 0; b0 < nb; b0 += chunk)
      for (int64_t blk = blocks * tid / nt, end = blocks * (tid + 1) / nt; blk < end; ++blk) {
        const int64_t p0 = blk * 7, rows = std::min<int64_t>(7, pixels - p0);
        for (int64_t q = 0; q < rows; ++q) {
          const int64_t p = p0 + q, i = p / (oh * ow), r = p / ow % oh, c = p % ow;
          a[q] = x + ((i * h + r * sh_) * w + c * sw_) * cin_;
        }
        for (int64_t b = b0; b < std::min(nb, b0 + chunk); ++b)
          kPixelsKernels[rows](a, packed_.data() + b * kc_ * 64, kc_, cb, pass, bias_.data() + b * 64,
                               z ? z + p0 * cout_ + b * 64 : nullptr, y + p0 * cout_ + b * 64, cout_, relu);
      }
  }
}

void ConvRows::run(const float* x, int64_t n, int64_t h, int64_t w, const float* z, float* y, bool relu) const {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  if (pixel_major(n * out_h(h) * out_w(w))) return run_1x1(x, n, h, w, z, y, relu);
  const int64_t oh = out_h(h), ow = out_w(w), taps = kh_ * kw_, nb = cout_ / 64, cb = cin_ / kc_;
  const int64_t pixels = n * oh * ow;
  // y = bias (+ z): the passes below accumulate into it.
  for (int64_t p = 0; p < pixels; ++p) {
    float* yp = y + p * cout_;
    if (z && z != y) {
      const float* zp = z + p * cout_;
      for (int64_t o = 0; o < cout_; ++o) yp[o] = zp[o] + bias_[static_cast<size_t>(o)];
    } else if (z) {
      for (int64_t o = 0; o < cout_; ++o) yp[o] += bias_[static_cast<size_t>(o)];
    } else {
      std::memcpy(yp, bias_.data(), static_cast<size_t>(cout_) * sizeof(float));
    }
  }
  // Blocks of up to 7 pixels of one output row; each panel's prefetch of the next one is spread
  // over the blocks.
  const int64_t row_blocks = (ow + 6) / 7, blocks = n * oh * row_blocks;
  const int64_t panel_floats = kc_ * 64, panel_lines = panel_floats / 16;
  const int64_t lines_per_block = std::min(kc_, (panel_lines + blocks - 1) / blocks);
  // With several threads, each takes a range of the 64-channel panels (its share of the weights).
  const int threads = static_cast<int>(std::min<int64_t>(std::max(1, omp_in_parallel() ? 1 : omp_get_max_threads()), nb));
#pragma omp parallel num_threads(threads)
  {
  const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
  const int64_t b_lo = nb * tid / nt, b_hi = nb * (tid + 1) / nt;
  const float* a[7];
  for (int64_t c0 = 0; c0 < cb; ++c0)
    for (int64_t t = 0; t < taps; ++t) {
      const int64_t ki = t / kw_, kj = t % kw_;
      const bool last = relu && c0 == cb - 1 && t == taps - 1;
      const float* pass = packed_.data() + (c0 * taps + t) * nb * panel_floats;  // this (c0, tap)'s panels
      for (int64_t b = b_lo; b < b_hi; ++b) {
        const float* panel = pass + b * panel_floats;
        // This thread's next panel: b + 1, or its first one of the next pass.
        const float* next = b + 1 < b_hi ? panel + panel_floats
                            : c0 * taps + t + 1 < cb * taps ? pass + (nb + b_lo) * panel_floats : nullptr;
        int64_t blk = 0;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t r = 0; r < oh; ++r) {
            const int64_t ih = r * sh_ - pad_h_ + ki;
            const bool row_in = ih >= 0 && ih < h;
            for (int64_t q0 = 0; q0 < ow; q0 += 7, ++blk) {
              const char* pf = next ? reinterpret_cast<const char*>(next) + blk * lines_per_block * 64 : nullptr;
              const int64_t pf_lines = next ? std::max<int64_t>(0, std::min(lines_per_block, panel_lines - blk * lines_per_block)) : 0;
              // Pixels whose tap falls in the padding add nothing: outside the last pass (which
              // applies ReLU to every pixel) the block is cut to its pixels inside the image (the
              // border taps of a 3x3 on 7x7: 18% of the products).
              int64_t lo = 0, hi = std::min<int64_t>(7, ow - q0);
              if (!last) {
                if (!row_in) lo = hi;
                while (lo < hi && (q0 + lo) * sw_ - pad_w_ + kj < 0) ++lo;
                while (hi > lo && (q0 + hi - 1) * sw_ - pad_w_ + kj >= w) --hi;
                if (lo == hi) {
                  for (int64_t l = 0; l < pf_lines; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T1);
                  continue;
                }
              }
              for (int64_t q = lo; q < hi; ++q) {
                const int64_t iw = (q0 + q) * sw_ - pad_w_ + kj;
                a[q - lo] = !row_in || iw < 0 || iw >= w ? zeros_.data() : x + ((i * h + ih) * w + iw) * cin_ + c0 * kc_;
              }
              kKernels[hi - lo](a, panel, kc_, y + ((i * oh + r) * ow + q0 + lo) * cout_ + b * 64, cout_, pf, pf_lines, last);
            }
          }
      }
    }
  }
}
#else
bool ConvRows::available() { return false; }
void ConvRows::run(const float*, int64_t, int64_t, int64_t, const float*, float*, bool) const {}  // not available()
bool ConvRows::pixel_major(int64_t) const { return false; }
void ConvRows::run_1x1(const float*, int64_t, int64_t, int64_t, const float*, float*, bool) const {}
#endif

}  // namespace ferry::cpu
