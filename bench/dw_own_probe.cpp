// ferry's own NHWC depthwise kernel as tried in issue 22 (session 14) against oneDNN 2.6's brdgmm_dw,
// 1 thread, hot caches, per-thread CPU time (best of 15 x 50 calls); SILU=1 adds SiLU: oneDNN then
// one silu16 pass over the output (as dnnl_conv.cpp does), the kernel applies it per finished row.
// Build: g++ -O3 -std=c++17 bench/dw_own_probe.cpp -ldnnl -o /tmp/dw_own && OMP_NUM_THREADS=1 /tmp/dw_own
// Findings (Dec 5, shared machine at load 3.6-4.3, so +-20%): kernel/oneDNN time 1.25-1.31x faster
// only on 28x28x240 5x5 and ~1.1x on 14x14x672 5x5; 0.6-0.7x on 112x112x96 3x3 stride 2 and
// 14x14x384 3x3; equal within noise elsewhere (112x112x32, 56x56x144, 2x56x56x144 3x3). With SiLU
// fused per row no better than oneDNN + the separate pass. The large layers run at ~20 GB/s of
// input + output either way (memory-bound: 3.2 MB for 112x112x32 does not fit the 2 MB L2), so a
// faster inner loop does not show; not adopted.
#include <dnnl.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
#include <cstdlib>
#include <algorithm>
#include <cstdint>
#include <time.h>
#include <immintrin.h>
__attribute__((target("avx512f"))) inline __m512 silu16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f);
  // (maskz forms throughout: gcc 12 warns that the unmasked ones read an undefined vector; min
  // returns its second operand, x, when x is NaN.)
  const __m512 xc = _mm512_maskz_min_ps(0xFFFF, _mm512_set1_ps(104.f), x);
  const __m512 n = _mm512_maskz_roundscale_ps(0xFFFF, _mm512_mul_ps(xc, _mm512_set1_ps(-1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_fnmsub_ps(xc, _mm512_set1_ps(1.4426950216293335f), n);   // -x log2e_hi - n (one rounding)
  f = _mm512_fnmadd_ps(xc, _mm512_set1_ps(1.925963033500011e-08f), f);       // - x log2e_lo
  __m512 p = _mm512_set1_ps(1.3308821944519877e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.67151764780283e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550582334399223e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022242426872253f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931470632553101f));
  p = _mm512_fmadd_ps(p, f, one);
  const __m512 d = _mm512_add_ps(_mm512_maskz_scalef_ps(0xFFFF, p, n), one);  // 1 + e^-x
  return _mm512_div_ps(x, d);
}

__attribute__((target("avx512f"))) void silu_avx512(float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, silu16(_mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, silu16(_mm512_maskz_loadu_ps(m, y + i)));
  }
}

void silu_row(float* y, int64_t n, const void*) { silu_avx512(y, n); }

// ---- the kernel tried (issue 22, session 14): 8 outputs x 16 channels in registers, each input row of
// the window loaded once per block (7*S + K vectors, zeros outside the image), column blocks outer and
// channel blocks inner (the window's columns, all channels, are contiguous), row_fn on each finished row.
struct Geometry { int64_t n, h, w, oh, ow, sh, sw, pad_t, pad_l; };
using RowFn = void (*)(float* y, int64_t count, const void* ctx);

template <int K, int S>
__attribute__((target("avx512f"))) inline void block8(const float* xr, const float* wp, __m512 bias, float* yrow,
                                                       const Geometry& g, int64_t c, int kh0, int kh1, int64_t ow,
                                                       int64_t cb, __mmask16 m) {
  constexpr int kIn = 7 * S + K;
  __m512 acc[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) acc[j] = bias;
  const int64_t iw0 = ow * S - g.pad_l, row_stride = g.w * c;
  const bool inside = iw0 >= 0 && iw0 + kIn <= g.w;
  for (int kh = kh0; kh < kh1; ++kh) {
    const float* r = xr + kh * row_stride + iw0 * c;
    __m512 in[kIn];
    if (inside) {
#pragma GCC unroll 32
      for (int i = 0; i < kIn; ++i) in[i] = _mm512_maskz_loadu_ps(m, r + i * c);
    } else {
#pragma GCC unroll 32
      for (int i = 0; i < kIn; ++i)
        in[i] = (iw0 + i >= 0 && iw0 + i < g.w) ? _mm512_maskz_loadu_ps(m, r + i * c) : _mm512_setzero_ps();
    }
#pragma GCC unroll 8
    for (int kw = 0; kw < K; ++kw) {
      const __m512 wk = _mm512_maskz_loadu_ps(m, wp + (kh * K + kw) * c + cb);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) acc[j] = _mm512_fmadd_ps(in[j * S + kw], wk, acc[j]);
    }
  }
  const int64_t count = std::min<int64_t>(8, g.ow - ow);
  float* y = yrow + ow * c + cb;
  for (int j = 0; j < count; ++j) _mm512_mask_storeu_ps(y + j * c, m, acc[j]);
}

template <int K, int S>
__attribute__((target("avx512f"))) void dw_rows(const float* x, const float* wp, const float* bp, float* y,
                                                const Geometry& g, int64_t c, RowFn row_fn) {
  for (int64_t r = 0; r < g.n * g.oh; ++r) {
    const int64_t n = r / g.oh, oh = r % g.oh;
    float* yrow = y + r * g.ow * c;
    const int64_t ih0 = oh * S - g.pad_t;
    const int kh0 = static_cast<int>(std::max<int64_t>(0, -ih0));
    const int kh1 = static_cast<int>(std::min<int64_t>(K, g.h - ih0));
    const float* xr = x + n * g.h * g.w * c + ih0 * g.w * c;
    for (int64_t ow = 0; ow < g.ow; ow += 8)
      for (int64_t cb = 0; cb < c; cb += 16) {
        const int64_t left = c - cb;
        const __mmask16 m = left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
        block8<K, S>(xr + cb, wp, _mm512_maskz_loadu_ps(m, bp + cb), yrow, g, c, kh0, kh1, ow, cb, m);
      }
    if (row_fn) row_fn(yrow, g.ow * c, nullptr);
  }
}

using namespace dnnl;
using tag = memory::format_tag;
double now(){timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t); return t.tv_sec+1e-9*t.tv_nsec;}
int main() {
  const bool SILU = getenv("SILU") != nullptr;
  engine eng(engine::kind::cpu, 0); stream s(eng);
  struct S { int n,h,w,c,k,st; };
  std::vector<S> shapes = {{1,112,112,32,3,1},{1,112,112,96,3,2},{1,56,56,144,3,1},{1,56,56,144,5,2},{1,28,28,240,5,1},{1,14,14,384,3,1},{1,14,14,672,5,1},{1,7,7,960,3,1},{1,7,7,1152,5,1},{2,56,56,144,3,1}};
  std::mt19937 g(1); std::uniform_real_distribution<float> u(-1,1);
  for (auto sh : shapes) {
    int p = sh.k/2; int oh = (sh.h + 2*p - sh.k)/sh.st + 1, ow = (sh.w + 2*p - sh.k)/sh.st + 1;
    std::vector<float> x((size_t)sh.n*sh.h*sh.w*sh.c), w((size_t)sh.c*sh.k*sh.k), b(sh.c), y1((size_t)sh.n*oh*ow*sh.c), y2(y1.size());
    for (auto& v : x) v = u(g);
    for (auto& v : w) v = u(g);
    for (auto& v : b) v = u(g);
    memory::desc xd({sh.n,sh.c,sh.h,sh.w}, memory::data_type::f32, tag::nhwc), yd({sh.n,sh.c,oh,ow}, memory::data_type::f32, tag::nhwc);
    memory::desc wd({sh.c,1,1,sh.k,sh.k}, memory::data_type::f32, tag::any), wu({sh.c,1,1,sh.k,sh.k}, memory::data_type::f32, tag::goihw), bd({sh.c}, memory::data_type::f32, tag::x);
    auto d = convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct, xd, wd, bd, yd, {sh.st,sh.st}, {p,p}, {p,p});
    auto pd = convolution_forward::primitive_desc(d, eng);
    memory wm(pd.weights_desc(), eng); memory wum(wu, eng, w.data()); reorder(wum, wm).execute(s, wum, wm);
    memory xm(xd, eng, x.data()), ym(yd, eng, y1.data()), bm(bd, eng, b.data());
    convolution_forward conv(pd);
    auto run1 = [&]{ conv.execute(s, {{DNNL_ARG_SRC,xm},{DNNL_ARG_WEIGHTS,wm},{DNNL_ARG_BIAS,bm},{DNNL_ARG_DST,ym}}); s.wait(); if (SILU) silu_avx512(y1.data(), y1.size()); };
    std::vector<float> wp((size_t)sh.k*sh.k*sh.c);  // [k*k][C]
    for (int ch = 0; ch < sh.c; ++ch) for (int t = 0; t < sh.k*sh.k; ++t) wp[(size_t)t*sh.c+ch] = w[(size_t)ch*sh.k*sh.k+t];
    Geometry ge{sh.n,sh.h,sh.w,oh,ow,sh.st,sh.st,p,p};
    RowFn fn = SILU ? silu_row : nullptr;
    auto run2 = [&]{
      if (sh.k == 3 && sh.st == 1) dw_rows<3,1>(x.data(), wp.data(), b.data(), y2.data(), ge, sh.c, fn);
      else if (sh.k == 3) dw_rows<3,2>(x.data(), wp.data(), b.data(), y2.data(), ge, sh.c, fn);
      else if (sh.st == 1) dw_rows<5,1>(x.data(), wp.data(), b.data(), y2.data(), ge, sh.c, fn);
      else dw_rows<5,2>(x.data(), wp.data(), b.data(), y2.data(), ge, sh.c, fn);
    };
    run1(); run2();
    double err = 0; for (size_t i = 0; i < y1.size(); ++i) err = std::max(err, (double)std::fabs(y1[i]-y2[i]));
    double b1=1e9,b2=1e9; int reps = 50;
    for (int r=0;r<15;++r){ double t=now(); for(int i=0;i<reps;++i) run1(); b1=std::min(b1,(now()-t)/reps); t=now(); for(int i=0;i<reps;++i) run2(); b2=std::min(b2,(now()-t)/reps);}
    printf("%dx%dx%dx%d k%d s%d: onednn %.1f us  ferry %.1f us  (%.2fx)  maxdiff %.2g  impl %s\n", sh.n,sh.h,sh.w,sh.c,sh.k,sh.st,b1*1e6,b2*1e6,b1/b2,err, pd.impl_info_str());
  }
}
