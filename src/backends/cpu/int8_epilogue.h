// The QConvFused / QMatMulFused epilogue (int8_gemm.h's Int8GemmEpilogue, the reference's float steps
// in its order) on 16 int32 accumulators still in registers, shared by the AVX2 int8 convolution kernels
// that keep their sums in ymm registers (int8_im2col_conv.cpp, int8_depthwise_conv.cpp): the per-channel
// constants of 16 output channels (PanelEpi), the node's scalars (EpiFlags), and epilogue<YT>, which
// stores 16 (or `cols`) outputs, in integers where the node's constants allow it (int_clamp, epilogue_int).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/int8_gemm.h"

namespace ferry::cpu {

constexpr int kEpiCols = 16;  // output channels per PanelEpi (int8_gemm's panel width)

// The epilogue constants of 16 output channels (the last block padded).
struct PanelEpi {
  alignas(32) float mul[kEpiCols], real[kEpiCols], fbias[kEpiCols];
  alignas(32) int32_t bias[kEpiCols];
};

// The epilogue's scalars (from the node's Int8GemmEpilogue), copied into each tile before it stores
// anything (a store through char* y could alias them, and they would be read again per row).
// int_form: the 8-bit result computed in integers (int_clamp below), with int_lo / int_hi / int_zp.
struct EpiFlags {
  bool fbias = false, bias = false, conv_relu = false, clip = false, relu = false;
  float y_scale = 1, y_zp = 0, clip_lo = 0, clip_hi = 0;
  bool int_form = false;
  float int_lo = 0, int_hi = 0;
  int32_t int_zp = 0;
  bool int_implied = false;  // int_form's clamp changes no byte and is left out (int_clamp_implied)
};

/// Where the 8-bit epilogue can be computed in integers: an 8-bit output, the int32-bias form (or no
/// bias), every mul finite (so v is never NaN: float(acc + bias) * mul is finite or infinite). Then the
/// Relu / Clip / Relu chain on a non-NaN v is one clamp [lo, hi] (its values at -inf and +inf: a
/// composition of clamps is a clamp), narrowed to [-2^30, 2^30], which changes no saturated result, and
/// saturate(round_half_even(v) + y_zp) = saturate(cvtps2dq(v) + y_zp) in int32 (round to nearest even,
/// the default rounding; exact below 2^30; r + y_zp is an exact float sum below 2^24 and saturated
/// either way above): the reference's result in 7 steps per 8 outputs instead of 13. Sets f's int_* fields.
inline void int_clamp(const Int8GemmEpilogue& e, int64_t channels, EpiFlags* f) {
  bool on = (e.y_dt == DType::kU8 || e.y_dt == DType::kI8) && e.fbias == nullptr && e.y_zp == std::nearbyint(e.y_zp);
  for (int64_t n = 0; on && n < channels; ++n) on = std::isfinite(e.mul[n]);
  const auto chain = [&](float v) {
    if (e.conv_relu) v = std::max(v, 0.f);
    if (e.clip) v = std::min(std::max(v, e.clip_lo), e.clip_hi);
    if (e.relu) v = std::max(v, 0.f);
    return v;
  };
  f->int_form = on;
  f->int_lo = std::max(chain(-INFINITY), -1073741824.f);
  f->int_hi = std::min(chain(INFINITY), 1073741824.f);
  f->int_zp = on ? static_cast<int32_t>(e.y_zp) : 0;
}

/// Where int_form's clamp [int_lo, int_hi] changes no byte, sets f->int_implied (the kernels then leave out a max
/// and a min per 8 outputs). `acc_bound[n]`: a bound on |acc + bias| of channel n (its |w - w_zp| summed times 255,
/// plus |bias|). It holds where (1) |v| = |float(acc + bias) * mul| stays below 2^29 (no int32 sum wraps, so
/// min(acc_bound, 2^31) bounds it; then cvtps2dq is exact and + zp cannot wrap), and (2) what the clamp cuts off
/// saturates to the same byte anyway: round(int_lo) + int_zp at or below the output's least value and round(int_hi) +
/// int_zp at or above its largest. Below lo both forms round to values at or below round(lo) (rounding is monotonic),
/// which the packs saturate to that least value alike; above hi likewise. MobileNetV2's ReLU6 outputs (lo 0, zp 0,
/// hi = 6 / y_scale >= 254.5) and outputs with no activation qualify.
inline void int_clamp_implied(const Int8GemmEpilogue& e, const std::vector<double>& acc_bound, EpiFlags* f) {
  f->int_implied = false;
  if (!f->int_form) return;
  const double ymin = e.y_dt == DType::kU8 ? 0 : -128, ymax = e.y_dt == DType::kU8 ? 255 : 127;
  if (std::nearbyint(static_cast<double>(f->int_lo)) + f->int_zp > ymin ||
      std::nearbyint(static_cast<double>(f->int_hi)) + f->int_zp < ymax)
    return;
  for (size_t n = 0; n < acc_bound.size(); ++n)
    if (std::min(acc_bound[n], 2147483648.0) * std::fabs(static_cast<double>(e.mul[n])) >= 536870912.0) return;
  f->int_implied = true;
}

/// `e`'s per-channel factors in blocks of 16 channels (`factors`: what EpilogueFactors::set filled) and its scalars.
inline void panel_epilogue(const EpilogueFactors& factors, const Int8GemmEpilogue& e, int64_t channels, std::vector<PanelEpi>* panels,
                           EpiFlags* flags) {
  flags->fbias = e.fbias != nullptr;
  flags->bias = e.bias != nullptr;
  flags->conv_relu = e.conv_relu;
  flags->clip = e.clip;
  flags->relu = e.relu;
  flags->y_scale = e.y_scale;
  flags->y_zp = e.y_zp;
  flags->clip_lo = e.clip_lo;
  flags->clip_hi = e.clip_hi;
  panels->assign(static_cast<size_t>((channels + kEpiCols - 1) / kEpiCols), PanelEpi{});
  for (int64_t n = 0; n < channels; ++n) {
    PanelEpi& pe = (*panels)[static_cast<size_t>(n / kEpiCols)];
    const int64_t c = n % kEpiCols;
    pe.mul[c] = factors.mul[n];
    pe.real[c] = factors.real[n];
    if (!factors.fbias.empty()) pe.fbias[c] = factors.fbias[n];
    if (!factors.bias.empty()) pe.bias[c] = factors.bias[n];
  }
  int_clamp(e, channels, flags);
}

/// 16 int32 outputs (q0: channels 0-7, q1: 8-15) saturated to 8 bits (YT 1: u8, 2: s8), `cols` of them stored at y.
template <int YT>
__attribute__((target("avx2"), always_inline)) inline void store_bytes(__m256i q0, __m256i q1, int cols, char* y) {
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);  // 16 int16 in order
  const __m128i w0 = _mm256_castsi256_si128(w), w1 = _mm256_extracti128_si256(w, 1);
  const __m128i b = YT == 1 ? _mm_packus_epi16(w0, w1) : _mm_packs_epi16(w0, w1);
  if (cols == kEpiCols) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y), b);
  } else {
    alignas(16) uint8_t t[kEpiCols];
    _mm_store_si128(reinterpret_cast<__m128i*>(t), b);
    std::memcpy(y, t, static_cast<size_t>(cols));
  }
}

/// epilogue<YT> (YT 1: u8, 2: s8) where EpiFlags::int_form: lo, hi (int_lo, int_hi broadcast) and zp
/// (int_zp) hoisted by the caller; p.bias zero where the node has no bias (PanelEpi's default).
template <int YT>
__attribute__((target("avx2"), always_inline)) inline void epilogue_int(__m256i s0, __m256i s1, const PanelEpi& p, __m256 lo, __m256 hi,
                                                                        __m256i zp, int cols, char* y) {
  static_assert(YT == 1 || YT == 2, "8-bit outputs only");
  const __m256i b0 = _mm256_add_epi32(s0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p.bias)));
  const __m256i b1 = _mm256_add_epi32(s1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p.bias + 8)));
  const __m256 v0 = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_mul_ps(_mm256_cvtepi32_ps(b0), _mm256_load_ps(p.mul))));
  const __m256 v1 = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_mul_ps(_mm256_cvtepi32_ps(b1), _mm256_load_ps(p.mul + 8))));
  const __m256i q0 = _mm256_add_epi32(_mm256_cvtps_epi32(v0), zp), q1 = _mm256_add_epi32(_mm256_cvtps_epi32(v1), zp);
  store_bytes<YT>(q0, q1, cols, y);
}

/// One row's 16 accumulators (s0: channels 0-7, s1: 8-15) -> `cols` outputs at y: int8_gemm.cpp
/// epilogue_row's steps (the reference's float steps in its order; no FMA contraction), from registers.
template <int YT>  // 0: f32, 1: u8, 2: s8
__attribute__((target("avx2"), always_inline)) inline void epilogue(__m256i s0, __m256i s1, const PanelEpi& p, const EpiFlags& e,
                                                                    int cols, char* y) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 v[2];
  const __m256i s[2] = {s0, s1};
  for (int h = 0; h < 2; ++h) {
    if (e.fbias) {
      const __m256 prod = _mm256_mul_ps(_mm256_cvtepi32_ps(s[h]), _mm256_load_ps(p.real + 8 * h));
      v[h] = _mm256_div_ps(_mm256_add_ps(prod, _mm256_load_ps(p.fbias + 8 * h)), _mm256_set1_ps(e.y_scale));
    } else {
      const __m256i b = e.bias ? _mm256_add_epi32(s[h], _mm256_load_si256(reinterpret_cast<const __m256i*>(p.bias + 8 * h))) : s[h];
      v[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(b), _mm256_load_ps(p.mul + 8 * h));
    }
    if (e.conv_relu) v[h] = _mm256_max_ps(zero, v[h]);
    if (e.clip) v[h] = _mm256_min_ps(_mm256_set1_ps(e.clip_hi), _mm256_max_ps(_mm256_set1_ps(e.clip_lo), v[h]));
    if (e.relu) v[h] = _mm256_max_ps(zero, v[h]);
  }
  if constexpr (YT == 0) {
    if (cols == kEpiCols) {
      _mm256_storeu_ps(reinterpret_cast<float*>(y), v[0]);
      _mm256_storeu_ps(reinterpret_cast<float*>(y) + 8, v[1]);
    } else {
      alignas(32) float t[kEpiCols];
      _mm256_store_ps(t, v[0]);
      _mm256_store_ps(t + 8, v[1]);
      std::memcpy(y, t, sizeof(float) * static_cast<size_t>(cols));
    }
  } else {
    const float lo_f = YT == 1 ? 0.f : -128.f, hi_f = YT == 1 ? 255.f : 127.f;
    __m256i q[2];
    const __m256 lo = _mm256_set1_ps(lo_f), hi = _mm256_set1_ps(hi_f);
    const __m256 zp = _mm256_set1_ps(e.y_zp);
    for (int h = 0; h < 2; ++h) {
      const __m256 x = _mm256_and_ps(v[h], _mm256_cmp_ps(v[h], v[h], _CMP_ORD_Q));  // NaN -> 0
      __m256 r = _mm256_add_ps(_mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zp);
      q[h] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    store_bytes<YT>(q[0], q[1], cols, y);
  }
}

/// epilogue<YT> for YT 0-2, epilogue_int<YT - 2> for YT 3 (u8) and 4 (s8): the kernels' tiles take YT 3
/// or 4 where e.int_form (a separate instantiation, so the float steps' code stays as it was).
template <int YT>
__attribute__((target("avx2"), always_inline)) inline void epilogue_any(__m256i s0, __m256i s1, const PanelEpi& p, const EpiFlags& e,
                                                                        int cols, char* y) {
  if constexpr (YT >= 3) {
    epilogue_int<YT - 2>(s0, s1, p, _mm256_set1_ps(e.int_lo), _mm256_set1_ps(e.int_hi), _mm256_set1_epi32(e.int_zp), cols, y);
  } else {
    epilogue<YT>(s0, s1, p, e, cols, y);
  }
}

}  // namespace ferry::cpu
