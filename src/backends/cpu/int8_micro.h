// The int8 GEMM micro kernels' multiply-add loops, shared by int8_gemm.cpp (whose micro kernels store the
// sums to memory) and int8_im2col_conv.cpp (whose tiles keep them in registers for the fused epilogue):
// R (1-6) rows of A against one 16-column panel of int8_gemm.h's packed layout, the sums left in
// acc[2r] (columns 0-7) and acc[2r + 1] (8-15). Named accumulators inside (gcc 12 kept arrays of __m256i on
// the stack in the loop); acc is written once, after it. Both are always_inline: where the caller's constants
// are live across the loop gcc may spill accumulators, which is why int8_im2col_conv.cpp calls pair_sums through
// a noinline wrapper from its float epilogue's tiles. window_pair_sums is pair_sums on a stem's rows read in place.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace ferry::cpu {

// The loops below keep R (1-6) rows of sums in named accumulators cR0 / cR1; these apply a per-row step to
// each row the template uses, and write the accumulators to acc once, after the loop.
#define FERRY_MICRO_EACH_ROW(STEP) STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5)
#define FERRY_MICRO_STORE(r)  \
  if constexpr (R > r) {      \
    acc[2 * r] = c##r##0;     \
    acc[2 * r + 1] = c##r##1; \
  }
// One u8 x s8 quad of row r at byte offset off: vpmaddubsw, then vpmaddwd by ones into int32 (quad_sums and
// the unpaired tail of quad_pair_sums); columns 0-7 only where kHalf.
#define FERRY_MICRO_BYTE_QUAD(r, off)                                                               \
  if constexpr (R > r) {                                                                          \
    int32_t v;                                                                                    \
    std::memcpy(&v, a##r + (off), sizeof v);                                                      \
    const __m256i av = _mm256_set1_epi32(v);                                                      \
    c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b0), ones));   \
    if constexpr (!kHalf)                                                                         \
      c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b1), ones)); \
  }
// One int16 pair of row r at int16 offset off: vpmaddwd into int32 (pair_sums, window_pair_sums).
#define FERRY_MICRO_PAIR(r, off)                                    \
  if constexpr (R > r) {                                            \
    int32_t v;                                                      \
    std::memcpy(&v, a##r + (off), sizeof v);                        \
    const __m256i av = _mm256_set1_epi32(v);                        \
    c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(av, b0)); \
    c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(av, b1)); \
  }
#define FERRY_MICRO_PAIRS(off) \
  FERRY_MICRO_PAIR(0, off) FERRY_MICRO_PAIR(1, off) FERRY_MICRO_PAIR(2, off) FERRY_MICRO_PAIR(3, off) FERRY_MICRO_PAIR(4, off) FERRY_MICRO_PAIR(5, off)
#define FERRY_MICRO_BYTE_QUADS(off)                                                        \
  FERRY_MICRO_BYTE_QUAD(0, off) FERRY_MICRO_BYTE_QUAD(1, off) FERRY_MICRO_BYTE_QUAD(2, off) \
  FERRY_MICRO_BYTE_QUAD(3, off) FERRY_MICRO_BYTE_QUAD(4, off) FERRY_MICRO_BYTE_QUAD(5, off)

// int16 pairs: acc row r = init + sum over the pairs j of a_r[2j, 2j + 1] . panel[j][n][0..1] (vpmaddwd, exact
// in int32), a int16 rows of stride lda; init: 16 int32 every row starts from, or null for zeros.
template <int R>
__attribute__((target("avx2"), always_inline)) inline void pair_sums(const int16_t* a, int64_t lda, const int16_t* panel, int64_t pairs,
                                                                           const int32_t* init, __m256i* acc) {
  const __m256i i0 = init ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(init)) : _mm256_setzero_si256();
  const __m256i i1 = init ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(init + 8)) : _mm256_setzero_si256();
  __m256i c00 = i0, c01 = i1, c10 = i0, c11 = i1, c20 = i0, c21 = i1, c30 = i0, c31 = i1, c40 = i0, c41 = i1, c50 = i0, c51 = i1;
  const int16_t *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda;
  for (int64_t j = 0; j < pairs; ++j) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 32 * j));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 32 * j + 16));
    FERRY_MICRO_PAIRS(2 * j)
  }
  FERRY_MICRO_EACH_ROW(FERRY_MICRO_STORE)
}

// pair_sums on an image stem's widened source rows (int8_im2col_conv.cpp): a window of `segments` runs of
// 2 x seg_pairs int16 each, run s of row r of the tile at runs[s] + r * lda (lda: the stride times the channels:
// the rows' windows overlap in the source row), against the panel's [segment][pair][16 columns][2] values. Each
// run is read in place, two values per broadcast as pair_sums reads a gathered patch.
template <int R>
__attribute__((target("avx2"), always_inline)) inline void window_pair_sums(const int16_t* const* runs, int64_t segments, int64_t lda,
                                                                           int64_t seg_pairs, const int16_t* panel, const int32_t* init,
                                                                           __m256i* acc) {
  const __m256i i0 = init ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(init)) : _mm256_setzero_si256();
  const __m256i i1 = init ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(init + 8)) : _mm256_setzero_si256();
  __m256i c00 = i0, c01 = i1, c10 = i0, c11 = i1, c20 = i0, c21 = i1, c30 = i0, c31 = i1, c40 = i0, c41 = i1, c50 = i0, c51 = i1;
  for (int64_t s = 0; s < segments; ++s, panel += 32 * seg_pairs) {
    const int16_t *a0 = runs[s], *a1 = a0 + lda, *a2 = a0 + 2 * lda, *a3 = a0 + 3 * lda, *a4 = a0 + 4 * lda, *a5 = a0 + 5 * lda;
    for (int64_t j = 0; j < seg_pairs; ++j) {
      const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 32 * j));
      const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 32 * j + 16));
      FERRY_MICRO_PAIRS(2 * j)
    }
  }
  FERRY_MICRO_EACH_ROW(FERRY_MICRO_STORE)
}

// u8 x s8 quads on 7-bit weights (every panel value in [-64, 64]: int8_gemm.h's `narrow` packing):
// acc row r = init + sum over the quads j of a_r[4j..4j+3] . panel[j][n][0..3], a u8 rows of stride lda (read 4
// bytes at a time), one vpmaddubsw + vpmaddwd by ones per 4 channels and 8 outputs. A vpmaddubsw pair is at most
// 2 x 255 x 64 = 32640 in magnitude, so it never saturates: exact in int32 like the int16 pairs, at about twice
// their multiply-add rate. init: 16 int32 every row starts from (not null). kHalf: the panel's columns 0-7 only
// (acc[2r] alone is summed; a last panel of at most 8 outputs, MobileNetV2's 96 -> 24 projection).
template <int R, bool kHalf = false>
__attribute__((target("avx2"), always_inline)) inline void quad_sums(const uint8_t* a, int64_t lda, const int8_t* panel, int64_t quads,
                                                                            const int32_t* init, __m256i* acc) {
  const __m256i i0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(init));
  const __m256i i1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(init + 8));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i c00 = i0, c01 = i1, c10 = i0, c11 = i1, c20 = i0, c21 = i1, c30 = i0, c31 = i1, c40 = i0, c41 = i1, c50 = i0, c51 = i1;
  const uint8_t *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda;
  for (int64_t j = 0; j < quads; ++j) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 64 * j));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 64 * j + 32));
    FERRY_MICRO_BYTE_QUADS(4 * j)
  }
  FERRY_MICRO_EACH_ROW(FERRY_MICRO_STORE)
}

// quad_sums on int8_gemm.h's PairedQuads panel: the quads at positions 2t, 2t + 1 (t < pairs) in int16 first,
// vpmaddubsw + vpmaddubsw + vpaddw, then one vpmaddwd by ones (PairedQuads' bound keeps every int16 lane exact
// for any u8 source), the rest one at a time as in quad_sums; position t reads a_r at byte offsets[t]. The same
// int32 sums as quad_sums over the panel's quads in their original order. 6 rows x 16 columns of accumulators,
// 4 panel vectors and the ones need 17 ymm: gcc keeps a few accumulators on the stack, which the load and store
// ports absorb (a microbenchmark of the loop, panel in L1: 102-113 G multiply-adds/s against quad_sums' 91-94
// at K = 32-128, 1 thread). kHalf: as quad_sums.
template <int R, bool kHalf = false>
__attribute__((target("avx2"), always_inline)) inline void quad_pair_sums(const uint8_t* a, int64_t lda, const int8_t* panel,
                                                                          const int32_t* offsets, int64_t pairs, int64_t quads,
                                                                          const int32_t* init, __m256i* acc) {
  const __m256i i0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(init));
  const __m256i i1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(init + 8));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i c00 = i0, c01 = i1, c10 = i0, c11 = i1, c20 = i0, c21 = i1, c30 = i0, c31 = i1, c40 = i0, c41 = i1, c50 = i0, c51 = i1;
  const uint8_t *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda;
#define FERRY_PAIR_ROW(r)                                                                                                \
  if constexpr (R > r) {                                                                                                 \
    int32_t v, u;                                                                                                        \
    std::memcpy(&v, a##r + o0, sizeof v);                                                                                \
    std::memcpy(&u, a##r + o1, sizeof u);                                                                                \
    const __m256i av = _mm256_set1_epi32(v), au = _mm256_set1_epi32(u);                                                \
    c##r##0 = _mm256_add_epi32(                                                                                          \
        c##r##0, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(av, b0), _mm256_maddubs_epi16(au, d0)), ones)); \
    if constexpr (!kHalf)                                                                                                \
      c##r##1 = _mm256_add_epi32(                                                                                        \
          c##r##1, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(av, b1), _mm256_maddubs_epi16(au, d1)), ones)); \
  }
  for (int64_t t = 0; t < pairs; ++t) {
    const int8_t* pp = panel + 128 * t;
    const int64_t o0 = offsets[2 * t], o1 = offsets[2 * t + 1];
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pp));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pp + 32));
    const __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pp + 64));
    const __m256i d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pp + 96));
    FERRY_MICRO_EACH_ROW(FERRY_PAIR_ROW)
  }
#undef FERRY_PAIR_ROW
  for (int64_t j = 2 * pairs; j < quads; ++j) {
    const int64_t o = offsets[j];
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 64 * j));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 64 * j + 32));
    FERRY_MICRO_BYTE_QUADS(o)
  }
  FERRY_MICRO_EACH_ROW(FERRY_MICRO_STORE)
}

#undef FERRY_MICRO_BYTE_QUADS
#undef FERRY_MICRO_PAIRS
#undef FERRY_MICRO_PAIR
#undef FERRY_MICRO_BYTE_QUAD
#undef FERRY_MICRO_STORE
#undef FERRY_MICRO_EACH_ROW

}  // namespace ferry::cpu
