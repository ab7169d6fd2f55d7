// oneDNN int8 convolution for com.ferry.QConvFused (src/ops/quantize_fused.cpp; QMatMulFused: dnnl_int8_matmul.cpp): u8/s8 source, s8
// weights (reordered once, or taken pre-packed from a .ferry file: prepacked.h), s32 bias, per-channel
// output scales x_scale * w_scale[m] / s1, and the rest of the op's definition as post-ops:
//   conv_relu  -> eltwise relu
//   mid Q/DQ   -> eltwise round, clip [lo - mid_zp, hi - mid_zp], linear s1 / y_scale
//   residual z -> sum (scale z_scale / y_scale, zero point z_zp), read from the output buffer
//   relu       -> eltwise relu
// A float output (no y_scale: DQ -> Conv with no Q after) is an f32 destination with output scales
// x_scale * w_scale[m]; a float bias (real units) goes in as B[m] / (x_scale * w_scale[m]), which oneDNN
// adds to the accumulator before the scale (one f32 rounding more than the reference's order); a Clip
// on the convolution's result (conv_min / conv_max) is an eltwise clip in output units, a SiLU / Sigmoid
// on a float output (activation) oneDNN's eltwise swish / logistic (its exp: a few ulp off the reference's);
// a float output's QuantizeLinear (output 1, yq) quantizes what the run wrote (int8_quantize.h).
// then (where the destination zero point is not 0) eltwise round, the zero point and saturation, so
// the rounding comes before the zero point as in the op (round(v + zp) in f32 is not round(v) + zp). The source zero point is a
// runtime zero point (oneDNN handles the padded border itself). The integer accumulation is exact; the
// f32 steps are the reference's, but oneDNN may fuse a multiply and an add (one rounding fewer), so a
// value next to a rounding tie can land one step of y away from the reference: the tests allow that
// one step with arbitrary scales and require bit-exact results with power-of-two scales.
// channels_last = 1 (the nhwc_layout pass): NHWC tensors, which is oneDNN's own int8 layout, so chained
// int8 convolutions run with no reorder (measured on ResNet-50: NCHW boundaries cost 18 ms of u8
// reorders per run against 24 ms of convolution). Plain NCHW nodes reorder in and out.
//
// On hosts without VNNI, the weight split and the repair of saturated pairs: int8_pair_saturation.h.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/dnnl_plan_cache.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/int8_pair_saturation.h"
#include "backends/cpu/int8_quantize.h"
#include "backends/cpu/int8_util.h"
#include "backends/cpu/node_attrs.h"
#include "backends/cpu/one_thread_rules.h"
#include "backends/cpu/prepacked.h"
#include "common/env_switch.h"
#include "ops/conv_pool_util.h"
#include "ops/quantize_util.h"

namespace ferry {
namespace {

using cpu::NodeAttrs;
using cpu::dnnl_engine;
using cpu::dnnl_stream;
using cpu::wrap;
using dnnl::memory;
using tag = dnnl::memory::format_tag;

enum : size_t { kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kYScale, kYZp, kB, kZ, kZScale, kZZp, kMidScale, kMidZp, kYqScale, kYqZp };

class DnnlQConvKernel : public Kernel {
  struct Plan;

 public:
  DnnlQConvKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    const Tensor* w = cpu::constant_input(graph, node_, kW);
    const Tensor* ws = cpu::constant_input(graph, node_, kWScale);
    if (!w || w->dtype() != DType::kI8 || w->rank() < 3 || w->rank() > 5 || !ws || ws->dtype() != DType::kF32) return false;
    w_ = *w;
    const int64_t M = w->dim(0);
    if (ws->numel() != 1 && ws->numel() != M) return false;
    // Not a depthwise convolution (one input channel per output channel): oneDNN's depthwise kernels
    // widen to 32 bits before they multiply (no pairs; FullRangeWeightsExactWithoutVnni checks it).
    const int64_t G = NodeAttrs(node_).get_int("group", 1);
    split_ = !(w_.dim(1) == 1 && G == M) && cpu::needs_split(w_);
    if (cpu::has_input(node_, kWZp)) {
      const Tensor* wz = cpu::constant_input(graph, node_, kWZp);
      if (!wz) return false;
      for (int64_t i = 0; i < wz->numel(); ++i)
        if (wz->get_int64(i) != 0) return false;
    }
    const TensorType* xt = graph.find_type(node_.inputs[kX]);
    if (!xt || (xt->dtype != DType::kU8 && xt->dtype != DType::kI8)) return false;
    x_dt_ = xt->dtype;
    float_y_ = !cpu::has_input(node_, kYScale) && !cpu::has_input(node_, kYZp);
    float xs = 0, ys = 1, s1 = 0;
    if (float_y_) {
      y_dt_ = DType::kF32;
      if (cpu::has_input(node_, kMidScale) || !cpu::scalar_input(graph, node_, kXScale, &xs) || !cpu::scalar_input(graph, node_, kXZp, &xz_))
        return false;
    } else {
      const Tensor* yzt = cpu::constant_input(graph, node_, kYZp);
      if (!yzt || !is_8bit(yzt->dtype())) return false;
      y_dt_ = yzt->dtype();
      if (!cpu::scalar_input(graph, node_, kXScale, &xs) || !cpu::scalar_input(graph, node_, kXZp, &xz_) || !cpu::scalar_input(graph, node_, kYScale, &ys) ||
          !cpu::scalar_input(graph, node_, kYZp, &yz_))
        return false;
    }
    s1 = ys;
    has_mid_ = cpu::has_input(node_, kMidScale);
    if (has_mid_) {
      const Tensor* mzt = cpu::constant_input(graph, node_, kMidZp);
      if (!cpu::scalar_input(graph, node_, kMidScale, &s1) || !cpu::scalar_input(graph, node_, kMidZp, &mz_) || !mzt ||
          !quant_range(mzt->dtype(), &mlo_, &mhi_))
        return false;
      mid_to_y_ = s1 / ys;
    }
    if (node_.outputs.size() > 1) {  // yq: the float output's QuantizeLinear (quantize_f32_8bit after the run)
      const Tensor* qz = cpu::constant_input(graph, node_, kYqZp);
      if (!float_y_ || !qz || !is_8bit(qz->dtype()) || !cpu::scalar_input(graph, node_, kYqScale, &yq_scale_) ||
          !cpu::scalar_input(graph, node_, kYqZp, &yq_zp_) || !(yq_scale_ > 0))
        return false;
      yq_dt_ = qz->dtype();
    }
    has_z_ = cpu::has_input(node_, kZ);
    if (has_z_ && float_y_) {  // a float32 residual (the plain structure's Add): the sum post-op adds it, scale 1
      const TensorType* zt = graph.find_type(node_.inputs[kZ]);
      if (!zt || zt->dtype != DType::kF32 || !NodeAttrs(node_).get_string("activation", "").empty()) return false;
      z_dt_ = DType::kF32;
      z_to_y_ = 1;
      zz_ = 0;
    } else if (has_z_) {
      float zs = 0;
      const TensorType* zt = graph.find_type(node_.inputs[kZ]);
      if (!zt || !is_8bit(zt->dtype) || !cpu::scalar_input(graph, node_, kZScale, &zs) || !cpu::scalar_input(graph, node_, kZZp, &zz_)) return false;
      z_dt_ = zt->dtype;
      z_to_y_ = zs / ys;
    }
    scales_.resize(static_cast<size_t>(M));
    for (int64_t m = 0; m < M; ++m) scales_[m] = xs * ws->data<float>()[ws->numel() == 1 ? 0 : m] / s1;
    std::vector<int64_t> bias;
    if (cpu::has_input(node_, kB)) {
      const Tensor* b = cpu::constant_input(graph, node_, kB);
      if (!b || (b->dtype() != DType::kI32 && b->dtype() != DType::kF32) || b->numel() != M) return false;
      if (b->dtype() == DType::kI32) {
        bias.assign(b->data<int32_t>(), b->data<int32_t>() + M);
      } else {  // real units -> accumulator units (oneDNN adds the bias before the output scale)
        fbias_.resize(static_cast<size_t>(M));
        for (int64_t m = 0; m < M; ++m) {
          const double real = static_cast<double>(xs) * ws->data<float>()[ws->numel() == 1 ? 0 : m];
          fbias_[m] = real > 0 ? static_cast<double>(b->data<float>()[m]) / real : 0.0;
        }
      }
    }
    NodeAttrs clip_attrs(node_);
    clip_lo_ = clip_attrs.get_float("conv_min", -INFINITY) / s1;
    clip_hi_ = clip_attrs.get_float("conv_max", INFINITY) / s1;
    clip_ = clip_lo_ > -INFINITY || clip_hi_ < INFINITY;
    act_ = clip_attrs.get_string("activation", "");
    if (!act_.empty() && (!float_y_ || (act_ != "Silu" && act_ != "Sigmoid"))) return false;
    dst_zp_ = static_cast<int32_t>(yz_);
    NodeAttrs attrs(node_);
    conv_relu_ = attrs.get_int("conv_relu", 0) != 0;
    channels_last_ = attrs.get_int("channels_last", 0) != 0;
    if (channels_last_ && w->rank() != 4) return false;
    relu_ = attrs.get_int("relu", 0) != 0;
    group_ = attrs.get_int("group", 1);
    // See int8_pairs_saturate: an NHWC u8 convolution of one group on channels in fours whose source has
    // zero point 0 (a Relu's output) runs unsplit and repairs the few outputs a saturated pair touched
    // (init_fixup); the others split.
    if (split_ && channels_last_ && group_ == 1 && x_dt_ == DType::kU8 && xz_ == 0 && act_.empty() && w_.dim(1) % 4 == 0) {
      split_ = false;
      init_fixup(ws, xs, s1);
      if (cpu::has_input(node_, kB)) {
        const Tensor* b = cpu::constant_input(graph, node_, kB);
        if (b->dtype() == DType::kI32) fix_ibias_.assign(b->data<int32_t>(), b->data<int32_t>() + M);
        else fix_fbias_.assign(b->data<float>(), b->data<float>() + M);
      }
    }
    if (split_) {
      std::vector<int64_t> d = w_.dims();
      d[1] *= 2;
      w_split_ = cpu::split_weights(w_, M, std::move(d));
    }
    flip_ = cpu::int8_pairs_saturate() && x_dt_ == DType::kI8;
    src_zp_ = static_cast<int32_t>(xz_) + (flip_ ? 128 : 0);  // an s8 source made u8 (int8_pairs_saturate)
    const std::vector<int64_t> kernel(w->dims().begin() + 2, w->dims().end());
    if (!read_spatial_attrs(attrs, w->rank() - 2, &kernel, true, &attrs_).is_ok()) return false;
    if (group_ < 1 || M % group_ != 0) return false;
    if (fbias_.empty()) {
      init_tap_packing(&bias);
    } else {  // the packing's zero-point share joins the float bias
      std::vector<int64_t> share;
      init_tap_packing(&share);
      for (size_t m = 0; m < share.size() && tap_packed_; ++m) fbias_[m] += static_cast<double>(share[m]);
    }
    // oneDNN adds an s32 bias after converting it and the accumulator to f32: an f32 copy saves the
    // conversion per output vector and sums the same where every value is exact in f32 (|b| <= 2^24).
    if (!fbias_.empty()) {
      b_ = Tensor::allocate(DType::kF32, {M});
      for (int64_t m = 0; m < M; ++m) b_.mutable_data<float>()[m] = static_cast<float>(fbias_[m]);
    } else if (!bias.empty()) {
      bool exact = true;
      for (int64_t v : bias) exact = exact && std::abs(v) <= (int64_t{1} << 24);
      b_ = Tensor::allocate(exact ? DType::kF32 : DType::kI32, {M});
      for (int64_t m = 0; m < M; ++m) {
        if (exact) b_.mutable_data<float>()[m] = static_cast<float>(bias[m]);
        else b_.mutable_data<int32_t>()[m] = static_cast<int32_t>(bias[m]);
      }
    }
    std::vector<int64_t> x_dims;
    if (cpu::static_dims(graph, node_.inputs[kX], &x_dims)) {
      std::optional<SingleThreadScope> one;
      if (one_thread(x_dims)) one.emplace();
      auto p = plans_.get(x_dims, [this](const std::vector<int64_t>& d, Plan* plan) { return make_plan(d, plan, split_); });
      if (!p.is_ok()) return false;  // this oneDNN has no int8 kernel for the node: the reference runs it
    }
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(kX);
    if (x.dtype() != x_dt_ || x.rank() != w_.rank()) return fallback_(ctx);
    std::optional<SingleThreadScope> one;  // its plans are then made for one thread
    if (one_thread(x.dims())) one.emplace();
    auto plan = plans_.get(x.dims(), [this](const std::vector<int64_t>& d, Plan* p) { return make_plan(d, p, split_); });
    if (!plan.is_ok()) return fallback_(ctx);
    const Plan* p = plan.value();
    if (has_z_ && (ctx.input(kZ).dims() != p->out_dims || ctx.input(kZ).dtype() != z_dt_)) return fallback_(ctx);
    // The sum post-op reads dst: with z of y's type, dst may be z's own buffer (the memory plan decides).
    const bool over = has_z_ && z_dt_ == y_dt_;
    std::vector<int64_t> fix;  // the outputs a saturated pair touched (init_fixup), NHWC offsets
    std::vector<int32_t> fix_z;
    std::vector<float> fix_zf;  // (a float residual)
    if (!pairs_.empty() && x.numel() > 0) {
      if (!pairs_.find(p->in_dims, p->out_dims, p->stride, p->dil, p->pad, x.data<uint8_t>(), y_numel(*p) / 256,
                       &fix)) {  // many: the split
        auto sp = split_plans_.get(x.dims(), [this](const std::vector<int64_t>& d, Plan* q) { return make_plan(d, q, true); });
        if (!sp.is_ok()) return fallback_(ctx);
        p = sp.value();
        fix.clear();
      }
      if (has_z_) {  // read before the run: the output may be z's own buffer
        const Tensor& z = ctx.input(kZ);
        for (int64_t i : fix) {
          if (z_dt_ == DType::kF32) fix_zf.push_back(z.data<float>()[i]);
          else fix_z.push_back(z_dt_ == DType::kU8 ? z.data<uint8_t>()[i] : static_cast<int32_t>(z.data<int8_t>()[i]));
        }
      }
    }
    ASSIGN_OR_RETURN(Tensor * y, over ? ctx.allocate_output_over(0, kZ, y_dt_, p->out_dims)
                                      : ctx.allocate_output(0, y_dt_, p->out_dims, false));
    RETURN_IF_ERROR(run_onednn(ctx, x, p, y));
    if (!fix.empty()) repair(*p, x.data<uint8_t>(), fix, fix_z, fix_zf, y);
    if (node_.outputs.size() > 1) {
      ASSIGN_OR_RETURN(Tensor * yq, ctx.allocate_output(1, yq_dt_, p->out_dims, false));
      cpu::quantize_f32_8bit(y->data<float>(), y->numel(), yq_scale_, yq_zp_, yq_dt_, yq->mutable_raw());
    }
    return Status::ok();
  }

  // A small convolution runs on one thread (one_thread_rules.h): multiply-adds counted per source pixel.
  bool one_thread(const std::vector<int64_t>& x_dims) const {
    int64_t macs = w_.numel() / std::max<int64_t>(w_.dim(1) * group_, 1);
    for (int64_t d : x_dims) macs *= d;
    return cpu::int8_on_one_thread(macs);
  }

 private:
  Status run_onednn(KernelContext& ctx, const Tensor& x, const Plan* p, Tensor* y) {
    const void* src_data = x.raw();
    if ((p->split || flip_) && x.numel() > 0) {  // [x, x] per group along the channels; s8 as u8 (int8_pairs_saturate)
      auto* buf = static_cast<uint8_t*>(cpu::scratch_data(p->user_src.get_size(), cpu::ScratchSlot::kSplit));
      const int64_t C = channels_last_ ? x.dim(3) : x.dim(1);
      const int64_t inner = channels_last_ ? 1 : x.numel() / (x.dim(0) * C);
      const int64_t block = C / group_ * inner;
      cpu::copy_blocks(static_cast<const uint8_t*>(x.raw()), x.numel() / block, block, p->split ? 2 : 1, flip_, buf);
      src_data = buf;
    }
    if (p->tap_packed) {
      const auto run_primitives = [&] {
        auto* buf = static_cast<uint8_t*>(
            cpu::scratch_data(p->user_src.get_size() + kTapBytes, cpu::ScratchSlot::kSrc));
        pack_taps(*p, static_cast<const uint8_t*>(x.raw()), buf);
        src_data = buf;
      };
      RETURN_IF_ERROR(cpu::dnnl_call(node_, run_primitives));
    }
    return cpu::dnnl_call(node_, [&] {
      dnnl::stream& s = dnnl_stream();
      if (p->args) {
        std::unique_lock<std::mutex> lock(p->args->mu, std::try_to_lock);
        if (lock.owns_lock()) {
          CachedArgs& a = *p->args;
          if (has_z_ && ctx.input(kZ).raw() != y->raw())
            std::memcpy(y->mutable_raw(), ctx.input(kZ).raw(), static_cast<size_t>(ctx.input(kZ).nbytes()));
          a.src.set_data_handle(const_cast<void*>(src_data));
          a.dst.set_data_handle(y->mutable_raw());
          const size_t pad = p->pd.scratchpad_desc().get_size();
          if (pad > 0) a.scratchpad.set_data_handle(cpu::scratch_data(pad, cpu::ScratchSlot::kScratchpad));
          p->conv.execute(s, a.map);
          s.wait();
          return Status::ok();
        }
      }
      memory src(p->user_src, dnnl_engine(), const_cast<void*>(src_data));
      if (p->reorder_src) {
        memory buf = cpu::scratch_memory(p->pd.src_desc(), cpu::ScratchSlot::kSrc);
        p->to_internal.execute(s, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, buf}});
        src = buf;
      }
      memory dst = p->reorder_dst ? cpu::scratch_memory(p->pd.dst_desc(), cpu::ScratchSlot::kDst) : wrap(p->user_dst, *y);
      if (has_z_) {
        const Tensor& z = ctx.input(kZ);
        if (p->reorder_dst) p->z_to_internal.execute(s, {{DNNL_ARG_FROM, wrap(p->user_z, z)}, {DNNL_ARG_TO, dst}});
        else if (z.raw() != y->raw()) std::memcpy(y->mutable_raw(), z.raw(), static_cast<size_t>(z.nbytes()));
      }
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, *p->weights}, {DNNL_ARG_DST, dst},
          {DNNL_ARG_SCRATCHPAD, cpu::scratch_memory(p->pd.scratchpad_desc(), cpu::ScratchSlot::kScratchpad)}};
      if (dst_zp_ != 0) args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST] = cpu::s32_scalar_memory(&dst_zp_);
      if (src_zp_ != 0 && !p->tap_packed) args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = cpu::s32_scalar_memory(&src_zp_);
      if (b_.defined()) args[DNNL_ARG_BIAS] = wrap(p->bias_md, b_);
      p->conv.execute(s, args);
      if (p->reorder_dst) p->to_user.execute(s, {{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, wrap(p->user_dst, *y)}});
      s.wait();
      return Status::ok();
    });
  }

  // ---- Unsplit with repair (int8_pair_saturation.h) ----
  void init_fixup(const Tensor* ws, float xs, float s1) {
    if (!pairs_.init(w_)) return;  // no pair can saturate: exact unsplit
    const int64_t M = w_.dim(0);
    fix_real_.resize(static_cast<size_t>(M));
    for (int64_t m = 0; m < M; ++m) fix_real_[m] = xs * ws->data<float>()[ws->numel() == 1 ? 0 : m];
    fix_s1_ = s1;
  }

  int64_t y_numel(const Plan& p) const {
    int64_t n = 1;
    for (int64_t d : p.out_dims) n *= d;
    return n;
  }

  // The listed outputs recomputed as the reference does (ops/quantize_fused.cpp k_qconv_fused).
  void repair(const Plan& p, const uint8_t* x, const std::vector<int64_t>& fix, const std::vector<int32_t>& fix_z,
              const std::vector<float>& fix_zf, Tensor* y) const {
    const int64_t H = p.in_dims[1], W = p.in_dims[2], C = p.in_dims[3];
    const int64_t OH = p.out_dims[1], OW = p.out_dims[2], M = p.out_dims[3], KH = w_.dim(2), KW = w_.dim(3);
    const int8_t* w = w_.data<int8_t>();
    const int32_t zp = static_cast<int32_t>(xz_);
    float lo = 0, hi = 0;
    if (!float_y_) quant_range(y_dt_, &lo, &hi);
    for (size_t f = 0; f < fix.size(); ++f) {
      const int64_t i = fix[f], m = i % M, ow = (i / M) % OW, oh = (i / M / OW) % OH, n = i / M / OW / OH;
      int64_t acc = 0;
      for (int64_t kh = 0; kh < KH; ++kh) {
        const int64_t ih = oh * p.stride[0] - p.pad[0] + kh * p.dil[0];
        if (ih < 0 || ih >= H) continue;
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t iw = ow * p.stride[1] - p.pad[1] + kw * p.dil[1];
          if (iw < 0 || iw >= W) continue;
          const uint8_t* a = x + ((n * H + ih) * W + iw) * C;
          const int8_t* wm = w + m * C * KH * KW + kh * KW + kw;
          int32_t s = 0;
          for (int64_t c = 0; c < C; ++c) s += (static_cast<int32_t>(a[c]) - zp) * wm[c * KH * KW];
          acc += s;
        }
      }
      float v = fix_fbias_.empty()
                    ? static_cast<float>(static_cast<int32_t>(acc) + (fix_ibias_.empty() ? 0 : fix_ibias_[m])) * scales_[m]
                    : (static_cast<float>(acc) * fix_real_[m] + fix_fbias_[m]) / fix_s1_;
      if (conv_relu_) v = std::max(v, 0.0f);
      v = std::min(std::max(v, clip_lo_), clip_hi_);
      if (float_y_) {
        if (has_z_) {  // the sum post-op, then the Relu
          v = v + fix_zf[f];
          if (relu_) v = std::max(v, 0.0f);
        }
        y->mutable_data<float>()[i] = v;
        continue;
      }
      if (has_mid_) v = std::min(std::max(std::nearbyint(v), mlo_ - mz_), mhi_ - mz_) * mid_to_y_;
      if (has_z_) v = std::fma(z_to_y_, static_cast<float>(fix_z[f] - static_cast<int32_t>(zz_)), v);
      if (relu_) v = std::max(v, 0.0f);
      const float q = quantize_value(v, yz_, lo, hi);
      if (y_dt_ == DType::kU8) y->mutable_data<uint8_t>()[i] = static_cast<uint8_t>(q);
      else y->mutable_data<int8_t>()[i] = static_cast<int8_t>(q);
    }
  }

  // A plan's arguments where it needs no reorder, made once: a call that finds them free (try_lock)
  // points src, dst and the scratchpad at its buffers and runs; a concurrent call makes its own. This
  // saves the oneDNN memory objects and the argument map of every call (their create/destroy and the
  // mallocs behind them were ~1% of a ResNet-50 int8 run's perf samples; not timed on their own).
  struct CachedArgs {
    std::mutex mu;
    memory src, dst, scratchpad;
    std::unordered_map<int, memory> map;
  };

  struct Plan {
    dnnl::convolution_forward::primitive_desc pd;
    dnnl::convolution_forward conv;
    std::unique_ptr<CachedArgs> args;  // null where src or dst is reordered
    bool tap_packed = false;           // src is P (init_tap_packing), made from x by pack_taps
    bool split = false;                // [x, x] against [w1; w2] (int8_pairs_saturate)
    std::vector<int64_t> x_dims;
    int64_t pad_top = 0, pad_left = 0, tap_rows = 0;
    memory::desc user_src, user_dst, user_z, bias_md;
    bool reorder_src = false, reorder_dst = false;
    dnnl::reorder to_internal, to_user, z_to_internal;
    const memory* weights = nullptr;
    std::vector<int64_t> out_dims;
    std::vector<int64_t> in_dims;  // x's (NHWC); stride, dil, pad: the spatial geometry (repair)
    std::array<int64_t, 2> stride{1, 1}, dil{1, 1}, pad{0, 0};
  };

  Status make_plan(const std::vector<int64_t>& x_dims, Plan* plan, bool split) {
    const int64_t nd = w_.rank() - 2;
    plan->split = split;
    std::vector<int64_t> xd = x_dims;  // logical N, C, spatial...
    if (channels_last_) {
      if (x_dims.size() != 4) return unsupported("channels_last needs 4-D");
      xd = {x_dims[0], x_dims[3], x_dims[1], x_dims[2]};
    }
    if (static_cast<int64_t>(xd.size()) != w_.rank() || xd[1] != w_.dim(1) * group_) return unsupported("channel mismatch");
    NodeAttrs attrs(node_);
    memory::dims strides, dilations, pad_l, pad_r;
    std::vector<int64_t> yd = {xd[0], w_.dim(0)};
    for (int64_t i = 0; i < nd; ++i) {
      AxisGeom g;
      RETURN_IF_ERROR(conv_pool_axis(attrs, attrs_, i, xd[2 + i], &g));
      if (g.pad_begin < 0 || g.pad_end < 0 || g.out <= 0) return unsupported("geometry");
      yd.push_back(g.out);
      if (i < 2) {
        plan->stride[i] = attrs_.strides[i];
        plan->dil[i] = attrs_.dilations[i];
        plan->pad[i] = g.pad_begin;
      }
      strides.push_back(attrs_.strides[i]);
      dilations.push_back(attrs_.dilations[i] - 1);
      pad_l.push_back(g.pad_begin);
      pad_r.push_back(g.pad_end);
    }
    plan->tap_packed = tap_packed_;
    if (tap_packed_ && (xd[2] + pad_l[0] + pad_r[0] - w_.dim(2)) / strides[0] + 1 != yd[2])
      return unsupported("geometry");  // (the bias holds the zero point's share: no other path here)
    if (plan->tap_packed) {  // a KHx1 convolution on P (init_tap_packing), no padding
      plan->x_dims = x_dims;
      plan->pad_top = pad_l[0];
      plan->pad_left = pad_l[1];
      plan->tap_rows = xd[2] + pad_l[0] + pad_r[0];
      xd = {xd[0], tap_channels_, plan->tap_rows, yd[3]};
      strides[1] = 1;
      pad_l = {0, 0};
      pad_r = {0, 0};
    }
    if (split) xd[1] *= 2;  // [x, x] against [w1; w2]
    const bool src_zp = src_zp_ != 0 && !plan->tap_packed;
    const auto plan_primitives = [&] {
      const memory::data_type xdt = cpu::int8_type(flip_ ? DType::kU8 : x_dt_), ydt = cpu::int8_type(y_dt_), zdt = cpu::int8_type(z_dt_);
      const tag io_tag = cpu::plain_tag(xd.size(), channels_last_);
      plan->user_src = memory::desc(cpu::to_dnnl_dims(xd), xdt, io_tag);
      plan->user_dst = memory::desc(cpu::to_dnnl_dims(yd), ydt, io_tag);
      // The epilogue runs once per output vector and costs as much as the multiply-adds where the
      // reduction is short (the 1x1 convolutions of 64-128 channels): no post-op that changes nothing.
      // A Relu is implied where the u8 output has zero point 0 and the Relu comes last (oneDNN saturates
      // to [0, 255] before the conversion: max(x, 0) is the Relu), and before a mid clip whose lower
      // bound is >= 0 (round is monotone with round(0) = 0). The mid step's multiply is the clip's
      // post-op scale (clip(x) * s, what linear with beta 0 computes) instead of a post-op of its own.
      const bool saturation_relus = y_dt_ == DType::kU8 && dst_zp_ == 0;
      const bool mid_clip_relus = has_mid_ && mlo_ - mz_ >= 0.f;
      dnnl::post_ops ops;
      if (conv_relu_ && !mid_clip_relus && (has_mid_ || has_z_ || relu_ || !saturation_relus))
        ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      if (clip_) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, clip_lo_, clip_hi_);
      if (act_ == "Silu") ops.append_eltwise(1.f, dnnl::algorithm::eltwise_swish, 1.f, 0.f);  // x * sigmoid(1 * x)
      if (act_ == "Sigmoid") ops.append_eltwise(1.f, dnnl::algorithm::eltwise_logistic, 0.f, 0.f);
      if (has_mid_) {
        ops.append_eltwise(1.f, dnnl::algorithm::eltwise_round, 0.f, 0.f);
        ops.append_eltwise(mid_to_y_, dnnl::algorithm::eltwise_clip, mlo_ - mz_, mhi_ - mz_);
      }
      if (has_z_) {
        plan->user_z = memory::desc(cpu::to_dnnl_dims(yd), zdt, io_tag);
        ops.append_sum(z_to_y_, static_cast<int32_t>(zz_), zdt);
      }
      if (relu_ && !saturation_relus) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      // oneDNN adds the destination zero point before it rounds (round(v + zp)); the op rounds first
      // (round(v) + zp). v + zp is inexact in f32 where v has bits below zp's ulp, which moves a value
      // next to a tie onto it (ResNet-50: 2 of 802816 values of layer1.0's downsample differed, and 53
      // layers amplified them). A round post-op makes v integral, so the add and the conversion are exact.
      if (dst_zp_ != 0) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_round, 0.f, 0.f);
      dnnl::primitive_attr attr = cpu::concurrent_attr();
      attr.set_post_ops(ops);
      attr.set_output_scales(scales_.size() == 1 ? 0 : 1 << 1, scales_);
      if (dst_zp_ != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});  // 0 (a Relu output): no epilogue add
      if (src_zp) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      if (b_.defined()) {
        const auto bdt = b_.dtype() == DType::kF32 ? memory::data_type::f32 : memory::data_type::s32;
        plan->bias_md = memory::desc({w_.dim(0)}, bdt, tag::x);
      }
      const memory::desc src_any(cpu::to_dnnl_dims(xd), xdt, tag::any), dst_any(cpu::to_dnnl_dims(yd), ydt, tag::any);
      const memory::desc w_any(weight_dims(plan->tap_packed, split), memory::data_type::s8, tag::any);
      const auto d = b_.defined()
                         ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                                           src_any, w_any, plan->bias_md, dst_any, strides, dilations, pad_l, pad_r)
                         : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                                           src_any, w_any, dst_any, strides, dilations, pad_l, pad_r);
      plan->pd = dnnl::convolution_forward::primitive_desc(d, attr, dnnl_engine());
      if (const std::string want = preferred_impl(xd, yd, strides, plan->tap_packed); !want.empty()) {
        // oneDNN offers its implementations best first by its own ranking; take the first whose name has `want`.
        auto cand = dnnl::convolution_forward::primitive_desc(d, attr, dnnl_engine());
        bool found = false;
        do found = std::string(cand.impl_info_str()).find(want) != std::string::npos;
        while (!found && cand.next_impl());
        if (found) plan->pd = cand;
        else if (forced_impl()) return unsupported("FERRY_QCONV_IMPL=" + want + ": oneDNN offers no such int8 convolution here");
      }
      const auto& pd = plan->pd;
      if (cpu::is_reference_impl(pd))
        return unsupported("oneDNN offers only its reference int8 convolution here");
      plan->conv = dnnl::convolution_forward(pd);
      plan->reorder_src = pd.src_desc() != plan->user_src;
      plan->reorder_dst = pd.dst_desc() != plan->user_dst;
      const auto reorder = cpu::make_reorder;
      if (plan->reorder_src) plan->to_internal = reorder(plan->user_src, pd.src_desc());
      if (plan->reorder_dst) {
        plan->to_user = reorder(pd.dst_desc(), plan->user_dst);
        if (has_z_) {
          // z goes into dst's buffer as it is (the sum post-op reads dst's type): same type needed.
          if (z_dt_ != y_dt_) return unsupported("residual of another type than the output");
          plan->z_to_internal = reorder(plan->user_z, pd.dst_desc());
        }
      } else if (has_z_ && z_dt_ != y_dt_) {
        return unsupported("residual of another type than the output");
      }
      if (plan->tap_packed && plan->reorder_src) return unsupported("packed taps in another layout");
      plan->weights = packed_weights(pd.weights_desc(), plan->tap_packed, split);
      if (!plan->reorder_src && !plan->reorder_dst) {
        auto a = std::make_unique<CachedArgs>();
        a->src = memory(plan->user_src, dnnl_engine(), nullptr);
        a->dst = memory(plan->user_dst, dnnl_engine(), nullptr);
        a->scratchpad = memory(pd.scratchpad_desc(), dnnl_engine(), nullptr);
        a->map = {{DNNL_ARG_SRC, a->src}, {DNNL_ARG_WEIGHTS, *plan->weights}, {DNNL_ARG_DST, a->dst},
                  {DNNL_ARG_SCRATCHPAD, a->scratchpad}};
        if (dst_zp_ != 0) a->map[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST] = cpu::s32_scalar_memory(&dst_zp_);
        if (src_zp) a->map[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = cpu::s32_scalar_memory(&src_zp_);
        if (b_.defined()) a->map[DNNL_ARG_BIAS] = wrap(plan->bias_md, b_);
        plan->args = std::move(a);
      }
      return Status::ok();
    };
    RETURN_IF_ERROR(cpu::dnnl_call(node_, plan_primitives));
    plan->in_dims = x_dims;
    plan->out_dims = channels_last_ ? std::vector<int64_t>{yd[0], yd[2], yd[3], yd[1]} : yd;
    return Status::ok();
  }

  static const char* impl_env() {
    const char* e = env_value("FERRY_QCONV_IMPL");
    return e && *e ? e : "auto";
  }
  static bool forced_impl() {
    const std::string e = impl_env();
    return e != "auto" && e != "first";
  }

  // oneDNN 2.6 ranks brgconv_1x1 / brgconv first for every int8 convolution here. Measured per node in
  // ResNet-50's graph (both alternating run by run, thread CPU time, medians of 130-190 runs per node, AMD
  // EPYC Zen 5, 1 thread), jit_int8_1x1 / jit_int8 run faster on the large images with few channels:
  //  - 1x1 with the residual sum post-op on a short reduction (K <= 128; its epilogue is the larger half
  //    of the work): layer1 conv3 (56x56, 64 -> 256) 0.85-0.93x, layer2 conv3 (28x28, 128 -> 512) ~0.96x;
  //  - 3x3 on <= 128 channels, output >= 28x28 (layer1/layer2 conv2): 0.91-1.01x, mean ~0.96x (3 runs);
  //  - the tap-packed few-channel convolution (conv1 as a 7x1 on 24 channels, init_tap_packing): 0.92x
  //    (0.42-0.44 against 0.46-0.49 ms, ferry profile, 5 alternating pairs).
  // Not elsewhere: on the 1x1s without the sum, with longer reductions, and on 14x14 / 7x7 images they are
  // level or 3-15% slower. Same integer sums and f32 epilogue steps: the same output bytes.
  // FERRY_QCONV_IMPL: unset or "auto": this rule; "first": oneDNN's first choice everywhere; any other
  // text: the first implementation whose name contains it, everywhere (a node without one is left to the
  // reference kernel: for tests and per-layer timing). Read when a plan is made.
  std::string preferred_impl(const std::vector<int64_t>& xd, const std::vector<int64_t>& yd, const memory::dims& strides,
                             bool tap_packed) const {
    const std::string e = impl_env();
    if (e == "first") return "";
    if (e != "auto") return e;
    if (tap_packed) return "jit_int8:";
    if (!channels_last_ || group_ != 1 || w_.rank() != 4 || yd.size() != 4 || xd[1] > 128 ||
        yd[2] * yd[3] < 28 * 28)
      return "";
    bool pointwise = w_.dim(2) == 1 && w_.dim(3) == 1;
    for (int64_t s : strides) pointwise = pointwise && s == 1;
    if (pointwise) return has_z_ ? "jit_int8_1x1" : "";
    return w_.dim(2) == 3 && w_.dim(3) == 3 ? "jit_int8:" : "";
  }

  // Few input channels (the first convolution of an image network: 3): oneDNN's int8 kernels multiply
  // 4 channels at a time, so a 7x7 kernel on 3 channels runs 49 taps at 3/4 use (and with the u8 input's
  // zero point, on the older jit_int8 path). Packing the KW taps of a row into channels instead,
  //   P[n][r][ow][kw*C + c] = x[n][r - pad_top][ow*SW - pad_left + kw][c]   (the zero point outside x),
  // turns it into a KHx1 convolution on round_up(KW*C, 4) channels without padding or zero point:
  // the bias takes the zero point's share, b[m] - zp * sum(w[m]), so the integer sums are the same.
  // (`ferry compile` stores the packed copy's oneDNN layout too: compiler/prepack.cpp.)
  // ResNet-50's conv1: oneDNN alone 0.64 ms instead of 0.77; the node with the packing 0.70 ms, was 0.80.
  void init_tap_packing(std::vector<int64_t>* bias) {
    const int64_t C = w_.dim(1), KH = w_.dim(2), KW = w_.rank() == 4 ? w_.dim(3) : 0;
    if (split_ || flip_ || !channels_last_ || group_ != 1 || w_.rank() != 4 || C >= 4 || (KW * C + 3) / 4 * 4 > kTapBytes) return;
    if ((KW * C + 3) / 4 * 4 >= KW * 4) return;  // only where fewer multiply-adds run (not 3x3 on 3 channels)
    for (int64_t d : attrs_.dilations)
      if (d != 1) return;
    const int64_t M = w_.dim(0), CP = (KW * C + 3) / 4 * 4;
    Tensor wp = Tensor::allocate(DType::kI8, {M, CP, KH, 1});
    std::memset(wp.mutable_raw(), 0, static_cast<size_t>(wp.nbytes()));
    std::vector<int64_t> b(static_cast<size_t>(M), 0);
    if (!bias->empty()) b = *bias;
    const int8_t* w = w_.data<int8_t>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int8_t v = w[((m * C + c) * KH + kh) * KW + kw];
            wp.mutable_data<int8_t>()[((m * CP + kw * C + c) * KH + kh)] = v;
            b[m] -= static_cast<int64_t>(src_zp_) * v;
          }
    // The accumulator and the bias stay exact in f32 (oneDNN adds them there).
    if (KH * KW * C * 255 * 128 > (int64_t{1} << 24)) return;
    for (int64_t v : b)
      if (std::abs(v) > (int64_t{1} << 24)) return;
    tap_packed_ = true;
    tap_channels_ = CP;
    w_packed_ = std::move(wp);
    *bias = std::move(b);
  }

  // P (see init_tap_packing) from the NHWC x; `p` has kTapBytes bytes of slack at the end.
  void pack_taps(const Plan& plan, const uint8_t* x, uint8_t* p) const {
    const int64_t N = plan.x_dims[0], H = plan.x_dims[1], W = plan.x_dims[2], C = plan.x_dims[3];
    const int64_t KW = w_.dim(3), SW = attrs_.strides[1], CP = tap_channels_, Hp = plan.tap_rows, OW = plan.out_dims[2];
    const int64_t x_bytes = N * H * W * C;
    const uint8_t zp = static_cast<uint8_t>(src_zp_);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t r = 0; r < Hp; ++r) {
        uint8_t* d = p + (n * Hp + r) * OW * CP;
        const int64_t ih = r - plan.pad_top;
        if (ih < 0 || ih >= H) {
          std::memset(d, zp, static_cast<size_t>(OW * CP));
          continue;
        }
        const int64_t row = (n * H + ih) * W * C;
        // Interior pixels [lo, hi): every tap inside x and kTapBytes readable from the first one.
        const int64_t pl = plan.pad_left;
        int64_t lo = (pl + SW - 1) / SW, hi = OW;
        while (hi > lo && ((hi - 1) * SW - pl + KW > W || row + ((hi - 1) * SW - pl) * C + kTapBytes > x_bytes)) --hi;
        for (int64_t ow = 0; ow < OW; ++ow, d += CP) {
          if (ow == lo && lo < hi) {
            // kTapBytes at once (the bytes past KW*C meet zero weights; the next pixel overwrites them)
            const uint8_t* src = x + row + (lo * SW - pl) * C;
            for (; ow < hi; ++ow, d += CP, src += SW * C) std::memcpy(d, src, kTapBytes);
            if (ow == OW) break;
          }
          const int64_t iw0 = ow * SW - pl;
          for (int64_t kw = 0; kw < KW; ++kw)
            for (int64_t c = 0; c < C; ++c) {
              const int64_t iw = iw0 + kw;
              d[kw * C + c] = iw >= 0 && iw < W ? x[row + iw * C + c] : zp;
            }
          for (int64_t i = KW * C; i < CP; ++i) d[i] = 0;
        }
      }
  }

  memory::dims weight_dims(bool tap_packed, bool split) const {
    if (tap_packed) return {w_.dim(0), tap_channels_, w_.dim(2), 1};
    memory::dims d;
    const int64_t I = w_.dim(1) * (split ? 2 : 1);
    if (group_ > 1) d = {group_, w_.dim(0) / group_, I};
    else d = {w_.dim(0), I};
    d.insert(d.end(), w_.dims().begin() + 2, w_.dims().end());
    return d;
  }

  // The weights in `want`'s layout, reordered once per layout (under the plan cache's lock), or the
  // bytes `ferry compile` stored on the node.
  const memory* packed_weights(const memory::desc& want, bool tap_packed, bool split) {
    if (tap_packed)
      return packed_.get(node_, "dnnl_int8_conv_taps", want, [this] {
        return memory(memory::desc(weight_dims(true, false), memory::data_type::s8, tag::oihw), dnnl_engine(),
                      const_cast<void*>(w_packed_.raw()));
      });
    return packed_.get(node_, split ? "dnnl_int8_conv_split" : "dnnl_int8_conv", want, [this, split] {
      if (split)  // made here where the repair runs unsplit and some input saturates too many outputs
        std::call_once(split_once_, [this] {
          if (w_split_.defined()) return;
          std::vector<int64_t> d = w_.dims();
          d[1] *= 2;
          w_split_ = cpu::split_weights(w_, w_.dim(0), std::move(d));
        });
      const memory::dims wd = weight_dims(false, split);
      const tag t = group_ > 1 ? (wd.size() == 4 ? tag::goiw : wd.size() == 5 ? tag::goihw : tag::goidhw)
                               : (wd.size() == 3 ? tag::oiw : wd.size() == 4 ? tag::oihw : tag::oidhw);
      return memory(memory::desc(wd, memory::data_type::s8, t), dnnl_engine(),
                    const_cast<void*>(split ? w_split_.raw() : w_.raw()));
    });
  }

  Node node_;
  KernelFn fallback_;
  DType x_dt_ = DType::kU8, y_dt_ = DType::kU8, z_dt_ = DType::kU8;
  Tensor w_, b_;
  std::vector<double> fbias_;  // a float bias in accumulator units (B / (x_scale * w_scale[m]))
  bool float_y_ = false, clip_ = false;
  DType yq_dt_ = DType::kU8;  // output 1 (yq), where the node has one
  float yq_scale_ = 1, yq_zp_ = 0;
  std::string act_;  // "Silu" / "Sigmoid" on a float output: oneDNN's swish / logistic post-op
  float clip_lo_ = 0, clip_hi_ = 0;  // conv_min / conv_max in output units
  std::vector<float> scales_;
  float xz_ = 0, yz_ = 0, mz_ = 0, mlo_ = 0, mhi_ = 0, zz_ = 0, mid_to_y_ = 1, z_to_y_ = 0;
  int32_t src_zp_ = 0, dst_zp_ = 0;  // read by oneDNN through zp_memory at run time (never written then)
  bool has_mid_ = false, has_z_ = false, conv_relu_ = false, relu_ = false, channels_last_ = false;
  int64_t group_ = 1;
  static constexpr int64_t kTapBytes = 32;  // the most packed channels (one copy per output pixel)
  bool tap_packed_ = false;                 // see init_tap_packing
  bool split_ = false;                      // see int8_pairs_saturate: the weights as [w1; w2] per output channel
  bool flip_ = false;                       // see int8_pairs_saturate: an s8 source run as u8
  Tensor w_split_;
  std::once_flag split_once_;
  cpu::SaturatingPairs pairs_;            // the weight pairs that may saturate, where the repair runs
  std::vector<int32_t> fix_ibias_;        // the op's int32 bias, or its float bias (real units), for repair
  std::vector<float> fix_fbias_, fix_real_;
  float fix_s1_ = 1;
  int64_t tap_channels_ = 0;
  Tensor w_packed_;
  SpatialAttrs attrs_;
  cpu::PlanCache<Plan> plans_, split_plans_;  // split_plans_: where the repair gives way (pairs_.find)
  cpu::PackedWeightsCache packed_;
};

}  // namespace

void register_cpu_dnnl_int8_conv_kernels(CpuKernelTable& t) { t.add("com.ferry", "QConvFused", cpu::make_if_init<DnnlQConvKernel>); }

}  // namespace ferry
