// QuantizeLinear (f32 -> u8/s8; com.ferry.QuantizeLinearToNhwc writing NHWC) and DequantizeLinear (u8/s8 -> f32)
// with a per-tensor constant scale and zero point: the int8 region's entry and exit (src/ops/quantize.cpp and
// quantize_fused.cpp have the reference kernels), bit for bit the reference's. (com.ferry.QLookup: int8_lookup.cpp.)
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>

#include "backends/cpu/int8_quantize.h"

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/int8_util.h"
#include "backends/cpu/vec_math.h"
#include "ops/quantize_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry {
namespace {


// ---- QuantizeLinear f32 -> u8/s8, per-tensor constant scale and zero point ---------------------

// The reference's formula (ops/quantize.cpp): saturate(round_half_even(x / scale) + zp), in f32.
FERRY_VEC void quantize_f32(const float* x, int64_t n, float scale, float zp, float lo, float hi, uint8_t* u8,
                            int8_t* s8) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] / scale;
    v = v != v ? 0.f : v;  // NaN quantizes like 0
    float q = std::nearbyint(v) + zp;
    q = q < lo ? lo : (q > hi ? hi : q);
    if (u8) u8[i] = static_cast<uint8_t>(q);
    else s8[i] = static_cast<int8_t>(q);
  }
}

#if defined(__x86_64__)
// The same where AVX-512 runs. The division is most of the time (ResNet-50's [1,3,224,224] input:
// ~45 us); x * (1 / scale) is within 2 ulp of x / scale, so the two round to the same integer unless
// the product lies within a few ulp of a half-integer (or is not finite, or so large that its ulp is
// >= 1/2): a vector of 16 holding such a value is divided instead. Bit for bit the reference
// (test: QdqFusion.QuantizeLinearNextToTies).
__attribute__((target("avx512f"))) void quantize_f32_avx512(const float* x, int64_t n, float scale, float zp, float lo,
                                                            float hi, uint8_t* u8, int8_t* s8) {
  const __m512 inv = _mm512_set1_ps(1.f / scale), vs = _mm512_set1_ps(scale), half = _mm512_set1_ps(0.5f);
  const __m512 one = _mm512_set1_ps(1.f), rel = _mm512_set1_ps(0x1p-19f), vzp = _mm512_set1_ps(zp);
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    __m512 r = _mm512_mul_ps(xv, inv);
    // (maskz forms throughout: gcc 12 warns that the unmasked ones read an undefined vector)
    const __m512 frac = _mm512_sub_ps(r, _mm512_maskz_roundscale_ps(0xFFFF, r, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    const __m512 d = _mm512_abs_ps(_mm512_sub_ps(frac, half));
    const __m512 tol = _mm512_mul_ps(_mm512_maskz_max_ps(0xFFFF, _mm512_abs_ps(r), one), rel);
    if (_mm512_cmp_ps_mask(d, tol, _CMP_GT_OQ) != 0xFFFF) r = _mm512_div_ps(xv, vs);  // NaN, inf: not GT
    r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r);                  // NaN quantizes like 0
    __m512 q = _mm512_add_ps(_mm512_maskz_roundscale_ps(0xFFFF, r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vzp);
    q = _mm512_maskz_min_ps(0xFFFF, _mm512_maskz_max_ps(0xFFFF, q, vlo), vhi);
    const __m128i b = _mm512_maskz_cvtepi32_epi8(0xFFFF, _mm512_maskz_cvtps_epi32(0xFFFF, q));  // integral and in range: the low byte
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u8 ? static_cast<void*>(u8 + i) : static_cast<void*>(s8 + i)), b);
  }
  if (i < n) quantize_f32(x + i, n - i, scale, zp, lo, hi, u8 ? u8 + i : nullptr, u8 ? nullptr : s8 + i);
}

// The same on AVX2: the reference's steps (a division, not x * (1 / scale): on this host's AVX2 the reciprocal
// form's tie check cost what the division does; docs/performance.md), 32 values per store.
__attribute__((target("avx2"))) void quantize_f32_avx2(const float* x, int64_t n, float scale, float zp, float lo,
                                                        float hi, uint8_t* u8, int8_t* s8) {
  const __m256 vs = _mm256_set1_ps(scale), vzp = _mm256_set1_ps(zp), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i q[4];
    for (int j = 0; j < 4; ++j) {
      __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i + 8 * j), vs);
      v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN quantizes like 0
      v = _mm256_add_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vzp);
      q[j] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, vlo), vhi));  // integral and in range: exact
    }
    const __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i b = u8 ? _mm256_packus_epi16(w01, w23) : _mm256_packs_epi16(w01, w23);
    // b's dwords: q0[0:4] q1[0:4] q2[0:4] q3[0:4] q0[4:8] q1[4:8] q2[4:8] q3[4:8]
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(u8 ? static_cast<void*>(u8 + i) : static_cast<void*>(s8 + i)),
                        _mm256_permutevar8x32_epi32(b, order));
  }
  if (i < n) quantize_f32(x + i, n - i, scale, zp, lo, hi, u8 ? u8 + i : nullptr, u8 ? nullptr : s8 + i);
}

// Three planes into RGB triples, 16 pixels (48 bytes) per step: each output chunk of 16 bytes is three
// byte shuffles of the planes' 16 bytes, or-ed. Returns the pixels done.
__attribute__((target("ssse3"))) int64_t interleave3_ssse3(const uint8_t* a, const uint8_t* b, const uint8_t* c, int64_t S,
                                                           uint8_t* dst) {
  alignas(16) static const auto masks = [] {
    std::array<std::array<int8_t, 16>, 9> m{};  // [chunk * 3 + plane][byte]
    for (int g = 0; g < 48; ++g)
      for (int plane = 0; plane < 3; ++plane) m[(g / 16) * 3 + plane][g % 16] = g % 3 == plane ? int8_t(g / 3) : int8_t(-128);
    return m;
  }();
  __m128i mk[9];
  for (int i = 0; i < 9; ++i) mk[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(masks[i].data()));
  int64_t s = 0;
  for (; s + 16 <= S; s += 16, dst += 48) {
    const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + s));
    const __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + s));
    const __m128i vc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + s));
    for (int k = 0; k < 3; ++k) {
      const __m128i o = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(va, mk[3 * k]), _mm_shuffle_epi8(vb, mk[3 * k + 1])),
                                     _mm_shuffle_epi8(vc, mk[3 * k + 2]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16 * k), o);
    }
  }
  return s;
}
#endif

using QuantizeFn = void (*)(const float*, int64_t, float, float, float, float, uint8_t*, int8_t*);

QuantizeFn quantize_fn() {
  QuantizeFn fn = quantize_f32;
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
  if (avx512) fn = quantize_f32_avx512;
  else if (avx2) fn = quantize_f32_avx2;
#endif
  return fn;
}

}  // namespace

namespace cpu {

void interleave_planes(const uint8_t* src, int64_t C, int64_t S, uint8_t* dst) {
  if (C == 3) {
    const uint8_t *a = src, *b = src + S, *c = src + 2 * S;
    int64_t s = 0;
#if defined(__x86_64__)
    static const bool ssse3 = __builtin_cpu_supports("ssse3");
    if (ssse3) s = interleave3_ssse3(a, b, c, S, dst);
#endif
    for (; s < S; ++s) {
      dst[3 * s] = a[s];
      dst[3 * s + 1] = b[s];
      dst[3 * s + 2] = c[s];
    }
    return;
  }
  for (int64_t s = 0; s < S; ++s)
    for (int64_t c = 0; c < C; ++c) dst[s * C + c] = src[c * S + s];
}

void quantize_f32_8bit(const float* x, int64_t n, float scale, float zp, DType dt, void* y) {
  float lo = 0, hi = 255;
  quant_range(dt, &lo, &hi);
  const QuantizeFn fn = quantize_fn();
  const bool u8 = dt == DType::kU8;
  constexpr int64_t kBlock = 1024;  // values per range (a multiple of the vector loops' 32)
  parallel_ranges((n + kBlock - 1) / kBlock, kBlock * 8, [&](int64_t b0, int64_t b1) {
    const int64_t i0 = b0 * kBlock, i1 = std::min(n, b1 * kBlock);
    fn(x + i0, i1 - i0, scale, zp, lo, hi, u8 ? static_cast<uint8_t*>(y) + i0 : nullptr, u8 ? nullptr : static_cast<int8_t*>(y) + i0);
  });
}

}  // namespace cpu

namespace {

class QuantizeKernel : public Kernel {
 public:
  QuantizeKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    if (node_.inputs.size() < 2 || node_.outputs.size() != 1) return false;
    const TensorType* xt = graph.find_type(node_.inputs[0]);
    if (!xt || xt->dtype != DType::kF32 || !cpu::scalar_input(graph, node_, 1, &scale_) || !(scale_ > 0)) return false;
    if (cpu::constant_input(graph, node_, 1)->dtype() != DType::kF32) return false;
    if (cpu::has_input(node_, 2)) {
      const Tensor* z = cpu::constant_input(graph, node_, 2);
      if (!z || z->numel() != 1 || !is_8bit(z->dtype())) return false;
      dtype_ = z->dtype();
      zp_ = static_cast<float>(z->get_int64(0));
    }
    float lo = 0, hi = 0;
    return quant_range(dtype_, &lo, &hi);
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kF32) return fallback_(ctx);
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype_, x.dims(), false));
    cpu::quantize_f32_8bit(x.data<float>(), x.numel(), scale_, zp_, dtype_, y->mutable_raw());
    return Status::ok();
  }

 protected:
  Node node_;
  KernelFn fallback_;
  DType dtype_ = DType::kU8;
  float scale_ = 1, zp_ = 0;
};

// com.ferry.QuantizeLinearToNhwc (the nhwc_layout pass: a QuantizeLinear of the image an NHWC region reads, its
// Transpose folded in): per block of a row of pixels, each channel's plane quantized as QuantizeLinear's kernel
// does (quantize_f32_8bit's steps) into a small buffer, then interleaved into the pixels' channels (interleave_planes).
// MobileNetV2's [1,3,224,224] input: QuantizeLinear + Transpose 0.059 + 0.013 CPU ms -> 0.051 (0.70x; ResNet-50's
// 0.76x, EfficientNet-B0's 0.79x; `ferry profile -t 1`, alternated with main's build, docs/performance.md, issue 38).
class QuantizeToNhwcKernel : public QuantizeKernel {
 public:
  using QuantizeKernel::QuantizeKernel;

  bool init(const Graph& graph) { return node_.inputs.size() == 3 && QuantizeKernel::init(graph); }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kF32 || x.rank() != 4) return fallback_(ctx);
    const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), S = H * W;
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype_, {N, H, W, C}, false));
    if (x.numel() == 0) return Status::ok();
    float lo = 0, hi = 0;
    quant_range(dtype_, &lo, &hi);
    const QuantizeFn fn = quantize_fn();
    const bool u8 = dtype_ == DType::kU8;
    const float* xp = x.data<float>();
    uint8_t* yp = static_cast<uint8_t*>(y->mutable_raw());
    constexpr int64_t kBlock = 512;  // pixels per step (a multiple of the vector loops' 32)
    const int64_t per_image = (S + kBlock - 1) / kBlock;
    parallel_ranges(N * per_image, kBlock * C * 8, [&](int64_t b0, int64_t b1) {
      std::vector<uint8_t> planes(static_cast<size_t>(C * kBlock));
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t n = b / per_image, s0 = b % per_image * kBlock, len = std::min(kBlock, S - s0);
        for (int64_t c = 0; c < C; ++c) {
          uint8_t* d = planes.data() + c * len;
          fn(xp + (n * C + c) * S + s0, len, scale_, zp_, lo, hi, u8 ? d : nullptr, u8 ? nullptr : reinterpret_cast<int8_t*>(d));
        }
        cpu::interleave_planes(planes.data(), C, len, yp + (n * S + s0) * C);
      }
    });
    return Status::ok();
  }
};

// ---- DequantizeLinear u8/s8 -> f32, per-tensor constant scale and zero point --------------------

// The reference's formula: float(x - zp) * scale.
template <class T>
FERRY_VEC void dequantize_8bit(const T* x, int64_t n, int32_t zp, float scale, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - zp) * scale;
}

class DequantizeKernel : public Kernel {
 public:
  DequantizeKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    if (node_.inputs.size() < 2 || node_.outputs.size() != 1) return false;
    const TensorType* xt = graph.find_type(node_.inputs[0]);
    const Tensor* st = cpu::constant_input(graph, node_, 1);
    if (!xt || !is_8bit(xt->dtype) || !st || st->dtype() != DType::kF32 || !cpu::scalar_input(graph, node_, 1, &scale_)) return false;
    dtype_ = xt->dtype;
    if (cpu::has_input(node_, 2)) {
      const Tensor* z = cpu::constant_input(graph, node_, 2);
      if (!z || z->numel() != 1 || z->dtype() != dtype_) return false;
      zp_ = static_cast<int32_t>(z->get_int64(0));
    }
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != dtype_) return fallback_(ctx);
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kF32, x.dims(), false));
    if (dtype_ == DType::kU8) dequantize_8bit(x.data<uint8_t>(), x.numel(), zp_, scale_, y->mutable_data<float>());
    else dequantize_8bit(x.data<int8_t>(), x.numel(), zp_, scale_, y->mutable_data<float>());
    return Status::ok();
  }

 private:
  Node node_;
  KernelFn fallback_;
  DType dtype_ = DType::kU8;
  float scale_ = 1;
  int32_t zp_ = 0;
};

}  // namespace

void register_cpu_int8_quantize_kernels(CpuKernelTable& t) {
  t.add("", "QuantizeLinear", cpu::make_if_init<QuantizeKernel>);
  t.add("", "DequantizeLinear", cpu::make_if_init<DequantizeKernel>);
  t.add("com.ferry", "QuantizeLinearToNhwc", cpu::make_if_init<QuantizeToNhwcKernel>);
}

}  // namespace ferry
