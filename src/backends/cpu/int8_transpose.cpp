// Transpose of 8-bit tensors (the int8 region's NCHW <-> NHWC edges) as a oneDNN reorder, a copy where
// only dims of size 1 move, or an interleave of an image's few planes; data_movement.cpp takes the rest.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/dnnl_plan_cache.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/int8_util.h"
#include "ops/quantize_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry {
namespace {

using cpu::dnnl_stream;
using cpu::wrap;
using dnnl::memory;

class Int8TransposeKernel : public Kernel {
 public:
  Int8TransposeKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    if (node_.inputs.size() != 1 || node_.outputs.size() != 1) return false;
    const TensorType* xt = graph.find_type(node_.inputs[0]);
    const Attribute* perm = node_.attr("perm");
    if (!xt || !is_8bit(xt->dtype) || !xt->shape || !perm) return false;
    dtype_ = xt->dtype;
    perm_ = perm->ints;
    const int64_t r = xt->shape->rank();
    if (r < 2 || r > 6 || static_cast<int64_t>(perm_.size()) != r) return false;
    std::vector<bool> seen(static_cast<size_t>(r), false);
    for (int64_t p : perm_) {
      if (p < 0 || p >= r || seen[p]) return false;
      seen[p] = true;
    }
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != dtype_ || x.rank() != static_cast<int64_t>(perm_.size())) return fallback_(ctx);
    auto plan = plans_.get(x.dims(), [this](const std::vector<int64_t>& d, Plan* p) { return make_plan(d, p); });
    if (!plan.is_ok()) return fallback_(ctx);
    const Plan* p = plan.value();
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype_, p->out_dims, false));
    if (x.numel() == 0) return Status::ok();
    if (p->copy) {  // only dims of size 1 move: the bytes stay in order
      std::memcpy(y->mutable_raw(), x.raw(), static_cast<size_t>(x.nbytes()));
      return Status::ok();
    }
    if (p->few_channels) {  // NCHW -> NHWC of an image (3 channels): interleave the planes
      const int64_t N = x.dim(0), C = x.dim(1), S = x.dim(2) * x.dim(3);
      const auto* src = static_cast<const uint8_t*>(x.raw());
      auto* dst = static_cast<uint8_t*>(y->mutable_raw());
      for (int64_t n = 0; n < N; ++n, src += C * S, dst += C * S) interleave_planes(src, C, S, dst);
      return Status::ok();
    }
    return cpu::dnnl_call(node_, [&] {
      p->prim.execute(dnnl_stream(), {{DNNL_ARG_FROM, wrap(p->src, x)}, {DNNL_ARG_TO, wrap(p->dst, *y)}});
      dnnl_stream().wait();
    });
  }

 private:
  struct Plan {
    dnnl::reorder prim;
    memory::desc src, dst;
    std::vector<int64_t> out_dims;
    bool copy = false, few_channels = false;
  };

#if defined(__x86_64__)
  // Three planes into RGB triples, 16 pixels (48 bytes) per step: each output chunk of 16 bytes is three
  // byte shuffles of the planes' 16 bytes, or-ed. Returns the pixels done.
  __attribute__((target("ssse3"))) static int64_t interleave3_ssse3(const uint8_t* a, const uint8_t* b, const uint8_t* c,
                                                                    int64_t S, uint8_t* dst) {
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

  // dst[s * C + c] = src[c * S + s] for C <= 4 (oneDNN's reorder of a [1,3,224,224] u8 image to NHWC
  // took ~45 us, ResNet-50's int8 input).
  static void interleave_planes(const uint8_t* src, int64_t C, int64_t S, uint8_t* dst) {
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

  // y[i...] = x[perm(i...)]: the same logical tensor (y's dims) described over x's memory with
  // permuted strides, reordered into a dense y.
  Status make_plan(const std::vector<int64_t>& xd, Plan* plan) {
    const size_t r = xd.size();
    std::vector<int64_t> xs(r, 1);
    for (size_t i = r - 1; i > 0; --i) xs[i - 1] = xs[i] * xd[i];
    memory::dims yd, ys;
    for (int64_t p : perm_) {
      yd.push_back(xd[p]);
      ys.push_back(xs[p]);
    }
    plan->out_dims.assign(yd.begin(), yd.end());
    // The dims other than 1 in the same order: a copy.
    std::vector<int64_t> moved;
    for (int64_t p : perm_)
      if (xd[p] != 1) moved.push_back(p);
    plan->copy = std::is_sorted(moved.begin(), moved.end());
    plan->few_channels = r == 4 && perm_ == std::vector<int64_t>{0, 2, 3, 1} && xd[1] <= 4;
    if (plan->copy || plan->few_channels) return Status::ok();
    return cpu::dnnl_call(node_, [&] {
      plan->src = memory::desc(yd, cpu::int8_type(dtype_), ys);
      plan->dst = memory::desc(yd, cpu::int8_type(dtype_), cpu::plain_tag(r));
      plan->prim = cpu::make_reorder(plan->src, plan->dst);
    });
  }

  Node node_;
  KernelFn fallback_;
  DType dtype_ = DType::kU8;
  std::vector<int64_t> perm_;
  cpu::PlanCache<Plan> plans_;
};

}  // namespace

void register_cpu_int8_transpose_kernels(CpuKernelTable& t) {
  t.add("", "Transpose", cpu::make_if_init<Int8TransposeKernel>);  // 8-bit only; data_movement takes the rest
}

}  // namespace ferry
