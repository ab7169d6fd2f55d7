// oneDNN pooling for MaxPool (one output, no dilation), AveragePool, GlobalAveragePool and their
// channels-last forms com.ferry.NhwcMaxPool / NhwcAveragePool / NhwcGlobalAveragePool (f32, bf16).
// Output sizes and pads come from the same arithmetic as the reference (ops/conv_pool_util.h);
// ceil_mode becomes extra right padding. A plan is made per input shape and cached (dnnl_plan_cache.h).
// The f32 NhwcGlobalAveragePool runs its own loop instead (global_average_nhwc).

#include <limits>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/dnnl_plan_cache.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/node_attrs.h"
#include "backends/cpu/vec_math.h"
#include "ops/conv_pool_util.h"

namespace ferry {
namespace {

using cpu::NodeAttrs;
using cpu::dnnl_engine;
using cpu::dnnl_stream;
using cpu::wrap;
using dnnl::memory;

// y[n, c] = mean over the h*w positions of x[n, pos, c] (f32 NHWC global average pool): the sums run
// in position order as oneDNN's pooling does, one vectorized loop over the channels, with no
// primitive call (EfficientNet-B0's 17 SE pools are 3-70 us of memory reads each, and oneDNN's
// dispatch cost several us on top: their total 0.247 -> 0.205 ms per run, b1 1 thread, `ferry profile`
// per-node CPU-time minimum over 4 interleaved rounds, loaded machine).
FERRY_VEC void global_average_nhwc(const float* x, int64_t positions, int64_t c, float* y) {
  for (int64_t i = 0; i < c; ++i) y[i] = 0.f;
  for (int64_t p = 0; p < positions; ++p, x += c)
    for (int64_t i = 0; i < c; ++i) y[i] += x[i];
  const float n = static_cast<float>(positions);
  for (int64_t i = 0; i < c; ++i) y[i] /= n;
}

// Where oneDNN has no jit pooling for plain NCHW f32 (this AVX2 host: its "simple_nchw" loop took
// 52-57 ms a step on ResNet-50's training MaxPool 8x64x112x112, 3x3 stride 2, 2 threads, a 20th of
// the convolutions' time; issue 37), max pooling runs this loop instead: per plane, the window's
// rows (kh) then columns (kw), each output taking an input only when greater (s > d, from the
// lowest float), exactly oneDNN's order and comparison, so the same values bit for bit (a NaN
// input is never taken; of two zeros the first stays).
struct MaxPoolGeom {
  int64_t ih, iw, oh, ow, kh, kw, sh, sw, pt, pl;
};
FERRY_VEC void max_pool_plane(const float* x, float* y, const MaxPoolGeom& g) {
  for (int64_t oh = 0; oh < g.oh; ++oh) {
    float* d = y + oh * g.ow;
    for (int64_t ow = 0; ow < g.ow; ++ow) d[ow] = std::numeric_limits<float>::lowest();
    for (int64_t kh = 0; kh < g.kh; ++kh) {
      const int64_t ih = oh * g.sh - g.pt + kh;
      if (ih < 0 || ih >= g.ih) continue;
      const float* row = x + ih * g.iw;
      for (int64_t kw = 0; kw < g.kw; ++kw) {
        // the outputs whose column iw = ow * sw - pl + kw lies in [0, iw)
        const int64_t lo_num = g.pl - kw, hi_num = g.iw - 1 + g.pl - kw;
        const int64_t lo = lo_num <= 0 ? 0 : (lo_num + g.sw - 1) / g.sw;
        const int64_t hi = hi_num < 0 ? 0 : std::min(g.ow, hi_num / g.sw + 1);
        const float* r = row + kw - g.pl;
        for (int64_t ow = lo; ow < hi; ++ow) {
          const float s = r[ow * g.sw];
          d[ow] = s > d[ow] ? s : d[ow];
        }
      }
    }
  }
}

class DnnlPoolKernel : public Kernel {
 public:
  DnnlPoolKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    const std::string& op = node_.op_type;
    channels_last_ = op.rfind("Nhwc", 0) == 0;
    const std::string base = channels_last_ ? op.substr(4) : op;
    global_ = base == "GlobalAveragePool";
    max_ = base == "MaxPool";
    if (node_.outputs.size() != 1) return false;
    const TensorType* t = graph.find_type(node_.inputs[0]);
    if (!t || (t->dtype != DType::kF32 && t->dtype != DType::kBF16) || !t->shape) return false;
    dtype_ = t->dtype;
    rank_ = t->shape->rank();
    if (rank_ < 3 || rank_ > 5 || (channels_last_ && rank_ != 4)) return false;
    NodeAttrs a(node_);
    if (!global_) {
      if (!read_spatial_attrs(a, rank_ - 2, nullptr, true, &attrs_).is_ok()) return false;
      for (int64_t d : attrs_.dilations)
        if (d != 1) return false;
      include_pad_ = !max_ && a.get_int("count_include_pad", 0) != 0;
    }
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != dtype_ || x.rank() != rank_) return fallback_(ctx);
    auto plan = plans_.get(x.dims(), [this](const std::vector<int64_t>& d, Plan* p) { return make_plan(d, p); });
    if (!plan.is_ok()) return fallback_(ctx);
    const Plan* p = plan.value();
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype_, p->out_dims, false));
    if (global_ && channels_last_ && dtype_ == DType::kF32) {
      const int64_t n = x.dim(0), c = x.dim(3), positions = x.dim(1) * x.dim(2);
      const float* xp = x.data<float>();
      float* yp = y->mutable_data<float>();
      parallel_ranges(n, positions * c, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) global_average_nhwc(xp + i * positions * c, positions, c, yp + i * c);
      });
      return Status::ok();
    }
    if (p->own_max) {
      const MaxPoolGeom g = p->geom;
      const int64_t planes = x.dim(0) * x.dim(1);
      const float* xp = x.data<float>();
      float* yp = y->mutable_data<float>();
      parallel_ranges(planes, g.oh * g.ow * g.kh * g.kw, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) max_pool_plane(xp + i * g.ih * g.iw, yp + i * g.oh * g.ow, g);
      });
      return Status::ok();
    }
    return cpu::dnnl_call(node_, [&] {
      // Small pools run on one thread (memory-bound: splitting them costs more than it saves).
      with_threads_for_bytes(x.nbytes() + y->nbytes(), [&] {
        p->prim.execute(dnnl_stream(), {{DNNL_ARG_SRC, wrap(p->src, x)},
                                        {DNNL_ARG_DST, wrap(p->dst, *y)},
                                        {DNNL_ARG_SCRATCHPAD, cpu::scratch_memory(p->pd.scratchpad_desc(),
                                                                                  cpu::ScratchSlot::kScratchpad)}});
        dnnl_stream().wait();
      });
    });
  }

 private:
  struct Plan {  // immutable once made: shared by concurrent runs
    dnnl::pooling_forward::primitive_desc pd;
    dnnl::pooling_forward prim;
    memory::desc src, dst;
    std::vector<int64_t> out_dims;
    bool own_max = false;  // max_pool_plane instead of oneDNN's reference loop (2-D f32 NCHW)
    MaxPoolGeom geom{};
  };

  Status make_plan(const std::vector<int64_t>& x_dims, Plan* plan) {
    std::vector<int64_t> xd = x_dims;
    if (channels_last_) xd = {x_dims[0], x_dims[3], x_dims[1], x_dims[2]};
    for (int64_t d : xd)
      if (d == 0) return unsupported("empty");
    const int64_t nd = rank_ - 2;
    memory::dims kernel, strides, pad_l, pad_r;
    std::vector<int64_t> yd = {xd[0], xd[1]};
    NodeAttrs a(node_);
    for (int64_t i = 0; i < nd; ++i) {
      if (global_) {
        kernel.push_back(xd[2 + i]);
        strides.push_back(1);
        pad_l.push_back(0);
        pad_r.push_back(0);
        yd.push_back(1);
        continue;
      }
      AxisGeom g;
      RETURN_IF_ERROR(conv_pool_axis(a, attrs_, i, xd[2 + i], &g));
      const int64_t k = attrs_.kernel[i], s = attrs_.strides[i];
      const int64_t right = std::max(g.pad_end, (g.out - 1) * s + k - xd[2 + i] - g.pad_begin);
      if (include_pad_ && right != g.pad_end) return unsupported("ceil_mode with count_include_pad");
      if (g.pad_begin >= k || right >= k) return unsupported("padding as large as the window");
      kernel.push_back(k);
      strides.push_back(s);
      pad_l.push_back(g.pad_begin);
      pad_r.push_back(right);
      yd.push_back(g.out);
    }
    const auto plan_primitives = [&] {
      memory::data_type dt;
      cpu::to_dnnl_type(dtype_, &dt);
      const auto t = cpu::plain_tag(xd.size(), channels_last_);
      plan->src = memory::desc(cpu::to_dnnl_dims(xd), dt, t);
      plan->dst = memory::desc(cpu::to_dnnl_dims(yd), dt, t);
      const auto alg = max_ ? dnnl::algorithm::pooling_max
                            : include_pad_ ? dnnl::algorithm::pooling_avg_include_padding
                                           : dnnl::algorithm::pooling_avg_exclude_padding;
      dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_inference, alg, plan->src, plan->dst, strides, kernel,
                                    pad_l, pad_r);
      plan->pd = dnnl::pooling_forward::primitive_desc(d, cpu::concurrent_attr(), dnnl_engine());
      plan->prim = dnnl::pooling_forward(plan->pd);
      if (max_ && !channels_last_ && dtype_ == DType::kF32 && nd == 2 &&
          std::string(plan->pd.impl_info_str()).rfind("simple_nchw", 0) == 0) {
        plan->own_max = true;
        plan->geom = MaxPoolGeom{xd[2], xd[3], yd[2], yd[3], kernel[0], kernel[1], strides[0], strides[1], pad_l[0], pad_l[1]};
      }
    };
    RETURN_IF_ERROR(cpu::dnnl_call(node_, plan_primitives));
    plan->out_dims = channels_last_ ? std::vector<int64_t>{yd[0], yd[2], yd[3], yd[1]} : yd;
    return Status::ok();
  }

  Node node_;
  KernelFn fallback_;
  DType dtype_ = DType::kUndefined;
  int64_t rank_ = 0;
  bool channels_last_ = false, global_ = false, max_ = false, include_pad_ = false;
  SpatialAttrs attrs_;
  cpu::PlanCache<Plan> plans_;
};

StatusOr<std::unique_ptr<Kernel>> make_pool(const Node& node, const OpSchema& schema, const Graph& graph) {
  auto k = std::make_unique<DnnlPoolKernel>(node, schema.kernel);
  if (!k->init(graph)) return std::unique_ptr<Kernel>();
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace

void register_cpu_dnnl_pool_kernels(CpuKernelTable& t) {
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool"}) {
    t.add("", op, make_pool);
    t.add("com.ferry", std::string("Nhwc") + op, make_pool);
  }
}

}  // namespace ferry
