// 8-bit pooling: MaxPool / com.ferry.NhwcMaxPool on u8/s8 as oneDNN pooling (the qdq_fusion pass makes
// them of DQ -> MaxPool -> Q; f32 and bf16 MaxPool are dnnl_pool.cpp's), and com.ferry.QGlobalAveragePool /
// NhwcQGlobalAveragePool with the reference's integer semantics (src/ops/quantize_fused.cpp).
#include <algorithm>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/dnnl_plan_cache.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/int8_util.h"
#include "backends/cpu/node_attrs.h"
#include "backends/cpu/vec_math.h"
#include "ops/conv_pool_util.h"
#include "ops/quantize_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry {
namespace {

using cpu::NodeAttrs;
using cpu::dnnl_engine;
using cpu::dnnl_stream;
using cpu::wrap;
using dnnl::memory;

class Int8MaxPoolKernel : public Kernel {
 public:
  Int8MaxPoolKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    channels_last_ = node_.op_type == "NhwcMaxPool";
    if (node_.outputs.size() != 1 || node_.inputs.size() != 1) return false;
    const TensorType* t = graph.find_type(node_.inputs[0]);
    if (!t || !is_8bit(t->dtype) || !t->shape) return false;
    dtype_ = t->dtype;
    rank_ = t->shape->rank();
    if (rank_ < 3 || rank_ > 5 || (channels_last_ && rank_ != 4)) return false;
    NodeAttrs a(node_);
    if (!read_spatial_attrs(a, rank_ - 2, nullptr, true, &attrs_).is_ok()) return false;
    for (int64_t d : attrs_.dilations)
      if (d != 1) return false;
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != dtype_ || x.rank() != rank_) return fallback_(ctx);
    auto plan = plans_.get(x.dims(), [this](const std::vector<int64_t>& d, Plan* p) { return make_plan(d, p); });
    if (!plan.is_ok()) return fallback_(ctx);
    const Plan* p = plan.value();
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype_, p->out_dims, false));
    return cpu::dnnl_call(node_, [&] {
      p->prim.execute(dnnl_stream(), {{DNNL_ARG_SRC, wrap(p->src, x)},
                                      {DNNL_ARG_DST, wrap(p->dst, *y)},
                                      {DNNL_ARG_SCRATCHPAD, cpu::scratch_memory(p->pd.scratchpad_desc(),
                                                                                cpu::ScratchSlot::kScratchpad)}});
      dnnl_stream().wait();
    });
  }

 private:
  struct Plan {
    dnnl::pooling_forward::primitive_desc pd;
    dnnl::pooling_forward prim;
    memory::desc src, dst;
    std::vector<int64_t> out_dims;
  };

  Status make_plan(const std::vector<int64_t>& x_dims, Plan* plan) {
    std::vector<int64_t> xd = x_dims;
    if (channels_last_) xd = {x_dims[0], x_dims[3], x_dims[1], x_dims[2]};
    for (int64_t d : xd)
      if (d == 0) return unsupported("empty");
    memory::dims kernel, strides, pad_l, pad_r;
    std::vector<int64_t> yd = {xd[0], xd[1]};
    NodeAttrs a(node_);
    for (int64_t i = 0; i < rank_ - 2; ++i) {
      AxisGeom g;
      RETURN_IF_ERROR(conv_pool_axis(a, attrs_, i, xd[2 + i], &g));
      const int64_t k = attrs_.kernel[i], s = attrs_.strides[i];
      const int64_t right = std::max(g.pad_end, (g.out - 1) * s + k - xd[2 + i] - g.pad_begin);  // ceil_mode
      if (g.pad_begin >= k || right >= k) return unsupported("padding as large as the window");
      kernel.push_back(k);
      strides.push_back(s);
      pad_l.push_back(g.pad_begin);
      pad_r.push_back(right);
      yd.push_back(g.out);
    }
    const auto plan_primitives = [&] {
      const auto t = cpu::plain_tag(xd.size(), channels_last_);
      plan->src = memory::desc(cpu::to_dnnl_dims(xd), cpu::int8_type(dtype_), t);
      plan->dst = memory::desc(cpu::to_dnnl_dims(yd), cpu::int8_type(dtype_), t);
      dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max, plan->src,
                                    plan->dst, strides, kernel, pad_l, pad_r);
      plan->pd = dnnl::pooling_forward::primitive_desc(d, cpu::concurrent_attr(), dnnl_engine());
      plan->prim = dnnl::pooling_forward(plan->pd);
    };
    RETURN_IF_ERROR(cpu::dnnl_call(node_, plan_primitives));
    plan->out_dims = channels_last_ ? std::vector<int64_t>{yd[0], yd[2], yd[3], yd[1]} : yd;
    return Status::ok();
  }

  Node node_;
  KernelFn fallback_;
  DType dtype_ = DType::kU8;
  int64_t rank_ = 0;
  bool channels_last_ = false;
  SpatialAttrs attrs_;
  cpu::PlanCache<Plan> plans_;
};

// ---- QGlobalAveragePool / NhwcQGlobalAveragePool (src/ops/quantize_fused.cpp) ------------------------
// The reference's integer semantics: per (n, c) the exact int32 sum of x minus S * x_zp, times
// x_scale / (y_scale * S), round half to even, plus y_zp, saturated. NHWC adds whole rows of C channels
// (vectorized u8 -> s32 adds); ResNet-50's 7x7x2048: the float path it replaces (Transpose to NCHW,
// DequantizeLinear, f32 GlobalAveragePool, QuantizeLinear) took ~60 us.
// On AVX2 the NHWC sums run 32 channels at a time in int16 lanes over up to 255 rows (255 x 255 fits
// uint16, 255 x 128 int16), then widen into int32, and the requantization runs 8 values a vector (the
// reference's steps: one f32 multiply, round half to even, + y_zp, saturate). MobileNetV2's 7x7x1280:
// 20.7 -> 11.2 us per `ferry profile` (docs/performance.md).

template <class T>
FERRY_VEC void add_rows_nhwc(const T* x, int64_t S, int64_t C, int32_t* acc) {
  for (int64_t c = 0; c < C; ++c) acc[c] = 0;
  for (int64_t i = 0; i < S; ++i, x += C)
    for (int64_t c = 0; c < C; ++c) acc[c] += x[c];
}

#if defined(__x86_64__)
template <bool kSigned>
__attribute__((target("avx2"), always_inline)) inline __m256i widen8(__m128i v) {
  return kSigned ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
}
template <bool kSigned>
__attribute__((target("avx2"), always_inline)) inline __m256i widen16(__m128i v) {
  return kSigned ? _mm256_cvtepi16_epi32(v) : _mm256_cvtepu16_epi32(v);
}

template <bool kSigned>
__attribute__((target("avx2"))) void add_rows_nhwc_avx2(const void* xv, int64_t S, int64_t C, int32_t* acc) {
  const auto* x = static_cast<const uint8_t*>(xv);
  int64_t c = 0;
  for (; c + 32 <= C; c += 32) {
    __m256i s[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int64_t i0 = 0; i0 < S; i0 += 255) {
      const int64_t i1 = std::min(S, i0 + 255);
      __m256i h0 = _mm256_setzero_si256(), h1 = _mm256_setzero_si256();
      for (int64_t i = i0; i < i1; ++i) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i * C + c));
        h0 = _mm256_add_epi16(h0, widen8<kSigned>(_mm256_castsi256_si128(v)));
        h1 = _mm256_add_epi16(h1, widen8<kSigned>(_mm256_extracti128_si256(v, 1)));
      }
      s[0] = _mm256_add_epi32(s[0], widen16<kSigned>(_mm256_castsi256_si128(h0)));
      s[1] = _mm256_add_epi32(s[1], widen16<kSigned>(_mm256_extracti128_si256(h0, 1)));
      s[2] = _mm256_add_epi32(s[2], widen16<kSigned>(_mm256_castsi256_si128(h1)));
      s[3] = _mm256_add_epi32(s[3], widen16<kSigned>(_mm256_extracti128_si256(h1, 1)));
    }
    for (int k = 0; k < 4; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + c + 8 * k), s[k]);
  }
  for (; c < C; ++c) {
    int32_t a = 0;
    for (int64_t i = 0; i < S; ++i) a += kSigned ? static_cast<int8_t>(x[i * C + c]) : x[i * C + c];
    acc[c] = a;
  }
}

// y[i] = saturate(round_half_even(float(acc[i] + bias) * scale) + zp), n values.
__attribute__((target("avx2"))) int64_t requantize_avx2(const int32_t* acc, int64_t n, int32_t bias, float scale, float zp,
                                                        bool u8, void* yv) {
  auto* y = static_cast<uint8_t*>(yv);
  const __m256i vb = _mm256_set1_epi32(bias);
  const __m256 vs = _mm256_set1_ps(scale), vzp = _mm256_set1_ps(zp);
  const __m256 lo = _mm256_set1_ps(u8 ? 0.f : -128.f), hi = _mm256_set1_ps(u8 ? 255.f : 127.f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i q[2];
    for (int h = 0; h < 2; ++h) {
      const __m256i a = _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + i + 8 * h)), vb);
      const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(a), vs);
      const __m256 r = _mm256_add_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vzp);
      q[h] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8);  // 16 int16 in order
    const __m128i w0 = _mm256_castsi256_si128(w), w1 = _mm256_extracti128_si256(w, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), u8 ? _mm_packus_epi16(w0, w1) : _mm_packs_epi16(w0, w1));
  }
  return i;
}
#endif

template <class T>
FERRY_VEC int32_t sum_plane(const T* x, int64_t S) {
  int32_t acc = 0;
  for (int64_t i = 0; i < S; ++i) acc += x[i];
  return acc;
}

class QGapKernel : public Kernel {
 public:
  QGapKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    nhwc_ = node_.op_type == "NhwcQGlobalAveragePool";
    if (node_.inputs.size() != 5 || node_.outputs.size() != 1) return false;
    const TensorType* xt = graph.find_type(node_.inputs[0]);
    const Tensor* yzt = cpu::constant_input(graph, node_, 4);
    const Tensor* xst = cpu::constant_input(graph, node_, 1);
    const Tensor* yst = cpu::constant_input(graph, node_, 3);
    if (!xt || !is_8bit(xt->dtype) || !yzt || !is_8bit(yzt->dtype()) || !xst || xst->dtype() != DType::kF32 || !yst ||
        yst->dtype() != DType::kF32)
      return false;
    x_dt_ = xt->dtype;
    y_dt_ = yzt->dtype();
    float xz = 0, yz = 0;
    if (!cpu::scalar_input(graph, node_, 1, &xs_) || !cpu::scalar_input(graph, node_, 2, &xz) || !cpu::scalar_input(graph, node_, 3, &ys_) ||
        !cpu::scalar_input(graph, node_, 4, &yz))
      return false;
    xz_ = static_cast<int32_t>(xz);
    yz_ = yz;
    return quant_range(y_dt_, &lo_, &hi_);
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != x_dt_ || x.rank() < 3 || (nhwc_ && x.rank() != 4)) return fallback_(ctx);
    const int64_t N = x.dim(0), C = nhwc_ ? x.dim(3) : x.dim(1);
    int64_t S = 1;
    std::vector<int64_t> od = x.dims();
    for (int64_t i = nhwc_ ? 1 : 2; i < (nhwc_ ? 3 : x.rank()); ++i) {
      S *= x.dim(i);
      od[i] = 1;
    }
    if (S >= (int64_t{1} << 23)) return fallback_(ctx);  // the int32 sum could overflow
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, y_dt_, od, false));
    const float scale = xs_ / (ys_ * static_cast<float>(S));
    const int32_t bias = -static_cast<int32_t>(S) * xz_;
    std::vector<int32_t> acc(static_cast<size_t>(N * C));
    const bool u8 = x_dt_ == DType::kU8;
#if defined(__x86_64__)
    static const bool avx2 = __builtin_cpu_supports("avx2");
#else
    constexpr bool avx2 = false;
#endif
    for (int64_t n = 0; n < N; ++n) {
      int32_t* a = acc.data() + n * C;
      if (nhwc_ && avx2) {
#if defined(__x86_64__)
        if (u8) add_rows_nhwc_avx2<false>(x.data<uint8_t>() + n * S * C, S, C, a);
        else add_rows_nhwc_avx2<true>(x.data<int8_t>() + n * S * C, S, C, a);
#endif
      } else if (nhwc_) {
        if (u8) add_rows_nhwc(x.data<uint8_t>() + n * S * C, S, C, a);
        else add_rows_nhwc(x.data<int8_t>() + n * S * C, S, C, a);
      } else {
        for (int64_t c = 0; c < C; ++c)
          a[c] = u8 ? sum_plane(x.data<uint8_t>() + (n * C + c) * S, S) : sum_plane(x.data<int8_t>() + (n * C + c) * S, S);
      }
    }
    int64_t i = 0;
#if defined(__x86_64__)
    if (avx2) i = requantize_avx2(acc.data(), N * C, bias, scale, yz_, y_dt_ == DType::kU8, y->mutable_raw());
#endif
    for (; i < N * C; ++i) {
      const float q = quantize_value(static_cast<float>(acc[i] + bias) * scale, yz_, lo_, hi_);
      if (y_dt_ == DType::kU8) y->mutable_data<uint8_t>()[i] = static_cast<uint8_t>(q);
      else y->mutable_data<int8_t>()[i] = static_cast<int8_t>(q);
    }
    return Status::ok();
  }

 private:
  Node node_;
  KernelFn fallback_;
  bool nhwc_ = false;
  DType x_dt_ = DType::kU8, y_dt_ = DType::kU8;
  float xs_ = 1, ys_ = 1, yz_ = 0, lo_ = 0, hi_ = 255;
  int32_t xz_ = 0;
};

}  // namespace

void register_cpu_int8_pool_kernels(CpuKernelTable& t) {
  t.add("", "MaxPool", cpu::make_if_init<Int8MaxPoolKernel>);  // 8-bit inputs only; dnnl_pool takes f32/bf16
  t.add("com.ferry", "NhwcMaxPool", cpu::make_if_init<Int8MaxPoolKernel>);
  t.add("com.ferry", "QGlobalAveragePool", cpu::make_if_init<QGapKernel>);
  t.add("com.ferry", "NhwcQGlobalAveragePool", cpu::make_if_init<QGapKernel>);
}

}  // namespace ferry
