// oneDNN int8 convolution for com.ferry.QConvFused (and matmul for QMatMulFused, below) (src/ops/quantize_fused.cpp): u8/s8 source, s8
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
// on a float output (activation) oneDNN's eltwise swish / logistic (its exp: a few ulp off the reference's).
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
// Also here: 8-bit MaxPool / com.ferry.NhwcMaxPool (oneDNN pooling on u8/s8; the qdq_fusion pass makes
// them of DQ -> MaxPool -> Q), QuantizeLinear / DequantizeLinear with a per-tensor scale (the region's
// entry and exit) and the Transposes of 8-bit tensors at its edges (a oneDNN reorder).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/dnnl_plan_cache.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/node_attrs.h"
#include "backends/cpu/prepacked.h"
#include "backends/cpu/vec_math.h"
#include "common/env_switch.h"
#include "ops/conv_pool_util.h"
#include "ops/quantize_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry {
namespace {

using cpu::NodeAttrs;
using cpu::dnnl_engine;
using cpu::dnnl_stream;
using cpu::wrap;
using dnnl::memory;
using tag = dnnl::memory::format_tag;

enum : size_t { kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kYScale, kYZp, kB, kZ, kZScale, kZZp, kMidScale, kMidZp };

memory::data_type int8_type(DType t) {
  return t == DType::kU8 ? memory::data_type::u8 : t == DType::kF32 ? memory::data_type::f32 : memory::data_type::s8;
}

bool has(const Node& n, size_t i) { return n.inputs.size() > i && !n.inputs[i].empty(); }

// Without VNNI (AVX2; AVX-512 before VNNI) oneDNN multiplies u8 x s8 with vpmaddubsw, which adds each
// pair of products in int16 with saturation (oneDNN's "Nuances of int8 computations"): 255 * 127 * 2 >
// 32767, so large inputs on large weights silently lose the excess (mlp.int8.onnx on an AVX2 EPYC:
// max |cpu - cpu-ref| 0.165, cosine to fp32 0.9960 against the reference's 0.9996; weights clipped to
// [-64, 64] gave bit-identical outputs). There, where a weight is outside [-64, 64], the conv and matmul
// split each weight w into w1 = w >> 1 and w2 = w - w1 (both in [-64, 64]: no pair exceeds 255 * 64 * 2 =
// 32640) and run one primitive on twice the reduction, [x, x] against [w1; w2] per group: the same exact
// integer sum (x * w1 + x * w2 = x * w) for one copy of the source per run. An s8 source there is made
// u8 in that copy (x + 128, the zero point + 128: the same x - zp), as oneDNN's s8 x s8 convolutions
// without VNNI halve the weights (scale_adjust 0.5, rounded): one step off in FullRangeWeightsExactWithoutVnni.
// (Depthwise convolutions are not split: oneDNN's depthwise kernels widen to 32 bits before multiplying.) With VNNI (vpdpbusd adds
// in int32) or AMX nothing changes. The effective ISA honours ONEDNN_MAX_CPU_ISA. Read once.
bool int8_pairs_saturate() {
  static const bool v = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    // the VNNI bits of dnnl_cpu_isa_avx512_core_vnni (0x67, in bf16 and amx too) and dnnl_cpu_isa_avx2_vnni (0x407)
    return (isa & 0x40u) == 0 && (isa & 0x400u) == 0;
  }();
  return v;
}

// Whether `w` needs the split above on this host.
bool needs_split(const Tensor& w) {
  if (!int8_pairs_saturate()) return false;
  const int8_t* v = w.data<int8_t>();
  for (int64_t i = 0; i < w.numel(); ++i)
    if (v[i] > 64 || v[i] < -64) return true;
  return false;
}

// w viewed as [outer, block] -> [outer, 2 * block]: each block's w >> 1, then w - (w >> 1); shaped `dims`.
Tensor split_weights(const Tensor& w, int64_t outer, std::vector<int64_t> dims) {
  const int64_t block = w.numel() / outer;
  Tensor s = Tensor::allocate(DType::kI8, std::move(dims));
  const int8_t* src = w.data<int8_t>();
  int8_t* d = s.mutable_data<int8_t>();
  for (int64_t o = 0; o < outer; ++o, src += block, d += 2 * block)
    for (int64_t i = 0; i < block; ++i) {
      const int w1 = src[i] >> 1;  // arithmetic shift: floor(w / 2), in [-64, 63]
      d[i] = static_cast<int8_t>(w1);
      d[block + i] = static_cast<int8_t>(src[i] - w1);  // in [-64, 64]
    }
  return s;
}

// x viewed as [blocks, block] -> [blocks, copies * block]: each block `copies` times (2: the source of
// the split), s8 made u8 (x + 128: the top bit flipped) where `flip`.
void copy_blocks(const uint8_t* x, int64_t blocks, int64_t block, int copies, bool flip, uint8_t* d) {
  for (int64_t b = 0; b < blocks; ++b, x += block)
    for (int c = 0; c < copies; ++c, d += block) {
      if (!flip) {
        std::memcpy(d, x, static_cast<size_t>(block));
        continue;
      }
      for (int64_t i = 0; i < block; ++i) d[i] = static_cast<uint8_t>(x[i] ^ 0x80u);
    }
}

// A scalar constant input as float (scales) or integer (zero points); false when not constant.
bool scalar(const Graph& g, const Node& n, size_t i, float* v) {
  const Tensor* t = cpu::constant_input(g, n, i);
  if (!t || t->numel() != 1) return false;
  *v = t->dtype() == DType::kF32 ? t->data<float>()[0] : static_cast<float>(t->get_int64(0));
  return t->dtype() == DType::kF32 || t->dtype() == DType::kU8 || t->dtype() == DType::kI8;
}

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
    split_ = !(w_.dim(1) == 1 && G == M) && needs_split(w_);
    if (has(node_, kWZp)) {
      const Tensor* wz = cpu::constant_input(graph, node_, kWZp);
      if (!wz) return false;
      for (int64_t i = 0; i < wz->numel(); ++i)
        if (wz->get_int64(i) != 0) return false;
    }
    const TensorType* xt = graph.find_type(node_.inputs[kX]);
    if (!xt || (xt->dtype != DType::kU8 && xt->dtype != DType::kI8)) return false;
    x_dt_ = xt->dtype;
    float_y_ = !has(node_, kYScale) && !has(node_, kYZp);
    float xs = 0, ys = 1, s1 = 0;
    if (float_y_) {
      y_dt_ = DType::kF32;
      if (has(node_, kZ) || has(node_, kMidScale) || !scalar(graph, node_, kXScale, &xs) || !scalar(graph, node_, kXZp, &xz_))
        return false;
    } else {
      const Tensor* yzt = cpu::constant_input(graph, node_, kYZp);
      if (!yzt || !is_8bit(yzt->dtype())) return false;
      y_dt_ = yzt->dtype();
      if (!scalar(graph, node_, kXScale, &xs) || !scalar(graph, node_, kXZp, &xz_) || !scalar(graph, node_, kYScale, &ys) ||
          !scalar(graph, node_, kYZp, &yz_))
        return false;
    }
    s1 = ys;
    has_mid_ = has(node_, kMidScale);
    if (has_mid_) {
      const Tensor* mzt = cpu::constant_input(graph, node_, kMidZp);
      if (!scalar(graph, node_, kMidScale, &s1) || !scalar(graph, node_, kMidZp, &mz_) || !mzt ||
          !quant_range(mzt->dtype(), &mlo_, &mhi_))
        return false;
      mid_to_y_ = s1 / ys;
    }
    has_z_ = has(node_, kZ);
    if (has_z_) {
      float zs = 0;
      const TensorType* zt = graph.find_type(node_.inputs[kZ]);
      if (!zt || !is_8bit(zt->dtype) || !scalar(graph, node_, kZScale, &zs) || !scalar(graph, node_, kZZp, &zz_)) return false;
      z_dt_ = zt->dtype;
      z_to_y_ = zs / ys;
    }
    scales_.resize(static_cast<size_t>(M));
    for (int64_t m = 0; m < M; ++m) scales_[m] = xs * ws->data<float>()[ws->numel() == 1 ? 0 : m] / s1;
    std::vector<int64_t> bias;
    if (has(node_, kB)) {
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
      if (has(node_, kB)) {
        const Tensor* b = cpu::constant_input(graph, node_, kB);
        if (b->dtype() == DType::kI32) fix_ibias_.assign(b->data<int32_t>(), b->data<int32_t>() + M);
        else fix_fbias_.assign(b->data<float>(), b->data<float>() + M);
      }
    }
    if (split_) {
      std::vector<int64_t> d = w_.dims();
      d[1] *= 2;
      w_split_ = split_weights(w_, M, std::move(d));
    }
    flip_ = int8_pairs_saturate() && x_dt_ == DType::kI8;
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
      auto p = plans_.get(x_dims, [this](const std::vector<int64_t>& d, Plan* plan) { return make_plan(d, plan, split_); });
      if (!p.is_ok()) return false;  // this oneDNN has no int8 kernel for the node: the reference runs it
    }
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(kX);
    if (x.dtype() != x_dt_ || x.rank() != w_.rank()) return fallback_(ctx);
    auto plan = plans_.get(x.dims(), [this](const std::vector<int64_t>& d, Plan* p) { return make_plan(d, p, split_); });
    if (!plan.is_ok()) return fallback_(ctx);
    const Plan* p = plan.value();
    if (has_z_ && (ctx.input(kZ).dims() != p->out_dims || ctx.input(kZ).dtype() != z_dt_)) return fallback_(ctx);
    // The sum post-op reads dst: with z of y's type, dst may be z's own buffer (the memory plan decides).
    const bool over = has_z_ && z_dt_ == y_dt_;
    std::vector<int64_t> fix;  // the outputs a saturated pair touched (init_fixup), NHWC offsets
    std::vector<int32_t> fix_z;
    if (!fixup_.empty() && x.numel() > 0) {
      if (!find_saturated(*p, x.data<uint8_t>(), y_numel(*p) / 256, &fix)) {  // many: the split
        auto sp = split_plans_.get(x.dims(), [this](const std::vector<int64_t>& d, Plan* q) { return make_plan(d, q, true); });
        if (!sp.is_ok()) return fallback_(ctx);
        p = sp.value();
        fix.clear();
      }
      if (has_z_) {  // read before the run: the output may be z's own buffer
        const Tensor& z = ctx.input(kZ);
        for (int64_t i : fix)
          fix_z.push_back(z_dt_ == DType::kU8 ? z.data<uint8_t>()[i] : static_cast<int32_t>(z.data<int8_t>()[i]));
      }
    }
    ASSIGN_OR_RETURN(Tensor * y, over ? ctx.allocate_output_over(0, kZ, y_dt_, p->out_dims)
                                      : ctx.allocate_output(0, y_dt_, p->out_dims, false));
    if (!fix.empty()) {
      RETURN_IF_ERROR(run_onednn(ctx, x, p, y));
      repair(*p, x.data<uint8_t>(), fix, fix_z, y);
      return Status::ok();
    }
    return run_onednn(ctx, x, p, y);
  }

 private:
  Status run_onednn(KernelContext& ctx, const Tensor& x, const Plan* p, Tensor* y) {
    const void* src_data = x.raw();
    if ((p->split || flip_) && x.numel() > 0) {  // [x, x] per group along the channels; s8 as u8 (int8_pairs_saturate)
      auto* buf = static_cast<uint8_t*>(cpu::scratch_data(p->user_src.get_size(), cpu::ScratchSlot::kSplit));
      const int64_t C = channels_last_ ? x.dim(3) : x.dim(1);
      const int64_t inner = channels_last_ ? 1 : x.numel() / (x.dim(0) * C);
      const int64_t block = C / group_ * inner;
      copy_blocks(static_cast<const uint8_t*>(x.raw()), x.numel() / block, block, p->split ? 2 : 1, flip_, buf);
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

  // ---- Unsplit with repair (int8_pairs_saturate) ----
  // vpmaddubsw adds the products of input channels 2j and 2j + 1 of one tap (oneDNN's int8 convolutions
  // group input channels in fours per tap; a gemm im2col reduction orders (kh, kw, c): the same pairs
  // where C % 4 == 0), and saturates that pair's sum to int16. A pair can only saturate where its two
  // weights have one sign and |w0| + |w1| > 128 (255 * 128 = 32640 fits): ResNet-50's default file has
  // 1-7% such pairs in every layer, so no layer runs unsplit by the bound alone. It saturates only where
  // its inputs are large too (a0 + a1 >= 256 at the least): on ResNet-50's ReLU outputs ~1% of the
  // values are >= 128 and at most 0.003% of the outputs after the stem are touched
  // (bench/int8_pair_saturation.py, docs/performance.md "INT8"). So the
  // convolution runs unsplit (half the split's multiply-adds), find_saturated lists every output a
  // saturating pair feeds (a superset is harmless), and repair recomputes those outputs exactly, in the
  // reference's order (its integer sum and f32 epilogue), over what oneDNN wrote (ResNet-50 at 1 thread:
  // 52 CPU ms per run against 93 split, the same outputs). Only on a source with zero point 0, a Relu's
  // output whose values >= 128 are its tail: MobileNetV2's expansions read residual sums (zero point
  // ~128, half the values >= 128), 0.7-3% of their outputs touched, and the scan and repair there cost
  // more than the split saves (12.2 CPU ms per run against 10.5). Where a run touches more than 1/256 of
  // the outputs anyway (adversarial inputs), it takes the split (made then).
  struct Viol {
    int32_t m;
    int16_t w0, w1;
  };

  void init_fixup(const Tensor* ws, float xs, float s1) {
    const int64_t M = w_.dim(0), C = w_.dim(1), KH = w_.dim(2), KW = w_.dim(3), J = C / 2;
    const int8_t* w = w_.data<int8_t>();
    std::vector<std::vector<Viol>> v(static_cast<size_t>(KH * KW * J));
    bool any = false;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < J; ++j)
        for (int64_t t = 0; t < KH * KW; ++t) {
          const int w0 = w[(m * C + 2 * j) * KH * KW + t], w1 = w[(m * C + 2 * j + 1) * KH * KW + t];
          if ((w0 > 0 && w1 > 0 && w0 + w1 > 128) || (w0 < 0 && w1 < 0 && w0 + w1 < -128)) {
            v[static_cast<size_t>(t * J + j)].push_back({static_cast<int32_t>(m), static_cast<int16_t>(w0), static_cast<int16_t>(w1)});
            any = true;
          }
        }
    if (!any) return;  // no pair can saturate: exact unsplit
    fixup_ = std::move(v);
    fix_pair_.assign(static_cast<size_t>(J), 0);
    for (int64_t j = 0; j < J; ++j)
      for (int64_t t = 0; t < KH * KW; ++t) fix_pair_[j] |= !fixup_[static_cast<size_t>(t * J + j)].empty();
    fix_real_.resize(static_cast<size_t>(M));
    for (int64_t m = 0; m < M; ++m) fix_real_[m] = xs * ws->data<float>()[ws->numel() == 1 ? 0 : m];
    fix_s1_ = s1;
  }

  int64_t y_numel(const Plan& p) const {
    int64_t n = 1;
    for (int64_t d : p.out_dims) n *= d;
    return n;
  }

  // Every output (NHWC offset) some pair of `x` (NHWC u8) may saturate in, sorted, once each; false
  // (stopped early) where more than `limit` are.
  bool find_saturated(const Plan& p, const uint8_t* x, int64_t limit, std::vector<int64_t>* out) const {
    const int64_t N = p.in_dims[0], H = p.in_dims[1], W = p.in_dims[2], C = p.in_dims[3];
    const int64_t OH = p.out_dims[1], OW = p.out_dims[2], M = p.out_dims[3], KH = w_.dim(2), KW = w_.dim(3), J = C / 2;
    std::vector<int32_t> js(static_cast<size_t>(J));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t ih = 0; ih < H; ++ih)
        for (int64_t iw = 0; iw < W; ++iw) {
          const uint8_t* a = x + ((n * H + ih) * W + iw) * C;
          const int64_t large = large_pairs(a, C, js.data());
          for (int64_t k = 0; k < large; ++k) {
            const int64_t j = js[k];
            if (!fix_pair_[j]) continue;
            const int a0 = a[2 * j], a1 = a[2 * j + 1];
            for (int64_t kh = 0; kh < KH; ++kh) {
              const int64_t th = ih + p.pad[0] - kh * p.dil[0];  // oh * stride
              if (th < 0 || th % p.stride[0] != 0 || th / p.stride[0] >= OH) continue;
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t tw = iw + p.pad[1] - kw * p.dil[1];
                if (tw < 0 || tw % p.stride[1] != 0 || tw / p.stride[1] >= OW) continue;
                const int64_t base = ((n * OH + th / p.stride[0]) * OW + tw / p.stride[1]) * M;
                for (const Viol& v : fixup_[static_cast<size_t>((kh * KW + kw) * J + j)]) {
                  const int s = a0 * v.w0 + a1 * v.w1;
                  if (s > 32767 || s < -32768) out->push_back(base + v.m);
                }
              }
            }
          }
          if (static_cast<int64_t>(out->size()) > 2 * limit) return false;
        }
    std::sort(out->begin(), out->end());
    out->erase(std::unique(out->begin(), out->end()), out->end());
    return static_cast<int64_t>(out->size()) <= limit;
  }

  // The pairs j (channels 2j, 2j + 1) of the C bytes at `a` whose sum is 256 or more (the others cannot
  // saturate: 255 * 128 fits in int16), into js; their count.
  static int64_t large_pairs(const uint8_t* a, int64_t C, int32_t* js) {
    int64_t c = 0, n = 0;
#if defined(__x86_64__)
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx2) {
      n = large_pairs_avx2(a, C / 32 * 32, js);
      c = C / 32 * 32;
    }
#endif
    for (; c + 1 < C; c += 2)
      if (a[c] + a[c + 1] >= 256) js[n++] = static_cast<int32_t>(c / 2);
    return n;
  }

#if defined(__x86_64__)
  __attribute__((target("avx2"))) static int64_t large_pairs_avx2(const uint8_t* a, int64_t bytes, int32_t* js) {
    const __m256i ones = _mm256_set1_epi8(1), lim = _mm256_set1_epi16(255);
    int64_t n = 0;
    for (int64_t i = 0; i < bytes; i += 32) {
      const __m256i s = _mm256_maddubs_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)), ones);  // a0 + a1 <= 510
      auto mask = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpgt_epi16(s, lim)));  // 2 bits per pair
      while (mask != 0) {
        const int bit = __builtin_ctz(mask);
        js[n++] = static_cast<int32_t>((i + bit) / 2);
        mask &= ~(3u << bit);
      }
    }
    return n;
  }
#endif

  // The listed outputs recomputed as the reference does (ops/quantize_fused.cpp k_qconv_fused).
  void repair(const Plan& p, const uint8_t* x, const std::vector<int64_t>& fix, const std::vector<int32_t>& fix_z,
              Tensor* y) const {
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
      const memory::data_type xdt = int8_type(flip_ ? DType::kU8 : x_dt_), ydt = int8_type(y_dt_), zdt = int8_type(z_dt_);
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
          w_split_ = split_weights(w_, w_.dim(0), std::move(d));
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
  std::vector<std::vector<Viol>> fixup_;  // per (tap, pair j): the output channels whose pair may saturate
  std::vector<uint8_t> fix_pair_;         // per pair j: any tap has one
  std::vector<int32_t> fix_ibias_;        // the op's int32 bias, or its float bias (real units), for repair
  std::vector<float> fix_fbias_, fix_real_;
  float fix_s1_ = 1;
  int64_t tap_channels_ = 0;
  Tensor w_packed_;
  SpatialAttrs attrs_;
  cpu::PlanCache<Plan> plans_, split_plans_;  // split_plans_: where the repair gives way (find_saturated)
  cpu::PackedWeightsCache packed_;
};

// ---- QMatMulFused: oneDNN int8 matmul, a as [rows, K] x packed b [K, N] ------------------------

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
    split_ = needs_split(b_);
    if (split_) b_split_ = split_weights(b_, 1, {2 * b_.dim(0), N});  // [b1; b2]
    if (bs->numel() != 1 && bs->numel() != N) return false;
    if (has(node_, kBZp)) {
      const Tensor* bz = cpu::constant_input(graph, node_, kBZp);
      if (!bz) return false;
      for (int64_t i = 0; i < bz->numel(); ++i)
        if (bz->get_int64(i) != 0) return false;
    }
    const TensorType* at = graph.find_type(node_.inputs[kA]);
    const bool float_y = !has(node_, kYScale) && !has(node_, kYZp);  // the dequantization in the epilogue
    const Tensor* yzt = float_y ? nullptr : cpu::constant_input(graph, node_, kYZp);
    if (!at || !is_8bit(at->dtype) || (!float_y && (!yzt || !is_8bit(yzt->dtype())))) return false;
    a_dt_ = at->dtype;
    flip_ = int8_pairs_saturate() && a_dt_ == DType::kI8;
    y_dt_ = float_y ? DType::kF32 : yzt->dtype();
    float as = 0, az = 0, ys = 1, yz = 0;
    if (!scalar(graph, node_, kAScale, &as) || !scalar(graph, node_, kAZp, &az) ||
        (!float_y && (!scalar(graph, node_, kYScale, &ys) || !scalar(graph, node_, kYZp, &yz))))
      return false;
    src_zp_ = static_cast<int32_t>(az) + (flip_ ? 128 : 0);  // an s8 source made u8 (int8_pairs_saturate)
    dst_zp_ = static_cast<int32_t>(yz);
    scales_.resize(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) scales_[n] = as * bs->data<float>()[bs->numel() == 1 ? 0 : n] / ys;
    if (has(node_, kBias)) {
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
      copy_blocks(static_cast<const uint8_t*>(a.raw()), a.numel() / b_.dim(0), b_.dim(0), split_ ? 2 : 1, flip_, buf);
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
    std::vector<int64_t> in_dims;  // x's (NHWC); stride, dil, pad: the spatial geometry (repair)
    std::array<int64_t, 2> stride{1, 1}, dil{1, 1}, pad{0, 0};
  };

  Status make_plan(const std::vector<int64_t>& a_dims, Plan* plan) {
    const int64_t K = b_.dim(0), N = b_.dim(1);
    if (a_dims.size() < 2 || a_dims.back() != K) return unsupported("inner dimension mismatch");
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < a_dims.size(); ++i) rows *= a_dims[i];
    if (rows == 0) return unsupported("empty");
    const auto plan_primitives = [&] {
      const int64_t K2 = split_ ? 2 * K : K;
      plan->src = memory::desc({rows, K2}, int8_type(flip_ ? DType::kU8 : a_dt_), tag::ab);
      plan->dst = memory::desc({rows, N}, int8_type(y_dt_), tag::ab);
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

// ---- 8-bit MaxPool (NCHW, or NHWC as com.ferry.NhwcMaxPool) ----------------------------------

class Int8MaxPoolKernel : public Kernel {
 public:
  Int8MaxPoolKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    channels_last_ = node_.op_type == "NhwcMaxPool";
    if (node_.outputs.size() != 1 || node_.inputs.size() != 1) return false;
    const TensorType* t = graph.find_type(node_.inputs[0]);
    if (!t || !is_8bit(t->dtype) || !t->shape) return false;
    dtype_ = t->dtype;
    rank_ = t->shape->rank();
    if (rank_ < 3 || rank_ > 5 || (channels_last_ && rank_ != 4)) return false;
    NodeAttrs a(node_);
    if (!read_spatial_attrs(a, rank_ - 2, nullptr, true, &attrs_).is_ok()) return false;
    for (int64_t d : attrs_.dilations)
      if (d != 1) return false;
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != dtype_ || x.rank() != rank_) return fallback_(ctx);
    auto plan = plans_.get(x.dims(), [this](const std::vector<int64_t>& d, Plan* p) { return make_plan(d, p); });
    if (!plan.is_ok()) return fallback_(ctx);
    const Plan* p = plan.value();
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype_, p->out_dims, false));
    return cpu::dnnl_call(node_, [&] {
      p->prim.execute(dnnl_stream(), {{DNNL_ARG_SRC, wrap(p->src, x)},
                                      {DNNL_ARG_DST, wrap(p->dst, *y)},
                                      {DNNL_ARG_SCRATCHPAD, cpu::scratch_memory(p->pd.scratchpad_desc(),
                                                                                cpu::ScratchSlot::kScratchpad)}});
      dnnl_stream().wait();
    });
  }

 private:
  struct Plan {
    dnnl::pooling_forward::primitive_desc pd;
    dnnl::pooling_forward prim;
    memory::desc src, dst;
    std::vector<int64_t> out_dims;
  };

  Status make_plan(const std::vector<int64_t>& x_dims, Plan* plan) {
    std::vector<int64_t> xd = x_dims;
    if (channels_last_) xd = {x_dims[0], x_dims[3], x_dims[1], x_dims[2]};
    for (int64_t d : xd)
      if (d == 0) return unsupported("empty");
    memory::dims kernel, strides, pad_l, pad_r;
    std::vector<int64_t> yd = {xd[0], xd[1]};
    NodeAttrs a(node_);
    for (int64_t i = 0; i < rank_ - 2; ++i) {
      AxisGeom g;
      RETURN_IF_ERROR(conv_pool_axis(a, attrs_, i, xd[2 + i], &g));
      const int64_t k = attrs_.kernel[i], s = attrs_.strides[i];
      const int64_t right = std::max(g.pad_end, (g.out - 1) * s + k - xd[2 + i] - g.pad_begin);  // ceil_mode
      if (g.pad_begin >= k || right >= k) return unsupported("padding as large as the window");
      kernel.push_back(k);
      strides.push_back(s);
      pad_l.push_back(g.pad_begin);
      pad_r.push_back(right);
      yd.push_back(g.out);
    }
    const auto plan_primitives = [&] {
      const auto t = cpu::plain_tag(xd.size(), channels_last_);
      plan->src = memory::desc(cpu::to_dnnl_dims(xd), int8_type(dtype_), t);
      plan->dst = memory::desc(cpu::to_dnnl_dims(yd), int8_type(dtype_), t);
      dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max, plan->src,
                                    plan->dst, strides, kernel, pad_l, pad_r);
      plan->pd = dnnl::pooling_forward::primitive_desc(d, cpu::concurrent_attr(), dnnl_engine());
      plan->prim = dnnl::pooling_forward(plan->pd);
    };
    RETURN_IF_ERROR(cpu::dnnl_call(node_, plan_primitives));
    plan->out_dims = channels_last_ ? std::vector<int64_t>{yd[0], yd[2], yd[3], yd[1]} : yd;
    return Status::ok();
  }

  Node node_;
  KernelFn fallback_;
  DType dtype_ = DType::kU8;
  int64_t rank_ = 0;
  bool channels_last_ = false;
  SpatialAttrs attrs_;
  cpu::PlanCache<Plan> plans_;
};

// ---- QGlobalAveragePool / NhwcQGlobalAveragePool (src/ops/quantize_fused.cpp) ------------------------
// The reference's integer semantics: per (n, c) the exact int32 sum of x minus S * x_zp, times
// x_scale / (y_scale * S), round half to even, plus y_zp, saturated. NHWC adds whole rows of C channels
// (vectorized u8 -> s32 adds); ResNet-50's 7x7x2048: the float path it replaces (Transpose to NCHW,
// DequantizeLinear, f32 GlobalAveragePool, QuantizeLinear) took ~60 us.

template <class T>
FERRY_VEC void add_rows_nhwc(const T* x, int64_t S, int64_t C, int32_t* acc) {
  for (int64_t c = 0; c < C; ++c) acc[c] = 0;
  for (int64_t i = 0; i < S; ++i, x += C)
    for (int64_t c = 0; c < C; ++c) acc[c] += x[c];
}

template <class T>
FERRY_VEC int32_t sum_plane(const T* x, int64_t S) {
  int32_t acc = 0;
  for (int64_t i = 0; i < S; ++i) acc += x[i];
  return acc;
}

class QGapKernel : public Kernel {
 public:
  QGapKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    nhwc_ = node_.op_type == "NhwcQGlobalAveragePool";
    if (node_.inputs.size() != 5 || node_.outputs.size() != 1) return false;
    const TensorType* xt = graph.find_type(node_.inputs[0]);
    const Tensor* yzt = cpu::constant_input(graph, node_, 4);
    const Tensor* xst = cpu::constant_input(graph, node_, 1);
    const Tensor* yst = cpu::constant_input(graph, node_, 3);
    if (!xt || !is_8bit(xt->dtype) || !yzt || !is_8bit(yzt->dtype()) || !xst || xst->dtype() != DType::kF32 || !yst ||
        yst->dtype() != DType::kF32)
      return false;
    x_dt_ = xt->dtype;
    y_dt_ = yzt->dtype();
    float xz = 0, yz = 0;
    if (!scalar(graph, node_, 1, &xs_) || !scalar(graph, node_, 2, &xz) || !scalar(graph, node_, 3, &ys_) ||
        !scalar(graph, node_, 4, &yz))
      return false;
    xz_ = static_cast<int32_t>(xz);
    yz_ = yz;
    return quant_range(y_dt_, &lo_, &hi_);
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != x_dt_ || x.rank() < 3 || (nhwc_ && x.rank() != 4)) return fallback_(ctx);
    const int64_t N = x.dim(0), C = nhwc_ ? x.dim(3) : x.dim(1);
    int64_t S = 1;
    std::vector<int64_t> od = x.dims();
    for (int64_t i = nhwc_ ? 1 : 2; i < (nhwc_ ? 3 : x.rank()); ++i) {
      S *= x.dim(i);
      od[i] = 1;
    }
    if (S >= (int64_t{1} << 23)) return fallback_(ctx);  // the int32 sum could overflow
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, y_dt_, od, false));
    const float scale = xs_ / (ys_ * static_cast<float>(S));
    const int32_t bias = -static_cast<int32_t>(S) * xz_;
    std::vector<int32_t> acc(static_cast<size_t>(N * C));
    const bool u8 = x_dt_ == DType::kU8;
    for (int64_t n = 0; n < N; ++n) {
      int32_t* a = acc.data() + n * C;
      if (nhwc_) {
        if (u8) add_rows_nhwc(x.data<uint8_t>() + n * S * C, S, C, a);
        else add_rows_nhwc(x.data<int8_t>() + n * S * C, S, C, a);
      } else {
        for (int64_t c = 0; c < C; ++c)
          a[c] = u8 ? sum_plane(x.data<uint8_t>() + (n * C + c) * S, S) : sum_plane(x.data<int8_t>() + (n * C + c) * S, S);
      }
    }
    for (int64_t i = 0; i < N * C; ++i) {
      const float q = quantize_value(static_cast<float>(acc[i] + bias) * scale, yz_, lo_, hi_);
      if (y_dt_ == DType::kU8) y->mutable_data<uint8_t>()[i] = static_cast<uint8_t>(q);
      else y->mutable_data<int8_t>()[i] = static_cast<int8_t>(q);
    }
    return Status::ok();
  }

 private:
  Node node_;
  KernelFn fallback_;
  bool nhwc_ = false;
  DType x_dt_ = DType::kU8, y_dt_ = DType::kU8;
  float xs_ = 1, ys_ = 1, yz_ = 0, lo_ = 0, hi_ = 255;
  int32_t xz_ = 0;
};

// ---- QuantizeLinear f32 -> u8/s8, per-tensor constant scale and zero point ---------------------

// The reference's formula (ops/quantize.cpp): saturate(round_half_even(x / scale) + zp), in f32.
FERRY_VEC void quantize_f32(const float* x, int64_t n, float scale, float zp, float lo, float hi, uint8_t* u8,
                            int8_t* s8) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] / scale;
    v = v != v ? 0.f : v;  // NaN quantizes like 0
    float q = std::nearbyint(v) + zp;
    q = q < lo ? lo : (q > hi ? hi : q);
    if (u8) u8[i] = static_cast<uint8_t>(q);
    else s8[i] = static_cast<int8_t>(q);
  }
}

#if defined(__x86_64__)
// The same where AVX-512 runs. The division is most of the time (ResNet-50's [1,3,224,224] input:
// ~45 us); x * (1 / scale) is within 2 ulp of x / scale, so the two round to the same integer unless
// the product lies within a few ulp of a half-integer (or is not finite, or so large that its ulp is
// >= 1/2): a vector of 16 holding such a value is divided instead. Bit for bit the reference
// (test: QdqFusion.QuantizeLinearNextToTies).
__attribute__((target("avx512f"))) void quantize_f32_avx512(const float* x, int64_t n, float scale, float zp, float lo,
                                                            float hi, uint8_t* u8, int8_t* s8) {
  const __m512 inv = _mm512_set1_ps(1.f / scale), vs = _mm512_set1_ps(scale), half = _mm512_set1_ps(0.5f);
  const __m512 one = _mm512_set1_ps(1.f), rel = _mm512_set1_ps(0x1p-19f), vzp = _mm512_set1_ps(zp);
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    __m512 r = _mm512_mul_ps(xv, inv);
    // (maskz forms throughout: gcc 12 warns that the unmasked ones read an undefined vector)
    const __m512 frac = _mm512_sub_ps(r, _mm512_maskz_roundscale_ps(0xFFFF, r, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    const __m512 d = _mm512_abs_ps(_mm512_sub_ps(frac, half));
    const __m512 tol = _mm512_mul_ps(_mm512_maskz_max_ps(0xFFFF, _mm512_abs_ps(r), one), rel);
    if (_mm512_cmp_ps_mask(d, tol, _CMP_GT_OQ) != 0xFFFF) r = _mm512_div_ps(xv, vs);  // NaN, inf: not GT
    r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r);                  // NaN quantizes like 0
    __m512 q = _mm512_add_ps(_mm512_maskz_roundscale_ps(0xFFFF, r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vzp);
    q = _mm512_maskz_min_ps(0xFFFF, _mm512_maskz_max_ps(0xFFFF, q, vlo), vhi);
    const __m128i b = _mm512_maskz_cvtepi32_epi8(0xFFFF, _mm512_maskz_cvtps_epi32(0xFFFF, q));  // integral and in range: the low byte
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u8 ? static_cast<void*>(u8 + i) : static_cast<void*>(s8 + i)), b);
  }
  if (i < n) quantize_f32(x + i, n - i, scale, zp, lo, hi, u8 ? u8 + i : nullptr, u8 ? nullptr : s8 + i);
}
#endif

class QuantizeKernel : public Kernel {
 public:
  QuantizeKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    if (node_.inputs.size() < 2 || node_.outputs.size() != 1) return false;
    const TensorType* xt = graph.find_type(node_.inputs[0]);
    if (!xt || xt->dtype != DType::kF32 || !scalar(graph, node_, 1, &scale_) || !(scale_ > 0)) return false;
    if (cpu::constant_input(graph, node_, 1)->dtype() != DType::kF32) return false;
    if (has(node_, 2)) {
      const Tensor* z = cpu::constant_input(graph, node_, 2);
      if (!z || z->numel() != 1 || !is_8bit(z->dtype())) return false;
      dtype_ = z->dtype();
      zp_ = static_cast<float>(z->get_int64(0));
    }
    return quant_range(dtype_, &lo_, &hi_);
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kF32) return fallback_(ctx);
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype_, x.dims(), false));
    const bool u8 = dtype_ == DType::kU8;
    auto* fn = quantize_f32;
#if defined(__x86_64__)
    static const bool avx512 = __builtin_cpu_supports("avx512f");
    if (avx512) fn = quantize_f32_avx512;
#endif
    fn(x.data<float>(), x.numel(), scale_, zp_, lo_, hi_, u8 ? y->mutable_data<uint8_t>() : nullptr,
       u8 ? nullptr : y->mutable_data<int8_t>());
    return Status::ok();
  }

 private:
  Node node_;
  KernelFn fallback_;
  DType dtype_ = DType::kU8;
  float scale_ = 1, zp_ = 0, lo_ = 0, hi_ = 255;
};

// ---- DequantizeLinear u8/s8 -> f32, per-tensor constant scale and zero point --------------------

// The reference's formula: float(x - zp) * scale.
template <class T>
FERRY_VEC void dequantize_8bit(const T* x, int64_t n, int32_t zp, float scale, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - zp) * scale;
}

class DequantizeKernel : public Kernel {
 public:
  DequantizeKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    if (node_.inputs.size() < 2 || node_.outputs.size() != 1) return false;
    const TensorType* xt = graph.find_type(node_.inputs[0]);
    const Tensor* st = cpu::constant_input(graph, node_, 1);
    if (!xt || !is_8bit(xt->dtype) || !st || st->dtype() != DType::kF32 || !scalar(graph, node_, 1, &scale_)) return false;
    dtype_ = xt->dtype;
    if (has(node_, 2)) {
      const Tensor* z = cpu::constant_input(graph, node_, 2);
      if (!z || z->numel() != 1 || z->dtype() != dtype_) return false;
      zp_ = static_cast<int32_t>(z->get_int64(0));
    }
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != dtype_) return fallback_(ctx);
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kF32, x.dims(), false));
    if (dtype_ == DType::kU8) dequantize_8bit(x.data<uint8_t>(), x.numel(), zp_, scale_, y->mutable_data<float>());
    else dequantize_8bit(x.data<int8_t>(), x.numel(), zp_, scale_, y->mutable_data<float>());
    return Status::ok();
  }

 private:
  Node node_;
  KernelFn fallback_;
  DType dtype_ = DType::kU8;
  float scale_ = 1;
  int32_t zp_ = 0;
};

// ---- Transpose of 8-bit tensors (the int8 region's NCHW <-> NHWC edges) as a oneDNN reorder --------

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
      plan->src = memory::desc(yd, int8_type(dtype_), ys);
      plan->dst = memory::desc(yd, int8_type(dtype_), cpu::plain_tag(r));
      plan->prim = cpu::make_reorder(plan->src, plan->dst);
    });
  }

  Node node_;
  KernelFn fallback_;
  DType dtype_ = DType::kU8;
  std::vector<int64_t> perm_;
  cpu::PlanCache<Plan> plans_;
};

template <class K>
StatusOr<std::unique_ptr<Kernel>> make_simple(const Node& node, const OpSchema& schema, const Graph& graph) {
  auto k = std::make_unique<K>(node, schema.kernel);
  if (!k->init(graph)) return std::unique_ptr<Kernel>();
  return std::unique_ptr<Kernel>(std::move(k));
}

StatusOr<std::unique_ptr<Kernel>> make_qconv(const Node& node, const OpSchema& schema, const Graph& graph) {
  auto k = std::make_unique<DnnlQConvKernel>(node, schema.kernel);
  if (!k->init(graph)) return std::unique_ptr<Kernel>();
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace

void register_cpu_dnnl_int8_kernels(CpuKernelTable& t) {
  t.add("com.ferry", "QConvFused", make_qconv);
  t.add("com.ferry", "QMatMulFused", make_simple<DnnlQMatMulKernel>);
  t.add("", "MaxPool", make_simple<Int8MaxPoolKernel>);  // 8-bit inputs only; dnnl_pool takes f32/bf16
  t.add("com.ferry", "NhwcMaxPool", make_simple<Int8MaxPoolKernel>);
  t.add("com.ferry", "QGlobalAveragePool", make_simple<QGapKernel>);
  t.add("com.ferry", "NhwcQGlobalAveragePool", make_simple<QGapKernel>);
  t.add("", "QuantizeLinear", make_simple<QuantizeKernel>);
  t.add("", "DequantizeLinear", make_simple<DequantizeKernel>);
  t.add("", "Transpose", make_simple<Int8TransposeKernel>);  // 8-bit only; data_movement takes the rest
}

}  // namespace ferry
