// oneDNN convolutions of training graphs (f32, 1-D..3-D, groups and depthwise, strides, dilations,
// pads and auto_pad):
//   Conv / FusedConv whose weights are fed at run time: dnnl_conv_train.cpp (registered here);
//   com.ferry ConvGrad(dY, X, W) -> (dX, dW, dB): convolution_backward_data and
//       convolution_backward_weights (with the bias gradient), created with the forward primitive
//       descriptor as hint; outputs given as "" are not computed.
// Plans (primitives and the layout changes around them) are made once per (X, W) shape and cached
// (dnnl_plan_cache.h). The graph is plain NCHW, except where the pass train_blocked_layout made a
// node com.ferry Blocked (ops/grad_blocked.cpp): its activations marked blocked are nChw16c (or,
// on AVX2 hosts, nChw8c: the node's attribute `block`) tensors [N, C/B, H, W, B]
// (ops/blocked_layout.h), read and written by the primitives directly when they run on that
// layout (no reorder); see blocked_layout() for when the primitives run on
// oneDNN's blocked layouts (reorders in and out inside the kernel) and when directly on NCHW.
// Also com.ferry ToBlocked / FromBlocked (the blocked region's edges): oneDNN reorders.
// The pieces the forward and backward share (buffers, kept X, layout changes, geometry, the layout and
// Winograd choices, --amp bf16's mode): dnnl_conv_train_util.h.
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
#include "ops/conv_grad_link.h"

namespace ferry {
namespace {

using cpu::NodeAttrs;
using cpu::dnnl_engine;
using cpu::dnnl_stream;
using cpu::make_reorder;
using cpu::wrap;
using namespace cpu::train_conv;  // NOLINT: the shared pieces of the training convolutions

// ---- backward: ConvGrad ------------------------------------------------------------------------

class ConvGradKernel : public Kernel {
 public:
  ConvGradKernel(const Node& node, const Graph& graph, KernelFn fallback)
      : node_(node), fallback_(fallback), amp_(node), link_(link_of(graph, node, true)),
        bdy_(input_blocked(node, 0)), bx_(input_blocked(node, 1)), bdx_(output_blocked(node, 0)),
        block_(node_layout_block(node)),
        dy_bf16_(amp_.bf16 && bdy_ && blocked_bit(node, "bf16_inputs", 0)),
        x_bf16_(amp_.bf16 && bx_ && blocked_bit(node, "bf16_inputs", 1)),
        dx_bf16_(amp_.bf16 && (amp_.round & 1) && bdx_ && blocked_bit(node, "bf16_outputs", 0)) {
    for (size_t i = 0; i < 3; ++i) want_[i] = i < node.outputs.size() && !node.outputs[i].empty();
  }

  Status compute(KernelContext& ctx) override {
    // The forward's copy of X (read once: cleared whatever happens below).
    KeptX* kept = link_.empty() ? nullptr : &kept_x(link_);
    const void* kept_of = kept ? kept->x : nullptr;
    if (kept) kept->x = nullptr;
    const Tensor &dy = ctx.input(0), &x = ctx.input(1), &w = ctx.input(2);
    if (dy.dtype() != (dy_bf16_ ? DType::kBF16 : DType::kF32) || x.dtype() != (x_bf16_ ? DType::kBF16 : DType::kF32) ||
        w.dtype() != DType::kF32)
      return amp_.bf16 ? amp_unsupported(node_, "an input is not f32 (dY: bf16 where bf16_inputs says so)") : fallback_(ctx);
    if (bx_ && (x.rank() != 5 || x.dims().back() != block_)) return fallback_(ctx);  // it reports it
    auto plan = plans_.get(plan_key(x, bx_, w), [this](const std::vector<int64_t>& k, Plan* p) { return make_plan(k, p); });
    if (!plan.is_ok()) return amp_.bf16 ? amp_unsupported(node_, plan.status().message()) : fallback_(ctx);
    const Plan* p = plan.value();
    if (dy.dims() != p->dy_dims) return amp_.bf16 ? amp_unsupported(node_, "dY's shape does not match") : fallback_(ctx);
    Tensor *dx = nullptr, *dw = nullptr, *db = nullptr;
    if (want_[0]) {
      const std::vector<int64_t> xd = logical_dims(x, bx_);
      ASSIGN_OR_RETURN(dx, ctx.allocate_output(0, dx_bf16_ ? DType::kBF16 : DType::kF32, bdx_ ? blocked_dims(xd, block_) : xd, false));
    }
    if (want_[1]) {
      ASSIGN_OR_RETURN(dw, ctx.allocate_output(1, DType::kF32, w.dims(), false));
    }
    if (want_[2]) {
      ASSIGN_OR_RETURN(db, ctx.allocate_output(2, DType::kF32, {w.dim(0)}, false));
    }
    return cpu::dnnl_call(node_, [&] {
      dnnl::stream& s = dnnl_stream();
      memory dy_w;  // dY as backward-weights reads it
      memory dy_round;  // wgrad_f32: dY rounded to bf16 in backward-weights' layout
      if ((want_[1] || want_[2]) && p->wgrad_f32) {
        // The kept bf16 X of the forward when it is the layout wanted here, else user -> bf16.
        memory xb;
        if (p->x_is_b) {
          xb = wrap(p->x_b, x);
        } else if (kept_of == x.raw() && kept->md == p->x_b) {
          xb = memory(kept->md, dnnl_engine(), kept->buf.data);
        } else {
          xb = buf_memory(p->x_b, kBufRoundX);
          p->x_to_b.execute(s, {{DNNL_ARG_FROM, wrap(p->user_x, x)}, {DNNL_ARG_TO, xb}});
        }
        memory xf = buf_memory(p->bw_pd.src_desc(), kBufSrc);
        p->x_from_b.execute(s, {{DNNL_ARG_FROM, xb}, {DNNL_ARG_TO, xf}});
        memory dyb;  // dY in bf16 as it comes (bf16_inputs), or rounded into a copy
        if (p->dy_is_b) {
          dyb = wrap(p->dy_b, dy);
        } else {
          dyb = buf_memory(p->dy_b, kBufRoundDy);
          p->dy_to_b.execute(s, {{DNNL_ARG_FROM, wrap(p->user_dy, dy)}, {DNNL_ARG_TO, dyb}});
        }
        dy_round = dyb;
        memory dyf = buf_memory(p->bw_pd.diff_dst_desc(), kBufDst);
        p->dy_from_b.execute(s, {{DNNL_ARG_FROM, dyb}, {DNNL_ARG_TO, dyf}});
        memory dwm = buf_memory(p->bw_pd.diff_weights_desc(), kBufDiffWei);
        std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, xf},
                                                {DNNL_ARG_DIFF_DST, dyf},
                                                {DNNL_ARG_DIFF_WEIGHTS, dwm},
                                                {DNNL_ARG_SCRATCHPAD, buf_memory(p->bw_pd.scratchpad_desc(), kBufPad)}};
        if (db) args[DNNL_ARG_DIFF_BIAS] = wrap(p->bw_pd.diff_bias_desc(), *db);
        p->bw.execute(s, args);
        if (dw && p->round_dw) {
          memory dwb = buf_memory(p->dw_b, kBufRoundDw);
          p->dw_to_b.execute(s, {{DNNL_ARG_FROM, dwm}, {DNNL_ARG_TO, dwb}});
          p->dw_b_out.finish(dwb, dw, s);
        } else if (dw) {
          p->dw_out.finish(dwm, dw, s);
          if (!p->dw_out.needed) std::memcpy(dw->mutable_raw(), dwm.get_data_handle(), static_cast<size_t>(dw->nbytes()));
        }
      } else if (want_[1] || want_[2]) {
        dy_w = p->dy_for_w.in(dy, kBufDst, s);
        const bool reuse_x = p->x_for_w.needed && kept_of == x.raw() && kept->md == p->x_for_w.want;
        std::unordered_map<int, memory> args = {
            {DNNL_ARG_SRC, reuse_x ? memory(kept->md, dnnl_engine(), kept->buf.data) : p->x_for_w.in(x, kBufSrc, s)},
            {DNNL_ARG_DIFF_DST, dy_w},
            {DNNL_ARG_SCRATCHPAD, buf_memory(p->bw_pd.scratchpad_desc(), kBufPad)}};
        memory dwm = dw ? p->dw_out.out(dw, kBufDiffWei) : buf_memory(p->bw_pd.diff_weights_desc(), kBufDiffWei);
        args[DNNL_ARG_DIFF_WEIGHTS] = dwm;
        if (db) args[DNNL_ARG_DIFF_BIAS] = wrap(p->bw_pd.diff_bias_desc(), *db);
        p->bw.execute(s, args);
        if (dw) p->dw_out.finish(dwm, dw, s);
      }
      if (want_[0]) {
        const bool reuse = (want_[1] || want_[2]) && !p->wgrad_f32 && p->dy_for_w.want == p->dy_for_d.want;
        // wgrad_f32: the bf16 dY made for backward-weights when backward-data wants that layout.
        const bool reuse_round = p->wgrad_f32 && (want_[1] || want_[2]) && p->dy_b == p->dy_for_d.want;
        memory dy_d = reuse ? dy_w : reuse_round ? dy_round : p->dy_for_d.in(dy, kBufDiffDst2, s);
        memory dxm = p->dx_out.out(dx, kBufDiffSrc);
        p->bd.execute(s, {{DNNL_ARG_DIFF_DST, dy_d},
                          {DNNL_ARG_WEIGHTS, p->w_for_d.in(w, kBufWei, s)},
                          {DNNL_ARG_DIFF_SRC, dxm},
                          {DNNL_ARG_SCRATCHPAD, buf_memory(p->bd_pd.scratchpad_desc(), kBufPad)}});
        p->dx_out.finish(dxm, dx, s);
      }
      s.wait();
    });
  }

 private:
  struct Plan {
    dnnl::convolution_backward_data::primitive_desc bd_pd;
    dnnl::convolution_backward_data bd;
    dnnl::convolution_backward_weights::primitive_desc bw_pd;
    dnnl::convolution_backward_weights bw;
    LayoutChange dy_for_d, w_for_d, dx_out, dy_for_w, x_for_w, dw_out;
    // --amp bf16 with f32 backward-weights (wgrad_in_f32): X and dY rounded through bf16 copies in
    // the primitive's layout (user -> bf16 -> f32), dW rounded the same way before dw_out.
    bool wgrad_f32 = false;
    memory::desc user_x, user_dy, x_b, dy_b, dw_b;
    dnnl::reorder x_to_b, x_from_b, dy_to_b, dy_from_b, dw_to_b;
    LayoutChange dw_b_out;
    bool round_dw = false;
    bool dy_is_b = false;  // dY comes in bf16 in dy_b's layout (bf16_inputs): no rounding copy
    bool x_is_b = false;   // X likewise
    std::vector<int64_t> dy_dims;
  };

  Status make_plan(const std::vector<int64_t>& key, Plan* p) {
    std::vector<int64_t> xd, wd;
    split_key(key, &xd, &wd);
    ConvShape s;
    RETURN_IF_ERROR(conv_shape(node_, xd, wd, &s));
    const auto plan_primitives = [&] {
      const bool blocked = blocked_layout(s);
      cpu::make_winograd_or_direct(winograd(s, blocked),
                                   [&](dnnl::algorithm alg) { make_primitives(s, blocked, alg, p); });
    };
    RETURN_IF_ERROR(cpu::dnnl_call(node_, plan_primitives));
    p->dy_dims.assign(s.dst.begin(), s.dst.end());
    if (bdy_) p->dy_dims = blocked_dims(p->dy_dims, block_);
    return Status::ok();
  }

  // The backward primitives and the layout changes around them (throws dnnl::error).
  void make_primitives(const ConvShape& s, bool blocked, dnnl::algorithm alg, Plan* p) {
    const dt in = amp_.in();
    const auto dst = layout_desc(s.dst, s.io_tag, blocked, in), wei = layout_desc(s.wei, s.wei_tag, blocked, in);
    const auto attr = cpu::concurrent_attr();
    const auto hint = forward_pd(s, blocked, want_[2], attr, alg, in, in);
    if ((bdy_ && s.dst[1] % block_ != 0) || ((bx_ || bdx_) && s.src[1] % block_ != 0))
      throw dnnl::error(dnnl_invalid_arguments, "blocked operands without whole blocks of channels");
    const memory::desc user_x = user_desc(s.src, s.io_tag, bx_, x_bf16_ ? dt::bf16 : dt::f32, block_),
                       user_y = user_desc(s.dst, s.io_tag, bdy_, dy_bf16_ ? dt::bf16 : dt::f32, block_),
                       user_dx = user_desc(s.src, s.io_tag, bdx_, dx_bf16_ ? dt::bf16 : dt::f32, block_),
                       user_w(s.wei, memory::data_type::f32, s.wei_tag);
    if (want_[0]) {
      const auto dsrc = layout_desc(s.src, s.io_tag, blocked, amp_.out(0));
      dnnl::convolution_backward_data::desc d(alg, dsrc, wei, dst, s.strides, s.dil, s.pad_l, s.pad_r);
      p->bd_pd = dnnl::convolution_backward_data::primitive_desc(d, attr, dnnl_engine(), hint);
      p->bd = dnnl::convolution_backward_data(p->bd_pd);
      p->dy_for_d.make(user_y, p->bd_pd.diff_dst_desc());
      p->w_for_d.make(user_w, p->bd_pd.weights_desc());
      p->dx_out.make(p->bd_pd.diff_src_desc(), user_dx);
    }
    if ((want_[1] || want_[2]) && amp_.bf16 && wgrad_in_f32(s)) {
      make_wgrad_f32(s, blocked, user_x, user_y, user_w, p);
    } else if (want_[1] || want_[2]) {
      // --amp bf16: measured on ResNet-50 b8 (2 threads, interleaved, loaded machine), f32
      // backward-weights on the bf16-valued operands (rounding dW afterwards) for every shape made
      // the step 1.26-1.33x slower than oneDNN's bf16 backward-weights (but see amp_wgrad_f32).
      const auto wsrc = layout_desc(s.src, s.io_tag, blocked, in), wdst = dst;
      const memory::desc b({s.dst[1]}, memory::data_type::f32, tag::x);
      const auto dwei = layout_desc(s.wei, s.wei_tag, blocked, amp_.out(1));
      const auto d = want_[2] ? dnnl::convolution_backward_weights::desc(alg, wsrc, dwei, b, wdst, s.strides, s.dil,
                                                                         s.pad_l, s.pad_r)
                              : dnnl::convolution_backward_weights::desc(alg, wsrc, dwei, wdst, s.strides, s.dil,
                                                                         s.pad_l, s.pad_r);
      p->bw_pd = dnnl::convolution_backward_weights::primitive_desc(d, attr, dnnl_engine(), hint);
      p->bw = dnnl::convolution_backward_weights(p->bw_pd);
      p->dy_for_w.make(user_y, p->bw_pd.diff_dst_desc());
      p->x_for_w.make(user_x, p->bw_pd.src_desc());
      p->dw_out.make(p->bw_pd.diff_weights_desc(), user_w);
    }
  }

  // wgrad_in_f32's backward-weights: f32 primitive (Winograd where winograd() takes the shape)
  // and the rounding reorders around it (throws dnnl::error).
  void make_wgrad_f32(const ConvShape& s, bool blocked, const memory::desc& user_x, const memory::desc& user_y,
                      const memory::desc& user_w, Plan* p) {
    const auto attr = cpu::concurrent_attr();
    const memory::desc b({s.dst[1]}, dt::f32, tag::x);
    auto make = [&](dnnl::algorithm alg) {
      const auto hint = forward_pd(s, blocked, want_[2], attr, alg, dt::f32, dt::f32);
      const auto wsrc = layout_desc(s.src, s.io_tag, blocked), wdst = layout_desc(s.dst, s.io_tag, blocked),
                 dwei = layout_desc(s.wei, s.wei_tag, blocked);
      const auto d = want_[2] ? dnnl::convolution_backward_weights::desc(alg, wsrc, dwei, b, wdst, s.strides, s.dil,
                                                                         s.pad_l, s.pad_r)
                              : dnnl::convolution_backward_weights::desc(alg, wsrc, dwei, wdst, s.strides, s.dil,
                                                                         s.pad_l, s.pad_r);
      p->bw_pd = dnnl::convolution_backward_weights::primitive_desc(d, attr, dnnl_engine(), hint);
    };
    cpu::make_winograd_or_direct(winograd(s, blocked), make);
    p->bw = dnnl::convolution_backward_weights(p->bw_pd);
    auto bf16_of = [](const memory::desc& d) {
      memory::desc c = d;
      c.data.data_type = dnnl_bf16;
      return c;
    };
    p->wgrad_f32 = true;
    p->user_x = user_x;
    p->user_dy = user_y;
    p->x_b = bf16_of(p->bw_pd.src_desc());
    p->dy_b = bf16_of(p->bw_pd.diff_dst_desc());
    p->dw_b = bf16_of(p->bw_pd.diff_weights_desc());
    p->x_is_b = user_x == p->x_b;
    if (!p->x_is_b) p->x_to_b = make_reorder(user_x, p->x_b);
    p->x_from_b = make_reorder(p->x_b, p->bw_pd.src_desc());
    p->dy_is_b = user_y == p->dy_b;
    if (!p->dy_is_b) p->dy_to_b = make_reorder(user_y, p->dy_b);
    p->dy_from_b = make_reorder(p->dy_b, p->bw_pd.diff_dst_desc());
    p->round_dw = amp_.out(1) == dt::bf16;
    p->dw_to_b = make_reorder(p->bw_pd.diff_weights_desc(), p->dw_b);
    p->dw_b_out.make(p->dw_b, user_w);
    p->dw_out.make(p->bw_pd.diff_weights_desc(), user_w);
  }

  Node node_;
  KernelFn fallback_;
  bool want_[3] = {false, false, false};
  AmpMode amp_;
  std::string link_;  // conv_grad_links key: X as the forward kept it
  bool bdy_ = false, bx_ = false, bdx_ = false;  // dY, X, dX held blocked (com.ferry Blocked)
  int64_t block_ = kLayoutBlock;                 // their block (the node's attribute `block`)
  bool dy_bf16_ = false, x_bf16_ = false, dx_bf16_ = false;  // dY / X / dX stored in bf16 (bf16_activations)
  cpu::PlanCache<Plan> plans_;
};

StatusOr<std::unique_ptr<Kernel>> make_conv_grad(const Node& node, const OpSchema& schema, const Graph& graph) {
  return std::unique_ptr<Kernel>(std::make_unique<ConvGradKernel>(node, graph, schema.kernel));
}

// com.ferry ToBlocked / FromBlocked of 4-D f32 tensors: one oneDNN reorder nchw <-> nChw16c / nChw8c.
class LayoutKernel : public Kernel {
 public:
  LayoutKernel(const Node& node, KernelFn fallback, bool to_plain) : node_(node), fallback_(fallback), to_plain_(to_plain) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t block = to_plain_ ? (x.rank() == 5 ? x.dims().back() : 0) : node_layout_block(node_);
    const bool ok = x.dtype() == DType::kF32 && valid_layout_block(block) &&
                    (to_plain_ ? x.rank() == 5 : x.rank() == 4 && x.dim(1) % block == 0);
    if (!ok || x.numel() == 0) return fallback_(ctx);  // the reference reports a bad shape
    const std::vector<int64_t> plain = to_plain_ ? plain_dims(x.dims()) : x.dims();
    std::vector<int64_t> key = plain;
    key.push_back(block);
    auto plan = plans_.get(key, [this, block](const std::vector<int64_t>& k, dnnl::reorder* r) {
      return cpu::dnnl_call(node_, [&] {
        const std::vector<int64_t> d(k.begin(), k.end() - 1);
        const memory::desc p(cpu::to_dnnl_dims(d), memory::data_type::f32, tag::nchw),
            b(cpu::to_dnnl_dims(d), memory::data_type::f32, blocked_tag(block));
        *r = to_plain_ ? make_reorder(b, p) : make_reorder(p, b);
      });
    });
    if (!plan.is_ok()) return plan.status();
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kF32, to_plain_ ? plain : blocked_dims(plain, block), false));
    return cpu::dnnl_call(node_, [&] {
      const memory::dims d = cpu::to_dnnl_dims(plain);
      const memory::desc p(d, memory::data_type::f32, tag::nchw), b(d, memory::data_type::f32, blocked_tag(block));
      dnnl::stream& s = dnnl_stream();
      plan.value()->execute(s, {{DNNL_ARG_FROM, wrap(to_plain_ ? b : p, x)}, {DNNL_ARG_TO, wrap(to_plain_ ? p : b, *y)}});
      s.wait();
    });
  }

 private:
  Node node_;
  KernelFn fallback_;
  bool to_plain_;
  cpu::PlanCache<dnnl::reorder> plans_;
};

StatusOr<std::unique_ptr<Kernel>> make_layout(const Node& node, const OpSchema& schema, const Graph& graph, bool to_plain) {
  if (!cpu::maybe_f32(graph, node.inputs[0])) return std::unique_ptr<Kernel>();
  return std::unique_ptr<Kernel>(std::make_unique<LayoutKernel>(node, schema.kernel, to_plain));
}

// com.ferry Blocked (ops/grad_blocked.cpp) wrapping a training convolution; other ops it wraps
// (BatchNormTraining...) are grad_blocked.cpp's.
StatusOr<std::unique_ptr<Kernel>> make_blocked(const Node& node, const OpSchema& schema, const Graph& graph) {
  const std::string op = inner_op(node);
  if (op == "Conv" || op == "FusedConv") return make_train_conv(node, schema, graph);
  if (op == "ConvGrad") return make_conv_grad(node, schema, graph);
  return std::unique_ptr<Kernel>();
}

}  // namespace

void register_cpu_dnnl_conv_grad_kernels(CpuKernelTable& t) {
  // After dnnl_conv's factories (cpu_kernels.inc order), which take every node with constant weights.
  t.add("", "Conv", make_train_conv);
  t.add("com.ferry", "FusedConv", make_train_conv);
  t.add("com.ferry", "ConvGrad", make_conv_grad);
  t.add("com.ferry", "Blocked", make_blocked);
  t.add("com.ferry", "ToBlocked", [](const Node& n, const OpSchema& s, const Graph& g) { return make_layout(n, s, g, false); });
  t.add("com.ferry", "FromBlocked", [](const Node& n, const OpSchema& s, const Graph& g) { return make_layout(n, s, g, true); });
}

}  // namespace ferry
