// oneDNN convolution for Conv and com.ferry.FusedConv (1-D, 2-D, 3-D; groups and depthwise; strides,
// dilations, pads and auto_pad; f32 and bf16). The bias, a residual Z (sum post-op) and the fused
// activation (eltwise post-ops) are applied inside the convolution.
//
// Weights are reordered once into oneDNN's preferred blocked format (format_tag::any) and kept; a
// plan (primitives) is made once per input shape and cached (dnnl_plan_cache.h), so a dynamic batch
// re-plans only for a new shape, and concurrent runs share plans without waiting for each other.
// Channels-last nodes (FusedConv channels_last = 1, made by the nhwc_layout pass; nchw_input = 1: the
// source is still NCHW, reordered in the kernel) run directly on NHWC tensors, which is also the layout oneDNN 2.6 itself picks for them when
// free to choose (format_tag::any gives NHWC brgconv kernels, f32 and bf16); plain NCHW nodes reorder
// in and out of the blocked layout inside the kernel (measured: oneDNN's NCHW convolutions fall back
// to a slow gemm path). f32 3x3 stride-1 convolutions run ferry's own Winograd where channels-last
// with 64+ channels (cpu/winograd.h: F(4x4, 3x3) or F(2x2, 3x3) by shape, WinogradConv3x3::default_tile; see
// use_own_winograd), else oneDNN's on large images at 1 thread (see use_winograd); small outputs
// with large weights run ferry's direct cpu::ConvRows (see use_rows), and so do most of ResNet's 1x1s
// on 2+ images (its pixel-major form, see use_rows_1x1); an
// f32 SiLU is applied after the primitive rather than as its post-op (see act_after_postop;
// cpu::activate_in_place, activation_in_place.h).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>

#include "backends/cpu/activation_in_place.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/conv_rows.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/dnnl_plan_cache.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/node_attrs.h"
#include "backends/cpu/one_thread_rules.h"
#include "backends/cpu/prepacked.h"
#include "backends/cpu/small_gemm.h"
#include "backends/cpu/winograd.h"
#include "backends/packed_weights.h"
#include "backends/shared_forms.h"
#include "common/env_switch.h"
#include "ops/conv_pool_util.h"

namespace ferry {
namespace {

using cpu::NodeAttrs;
using cpu::dnnl_engine;
using cpu::dnnl_stream;
using cpu::wrap;
using dnnl::memory;
using tag = dnnl::memory::format_tag;

class DnnlConvKernel : public Kernel, public PackedWeightsHolder {
 public:
  DnnlConvKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback), forms_(current_shared_forms()) {}

  // oneDNN's blocked forms (one per layout plans asked for), the small_gemm panels, the Winograd
  // and conv_rows forms: each made by the first plan needing it, under the plan cache's lock (read
  // here between runs, as Executor::resident_bytes does).
  int64_t packed_weight_bytes() const override {
    int64_t b = gemv_w_ ? static_cast<int64_t>(gemv_w_->data.size() * sizeof(float)) : 0;
    for (const auto& [desc, mem] : packed_) b += static_cast<int64_t>(desc.get_size());
    if (winograd_) b += winograd_->packed_bytes();
    if (rows_) b += rows_->packed_bytes();
    return b;
  }

  // The graph's copy of the weights (input 1) may go once this kernel holds oneDNN's packed form of
  // them and no form it cannot invert (Winograd's transformed weights, ConvRows' panels): w_ then
  // becomes a deferred tensor (ir/tensor.h) that reorders the packed form back into the plain
  // weights (exact: a permutation) only if a later plan or the fallback reads them.
  bool release_constant_input(size_t i) override {
    if (i != 1 || released_ || packed_.empty() || winograd_ || rows_) return false;
    memory::data_type dt;
    if (!cpu::to_dnnl_type(dtype_, &dt)) return false;
    const memory::dims wd = weight_dims();
    const tag t = group_ > 1 ? (wd.size() == 4 ? tag::goiw : wd.size() == 5 ? tag::goihw : tag::goidhw)
                             : (wd.size() == 3 ? tag::oiw : wd.size() == 4 ? tag::oihw : tag::oidhw);
    auto bytes = std::make_shared<ReorderedBack>(packed_.front().second, memory::desc(wd, dt, t), dtype_, w_.dims());
    w_ = Tensor::deferred(dtype_, w_.dims(), std::move(bytes));
    released_ = true;
    return true;
  }

  // Reads the node; false when the fast path does not cover it.
  bool init(const Graph& graph) {
    const Tensor* w = cpu::constant_input(graph, node_, 1);
    if (!w || w->rank() < 3 || w->rank() > 5) return false;
    dtype_ = w->dtype();
    if (dtype_ != DType::kF32 && dtype_ != DType::kBF16) return false;
    w_ = *w;
    w_source_ = w;
    if (node_.inputs.size() > 2 && !node_.inputs[2].empty()) {
      const Tensor* b = cpu::constant_input(graph, node_, 2);
      if (!b || (b->dtype() != DType::kF32 && b->dtype() != DType::kBF16) || b->numel() != w->dim(0)) return false;
      b_ = *b;
      b_source_ = b;
    }
    has_z_ = node_.inputs.size() > 3 && !node_.inputs[3].empty();
    if (!cpu::node_activation(node_, &act_)) return false;
    NodeAttrs attrs(node_);
    channels_last_ = attrs.get_int("channels_last", 0) != 0;
    nchw_input_ = channels_last_ && attrs.get_int("nchw_input", 0) != 0;
    group_ = attrs.get_int("group", 1);
    const std::vector<int64_t> kernel(w->dims().begin() + 2, w->dims().end());
    if (!read_spatial_attrs(attrs, w->rank() - 2, &kernel, true, &attrs_).is_ok()) return false;
    if (group_ < 1 || w->dim(0) % group_ != 0) return false;
    // A 1x1 convolution on a 1x1 image (squeeze-excitation's two FCs after a global pool) is a
    // [N, Cin] x [Cin, Cout] product of a few rows: oneDNN's per-call cost (descriptors, scratch,
    // stream) is several times the product itself, so it runs as cpu::small_gemm on the weights
    // packed by the first plan that takes this path (Plan::gemv; most 1x1 convolutions never do).
    gemv_ok_ = dtype_ == DType::kF32 && group_ == 1 &&
               std::all_of(kernel.begin(), kernel.end(), [](int64_t k) { return k == 1; });
    // Plan now for the shape known at load (packs the weights once); later shapes plan on first use.
    std::vector<int64_t> x_dims;
    if (cpu::static_dims(graph, node_.inputs[0], &x_dims)) {
      std::optional<SingleThreadScope> one;
      if (one_thread_depthwise(x_dims)) one.emplace();
      auto p = plans_.get(plan_key(x_dims), [this](const std::vector<int64_t>& k, Plan* plan) { return make_plan(dims_of(k), plan); });
      if (!p.is_ok()) return false;
    }
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != dtype_ || x.rank() != w_.rank()) return fallback(ctx);
    std::optional<SingleThreadScope> one;  // its plan is then keyed and made for one thread
    if (one_thread_depthwise(x.dims())) one.emplace();
    auto plan = plans_.get(plan_key(x.dims()), [this](const std::vector<int64_t>& k, Plan* p) { return make_plan(dims_of(k), p); });
    if (!plan.is_ok()) return fallback(ctx);
    const Plan* p = plan.value();
    if (has_z_ && (ctx.input(3).dims() != p->out_dims || ctx.input(3).dtype() != dtype_)) return fallback(ctx);
    if (p->own_winograd) {  // y = act(conv(x) + bias + z) in one pass of cpu::WinogradConv3x3
      ASSIGN_OR_RETURN(Tensor * y, has_z_ ? ctx.allocate_output_over(0, 3, dtype_, p->out_dims)
                                          : ctx.allocate_output(0, dtype_, p->out_dims, false));
      const Status st = winograd_->run(p->winograd, x.data<float>(), has_z_ ? ctx.input(3).data<float>() : nullptr,
                                       y->mutable_data<float>(), act_.kind == ActKind::kRelu);
      return st.is_ok() ? st : internal_error(node_.describe() + ": " + st.message());
    }
    if (p->rows) {  // y = act(conv(x) + bias + z) by cpu::ConvRows (see use_rows)
      ASSIGN_OR_RETURN(Tensor * y, has_z_ ? ctx.allocate_output_over(0, 3, dtype_, p->out_dims)
                                          : ctx.allocate_output(0, dtype_, p->out_dims, false));
      rows_->run(x.data<float>(), x.dim(0), x.dim(1), x.dim(2), has_z_ ? ctx.input(3).data<float>() : nullptr,
                 y->mutable_data<float>(), act_.kind == ActKind::kRelu);
      return Status::ok();
    }
    if (p->gemv) {  // [N, Cin] x [Cin, Cout] + bias, then the activation (no residual: see make_plan)
      ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype_, p->out_dims, false));
      const int64_t rows = x.dim(0), cout = w_.dim(0);
      float* yp = y->mutable_data<float>();
      cpu::small_gemm(rows, x.data<float>(), w_.dim(1), *gemv_w_, b_.defined() ? b_.data<float>() : nullptr, yp, cout);
      cpu::activate_in_place(yp, rows * cout, act_.kind, act_.alpha, act_.beta);
      return Status::ok();
    }
    // The sum post-op adds what dst holds: dst may be the residual's own buffer when nothing reads
    // it later (the memory plan decides), which saves copying it.
    ASSIGN_OR_RETURN(Tensor * y, has_z_ ? ctx.allocate_output_over(0, 3, dtype_, p->out_dims)
                                        : ctx.allocate_output(0, dtype_, p->out_dims, false));
    if (!p->reorder_src && !p->reorder_dst) {  // channels-last nodes: the primitive alone
      const auto run_primitives = [&] {
        if (has_z_) {
          const Tensor& z = ctx.input(3);
          if (z.raw() != y->raw()) std::memcpy(y->mutable_raw(), z.raw(), static_cast<size_t>(z.nbytes()));
        }
        BoundArgs& a = bound_args(*p);
        a.src.set_data_handle(const_cast<void*>(x.raw()));
        a.dst.set_data_handle(y->mutable_raw());
        if (a.scratch_bytes) a.scratch.set_data_handle(cpu::scratch_data(a.scratch_bytes, cpu::ScratchSlot::kScratchpad));
        const BoundArgs::Weights w(a, *p->weights);
        p->conv.execute(dnnl_stream(), a.args);
        dnnl_stream().wait();
      };
      RETURN_IF_ERROR(cpu::dnnl_call(node_, run_primitives));
      apply_act_after(*p, y);
      return Status::ok();
    }
    const auto run_primitives = [&] {
      dnnl::stream& s = dnnl_stream();
      memory src = wrap(p->user_src, x);
      if (p->reorder_src) {
        memory buf = cpu::scratch_memory(p->conv_pd.src_desc(), cpu::ScratchSlot::kSrc);
        p->to_internal.execute(s, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, buf}});
        src = buf;
      }
      memory dst = p->reorder_dst ? cpu::scratch_memory(p->conv_pd.dst_desc(), cpu::ScratchSlot::kDst) : wrap(p->user_dst, *y);
      if (has_z_) {  // the sum post-op adds what dst holds
        const Tensor& z = ctx.input(3);
        if (p->reorder_dst) p->z_to_internal.execute(s, {{DNNL_ARG_FROM, wrap(p->user_dst, z)}, {DNNL_ARG_TO, dst}});
        else if (z.raw() != y->raw()) std::memcpy(y->mutable_raw(), z.raw(), static_cast<size_t>(z.nbytes()));
      }
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, *p->weights}, {DNNL_ARG_DST, dst},
          {DNNL_ARG_SCRATCHPAD, cpu::scratch_memory(p->conv_pd.scratchpad_desc(), cpu::ScratchSlot::kScratchpad)}};
      if (b_.defined()) args[DNNL_ARG_BIAS] = wrap(p->bias_md, b_);
      p->conv.execute(s, args);
      if (p->reorder_dst) p->to_user.execute(s, {{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, wrap(p->user_dst, *y)}});
      s.wait();
    };
    RETURN_IF_ERROR(cpu::dnnl_call(node_, run_primitives));
    apply_act_after(*p, y);
    return Status::ok();
  }

 private:
  // Immutable once made (shared by concurrent runs); the buffers a run writes are its thread's scratch.
  struct Plan {
    dnnl::convolution_forward::primitive_desc conv_pd;
    dnnl::convolution_forward conv;
    memory::desc user_src, user_dst, bias_md;
    bool reorder_src = false, reorder_dst = false;
    bool gemv = false;  // computed by cpu::small_gemm on gemv_w_ instead of the primitives
    bool own_winograd = false;  // computed by winograd_ (cpu/winograd.h) instead of the primitives
    bool rows = false;          // computed by rows_ (cpu/conv_rows.h) instead of the primitives
    cpu::WinogradConv3x3::Plan winograd;
    bool act_after = false;  // the activation runs after the primitive (activate_in_place), not as a post-op
    uint64_t id = 0;         // unique in the process (bound_args' key)
    dnnl::reorder to_internal, to_user, z_to_internal;
    const memory* weights = nullptr;
    std::vector<int64_t> out_dims;
  };
  // A plan's oneDNN memory objects and argument map, made once per thread and plan and re-pointed
  // at each call's buffers (set_data_handle), for plans without layout changes: creating four memory
  // objects and the map took about 1.5 us a call here (a loaded machine), against a few ns to
  // re-point them, on convolutions of 20-500 us (EfficientNet-B0 b1 runs 81 of them).
  struct BoundArgs {
    memory src, dst, scratch;
    size_t scratch_bytes = 0;
    std::unordered_map<int, memory> args;
    // Points args' weights entry at `w` for one call, and empties it again.
    struct Weights {
      memory& slot;
      Weights(BoundArgs& a, const memory& w) : slot(a.args.at(DNNL_ARG_WEIGHTS)) { slot = w; }
      ~Weights() { slot = memory(); }
    };
  };
  BoundArgs& bound_args(const Plan& p) {
    // Keyed by the plan's process-unique id (a plan's address may be reused by a later kernel).
    thread_local std::unordered_map<uint64_t, BoundArgs> cache;
    auto it = cache.find(p.id);
    if (it != cache.end()) return it->second;
    if (cache.size() >= 1024) cache.clear();  // bounded across models loaded and dropped
    BoundArgs a;
    a.src = memory(p.user_src, dnnl_engine(), nullptr);
    a.dst = memory(p.user_dst, dnnl_engine(), nullptr);
    const memory::desc sd = p.conv_pd.scratchpad_desc();
    a.scratch_bytes = sd.get_size();
    a.scratch = memory(sd, dnnl_engine(), nullptr);
    // The weights slot holds the plan's packed weights only during a call (BoundArgs::weights), so a
    // dropped kernel's weights are not kept alive by this cache.
    a.args = {{DNNL_ARG_SRC, a.src}, {DNNL_ARG_WEIGHTS, memory()}, {DNNL_ARG_DST, a.dst}, {DNNL_ARG_SCRATCHPAD, a.scratch}};
    if (b_.defined()) a.args[DNNL_ARG_BIAS] = memory(p.bias_md, dnnl_engine(), const_cast<void*>(b_.raw()));
    return cache.emplace(p.id, std::move(a)).first->second;
  }

  void apply_act_after(const Plan& p, Tensor* y) const {
    if (!p.act_after) return;
    float* yp = y->mutable_data<float>();
    parallel_ranges(y->numel(), 32, [&](int64_t b, int64_t e) { cpu::activate_in_place(yp + b, e - b, act_.kind, act_.alpha, act_.beta); });
  }

  bool gemv_ok_ = false;      // f32, ungrouped, 1x1 kernel: a plan may take the small-GEMM path
  std::shared_ptr<const cpu::PanelMatrix> gemv_w_;  // its weights as [Cin, Cout] panels, packed by the first such plan

  // A plan is made for the intra-op threads of the call that makes it (oneDNN primitives and the
  // Winograd plan split their work for that many): the key is x's dims and the thread count, so a
  // batch split's parts run side by side on one thread each (runtime/batch_split_parts.h) do not
  // hand their one-thread plans to whole-batch runs of the same shape, nor take theirs.
  static std::vector<int64_t> plan_key(const std::vector<int64_t>& x_dims) {
    std::vector<int64_t> key = x_dims;
    key.push_back(omp_in_parallel() ? 1 : omp_get_max_threads());
    return key;
  }
  static std::vector<int64_t> dims_of(const std::vector<int64_t>& key) { return {key.begin(), key.end() - 1}; }

  Status make_plan(const std::vector<int64_t>& x_dims, Plan* plan) {
    const int64_t nd = w_.rank() - 2;
    std::vector<int64_t> xd = x_dims;  // logical N, C, spatial...
    if (channels_last_ && !nchw_input_) {
      xd = {x_dims[0], x_dims.back()};
      xd.insert(xd.end(), x_dims.begin() + 1, x_dims.end() - 1);
    }
    if (xd[1] != w_.dim(1) * group_) return unsupported("channel mismatch");
    NodeAttrs attrs(node_);
    memory::dims strides, dilations, pad_l, pad_r;
    std::vector<int64_t> yd = {xd[0], w_.dim(0)};
    for (int64_t i = 0; i < nd; ++i) {
      AxisGeom g;
      RETURN_IF_ERROR(conv_pool_axis(attrs, attrs_, i, xd[2 + i], &g));
      if (g.pad_begin < 0 || g.pad_end < 0 || g.out <= 0) return unsupported("geometry");
      yd.push_back(g.out);
      strides.push_back(attrs_.strides[i]);
      dilations.push_back(attrs_.dilations[i] - 1);
      pad_l.push_back(g.pad_begin);
      pad_r.push_back(g.pad_end);
    }
    if (use_own_winograd(xd, yd, pad_l, pad_r)) {
      if (!winograd_)  // made once, under the plan cache's lock, like the packed weights
        winograd_ = shared_form<cpu::WinogradConv3x3>("winograd", "", [&] {
          return std::make_shared<cpu::WinogradConv3x3>(w_.data<float>(), b_.defined() ? b_.data<float>() : nullptr,
                                                        w_.dim(0), w_.dim(1));
        });
      if (winograd_->make_plan(xd[0], xd[2], xd[3], &plan->winograd).is_ok()) {
        plan->own_winograd = true;
        plan->out_dims = {yd[0], yd[2], yd[3], yd[1]};
        return Status::ok();
      }  // no matmul for this shape: oneDNN's direct kernel below
    }
    if (use_rows(xd, yd, pad_l, pad_r) || use_rows_1x1(xd, yd, pad_l, pad_r)) {
      if (!rows_) {  // made once, under the plan cache's lock, like the packed weights
        const std::string geometry = std::to_string(attrs_.strides[0]) + "," + std::to_string(attrs_.strides[1]) + "," +
                                     std::to_string(pad_l[0]) + "," + std::to_string(pad_l[1]);
        rows_ = shared_form<cpu::ConvRows>("conv_rows", geometry, [&] {
          return std::make_shared<cpu::ConvRows>(w_.data<float>(), b_.defined() ? b_.data<float>() : nullptr, w_.dim(0),
                                                 w_.dim(1), w_.dim(2), w_.dim(3), attrs_.strides[0], attrs_.strides[1],
                                                 pad_l[0], pad_l[1]);
        });
      }
      plan->rows = true;
      plan->out_dims = {yd[0], yd[2], yd[3], yd[1]};
      return Status::ok();
    }
    // A 1x1 convolution on one pixel runs as cpu::small_gemm on gemv_w_ (see init), without the
    // primitives: making them would pack oneDNN's form of the weights, unused beside the panels (and
    // have `ferry compile` store the weights only in that form, to be unpacked at every load).
    const auto all_zero = [](const memory::dims& v) { return std::all_of(v.begin(), v.end(), [](int64_t d) { return d == 0; }); };
    const auto all_one = [](auto b, auto e) { return std::all_of(b, e, [](int64_t d) { return d == 1; }); };
    if (gemv_ok_ && !has_z_ && (!b_.defined() || b_.dtype() == DType::kF32) && all_one(xd.begin() + 2, xd.end()) &&
        all_one(yd.begin() + 2, yd.end()) && all_zero(pad_l) && all_zero(pad_r)) {
      dnnl::post_ops ops;  // the activations the primitive path takes (activate_in_place runs them here)
      if (!act_after_postop() && !cpu::append_activation(act_, &ops)) return unsupported("activation");
      plan->gemv = true;
      // Packed once, under the plan cache's lock; runs read it only through a plan made after this.
      if (!gemv_w_)
        gemv_w_ = shared_form<const cpu::PanelMatrix>("conv_panels", "", [&] {
          return std::make_shared<const cpu::PanelMatrix>(cpu::pack_panels(w_.dim(1), w_.dim(0), w_.data<float>(), 1, w_.dim(1)));
        });
      return finish_plan(yd, plan);
    }
    const auto plan_primitives = [&] {
      memory::data_type dt;
      cpu::to_dnnl_type(dtype_, &dt);
      const tag io_tag = cpu::plain_tag(xd.size(), channels_last_);
      // nchw_input: the layout change into the region is the src reorder (oneDNN's jit reorder).
      plan->user_src = memory::desc(cpu::to_dnnl_dims(xd), dt, nchw_input_ ? cpu::plain_tag(xd.size()) : io_tag);
      plan->user_dst = memory::desc(cpu::to_dnnl_dims(yd), dt, io_tag);
      const memory::desc src_any(cpu::to_dnnl_dims(xd), dt, channels_last_ ? io_tag : tag::any);
      const memory::desc dst_any(cpu::to_dnnl_dims(yd), dt, channels_last_ ? io_tag : tag::any);
      const memory::desc w_any(weight_dims(), dt, tag::any);
      dnnl::post_ops ops;
      if (has_z_) ops.append_sum(1.f);
      plan->act_after = act_after_postop();
      if (!plan->act_after && !cpu::append_activation(act_, &ops)) return unsupported("activation");
      dnnl::primitive_attr attr = cpu::concurrent_attr();
      attr.set_post_ops(ops);
      if (b_.defined()) {
        memory::data_type bt;
        cpu::to_dnnl_type(b_.dtype(), &bt);
        plan->bias_md = memory::desc({w_.dim(0)}, bt, tag::x);
      }
      const auto make_pd = [&](dnnl::algorithm alg, const memory::desc& src, const memory::desc& dst) {
        const auto d = b_.defined() ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src, w_any,
                                                                      plan->bias_md, dst, strides, dilations, pad_l, pad_r)
                                    : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src, w_any,
                                                                      dst, strides, dilations, pad_l, pad_r);
        return dnnl::convolution_forward::primitive_desc(d, attr, dnnl_engine());
      };
      // Winograd in blocked layouts: the reorders around it are part of the measured gain.
      cpu::make_winograd_or_direct(use_winograd(xd, yd), [&](dnnl::algorithm alg) {
        plan->conv_pd = alg == dnnl::algorithm::convolution_winograd
                            ? make_pd(alg, memory::desc(src_any.dims(), dt, tag::any), memory::desc(dst_any.dims(), dt, tag::any))
                            : make_pd(alg, src_any, dst_any);
      });
      const auto& pd = plan->conv_pd;
      plan->conv = dnnl::convolution_forward(pd);
      plan->reorder_src = pd.src_desc() != plan->user_src;
      plan->reorder_dst = pd.dst_desc() != plan->user_dst;
      const auto reorder = [](const memory::desc& from, const memory::desc& to) {
        return dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_engine(), from, dnnl_engine(), to));
      };
      if (plan->reorder_src) plan->to_internal = reorder(plan->user_src, pd.src_desc());
      if (plan->reorder_dst) {
        plan->to_user = reorder(pd.dst_desc(), plan->user_dst);
        if (has_z_) plan->z_to_internal = reorder(plan->user_dst, pd.dst_desc());
      }
      plan->weights = packed_weights(pd.weights_desc(), dt);
      return Status::ok();
    };
    RETURN_IF_ERROR(cpu::dnnl_call(node_, plan_primitives));
    return finish_plan(yd, plan);
  }

  // The plan's id and output dims (channels-last: NHWC).
  Status finish_plan(const std::vector<int64_t>& yd, Plan* plan) {
    static std::atomic<uint64_t> next_id{1};
    plan->id = next_id.fetch_add(1, std::memory_order_relaxed);
    plan->out_dims = yd;
    if (channels_last_) {
      plan->out_dims = {yd[0]};
      plan->out_dims.insert(plan->out_dims.end(), yd.begin() + 2, yd.end());
      plan->out_dims.push_back(yd[1]);
    }
    return Status::ok();
  }

  // Depthwise convolutions on small images run on one thread (one_thread_rules.h; issue 22,
  // engineer D: this function and its two calls are the whole change in this file).
  bool one_thread_depthwise(const std::vector<int64_t>& x_dims) const {
    if (group_ <= 1 || w_.dim(1) != 1) return false;
    int64_t bytes = dtype_size(dtype_);
    for (int64_t d : x_dims) bytes *= d;
    return cpu::depthwise_on_one_thread(bytes);
  }

  // Winograd F(4x4 or 2x2, 3x3) for f32 3x3 stride-1 convolutions on large images. Measured here
  // (1 thread, reorders from and back to NHWC included) against the direct NHWC kernel: 1.3-2.4x
  // faster from 24x24 outputs with 32+ input channels and up to 128 channels on the smaller side
  // (ResNet-50 layer1/2, UNet); slower with 16 input channels or with 256+ channels on 14x14, even
  // at 256 channels on 24x24. Its rounding differs from the direct kernel's by ~1e-6 relative.
  // FERRY_CONV_WINOGRAD=0 turns it off (to compare), =dnnl keeps only oneDNN's, =own only ferry's.
  //
  // On more than one thread it is used only when asked for (FERRY_CONV_WINOGRAD=dnnl): there the
  // direct kernel, or ferry's own Winograd where use_own_winograd takes the shape, came out faster.
  // bench/ab_vs_ort.py, 2 threads, this rule against the previous build interleaved with ORT, load
  // average 1.0-1.6 from other work on the 2 cores (p50 median over 4-5 rounds, ratio to ORT): UNet
  // b1 4.57 -> 3.45 ms (1.22 -> 0.94, 5 of 5 rounds), UNet b8 25.9 -> 23.8 ms (0.90 -> 0.84, 5 of 5),
  // ResNet-50 b1 19.7 -> 19.7 ms (0.95 -> 0.92), b8 138.6 -> 141.3 ms (0.97 -> 0.99, 2 of 4: noise).
  // `ferry profile -t 2` of UNet b8 had oneDNN's Winograd convolutions barely faster on two threads
  // than on one (32->32 on 48x64: 1.53 -> 1.49 ms per run) while the direct ones scale.
  bool use_winograd(const std::vector<int64_t>& xd, const std::vector<int64_t>& yd) const {
    if (!winograd_mode().dnnl || !winograd_shape()) return false;
    if (!winograd_mode().dnnl_forced && omp_get_max_threads() > 1) return false;
    return yd[2] * yd[3] >= 24 * 24 && xd[1] >= 32 && yd[1] >= 16 && std::min(xd[1], yd[1]) <= 128;
  }
  struct WinogradMode {
    bool dnnl = true, own = true, dnnl_forced = false;
  };
  static WinogradMode winograd_mode() {
    static const WinogradMode mode = [] {
      const char* e = env_value("FERRY_CONV_WINOGRAD");
      const std::string v = e ? e : "";
      return WinogradMode{v != "0" && v != "own", v != "0" && v != "dnnl", v == "dnnl"};
    }();
    return mode;
  }
  // f32, ungrouped, 2-D 3x3, stride 1, dilation 1.
  bool winograd_shape() const {
    if (dtype_ != DType::kF32 || group_ != 1 || w_.rank() != 4 || w_.dim(2) != 3 || w_.dim(3) != 3) return false;
    for (size_t i = 0; i < 2; ++i)
      if (attrs_.strides[i] != 1 || attrs_.dilations[i] != 1) return false;
    return true;
  }
  // ferry's own Winograd (cpu/winograd.h: NHWC, pads 1, bias / residual / ReLU fused) where oneDNN's
  // is not used: the small images of deep layers. Measured against the direct NHWC kernel
  // (test_cpu_winograd DISABLED_Timing, 1 thread, n x h x w cin->cout): up to 256x256 channels it wins
  // from 4 tiles of 2x2 (1x4x4 256->256 1.31x, 1x6x8 256->256 1.77x, 1x12x16 384->128 1.60x, 1x14x14
  // 256->256 1.9-2.0x, 8x14x14 1.6-1.8x) and loses on one tile (1x2x2 0.50x); with 512x512 channels
  // the transformed weights (16.8 MB) dominate on few tiles: 1x7x7 (16 tiles) 0.61-0.73x, 2x7x7 0.95x,
  // 1x14x14 (49) 1.26x, 4x7x7 (64) 1.14x, 8x7x7 1.15-1.26x.
  bool use_own_winograd(const std::vector<int64_t>& xd, const std::vector<int64_t>& yd, const memory::dims& pad_l,
                        const memory::dims& pad_r) const {
    if (!winograd_mode().own || !winograd_shape() || !channels_last_ || nchw_input_) return false;
    if (b_.defined() && b_.dtype() != DType::kF32) return false;
    if (act_.kind != ActKind::kNone && act_.kind != ActKind::kRelu) return false;
    for (size_t i = 0; i < 2; ++i)
      if (pad_l[i] != 1 || pad_r[i] != 1) return false;
    const int64_t tiles = xd[0] * ((xd[2] + 1) / 2) * ((xd[3] + 1) / 2);
    if (std::min(xd[1], yd[1]) < 64 || tiles < (xd[1] * yd[1] <= 256 * 256 ? 4 : 48)) return false;
    // Where its F(4x4, 3x3) applies it also beats oneDNN's Winograd (its reorders included), 1 thread,
    // best of 3, load 5 on 2 cores: 1x56x56 64->64 0.89-0.94 ms against 1.41-1.61 (jit_fp32_wino_2x3),
    // 1x28x28 128->128 0.65-0.88 against 0.88-1.19, 2x28x28 1.68 against 2.33 (jit_wino_4x3).
    // FERRY_WINOGRAD_TILE=2 (F(2x2) only) gives those shapes back to oneDNN's.
    const bool tile4 = cpu::WinogradConv3x3::default_tile(xd[1], yd[1], xd[0], xd[2], xd[3]) == 4;
    return tile4 || !use_winograd(xd, yd);
  }

  // cpu::ConvRows (one sequential pass over panel-packed weights, each panel reused from L2 by every
  // block of 7 output pixels) for outputs of at most 49 pixels with 4+ MB of weights at 1 thread:
  // ResNet-50 b1's layer4 (7x7 outputs, 4.2-9.4 MB of weights per node, read from DRAM each run),
  // where oneDNN 2.6's brgconv runs 1.2-1.5x slower with cold caches than hot. FERRY_CONV_ROWS=0
  // turns it off. Alone (bench/conv_prefetch_probe.cpp, 1 thread, p50 of 15-25 interleaved calls,
  // caches flushed before each, load 3.9-4.4 on 2 cores), oneDNN -> ConvRows: 1x7x7 3x3 512->512
  // 1.46-1.55 -> 1.28-1.31 ms (hot 1.15-1.16), 1x14x14 3x3 s2 512->512 1.98 -> 1.61 (before the
  // padding taps were skipped), 1x7x7 1x1 512->2048 0.67 -> 0.60, 2048->512 0.64 -> 0.61, 1x14x14
  // 1x1 s2 1024->2048 1.24 -> 1.24; 1x14x14 1x1 1024->512 (2.1 MB, 196 pixels: not taken) 1.00 ->
  // 1.09. ResNet-50 b1 (`ferry profile -t 1`, per-run CPU ms, median of 4 interleaved rounds, load
  // 3.9-4.0): layer4's three 3x3s 5.52 -> 4.42, its six 7x7 1x1s 6.15 -> 5.98 (load 2.2-3.0).
  // Not taken, measured: 14x14 1x1s (1 MB) alone 0.60-0.73 -> 0.68-0.77 ms cold; layer3.0's
  // projection (28x28 512->1024 stride 2, 2.1 MB) alone 1.87 -> 1.40 ms cold but in the model
  // (`ferry profile`, 4 rounds) 1.165 -> 1.15 ms (oneDNN's runs faster there than alone).
  // Batch 8 does not take it (but see strided_kxk_any_pixels). With several threads each thread takes
  // a range of the 64-channel panels (use_rows_1x1's form: a range of the pixel blocks); on by default
  // since ResNet-50 at 2 threads measured faster with it (`/tmp/c/ab2.sh`: `ferry bench -t 2
  // --duration 1.5|2 --json`, FERRY_CONV_ROWS=1 and =2 alternated, runs pooled, load 5-6 on the 2
  // cores, so wall times 2-4x the quiet ones): b1 faster in 8 of 8 rounds (wall p50 per round 82.5 ->
  // 82.4, 89 -> 78, 85 -> 68, 103 -> 87, 93 -> 82, 65 -> 36, 66 -> 62, 74 -> 63 ms; CPU p25 42.5 ->
  // 37.8), b8 in 5 of 6 (CPU p25 320 -> 312, p50 338 -> 316). FERRY_CONV_ROWS=1 keeps both to 1
  // thread (as before), =0 turns ConvRows off. The other bench models never take it (outputs
  // bit-identical with =1 and =2 at 2 threads: MobileNetV2, EfficientNet-B0, UNet, b1 and b8).
  bool use_rows(const std::vector<int64_t>& xd, const std::vector<int64_t>& yd, const memory::dims& pad_l,
                const memory::dims& pad_r) const {
    static const int mode = [] {  // 0 off, 1 at 1 thread only, 2 also with several threads (default)
      const char* e = env_value("FERRY_CONV_ROWS");
      return e ? std::atoi(e) : 2;
    }();
    if (mode <= 0 || dtype_ != DType::kF32 || group_ != 1 || w_.rank() != 4 || !channels_last_ || nchw_input_) return false;
    if (b_.defined() && b_.dtype() != DType::kF32) return false;
    if (act_.kind != ActKind::kNone && act_.kind != ActKind::kRelu) return false;
    if (omp_in_parallel() || (omp_get_max_threads() != 1 && mode < 2) || !cpu::ConvRows::available()) return false;
    if (w_.dim(0) % 64 != 0 || w_.numel() * 4 < (int64_t{4} << 20)) return false;
    if (yd[0] * yd[2] * yd[3] > 49 && !strided_kxk_any_pixels()) return false;
    for (size_t i = 0; i < 2; ++i)
      if (attrs_.dilations[i] != 1 || pad_l[i] != pad_r[i]) return false;
    return (xd[2] + 2 * pad_l[0] - w_.dim(2)) / attrs_.strides[0] + 1 == yd[2] &&
           (xd[3] + 2 * pad_l[1] - w_.dim(3)) / attrs_.strides[1] + 1 == yd[3];
  }

  // Strided KxK convolutions with 4+ MB of weights take ConvRows at any output size (use_rows), not
  // only up to 49 pixels: ResNet-50 b8's layer4.0 conv2 (3x3 stride 2, 8x14x14 512->512, 9.4 MB) runs
  // there at 216 GFLOP/s hot and cold alike, oneDNN's brgconv at 194-216 hot and 170 with its weights
  // cold (/tmp copy of bench/conv_prefetch_probe.cpp, 1 thread, p50 of 11, load 4: 10.88 -> 8.67 ms
  // cold). Not for the smaller strided 3x3s (2x28x28 256->256 s2, 2.4 MB: 2.20 -> 2.32 ms cold;
  // 2x56x56 128->128 s2: 2.26 -> 2.56). FERRY_CONV_ROWS_S2=0 keeps the 49-pixel limit for them.
  bool strided_kxk_any_pixels() const {
    static const bool enabled = [] {
      const char* e = env_value("FERRY_CONV_ROWS_S2");
      return !(e && std::string(e) == "0");
    }();
    return enabled && (w_.dim(2) > 1 || w_.dim(3) > 1) && (attrs_.strides[0] > 1 || attrs_.strides[1] > 1);
  }

  // cpu::ConvRows' pixel-major 1x1 form (conv_rows.h pixel_major: every 64-channel panel of an
  // L2-sized chunk per block of 7 output pixels, accumulators started from the bias, the residual and
  // ReLU applied before the one store of y). Taken for: on 2+ images (a batch, or a batch split's
  // parts) every expanding 1x1 with a residual (ResNet's conv3s: oneDNN 2.6's brgconv_1x1 with its sum
  // post-op ran them at 130-150 GFLOP/s in the model; not MobileNetV2's / EfficientNet-B0's narrowing
  // ones with a residual: 384->64 on 8x14x14 0.35 -> 0.38 ms, 1152->192 on 8x7x7 0.81 -> 0.87 ms per
  // run, 3 interleaved rounds), strided 1x1s (the projections) and 1x1s from 2048
  // channels; on any batch 1x1 expansions from at most 64 channels to 4x as many (layer1's conv3 and
  // projection) and strided 1x1s from 512 channels (layer3.0's projection). Measured in the model,
  // ResNet-50 b8 1 thread (`FERRY_CONV_ROWS_1X1=0|1|all build/ferry profile -t 1 -b 8 --top 0
  // --duration 3`, per-node CPU ms per run, min of 3 interleaved rounds, load 5.7-6.8 on 2 cores,
  // ConvRows / oneDNN): conv3s with the residual 0.70-0.75 (layer1, layer2), 0.82-0.94 (layer3),
  // 0.87-0.89 (layer4); projections 0.64 (layer3.0), 0.87 (layer4.0), 0.91 (layer2.0); 2048->512
  // 0.90-0.92; all 1x1s 189.4 -> 166.5 ms per run. Not taken (no faster there): stride-1 1x1s without a
  // residual from 64-1024 channels (256->128 / 256->64 1.02-1.08, 1024->512 1.06, 1024->256 /
  // 512->128 / 512->256 0.98-1.05), and at batch 1 the 14x14 and 28x28 conv3s (1.01-1.13: oneDNN
  // runs them at ~200 GFLOP/s there). Whole model (/tmp/c/ab.sh: `ferry bench -t 1 -b 8 --duration 2
  // --json`, 6 interleaved rounds, runs_cpu_ms pooled, load 6.0-6.5): p25 303.6 -> 277.4 ms, min
  // 281.9 -> 257.3. /tmp probe alone (hot caches): 2x56x56 64->256 0.85-0.95x oneDNN's time, 1x28x28
  // 512->1024 s2 0.68-0.69x. Like use_rows also at several threads (pixel blocks split over them;
  // FERRY_CONV_ROWS=1: 1 thread only); FERRY_CONV_ROWS_1X1=0 turns it off, =all takes every 1x1 it
  // can run (to measure shapes).
  bool use_rows_1x1(const std::vector<int64_t>& xd, const std::vector<int64_t>& yd, const memory::dims& pad_l,
                    const memory::dims& pad_r) const {
    static const bool enabled = [] {
      const char* e = env_value("FERRY_CONV_ROWS_1X1");
      const char* r = env_value("FERRY_CONV_ROWS");
      return !(e && std::string(e) == "0") && !(r && std::atoi(r) <= 0);
    }();
    static const bool threads_ok = [] {
      const char* r = env_value("FERRY_CONV_ROWS");
      return !r || std::atoi(r) >= 2;
    }();
    if (!enabled || dtype_ != DType::kF32 || group_ != 1 || w_.rank() != 4 || !channels_last_ || nchw_input_) return false;
    if (w_.dim(2) != 1 || w_.dim(3) != 1 || (b_.defined() && b_.dtype() != DType::kF32)) return false;
    if (act_.kind != ActKind::kNone && act_.kind != ActKind::kRelu) return false;
    if ((!omp_in_parallel() && omp_get_max_threads() != 1 && !threads_ok) || !cpu::ConvRows::available()) return false;
    const int64_t cin = w_.dim(1), cout = w_.dim(0);
    if (cout % 64 != 0 || cin > 2048) return false;
    static const bool all = [] {  // FERRY_CONV_ROWS_1X1=all: every 1x1 it can run (to measure shapes)
      const char* e = env_value("FERRY_CONV_ROWS_1X1");
      return e && std::string(e) == "all";
    }();
    const bool strided = attrs_.strides[0] > 1 || attrs_.strides[1] > 1;
    const bool expand = cin <= 64 && cout >= 4 * cin && cin * cout * 4 <= cpu::ConvRows::kPixelMajorWeightBytes;
    const bool batched = xd[0] >= 2 && ((has_z_ && cout >= 2 * cin) || strided || cin >= 2048);
    if (!expand && !(strided && cin == 512) && !batched && !all) return false;
    for (size_t i = 0; i < 2; ++i)
      if (attrs_.dilations[i] != 1 || pad_l[i] != 0 || pad_r[i] != 0) return false;
    return (xd[2] - 1) / attrs_.strides[0] + 1 == yd[2] && (xd[3] - 1) / attrs_.strides[1] + 1 == yd[3];
  }

  // f32 SiLU runs after the primitive, as one vectorized pass over the output (activate_in_place,
  // split over the threads), instead of oneDNN 2.6's eltwise_swish post-op: measured on
  // EfficientNet-B0 (`ferry profile`, per-node minimum over 4 interleaved rounds, a loaded machine),
  // its 33 SiLU convolutions took 8.51 -> 8.19 ms per run at batch 1 on 1 thread, 15.9 -> 14.0 ms
  // on 2 threads, 18.9 -> 16.3 ms at batch 8 (the post-op's switch is gone: issue 39).
  bool act_after_postop() const {
    return dtype_ == DType::kF32 && act_.kind == ActKind::kSilu;
  }

  memory::dims weight_dims() const {
    memory::dims d;
    if (group_ > 1) d = {group_, w_.dim(0) / group_, w_.dim(1)};
    else d = {w_.dim(0), w_.dim(1)};
    d.insert(d.end(), w_.dims().begin() + 2, w_.dims().end());
    return d;
  }

  // A form of the weights and bias (Winograd's, ConvRows', the panels) with `detail` (what else it
  // depends on): from the executors' shared forms, else made here.
  template <class T>
  std::shared_ptr<T> shared_form(const char* kind, const std::string& detail, const std::function<std::shared_ptr<T>()>& make) {
    if (!forms_) return make();
    const std::string bias = b_source_ ? weight_form_key("bias", b_source_) : std::string("no bias");
    return forms_->get<T>(weight_form_key(kind, w_source_, detail + "|" + bias), make);
  }

  // The weights in `want`'s layout, reordered once per distinct layout (called while the plan cache
  // holds its lock). The one place the weights are packed: a pre-packed copy would plug in here.
  const memory* packed_weights(const memory::desc& want, memory::data_type dt) {
    for (auto& [desc, mem] : packed_)
      if (desc == want) return &mem;
    const memory::dims wd = weight_dims();
    const tag t = group_ > 1 ? (wd.size() == 4 ? tag::goiw : wd.size() == 5 ? tag::goihw : tag::goidhw)
                             : (wd.size() == 3 ? tag::oiw : wd.size() == 4 ? tag::oihw : tag::oidhw);
    const auto pack = [&] {
      return std::make_shared<memory>(cpu::packed_weights(node_, "dnnl_conv", want, [&] {  // stored by `ferry compile`, or reordered
        return memory(memory::desc(wd, dt, t), dnnl_engine(), const_cast<void*>(w_.raw()));
      }));
    };
    // A form of the weights alone (no bias): keyed by the layout only.
    const std::shared_ptr<memory> packed = forms_ ? forms_->get<memory>(weight_form_key("dnnl_conv", w_source_, cpu::packed_key("", want)), pack)
                                                  : pack();
    packed_.emplace_back(want, *packed);
    return &packed_.back().second;
  }

  // The plain weights, reordered back from a packed form on first read (release_constant_input).
  class ReorderedBack : public LazyBytes {
   public:
    ReorderedBack(memory packed, memory::desc plain, DType dtype, std::vector<int64_t> dims)
        : packed_(std::move(packed)), plain_(std::move(plain)), dtype_(dtype), dims_(std::move(dims)) {}

   protected:
    std::shared_ptr<const void> make() override {
      auto w = std::make_shared<Tensor>(Tensor::allocate(dtype_, dims_));
      memory user(plain_, dnnl_engine(), w->mutable_raw());
      dnnl::reorder(packed_, user).execute(dnnl_stream(), packed_, user);  // same dims and type: cannot fail
      dnnl_stream().wait();
      const void* data = w->raw();
      return std::shared_ptr<const void>(std::move(w), data);
    }

   private:
    memory packed_;
    memory::desc plain_;
    DType dtype_;
    std::vector<int64_t> dims_;
  };

  // The reference kernel (shapes or types this kernel does not take), given the weights back when
  // the graph's copy was released.
  Status fallback(KernelContext& ctx) {
    if (!released_ || ctx.has_input(1)) return fallback_(ctx);
    return run_fallback_with_input(fallback_, ctx, 1, Value(w_));
  }

  Node node_;
  KernelFn fallback_;
  DType dtype_ = DType::kUndefined;
  bool released_ = false;  // the graph's copy of the weights is gone: w_ is deferred (release_constant_input)
  Tensor w_, b_;
  bool has_z_ = false, channels_last_ = false, nchw_input_ = false;
  int64_t group_ = 1;
  FusedActivation act_;
  SpatialAttrs attrs_;
  cpu::PlanCache<Plan> plans_;
  std::shared_ptr<cpu::WinogradConv3x3> winograd_;  // made by the first plan that takes that path
  std::shared_ptr<const cpu::ConvRows> rows_;        // the same
  // The executors' shared forms (ExecutorOptions::shared_forms; null: this kernel's own), and the
  // graph's initializers the forms are made from (their keys).
  std::shared_ptr<SharedWeightForms> forms_;
  const Tensor* w_source_ = nullptr;
  const Tensor* b_source_ = nullptr;
  std::list<std::pair<memory::desc, memory>> packed_;  // a list: plans point at its elements
};

StatusOr<std::unique_ptr<Kernel>> make_conv(const Node& node, const OpSchema& schema, const Graph& graph) {
  auto k = std::make_unique<DnnlConvKernel>(node, schema.kernel);
  if (!k->init(graph)) return std::unique_ptr<Kernel>();
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace

void register_cpu_dnnl_conv_kernels(CpuKernelTable& t) {
  t.add("", "Conv", make_conv);
  t.add("com.ferry", "FusedConv", make_conv);
}

}  // namespace ferry
