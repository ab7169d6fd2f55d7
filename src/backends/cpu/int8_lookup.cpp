// com.ferry.QLookup (src/ops/quantize_fused.cpp): y = table[x] for an 8-bit x, the table made by the
// qdq_fusion pass of DQ -> element-wise float ops [-> Q] (EfficientNet's SiLU). 8-bit tables on AVX2 as
// 16 byte shuffles (one per 16-entry row of the table, selected by the high nibble), float tables as a
// plain loop; split over the threads. The same bytes as the reference kernel. EfficientNet-B0 int8's byte
// tables (ferry profile, 1 thread, 3 alternating runs, load ~11): 1.61-1.63 CPU ms per run against 3.39-3.41
// for a scalar byte loop with the table copied to the stack (this file's kernel replaced that one).
#include <cstdint>
#include <cstring>
#include <memory>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/int8_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry {
namespace {

void lookup_bytes_scalar(const uint8_t* __restrict x, int64_t n, const uint8_t* __restrict tab, uint8_t flip,
                         uint8_t* __restrict y) {
  for (int64_t i = 0; i < n; ++i) y[i] = tab[x[i] ^ flip];
}

#if defined(__x86_64__)
// 32 bytes per step: for each high nibble h, vpshufb of the table's row h by the low nibbles, kept where
// the high nibble is h.
__attribute__((target("avx2"))) void lookup_bytes_avx2(const uint8_t* x, int64_t n, const uint8_t* tab, uint8_t flip,
                                                       uint8_t* y) {
  __m256i rows[16];
  for (int h = 0; h < 16; ++h)
    rows[h] = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tab + 16 * h)));
  const __m256i lo_mask = _mm256_set1_epi8(0x0F), fl = _mm256_set1_epi8(static_cast<char>(flip));
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), fl);
    const __m256i lo = _mm256_and_si256(v, lo_mask);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo_mask);
    __m256i r = _mm256_setzero_si256();
    for (int h = 0; h < 16; ++h) {
      const __m256i sel = _mm256_cmpeq_epi8(hi, _mm256_set1_epi8(static_cast<char>(h)));
      r = _mm256_or_si256(r, _mm256_and_si256(sel, _mm256_shuffle_epi8(rows[h], lo)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), r);
  }
  lookup_bytes_scalar(x + i, n - i, tab, flip, y + i);
}
#endif

void lookup_floats(const uint8_t* __restrict x, int64_t n, const float* __restrict tab, uint8_t flip, float* __restrict y) {
  for (int64_t i = 0; i < n; ++i) y[i] = tab[x[i] ^ flip];
}

class QLookupKernel : public Kernel {
 public:
  QLookupKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    if (node_.inputs.size() != 2 || node_.outputs.size() != 1) return false;
    const Tensor* t = cpu::constant_input(graph, node_, 1);
    if (!t || t->numel() != 256 || (t->dtype() != DType::kU8 && t->dtype() != DType::kI8 && t->dtype() != DType::kF32))
      return false;
#if defined(__x86_64__)
    avx2_ = __builtin_cpu_supports("avx2");
#endif
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& t = ctx.input(1);
    if ((x.dtype() != DType::kU8 && x.dtype() != DType::kI8) || t.numel() != 256 ||
        (t.dtype() != DType::kU8 && t.dtype() != DType::kI8 && t.dtype() != DType::kF32))
      return fallback_(ctx);
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, t.dtype(), x.dims(), false));
    const uint8_t* xp = static_cast<const uint8_t*>(x.raw());
    const uint8_t flip = x.dtype() == DType::kI8 ? 0x80 : 0;  // s8 v -> index v + 128
    const bool f32 = t.dtype() == DType::kF32;
    parallel_ranges(x.numel(), f32 ? 4 : 2, [&](int64_t b, int64_t e) {
      if (f32) {
        lookup_floats(xp + b, e - b, t.data<float>(), flip, y->mutable_data<float>() + b);
        return;
      }
      const auto* tab = static_cast<const uint8_t*>(t.raw());
      auto* yp = static_cast<uint8_t*>(y->mutable_raw()) + b;
#if defined(__x86_64__)
      if (avx2_) return lookup_bytes_avx2(xp + b, e - b, tab, flip, yp);
#endif
      lookup_bytes_scalar(xp + b, e - b, tab, flip, yp);
    });
    return Status::ok();
  }

 private:
  Node node_;
  KernelFn fallback_;
  bool avx2_ = false;
};

}  // namespace

void register_cpu_int8_lookup_kernels(CpuKernelTable& t) { t.add("com.ferry", "QLookup", cpu::make_if_init<QLookupKernel>); }

}  // namespace ferry
