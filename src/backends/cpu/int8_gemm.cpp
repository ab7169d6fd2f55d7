// The exact AVX2 int8 GEMM (int8_gemm.h) and the QMatMulFused kernel built on it.
#include "backends/cpu/int8_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/int8_pair_saturation.h"
#include "backends/cpu/int8_util.h"
#include "backends/cpu/int8_micro.h"
#include "backends/cpu/node_attrs.h"
#include "backends/cpu/one_thread_rules.h"
#include "common/env_switch.h"
#include "ops/quantize_util.h"

namespace ferry::cpu {
namespace {

constexpr int kNr = 16;  // columns per panel (two ymm of int32)
constexpr int kMr = 6;   // rows per micro kernel (12 accumulators)

// acc[r][0..15] = sum over the pairs j of a_r[2j, 2j+1] . panel[j][n][0..1], for R rows of a (int16, row
// stride lda) against one panel (int8_micro.h's pair_sums).
template <int R>
__attribute__((target("avx2"))) void micro(const int16_t* a, int64_t lda, const int16_t* panel, int64_t pairs,
                                           int32_t* acc) {
  __m256i c[2 * kMr];
  pair_sums<R>(a, lda, panel, pairs, nullptr, c);
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kNr), c[2 * r]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kNr + 8), c[2 * r + 1]);
  }
}

using MicroFn = void (*)(const int16_t*, int64_t, const int16_t*, int64_t, int32_t*);
constexpr MicroFn kMicro[kMr + 1] = {nullptr, micro<1>, micro<2>, micro<3>, micro<4>, micro<5>, micro<6>};

// The narrow weights' micro kernel: acc[r][0..15] = corr[0..15] + sum over the quads j of a_r[4j..4j+3] .
// panel[j][n][0..3], a u8 rows (stride lda, a multiple of 4 bytes), the panel s8 in [-64, 64] (int8_micro.h's
// quad_sums: vpmaddubsw's int16 pair sums are exact there).
template <int R>
__attribute__((target("avx2"))) void micro8(const uint8_t* a, int64_t lda, const int8_t* panel, int64_t quads,
                                            const int32_t* corr, int32_t* acc) {
  __m256i c[2 * kMr];
  quad_sums<R>(a, lda, panel, quads, corr, c);
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kNr), c[2 * r]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * kNr + 8), c[2 * r + 1]);
  }
}

using Micro8Fn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, const int32_t*, int32_t*);
constexpr Micro8Fn kMicro8[kMr + 1] = {nullptr, micro8<1>, micro8<2>, micro8<3>, micro8<4>, micro8<5>, micro8<6>};

// The epilogue's per-column inputs of one panel (16 entries each, or nullptr).
struct PanelEpi {
  const float *mul, *real, *fbias;
  const int32_t* bias;
};

// One row of a panel: 16 accumulators -> 16 outputs (the reference's float steps, in its order; no FMA
// in this target, so no contraction either), `cols` of them stored at y.
__attribute__((target("avx2"))) void epilogue_row(const int32_t* acc, const PanelEpi& p, const Int8GemmEpilogue& e,
                                                  int cols, void* y) {
  __m256 v[2];
  const __m256 zero = _mm256_setzero_ps();
  for (int h = 0; h < 2; ++h) {
    __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + 8 * h));
    if (p.fbias) {
      const __m256 prod = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_loadu_ps(p.real + 8 * h));
      v[h] = _mm256_div_ps(_mm256_add_ps(prod, _mm256_loadu_ps(p.fbias + 8 * h)), _mm256_set1_ps(e.y_scale));
    } else {
      if (p.bias) s = _mm256_add_epi32(s, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.bias + 8 * h)));
      v[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_loadu_ps(p.mul + 8 * h));
    }
    // std::max(v, b) is v unless v < b, as _mm256_max_ps(b, v) (-0.f and NaN kept); std::min(v, b) likewise.
    if (e.conv_relu) v[h] = _mm256_max_ps(zero, v[h]);
    if (e.clip) v[h] = _mm256_min_ps(_mm256_set1_ps(e.clip_hi), _mm256_max_ps(_mm256_set1_ps(e.clip_lo), v[h]));
    if (e.relu) v[h] = _mm256_max_ps(zero, v[h]);
  }
  if (e.y_dt == DType::kF32) {
    if (cols == kNr) {
      _mm256_storeu_ps(static_cast<float*>(y), v[0]);
      _mm256_storeu_ps(static_cast<float*>(y) + 8, v[1]);
    } else {
      alignas(32) float t[kNr];
      _mm256_store_ps(t, v[0]);
      _mm256_store_ps(t + 8, v[1]);
      std::memcpy(y, t, sizeof(float) * static_cast<size_t>(cols));
    }
    return;
  }
  const bool u8 = e.y_dt == DType::kU8;
  const __m256 lo = _mm256_set1_ps(u8 ? 0.f : -128.f), hi = _mm256_set1_ps(u8 ? 255.f : 127.f);
  const __m256 zp = _mm256_set1_ps(e.y_zp);
  __m256i q[2];
  for (int h = 0; h < 2; ++h) {
    const __m256 x = _mm256_and_ps(v[h], _mm256_cmp_ps(v[h], v[h], _CMP_ORD_Q));  // NaN -> 0
    __m256 r = _mm256_add_ps(_mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zp);
    r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
    q[h] = _mm256_cvtps_epi32(r);
  }
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8);  // 16 int16 in order
  const __m128i w0 = _mm256_castsi256_si128(w), w1 = _mm256_extracti128_si256(w, 1);
  const __m128i b = u8 ? _mm_packus_epi16(w0, w1) : _mm_packs_epi16(w0, w1);
  if (cols == kNr) {
    _mm_storeu_si128(static_cast<__m128i*>(y), b);
  } else {
    alignas(16) uint8_t t[kNr];
    _mm_store_si128(reinterpret_cast<__m128i*>(t), b);
    std::memcpy(y, t, static_cast<size_t>(cols));
  }
}

// Rows [m0, m1) of a, minus a_zp, widened to int16 rows of 2 * pairs (a zero after an odd K).
__attribute__((target("avx2"))) void widen_rows(const void* a, bool a_signed, int32_t a_zp, int64_t K, int64_t m0,
                                                int64_t m1, int64_t lda, int16_t* out) {
  const __m256i zp = _mm256_set1_epi16(static_cast<int16_t>(a_zp));
  for (int64_t m = m0; m < m1; ++m) {
    const uint8_t* src = static_cast<const uint8_t*>(a) + m * K;
    int16_t* d = out + m * lda;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
      const __m256i w = a_signed ? _mm256_cvtepi8_epi16(x) : _mm256_cvtepu8_epi16(x);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k), _mm256_sub_epi16(w, zp));
    }
    for (; k < K; ++k)
      d[k] = static_cast<int16_t>((a_signed ? static_cast<int32_t>(static_cast<int8_t>(src[k])) : src[k]) - a_zp);
    for (; k < lda; ++k) d[k] = 0;
  }
}

// Rows [m0, m1) of a as u8 rows of lda bytes (an s8 source flipped, x + 128; zeros after K).
__attribute__((target("avx2"))) void copy_rows_u8(const void* a, bool a_signed, int64_t K, int64_t m0, int64_t m1,
                                                  int64_t lda, uint8_t* out) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t m = m0; m < m1; ++m) {
    const uint8_t* src = static_cast<const uint8_t*>(a) + m * K;
    uint8_t* d = out + m * lda;
    int64_t k = 0;
    if (a_signed)
      for (; k + 32 <= K; k += 32)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k),
                            _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k)), flip));
    for (; k < K; ++k) d[k] = static_cast<uint8_t>(a_signed ? src[k] ^ 0x80 : src[k]);
    for (; k < lda; ++k) d[k] = 0;
  }
}

}  // namespace

bool int8_gemm_available() {
  static const bool on = [] {
    if (!env_switch_on("FERRY_INT8_GEMM")) return false;
    return __builtin_cpu_supports("avx2") && int8_pairs_saturate();
  }();
  return on;
}

void PackedInt8B::pack(const int8_t* b, int64_t k_dim, int64_t n_dim, const int8_t* b_zp, int64_t zp_count, bool n_major) {
  K = k_dim;
  N = n_dim;
  pairs = (K + 1) / 2;
  quads = (K + 3) / 4;
  panels = (N + kNr - 1) / kNr;
  const auto value = [&](int64_t k, int64_t n) {
    const int32_t zp = b_zp && zp_count > 0 ? b_zp[zp_count == 1 ? 0 : n] : 0;
    return static_cast<int32_t>(b[n_major ? n * K + k : k * N + n]) - zp;
  };
  narrow = true;  // every value in [-64, 64]: no vpmaddubsw pair of it can saturate
  for (int64_t n = 0; n < N && narrow; ++n)
    for (int64_t k = 0; k < K && narrow; ++k) narrow = value(k, n) >= -64 && value(k, n) <= 64;
  data.clear();
  data8.clear();
  column_sums.clear();
  if (narrow) {
    data8.assign(static_cast<size_t>(panels * quads * kNr * 4), 0);
    column_sums.assign(static_cast<size_t>(panels * kNr), 0);
    for (int64_t p = 0; p < panels; ++p)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t c = 0; c < kNr && p * kNr + c < N; ++c) {
          const int32_t v = value(k, p * kNr + c);
          data8[static_cast<size_t>(((p * quads + k / 4) * kNr + c) * 4 + k % 4)] = static_cast<int8_t>(v);
          column_sums[static_cast<size_t>(p * kNr + c)] += v;
        }
    return;
  }
  data.assign(static_cast<size_t>(panels * pairs * kNr * 2), 0);
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < kNr && p * kNr + c < N; ++c)
        data[static_cast<size_t>(((p * pairs + k / 2) * kNr + c) * 2 + k % 2)] = static_cast<int16_t>(value(k, p * kNr + c));
}

void PairedQuads::plan(const int8_t* data8, int64_t n_panels, int64_t n_quads) {
  panels = n_panels;
  quads = n_quads;
  data.assign(static_cast<size_t>(panels * quads * kNr * 4), 0);
  offsets.assign(static_cast<size_t>(panels * quads), 0);
  pairs.assign(static_cast<size_t>(panels), 0);
  constexpr int kLanes = 2 * kNr;  // (column, channel pair) of a quad
  std::vector<int32_t> pos(static_cast<size_t>(quads * kLanes)), neg(pos.size()), load(static_cast<size_t>(quads));
  std::vector<int64_t> by_load(static_cast<size_t>(quads)), order;
  std::vector<int64_t> mate(static_cast<size_t>(quads));  // the quad paired with j, or -1
  std::vector<char> fit(static_cast<size_t>(quads * quads));
  for (int64_t p = 0; p < panels; ++p) {
    const int8_t* src = data8 + p * quads * kNr * 4;
    for (int64_t j = 0; j < quads; ++j) {
      int32_t most = 0;
      for (int l = 0; l < kLanes; ++l) {
        const int32_t w0 = src[(j * kNr + l / 2) * 4 + 2 * (l % 2)], w1 = src[(j * kNr + l / 2) * 4 + 2 * (l % 2) + 1];
        const int32_t up = std::max(w0, 0) + std::max(w1, 0), down = std::max(-w0, 0) + std::max(-w1, 0);
        pos[static_cast<size_t>(j * kLanes + l)] = up;
        neg[static_cast<size_t>(j * kLanes + l)] = down;
        most = std::max(most, std::max(up, down));
      }
      load[static_cast<size_t>(j)] = most;
      by_load[static_cast<size_t>(j)] = j;
    }
    std::stable_sort(by_load.begin(), by_load.end(), [&](int64_t u, int64_t v) { return load[static_cast<size_t>(u)] > load[static_cast<size_t>(v)]; });
    const auto fits = [&](int64_t u, int64_t v) {
      for (int l = 0; l < kLanes; ++l)
        if (pos[static_cast<size_t>(u * kLanes + l)] + pos[static_cast<size_t>(v * kLanes + l)] > 128 ||
            neg[static_cast<size_t>(u * kLanes + l)] + neg[static_cast<size_t>(v * kLanes + l)] > 128)
          return false;
      return true;
    };
    std::fill(mate.begin(), mate.end(), -1);
    for (int64_t i = 0; i < quads; ++i) {
      const int64_t u = by_load[static_cast<size_t>(i)];
      if (mate[static_cast<size_t>(u)] >= 0) continue;
      for (int64_t k = i + 1; k < quads; ++k) {  // the heaviest partner that fits
        const int64_t v = by_load[static_cast<size_t>(k)];
        if (mate[static_cast<size_t>(v)] >= 0 || !fits(u, v)) continue;
        mate[static_cast<size_t>(u)] = v;
        mate[static_cast<size_t>(v)] = u;
        break;
      }
    }
    // Then, where the greedy pass left at most a quarter of the quads single, while a single u fits a paired v
    // whose partner w fits another single x: (u, v), (w, x), one pair more (MobileNetV2's 7-bit expansions of 64
    // and 96 channels: every quad paired in every panel, the greedy pass' fewest 7 of 8 and 11 of 12).
    int64_t singles = std::count(mate.begin(), mate.end(), int64_t{-1});
    if (singles > 0 && 4 * singles <= quads) {
      for (int64_t u = 0; u < quads; ++u)
        for (int64_t v = 0; v < quads; ++v) fit[static_cast<size_t>(u * quads + v)] = u != v && fits(u, v);
      for (bool grown = true; grown && singles > 1;) {
        grown = false;
        for (int64_t u = 0; u < quads; ++u) {
          for (int64_t v = 0; v < quads && mate[static_cast<size_t>(u)] < 0; ++v) {
            const int64_t w = mate[static_cast<size_t>(v)];
            if (w < 0 || !fit[static_cast<size_t>(u * quads + v)]) continue;
            for (int64_t x = 0; x < quads; ++x) {
              if (x == u || mate[static_cast<size_t>(x)] >= 0 || !fit[static_cast<size_t>(w * quads + x)]) continue;
              mate[static_cast<size_t>(u)] = v;
              mate[static_cast<size_t>(v)] = u;
              mate[static_cast<size_t>(w)] = x;
              mate[static_cast<size_t>(x)] = w;
              singles -= 2;
              grown = true;
              break;
            }
          }
        }
      }
    }
    order.clear();
    for (int64_t i = 0; i < quads; ++i) {  // the pairs by their heavier quad's load, as the greedy pass found them
      const int64_t u = by_load[static_cast<size_t>(i)], v = mate[static_cast<size_t>(u)];
      if (v < 0 || std::find(order.begin(), order.end(), u) != order.end()) continue;
      order.push_back(u);
      order.push_back(v);
    }
    pairs[static_cast<size_t>(p)] = static_cast<int32_t>(order.size() / 2);
    for (int64_t j = 0; j < quads; ++j)
      if (mate[static_cast<size_t>(j)] < 0) order.push_back(j);
    for (int64_t t = 0; t < quads; ++t) {
      const int64_t j = order[static_cast<size_t>(t)];
      offsets[static_cast<size_t>(p * quads + t)] = static_cast<int32_t>(4 * j);
      std::memcpy(data.data() + (p * quads + t) * kNr * 4, src + j * kNr * 4, kNr * 4);
    }
  }
  // One pair count for every panel (the fewest; the other pairs run as single quads): the loops' trip counts
  // then repeat from panel to panel and their exits are predicted. Where that count covers less than 3/4 of
  // the quads, none: the quads in their own order (quad_sums, no offsets), which ran faster there
  // (MobileNetV2's 7-bit 1x1s of 24-32 channels, 2 of 4 pairs or fewer per panel: 1.05-1.14x quad_sums' time).
  const int32_t fewest = panels > 0 ? *std::min_element(pairs.begin(), pairs.end()) : 0;
  if (8 * static_cast<int64_t>(fewest) < 3 * quads) {
    std::memcpy(data.data(), data8, data.size());
    for (int64_t i = 0; i < panels * quads; ++i) offsets[static_cast<size_t>(i)] = static_cast<int32_t>(4 * (i % quads));
    std::fill(pairs.begin(), pairs.end(), 0);
    return;
  }
  std::fill(pairs.begin(), pairs.end(), fewest);
}

void int8_gemm(const void* a, bool a_signed, int32_t a_zp, int64_t M, const PackedInt8B& b, const Int8GemmEpilogue& e,
               void* y) {
  if (M <= 0 || b.N <= 0) return;
  const int64_t N = b.N;
  std::optional<SingleThreadScope> one;  // a small product: one thread (one_thread_rules.h)
  if (cpu::int8_on_one_thread(M * N * b.K)) one.emplace();
  // The int16 path: rows widened (minus a_zp) to lda int16; the narrow path: u8 rows of lda bytes (a itself
  // where it is u8 with K a multiple of 4), a_zp taken off through the column sums.
  const int64_t lda = b.narrow ? 4 * b.quads : 2 * b.pairs;
  const int64_t row_bytes = b.narrow ? lda : 2 * lda;
  int16_t* aw = nullptr;
  const uint8_t* a8 = static_cast<const uint8_t*>(a);
  const int32_t zp8 = a_signed ? a_zp + 128 : a_zp;  // the narrow path's zero point (an s8 source flipped)
  if (b.narrow && (a_signed || lda != b.K)) {
    thread_local std::vector<uint8_t> a8copy;
    if (static_cast<int64_t>(a8copy.size()) < M * lda) a8copy.resize(static_cast<size_t>(M * lda));
    uint8_t* d = a8copy.data();
    parallel_ranges(M, lda, [&](int64_t m0, int64_t m1) { copy_rows_u8(a, a_signed, b.K, m0, m1, lda, d); });
    a8 = d;
  } else if (!b.narrow) {
    thread_local std::vector<int16_t> a16;
    if (static_cast<int64_t>(a16.size()) < M * lda) a16.resize(static_cast<size_t>(M * lda));
    aw = a16.data();
    parallel_ranges(M, lda, [&](int64_t m0, int64_t m1) { widen_rows(a, a_signed, a_zp, b.K, m0, m1, lda, aw); });
  }
  // Rows in chunks whose int16 copy stays in L2 (<= 192 KB) while a thread's panels pass over it, of
  // even sizes (a chunk of a few rows would stream all of b for them; two chunks split two threads).
  const int64_t mc_max = std::max<int64_t>(kMr, (int64_t{192} * 1024 / std::max<int64_t>(row_bytes, 1)) / kMr * kMr);
  const int64_t chunks = (M + mc_max - 1) / mc_max, tasks = chunks * b.panels;
  const int64_t mc = ((M + chunks - 1) / chunks + kMr - 1) / kMr * kMr;
  const size_t ysize = e.y_dt == DType::kF32 ? 4 : 1;
  parallel_ranges(tasks, std::min(M, mc) * lda * kNr, [&](int64_t t0, int64_t t1) {
    alignas(32) int32_t acc[kMr * kNr];
    alignas(32) int32_t corr[kNr] = {};
    alignas(32) float pmul[kNr] = {}, preal[kNr] = {}, pfb[kNr] = {};
    alignas(32) int32_t pbias[kNr] = {};
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t chunk = t / b.panels, p = t % b.panels, n0 = p * kNr;
      const int cols = static_cast<int>(std::min<int64_t>(kNr, N - n0));
      PanelEpi pe{e.mul ? e.mul + n0 : nullptr, e.real ? e.real + n0 : nullptr, e.fbias ? e.fbias + n0 : nullptr,
                  e.bias ? e.bias + n0 : nullptr};
      if (cols < kNr) {  // the last panel's columns, padded
        const auto pad = [&](auto* dst, auto src) {
          if (!src) return static_cast<decltype(src)>(nullptr);
          std::copy(src, src + cols, dst);
          return static_cast<decltype(src)>(dst);
        };
        pe = PanelEpi{pad(pmul, pe.mul), pad(preal, pe.real), pad(pfb, pe.fbias), pad(pbias, pe.bias)};
      }
      const int64_t m_end = std::min(M, (chunk + 1) * mc);
      if (b.narrow)
        for (int c = 0; c < kNr; ++c)  // modulo 2^32, as the sums
          corr[c] = static_cast<int32_t>(static_cast<uint32_t>(-int64_t{zp8} * b.column_sums[static_cast<size_t>(n0 + c)]));
      for (int64_t m = chunk * mc; m < m_end; m += kMr) {
        const int rows = static_cast<int>(std::min<int64_t>(kMr, m_end - m));
        if (b.narrow)
          kMicro8[rows](a8 + m * lda, lda, b.data8.data() + p * b.quads * kNr * 4, b.quads, corr, acc);
        else
          kMicro[rows](aw + m * lda, lda, b.data.data() + p * b.pairs * kNr * 2, b.pairs, acc);
        for (int r = 0; r < rows; ++r)
          epilogue_row(acc + r * kNr, pe, e, cols, static_cast<char*>(y) + ((m + r) * N + n0) * ysize);
      }
    }
  });
}

bool EpilogueFactors::set(float a_scale, const Tensor& w_scale, float y_scale, float y_zp, bool has_bias, const Tensor* b,
                          int64_t n, Int8GemmEpilogue* epi) {
  mul.resize(static_cast<size_t>(n));
  real.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    real[i] = a_scale * w_scale.data<float>()[w_scale.numel() == 1 ? 0 : i];
    mul[i] = real[i] / y_scale;
  }
  if (has_bias) {
    if (!b || b->numel() != n) return false;
    if (b->dtype() == DType::kI32) bias.assign(b->data<int32_t>(), b->data<int32_t>() + n);
    else if (b->dtype() == DType::kF32) fbias.assign(b->data<float>(), b->data<float>() + n);
    else return false;
  }
  epi->mul = mul.data();
  epi->real = real.data();
  epi->bias = bias.empty() ? nullptr : bias.data();
  epi->fbias = fbias.empty() ? nullptr : fbias.data();
  epi->y_scale = y_scale;
  epi->y_zp = y_zp;
  return true;
}

bool read_qconv_operands(const Graph& graph, const Node& node, const Tensor& w_scale, int64_t M, QConvOperands* q,
                         EpilogueFactors* factors, Int8GemmEpilogue* epi, bool any_x_zp, bool mid) {
  enum : size_t { kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kYScale0, kYZp0, kB, kMidScale = 12, kMidZp };
  const size_t kYScale = mid ? kMidScale : kYScale0, kYZp = mid ? kMidZp : kYZp0;
  NodeAttrs a(node);
  if (has_input(node, kWZp)) {
    const Tensor* wz = constant_input(graph, node, kWZp);
    if (!wz || wz->dtype() != DType::kI8 || (wz->numel() != 1 && wz->numel() != M)) return false;
    q->w_zp = wz->data<int8_t>();
    q->w_zp_count = wz->numel();
  }
  const TensorType* xt = graph.find_type(node.inputs[kX]);
  if (!xt || (xt->dtype != DType::kU8 && xt->dtype != DType::kI8)) return false;
  q->x_signed = xt->dtype == DType::kI8;
  const bool float_y = !has_input(node, kYScale) && !has_input(node, kYZp);
  const Tensor* yzt = float_y ? nullptr : constant_input(graph, node, kYZp);
  if (!float_y && (!yzt || (yzt->dtype() != DType::kU8 && yzt->dtype() != DType::kI8))) return false;
  float xs = 0, xz = 0, ys = 1, yz = 0;
  if (!scalar_input(graph, node, kXScale, &xs) || !scalar_input(graph, node, kXZp, &xz) ||
      (!float_y && (!scalar_input(graph, node, kYScale, &ys) || !scalar_input(graph, node, kYZp, &yz))))
    return false;
  if (has_input(node, kXZp) && constant_input(graph, node, kXZp)->dtype() != xt->dtype) return false;
  if (!q->x_signed && xz == 0 && !any_x_zp) return false;  // oneDNN unsplit with the repair (dnnl_int8_conv.cpp)
  q->x_zp = static_cast<int32_t>(xz);
  const bool has_bias = has_input(node, kB);
  if (!factors->set(xs, w_scale, ys, yz, has_bias, has_bias ? constant_input(graph, node, kB) : nullptr, M, epi))
    return false;
  epi->conv_relu = a.get_int("conv_relu", 0) != 0;
  epi->clip_lo = a.get_float("conv_min", -INFINITY) / ys;
  epi->clip_hi = a.get_float("conv_max", INFINITY) / ys;
  epi->clip = epi->clip_lo > -INFINITY || epi->clip_hi < INFINITY;
  epi->relu = !float_y && !mid && a.get_int("relu", 0) != 0;  // (the reference's float output skips it; after the residual)
  epi->y_dt = float_y ? DType::kF32 : yzt->dtype();
  return true;
}

}  // namespace ferry::cpu

namespace ferry {
namespace {

using cpu::EpilogueFactors;

// com.ferry.QMatMulFused on int8_gemm: constant s8 b [K, N] (any zero point, scalar or per column),
// scalar a scale / zero point, the reference's epilogue. Declines (oneDNN's kernel then runs) off AVX2
// hosts without VNNI, or where an input it needs is not constant.
class Int8GemmQMatMulKernel : public Kernel {
 public:
  Int8GemmQMatMulKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    if (!cpu::int8_gemm_available()) return false;
    enum : size_t { kA = 0, kAScale, kAZp, kBm, kBScale, kBZp, kYScale, kYZp, kBias };
    const Tensor* b = cpu::constant_input(graph, node_, kBm);
    const Tensor* bs = cpu::constant_input(graph, node_, kBScale);
    if (!b || b->dtype() != DType::kI8 || b->rank() != 2 || !bs || bs->dtype() != DType::kF32) return false;
    const int64_t K = b->dim(0), N = b->dim(1);
    if (bs->numel() != 1 && bs->numel() != N) return false;
    const int8_t* bzp = nullptr;
    int64_t bzp_count = 0;
    if (cpu::has_input(node_, kBZp)) {
      const Tensor* bz = cpu::constant_input(graph, node_, kBZp);
      if (!bz || bz->dtype() != DType::kI8 || (bz->numel() != 1 && bz->numel() != N)) return false;
      bzp = bz->data<int8_t>();
      bzp_count = bz->numel();
    }
    const TensorType* at = graph.find_type(node_.inputs[kA]);
    if (!at || (at->dtype != DType::kU8 && at->dtype != DType::kI8)) return false;
    a_signed_ = at->dtype == DType::kI8;
    const bool float_y = !cpu::has_input(node_, kYScale) && !cpu::has_input(node_, kYZp);
    const Tensor* yzt = float_y ? nullptr : cpu::constant_input(graph, node_, kYZp);
    if (!float_y && (!yzt || (yzt->dtype() != DType::kU8 && yzt->dtype() != DType::kI8))) return false;
    float as = 0, az = 0, ys = 1, yz = 0;
    if (!cpu::scalar_input(graph, node_, kAScale, &as) || !cpu::scalar_input(graph, node_, kAZp, &az) ||
        (!float_y && (!cpu::scalar_input(graph, node_, kYScale, &ys) || !cpu::scalar_input(graph, node_, kYZp, &yz))))
      return false;
    if (cpu::has_input(node_, kAZp)) {  // the zero point's type must be a's (the reference's MatMulInteger checks)
      const Tensor* azt = cpu::constant_input(graph, node_, kAZp);
      if (!azt || azt->dtype() != at->dtype) return false;
    }
    a_zp_ = static_cast<int32_t>(az);
    const bool has_bias = cpu::has_input(node_, kBias);
    if (!factors_.set(as, *bs, ys, yz, has_bias, has_bias ? cpu::constant_input(graph, node_, kBias) : nullptr, N, &epi_))
      return false;
    epi_.relu = AttrReader(node_).get_int("relu", 0) != 0;
    epi_.y_dt = float_y ? DType::kF32 : yzt->dtype();
    packed_.pack(b->data<int8_t>(), K, N, bzp, bzp_count);
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const DType want = a_signed_ ? DType::kI8 : DType::kU8;
    if (a.dtype() != want || a.rank() < 2 || a.dims().back() != packed_.K || packed_.K == 0) return fallback_(ctx);
    std::vector<int64_t> out_dims = a.dims();
    out_dims.back() = packed_.N;
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, epi_.y_dt, out_dims, false));
    const int64_t M = a.numel() / packed_.K;
    cpu::int8_gemm(a.raw(), a_signed_, a_zp_, M, packed_, epi_, y->mutable_raw());
    return Status::ok();
  }

 private:
  Node node_;
  KernelFn fallback_;
  bool a_signed_ = false;
  int32_t a_zp_ = 0;
  EpilogueFactors factors_;
  cpu::Int8GemmEpilogue epi_;
  cpu::PackedInt8B packed_;
};

// com.ferry.QConvFused as a GEMM where it is one and oneDNN would split: channels last, 1x1, stride 1,
// no padding, one group ([N*H*W, C] x w^T [C, M]), no residual z, no mid Q/DQ, no activation, weights
// that need the split (int8_pair_saturation.h: some outside [-64, 64]) and a source outside the
// repair's case (u8 with zero point 0: dnnl_int8_conv.cpp runs those unsplit), on 64 input channels or
// more (up to 128: int8_im2col_conv.cpp first). MobileNetV2's wider expansions and its last 1x1 read residual sums (zero point ~128).
constexpr int64_t kMinConvChannels = 64;

class Int8GemmQConvKernel : public Kernel {
 public:
  Int8GemmQConvKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    if (!cpu::int8_gemm_available()) return false;
    enum : size_t { kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kYScale, kYZp, kB, kZ, kZScale, kZZp, kMidScale, kMidZp };
    cpu::NodeAttrs attrs(node_);
    if (attrs.get_int("channels_last", 0) == 0 || attrs.get_int("group", 1) != 1 || !attrs.get_string("activation", "").empty() ||
        cpu::has_input(node_, kZ) || cpu::has_input(node_, kMidScale) || attrs.get_string("auto_pad", "NOTSET") != "NOTSET" ||
        node_.outputs.size() != 1)  // (yq: dnnl_int8_conv)
      return false;
    for (int64_t v : attrs.get_ints("strides"))
      if (v != 1) return false;
    for (int64_t v : attrs.get_ints("pads"))
      if (v != 0) return false;
    const Tensor* w = cpu::constant_input(graph, node_, kW);
    const Tensor* ws = cpu::constant_input(graph, node_, kWScale);
    if (!w || w->dtype() != DType::kI8 || w->rank() != 4 || w->dim(2) != 1 || w->dim(3) != 1 || !ws ||
        ws->dtype() != DType::kF32 || !cpu::needs_split(*w))
      return false;
    const int64_t M = w->dim(0), C = w->dim(1);
    // Below 64 input channels this GEMM was slower than oneDNN's split (the epilogue dominates; MobileNetV2's
    // expansions of 16-32 channels, `ferry profile -t 1`); up to 128 int8_im2col_conv.cpp (registered
    // before) runs them faster.
    if (C < kMinConvChannels || (ws->numel() != 1 && ws->numel() != M)) return false;
    cpu::QConvOperands q;
    if (!cpu::read_qconv_operands(graph, node_, *ws, M, &q, &factors_, &epi_)) return false;
    x_signed_ = q.x_signed;
    x_zp_ = q.x_zp;
    packed_.pack(w->data<int8_t>(), C, M, q.w_zp, q.w_zp_count, /*n_major=*/true);
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const DType want = x_signed_ ? DType::kI8 : DType::kU8;
    if (x.dtype() != want || x.rank() != 4 || x.dim(3) != packed_.K || packed_.K == 0) return fallback_(ctx);
    std::vector<int64_t> out_dims = x.dims();
    out_dims.back() = packed_.N;
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, epi_.y_dt, out_dims, false));
    cpu::int8_gemm(x.raw(), x_signed_, x_zp_, x.numel() / packed_.K, packed_, epi_, y->mutable_raw());
    return Status::ok();
  }

 private:
  Node node_;
  KernelFn fallback_;
  bool x_signed_ = false;
  int32_t x_zp_ = 0;
  EpilogueFactors factors_;
  cpu::Int8GemmEpilogue epi_;
  cpu::PackedInt8B packed_;
};

}  // namespace

void register_cpu_int8_gemm_kernels(CpuKernelTable& t) {
  t.add("com.ferry", "QMatMulFused", cpu::make_if_init<Int8GemmQMatMulKernel>);
  t.add("com.ferry", "QConvFused", cpu::make_if_init<Int8GemmQConvKernel>);
}

}  // namespace ferry
