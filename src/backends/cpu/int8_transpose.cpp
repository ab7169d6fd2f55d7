// Transpose of 8-bit tensors (the int8 region's NCHW <-> NHWC edges) as a oneDNN reorder, a copy where
// only dims of size 1 move, or an interleave of an image's few planes; data_movement.cpp takes the rest.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/dnnl_plan_cache.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/int8_quantize.h"
#include "backends/cpu/int8_util.h"
#include "ops/quantize_util.h"

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
      for (int64_t n = 0; n < N; ++n, src += C * S, dst += C * S) cpu::interleave_planes(src, C, S, dst);
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
