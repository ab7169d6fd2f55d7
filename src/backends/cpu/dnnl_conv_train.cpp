// oneDNN forward convolutions of training graphs (f32, 1-D..3-D, groups and depthwise, strides,
// dilations, pads and auto_pad): Conv / FusedConv whose weights are fed at run time (a trained
// parameter is a graph input, so dnnl_conv.cpp, which packs constant weights once, declines them):
// the weights are reordered on every run, the bias, residual Z and activation are fused as in
// dnnl_conv.cpp; X is kept in the primitive's layout for the linked ConvGrad (kept_x). Registered,
// with the backward, by dnnl_conv_grad.cpp; the layouts, plans and pieces shared with it:
// dnnl_conv_train_util.h.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/dnnl_conv_train_util.h"
#include "backends/cpu/dnnl_plan_cache.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/node_attrs.h"
#include "ops/blocked_layout.h"

namespace ferry {
namespace {

using cpu::NodeAttrs;
using cpu::dnnl_engine;
using cpu::dnnl_stream;
using cpu::make_reorder;
using cpu::wrap;
using namespace cpu::train_conv;  // NOLINT: the shared pieces of the training convolutions

class TrainConvKernel : public Kernel {
 public:
  TrainConvKernel(const Node& node, const Graph& graph, KernelFn fallback)
      : node_(node), fallback_(fallback), amp_(node), link_(link_of(graph, node, false)),
        bx_(input_blocked(node, 0)), by_(output_blocked(node, 0)), block_(node_layout_block(node)),
        y_bf16_(amp_.bf16 && (amp_.round & 1) && blocked_bit(node, "bf16_outputs", 0)),
        x_bf16_(amp_.bf16 && bx_ && blocked_bit(node, "bf16_inputs", 0)) {}
  bool amp() const { return amp_.bf16; }

  bool init(const Graph& graph) {
    if ((!x_bf16_ && !cpu::maybe_f32(graph, node_.inputs[0])) || !cpu::maybe_f32(graph, node_.inputs[1])) return false;
    NodeAttrs attrs(node_);
    if (attrs.get_int("channels_last", 0) != 0) return false;
    has_b_ = node_.inputs.size() > 2 && !node_.inputs[2].empty();
    has_z_ = node_.inputs.size() > 3 && !node_.inputs[3].empty();
    return cpu::node_activation(node_, &act_);
  }

  Status compute(KernelContext& ctx) override {
    KeptX* keep = link_.empty() ? nullptr : &kept_x(link_);
    if (keep) keep->x = nullptr;  // whatever this node kept in an earlier run is stale now
    const Tensor &x = ctx.input(0), &w = ctx.input(1);
    const bool inputs_f32 = (x_bf16_ ? x.dtype() == DType::kBF16 : f32(x)) && f32(w) && (!has_b_ || f32(ctx.input(2))) &&
                            (!has_z_ || f32(ctx.input(3)));
    if (!inputs_f32) return amp() ? amp_unsupported(node_, "an input is not f32") : fallback_(ctx);
    if (bx_ && (x.rank() != 5 || x.dims().back() != block_)) return fallback_(ctx);  // it reports it
    auto plan = plans_.get(plan_key(x, bx_, w), [this](const std::vector<int64_t>& k, Plan* p) { return make_plan(k, p); });
    if (!plan.is_ok()) return amp() ? amp_unsupported(node_, plan.status().message()) : fallback_(ctx);
    const Plan* p = plan.value();
    if ((has_b_ && ctx.input(2).numel() != w.dim(0)) || (has_z_ && ctx.input(3).dims() != p->out_dims))
      return amp() ? amp_unsupported(node_, "the bias or residual shape does not match") : fallback_(ctx);
    if (y_bf16_ && has_z_) return amp_unsupported(node_, "a bf16 output with a residual sum");
    ASSIGN_OR_RETURN(Tensor * y, has_z_ ? ctx.allocate_output_over(0, 3, DType::kF32, p->out_dims)
                                        : ctx.allocate_output(0, y_bf16_ ? DType::kBF16 : DType::kF32, p->out_dims, false));
    const auto run_primitives = [&] {
      dnnl::stream& s = dnnl_stream();
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, p->src.in(x, kBufSrc, s, keep && p->src.needed ? &keep->buf : nullptr)},
          {DNNL_ARG_WEIGHTS, p->wei.in(w, kBufWei, s)},
          {DNNL_ARG_SCRATCHPAD, buf_memory(p->pd.scratchpad_desc(), kBufPad)}};
      memory dst = p->dst.out(y, kBufDst);
      if (has_z_) {  // the sum post-op adds what dst holds
        const Tensor& z = ctx.input(3);
        if (p->dst.needed) p->z_in.execute(s, {{DNNL_ARG_FROM, wrap(p->dst.want, z)}, {DNNL_ARG_TO, dst}});
        else if (z.raw() != y->raw()) std::memcpy(y->mutable_raw(), z.raw(), static_cast<size_t>(z.nbytes()));
      }
      args[DNNL_ARG_DST] = dst;
      if (has_b_) args[DNNL_ARG_BIAS] = wrap(memory::desc({w.dim(0)}, memory::data_type::f32, tag::x), ctx.input(2));
      p->prim.execute(s, args);
      p->dst.finish(dst, y, s);
      s.wait();
    };
    RETURN_IF_ERROR(cpu::dnnl_call(node_, run_primitives));
    if (keep && p->src.needed) {
      keep->md = p->src.want;
      keep->x = x.raw();
    }
    return Status::ok();
  }

 private:
  struct Plan {
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward prim;
    LayoutChange src, wei, dst;
    dnnl::reorder z_in;
    std::vector<int64_t> out_dims;
  };

  static bool f32(const Tensor& t) { return t.dtype() == DType::kF32; }

  Status make_plan(const std::vector<int64_t>& key, Plan* p) {
    std::vector<int64_t> xd, wd;
    split_key(key, &xd, &wd);
    ConvShape s;
    RETURN_IF_ERROR(conv_shape(node_, xd, wd, &s));
    if (amp() && has_z_) return unsupported("a residual sum");  // would round conv + Z, not conv
    const auto plan_primitives = [&] {
      const bool blocked = blocked_layout(s);
      dnnl::post_ops ops;
      if (has_z_) ops.append_sum(1.f);
      if (!cpu::append_activation(act_, &ops)) return unsupported("activation");
      dnnl::primitive_attr attr = cpu::concurrent_attr();
      attr.set_post_ops(ops);
      cpu::make_winograd_or_direct(winograd(s, blocked), [&](dnnl::algorithm alg) {
        p->pd = forward_pd(s, blocked, has_b_, attr, alg, amp_.in(), amp_.out(0));
      });
      p->prim = dnnl::convolution_forward(p->pd);
      if (by_ && s.dst[1] % block_ != 0) return unsupported("blocked output channels");
      if (y_bf16_ && !by_) return unsupported("a bf16 output not held blocked");
      const memory::desc user_x = user_desc(s.src, s.io_tag, bx_, x_bf16_ ? dt::bf16 : dt::f32, block_),
                         user_y = user_desc(s.dst, s.io_tag, by_, y_bf16_ ? dt::bf16 : dt::f32, block_),
                         user_w(s.wei, memory::data_type::f32, s.wei_tag);
      p->src.make(user_x, p->pd.src_desc());
      p->wei.make(user_w, p->pd.weights_desc());
      p->dst.make(p->pd.dst_desc(), user_y);
      if (p->dst.needed && has_z_) p->z_in = make_reorder(user_y, p->pd.dst_desc());
      return Status::ok();
    };
    RETURN_IF_ERROR(cpu::dnnl_call(node_, plan_primitives));
    p->out_dims.assign(s.dst.begin(), s.dst.end());
    if (by_) p->out_dims = blocked_dims(p->out_dims, block_);
    return Status::ok();
  }

  Node node_;
  KernelFn fallback_;
  AmpMode amp_;
  std::string link_;  // conv_grad_links key: X is kept for that ConvGrad
  bool bx_ = false, by_ = false;  // X; Y and Z held blocked (com.ferry Blocked)
  int64_t block_ = kLayoutBlock;  // their block (the node's attribute `block`)
  bool y_bf16_ = false;           // Y stored in bf16 (bf16_outputs, train_blocked_layout's bf16_activations)
  bool x_bf16_ = false;           // X stored in bf16 (bf16_inputs)
  bool has_b_ = false, has_z_ = false;
  FusedActivation act_;
  cpu::PlanCache<Plan> plans_;
};

}  // namespace

StatusOr<std::unique_ptr<Kernel>> make_train_conv(const Node& node, const OpSchema& schema, const Graph& graph) {
  auto k = std::make_unique<TrainConvKernel>(node, graph, schema.kernel);
  if (!k->init(graph)) {
    if (k->amp()) return amp_unsupported(node, "oneDNN's training convolution does not take it (layout or activation)");
    return std::unique_ptr<Kernel>();
  }
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace ferry
