// oneDNN convolution for Conv and com.ferry.FusedConv (1-D, 2-D, 3-D; groups and depthwise; strides,
// dilations, pads and auto_pad; f32 and bf16). The bias, a residual Z (sum post-op) and the fused
// activation (eltwise post-ops) are applied inside the convolution.
//
// Weights are reordered once into oneDNN's preferred blocked format (format_tag::any) and kept; a
// plan (primitive + buffers) is made once per input shape and cached, so a dynamic batch re-plans
// only for a new shape. Channels-last nodes (FusedConv channels_last = 1, made by the nhwc_layout
// pass) run directly on NHWC tensors; plain NCHW nodes reorder in and out of the blocked layout
// inside the kernel (measured: oneDNN's NCHW convolutions fall back to a slow gemm path).
#include <mutex>
#include <cstring>
#include <list>
#include <map>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/dnnl_util.h"
#include "ops/conv_pool_util.h"

namespace ferry {
namespace {

using cpu::dnnl_engine;
using cpu::dnnl_stream;
using cpu::wrap;
using dnnl::memory;
using tag = dnnl::memory::format_tag;

// AttrReader with the error() the shared conv/pool attribute parsers want.
struct NodeAttrs : AttrReader {
  using AttrReader::AttrReader;
  Status error(const std::string& msg) const { return invalid_model(node().describe() + ": " + msg); }
};

class DnnlConvKernel : public Kernel {
 public:
  DnnlConvKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  // Reads the node; false when the fast path does not cover it.
  bool init(const Graph& graph) {
    const Tensor* w = cpu::constant_input(graph, node_, 1);
    if (!w || w->rank() < 3 || w->rank() > 5) return false;
    dtype_ = w->dtype();
    if (dtype_ != DType::kF32 && dtype_ != DType::kBF16) return false;
    w_ = *w;
    if (node_.inputs.size() > 2 && !node_.inputs[2].empty()) {
      const Tensor* b = cpu::constant_input(graph, node_, 2);
      if (!b || (b->dtype() != DType::kF32 && b->dtype() != DType::kBF16) || b->numel() != w->dim(0)) return false;
      b_ = *b;
    }
    has_z_ = node_.inputs.size() > 3 && !node_.inputs[3].empty();
    if (!cpu::node_activation(node_, &act_)) return false;
    NodeAttrs attrs(node_);
    channels_last_ = attrs.get_int("channels_last", 0) != 0;
    group_ = attrs.get_int("group", 1);
    const std::vector<int64_t> kernel(w->dims().begin() + 2, w->dims().end());
    if (!read_spatial_attrs(attrs, w->rank() - 2, &kernel, true, &attrs_).is_ok()) return false;
    if (group_ < 1 || w->dim(0) % group_ != 0) return false;
    // Plan now for the shape known at load (packs the weights once); later shapes plan on first use.
    std::vector<int64_t> x_dims;
    if (cpu::static_dims(graph, node_.inputs[0], &x_dims)) {
      Plan* p = nullptr;
      if (!plan_for(x_dims, &p).is_ok()) return false;
    }
    return true;
  }

  Status compute(KernelContext& ctx) override {
    // Plans and their buffers are shared by every run of this node: one run at a time.
    std::lock_guard<std::mutex> lock(mu_);
    const Tensor& x = ctx.input(0);
    if (x.dtype() != dtype_ || x.rank() != w_.rank()) return fallback_(ctx);
    Plan* p = nullptr;
    if (!plan_for(x.dims(), &p).is_ok()) return fallback_(ctx);
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype_, p->out_dims, false));
    try {
      dnnl::stream& s = dnnl_stream();
      memory src = wrap(p->user_src, x);
      if (p->reorder_src) {
        p->to_internal.execute(s, src, p->src_buf);
        src = p->src_buf;
      }
      memory dst = p->reorder_dst ? p->dst_buf : wrap(p->user_dst, *y);
      if (has_z_) {  // the sum post-op adds what dst holds
        const Tensor& z = ctx.input(3);
        if (z.dims() != y->dims() || z.dtype() != dtype_) return fallback_(ctx);
        if (p->reorder_dst) {
          memory zm = wrap(p->user_dst, z);
          p->z_to_internal.execute(s, zm, dst);
        }
        else std::memcpy(y->mutable_raw(), z.raw(), static_cast<size_t>(z.nbytes()));
      }
      std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, *p->weights}, {DNNL_ARG_DST, dst}};
      if (b_.defined()) args[DNNL_ARG_BIAS] = bias_;
      p->conv.execute(s, args);
      if (p->reorder_dst) {
        memory ym = wrap(p->user_dst, *y);
        p->to_user.execute(s, dst, ym);
      }
      s.wait();
    } catch (const dnnl::error& e) {
      return cpu::dnnl_error(node_, e);
    }
    return Status::ok();
  }

 private:
  struct Plan {
    dnnl::convolution_forward conv;
    memory::desc user_src, user_dst;
    bool reorder_src = false, reorder_dst = false;
    memory src_buf, dst_buf;
    dnnl::reorder to_internal, to_user, z_to_internal;  // made once per plan
    const memory* weights = nullptr;
    std::vector<int64_t> out_dims;
  };

  Status plan_for(const std::vector<int64_t>& x_dims, Plan** out) {
    auto it = plans_.find(x_dims);
    if (it != plans_.end()) {
      *out = &it->second;
      return Status::ok();
    }
    const int64_t nd = w_.rank() - 2;
    std::vector<int64_t> xd = x_dims;  // logical N, C, spatial...
    if (channels_last_) {
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
    Plan plan;
    try {
      memory::data_type dt;
      cpu::to_dnnl_type(dtype_, &dt);
      const tag io_tag = cpu::plain_tag(xd.size(), channels_last_);
      plan.user_src = memory::desc(cpu::to_dnnl_dims(xd), dt, io_tag);
      plan.user_dst = memory::desc(cpu::to_dnnl_dims(yd), dt, io_tag);
      const memory::desc src_any(cpu::to_dnnl_dims(xd), dt, channels_last_ ? io_tag : tag::any);
      const memory::desc dst_any(cpu::to_dnnl_dims(yd), dt, channels_last_ ? io_tag : tag::any);
      const memory::desc w_any(weight_dims(), dt, tag::any);
      dnnl::post_ops ops;
      if (has_z_) ops.append_sum(1.f);
      if (!cpu::append_activation(act_, &ops)) return unsupported("activation");
      dnnl::primitive_attr attr;
      attr.set_post_ops(ops);
      std::unique_ptr<dnnl::convolution_forward::desc> d;
      if (b_.defined()) {
        memory::data_type bt;
        cpu::to_dnnl_type(b_.dtype(), &bt);
        const memory::desc b_md({w_.dim(0)}, bt, tag::x);
        d = std::make_unique<dnnl::convolution_forward::desc>(dnnl::prop_kind::forward_inference,
                                                              dnnl::algorithm::convolution_direct, src_any, w_any, b_md,
                                                              dst_any, strides, dilations, pad_l, pad_r);
        if (!bias_) bias_ = memory(b_md, dnnl_engine(), const_cast<void*>(b_.raw()));
      } else {
        d = std::make_unique<dnnl::convolution_forward::desc>(dnnl::prop_kind::forward_inference,
                                                              dnnl::algorithm::convolution_direct, src_any, w_any,
                                                              dst_any, strides, dilations, pad_l, pad_r);
      }
      dnnl::convolution_forward::primitive_desc pd(*d, attr, dnnl_engine());
      plan.conv = dnnl::convolution_forward(pd);
      plan.reorder_src = pd.src_desc() != plan.user_src;
      plan.reorder_dst = pd.dst_desc() != plan.user_dst;
      if (plan.reorder_src) {
        plan.src_buf = memory(pd.src_desc(), dnnl_engine());
        plan.to_internal = dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_engine(), plan.user_src, dnnl_engine(), pd.src_desc()));
      }
      if (plan.reorder_dst) {
        plan.dst_buf = memory(pd.dst_desc(), dnnl_engine());
        plan.to_user = dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_engine(), pd.dst_desc(), dnnl_engine(), plan.user_dst));
        if (has_z_)
          plan.z_to_internal =
              dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_engine(), plan.user_dst, dnnl_engine(), pd.dst_desc()));
      }
      plan.weights = packed_weights(pd.weights_desc(), dt);
    } catch (const dnnl::error& e) {
      return cpu::dnnl_error(node_, e);
    }
    plan.out_dims = yd;
    if (channels_last_) {
      plan.out_dims = {yd[0]};
      plan.out_dims.insert(plan.out_dims.end(), yd.begin() + 2, yd.end());
      plan.out_dims.push_back(yd[1]);
    }
    *out = &plans_.emplace(x_dims, std::move(plan)).first->second;
    return Status::ok();
  }

  memory::dims weight_dims() const {
    memory::dims d;
    if (group_ > 1) d = {group_, w_.dim(0) / group_, w_.dim(1)};
    else d = {w_.dim(0), w_.dim(1)};
    d.insert(d.end(), w_.dims().begin() + 2, w_.dims().end());
    return d;
  }

  // The weights in `want`'s layout, reordered once per distinct layout.
  const memory* packed_weights(const memory::desc& want, memory::data_type dt) {
    for (auto& [desc, mem] : packed_)
      if (desc == want) return &mem;
    const memory::dims wd = weight_dims();
    const tag t = group_ > 1 ? (wd.size() == 4 ? tag::goiw : wd.size() == 5 ? tag::goihw : tag::goidhw)
                             : (wd.size() == 3 ? tag::oiw : wd.size() == 4 ? tag::oihw : tag::oidhw);
    memory user(memory::desc(wd, dt, t), dnnl_engine(), const_cast<void*>(w_.raw()));
    memory packed(want, dnnl_engine());
    dnnl::reorder(user, packed).execute(dnnl_stream(), user, packed);
    dnnl_stream().wait();
    packed_.emplace_back(want, packed);
    return &packed_.back().second;
  }

  Node node_;
  KernelFn fallback_;
  DType dtype_ = DType::kUndefined;
  Tensor w_, b_;
  memory bias_;
  bool has_z_ = false, channels_last_ = false;
  int64_t group_ = 1;
  FusedActivation act_;
  SpatialAttrs attrs_;
  std::map<std::vector<int64_t>, Plan> plans_;
  std::mutex mu_;  // guards plans_ and the plans' buffers (concurrent runs of one model)
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
