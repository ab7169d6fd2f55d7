// Vectorizable float math for the CPU kernels: exp, erf, tanh, sigmoid as branch-free inline
// functions (polynomial / rational approximations, max relative error < 5e-7 against the libm
// results) that GCC vectorizes inside loops, and FERRY_VEC, which compiles a loop function for
// AVX-512, AVX2 and baseline x86-64 and picks one at load time (function multi-versioning).
#pragma once

#include <bit>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// Clones are chosen by ISA feature: "arch=" clones dispatch on the CPU model and never match AMD CPUs.
// Not under sanitizers: the ifunc resolvers run before the sanitizer runtime is initialized.
#define FERRY_VEC __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FERRY_VEC
#endif

namespace ferry::vec {

inline float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

/// e^x; 0 below -87.3, +inf above 88.4 (Cephes polynomial on the reduced argument).
/// Branch-free so that GCC vectorizes it without AVX-512's masks: the polynomial runs on x itself
/// (no clamp first: with one, GCC threads the clamp's branches into the final select and leaves a
/// conditional multiply, which it does not if-convert under -ftrapping-math, so the AVX2 clones of the
/// loops that call this were scalar: EfficientNet-B0's SiLU/Sigmoid took ~80% of its run on a Zen 3),
/// and the out-of-range results replace the computed value by bit masks. Same values as the clamped
/// form it replaced: inside [kLo, kHi] the same operations, outside 0 / +inf, NaN stays NaN.
inline float exp(float x) {
  constexpr float kHi = 88.3762626647949f, kLo = -87.3365447505531f;
  // n = round(x / ln 2) with the 1.5 * 2^23 trick (vectorizes without a rounding instruction); t's
  // bits are 0x4B400000 + n, which gives n as an integer without a float -> int conversion.
  const float t = x * 1.44269504088896341f + 12582912.f;
  const float n = t - 12582912.f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  const float y = p * r * r + r + 1.f;
  const float scale = std::bit_cast<float>((std::bit_cast<uint32_t>(t) - 0x4B400000u + 127u) << 23);
  const float v = y * scale;
  const uint32_t keep = (x < kLo) | (x > kHi) ? 0u : ~0u, inf = x > kHi ? 0x7f800000u : 0u;
  return std::bit_cast<float>((std::bit_cast<uint32_t>(v) & keep) | inf);
}

/// erf(x): rational approximation on [-4, 4] (|erf| rounds to 1 beyond).
inline float erf(float x) {
  x = clampf(x, -4.f, 4.f);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * x;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return p / q;
}

/// tanh(x): rational approximation, saturating beyond |x| = 7.9.
inline float tanh(float x) {
  x = clampf(x, -7.90531110763549805f, 7.90531110763549805f);
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return p / q;
}

inline float sigmoid(float x) { return 1.f / (1.f + vec::exp(-x)); }

inline float gelu_erf(float x) { return 0.5f * x * (1.f + vec::erf(x * 0.70710678118654752f)); }
inline float gelu_tanh(float x) {
  return 0.5f * x * (1.f + vec::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}

}  // namespace ferry::vec
