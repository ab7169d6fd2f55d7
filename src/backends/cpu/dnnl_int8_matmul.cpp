// oneDNN int8 matmul for com.ferry.QMatMulFused (src/ops/quantize_fused.cpp): a as [rows, K] (u8/s8,
// a runtime source zero point) x packed s8 b [K, N] (reordered once, or pre-packed by `ferry compile`),
// s32 or float bias, per-column output scales a_scale * b_scale[n] / y_scale, a Relu post-op, and an
// 8-bit or float output, with the same epilogue steps as the int8 convolution (dnnl_int8_conv.cpp). On
// hosts without VNNI, b split in two over a doubled reduction (int8_pair_saturation.h).
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/dnnl_plan_cache.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/int8_pair_saturation.h"
#include "backends/cpu/int8_util.h"
#include "backends/cpu/node_attrs.h"
#include "ops/quantize_util.h"

namespace ferry {
namespace {

using cpu::dnnl_engine;
using cpu::dnnl_stream;
using cpu::wrap;
using dnnl::memory;
using tag = dnnl::memory::format_tag;

class DnnlQMatMulKernel : public Kernel {
 public:
  DnnlQMatMulKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    enum : size_t { kA = 0, kAScale, kAZp, kBm, kBScale, kBZp, kYScale, kYZp, kBias };
    const Tensor* b = cpu::constant_input(graph, node_, kBm);
    const Tensor* bs = cpu::constant_input(graph, node_, kBScale);
    if (!b || b->dtype() != DType::kI8 || b->rank() != 2 || !bs || bs->dtype() != DType::kF32) return false;
    b_ = *b;
    const int64_t N = b->dim(1);
    split_ = cpu::needs_split(b_);
    if (split_) b_split_ = cpu::split_weights(b_, 1, {2 * b_.dim(0), N});  // [b1; b2]
    if (bs->numel() != 1 && bs->numel() != N) return false;
    if (cpu::has_input(node_, kBZp)) {
      const Tensor* bz = cpu::constant_input(graph, node_, kBZp);
      if (!bz) return false;
      for (int64_t i = 0; i < bz->numel(); ++i)
        if (bz->get_int64(i) != 0) return false;
    }
    const TensorType* at = graph.find_type(node_.inputs[kA]);
    const bool float_y = !cpu::has_input(node_, kYScale) && !cpu::has_input(node_, kYZp);  // the dequantization in the epilogue
    const Tensor* yzt = float_y ? nullptr : cpu::constant_input(graph, node_, kYZp);
    if (!at || !is_8bit(at->dtype) || (!float_y && (!yzt || !is_8bit(yzt->dtype())))) return false;
    a_dt_ = at->dtype;
    flip_ = cpu::int8_pairs_saturate() && a_dt_ == DType::kI8;
    y_dt_ = float_y ? DType::kF32 : yzt->dtype();
    float as = 0, az = 0, ys = 1, yz = 0;
    if (!cpu::scalar_input(graph, node_, kAScale, &as) || !cpu::scalar_input(graph, node_, kAZp, &az) ||
        (!float_y && (!cpu::scalar_input(graph, node_, kYScale, &ys) || !cpu::scalar_input(graph, node_, kYZp, &yz))))
      return false;
    src_zp_ = static_cast<int32_t>(az) + (flip_ ? 128 : 0);  // an s8 source made u8 (int8_pairs_saturate)
    dst_zp_ = static_cast<int32_t>(yz);
    scales_.resize(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) scales_[n] = as * bs->data<float>()[bs->numel() == 1 ? 0 : n] / ys;
    if (cpu::has_input(node_, kBias)) {
      const Tensor* bias = cpu::constant_input(graph, node_, kBias);
      if (!bias || (bias->dtype() != DType::kI32 && bias->dtype() != DType::kF32) || bias->numel() != N) return false;
      bias_ = *bias;
      if (bias->dtype() == DType::kF32) {  // real units -> accumulator units (added before the output scale)
        bias_ = Tensor::allocate(DType::kF32, {N});
        for (int64_t n = 0; n < N; ++n) {
          const double real = static_cast<double>(as) * bs->data<float>()[bs->numel() == 1 ? 0 : n];
          bias_.mutable_data<float>()[n] = real > 0 ? static_cast<float>(bias->data<float>()[n] / real) : 0.f;
        }
      }
    }
    relu_ = AttrReader(node_).get_int("relu", 0) != 0;
    std::vector<int64_t> a_dims;
    if (cpu::static_dims(graph, node_.inputs[kA], &a_dims)) {
      auto p = plans_.get(a_dims, [this](const std::vector<int64_t>& d, Plan* plan) { return make_plan(d, plan); });
      if (!p.is_ok()) return false;
    }
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    if (a.dtype() != a_dt_ || a.rank() < 2) return fallback_(ctx);
    auto plan = plans_.get(a.dims(), [this](const std::vector<int64_t>& d, Plan* p) { return make_plan(d, p); });
    if (!plan.is_ok()) return fallback_(ctx);
    const Plan* p = plan.value();
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, y_dt_, p->out_dims, false));
    const void* src_data = a.raw();
    if ((split_ || flip_) && a.numel() > 0) {  // rows twice: [a, a] against [b1; b2]; s8 as u8 (int8_pairs_saturate)
      auto* buf = static_cast<uint8_t*>(cpu::scratch_data(p->src.get_size(), cpu::ScratchSlot::kSplit));
      cpu::copy_blocks(static_cast<const uint8_t*>(a.raw()), a.numel() / b_.dim(0), b_.dim(0), split_ ? 2 : 1, flip_, buf);
      src_data = buf;
    }
    return cpu::dnnl_call(node_, [&] {
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, memory(p->src, dnnl_engine(), const_cast<void*>(src_data))},
          {DNNL_ARG_WEIGHTS, *p->weights},
          {DNNL_ARG_DST, wrap(p->dst, *y)},
          {DNNL_ARG_SCRATCHPAD, cpu::scratch_memory(p->pd.scratchpad_desc(), cpu::ScratchSlot::kScratchpad)}};
      if (dst_zp_ != 0) args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST] = cpu::s32_scalar_memory(&dst_zp_);
      if (src_zp_ != 0) args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = cpu::s32_scalar_memory(&src_zp_);
      if (bias_.defined()) args[DNNL_ARG_BIAS] = wrap(p->bias, bias_);
      p->prim.execute(dnnl_stream(), args);
      dnnl_stream().wait();
    });
  }

 private:
  struct Plan {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    memory::desc src, dst, bias;
    const memory* weights = nullptr;
    std::vector<int64_t> out_dims;
  };

  Status make_plan(const std::vector<int64_t>& a_dims, Plan* plan) {
    const int64_t K = b_.dim(0), N = b_.dim(1);
    if (a_dims.size() < 2 || a_dims.back() != K) return unsupported("inner dimension mismatch");
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < a_dims.size(); ++i) rows *= a_dims[i];
    if (rows == 0) return unsupported("empty");
    const auto plan_primitives = [&] {
      const int64_t K2 = split_ ? 2 * K : K;
      plan->src = memory::desc({rows, K2}, cpu::int8_type(flip_ ? DType::kU8 : a_dt_), tag::ab);
      plan->dst = memory::desc({rows, N}, cpu::int8_type(y_dt_), tag::ab);
      const memory::desc w_any({K2, N}, memory::data_type::s8, tag::any);
      dnnl::post_ops ops;
      if (relu_) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      if (dst_zp_ != 0) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_round, 0.f, 0.f);  // as in the conv
      dnnl::primitive_attr attr = cpu::concurrent_attr();
      attr.set_post_ops(ops);
      attr.set_output_scales(scales_.size() == 1 ? 0 : 1 << 1, scales_);
      if (dst_zp_ != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});  // 0 (a Relu output): no epilogue add
      if (src_zp_ != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      if (bias_.defined())
        plan->bias = memory::desc({1, N}, bias_.dtype() == DType::kF32 ? memory::data_type::f32 : memory::data_type::s32, tag::ab);
      const auto d = bias_.defined() ? dnnl::matmul::desc(plan->src, w_any, plan->bias, plan->dst)
                                     : dnnl::matmul::desc(plan->src, w_any, plan->dst);
      plan->pd = dnnl::matmul::primitive_desc(d, attr, dnnl_engine());
      if (cpu::is_reference_impl(plan->pd))
        return unsupported("oneDNN offers only its reference int8 matmul here");
      plan->prim = dnnl::matmul(plan->pd);
      plan->weights = packed_weights(plan->pd.weights_desc());
      return Status::ok();
    };
    RETURN_IF_ERROR(cpu::dnnl_call(node_, plan_primitives));
    plan->out_dims = a_dims;
    plan->out_dims.back() = N;
    return Status::ok();
  }

  const memory* packed_weights(const memory::desc& want) {
    if (split_)
      return packed_.get(node_, "dnnl_int8_matmul_split", want, [this] {
        return memory(memory::desc({b_split_.dim(0), b_split_.dim(1)}, memory::data_type::s8, tag::ab), dnnl_engine(),
                      const_cast<void*>(b_split_.raw()));
      });
    return packed_.get(node_, "dnnl_int8_matmul", want, [this] {
      return memory(memory::desc({b_.dim(0), b_.dim(1)}, memory::data_type::s8, tag::ab), dnnl_engine(),
                    const_cast<void*>(b_.raw()));
    });
  }

  Node node_;
  KernelFn fallback_;
  DType a_dt_ = DType::kU8, y_dt_ = DType::kU8;
  Tensor b_, bias_, b_split_;  // b_split_: [b1; b2] where split_ (int8_pairs_saturate)
  std::vector<float> scales_;
  int32_t src_zp_ = 0, dst_zp_ = 0;
  bool relu_ = false, split_ = false, flip_ = false;
  cpu::PlanCache<Plan> plans_;
  cpu::PackedWeightsCache packed_;
};

}  // namespace

void register_cpu_dnnl_int8_matmul_kernels(CpuKernelTable& t) {
  t.add("com.ferry", "QMatMulFused", cpu::make_if_init<DnnlQMatMulKernel>);
}

}  // namespace ferry
