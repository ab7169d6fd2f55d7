// com.ferry.QConvFused as a depthwise 3x3 convolution (MobileNetV2's; EfficientNet-B0's, with a float
// output before their SiLU, stay on oneDNN): channels last, group = input channels = output channels,
// stride 1 (or 2 on a source of at most 1.5 MiB per image), dilation 1, any padding, u8 or s8 source
// (any zero point), s8 weights (any zero point, scalar or per channel), on AVX2. oneDNN runs these
// widened to 32 bits per tap (int8_pair_saturation.h); this kernel multiplies two taps per vpmaddwd
// instead, exact in int32 as the reference's ConvInteger:
// - A pair of source rows (r, r + 1) is widened once, x - x_zp in int16 (vpunpcklbw interleaves the two
//   rows, then vpmovzxbw / vpmovsxbw, so each int32 lane of a vpmaddwd holds one channel's two taps;
//   with channels a multiple of 16 a row is one run of blocks, no subtraction where x_zp is 0), padding
//   columns and rows as 0 (x = x_zp, which adds 0 as in the reference), into a per-thread ring of 4 pairs
//   that start on 64-byte boundaries (no 32-byte load split across cache lines).
// - Stride 1 (row2): two output rows per pass. Rows oh and oh + 1 read the pairs (oh - pad, + 1) and
//   (+ 2, + 3), oh with the weights of kernel rows (0, 1) and (2, 0), oh + 1 with (0, 0) and (1, 2)
//   (0: a zero weight), so each source vector loaded feeds two vpmaddwd and each pair is built once for
//   two passes: every source row widened once, where one output row per pass widened each twice with
//   twice the loads (MobileNetV2's stride-1 layers now 0.82-0.94x the CPU time, docs/performance.md).
//   12 vpmaddwd per 8 channels for 2 x 9 taps, the half block's 12 weight vectors in registers.
// - Small images (kChunkPixels outputs at most, channels a multiple of 16: MobileNetV2's 14x14 and 7x7
//   outputs): the ring's whole row pairs pass L1 (7x7x960: 35 KB a pair), so a chunk of channel blocks
//   (its two pairs within kChunkBytes) runs over all of a range's rows in an image, one pair built per
//   step: 0.88-0.95x the CPU time (docs/performance.md); on 28x28 even, slower on larger images.
// - Stride 2 (row) and an image's odd last row: output row oh reads the pairs (oh * s - pad, + 1) with
//   kernel rows (0, 1) and (oh * s - pad + 2, + 3) with (2, 0): 6 vpmaddwd per 8 channels for 9 taps,
//   two pixels per step; at stride 2 each pair is read by two output rows. (Two stride-2 rows per pass
//   from three pairs, 9 loads instead of 12, measured slower.)
// - (w - w_zp) and (x - x_zp) lie in [-255, 255]: a pair sums to at most 130050 in magnitude, nine taps
//   far inside int32.
// - The epilogue is int8_epilogue.h's integer form (EpiFlags::int_form: an 8-bit output, an int32 bias
//   or none, finite scales), bit for bit the reference's float steps (tests/unit/test_int8_depthwise_conv.cpp),
//   on half a block of 16 channels at a time (row: its constants in registers too); its clamp left out
//   where the 8-bit saturation implies it (int_clamp_implied: MobileNetV2's ReLU6 outputs).
// Declined, so oneDNN's kernel runs them: stride 2 on a larger source (the row pairs' traffic past L2
// lost to oneDNN's in-place taps), hosts without AVX2 or with VNNI (int8_gemm_available), a residual, a
// mid Q/DQ pair, a float activation, a float bias or output (the float epilogue made this kernel slower).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/int8_epilogue.h"
#include "backends/cpu/int8_gemm.h"
#include "backends/cpu/int8_util.h"
#include "backends/cpu/node_attrs.h"
#include "backends/cpu/one_thread_rules.h"
#include "ops/conv_pool_util.h"

namespace ferry {
namespace {

using cpu::NodeAttrs;

constexpr int kCb = 16;        // channels per block (one PanelEpi)
constexpr int kBlockI16 = 32;  // int16 per block of a row pair: 16 channels x 2 rows
constexpr int kSlots = 4;      // row pairs a thread keeps
// Stride 2 taken up to this many source bytes per image (MobileNetV2's 56x56x144 -> 28x28 0.86-0.89x
// oneDNN's CPU time; its 112x112x96 -> 56x56, 1.2 MB, 1.02-1.04x before the clamp was left out where
// implied (int_clamp_implied), 0.86x after: docs/performance.md). Larger sources were not measured.
constexpr int64_t kMaxStride2Bytes = 1536 * 1024;
// Small images (output pixels per image at most kChunkPixels): a chunk of channel blocks at a time, its two
// row pairs within kChunkBytes (half of L1); the header's "Small images".
constexpr int64_t kChunkPixels = 14 * 14;
constexpr int64_t kChunkBytes = 16 * 1024;

// A widened row pair: [columns][channel blocks][16 channels][2 rows] int16, from a 64-byte boundary (each
// half block's 32-byte load then within one cache line).
struct RowPair {
  int64_t n = -1, r = 0;  // image and first row held (n = -1: empty)
  std::vector<int16_t> buf;
  int16_t* data = nullptr;  // buf's first 64-byte boundary
  void reserve(int64_t count) {
    if (data && data + count <= buf.data() + buf.size()) return;
    buf.resize(static_cast<size_t>(count + 32));
    data = reinterpret_cast<int16_t*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63});
  }
};

// Per-thread state: the ring of row pairs and a row of x_zp bytes for padding.
struct Scratch {
  RowPair slot[kSlots];
  std::vector<uint8_t> pad;
};

// `count` blocks of 16 channels from rows a and b (null: padding rows, x_zp), widened minus zp and
// interleaved per channel into o (kZp: zp is not 0; MobileNetV2's sources, ReLU6 outputs, have 0).
template <bool kSigned, bool kZp>
__attribute__((target("avx2"))) void widen_run(const uint8_t* a, const uint8_t* b, int64_t count, int32_t zp, int16_t* o) {
  const __m256i z = _mm256_set1_epi16(static_cast<int16_t>(zp));
  const __m128i padv = _mm_set1_epi8(static_cast<char>(zp));
  for (int64_t i = 0; i < count; ++i, o += kBlockI16) {
    const __m128i xa = a ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i * kCb)) : padv;
    const __m128i xb = b ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i * kCb)) : padv;
    const __m128i lo = _mm_unpacklo_epi8(xa, xb), hi = _mm_unpackhi_epi8(xa, xb);
    const __m256i wlo = kSigned ? _mm256_cvtepi8_epi16(lo) : _mm256_cvtepu8_epi16(lo);
    const __m256i whi = kSigned ? _mm256_cvtepi8_epi16(hi) : _mm256_cvtepu8_epi16(hi);
    _mm256_store_si256(reinterpret_cast<__m256i*>(o), kZp ? _mm256_sub_epi16(wlo, z) : wlo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(o + 16), kZp ? _mm256_sub_epi16(whi, z) : whi);
  }
}

// Rows r and r + 1 of image n, widened minus zp and interleaved per channel, into d (wp columns).
__attribute__((target("avx2"))) void build_pair(const uint8_t* x, int64_t xbytes, int64_t n, int64_t r, int64_t H, int64_t W, int64_t C,
                                                int64_t blocks, int64_t wp, int64_t pad_w, bool is_signed, int32_t zp, const uint8_t* pad,
                                                int16_t* d) {
  const __m256i z = _mm256_set1_epi16(static_cast<int16_t>(zp));
  const bool va = r >= 0 && r < H, vb = r + 1 >= 0 && r + 1 < H;
  if (C % kCb == 0 && (va || vb)) {
    // Channels a multiple of 16: the source columns' blocks are contiguous in x, as are the row pair's
    // columns in d, so the W source columns are one run of W * C / 16 blocks; the padding columns 0.
    const int64_t lead = std::min(pad_w, wp), run_cols = std::max<int64_t>(0, std::min(W, wp - pad_w));
    std::memset(d, 0, sizeof(int16_t) * static_cast<size_t>(lead * blocks * kBlockI16));
    int16_t* o = d + lead * blocks * kBlockI16;
    const uint8_t* a = va ? x + (n * H + r) * W * C : nullptr;
    const uint8_t* b = vb ? x + (n * H + r + 1) * W * C : nullptr;
    const int64_t count = run_cols * blocks;
    if (is_signed) {
      if (zp) widen_run<true, true>(a, b, count, zp, o);
      else widen_run<true, false>(a, b, count, zp, o);
    } else {
      if (zp) widen_run<false, true>(a, b, count, zp, o);
      else widen_run<false, false>(a, b, count, zp, o);
    }
    o += count * kBlockI16;
    const int64_t tail = wp - lead - run_cols;
    if (tail > 0) std::memset(o, 0, sizeof(int16_t) * static_cast<size_t>(tail * blocks * kBlockI16));
    return;
  }
  alignas(16) uint8_t ta[kCb], tb[kCb];
  for (int64_t j = 0; j < wp; ++j, d += blocks * kBlockI16) {
    const int64_t iw = j - pad_w;
    const bool col = iw >= 0 && iw < W;
    if (!col || (!va && !vb)) {
      std::memset(d, 0, sizeof(int16_t) * static_cast<size_t>(blocks * kBlockI16));
      continue;
    }
    const uint8_t* a = va ? x + ((n * H + r) * W + iw) * C : pad;
    const uint8_t* b = vb ? x + ((n * H + r + 1) * W + iw) * C : pad;
    for (int64_t cb = 0; cb < blocks; ++cb) {
      const uint8_t* pa = a + cb * kCb;
      const uint8_t* pb = b + cb * kCb;
      // Lanes past C read the next pixel's bytes (their weights are 0), never past x's end.
      if (va && (pa - x) + kCb > xbytes) {
        std::memset(ta, static_cast<int>(zp), kCb);
        std::memcpy(ta, pa, static_cast<size_t>(xbytes - (pa - x)));
        pa = ta;
      }
      if (vb && (pb - x) + kCb > xbytes) {
        std::memset(tb, static_cast<int>(zp), kCb);
        std::memcpy(tb, pb, static_cast<size_t>(xbytes - (pb - x)));
        pb = tb;
      }
      const __m128i xa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pa));
      const __m128i xb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pb));
      const __m128i lo = _mm_unpacklo_epi8(xa, xb), hi = _mm_unpackhi_epi8(xa, xb);
      const __m256i wlo = is_signed ? _mm256_cvtepi8_epi16(lo) : _mm256_cvtepu8_epi16(lo);
      const __m256i whi = is_signed ? _mm256_cvtepi8_epi16(hi) : _mm256_cvtepu8_epi16(hi);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + cb * kBlockI16), _mm256_sub_epi16(wlo, z));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + cb * kBlockI16 + 16), _mm256_sub_epi16(whi, z));
    }
  }
}

// Rows r and r + 1 of image n, blocks [cb0, cb0 + k) only (C a multiple of 16), widened minus zp and
// interleaved per channel into d ([wp columns][k blocks][32]).
template <bool kSigned, bool kZp>
__attribute__((target("avx2"))) void build_chunk(const uint8_t* x, int64_t n, int64_t r, int64_t H, int64_t W, int64_t C, int64_t cb0,
                                                 int64_t k, int64_t wp, int64_t pad_w, int32_t zp, int16_t* d) {
  const bool va = r >= 0 && r < H, vb = r + 1 >= 0 && r + 1 < H;
  const int64_t col = k * kBlockI16, lead = std::min(pad_w, wp), run_cols = std::max<int64_t>(0, std::min(W, wp - pad_w));
  if (!va && !vb) {
    std::memset(d, 0, sizeof(int16_t) * static_cast<size_t>(wp * col));
    return;
  }
  std::memset(d, 0, sizeof(int16_t) * static_cast<size_t>(lead * col));
  const uint8_t* a = va ? x + (n * H + r) * W * C + cb0 * kCb : nullptr;
  const uint8_t* b = vb ? x + (n * H + r + 1) * W * C + cb0 * kCb : nullptr;
  int16_t* o = d + lead * col;
  for (int64_t iw = 0; iw < run_cols; ++iw, o += col)
    widen_run<kSigned, kZp>(a ? a + iw * C : nullptr, b ? b + iw * C : nullptr, k, zp, o);
  const int64_t tail = wp - lead - run_cols;
  if (tail > 0) std::memset(o, 0, sizeof(int16_t) * static_cast<size_t>(tail * col));
}

using ChunkFn = void (*)(const uint8_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int32_t,
                        int16_t*);

// One output row, in halves of 8 channels of a block (a / b: the row pairs (oh - pad) and (+ 2); w:
// [blocks][kw][2 pairs][32]): the half's 6 weight vectors and epilogue constants stay in
// registers while two pixels at a time take 6 vpmaddwd each (P read straight from memory), the integer
// epilogue (int8_epilogue.h's epilogue_int steps on 8 lanes; y's zero point not added where it is 0,
// a ReLU6 output's), and one pack for both pixels' 8 bytes.
template <int YT, bool kZp, bool kClamp>  // kZp: y's zero point is not 0; kClamp: !flags.int_implied
__attribute__((target("avx2"))) void row(const int16_t* a, const int16_t* b, const int16_t* w, int64_t blocks, int64_t ow_count, int64_t sw, int64_t C,
                                          const cpu::PanelEpi* panels, const cpu::EpiFlags& flags,
                                          char* y) {
  const __m256 lo = _mm256_set1_ps(flags.int_lo), hi = _mm256_set1_ps(flags.int_hi);
  const __m256i zp = _mm256_set1_epi32(flags.int_zp);
  const __m256i gather = _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5);  // dwords: pixel 0's 8 bytes, then pixel 1's
  const int64_t col = blocks * kBlockI16, step = sw * col;
  for (int64_t cb = 0; cb < blocks; ++cb) {
    for (int h = 0; h < 2; ++h) {
      const int64_t c0 = cb * kCb + h * 8;
      if (c0 >= C) break;
      const int cols = static_cast<int>(std::min<int64_t>(8, C - c0));
      const int16_t* wb = w + cb * 6 * kBlockI16 + h * 16;
      const __m256i wa0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb));
      const __m256i wb0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + kBlockI16));
      const __m256i wa1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2 * kBlockI16));
      const __m256i wb1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 3 * kBlockI16));
      const __m256i wa2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 4 * kBlockI16));
      const __m256i wb2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 5 * kBlockI16));
      const __m256i bias = _mm256_load_si256(reinterpret_cast<const __m256i*>(panels[cb].bias + h * 8));
      const __m256 mul = _mm256_load_ps(panels[cb].mul + h * 8);
      const int16_t* pa = a + cb * kBlockI16 + h * 16;
      const int16_t* pb = b + cb * kBlockI16 + h * 16;
      char* yo = y + c0;
      const auto sum = [&](int64_t ow) __attribute__((target("avx2"))) {
        const __m256i* ra = reinterpret_cast<const __m256i*>(pa + ow * step);
        const __m256i* rb = reinterpret_cast<const __m256i*>(pb + ow * step);
        const int64_t c = col / 16;  // a column in __m256i
        __m256i s = _mm256_madd_epi16(wa0, _mm256_loadu_si256(ra));
        __m256i t = _mm256_madd_epi16(wb0, _mm256_loadu_si256(rb));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(wa1, _mm256_loadu_si256(ra + c)));
        t = _mm256_add_epi32(t, _mm256_madd_epi16(wb1, _mm256_loadu_si256(rb + c)));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(wa2, _mm256_loadu_si256(ra + 2 * c)));
        t = _mm256_add_epi32(t, _mm256_madd_epi16(wb2, _mm256_loadu_si256(rb + 2 * c)));
        const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_add_epi32(s, t), bias)), mul);
        const __m256i q = _mm256_cvtps_epi32(kClamp ? _mm256_min_ps(hi, _mm256_max_ps(lo, v)) : v);
        return kZp ? _mm256_add_epi32(q, zp) : q;
      };
      const auto pack = [&](__m256i q0, __m256i q1) __attribute__((target("avx2"))) {
        const __m256i t = _mm256_packs_epi32(q0, q1);
        const __m256i u = YT == 1 ? _mm256_packus_epi16(t, t) : _mm256_packs_epi16(t, t);
        return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(u, gather));
      };
      int64_t ow = 0;
      if (cols == 8) {
        for (; ow + 2 <= ow_count; ow += 2) {
          const __m128i r = pack(sum(ow), sum(ow + 1));
          _mm_storel_epi64(reinterpret_cast<__m128i*>(yo + ow * C), r);
          _mm_storel_epi64(reinterpret_cast<__m128i*>(yo + (ow + 1) * C), _mm_unpackhi_epi64(r, r));
        }
      }
      for (; ow < ow_count; ++ow) {
        alignas(16) uint8_t t[16];
        _mm_store_si128(reinterpret_cast<__m128i*>(t), pack(sum(ow), zp));
        std::memcpy(yo + ow * C, t, static_cast<size_t>(cols));
      }
    }
  }
}

// Two output rows of stride 1, oh and oh + 1, from the row pairs a = (oh - pad, + 1) and b = (+ 2, + 3) (w:
// [blocks][kw][4 weight pairs][32], the header's): each source vector loaded once into a register feeds
// both rows' vpmaddwd; per half block the 12 weight vectors stay in registers, one pixel per step, the
// epilogue's constants read from memory; one pack for both rows' 8 bytes.
template <int YT, bool kZp, bool kClamp>
__attribute__((target("avx2"))) void row2(const int16_t* a, const int16_t* b, const int16_t* w, int64_t blocks, int64_t ow_count, int64_t sw, int64_t C,
                                           const cpu::PanelEpi* panels, const cpu::EpiFlags& flags, char* y0, char* y1) {
  const __m256 lo = _mm256_set1_ps(flags.int_lo), hi = _mm256_set1_ps(flags.int_hi);
  const __m256i zp = _mm256_set1_epi32(flags.int_zp);
  const int64_t col = blocks * kBlockI16, step = sw * col;
  for (int64_t cb = 0; cb < blocks; ++cb) {
    for (int h = 0; h < 2; ++h) {
      const int64_t c0 = cb * kCb + h * 8;
      if (c0 >= C) break;
      const int cols = static_cast<int>(std::min<int64_t>(8, C - c0));
      const int16_t* wb = w + cb * 12 * kBlockI16 + h * 16;
      const auto wv = [&](int i) __attribute__((target("avx2"))) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + i * kBlockI16));
      };
      const __m256i a0 = wv(0), b0 = wv(1), c0v = wv(2), d0 = wv(3);
      const __m256i a1 = wv(4), b1 = wv(5), c1 = wv(6), d1 = wv(7);
      const __m256i a2 = wv(8), b2 = wv(9), c2 = wv(10), d2 = wv(11);
      const __m256i* bias = reinterpret_cast<const __m256i*>(panels[cb].bias + h * 8);
      const float* mul = panels[cb].mul + h * 8;
      const int16_t* pa = a + cb * kBlockI16 + h * 16;
      const int16_t* pb = b + cb * kBlockI16 + h * 16;
      const auto epi = [&](__m256i acc) __attribute__((target("avx2"))) {
        const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(acc, _mm256_load_si256(bias))), _mm256_load_ps(mul));
        const __m256i q = _mm256_cvtps_epi32(kClamp ? _mm256_min_ps(hi, _mm256_max_ps(lo, v)) : v);
        return kZp ? _mm256_add_epi32(q, zp) : q;
      };
      for (int64_t ow = 0; ow < ow_count; ++ow) {
        const __m256i* ra = reinterpret_cast<const __m256i*>(pa + ow * step);
        const __m256i* rb = reinterpret_cast<const __m256i*>(pb + ow * step);
        const int64_t c = col / 16;  // a column in __m256i
        // Each source vector loaded once into a register for its two vpmaddwd, in this order (the empty asm
        // statements keep the compiler from folding the loads into both and from spilling weights).
        __m256i s = _mm256_setzero_si256(), t = _mm256_setzero_si256();
        const auto tap2 = [&](const __m256i* p, __m256i ws, __m256i wt) __attribute__((target("avx2"))) {
          __m256i x = _mm256_load_si256(p);
          __asm__("" : "+x"(x));
          s = _mm256_add_epi32(s, _mm256_madd_epi16(ws, x));
          t = _mm256_add_epi32(t, _mm256_madd_epi16(wt, x));
          __asm__("" : "+x"(s), "+x"(t));
        };
        tap2(ra, a0, c0v);
        tap2(rb, b0, d0);
        tap2(ra + c, a1, c1);
        tap2(rb + c, b1, d1);
        tap2(ra + 2 * c, a2, c2);
        tap2(rb + 2 * c, b2, d2);
        // int16 [s 0-3, t 0-3 | s 4-7, t 4-7] -> [s 0-7 | t 0-7] -> bytes: row oh's 8 in the low lane, oh + 1's in the high
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(epi(s), epi(t)), 0xD8);
        const __m256i u = YT == 1 ? _mm256_packus_epi16(p, p) : _mm256_packs_epi16(p, p);
        if (cols == 8) {
          _mm_storel_epi64(reinterpret_cast<__m128i*>(y0 + ow * C + c0), _mm256_castsi256_si128(u));
          _mm_storel_epi64(reinterpret_cast<__m128i*>(y1 + ow * C + c0), _mm256_extracti128_si256(u, 1));
        } else {
          alignas(32) uint8_t tb[32];
          _mm256_store_si256(reinterpret_cast<__m256i*>(tb), u);
          std::memcpy(y0 + ow * C + c0, tb, static_cast<size_t>(cols));
          std::memcpy(y1 + ow * C + c0, tb + 16, static_cast<size_t>(cols));
        }
      }
    }
  }
}

using RowFn = void (*)(const int16_t*, const int16_t*, const int16_t*, int64_t, int64_t, int64_t, int64_t, const cpu::PanelEpi*,
                       const cpu::EpiFlags&, char*);
using Row2Fn = void (*)(const int16_t*, const int16_t*, const int16_t*, int64_t, int64_t, int64_t, int64_t, const cpu::PanelEpi*,
                        const cpu::EpiFlags&, char*, char*);

class Int8DepthwiseQConvKernel : public Kernel {
 public:
  Int8DepthwiseQConvKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    if (!cpu::int8_gemm_available()) return false;
    enum : size_t { kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kYScale, kYZp, kB, kZ, kZScale, kZZp, kMidScale, kMidZp };
    NodeAttrs attrs(node_);
    if (attrs.get_int("channels_last", 0) == 0 || !attrs.get_string("activation", "").empty() || cpu::has_input(node_, kZ) ||
        cpu::has_input(node_, kMidScale) || node_.outputs.size() != 1)  // (yq: dnnl_int8_conv)
      return false;
    const Tensor* w = cpu::constant_input(graph, node_, kW);
    const Tensor* ws = cpu::constant_input(graph, node_, kWScale);
    if (!w || w->dtype() != DType::kI8 || w->rank() != 4 || !ws || ws->dtype() != DType::kF32) return false;
    const int64_t M = w->dim(0);
    if (M < 1 || w->dim(1) != 1 || w->dim(2) != 3 || w->dim(3) != 3 || attrs.get_int("group", 1) != M ||
        (ws->numel() != 1 && ws->numel() != M))
      return false;
    const std::vector<int64_t> kernel = {3, 3};
    if (!read_spatial_attrs(attrs, 2, &kernel, true, &spatial_).is_ok()) return false;
    for (int64_t v : spatial_.strides)
      if (v != 1 && v != 2) return false;
    if (spatial_.strides[0] == 2 || spatial_.strides[1] == 2) {
      // Stride 2 widens every source pixel for a quarter of the outputs; past L2 (an image's source over
      // kMaxStride2Bytes) the row pairs' traffic lost to oneDNN's kernel, which reads the taps in place.
      const TensorType* xt = graph.find_type(node_.inputs[kX]);
      if (!xt || !xt->shape || xt->shape->rank() != 4) return false;
      int64_t bytes = 1;
      for (int i = 1; i < 4; ++i) {
        if (!xt->shape->dims[i].is_known()) return false;
        bytes *= xt->shape->dims[i].value;
      }
      if (bytes > kMaxStride2Bytes) return false;
    }
    for (int64_t v : spatial_.dilations)
      if (v != 1) return false;
    cpu::QConvOperands q;
    if (!cpu::read_qconv_operands(graph, node_, *ws, M, &q, &factors_, &epi_, /*any_x_zp=*/true)) return false;
    x_signed_ = q.x_signed;
    x_zp_ = q.x_zp;
    C_ = M;
    blocks_ = (M + kCb - 1) / kCb;
    // [blocks][kw][(kh 0, kh 1) pairs, then (kh 2, 0) pairs][16 channels x 2], w - w_zp; channels past M 0.
    weights_.assign(static_cast<size_t>(blocks_ * 6 * kBlockI16), 0);
    weights2_.assign(static_cast<size_t>(blocks_ * 12 * kBlockI16), 0);
    const int8_t* src = w->data<int8_t>();
    std::vector<double> acc_bound(static_cast<size_t>(M));  // |acc + bias| <= 255 sum |w - w_zp| + |bias|
    for (int64_t m = 0; m < M; ++m) {
      const int32_t zp = q.w_zp ? q.w_zp[q.w_zp_count == 1 ? 0 : m] : 0;
      const auto tap = [&](int kh, int kw) { return static_cast<int16_t>(src[m * 9 + kh * 3 + kw] - zp); };
      for (int t = 0; t < 9; ++t) acc_bound[static_cast<size_t>(m)] += 255.0 * std::abs(src[m * 9 + t] - zp);
      if (!factors_.bias.empty()) acc_bound[static_cast<size_t>(m)] += std::abs(static_cast<double>(factors_.bias[static_cast<size_t>(m)]));
      for (int kw = 0; kw < 3; ++kw) {
        int16_t* d = weights_.data() + (m / kCb * 6 + kw * 2) * kBlockI16 + (m % kCb) * 2;
        d[0] = tap(0, kw);
        d[1] = tap(1, kw);
        d[kBlockI16] = tap(2, kw);
        // Two rows at a time (stride 1): [blocks][kw][(0, 1), (2, 0), (0, 0), (1, 2)][32]: oh + 1 on the same pairs.
        int16_t* e = weights2_.data() + (m / kCb * 12 + kw * 4) * kBlockI16 + (m % kCb) * 2;
        e[0] = tap(0, kw);
        e[1] = tap(1, kw);
        e[kBlockI16] = tap(2, kw);
        e[2 * kBlockI16 + 1] = tap(0, kw);
        e[3 * kBlockI16] = tap(1, kw);
        e[3 * kBlockI16 + 1] = tap(2, kw);
      }
    }
    cpu::panel_epilogue(factors_, epi_, M, &panels_, &flags_);
    cpu::int_clamp_implied(epi_, acc_bound, &flags_);
    // The float epilogue's 13 steps per 8 outputs made this kernel slower than oneDNN's: only the integer form.
    return flags_.int_form;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const DType want = x_signed_ ? DType::kI8 : DType::kU8;
    if (x.dtype() != want || x.rank() != 4 || x.dim(3) != C_) return fallback_(ctx);
    NodeAttrs attrs(node_);
    AxisGeom gh, gw;
    if (!conv_pool_axis(attrs, spatial_, 0, x.dim(1), &gh).is_ok() || !conv_pool_axis(attrs, spatial_, 1, x.dim(2), &gw).is_ok() ||
        gh.out <= 0 || gw.out <= 0 || gh.pad_begin < 0 || gw.pad_begin < 0)
      return fallback_(ctx);
    const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = C_, OH = gh.out, OW = gw.out;
    const int64_t sh = spatial_.strides[0], sw = spatial_.strides[1], ph = gh.pad_begin, pw = gw.pad_begin;
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, epi_.y_dt, {N, OH, OW, C}, false));
    const int64_t wp = (OW - 1) * sw + 3, pair_i16 = wp * blocks_ * kBlockI16, xbytes = x.numel();
    static constexpr RowFn kRows[2][2][2] = {{{row<1, false, true>, row<1, false, false>}, {row<1, true, true>, row<1, true, false>}},
                                             {{row<2, false, true>, row<2, false, false>}, {row<2, true, true>, row<2, true, false>}}};
    const RowFn fn = kRows[epi_.y_dt == DType::kU8 ? 0 : 1][flags_.int_zp != 0][flags_.int_implied];
    static constexpr Row2Fn kRows2[2][2][2] = {
        {{row2<1, false, true>, row2<1, false, false>}, {row2<1, true, true>, row2<1, true, false>}},
        {{row2<2, false, true>, row2<2, false, false>}, {row2<2, true, true>, row2<2, true, false>}}};
    const Row2Fn fn2 = kRows2[epi_.y_dt == DType::kU8 ? 0 : 1][flags_.int_zp != 0][flags_.int_implied];
    const uint8_t* xp = static_cast<const uint8_t*>(x.raw());
    char* yp = static_cast<char*>(y->mutable_raw());
    const auto rows = [&](int64_t r0, int64_t r1) {
      thread_local Scratch s;
      for (RowPair& p : s.slot) {
        p.n = -1;
        p.reserve(pair_i16);
      }
      s.pad.assign(static_cast<size_t>(blocks_ * kCb), static_cast<uint8_t>(x_zp_));
      // The slot holding rows (r, r + 1) of image n, built if none does (replacing the oldest, not `keep`).
      const auto get = [&](int64_t n, int64_t r, int keep) {
        int victim = -1;
        for (int i = 0; i < kSlots; ++i) {
          if (s.slot[i].n == n && s.slot[i].r == r) return i;
          if (i == keep) continue;
          if (victim < 0 || s.slot[i].n < s.slot[victim].n || (s.slot[i].n == s.slot[victim].n && s.slot[i].r < s.slot[victim].r))
            victim = i;
        }
        build_pair(xp, xbytes, n, r, H, W, C, blocks_, wp, pw, x_signed_, x_zp_, s.pad.data(), s.slot[victim].data);
        s.slot[victim].n = n;
        s.slot[victim].r = r;
        return victim;
      };
      for (int64_t orow = r0; orow < r1;) {
        const int64_t n = orow / OH, oh = orow % OH, r = oh * sh - ph;
        const int ia = get(n, r, -1);
        const int ib = get(n, r + 2, ia);
        if (sh == 1 && orow + 1 < r1 && oh + 1 < OH) {
          fn2(s.slot[ia].data, s.slot[ib].data, weights2_.data(), blocks_, OW, sw, C, panels_.data(), flags_, yp + orow * OW * C,
              yp + (orow + 1) * OW * C);
          orow += 2;
        } else {
          fn(s.slot[ia].data, s.slot[ib].data, weights_.data(), blocks_, OW, sw, C, panels_.data(), flags_, yp + orow * OW * C);
          ++orow;
        }
      }
    };
    // A small image (kChunkPixels outputs at most; channels a multiple of 16): K channel blocks at a time over
    // all of a range's rows in an image, the chunk's two row pairs (kChunkBytes together) in L1.
    const int64_t K = std::max<int64_t>(1, std::min(blocks_, kChunkBytes / (2 * wp * kBlockI16 * 2)));
    static constexpr ChunkFn kChunk[2][2] = {{build_chunk<false, false>, build_chunk<false, true>},
                                             {build_chunk<true, false>, build_chunk<true, true>}};
    const ChunkFn chunk = kChunk[x_signed_][x_zp_ != 0];
    const auto chunks = [&](int64_t r0, int64_t r1) {
      thread_local Scratch s;
      s.slot[0].reserve(wp * K * kBlockI16);
      s.slot[1].reserve(wp * K * kBlockI16);
      for (int64_t orow = r0; orow < r1;) {
        const int64_t n = orow / OH, oh0 = orow % OH, oh1 = std::min(OH, oh0 + (r1 - orow)), r = oh0 * sh - ph;
        char* yn = yp + n * OH * OW * C;
        for (int64_t cb0 = 0; cb0 < blocks_; cb0 += K) {
          const int64_t k = std::min(K, blocks_ - cb0);
          int16_t* slot[2] = {s.slot[0].data, s.slot[1].data};
          chunk(xp, n, r, H, W, C, cb0, k, wp, pw, x_zp_, slot[0]);
          int64_t j = 0;
          for (int64_t oh = oh0; oh < oh1; ++j) {
            // Step j (rows oh and oh + 1 at stride 1, oh at stride 2) reads the pairs j (rows r + 2j, + 1) and j + 1.
            chunk(xp, n, r + 2 * (j + 1), H, W, C, cb0, k, wp, pw, x_zp_, slot[(j + 1) & 1]);
            const int16_t* pa = slot[j & 1];
            const int16_t* pb = slot[(j + 1) & 1];
            char* y0 = yn + oh * OW * C + cb0 * kCb;
            if (sh == 1 && oh + 1 < oh1) {
              fn2(pa, pb, weights2_.data() + cb0 * 12 * kBlockI16, k, OW, sw, C, panels_.data() + cb0, flags_, y0, y0 + OW * C);
              oh += 2;
            } else {
              fn(pa, pb, weights_.data() + cb0 * 6 * kBlockI16, k, OW, sw, C, panels_.data() + cb0, flags_, y0);
              ++oh;
            }
          }
        }
        orow += oh1 - oh0;
      }
    };
    const bool chunked = C % kCb == 0 && OH * OW <= kChunkPixels;
    if (cpu::int8_on_one_thread(N * OH * OW * C * 9)) {  // one_thread_rules.h
      if (chunked)
        chunks(0, N * OH);
      else
        rows(0, N * OH);
    } else if (chunked)
      parallel_ranges(N * OH, OW * C * 12, chunks);
    else
      parallel_ranges(N * OH, OW * C * 12, rows);
    return Status::ok();
  }

 private:
  Node node_;
  KernelFn fallback_;
  SpatialAttrs spatial_;
  bool x_signed_ = false;
  int32_t x_zp_ = 0;
  int64_t C_ = 0, blocks_ = 0;
  cpu::EpilogueFactors factors_;
  cpu::Int8GemmEpilogue epi_;
  std::vector<int16_t> weights_, weights2_;
  std::vector<cpu::PanelEpi> panels_;
  cpu::EpiFlags flags_;
};

}  // namespace

void register_cpu_int8_depthwise_conv_kernels(CpuKernelTable& t) {
  t.add("com.ferry", "QConvFused", cpu::make_if_init<Int8DepthwiseQConvKernel>);
}

}  // namespace ferry
