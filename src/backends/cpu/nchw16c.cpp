// See nchw16c.h.
#include "backends/cpu/nchw16c.h"

#include "backends/cpu/cpu_parallel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FERRY_NCHW16C_AVX512 1
#endif

namespace ferry::cpu {

#if FERRY_NCHW16C_AVX512

namespace {

#define FERRY_AVX512 __attribute__((target("avx512f")))

// The mask / maskz forms of the intrinsics throughout: the plain ones start from an undefined
// register, which gcc 12 reports as maybe-uninitialized.
FERRY_AVX512 inline __m512i srl16(__m512i v) { return _mm512_maskz_srli_epi32(0xffff, v, 16); }

FERRY_AVX512 inline __m512 gather(__m512i idx, const float* base) {
  return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xffff, idx, base, 4);
}

// 16 f32 -> 16 bf16, round to nearest even, NaN kept quiet (as narrow_bf16).
FERRY_AVX512 inline __m256i to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(srl16(u), _mm512_set1_epi32(1));
  const __m512i r = srl16(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))));
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i q = _mm512_or_si512(srl16(u), _mm512_set1_epi32(0x40));
  return _mm512_maskz_cvtepi32_epi16(0xffff, _mm512_mask_mov_epi32(r, nan, q));
}

// One (n, 16-channel block): x rows of hw floats, 16 of them `hw` apart -> y (hw x 16).
FERRY_AVX512 void to_blocked(const float* x, void* y, bool bf16, int64_t hw) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(static_cast<int>(hw)));
  if (bf16) {
    auto* out = static_cast<uint16_t*>(y);
    for (int64_t p = 0; p < hw; ++p)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + p * 16), to_bf16(gather(idx, x + p)));
  } else {
    auto* out = static_cast<float*>(y);
    for (int64_t p = 0; p < hw; ++p) _mm512_storeu_ps(out + p * 16, gather(idx, x + p));
  }
}

// One (n, 16-channel block): x (hw x 16) -> y rows of hw floats, 16 of them `hw` apart.
FERRY_AVX512 void from_blocked(const void* x, bool bf16, float* y, int64_t hw) {
  const __m512i idx = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
  for (int64_t p = 0; p < hw; p += 16) {
    const __mmask16 m = hw - p >= 16 ? __mmask16(0xffff) : __mmask16((1u << (hw - p)) - 1);
    for (int c = 0; c < 16; ++c) {
      __m512 v;
      if (bf16) {  // 32 bits at each bf16 element: it is the low half; shift it up
        const auto* src = static_cast<const uint16_t*>(x) + p * 16 + c;
        const __m512i w = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, src, 2);
        v = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16));
      } else {
        v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, static_cast<const float*>(x) + p * 16 + c, 4);
      }
      _mm512_mask_storeu_ps(y + c * hw + p, m, v);
    }
  }
}

}  // namespace

bool nchw16c_supported(int64_t channels) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 && channels > 0 && channels % 16 == 0;
}

void nchw_to_nchw16c(const float* x, void* y, bool bf16, int64_t n, int64_t c, int64_t hw) {
  const int64_t blocks = n * (c / 16), elem = bf16 ? 2 : 4;
  parallel_ranges(blocks, hw * 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      to_blocked(x + b * 16 * hw, static_cast<char*>(y) + b * 16 * hw * elem, bf16, hw);
  });
}

void nchw16c_to_nchw(const void* x, bool bf16, float* y, int64_t n, int64_t c, int64_t hw) {
  const int64_t blocks = n * (c / 16), elem = bf16 ? 2 : 4;
  parallel_ranges(blocks, hw * 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      from_blocked(static_cast<const char*>(x) + b * 16 * hw * elem, bf16, y + b * 16 * hw, hw);
  });
}

#else

bool nchw16c_supported(int64_t) { return false; }
void nchw_to_nchw16c(const float*, void*, bool, int64_t, int64_t, int64_t) {}
void nchw16c_to_nchw(const void*, bool, float*, int64_t, int64_t, int64_t) {}

#endif

}  // namespace ferry::cpu
