// com.ferry.QConvFused on a narrow reduction, where oneDNN would split (AVX2 without VNNI, weights
// outside [-64, 64], a source with a zero point: int8_pair_saturation.h): image stems (1-8 input channels,
// any kernel, stride, padding, dilation; MobileNetV2's 3x3/2, ResNet-50's 7x7/2 on the quantized image) and
// 1x1 convolutions of 1-128 input channels (MobileNetV2's expansions of 16-96 channels reading residual
// sums, zero point ~128; wider ones take int8_gemm.cpp's 1x1 rule). oneDNN's split doubles the
// reduction, and int8_gemm's separate passes (the rows widened into a buffer, accumulators stored and
// read back by a per-row epilogue) cost more than the few multiply-adds per output here.
// So this kernel runs 6 output pixels at a time end to end: their sources as int16 minus the zero point (a 1x1's
// channels widened per block into a small per-thread buffer; a stem's patches are not gathered: run_stem widens
// each output row's KH source rows once, the padding as 0 (the reference's ConvInteger pads with the zero point,
// which adds 0), and each pixel reads its window in place, a kernel row's KW x C values contiguous there and the
// 6 pixels' windows stride x C apart: int8_micro.h's window_pair_sums, the weights repacked once per kernel row,
// an odd row's last value paired with a zero weight. Against the gathered patches before it (issue 38, session 25,
// `ferry profile -t 1 / -t 2` CPU ms alternated with main's build, normalized by unchanged nodes, load 3-6, with
// tile_integer's epilogue; docs/performance.md): MobileNetV2's 3x3/2 stem 0.67x / 0.72x, now 0.79x ferry's fp32
// stem; ResNet-50's 7x7/2 0.91x / 0.95x, whose multiply-adds were already most of its time), then
// for each 16 output channels the int8_gemm panel micro kernel's vpmaddwd steps (exact in int32: int8_gemm.h) and the reference's
// epilogue on the accumulators still in registers, stored as y. The float steps are int8_gemm's
// epilogue_row (int8_epilogue.h), in the reference's order, or where the node's constants allow the same
// result in integers (int8_epilogue.h's int_clamp): bit for bit the reference kernel (tests/unit/test_int8_im2col_conv.cpp).
// Channels last, one group, 2-D, no activation; no residual or mid Q/DQ except on the byte paths (below). Also the 1x1s of <= 64 channels into
// 64+ that read a Relu's output (u8, zero point 0; see init): ResNet-50's layer1 conv3s, layer1.0 conv1 and
// downsample, on 8-bit weights in whole quads of channels on the byte path below with the outputs a saturated
// vpmaddubsw pair fed recomputed after it (int8_pair_saturation.h's scan; on ResNet-50's default file 0.77-0.89x
// oneDNN's CPU time on the conv3s and the downsample, 0.83-0.93x the int16 path's on layer1.0 conv1).
// 7-bit weights (w - w_zp in [-64, 64], which oneDNN runs unsplit): the 1x1s of up to 512 channels (a multiple
// of 4) on a u8 source with the integer epilogue take a byte path (tile_bytes: vpmaddubsw on the pixels' channels
// read in place; MobileNetV2's 7-bit expansions and last 1x1, 0.23 -> 0.17, 0.092 -> 0.071, 0.073 -> 0.061,
// 0.145 -> 0.128 CPU ms against oneDNN's unsplit kernel, `ferry profile -t 1`). Both byte paths add two quads'
// vpmaddubsw results in int16 before the vpmaddwd by ones where the weights bound every lane for any u8 source
// (int8_gemm.h's PairedQuads, int8_micro.h's quad_pair_sums): MobileNetV2's 1x1s of 96-320 channels 0.93-0.97x.
// The 1x1s' tiles with the integer epilogue (tile_integer on int16 pairs, the block's pixels widened at once;
// tile_bytes) keep the sums in registers through it (store_row_pairs), the clamp chosen per node: MobileNetV2's
// 8-bit expansions 16 -> 96 and 24 -> 144 0.82x and 0.87x the CPU time, the 7-bit ones of 24-32 channels 0.89x,
// 64-160 channels 0.95-0.97x, the 32 -> 16 projection 0.93x (`ferry profile -t 1`, docs/performance.md). The
// integer epilogue adds the output zero point only where it is not 0 (kZp; MobileNetV2's ReLU6 outputs have 0): its
// 8-bit expansions and stem 0.97x the CPU time (issue 38, session 26, docs/performance.md). A byte-path 1x1's last
// panel of at most 8 outputs sums and stores its columns 0-7 alone (kHalf, store_half_rows): MobileNetV2's 96 -> 24
// projection 0.88x oneDNN's time, where the panel computed whole was 1.14x (issue 38, session 28). The byte paths
// also run a residual z with the mid Q/DQ and no relu after the Add (tile_bytes_residual, ResidualEpi):
// MobileNetV2's ten projections into a residual Add, 0.87-0.96x oneDNN's time per call (issue 38, session 29).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/int8_epilogue.h"
#include "backends/cpu/int8_gemm.h"
#include "backends/cpu/int8_micro.h"
#include "backends/cpu/int8_pair_saturation.h"
#include "backends/cpu/int8_util.h"
#include "backends/cpu/node_attrs.h"
#include "backends/cpu/one_thread_rules.h"
#include "ops/conv_pool_util.h"

namespace ferry {
namespace {

using cpu::NodeAttrs;

constexpr int64_t kMaxStemChannels = 8;    // a stem: any kernel on this many channels or fewer
// 1x1: up to this many (registered before int8_gemm.cpp, which takes wider ones: MobileNetV2's 1x1s of
// 160 and 320 channels ran as fast or faster there, their weights no longer in L2 per 6 pixels)
constexpr int64_t kMaxPointwiseChannels = 128;
constexpr int64_t kMaxZeroZpPointwiseChannels = 64, kMinZeroZpPointwiseOutputs = 64;  // see init
constexpr int64_t kMaxBytePointwiseChannels = 512;  // 7-bit 1x1s on the byte path (tile_bytes)
constexpr int64_t kMaxRepairPointwiseChannels = 960;  // 8-bit 1x1s over a Relu's output, integer epilogue: see init
constexpr int64_t kMaxK = 512;             // the longest patch taken (the 1x1s' per-thread buffers hold 6)
constexpr int kNr = 16, kMr = 6;           // int8_gemm's panel width and rows per tile

using cpu::EpiFlags;
using cpu::PanelEpi;
using cpu::epilogue_any;

// A tile's int16 source: R pixels of `pairs` pairs, lda int16 apart (the 1x1s' widened channels), or a stem's
// R pixels of one output row on its widened source rows (window_pair_sums: `segments` runs of seg_pairs pairs).
struct PatchRows {
  const int16_t* a;
  int64_t lda;
};
struct WindowRows {
  const int16_t* const* runs;  // each segment's run at the tile's first pixel
  int64_t segments, lda, seg_pairs;
};

template <int R>
__attribute__((target("avx2"), always_inline)) inline void sums(const PatchRows& s, const int16_t* panel, int64_t pairs, const int32_t* init,
                                                                __m256i* acc) {
  cpu::pair_sums<R>(s.a, s.lda, panel, pairs, init, acc);
}
template <int R>
__attribute__((target("avx2"), always_inline)) inline void sums(const WindowRows& s, const int16_t* panel, int64_t, const int32_t* init,
                                                                __m256i* acc) {
  cpu::window_pair_sums<R>(s.runs, s.segments, s.lda, s.seg_pairs, panel, init, acc);
}

// The float epilogue's tiles call int8_micro.h's pair_sums (window_pair_sums) through accumulate, a function of its
// own: inlined there, gcc 12 kept 8 of the 12 accumulators on the stack inside the loop once that epilogue's
// constants were live beside them (the 7x7 stem 2.10 -> 2.89 CPU ms per run). The integer epilogue's tiles
// (epilogue_pair, whose constants are read after the loop) inline it: 12 stores and reloads and a call fewer per
// panel (MobileNetV2's 8-bit expansions 0.53 -> 0.49 and 0.245 -> 0.23 CPU ms, ResNet-50's stem 1.96 -> 1.92).
template <int R, class S>
__attribute__((target("avx2"), noinline)) void accumulate(const S& s, const int16_t* panel, int64_t pairs, const int32_t* init, __m256i* acc) {
  sums<R>(s, panel, pairs, init, acc);
}

// Two rows' 16 sums each (a0, a1: row a's channels 0-7, 8-15; b0, b1: row b's), the bias already in them,
// through int8_epilogue.h's epilogue_int steps (the same values: clamp of float(sum) * mul, cvtps2dq, + zp
// where kZp, the same two saturating packs), stored as `cols` bytes at ya and yb. The two rows share the
// packs and one reorder: packs_epi32 leaves each row's channels {0-3, 8-11 | 4-7, 12-15} per lane, packus
// of the two rows quadwords {a 0-3 8-11, b 0-3 8-11 | a 4-7 12-15, b 4-7 12-15}; permq (0, 2, 1, 3) puts
// a in the low lane and b in the high, pshufd (0, 2, 1, 3) the dwords in order: 7 shuffle-port steps per
// 32 outputs instead of 10, and no bias add (MobileNetV2's 8-bit expansions, 112x112x16 -> 96:
// 0.57 -> 0.53 CPU ms per run, before pair_sums was inlined).
// kClamp: !EpiFlags::int_implied (the clamp left out where the 8-bit saturation implies it, int8_epilogue.h).
template <bool kZp, bool kClamp>
__attribute__((target("avx2"), always_inline)) inline __m256i requantize(__m256i s, __m256 m, __m256 lo, __m256 hi, __m256i zp) {
  const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(s), m);
  const __m256i r = _mm256_cvtps_epi32(kClamp ? _mm256_min_ps(hi, _mm256_max_ps(lo, v)) : v);
  return kZp ? _mm256_add_epi32(r, zp) : r;
}

template <int YT, bool kZp, bool kClamp>
__attribute__((target("avx2"), always_inline)) inline void epilogue_pair(__m256i a0, __m256i a1, __m256i b0, __m256i b1, const float* mul,
                                                                         __m256 lo, __m256 hi, __m256i zp, int cols, char* ya, char* yb) {
  const __m256 m0 = _mm256_load_ps(mul), m1 = _mm256_load_ps(mul + 8);
  const __m256i wa = _mm256_packs_epi32(requantize<kZp, kClamp>(a0, m0, lo, hi, zp), requantize<kZp, kClamp>(a1, m1, lo, hi, zp));
  const __m256i wb = _mm256_packs_epi32(requantize<kZp, kClamp>(b0, m0, lo, hi, zp), requantize<kZp, kClamp>(b1, m1, lo, hi, zp));
  const __m256i p = YT == 1 ? _mm256_packus_epi16(wa, wb) : _mm256_packs_epi16(wa, wb);
  const __m256i o = _mm256_shuffle_epi32(_mm256_permute4x64_epi64(p, 0xD8), 0xD8);
  if (cols == kNr) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(ya), _mm256_castsi256_si128(o));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(yb), _mm256_extracti128_si256(o, 1));
  } else {
    alignas(32) uint8_t t[2 * kNr];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t), o);
    std::memcpy(ya, t, static_cast<size_t>(cols));
    std::memcpy(yb, t + kNr, static_cast<size_t>(cols));
  }
}

// The integer epilogue's stores of R rows' sums (YT 3: u8, 4: s8), two rows per epilogue_pair (an odd last row with
// its own sums as the second, those bytes not stored), the row pairs written out so the sums are indexed by
// constants only and stay in registers (a loop over the pairs stored the 12 accumulators to the stack and read them
// back per panel), and the clamp chosen by the caller, once per tile (kClamp: !EpiFlags::int_implied), as is the zero
// point's add (kZp: EpiFlags::int_zp != 0; MobileNetV2's expansions, ReLU6 into u8, have 0).
template <int R, int YT, bool kClamp, bool kZp, int r = 0>
__attribute__((target("avx2"), always_inline)) inline void store_row_pairs(const __m256i* acc, const float* mul, __m256 lo, __m256 hi,
                                                                           __m256i zp, int cols, char* yp, int64_t ldy) {
  if constexpr (r < R) {
    constexpr bool two = r + 1 < R;
    constexpr int b = two ? 2 * r + 2 : 2 * r;
    alignas(16) char spill[kNr];
    epilogue_pair<YT - 2, kZp, kClamp>(acc[2 * r], acc[2 * r + 1], acc[b], acc[b + 1], mul, lo, hi, zp, cols, yp + r * ldy,
                                        two ? yp + (r + 1) * ldy : spill);
    store_row_pairs<R, YT, kClamp, kZp, r + 2>(acc, mul, lo, hi, zp, cols, yp, ldy);
  }
}

// store_row_pairs for a half panel (kHalf sums: acc[2r] holds a row's channels 0-7), `cols` (<= 8) bytes a row: four
// rows share the two packs and one vpermd, {r 0-3, r+1 0-3, r+2 0-3, r+3 0-3 | their 4-7} -> each row's 8 bytes in a
// quadword (two rows where fewer are left, the pair packed twice).
template <int R, int YT, bool kClamp, bool kZp, int r = 0>
__attribute__((target("avx2"), always_inline)) inline void store_half_rows(const __m256i* acc, __m256 m, __m256 lo, __m256 hi, __m256i zp,
                                                                           int cols, char* yp, int64_t ldy) {
  if constexpr (r < R) {
    constexpr int n = R - r < 4 ? R - r : 4;  // rows stored from this group
    const __m256i w01 = _mm256_packs_epi32(requantize<kZp, kClamp>(acc[2 * r], m, lo, hi, zp),
                                           requantize<kZp, kClamp>(acc[2 * (n > 1 ? r + 1 : r)], m, lo, hi, zp));
    __m256i w23 = w01;
    if constexpr (n > 2)
      w23 = _mm256_packs_epi32(requantize<kZp, kClamp>(acc[2 * r + 4], m, lo, hi, zp),
                               requantize<kZp, kClamp>(acc[2 * (n > 3 ? r + 3 : r + 2)], m, lo, hi, zp));
    const __m256i p = YT == 3 ? _mm256_packus_epi16(w01, w23) : _mm256_packs_epi16(w01, w23);
    const __m256i o = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    const __m128i o0 = _mm256_castsi256_si128(o), o1 = _mm256_extracti128_si256(o, 1);
    const __m128i rows[4] = {o0, _mm_unpackhi_epi64(o0, o0), o1, _mm_unpackhi_epi64(o1, o1)};
    for (int i = 0; i < n; ++i) {
      if (cols == 8) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(yp + (r + i) * ldy), rows[i]);
      } else {
        alignas(16) char t[16];
        _mm_store_si128(reinterpret_cast<__m128i*>(t), rows[i]);
        std::memcpy(yp + (r + i) * ldy, t, static_cast<size_t>(cols));
      }
    }
    store_half_rows<R, YT, kClamp, kZp, r + 4>(acc, m, lo, hi, zp, cols, yp, ldy);
  }
}

// For each 16 output channels (panel p of `panels`, of M channels in all): accumulate<R>, then the float
// epilogue per row into y (row stride ldy bytes; y at the block's first pixel). One call per block of R pixels, the
// node's scalars read once for all its panels.
template <int R, int YT, class S>
__attribute__((target("avx2"))) void tile(const S& src, const int16_t* packed, int64_t pairs, const PanelEpi* pes, int64_t panels, int64_t M,
                                          const EpiFlags& flags, char* y, int64_t ldy) {
  const EpiFlags e = flags;
  const S s = src;
  constexpr int64_t ysize = YT == 0 ? 4 : 1;
  __m256i acc[2 * kMr];
  for (int64_t p = 0; p < panels; ++p) {
    const int16_t* panel = packed + p * pairs * kNr * 2;
    const PanelEpi& pe = pes[p];
    const int cols = static_cast<int>(std::min<int64_t>(kNr, M - p * kNr));
    char* yp = y + p * kNr * ysize;
    accumulate<R>(s, panel, pairs, nullptr, acc);
    for (int r = 0; r < R; ++r) epilogue_any<YT>(acc[2 * r], acc[2 * r + 1], pe, e, cols, yp + r * ldy);
  }
}

// tile with the integer epilogue (YT 3: u8, 4: s8; the bias as the sums' start): MobileNetV2's 8-bit expansions of
// 16 and 24 channels, which read residual sums (zero point ~128), and its stem. The sums stay in registers from
// pair_sums (window_pair_sums) through store_row_pairs; the node's constants are hoisted out of the panel loop
// (the stem, on store_rows_integer's loop before: 0.91x CPU ms).
template <int R, int YT, bool kClamp, bool kZp, class S>
__attribute__((target("avx2"))) void tile_integer(const S& src, const int16_t* packed, int64_t pairs, const PanelEpi* pes,
                                                  int64_t panels, int64_t M, const EpiFlags& flags, char* y, int64_t ldy) {
  const EpiFlags e = flags;
  const S s = src;
  const __m256 lo = _mm256_set1_ps(e.int_lo), hi = _mm256_set1_ps(e.int_hi);
  const __m256i zp = _mm256_set1_epi32(e.int_zp);
  __m256i acc[2 * kMr];
  for (int64_t p = 0; p < panels; ++p) {
    const PanelEpi& pe = pes[p];
    const int cols = static_cast<int>(std::min<int64_t>(kNr, M - p * kNr));
    sums<R>(s, packed + p * pairs * kNr * 2, pairs, pe.bias, acc);
    store_row_pairs<R, YT, kClamp, kZp>(acc, pe.mul, lo, hi, zp, cols, y + p * kNr, ldy);
  }
}

template <class S>
using TileFn = void (*)(const S&, const int16_t*, int64_t, const PanelEpi*, int64_t, int64_t, const EpiFlags&, char*, int64_t);
template <int YT, class S>  // 0: f32, 1: u8, 2: s8 (int8_epilogue.h's epilogue)
constexpr TileFn<S> kTiles[kMr + 1] = {nullptr, tile<1, YT, S>, tile<2, YT, S>, tile<3, YT, S>, tile<4, YT, S>, tile<5, YT, S>, tile<6, YT, S>};
template <int YT, bool kClamp, bool kZp, class S>  // YT 3, 4
constexpr TileFn<S> kIntegerTiles[kMr + 1] = {nullptr,
                                              tile_integer<1, YT, kClamp, kZp, S>,
                                              tile_integer<2, YT, kClamp, kZp, S>,
                                              tile_integer<3, YT, kClamp, kZp, S>,
                                              tile_integer<4, YT, kClamp, kZp, S>,
                                              tile_integer<5, YT, kClamp, kZp, S>,
                                              tile_integer<6, YT, kClamp, kZp, S>};

// The tiles for the node's output and epilogue (int8_epilogue.h's EpiFlags).
template <class S>
const TileFn<S>* tiles_for(DType y_dt, const EpiFlags& f) {
  const bool u8 = y_dt == DType::kU8;
  if (y_dt == DType::kF32) return kTiles<0, S>;
  if (!f.int_form) return u8 ? kTiles<1, S> : kTiles<2, S>;
  if (f.int_implied) {
    if (f.int_zp == 0) return u8 ? kIntegerTiles<3, false, false, S> : kIntegerTiles<4, false, false, S>;
    return u8 ? kIntegerTiles<3, false, true, S> : kIntegerTiles<4, false, true, S>;
  }
  if (f.int_zp == 0) return u8 ? kIntegerTiles<3, true, false, S> : kIntegerTiles<4, true, false, S>;
  return u8 ? kIntegerTiles<3, true, true, S> : kIntegerTiles<4, true, true, S>;
}

// The byte path of a 1x1: int8_micro.h's quad_pair_sums on the PairedQuads panels (two quads in int16 where the
// weights allow it), the source zero point entering as its init (the bias minus x_zp x the panel's column sums).

// quad_pair_sums from a function of its own, for the float epilogue's tiles (as accumulate, above).
template <int R, bool kPaired>
__attribute__((target("avx2"), noinline)) void accumulate_bytes(const uint8_t* a, int64_t lda, const int8_t* panel, const int32_t* offsets,
                                                               int64_t pairs, int64_t quads, const int32_t* init, __m256i* acc) {
  if constexpr (kPaired) cpu::quad_pair_sums<R>(a, lda, panel, offsets, pairs, quads, init, acc);
  else cpu::quad_sums<R>(a, lda, panel, quads, init, acc);
}

alignas(32) constexpr int32_t kZeroSums[kNr] = {};

// tile on the byte path: R pixels' u8 channels (row stride lda) against every panel of s8 quads. The integer
// epilogue's form (YT 3: u8, 4: s8) starts the sums at the panel's bias with the source zero point folded in; the
// float epilogue's (YT 0: f32, 1: u8, 2: s8; a zero-point-0 source only) at zero.
// kPaired: the layer's PairedQuads has pairs (quad_pair_sums); otherwise its quads are in their own order
// (quad_sums). Two functions rather than a branch in one: with both loops in one body gcc 12 allocated the
// single loop's registers worse (MobileNetV2's unpaired 24-channel expansion 1.09x the time). kClamp: as
// store_row_pairs (the integer form's; the float epilogue's tiles take true), and kZp (the float epilogue's take true).
// The integer form runs a last panel of at most 8 outputs on its columns 0-7 alone (kHalf sums, store_half_rows).
template <int R, int YT, bool kPaired, bool kClamp, bool kZp>
__attribute__((target("avx2"))) void tile_bytes(const uint8_t* a, int64_t lda, const cpu::PairedQuads& pq, const PanelEpi* pes, int64_t M,
                                                const EpiFlags& flags, char* y, int64_t ldy) {
  const EpiFlags e = flags;
  constexpr int64_t ysize = YT == 0 ? 4 : 1;
  const int64_t quads = pq.quads, panels = pq.panels;
  const int8_t* packed = pq.data.data();
  const int32_t* offsets = pq.offsets.data();
  const int32_t* pairs = pq.pairs.data();
  const __m256 lo = _mm256_set1_ps(e.int_lo), hi = _mm256_set1_ps(e.int_hi);
  const __m256i zp = _mm256_set1_epi32(e.int_zp);
  __m256i acc[2 * kMr];
  for (int64_t p = 0; p < panels; ++p) {
    const PanelEpi& pe = pes[p];
    const int cols = static_cast<int>(std::min<int64_t>(kNr, M - p * kNr));
    char* yp = y + p * kNr * ysize;
    const int8_t* panel = packed + p * quads * kNr * 4;
    if constexpr (YT < 3) {
      accumulate_bytes<R, kPaired>(a, lda, panel, offsets + p * quads, pairs[p], quads, kZeroSums, acc);
      for (int r = 0; r < R; ++r) epilogue_any<YT>(acc[2 * r], acc[2 * r + 1], pe, e, cols, yp + r * ldy);
      continue;
    }
    if (cols <= 8) {  // the last panel, half of it or less: its columns 0-7 only
      if constexpr (kPaired) cpu::quad_pair_sums<R, true>(a, lda, panel, offsets + p * quads, pairs[p], quads, pe.bias, acc);
      else cpu::quad_sums<R, true>(a, lda, panel, quads, pe.bias, acc);
      store_half_rows<R, YT, kClamp, kZp>(acc, _mm256_load_ps(pe.mul), lo, hi, zp, cols, yp, ldy);
      break;
    }
    if constexpr (kPaired) cpu::quad_pair_sums<R>(a, lda, panel, offsets + p * quads, pairs[p], quads, pe.bias, acc);
    else cpu::quad_sums<R>(a, lda, panel, quads, pe.bias, acc);
    store_row_pairs<R, YT, kClamp, kZp>(acc, pe.mul, lo, hi, zp, cols, yp, ldy);
  }
}

using ByteTileFn = void (*)(const uint8_t*, int64_t, const cpu::PairedQuads&, const PanelEpi*, int64_t, const EpiFlags&, char*, int64_t);
template <int YT, bool kPaired, bool kClamp, bool kZp = true>  // YT as kTiles
constexpr ByteTileFn kByteTiles[kMr + 1] = {nullptr,
                                            tile_bytes<1, YT, kPaired, kClamp, kZp>,
                                            tile_bytes<2, YT, kPaired, kClamp, kZp>,
                                            tile_bytes<3, YT, kPaired, kClamp, kZp>,
                                            tile_bytes<4, YT, kPaired, kClamp, kZp>,
                                            tile_bytes<5, YT, kPaired, kClamp, kZp>,
                                            tile_bytes<6, YT, kPaired, kClamp, kZp>};

// The byte path's tiles for the node's output and epilogue.
template <bool kPaired>
const ByteTileFn* byte_tiles(DType y_dt, const EpiFlags& f) {
  const bool u8 = y_dt == DType::kU8;
  if (y_dt == DType::kF32) return kByteTiles<0, kPaired, true>;
  if (!f.int_form) return u8 ? kByteTiles<1, kPaired, true> : kByteTiles<2, kPaired, true>;
  if (f.int_implied) {
    if (f.int_zp == 0) return u8 ? kByteTiles<3, kPaired, false, false> : kByteTiles<4, kPaired, false, false>;
    return u8 ? kByteTiles<3, kPaired, false> : kByteTiles<4, kPaired, false>;
  }
  if (f.int_zp == 0) return u8 ? kByteTiles<3, kPaired, true, false> : kByteTiles<4, kPaired, true, false>;
  return u8 ? kByteTiles<3, kPaired, true> : kByteTiles<4, kPaired, true>;
}

// A 1x1's residual epilogue (MobileNetV2's projections into a residual Add: the node's mid Q/DQ and z, no relu after):
// per output the reference's steps (ops/quantize_fused.cpp), v = float(acc + bias) * mul (mul against mid_scale),
// the mid Q's round_half_even and clamp [mid_lo, mid_hi] (the conv_relu / clip chain and the mid type's range minus
// its zero point, integers at the ends: rounding commutes with such a clamp), then fma(z_to_y, float(z - z_zp),
// float(r) * mid_to_y), cvtps2dq + y_zp, saturated by the packs (init_residual bounds |t| by 2^29: cvtps2dq exact,
// the add not wrapping, so the same bytes as the reference's saturate(round_half_even(t) + y_zp)). z has y's type and
// shape, so it is read at y's offsets.
struct ResidualEpi {
  float mid_lo = 0, mid_hi = 0, mid_to_y = 0, z_to_y = 0;
  int32_t z_zp = 0, y_zp = 0;
};
struct ResidualVecs {
  __m256 mid_lo, mid_hi, mid_to_y, z_to_y;
  __m256i z_zp, y_zp;
};

// 8 outputs' residual epilogue (s: the sums with the bias, m: their mul, z: their 8 residual bytes, YT 3: u8, 4: s8):
// int32 values for the packs. A function with FMA of its own: the tiles' other float steps stay uncontracted.
template <int YT>
__attribute__((target("avx2,fma"), always_inline)) inline __m256i residual_requantize(__m256i s, __m256 m, const char* z, const ResidualVecs& c) {
  const __m256 v = _mm256_min_ps(c.mid_hi, _mm256_max_ps(c.mid_lo, _mm256_mul_ps(_mm256_cvtepi32_ps(s), m)));
  const __m256 r = _mm256_mul_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), c.mid_to_y);
  const __m128i zb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(z));
  const __m256i zi = YT == 3 ? _mm256_cvtepu8_epi32(zb) : _mm256_cvtepi8_epi32(zb);
  const __m256 t = _mm256_fmadd_ps(c.z_to_y, _mm256_cvtepi32_ps(_mm256_sub_epi32(zi, c.z_zp)), r);
  return _mm256_add_epi32(_mm256_cvtps_epi32(t), c.y_zp);
}

// The rows in pairs, written out as store_row_pairs' (the sums indexed by constants only stay in registers).
template <int R, int YT, bool kHalf, int r = 0>
__attribute__((target("avx2,fma"), always_inline)) inline void residual_row_pairs(const __m256i* acc, __m256 m0, __m256 m1, const ResidualVecs& c,
                                                                                  int cols, const char* z, int64_t ldz, char* yp, int64_t ldy) {
  if constexpr (r < R) {
    constexpr int b = r + 1 < R ? r + 1 : r;  // an odd last row packed with itself, stored once
    const char* za = z + r * ldz;
    const char* zb = z + b * ldz;
    alignas(32) char t[2 * kNr];
    if constexpr (kHalf) {
      const __m256i w = _mm256_packs_epi32(residual_requantize<YT>(acc[2 * r], m0, za, c), residual_requantize<YT>(acc[2 * b], m0, zb, c));
      const __m256i p = YT == 3 ? _mm256_packus_epi16(w, w) : _mm256_packs_epi16(w, w);  // {a 0-3, b 0-3, a 0-3, b 0-3 | 4-7}
      const __m128i o = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5)));
      if (cols == 8) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(yp + r * ldy), o);
        if constexpr (b != r) _mm_storel_epi64(reinterpret_cast<__m128i*>(yp + b * ldy), _mm_unpackhi_epi64(o, o));
      } else {
        _mm_store_si128(reinterpret_cast<__m128i*>(t), o);
        std::memcpy(yp + r * ldy, t, static_cast<size_t>(cols) & 7);
        if constexpr (b != r) std::memcpy(yp + b * ldy, t + 8, static_cast<size_t>(cols) & 7);
      }
    } else {
      const __m256i wa = _mm256_packs_epi32(residual_requantize<YT>(acc[2 * r], m0, za, c), residual_requantize<YT>(acc[2 * r + 1], m1, za + 8, c));
      const __m256i wb = _mm256_packs_epi32(residual_requantize<YT>(acc[2 * b], m0, zb, c), residual_requantize<YT>(acc[2 * b + 1], m1, zb + 8, c));
      const __m256i p = YT == 3 ? _mm256_packus_epi16(wa, wb) : _mm256_packs_epi16(wa, wb);
      const __m256i o = _mm256_shuffle_epi32(_mm256_permute4x64_epi64(p, 0xD8), 0xD8);
      if (cols == kNr) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(yp + r * ldy), _mm256_castsi256_si128(o));
        if constexpr (b != r) _mm_storeu_si128(reinterpret_cast<__m128i*>(yp + b * ldy), _mm256_extracti128_si256(o, 1));
      } else {  // cols < 16
        _mm256_store_si256(reinterpret_cast<__m256i*>(t), o);
        std::memcpy(yp + r * ldy, t, static_cast<size_t>(cols) & (kNr - 1));
        if constexpr (b != r) std::memcpy(yp + b * ldy, t + kNr, static_cast<size_t>(cols) & (kNr - 1));
      }
    }
    residual_row_pairs<R, YT, kHalf, r + 2>(acc, m0, m1, c, cols, z, ldz, yp, ldy);
  }
}

// store_row_pairs / store_half_rows with the residual epilogue: R rows of `cols` outputs (16, or <= 8 where kHalf) at yp,
// their z at zp, both ldy apart; a panel of fewer columns reads its z through a copy (no read past z's end).
template <int R, int YT, bool kHalf>
__attribute__((target("avx2,fma"), always_inline)) inline void store_residual_rows(const __m256i* acc, const float* mul, const ResidualVecs& c,
                                                                                   int cols, const char* zp, char* yp, int64_t ldy) {
  if (cols < (kHalf ? 8 : kNr)) {
    alignas(32) char zt[kMr * kNr] = {};
    for (int r = 0; r < R; ++r) std::memcpy(zt + r * kNr, zp + r * ldy, static_cast<size_t>(cols));
    residual_row_pairs<R, YT, kHalf>(acc, _mm256_load_ps(mul), _mm256_load_ps(mul + 8), c, cols, zt, kNr, yp, ldy);
  } else {
    residual_row_pairs<R, YT, kHalf>(acc, _mm256_load_ps(mul), _mm256_load_ps(mul + 8), c, cols, zp, ldy, yp, ldy);
  }
}

// tile_bytes's integer form with the residual epilogue (YT 3: u8, 4: s8; z at the block's first pixel, ldy apart as y).
template <int R, int YT, bool kPaired>
__attribute__((target("avx2,fma"))) void tile_bytes_residual(const uint8_t* a, int64_t lda, const cpu::PairedQuads& pq, const PanelEpi* pes,
                                                             int64_t M, const ResidualEpi& res, const char* z, char* y, int64_t ldy) {
  const ResidualVecs c{_mm256_set1_ps(res.mid_lo),   _mm256_set1_ps(res.mid_hi), _mm256_set1_ps(res.mid_to_y),
                       _mm256_set1_ps(res.z_to_y),   _mm256_set1_epi32(res.z_zp), _mm256_set1_epi32(res.y_zp)};
  const int64_t quads = pq.quads, panels = pq.panels;
  const int8_t* packed = pq.data.data();
  const int32_t* offsets = pq.offsets.data();
  const int32_t* pairs = pq.pairs.data();
  __m256i acc[2 * kMr];
  for (int64_t p = 0; p < panels; ++p) {
    const PanelEpi& pe = pes[p];
    const int cols = static_cast<int>(std::min<int64_t>(kNr, M - p * kNr));
    const int8_t* panel = packed + p * quads * kNr * 4;
    if (cols <= 8) {  // the last panel, half of it or less: its columns 0-7 only
      if constexpr (kPaired) cpu::quad_pair_sums<R, true>(a, lda, panel, offsets + p * quads, pairs[p], quads, pe.bias, acc);
      else cpu::quad_sums<R, true>(a, lda, panel, quads, pe.bias, acc);
      store_residual_rows<R, YT, true>(acc, pe.mul, c, cols, z + p * kNr, y + p * kNr, ldy);
      break;
    }
    if constexpr (kPaired) cpu::quad_pair_sums<R>(a, lda, panel, offsets + p * quads, pairs[p], quads, pe.bias, acc);
    else cpu::quad_sums<R>(a, lda, panel, quads, pe.bias, acc);
    store_residual_rows<R, YT, false>(acc, pe.mul, c, cols, z + p * kNr, y + p * kNr, ldy);
  }
}

using ResidualTileFn = void (*)(const uint8_t*, int64_t, const cpu::PairedQuads&, const PanelEpi*, int64_t, const ResidualEpi&, const char*,
                                char*, int64_t);
template <int YT, bool kPaired>
constexpr ResidualTileFn kResidualTiles[kMr + 1] = {nullptr,
                                                    tile_bytes_residual<1, YT, kPaired>,
                                                    tile_bytes_residual<2, YT, kPaired>,
                                                    tile_bytes_residual<3, YT, kPaired>,
                                                    tile_bytes_residual<4, YT, kPaired>,
                                                    tile_bytes_residual<5, YT, kPaired>,
                                                    tile_bytes_residual<6, YT, kPaired>};

// `n` bytes (a multiple of 16) of u8 / s8 minus zp, widened to int16.
__attribute__((target("avx2"))) void widen(const uint8_t* src, int64_t n, bool is_signed, int32_t zp, int16_t* d) {
  const __m256i z = _mm256_set1_epi16(static_cast<int16_t>(zp));
  for (int64_t k = 0; k < n; k += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
    const __m256i w = is_signed ? _mm256_cvtepi8_epi16(x) : _mm256_cvtepu8_epi16(x);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k), _mm256_sub_epi16(w, z));
  }
}

// A stem's widened source row: `cols` columns of C channels from input column -pad on (the padding and the columns
// past the source 0, which is x_zp minus x_zp: the reference's ConvInteger pads with the zero point), each
// value minus zp as int16, then 16 int16 of 0 (window_pair_sums's unpaired last tap reads one past a window).
// src: the source row (W columns), or null for a padding row.
__attribute__((target("avx2"))) void widen_row(const uint8_t* src, int64_t W, int64_t C, int64_t pad, int64_t cols, bool is_signed,
                                               int32_t zp, int16_t* d) {
  const int64_t lo = std::min(pad, cols) * C, hi = src ? std::min(cols, pad + W) * C : lo, n = hi - lo, n16 = n / 16 * 16;
  std::memset(d, 0, static_cast<size_t>(lo) * sizeof(int16_t));
  widen(src, n16, is_signed, zp, d + lo);
  for (int64_t k = n16; k < n; ++k)
    d[lo + k] = static_cast<int16_t>((is_signed ? static_cast<int32_t>(static_cast<int8_t>(src[k])) : src[k]) - zp);
  std::memset(d + hi, 0, static_cast<size_t>(cols * C + 16 - hi) * sizeof(int16_t));
}

class Int8Im2colQConvKernel : public Kernel {
 public:
  Int8Im2colQConvKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    if (!cpu::int8_gemm_available()) return false;
    enum : size_t { kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kYScale, kYZp, kB, kZ, kZScale, kZZp, kMidScale, kMidZp };
    NodeAttrs attrs(node_);
    if (attrs.get_int("channels_last", 0) == 0 || attrs.get_int("group", 1) != 1 || !attrs.get_string("activation", "").empty() ||
        cpu::has_input(node_, kZ) != cpu::has_input(node_, kMidScale) || node_.outputs.size() != 1)  // (yq: dnnl_int8_conv)
      return false;
    residual_ = cpu::has_input(node_, kZ);  // with the mid Q/DQ: the byte paths only (init_residual)
    if (residual_ && attrs.get_int("relu", 0) != 0) return false;
    const Tensor* w = cpu::constant_input(graph, node_, kW);
    const Tensor* ws = cpu::constant_input(graph, node_, kWScale);
    if (!w || w->dtype() != DType::kI8 || w->rank() != 4 || !ws || ws->dtype() != DType::kF32)
      return false;
    const bool split = cpu::needs_split(*w);  // some weight outside [-64, 64]
    const int64_t M = w->dim(0), C = w->dim(1), KH = w->dim(2), KW = w->dim(3);
    const bool one_by_one = KH == 1 && KW == 1;
    if (C < 1 || (KH * KW * C > kMaxK && !(one_by_one && C <= kMaxRepairPointwiseChannels)) || (ws->numel() != 1 && ws->numel() != M))
      return false;
    const std::vector<int64_t> kernel = {KH, KW};
    if (!read_spatial_attrs(attrs, 2, &kernel, true, &spatial_).is_ok()) return false;
    pointwise_ = KH == 1 && KW == 1 && spatial_.auto_pad == AutoPad::kNotSet;
    for (int64_t v : spatial_.strides) pointwise_ = pointwise_ && v == 1;
    for (int64_t v : spatial_.pads) pointwise_ = pointwise_ && v == 0;
    if (!split ? !pointwise_ || C > kMaxBytePointwiseChannels : C > (pointwise_ ? kMaxRepairPointwiseChannels : kMaxStemChannels)) return false;
    cpu::QConvOperands q;
    // A u8 source with zero point 0 (a Relu's output) is oneDNN's unsplit-with-repair case (dnnl_int8_conv.cpp),
    // except a 1x1 of <= 64 channels into >= 64: there oneDNN's AVX2 1x1 kernel spends most of its time outside
    // the multiply-adds and this one ran faster (see zp0_bytes below; before it, on the int16 path: ResNet-50's
    // layer1.0 conv1, 64 -> 64 at 56x56: 0.336 -> 0.254-0.262 CPU ms; its downsample, 64 -> 256: 1.06-1.07 ->
    // 0.99-1.00; `ferry profile -t 1`), while on 16 outputs (MobileNetV2's features.1 projection, 32 -> 16 at
    // 112x112) it did not (0.131 -> 0.216).
    // Also (wide_zp0) the 1x1s of up to 960 channels in quads into whole panels of outputs and at most a half one (M a
    // multiple of 8; tile_bytes runs a last panel of <= 8 outputs on its columns 0-7 alone) on 8-bit weights over a
    // Relu's output with the integer epilogue (an int32 bias): MobileNetV2's projections without a residual, 0.83-0.97x
    // oneDNN's CPU time with the repair (features.4, .7, .11, .14, .17, .1), its 96 -> 24 at 56x56 (features.2) 0.88x
    // (with the half panel computed whole it was 1.14x). ResNet-50's plain-structure conv1s (float bias, the float
    // epilogue's tiles) were 1.04-1.14x there, so a float bias stays on oneDNN.
    const bool narrow_zp0 = pointwise_ && C <= kMaxZeroZpPointwiseChannels && M >= kMinZeroZpPointwiseOutputs;
    const bool wide_zp0 = pointwise_ && split && !narrow_zp0 && C % 4 == 0 && M % (kNr / 2) == 0;
    const bool zero_zp = narrow_zp0 || wide_zp0;
    if (!cpu::read_qconv_operands(graph, node_, *ws, M, &q, &factors_, &epi_, zero_zp || !split, residual_)) return false;
    x_signed_ = q.x_signed;
    x_zp_ = q.x_zp;
    C_ = C;
    M_ = M;
    cpu::panel_epilogue(factors_, epi_, M, &panels_, &flags_);
    // The weights as [M, (kh, kw, c)], the order of the patches.
    const int64_t K = KH * KW * C;
    std::vector<int8_t> wr(static_cast<size_t>(M * K));
    const int8_t* src = w->data<int8_t>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < KH * KW; ++t) wr[static_cast<size_t>(m * K + t * C + c)] = src[(m * C + c) * KH * KW + t];
    bool w_zp = false;
    for (int64_t i = 0; q.w_zp && i < q.w_zp_count; ++i) w_zp = w_zp || q.w_zp[i] != 0;
    // Those 1x1s on 8-bit weights over whole quads of channels (ResNet-50's layer1 conv3s, its layer1.0 conv1 and
    // downsample): the byte path, whose vpmaddubsw pairs may saturate there, and the outputs a saturated pair fed
    // recomputed after it (SaturatingPairs, as oneDNN's unsplit run is repaired): 0.77-0.89x oneDNN's CPU time on
    // the conv3s and the downsample, 0.83-0.93x the int16 path's on layer1.0 conv1. On K = 128-2048 it was
    // 1.0-1.13x oneDNN's (docs/performance.md), so wider ones stay there.
    const bool zp0_source = !x_signed_ && x_zp_ == 0;
    if (wide_zp0 && zp0_source && (!flags_.int_form || w_zp)) return false;  // oneDNN's unsplit run with the repair
    const bool zp0_bytes = split && zero_zp && zp0_source && C % 4 == 0 && !w_zp;
    if (zp0_bytes) {
      path_ = Path::kBytesRepair;
      const int64_t quads = C / 4, panels = (M + kNr - 1) / kNr;
      std::vector<int8_t> bytes(static_cast<size_t>(panels * quads * kNr * 4), 0);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < C; ++k)
          bytes[static_cast<size_t>(((m / kNr * quads + k / 4) * kNr + m % kNr) * 4 + k % 4)] = wr[static_cast<size_t>(m * C + k)];
      // Quads go in pairs only where no pair of theirs can saturate, so the repair's scan (which lists the
      // outputs a saturated vpmaddubsw pair fed) still covers every inexact output.
      paired_.plan(bytes.data(), panels, quads);
      if (pairs_.init(*w)) w_rows_ = std::move(wr);  // some pair can saturate: the repair's weights, [M, C]
      return !residual_ || init_residual(graph);
    }
    if (K > kMaxK || (split && pointwise_ && C > kMaxPointwiseChannels)) return false;  // past the int16 path's rule
    packed_.pack(wr.data(), K, M, q.w_zp, q.w_zp_count, /*n_major=*/true);
    std::vector<double> acc_bound(static_cast<size_t>(M));  // |acc + bias| <= 255 sum |w - w_zp| + |bias|
    for (int64_t m = 0; m < M; ++m) {
      const int32_t zp = q.w_zp ? q.w_zp[q.w_zp_count == 1 ? 0 : m] : 0;
      for (int64_t k = 0; k < K; ++k) acc_bound[static_cast<size_t>(m)] += 255.0 * std::abs(wr[static_cast<size_t>(m * K + k)] - zp);
      if (!factors_.bias.empty()) acc_bound[static_cast<size_t>(m)] += std::abs(static_cast<double>(factors_.bias[static_cast<size_t>(m)]));
    }
    cpu::int_clamp_implied(epi_, acc_bound, &flags_);
    // w - w_zp all in [-64, 64] (7-bit weights, or a weight zero point making full-range weights so): packed as
    // bytes. A 1x1 on a u8 source with whole quads of channels and the integer epilogue runs them on the byte
    // path (tile_bytes); the rest on oneDNN's unsplit kernel, as exact.
    if (packed_.narrow) {
      if (!pointwise_ || x_signed_ || C % 4 != 0 || !flags_.int_form || epi_.y_dt == DType::kF32) return false;
      for (int64_t n = 0; n < M; ++n)
        panels_[static_cast<size_t>(n / kNr)].bias[n % kNr] -= x_zp_ * packed_.column_sums[static_cast<size_t>(n)];
      path_ = Path::kBytes;
      paired_.plan(packed_.data8.data(), packed_.panels, packed_.quads);
      packed_.data8 = {};
    }
    if (residual_) return path_ == Path::kBytes && init_residual(graph);
    if (!pointwise_) {  // a stem: window_pair_sums's weights
      // The patch's (kh, kw, c) values in segments contiguous in a widened source row: a kernel row's KW x C
      // (dilation 1), else one tap's C; each segment's pairs, its odd last value paired with a zero weight.
      seg_len_ = spatial_.dilations[1] == 1 ? KW * C : C;
      seg_pairs_ = (seg_len_ + 1) / 2;
      const int64_t segments = K / seg_len_;
      window_w_.assign(static_cast<size_t>(packed_.panels * segments * seg_pairs_ * kNr * 2), 0);
      for (int64_t m = 0; m < M; ++m) {
        const int32_t zp = q.w_zp ? q.w_zp[q.w_zp_count == 1 ? 0 : m] : 0;
        for (int64_t s = 0; s < segments; ++s)
          for (int64_t i = 0; i < seg_len_; ++i)
            window_w_[static_cast<size_t>((((m / kNr * segments + s) * seg_pairs_ + i / 2) * kNr + m % kNr) * 2 + i % 2)] =
                static_cast<int16_t>(wr[static_cast<size_t>(m * K + s * seg_len_ + i)] - zp);
      }
      packed_.data = {};
    }
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const DType want = x_signed_ ? DType::kI8 : DType::kU8;
    const int64_t C = C_;
    if (x.dtype() != want || x.rank() != 4 || x.dim(3) != C) return fallback_(ctx);
    NodeAttrs attrs(node_);
    AxisGeom gh, gw;
    if (!conv_pool_axis(attrs, spatial_, 0, x.dim(1), &gh).is_ok() || !conv_pool_axis(attrs, spatial_, 1, x.dim(2), &gw).is_ok() ||
        gh.out <= 0 || gw.out <= 0 || gh.pad_begin < 0 || gw.pad_begin < 0)
      return fallback_(ctx);
    const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), OH = gh.out, OW = gw.out, M = M_;
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, epi_.y_dt, {N, OH, OW, M}, false));
    std::optional<SingleThreadScope> one;  // a small 1x1: one thread (one_thread_rules.h)
    if (pointwise_ && cpu::int8_on_one_thread(N * H * W * C * M)) one.emplace();
    const Tensor* z = nullptr;
    if (residual_) {
      z = &ctx.input(9);
      if (z->dtype() != epi_.y_dt || z->dims() != y->dims()) return fallback_(ctx);
    }
    if (path_ != Path::kInt16) return run_bytes(x, N, H, W, z, y);
    if (!pointwise_) return run_stem(x, N, H, W, gh, gw, y);
    const int64_t pixels = N * OH * OW, K = packed_.K;
    const uint8_t* xp = static_cast<const uint8_t*>(x.raw());
    const int64_t xbytes = x.numel(), ysize = epi_.y_dt == DType::kF32 ? 4 : 1;
    const TileFn<PatchRows>* tiles = tiles_for<PatchRows>(epi_.y_dt, flags_);
    char* yp = static_cast<char*>(y->mutable_raw());
    const int64_t blocks = (pixels + kMr - 1) / kMr;
    parallel_ranges(blocks, kMr * K * M, [&](int64_t b0, int64_t b1) {
      alignas(32) uint8_t u8[kMr * kMaxK];  // (a 1x1 of up to kMaxK channels: w - w_zp past [-64, 64] on 7-bit weights)
      alignas(32) int16_t a16[kMr * kMaxK];
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t p0 = b * kMr;
        const int rows = static_cast<int>(std::min<int64_t>(kMr, pixels - p0));
        // The block's rows * C bytes, contiguous, widened at once, rows C int16 apart (an odd C's last pair reads
        // the next row's first value, or widen's slack, against a zero weight).
        const int64_t n = (rows * C + 15) / 16 * 16, at = p0 * C;
        const uint8_t* src = xp + at;
        if (at + n > xbytes) src = static_cast<const uint8_t*>(std::memcpy(u8, src, static_cast<size_t>(rows * C)));
        widen(src, n, x_signed_, x_zp_, a16);
        tiles[rows](PatchRows{a16, C}, packed_.data.data(), packed_.pairs, panels_.data(), packed_.panels, M, flags_, yp + p0 * M * ysize,
                    M * ysize);
      }
    });
    return Status::ok();
  }

 private:
  // A stem: per output row its KH source rows widened (widen_row) into a per-thread buffer, then its pixels kMr at
  // a time, each reading its window's segments straight from those rows (window_pair_sums). The threads split the
  // blocks of kMr pixels as the 1x1s' (a block ends at its output row's end).
  Status run_stem(const Tensor& x, int64_t N, int64_t H, int64_t W, const AxisGeom& gh, const AxisGeom& gw, Tensor* y) const {
    const int64_t C = C_, M = M_, OH = gh.out, OW = gw.out;
    const int64_t KH = spatial_.kernel[0], KW = spatial_.kernel[1], sh = spatial_.strides[0], sw = spatial_.strides[1];
    const int64_t dh = spatial_.dilations[0], dw = spatial_.dilations[1], per_kh = KW * C / seg_len_, segments = KH * per_kh;
    const int64_t cols = (OW - 1) * sw + (KW - 1) * dw + 1, row_len = cols * C + 16, per_row = (OW + kMr - 1) / kMr;
    const int64_t ysize = epi_.y_dt == DType::kF32 ? 4 : 1, panels = packed_.panels;
    const uint8_t* xp = static_cast<const uint8_t*>(x.raw());
    char* yp = static_cast<char*>(y->mutable_raw());
    const TileFn<WindowRows>* tiles = tiles_for<WindowRows>(epi_.y_dt, flags_);
    parallel_ranges(N * OH * per_row, kMr * KH * KW * C * M, [&](int64_t b0, int64_t b1) {
      std::vector<int16_t> buf(static_cast<size_t>(KH * row_len));
      std::vector<const int16_t*> runs(static_cast<size_t>(segments));
      for (int64_t b = b0, widened = -1; b < b1; ++b) {
        const int64_t orow = b / per_row, ow0 = b % per_row * kMr;  // orow: n * OH + oh
        if (orow != widened) {
          widened = orow;
          const int64_t n = orow / OH, oh = orow % OH;
          for (int64_t kh = 0; kh < KH; ++kh) {
            const int64_t ih = oh * sh - gh.pad_begin + kh * dh;
            widen_row(ih >= 0 && ih < H ? xp + (n * H + ih) * W * C : nullptr, W, C, gw.pad_begin, cols, x_signed_, x_zp_,
                      buf.data() + kh * row_len);
          }
        }
        for (int64_t s = 0; s < segments; ++s)  // segment s: kernel row s / per_kh, from tap (s % per_kh) * (dilation 1: all KW)
          runs[static_cast<size_t>(s)] = buf.data() + s / per_kh * row_len + (ow0 * sw + s % per_kh * dw) * C;
        const int r = static_cast<int>(std::min<int64_t>(kMr, OW - ow0));
        tiles[r](WindowRows{runs.data(), segments, sw * C, seg_pairs_}, window_w_.data(), segments * seg_pairs_, panels_.data(), panels, M,
                 flags_, yp + (orow * OW + ow0) * M * ysize, M * ysize);
      }
    });
    return Status::ok();
  }

  // The byte paths (init): a 1x1's R pixels' channels at a time, read in place, against the s8 quads; on 8-bit
  // weights (kBytesRepair) the outputs a saturated pair fed recomputed after.
  Status run_bytes(const Tensor& x, int64_t N, int64_t H, int64_t W, const Tensor* z, Tensor* y) const {
    const int64_t C = C_, M = M_, pixels = N * H * W;
    const uint8_t* xp = x.data<uint8_t>();
    char* yp = static_cast<char*>(y->mutable_raw());
    const int64_t ysize = epi_.y_dt == DType::kF32 ? 4 : 1;
    const bool paired = !paired_.pairs.empty() && paired_.pairs[0] > 0;  // one count for all panels
    const ByteTileFn* btiles = paired ? byte_tiles<true>(epi_.y_dt, flags_) : byte_tiles<false>(epi_.y_dt, flags_);
    const bool u8 = epi_.y_dt == DType::kU8;
    const ResidualTileFn* rtiles = paired ? (u8 ? kResidualTiles<3, true> : kResidualTiles<4, true>)
                                          : (u8 ? kResidualTiles<3, false> : kResidualTiles<4, false>);
    const char* zp = z ? static_cast<const char*>(z->raw()) : nullptr;
    const int64_t blocks = (pixels + kMr - 1) / kMr;
    parallel_ranges(blocks, kMr * C * M, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t p0 = b * kMr;
        const int rows = static_cast<int>(std::min<int64_t>(kMr, pixels - p0));
        if (zp) rtiles[rows](xp + p0 * C, C, paired_, panels_.data(), M, res_, zp + p0 * M, yp + p0 * M, M);
        else btiles[rows](xp + p0 * C, C, paired_, panels_.data(), M, flags_, yp + p0 * M * ysize, M * ysize);
      }
    });
    if (path_ != Path::kBytesRepair || w_rows_.empty() || pixels == 0) return Status::ok();
    // The outputs a saturated vpmaddubsw pair fed (int8_pair_saturation.h), recomputed exactly; where more than
    // 1/16 of them are (adversarial inputs), all of them.
    std::vector<int64_t> fix;
    const int64_t outputs = pixels * M;
    if (pairs_.find({N, H, W, C}, {N, H, W, M}, {1, 1}, {1, 1}, {0, 0}, xp, outputs / 16, &fix)) {
      for (int64_t i : fix) repair(xp, zp, i, yp);
    } else {
      parallel_ranges(outputs, C, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) repair(xp, zp, i, yp);
      });
    }
    return Status::ok();
  }

  // Output i (NHWC offset) of the byte path on 8-bit weights, exactly: its int32 sum (x's zero point 0) and the
  // tile's epilogue in scalars, step for step (the integer form's clamp of float(sum + bias) * mul, round to
  // nearest even, + zp, saturated; or int8_epilogue.h's epilogue<YT>: the reference's float steps in its order; with a
  // residual z, residual_requantize's steps).
  void repair(const uint8_t* x, const char* z, int64_t i, char* y) const {
    const int64_t C = C_, M = M_, m = i % M;
    const uint8_t* a = x + i / M * C;
    const int8_t* wm = w_rows_.data() + m * C;
    const PanelEpi& pe = panels_[static_cast<size_t>(m / kNr)];
    const int64_t k = m % kNr;
    int32_t s = 0;
    for (int64_t c = 0; c < C; ++c) s += static_cast<int32_t>(a[c]) * wm[c];
    const EpiFlags& e = flags_;
    // As _mm256_max_ps(p, q) / _mm256_min_ps(p, q): q where either is NaN.
    const auto vmax = [](float p, float q) { return p > q ? p : q; };
    const auto vmin = [](float p, float q) { return p < q ? p : q; };
    if (z) {
      const float v = vmin(res_.mid_hi, vmax(res_.mid_lo, static_cast<float>(s + pe.bias[k]) * pe.mul[k]));
      const int32_t zi = epi_.y_dt == DType::kU8 ? reinterpret_cast<const uint8_t*>(z)[i] : reinterpret_cast<const int8_t*>(z)[i];
      const float r = std::nearbyint(v) * res_.mid_to_y;
      const float t = std::fma(res_.z_to_y, static_cast<float>(zi - res_.z_zp), r);
      const int32_t q = static_cast<int32_t>(std::nearbyint(t)) + res_.y_zp;
      if (epi_.y_dt == DType::kU8) reinterpret_cast<uint8_t*>(y)[i] = static_cast<uint8_t>(std::clamp(q, 0, 255));
      else reinterpret_cast<int8_t*>(y)[i] = static_cast<int8_t>(std::clamp(q, -128, 127));
      return;
    }
    if (e.int_form) {
      const float v = vmin(e.int_hi, vmax(e.int_lo, static_cast<float>(s + pe.bias[k]) * pe.mul[k]));
      const int32_t q = static_cast<int32_t>(std::nearbyint(v)) + e.int_zp;
      if (epi_.y_dt == DType::kU8) reinterpret_cast<uint8_t*>(y)[i] = static_cast<uint8_t>(std::clamp(q, 0, 255));
      else reinterpret_cast<int8_t*>(y)[i] = static_cast<int8_t>(std::clamp(q, -128, 127));
      return;
    }
    float v;
    if (e.fbias) {
      const float prod = static_cast<float>(s) * pe.real[k];
      const float sum = prod + pe.fbias[k];
      v = sum / e.y_scale;
    } else {
      v = static_cast<float>(e.bias ? s + pe.bias[k] : s) * pe.mul[k];
    }
    if (e.conv_relu) v = vmax(0.f, v);
    if (e.clip) v = vmin(e.clip_hi, vmax(e.clip_lo, v));
    if (e.relu) v = vmax(0.f, v);
    if (epi_.y_dt == DType::kF32) {
      reinterpret_cast<float*>(y)[i] = v;
      return;
    }
    const bool u8 = epi_.y_dt == DType::kU8;
    const float r = (std::isnan(v) ? 0.f : std::nearbyint(v)) + e.y_zp;
    const float q = vmin(vmax(r, u8 ? 0.f : -128.f), u8 ? 255.f : 127.f);
    if (u8) reinterpret_cast<uint8_t*>(y)[i] = static_cast<uint8_t>(static_cast<int32_t>(q));
    else reinterpret_cast<int8_t*>(y)[i] = static_cast<int8_t>(static_cast<int32_t>(q));
  }

  // The residual epilogue's constants (ResidualEpi) from the node's y, z and mid inputs; epi_ / flags_ are the
  // epilogue up to the mid Q (read_qconv_operands' `mid`). False where the integer form does not hold.
  bool init_residual(const Graph& graph) {
    enum : size_t { kYScale = 6, kYZp, kZ = 9, kZScale, kZZp, kMidScale, kMidZp };
    const TensorType* zt = graph.find_type(node_.inputs[kZ]);
    const Tensor* yz = cpu::constant_input(graph, node_, kYZp);
    const Tensor* mz = cpu::constant_input(graph, node_, kMidZp);
    const Tensor* zz = cpu::constant_input(graph, node_, kZZp);
    float ys = 0, yzp = 0, zs = 0, zzp = 0, ms = 0, mzp = 0;
    if (!flags_.int_form || !zt || !yz || !mz || !zz || !cpu::scalar_input(graph, node_, kYScale, &ys) ||
        !cpu::scalar_input(graph, node_, kYZp, &yzp) || !cpu::scalar_input(graph, node_, kZScale, &zs) ||
        !cpu::scalar_input(graph, node_, kZZp, &zzp) || !cpu::scalar_input(graph, node_, kMidScale, &ms) ||
        !cpu::scalar_input(graph, node_, kMidZp, &mzp))
      return false;
    const DType y_dt = yz->dtype();
    if ((y_dt != DType::kU8 && y_dt != DType::kI8) || zt->dtype != y_dt || zz->dtype() != y_dt ||
        (mz->dtype() != DType::kU8 && mz->dtype() != DType::kI8))
      return false;
    const float mlo = mz->dtype() == DType::kU8 ? 0.f : -128.f;
    res_.mid_lo = std::max(flags_.int_lo, mlo - mzp);
    res_.mid_hi = std::min(flags_.int_hi, mlo + 255.f - mzp);
    res_.mid_to_y = ms / ys;
    res_.z_to_y = zs / ys;
    res_.z_zp = static_cast<int32_t>(zzp);
    res_.y_zp = static_cast<int32_t>(yzp);
    // Finite factors (no NaN reaches a rounding), a non-empty mid clamp (the two clamps compose into one), and |t|
    // (at most 256 |mid_to_y| + 256 |z_to_y|) below 2^29: see ResidualEpi.
    if (!std::isfinite(res_.mid_to_y) || !std::isfinite(res_.z_to_y) || res_.mid_lo > res_.mid_hi || yzp != std::nearbyint(yzp) ||
        zzp != std::nearbyint(zzp) || std::fabs(yzp) > 255 ||
        256.0 * (std::fabs(static_cast<double>(res_.mid_to_y)) + std::fabs(static_cast<double>(res_.z_to_y))) >= 536870912.0)
      return false;
    epi_.y_dt = y_dt;  // the node's output; epi_'s scale, zero point and flags_ stay the mid Q's
    return true;
  }

  enum class Path { kInt16, kBytes, kBytesRepair };
  Node node_;
  KernelFn fallback_;
  SpatialAttrs spatial_;
  bool pointwise_ = false;  // 1x1, stride 1, no padding: a pixel's patch is its channels
  Path path_ = Path::kInt16;
  int64_t C_ = 0, M_ = 0;
  cpu::PairedQuads paired_;     // the byte paths' weights: s8 quads, per panel in pairs where exact
  std::vector<int8_t> w_rows_;  // kBytesRepair where some pair can saturate: the weights as [M, C], for repair
  cpu::SaturatingPairs pairs_;
  bool residual_ = false;  // z and the mid Q/DQ (init_residual; the byte paths)
  ResidualEpi res_;
  bool x_signed_ = false;
  int32_t x_zp_ = 0;
  cpu::EpilogueFactors factors_;
  cpu::Int8GemmEpilogue epi_;
  cpu::PackedInt8B packed_;  // the 1x1s' int16 panels (a stem's only until init has its window_w_)
  std::vector<int16_t> window_w_;  // a stem's: [panels][segment][seg_pairs_][16][2], w - w_zp (init)
  int64_t seg_len_ = 0, seg_pairs_ = 0;
  std::vector<PanelEpi> panels_;
  EpiFlags flags_;
};

}  // namespace

void register_cpu_int8_im2col_conv_kernels(CpuKernelTable& t) {
  t.add("com.ferry", "QConvFused", cpu::make_if_init<Int8Im2colQConvKernel>);
}

}  // namespace ferry
