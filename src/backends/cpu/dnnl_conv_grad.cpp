// oneDNN convolutions of training graphs (f32, 1-D..3-D, groups and depthwise, strides, dilations,
// pads and auto_pad):
//   Conv / FusedConv whose weights are fed at run time (a trained parameter is a graph input, so
//       dnnl_conv.cpp, which packs constant weights once, declines them): the weights are reordered
//       on every run, the bias, residual Z and activation are fused as in dnnl_conv.cpp;
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
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/dnnl_plan_cache.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/node_attrs.h"
#include "common/env_switch.h"
#include "ops/blocked_layout.h"
#include "ops/conv_grad_link.h"
#include "ops/conv_pool_util.h"

namespace ferry {
namespace {

using cpu::NodeAttrs;
using cpu::dnnl_engine;
using cpu::dnnl_stream;
using cpu::wrap;
using dnnl::memory;
using tag = dnnl::memory::format_tag;

// Per-thread buffers for the tensors in oneDNN's layouts, one per role (as cpu::scratch_memory:
// a run executes its nodes one after another on one thread, so each run owns its buffers).
enum Buf { kBufSrc, kBufWei, kBufDst, kBufDiffSrc, kBufDiffWei, kBufDiffDst2, kBufPad, kBufRoundX, kBufRoundDy, kBufRoundDw, kBufs };

struct GrowBuffer {
  void* data = nullptr;
  size_t size = 0;
  GrowBuffer() = default;
  GrowBuffer(const GrowBuffer&) = delete;
  GrowBuffer& operator=(const GrowBuffer&) = delete;
  ~GrowBuffer() { std::free(data); }
};

memory grow_memory(const memory::desc& d, GrowBuffer& b) {
  const size_t bytes = d.get_size();
  if (bytes > b.size) {
    std::free(b.data);
    b.size = (bytes + 4095) / 4096 * 4096;
    b.data = std::aligned_alloc(64, b.size);
    if (!b.data) {
      b.size = 0;
      throw dnnl::error(dnnl_out_of_memory, "training convolution buffer allocation failed");
    }
  }
  return memory(d, dnnl_engine(), bytes ? b.data : nullptr);
}

memory buf_memory(const memory::desc& d, Buf slot) {
  thread_local GrowBuffer bufs[kBufs];
  return grow_memory(d, bufs[slot]);
}

// The forward's X in the layout of its primitive, kept for the linked ConvGrad's backward-weights
// (ops/conv_grad_link.h) so that X is reordered once per step, not twice. One per link and thread
// (a run executes its nodes one after another on one thread): the forward clears it first thing and
// fills it with the reorder it makes anyway; ConvGrad takes it when it is of the same data pointer
// and layout, and clears it (read once). So a copy is only ever read by the ConvGrad that follows
// the forward which made it, in the same run. The buffer is kept (not freed after the read): the
// copies are all alive at the end of the forward pass, the step's peak, and returning them to the
// system would page them in again every step (train/memory_plan_train.cpp counts them).
struct KeptX {
  GrowBuffer buf;
  memory::desc md;
  const void* x = nullptr;  // the data pointer it is a copy of; nullptr: nothing to read
};

KeptX& kept_x(const std::string& link) {
  thread_local std::unordered_map<std::string, KeptX> kept;
  return kept[link];
}

// The link key of the forward (`grad` false) or ConvGrad node `node` of `graph`; empty: none.
std::string link_of(const Graph& graph, const Node& node, bool grad) {
  for (const ConvGradLink& l : conv_grad_links(graph)) {
    const Node& n = graph.nodes[grad ? l.grad : l.forward];
    if (n.name == node.name && n.inputs == node.inputs && n.outputs == node.outputs) return l.key;
  }
  return {};
}

dnnl::reorder make_reorder(const memory::desc& from, const memory::desc& to) {
  return dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_engine(), from, dnnl_engine(), to));
}

// A tensor in the layout a primitive wants: the user's memory, or a reorder of it into `slot`.
struct LayoutChange {
  memory::desc user, want;
  bool needed = false;
  dnnl::reorder prim;

  void make(const memory::desc& user_desc, const memory::desc& want_desc) {
    user = user_desc;
    want = want_desc;
    needed = user != want;
    if (needed) prim = make_reorder(user, want);
  }
  // Input side: the tensor as the primitive reads it (reordered into `to`, else into `slot`).
  memory in(const Tensor& t, Buf slot, dnnl::stream& s, GrowBuffer* to = nullptr) const {
    memory m = wrap(user, t);
    if (!needed) return m;
    memory b = to ? grow_memory(want, *to) : buf_memory(want, slot);
    prim.execute(s, {{DNNL_ARG_FROM, m}, {DNNL_ARG_TO, b}});
    return b;
  }
  // Output side (user = the primitive's layout, want = the tensor's): where the primitive writes.
  memory out(Tensor* t, Buf slot) const { return needed ? buf_memory(user, slot) : wrap(want, *t); }
  void finish(const memory& written, Tensor* t, dnnl::stream& s) const {
    if (needed) prim.execute(s, {{DNNL_ARG_FROM, written}, {DNNL_ARG_TO, wrap(want, *t)}});
  }
};

// Geometry of one convolution in oneDNN's terms.
struct ConvShape {
  memory::dims src, wei, dst, strides, dil, pad_l, pad_r;
  int64_t group = 1;
  tag io_tag = tag::undef, wei_tag = tag::undef;
};

Status conv_shape(const Node& node, const std::vector<int64_t>& x, const std::vector<int64_t>& w, ConvShape* s) {
  NodeAttrs attrs(node);
  const int64_t rank = static_cast<int64_t>(x.size()), nd = rank - 2;
  if (rank < 3 || rank > 5 || static_cast<int64_t>(w.size()) != rank) return unsupported("rank");
  s->group = attrs.get_int("group", 1);
  const int64_t g = s->group;
  if (g < 1 || w[0] % g != 0 || x[1] != w[1] * g) return unsupported("channels");
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  SpatialAttrs sa;
  RETURN_IF_ERROR(read_spatial_attrs(attrs, nd, &kernel, true, &sa));
  s->src = cpu::to_dnnl_dims(x);
  s->dst = {x[0], w[0]};
  for (int64_t i = 0; i < nd; ++i) {
    AxisGeom ag;
    RETURN_IF_ERROR(conv_pool_axis(attrs, sa, i, x[2 + i], &ag));
    if (ag.pad_begin < 0 || ag.pad_end < 0 || ag.out <= 0) return unsupported("geometry");
    s->dst.push_back(ag.out);
    s->strides.push_back(sa.strides[i]);
    s->dil.push_back(sa.dilations[i] - 1);
    s->pad_l.push_back(ag.pad_begin);
    s->pad_r.push_back(ag.pad_end);
  }
  for (int64_t d : x)
    if (d <= 0) return unsupported("empty");
  s->wei = g > 1 ? memory::dims{g, w[0] / g, w[1]} : memory::dims{w[0], w[1]};
  s->wei.insert(s->wei.end(), kernel.begin(), kernel.end());
  s->io_tag = cpu::plain_tag(x.size());
  s->wei_tag = g > 1 ? (rank == 3 ? tag::goiw : rank == 4 ? tag::goihw : tag::goidhw)
                     : (rank == 3 ? tag::oiw : rank == 4 ? tag::oihw : tag::oidhw);
  return Status::ok();
}

// Whether the primitives run on oneDNN's own (blocked) layouts, reordering NCHW in and out, or
// directly on NCHW (oneDNN's gemm-based convolution). Measured on a ResNet-50 training step (b8, 2
// threads, oneDNN's own timings): blocked 1.04 s of convolutions + reorders; plain 1x1 convolutions
// alone cost 0.91 s (gemm: 546 ms forward against 161 ms blocked, reorders included). So always
// blocked; $FERRY_TRAIN_CONV_LAYOUT = plain | blocked forces one (to compare).
bool blocked_layout(const ConvShape& s) {
  static const int forced = [] {
    const char* e = env_value("FERRY_TRAIN_CONV_LAYOUT");
    if (!e) return -1;
    return std::string(e) == "plain" ? 0 : std::string(e) == "blocked" ? 1 : -1;
  }();
  if (forced >= 0) return forced == 1;
  (void)s;  // measured on ResNet-50 (oneDNN verbose, 2 threads): blocked wins for 1x1 convolutions too
  return true;
}

// Winograd F(4x4, 3x3) for 3x3 stride-1 ungrouped convolutions on large images, forward and
// backward, on the shapes dnnl_conv.cpp measured for inference. ResNet-50 b8 (2 threads, oneDNN's
// timings): its six 3x3 convolutions of layer1/2 take 74 ms per step (forward + both backward)
// instead of ~200 ms direct; rounding differs by ~1e-6 relative. Also for the wide 3x3s of layer3/4
// (>= 256 channels in and out, >= 7x7 out), which the inference measurements left direct: oneDNN's
// timings of one step each way, same load (3.3-3.6, so ~2.8x quiet times): the five 14x14x256
// convolutions 338 -> 226 ms, the two 7x7x512 135 -> 116 ms (forward + both backward).
// $FERRY_TRAIN_CONV_WINOGRAD=0 turns it off, =all takes every 3x3 stride-1 shape (to measure).
// Blocked layouts only.
bool winograd(const ConvShape& s, bool blocked) {
  static const int enabled = [] {
    const char* e = env_value("FERRY_TRAIN_CONV_WINOGRAD");
    return e && std::string(e) == "0" ? 0 : e && std::string(e) == "all" ? 2 : 1;
  }();
  if (!enabled || !blocked || s.group != 1 || s.src.size() != 4 || s.wei[2] != 3 || s.wei[3] != 3) return false;
  for (size_t i = 0; i < 2; ++i)
    if (s.strides[i] != 1 || s.dil[i] != 0) return false;
  if (enabled == 2) return true;
  if (s.dst[2] * s.dst[3] >= 7 * 7 && s.src[1] >= 256 && s.dst[1] >= 256) return true;  // training: see above
  return s.dst[2] * s.dst[3] >= 24 * 24 && s.src[1] >= 32 && s.dst[1] >= 16 && std::min(s.src[1], s.dst[1]) <= 128;
}

using dt = memory::data_type;

memory::desc layout_desc(const memory::dims& d, tag plain, bool blocked, dt type = dt::f32) {
  return memory::desc(d, type, blocked ? tag::any : plain);
}

// --amp bf16 folded into the node (src/passes/amp_bf16_fold.cpp): amp_bf16 = 1 runs the oneDNN bf16
// primitives (operands converted to bf16 by the reorders into the primitive's layout, f32
// accumulation); bit i of amp_round_outputs: output i is written in bf16 (rounded), else in f32.
struct AmpMode {
  bool bf16 = false;
  int64_t round = 0;
  explicit AmpMode(const Node& n) {
    NodeAttrs a(n);
    bf16 = a.get_int("amp_bf16", 0) != 0;
    round = bf16 ? a.get_int("amp_round_outputs", 0) : 0;
  }
  dt in() const { return bf16 ? dt::bf16 : dt::f32; }
  dt out(int i) const { return (round >> i) & 1 ? dt::bf16 : dt::f32; }
};

// --amp bf16, backward-weights of the 3x3 (any kernel wider than 1) convolutions with 128 input
// channels or more: oneDNN 2.6's bf16 kernel (jit_bf16) is 5-10x slower there than the f32 one on
// the same shape (ResNet-50 b8, 2 threads, oneDNN's timings in one step, same load: the 13 such
// convolutions 735 ms bf16 against 109 ms f32, Winograd for the stride-1 ones), while the 1x1 and
// 64-channel ones are even. Those run f32 backward-weights on the operands rounded to bf16 (a
// reorder f32 -> bf16 -> f32 each), dW rounded afterwards where the graph rounds it: the autocast
// specification (f32 compute on rounded operands). $FERRY_AMP_WGRAD = bf16 | f32 forces one for
// every shape (to compare). ResNet-50 b8 --amp bf16, 2 threads, 3 interleaved rounds (loaded
// machine, load 4.1-4.7): median step 2316-2521 / 1614 ms all bf16, 1418-1695 / 960 ms with this.
// The rule: ops/conv_grad_link.h (the memory plan counts its buffers).
bool wgrad_in_f32(const ConvShape& s) {
  return amp_wgrad_f32(s.group, s.src[1], std::vector<int64_t>(s.wei.end() - (s.src.size() - 2), s.wei.end()));
}

Status amp_unsupported(const Node& node, const std::string& why) {
  return unsupported(node.describe() + ": --amp bf16 folded into this convolution, but " + why +
                     "; run with FERRY_AMP_NATIVE=0 (the emulated bf16 graph)");
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvShape& s, bool blocked, bool bias,
                                                     const dnnl::primitive_attr& attr, dnnl::algorithm alg,
                                                     dt in = dt::f32, dt out = dt::f32) {
  const auto src = layout_desc(s.src, s.io_tag, blocked, in), dst = layout_desc(s.dst, s.io_tag, blocked, out),
             wei = layout_desc(s.wei, s.wei_tag, blocked, in);
  const memory::desc b({s.dst[1]}, memory::data_type::f32, tag::x);
  const auto d = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, wei, b, dst,
                                                        s.strides, s.dil, s.pad_l, s.pad_r)
                      : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, wei, dst,
                                                        s.strides, s.dil, s.pad_l, s.pad_r);
  return dnnl::convolution_forward::primitive_desc(d, attr, dnnl_engine());
}

// The plain dims of an activation held blocked (`blocked`) or plain.
std::vector<int64_t> logical_dims(const Tensor& t, bool blocked) { return blocked ? plain_dims(t.dims()) : t.dims(); }

// The blocked layout of `block` channels (ops/blocked_layout.h: 16, or 8 on AVX2 hosts).
tag blocked_tag(int64_t block) { return block == 8 ? tag::nChw8c : tag::nChw16c; }

// The user's (the graph's) memory descriptor of an activation: nChw16c / nChw8c when held blocked.
memory::desc user_desc(const memory::dims& d, tag plain, bool blocked, dt type, int64_t block) {
  return memory::desc(d, type, blocked ? blocked_tag(block) : plain);
}

std::vector<int64_t> plan_key(const Tensor& x, bool x_blocked, const Tensor& w) {
  std::vector<int64_t> k = logical_dims(x, x_blocked);
  k.push_back(-1);
  k.insert(k.end(), w.dims().begin(), w.dims().end());
  return k;
}

void split_key(const std::vector<int64_t>& key, std::vector<int64_t>* x, std::vector<int64_t>* w) {
  const auto sep = std::find(key.begin(), key.end(), -1);
  x->assign(key.begin(), sep);
  w->assign(sep + 1, key.end());
}

// ---- forward: Conv / FusedConv with run-time weights -------------------------------------------

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

StatusOr<std::unique_ptr<Kernel>> make_train_conv(const Node& node, const OpSchema& schema, const Graph& graph) {
  auto k = std::make_unique<TrainConvKernel>(node, graph, schema.kernel);
  if (!k->init(graph)) {
    if (k->amp()) return amp_unsupported(node, "oneDNN's training convolution does not take it (layout or activation)");
    return std::unique_ptr<Kernel>();
  }
  return std::unique_ptr<Kernel>(std::move(k));
}

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
