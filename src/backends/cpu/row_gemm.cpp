#include "backends/cpu/row_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include <sys/mman.h>

#include "common/env_switch.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry::cpu {

namespace {
std::atomic<int64_t> g_calls{0};

// Rows of K per sliver (the sliver, kc x 48 floats, stays in L1 while the row blocks use it) and
// columns per chunk (the chunk of y, M x nc, stays in L2 over the K blocks): FERRY_ROW_GEMM_KC /
// FERRY_ROW_GEMM_NC, to measure. Whole model, 1 thread, `ferry bench --duration 1.5` CPU p50,
// alternated, 4 rounds (load 4.2-5.5): nc 768 -> 384: ViT-B/16 b1 185.5 -> 177.9 ms (lower in all
// rounds), BERT-like b1 65.3 -> 63.3; kc 192 was slower than 128 on BERT in 3 of 3 rounds, 96 no faster.
int64_t env_or(const char* name, int64_t dflt) {
  const char* e = env_value(name);
  return e && std::atoll(e) > 0 ? std::atoll(e) : dflt;
}
}  // namespace

void RowGemm::Free::operator()(float* p) const { std::free(p); }

int64_t RowGemm::calls() { return g_calls.load(std::memory_order_relaxed); }

RowGemm::RowGemm(int64_t k, int64_t n) : k_(k), n_(n) {
  static const int64_t kc = env_or("FERRY_ROW_GEMM_KC", 128), nc_max = env_or("FERRY_ROW_GEMM_NC", 384);
  kc_ = std::min(kc, k);
  // The widest multiple of 48 up to nc_max that divides N.
  nc_ = kCols;
  for (int64_t c = kCols; c <= std::max(nc_max, kCols); c += kCols)
    if (n % c == 0) nc_ = c;
}

StatusOr<std::unique_ptr<RowGemm>> RowGemm::create(const float* w, bool trans_b, const float* bias, int64_t k, int64_t n,
                                                   bool huge_pages, std::optional<Isa> isa) {
  std::unique_ptr<RowGemm> g(new RowGemm(k, n));
  g->isa_ = isa ? *isa : best_isa();
  const int64_t kc = g->kc_, nc = g->nc_;
  const int64_t kb_count = (k + kc - 1) / kc;
  // One sliver of slack for the last prefetch; with huge_pages 2 MiB aligned and on transparent huge
  // pages where the system gives them, so streaming the weights walks few pages.
  const bool huge = huge_pages;
  const size_t align = huge ? (size_t{2} << 20) : 64;
  const size_t bytes = (static_cast<size_t>(k * n + kc * kCols) * sizeof(float) + align - 1) / align * align;
  g->packed_.reset(static_cast<float*>(std::aligned_alloc(align, bytes)));
  if (!g->packed_)
    return resource_exhausted("cpu RowGemm: cannot allocate " + std::to_string(bytes) + " bytes for the packed weights of a [" +
                              std::to_string(k) + ", " + std::to_string(n) + "] product; set FERRY_MATMUL_ROW_GEMM=0 to leave it to oneDNN");
  g->packed_bytes_ = static_cast<int64_t>(bytes);
  if (huge) ::madvise(g->packed_.get(), bytes, MADV_HUGEPAGE);
  std::memset(g->packed_.get(), 0, bytes);
  float* p = g->packed_.get();
  for (int64_t c0 = 0; c0 < n; c0 += nc)
    for (int64_t kb = 0; kb < kb_count; ++kb) {
      const int64_t k0 = kb * kc, k1 = std::min(k, k0 + kc);
      for (int64_t s = c0; s < c0 + nc; s += kCols)
        for (int64_t kk = k0; kk < k1; ++kk)
          for (int64_t j = s; j < s + kCols; ++j) *p++ = trans_b ? w[j * k + kk] : w[kk * n + j];
    }
  g->bias_.assign(static_cast<size_t>(n), 0.f);
  if (bias) std::copy(bias, bias + n, g->bias_.begin());
  return g;
}

void RowGemm::unpack(float* w, bool trans_b) const {
  const int64_t k = k_, n = n_, kc = kc_, nc = nc_;
  const int64_t kb_count = (k + kc - 1) / kc;
  const float* p = packed_.get();
  for (int64_t c0 = 0; c0 < n; c0 += nc)  // create()'s order
    for (int64_t kb = 0; kb < kb_count; ++kb) {
      const int64_t k0 = kb * kc, k1 = std::min(k, k0 + kc);
      for (int64_t s = c0; s < c0 + nc; s += kCols)
        for (int64_t kk = k0; kk < k1; ++kk)
          for (int64_t j = s; j < s + kCols; ++j) (trans_b ? w[j * k + kk] : w[kk * n + j]) = *p++;
    }
}

#if defined(__x86_64__)
bool RowGemm::has(Isa isa) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return isa == Isa::kAvx512 ? avx512 : avx2;
}

RowGemm::Isa RowGemm::best_isa() { return has(Isa::kAvx512) ? Isa::kAvx512 : Isa::kAvx2; }

bool RowGemm::supported(int64_t k, int64_t n) { return has(best_isa()) && k > 0 && n > 0 && n % kCols == 0; }

namespace {

// c[r, 0:48] = (cin ? cin[r, 0:48] : 0) + sum_k a[r][k] * b[k, 0:48] (+ bias) (+ z[r, 0:48]) for R
// rows (z rows ldc apart); prefetches pf_lines lines from pf, one per k step.
template <int R>
__attribute__((target("avx512f"))) void rows48(const float* a, int64_t lda, const float* b, int64_t kc,
                                               const float* cin, int64_t ldin, float* c, int64_t ldc,
                                               const float* bias, const float* z, const char* pf, int64_t pf_lines) {
  __m512 acc[R][3];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
    for (int j = 0; j < 3; ++j) acc[r][j] = cin ? _mm512_loadu_ps(cin + r * ldin + 16 * j) : _mm512_setzero_ps();
  int64_t k = 0;
  const int64_t pf_end = std::min(pf_lines, kc);
  for (; k < pf_end; ++k) {
    _mm_prefetch(pf + 64 * k, _MM_HINT_T1);
    const __m512 b0 = _mm512_load_ps(b + 48 * k), b1 = _mm512_load_ps(b + 48 * k + 16),
                 b2 = _mm512_load_ps(b + 48 * k + 32);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 v = _mm512_set1_ps(a[r * lda + k]);
      acc[r][0] = _mm512_fmadd_ps(v, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(v, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(v, b2, acc[r][2]);
    }
  }
  for (; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + 48 * k), b1 = _mm512_load_ps(b + 48 * k + 16),
                 b2 = _mm512_load_ps(b + 48 * k + 32);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 v = _mm512_set1_ps(a[r * lda + k]);
      acc[r][0] = _mm512_fmadd_ps(v, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(v, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(v, b2, acc[r][2]);
    }
  }
  if (bias) {
    const __m512 c0 = _mm512_loadu_ps(bias), c1 = _mm512_loadu_ps(bias + 16), c2 = _mm512_loadu_ps(bias + 32);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm512_add_ps(acc[r][0], c0);
      acc[r][1] = _mm512_add_ps(acc[r][1], c1);
      acc[r][2] = _mm512_add_ps(acc[r][2], c2);
    }
  }
  if (z) {  // the residual last, as oneDNN's sum post-op: (x W + bias) + z
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
      for (int j = 0; j < 3; ++j) acc[r][j] = _mm512_add_ps(acc[r][j], _mm512_loadu_ps(z + r * ldc + 16 * j));
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
    for (int j = 0; j < 3; ++j) _mm512_storeu_ps(c + r * ldc + 16 * j, acc[r][j]);
}

// 0.5 x (1 + erf(x / sqrt 2)), vec::gelu_erf's rational erf on 16 lanes.
__attribute__((target("avx512f"))) inline __m512 gelu16(__m512 x) {
  __m512 u = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f));
  // The maskz forms: gcc 12 warns that the plain ones read an uninitialized register.
  u = _mm512_maskz_min_ps(0xFFFF, _mm512_maskz_max_ps(0xFFFF, u, _mm512_set1_ps(-4.f)), _mm512_set1_ps(4.f));
  const __m512 x2 = _mm512_mul_ps(u, u);
  __m512 p = _mm512_set1_ps(-2.72614225801306e-10f);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.77068142495902e-08f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-2.10102402082508e-06f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-5.69250639462346e-05f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-7.34990630326855e-04f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-2.95459980854025e-03f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.60960333262415e-02f));
  p = _mm512_mul_ps(p, u);
  __m512 q = _mm512_set1_ps(-1.45660718464996e-05f);
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-2.13374055278905e-04f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.68282697438203e-03f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-7.37332916720468e-03f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.42647390514189e-02f));
  const __m512 erf = _mm512_div_ps(p, q);
  const __m512 half_x = _mm512_mul_ps(x, _mm512_set1_ps(0.5f));
  return _mm512_fmadd_ps(half_x, erf, half_x);
}

__attribute__((target("avx512f"))) void gelu_tile(float* c, int64_t rows, int64_t ldc) {
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < 3; ++j) _mm512_storeu_ps(c + r * ldc + 16 * j, gelu16(_mm512_loadu_ps(c + r * ldc + 16 * j)));
}

// The AVX2 + FMA path (16 ymm registers): rows24_avx2 holds R <= 4 rows x 24 columns (12
// accumulators, 3 loads of b and R broadcasts per k step); rows48_avx2 covers R <= 8 rows x 48
// columns with it, in groups of 4 rows, each over the sliver's two halves. Every element sums the
// same products in the same order as rows48 (cin, then k ascending, FMA; bias; the residual), so
// both paths give the same bits.
template <int R>
__attribute__((target("avx2,fma"))) void rows24_avx2(const float* a, int64_t lda, const float* b, int64_t kc,
                                                     const float* cin, int64_t ldin, float* c, int64_t ldc,
                                                     const float* bias, const float* z, const char* pf,
                                                     int64_t pf_lines) {
  __m256 acc[R][3];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
    for (int j = 0; j < 3; ++j) acc[r][j] = cin ? _mm256_loadu_ps(cin + r * ldin + 8 * j) : _mm256_setzero_ps();
  int64_t k = 0;
  const int64_t pf_end = std::min(pf_lines, kc);
  for (; k < pf_end; ++k) {
    _mm_prefetch(pf + 64 * k, _MM_HINT_T1);
    const __m256 b0 = _mm256_loadu_ps(b + 48 * k), b1 = _mm256_loadu_ps(b + 48 * k + 8),
                 b2 = _mm256_loadu_ps(b + 48 * k + 16);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 v = _mm256_broadcast_ss(a + r * lda + k);
      acc[r][0] = _mm256_fmadd_ps(v, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(v, b1, acc[r][1]);
      acc[r][2] = _mm256_fmadd_ps(v, b2, acc[r][2]);
    }
  }
  for (; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + 48 * k), b1 = _mm256_loadu_ps(b + 48 * k + 8),
                 b2 = _mm256_loadu_ps(b + 48 * k + 16);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 v = _mm256_broadcast_ss(a + r * lda + k);
      acc[r][0] = _mm256_fmadd_ps(v, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(v, b1, acc[r][1]);
      acc[r][2] = _mm256_fmadd_ps(v, b2, acc[r][2]);
    }
  }
  if (bias) {
    const __m256 c0 = _mm256_loadu_ps(bias), c1 = _mm256_loadu_ps(bias + 8), c2 = _mm256_loadu_ps(bias + 16);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm256_add_ps(acc[r][0], c0);
      acc[r][1] = _mm256_add_ps(acc[r][1], c1);
      acc[r][2] = _mm256_add_ps(acc[r][2], c2);
    }
  }
  if (z) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
      for (int j = 0; j < 3; ++j) acc[r][j] = _mm256_add_ps(acc[r][j], _mm256_loadu_ps(z + r * ldc + 8 * j));
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
    for (int j = 0; j < 3; ++j) _mm256_storeu_ps(c + r * ldc + 8 * j, acc[r][j]);
}

template <int R>
void rows48_avx2(const float* a, int64_t lda, const float* b, int64_t kc, const float* cin, int64_t ldin, float* c,
                 int64_t ldc, const float* bias, const float* z, const char* pf, int64_t pf_lines) {
  for (int r0 = 0; r0 < R; r0 += 4)
    for (int h = 0; h < 2; ++h) {
      const int64_t o = 24 * h;
      // The next sliver's prefetch goes with the first quarter (one line per k step, as rows48).
      const int64_t lines = r0 == 0 && h == 0 ? pf_lines : 0;
      const float* ci = cin ? cin + r0 * ldin + o : nullptr;
      const float* zi = z ? z + r0 * ldc + o : nullptr;
      const float* bi = bias ? bias + o : nullptr;
      const float* ai = a + r0 * lda;
      float* co = c + r0 * ldc + o;
      switch (std::min(4, R - r0)) {
        case 1: rows24_avx2<1>(ai, lda, b + o, kc, ci, ldin, co, ldc, bi, zi, pf, lines); break;
        case 2: rows24_avx2<2>(ai, lda, b + o, kc, ci, ldin, co, ldc, bi, zi, pf, lines); break;
        case 3: rows24_avx2<3>(ai, lda, b + o, kc, ci, ldin, co, ldc, bi, zi, pf, lines); break;
        default: rows24_avx2<4>(ai, lda, b + o, kc, ci, ldin, co, ldc, bi, zi, pf, lines); break;
      }
    }
}

// gelu16 on 8 lanes: the same operations in the same order.
__attribute__((target("avx2,fma"))) inline __m256 gelu8(__m256 x) {
  __m256 u = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f));
  u = _mm256_min_ps(_mm256_max_ps(u, _mm256_set1_ps(-4.f)), _mm256_set1_ps(4.f));
  const __m256 x2 = _mm256_mul_ps(u, u);
  __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.77068142495902e-08f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.10102402082508e-06f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.69250639462346e-05f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-7.34990630326855e-04f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.95459980854025e-03f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.60960333262415e-02f));
  p = _mm256_mul_ps(p, u);
  __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-2.13374055278905e-04f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.68282697438203e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-7.37332916720468e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.42647390514189e-02f));
  const __m256 erf = _mm256_div_ps(p, q);
  const __m256 half_x = _mm256_mul_ps(x, _mm256_set1_ps(0.5f));
  return _mm256_fmadd_ps(half_x, erf, half_x);
}

__attribute__((target("avx2,fma"))) void gelu_tile_avx2(float* c, int64_t rows, int64_t ldc) {
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < 6; ++j) _mm256_storeu_ps(c + r * ldc + 8 * j, gelu8(_mm256_loadu_ps(c + r * ldc + 8 * j)));
}

using RowsKernel = void (*)(const float*, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t,
                            const float*, const float*, const char*, int64_t);
using GeluTile = void (*)(float*, int64_t, int64_t);
constexpr RowsKernel kKernels[9] = {nullptr, rows48<1>, rows48<2>, rows48<3>, rows48<4>,
                                    rows48<5>, rows48<6>, rows48<7>, rows48<8>};
constexpr RowsKernel kKernelsAvx2[9] = {nullptr, rows48_avx2<1>, rows48_avx2<2>, rows48_avx2<3>, rows48_avx2<4>,
                                        rows48_avx2<5>, rows48_avx2<6>, rows48_avx2<7>, rows48_avx2<8>};

}  // namespace

void RowGemm::run(const float* x, int64_t m, int64_t lda, float* y, bool accumulate, bool gelu) const {
  run_chunks(x, m, lda, y, accumulate, gelu, 0, chunks());
}

void RowGemm::run_chunks(const float* x, int64_t m, int64_t lda, float* y, bool accumulate, bool gelu,
                         int64_t chunk_begin, int64_t chunk_end) const {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  if (m <= 0 || chunk_begin >= chunk_end) return;
  const int64_t kb_count = (k_ + kc_ - 1) / kc_, row_blocks = (m + kRows - 1) / kRows;
  // With a residual in y and several K blocks, the partial sums go to a scratch chunk [m, nc], and
  // the residual is added once at the end: summing the products into the residual directly loses
  // bits to its magnitude (BERT's max error against cpu-ref 4.8e-6 -> 8.7e-5).
  const bool staged = accumulate && kb_count > 1;
  static thread_local std::vector<float> scratch;
  if (staged && scratch.size() < static_cast<size_t>(m * nc_)) scratch.resize(static_cast<size_t>(m * nc_));
  const float* p = packed_.get() + chunk_begin * nc_ * k_;  // each chunk's slivers: k x nc floats
  const RowsKernel* kernels = isa_ == Isa::kAvx512 ? kKernels : kKernelsAvx2;
  const GeluTile gelu_rows = isa_ == Isa::kAvx512 ? gelu_tile : gelu_tile_avx2;
  for (int64_t c0 = chunk_begin * nc_; c0 < chunk_end * nc_; c0 += nc_)
    for (int64_t kb = 0; kb < kb_count; ++kb) {
      const int64_t k0 = kb * kc_, kcb = std::min(kc_, k_ - k0);
      const bool first = kb == 0, last = kb == kb_count - 1;
      // The next sliver (the next kcb * 48 floats of the stream) is prefetched over the row blocks.
      const int64_t lines = kcb * kCols / 16, per_block = (lines + row_blocks - 1) / row_blocks;
      for (int64_t s = c0; s < c0 + nc_; s += kCols) {
        const float* b = p;
        p += kcb * kCols;
        const char* next = reinterpret_cast<const char*>(p);  // (two slivers ahead measured no faster)
        for (int64_t rb = 0; rb < row_blocks; ++rb) {
          const int64_t r0 = rb * kRows, rows = std::min(kRows, m - r0);
          const int64_t pf_lines = std::max<int64_t>(0, std::min(per_block, lines - rb * per_block));
          float* c = y + r0 * n_ + s;
          float* part = staged ? scratch.data() + r0 * nc_ + (s - c0) : c;
          const int64_t ldp = staged ? nc_ : n_;
          const float* cin = first ? nullptr : part;
          kernels[rows](x + r0 * lda + k0, lda, b, kcb, cin, ldp, last ? c : part, last ? n_ : ldp,
                         last ? bias_.data() + s : nullptr, last && accumulate ? c : nullptr,
                         next + rb * per_block * 64, pf_lines);
          if (last && gelu) gelu_rows(c, rows, n_);
        }
      }
    }
}
#else
void RowGemm::run_chunks(const float*, int64_t, int64_t, float*, bool, bool, int64_t, int64_t) const {}  // not supported()
bool RowGemm::has(Isa) { return false; }
RowGemm::Isa RowGemm::best_isa() { return Isa::kAvx2; }
bool RowGemm::supported(int64_t, int64_t) { return false; }
void RowGemm::run(const float*, int64_t, int64_t, float*, bool, bool) const {}  // not supported()
#endif

}  // namespace ferry::cpu
