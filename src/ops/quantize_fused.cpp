// Op family 'quantize_fused' (domain com.ferry, opset 1): QConvFused (and QMatMulFused, QGlobalAveragePool / NhwcQGlobalAveragePool, QuantizeLinearToNhwc, QLookup, below), the node the qdq_fusion pass
// (src/passes/qdq_fusion.cpp) makes of a QDQ convolution region
//   DQ(x) , DQ(w per-channel) [, DQ(B int32)] -> Conv [-> Relu] [-> Q -> DQ] [-> Add(DQ(z))] [-> Relu] -> Q
// so that 8-bit tensors flow from one fused node to the next with no float tensor in between.
//
// Inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point (optional), y_scale, y_zero_point,
//   B (int32, or float in real units, optional), z, z_scale, z_zero_point (the residual, optional), mid_scale,
//   mid_zero_point (the Q/DQ pair between the convolution and the residual Add, optional), yq_scale,
//   yq_zero_point (a float output's QuantizeLinear: output 1, optional).
//   y_scale and y_zero_point both absent (""): y is float32, the dequantization in the epilogue
//   (DQ(x), DQ(w) -> Conv with no Q after: the plain structure of bench/int8_baseline.py); no mid then, and z,
//   if given, is a float32 residual without z_scale / z_zero_point (the plain structure's residual Add).
// Outputs: y, and with yq_scale / yq_zero_point (a float y only) yq = QuantizeLinear(y, yq_scale, yq_zero_point)
//   (the plain structure's residual block writes its float sum for the next residual and its 8-bit copy for
//   the next convolution in one node: the Q's own formula, saturate(round_half_even(y / yq_scale) + yq_zp), on
//   the same float).
// Attributes: Conv's, conv_relu (Relu on the convolution's result), conv_min / conv_max (a Clip's bounds
//   on the convolution's result, in real units), activation ("Silu" or "Sigmoid" on a float output, as
//   FusedConv's: ops/fused_activation.h), relu (Relu after the residual),
//   channels_last (x, z and y are N x H x W x C; set by the nhwc_layout pass; w stays M x C/group x kH x kW).
// Semantics (the reference kernel below, f32 arithmetic in this order):
//   acc  = ConvInteger(x - x_zp, w - w_zp) + B                    exact int32 (B int32)
//   s1   = mid_scale if given else y_scale (1 when y is float)
//   v    = float(acc) * (x_scale * w_scale[m] / s1)               one rounding per product (B int32)
//   v    = (float(acc) * (x_scale * w_scale[m]) + B[m]) / s1      (B float: the plain structure's bias, in real units)
//   v    = max(v, 0)                                              if conv_relu
//   v    = min(max(v, conv_min / s1), conv_max / s1)              if conv_min / conv_max (a Clip; either may be absent)
//   v    = activation(v)                                          Silu or Sigmoid (float y only; in double, as FusedConv's)
//   y    = v [+ z] [max(., 0) if relu]                            if y_scale and y_zero_point are absent: float y
//                                                                 (z float32; no activation with z)
//   v    = clamp(round_half_even(v), lo - mid_zp, hi - mid_zp) * (s1 / y_scale)   if mid (Q then DQ)
//   v    = fma(z_scale / y_scale, float(z - z_zp), v)             if z (one rounding: see below)
//   v    = max(v, 0)                                              if relu
//   y    = saturate(round_half_even(v) + y_zp)
// The QDQ nodes compute the same with the float convolution of the dequantized operands; the two differ
// only by f32 rounding (at most one step of y where a value lands next to a rounding tie). The residual
// step is a fused multiply-add, as oneDNN's sum post-op computes it (so the cpu kernel is this, bit for
// bit): over all 65536 (q, z) pairs of each of ResNet-50's 16 residual Adds (zoo file, percentile), the
// result differs from the exactly rounded real sum in 2 pairs of 1048576, the separately rounded
// product in 6, the QDQ nodes' f32 order (DQ, DQ, Add, / y_scale) in 4, ONNX Runtime's QLinearAdd in 3.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/data_movement.h"
#include "ops/fused_activation.h"
#include "ops/op_util.h"
#include "ops/quantize_util.h"

namespace ferry {
namespace {

using std::vector;

enum QConvInput : int64_t {
  kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kYScale, kYZp, kB, kZ, kZScale, kZZp, kMidScale, kMidZp, kYqScale, kYqZp,
  kNumInputs
};

const vector<int64_t> kToNchw = {0, 3, 1, 2};
const vector<int64_t> kToNhwc = {0, 2, 3, 1};

TensorType permuted_type(const TensorType& t, const vector<int64_t>& perm) {
  if (!t.shape || t.shape->rank() != 4) return t;
  Shape s;
  for (int64_t p : perm) s.dims.push_back(t.shape->dims[p]);
  return TensorType{t.dtype, s};
}

const OpSchema& conv_integer_schema() { return *op_registry().find("", "ConvInteger", 10); }

const TensorType* opt_type(InferContext& ctx, int64_t i) { return ctx.has_input(i) ? &ctx.input_type(i) : nullptr; }

Status infer_qconv_fused(InferContext& ctx) {
  const bool cl = ctx.get_int("channels_last", 0) != 0;
  if (cl && ctx.input_type(kX).shape && ctx.input_type(kX).shape->rank() != 4)
    return ctx.error("input 'x' must be 4-D (N x H x W x C) when channels_last = 1, got " +
                     ctx.input_type(kX).shape->to_string());
  const TensorType x = cl ? permuted_type(ctx.input_type(kX), kToNchw) : ctx.input_type(kX);
  vector<const TensorType*> types = {&x, &ctx.input_type(kW), opt_type(ctx, kXZp), opt_type(ctx, kWZp)};
  vector<const Tensor*> values = {nullptr, nullptr, nullptr, nullptr};
  InferContext base(ctx.node(), 10, types, values);
  RETURN_IF_ERROR(conv_integer_schema().infer(base));
  if (ctx.has_input(kYScale) != ctx.has_input(kYZp))
    return ctx.error("inputs 'y_scale' and 'y_zero_point' (6-7) must be given together (both absent: a float output)");
  const bool float_y = !ctx.has_input(kYScale);
  const DType yt = float_y ? DType::kF32 : ctx.input_type(kYZp).dtype;
  if (!float_y) RETURN_IF_ERROR(check_8bit(ctx, yt, "y_zero_point"));
  if (float_y && ctx.has_input(kMidScale))
    return ctx.error("a float output (no y_scale / y_zero_point) takes no 'mid_scale'");
  if (float_y && ctx.has_input(kZ) && !ctx.get_string("activation", "").empty())
    return ctx.error("a float output with a residual 'z' takes no activation");
  if (const std::string a = ctx.get_string("activation", ""); !a.empty()) {
    if (a != "Silu" && a != "Sigmoid") return ctx.error("activation '" + a + "' is not known here; expected Silu or Sigmoid");
    if (!float_y) return ctx.error("activation '" + a + "' needs a float output (no y_scale / y_zero_point)");
  }
  if (ctx.has_input(kYqScale) != ctx.has_input(kYqZp))
    return ctx.error("inputs 'yq_scale' and 'yq_zero_point' (14-15) must be given together");
  if (ctx.has_input(kYqScale) && !float_y)
    return ctx.error("'yq_scale' quantizes a float output: it needs y_scale and y_zero_point absent");
  if (ctx.has_input(kYqScale) != (ctx.num_outputs() > 1))
    return ctx.error("output 1 (yq) and inputs 'yq_scale' / 'yq_zero_point' (14-15) go together");
  if (ctx.has_input(kYqZp)) RETURN_IF_ERROR(check_8bit(ctx, ctx.input_type(kYqZp).dtype, "yq_zero_point"));
  for (int64_t i : {kXScale, kWScale, kYScale, kZScale, kMidScale, kYqScale})
    if (ctx.has_input(i)) RETURN_IF_ERROR(check_float_scale(ctx, ctx.input_type(i).dtype, "scale input " + std::to_string(i)));
  if (ctx.has_input(kB) && ctx.input_type(kB).dtype != DType::kUndefined && ctx.input_type(kB).dtype != DType::kI32 &&
      ctx.input_type(kB).dtype != DType::kF32)
    return ctx.error(std::string("input 'B' has element type ") + dtype_name(ctx.input_type(kB).dtype) +
                     "; expected int32 (accumulator units) or float (real units)");
  if (float_y && (ctx.has_input(kZScale) || ctx.has_input(kZZp)))
    return ctx.error("a float output's residual 'z' is float32: no 'z_scale' or 'z_zero_point' (10-11)");
  if (!float_y && (ctx.has_input(kZ) != ctx.has_input(kZScale) || ctx.has_input(kZ) != ctx.has_input(kZZp)))
    return ctx.error("inputs 'z', 'z_scale' and 'z_zero_point' (9-11) must be given together");
  if (ctx.has_input(kMidScale) != ctx.has_input(kMidZp))
    return ctx.error("inputs 'mid_scale' and 'mid_zero_point' (12-13) must be given together");
  TensorType out{yt, base.outputs()[0].shape};
  if (cl) out = permuted_type(out, kToNhwc);
  if (ctx.has_input(kZ)) {
    const TensorType& z = ctx.input_type(kZ);
    if (float_y && z.dtype != DType::kF32 && z.dtype != DType::kUndefined)
      return ctx.error(std::string("input 'z' has element type ") + dtype_name(z.dtype) + "; a float output's residual is float32");
    if (!float_y) RETURN_IF_ERROR(check_8bit(ctx, z.dtype, "z"));
    if (z.shape && out.shape && z.shape->rank() != out.shape->rank())
      return ctx.error("input 'z' has shape " + z.shape->to_string() + "; it must have the output's shape " +
                       out.shape->to_string());
  }
  ctx.set_output(0, out);
  if (ctx.has_input(kYqScale)) ctx.set_output(1, TensorType{ctx.input_type(kYqZp).dtype, out.shape});
  return Status::ok();
}

Status scalar_input(KernelContext& ctx, int64_t i, const char* name, float* v) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1) return ctx.error(std::string("input '") + name + "' has shape " + dims_to_string(t.dims()) + "; it must be a scalar");
  if (dtype_is_float(t.dtype())) *v = to_float_vector(t)[0];
  else *v = static_cast<float>(t.get_int64(0));
  return Status::ok();
}

Status k_qconv_fused(KernelContext& ctx) {
  // acc = ConvInteger(x, w, x_zp, w_zp) by its reference kernel (the oracle for the integer part).
  const bool cl = ctx.get_int("channels_last", 0) != 0;
  if (cl && ctx.input(kX).rank() != 4) return ctx.error("input 'x' must be 4-D when channels_last = 1");
  Tensor x = ctx.input(kX);
  if (cl) {
    ASSIGN_OR_RETURN(x, dm::permute(x, kToNchw));
  }
  vector<Value> in = {Value(x), Value(ctx.input(kW)), Value(ctx.input(kXZp)), Value()};
  vector<const Value*> ptrs = {&in[0], &in[1], &in[2], nullptr};
  if (ctx.has_input(kWZp)) {
    in[3] = Value(ctx.input(kWZp));
    ptrs[3] = &in[3];
  }
  vector<Value> outs(1);
  KernelContext base(ctx.node(), 10, ptrs, &outs);
  RETURN_IF_ERROR(conv_integer_schema().kernel(base));
  const Tensor& acc = outs[0].tensor;
  const vector<int64_t> od = acc.dims();
  const int64_t M = od[1];
  int64_t OS = 1;
  for (size_t i = 2; i < od.size(); ++i) OS *= od[i];

  const bool float_y = !ctx.has_input(kYScale) && !ctx.has_input(kYZp);
  float xs = 0, ys = 1, yz = 0;
  RETURN_IF_ERROR(scalar_input(ctx, kXScale, "x_scale", &xs));
  if (!float_y) {
    RETURN_IF_ERROR(scalar_input(ctx, kYScale, "y_scale", &ys));
    RETURN_IF_ERROR(scalar_input(ctx, kYZp, "y_zero_point", &yz));
  }
  const vector<float> ws = to_float_vector(ctx.input(kWScale));
  if (ws.size() != 1 && static_cast<int64_t>(ws.size()) != M)
    return ctx.error("input 'w_scale' has " + std::to_string(ws.size()) + " elements; expected 1 or M = " + std::to_string(M));
  vector<int32_t> bias(static_cast<size_t>(M), 0);
  vector<float> fbias;  // B float (real units)
  if (ctx.has_input(kB)) {
    const Tensor& b = ctx.input(kB);
    if ((b.dtype() != DType::kI32 && b.dtype() != DType::kF32) || b.numel() != M)
      return ctx.error("input 'B' must be int32 or float with M = " + std::to_string(M) + " elements, got " +
                       b.type().to_string());
    if (b.dtype() == DType::kI32) std::copy(b.data<int32_t>(), b.data<int32_t>() + M, bias.begin());
    else fbias.assign(b.data<float>(), b.data<float>() + M);
  }
  const bool has_mid = ctx.has_input(kMidScale), has_z = ctx.has_input(kZ);
  if (float_y && has_mid) return ctx.error("a float output (no y_scale) takes no 'mid_scale'");
  float s1 = ys, mz = 0, mlo = 0, mhi = 0;
  if (has_mid) {
    RETURN_IF_ERROR(scalar_input(ctx, kMidScale, "mid_scale", &s1));
    RETURN_IF_ERROR(scalar_input(ctx, kMidZp, "mid_zero_point", &mz));
    if (!quant_range(ctx.input(kMidZp).dtype(), &mlo, &mhi)) return ctx.error("input 'mid_zero_point' must be uint8 or int8");
  }
  float zs = 0, zz = 0;
  vector<int32_t> z;
  vector<float> zf;  // a float output's float32 residual
  if (has_z) {
    if (float_y) {
      if (ctx.input(kZ).dtype() != DType::kF32)
        return ctx.error(std::string("input 'z' has element type ") + dtype_name(ctx.input(kZ).dtype()) + "; a float output's residual is float32");
    } else {
      RETURN_IF_ERROR(scalar_input(ctx, kZScale, "z_scale", &zs));
      RETURN_IF_ERROR(scalar_input(ctx, kZZp, "z_zero_point", &zz));
      RETURN_IF_ERROR(check_8bit(ctx, ctx.input(kZ).dtype(), "z"));
    }
    Tensor zt = ctx.input(kZ);
    if (cl && zt.rank() == 4) {
      ASSIGN_OR_RETURN(zt, dm::permute(zt, kToNchw));
    }
    if (zt.dims() != od)
      return ctx.error("input 'z' has shape " + dims_to_string(ctx.input(kZ).dims()) + "; expected the output's " +
                       dims_to_string(od) + (cl ? " (as NCHW)" : ""));
    if (float_y) zf = to_float_vector(zt);
    else z = to_int32(zt);
  }
  const bool conv_relu = ctx.get_int("conv_relu", 0) != 0, relu = ctx.get_int("relu", 0) != 0;
  const float cmin = ctx.get_float("conv_min", -INFINITY) / s1, cmax = ctx.get_float("conv_max", INFINITY) / s1;
  ASSIGN_OR_RETURN(const FusedActivation act, parse_fused_activation(ctx.get_string("activation", ""), {}));
  if (act.kind != ActKind::kNone && act.kind != ActKind::kSilu && act.kind != ActKind::kSigmoid)
    return ctx.error("activation '" + ctx.get_string("activation", "") + "' is not known here; expected Silu or Sigmoid");
  if (act.kind != ActKind::kNone && !float_y) return ctx.error("an activation needs a float output (no y_scale)");
  if (act.kind != ActKind::kNone && has_z) return ctx.error("a float output with a residual 'z' takes no activation");
  vector<float> mul(static_cast<size_t>(M)), real(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) {
    real[m] = xs * ws[ws.size() == 1 ? 0 : m];
    mul[m] = real[m] / s1;
  }
  const float mid_to_y = s1 / ys, z_to_y = zs / ys;
  const DType yt = float_y ? DType::kF32 : ctx.input(kYZp).dtype();
  float lo = 0, hi = 0;
  if (!float_y && !quant_range(yt, &lo, &hi)) return ctx.error("input 'y_zero_point' must be uint8 or int8");
  const int32_t* pa = acc.data<int32_t>();
  vector<float> q(static_cast<size_t>(acc.numel()));
  for (int64_t i = 0; i < acc.numel(); ++i) {
    const int64_t m = (i / OS) % M;
    float v = fbias.empty() ? static_cast<float>(pa[i] + bias[m]) * mul[m]
                            : (static_cast<float>(pa[i]) * real[m] + fbias[m]) / s1;
    if (conv_relu) v = std::max(v, 0.0f);
    v = std::min(std::max(v, cmin), cmax);
    if (float_y) {
      if (has_z) {
        v = v + zf[i];
        if (relu) v = std::max(v, 0.0f);
        q[i] = v;
        continue;
      }
      q[i] = act.kind == ActKind::kNone ? v : static_cast<float>(apply_fused_activation(act, v));
      continue;
    }
    if (has_mid) v = std::min(std::max(std::nearbyint(v), mlo - mz), mhi - mz) * mid_to_y;
    if (has_z) v = std::fma(z_to_y, static_cast<float>(z[i] - static_cast<int32_t>(zz)), v);
    if (relu) v = std::max(v, 0.0f);
    q[i] = quantize_value(v, yz, lo, hi);
  }
  ASSIGN_OR_RETURN(Tensor y, Tensor::try_allocate(yt, od));
  if (float_y) std::copy(q.begin(), q.end(), y.mutable_data<float>());
  else store_quantized(q, &y);
  if (cl) {
    ASSIGN_OR_RETURN(y, dm::permute(y, kToNhwc));
  }
  if (ctx.has_input(kYqScale)) {  // QuantizeLinear's reference formula (ops/quantize.cpp) on y
    float qs = 0, qz = 0, qlo = 0, qhi = 0;
    RETURN_IF_ERROR(scalar_input(ctx, kYqScale, "yq_scale", &qs));
    RETURN_IF_ERROR(scalar_input(ctx, kYqZp, "yq_zero_point", &qz));
    if (!float_y || !quant_range(ctx.input(kYqZp).dtype(), &qlo, &qhi) || !is_8bit(ctx.input(kYqZp).dtype()))
      return ctx.error("input 'yq_zero_point' must be uint8 or int8, on a float output");
    vector<float> qv(static_cast<size_t>(y.numel()));
    for (int64_t i = 0; i < y.numel(); ++i) qv[i] = quantize_value(y.data<float>()[i] / qs, qz, qlo, qhi);
    ASSIGN_OR_RETURN(Tensor yq, Tensor::try_allocate(ctx.input(kYqZp).dtype(), y.dims()));
    store_quantized(qv, &yq);
    ctx.set_output(1, std::move(yq));
  }
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

// ---- QMatMulFused ---------------------------------------------------------------------------
// Inputs: a, a_scale, a_zero_point, b (int8 [K, N]), b_scale (scalar or [N]), b_zero_point (optional),
// y_scale, y_zero_point, Bias (int32 [N] or float [N], optional). Attribute relu.
//   acc = MatMulInteger(a - a_zp, b - b_zp) + Bias[n];  v = float(acc) * (a_scale * b_scale[n] / y_scale)
//   (Bias float, real units: v = (float(acc) * (a_scale * b_scale[n]) + Bias[n]) / y_scale)
//   v = max(v, 0) if relu;  y = saturate(round_half_even(v) + y_zp)
//   y_scale and y_zero_point both absent (""): y = v as float32 (y_scale 1), the dequantization in the
//   epilogue (ONNX Runtime's MatMulIntegerToFloat).
// Made of DQ(a), DQ(B) -> MatMul [-> Add(DQ(Bias) | float Bias)] [-> Relu] [-> Q] and of the same with Gemm.

enum QMatMulInput : int64_t { kA = 0, kAScale, kAZp, kBm, kBScale, kBZp, kMYScale, kMYZp, kBias, kNumMatMulInputs };

const OpSchema& matmul_integer_schema() { return *op_registry().find("", "MatMulInteger", 10); }

Status infer_qmatmul_fused(InferContext& ctx) {
  vector<const TensorType*> types = {&ctx.input_type(kA), &ctx.input_type(kBm), opt_type(ctx, kAZp), opt_type(ctx, kBZp)};
  vector<const Tensor*> values = {nullptr, nullptr, nullptr, nullptr};
  InferContext base(ctx.node(), 10, types, values);
  RETURN_IF_ERROR(matmul_integer_schema().infer(base));
  if (ctx.has_input(kMYScale) != ctx.has_input(kMYZp))
    return ctx.error("inputs 'y_scale' and 'y_zero_point' (6-7) must be given together (both absent: a float output)");
  const DType yt = ctx.has_input(kMYZp) ? ctx.input_type(kMYZp).dtype : DType::kF32;
  if (ctx.has_input(kMYZp)) RETURN_IF_ERROR(check_8bit(ctx, yt, "y_zero_point"));
  if (ctx.input_type(kBm).shape && ctx.input_type(kBm).shape->rank() != 2)
    return ctx.error("input 'b' must be 2-D (K x N), got " + ctx.input_type(kBm).shape->to_string());
  if (ctx.has_input(kBias) && ctx.input_type(kBias).dtype != DType::kUndefined &&
      ctx.input_type(kBias).dtype != DType::kI32 && ctx.input_type(kBias).dtype != DType::kF32)
    return ctx.error(std::string("input 'Bias' has element type ") + dtype_name(ctx.input_type(kBias).dtype) +
                     "; expected int32 (accumulator units) or float (real units)");
  ctx.set_output(0, TensorType{yt, base.outputs()[0].shape});
  return Status::ok();
}

Status k_qmatmul_fused(KernelContext& ctx) {
  vector<Value> in = {Value(ctx.input(kA)), Value(ctx.input(kBm)), Value(ctx.input(kAZp)), Value()};
  vector<const Value*> ptrs = {&in[0], &in[1], &in[2], nullptr};
  if (ctx.has_input(kBZp)) {
    in[3] = Value(ctx.input(kBZp));
    ptrs[3] = &in[3];
  }
  if (ctx.input(kBm).rank() != 2) return ctx.error("input 'b' must be 2-D (K x N)");
  vector<Value> outs(1);
  KernelContext base(ctx.node(), 10, ptrs, &outs);
  RETURN_IF_ERROR(matmul_integer_schema().kernel(base));
  const Tensor& acc = outs[0].tensor;
  const int64_t N = ctx.input(kBm).dim(1);
  const bool float_y = !ctx.has_input(kMYScale) && !ctx.has_input(kMYZp);
  float as = 0, ys = 1, yz = 0;
  RETURN_IF_ERROR(scalar_input(ctx, kAScale, "a_scale", &as));
  if (!float_y) {
    RETURN_IF_ERROR(scalar_input(ctx, kMYScale, "y_scale", &ys));
    RETURN_IF_ERROR(scalar_input(ctx, kMYZp, "y_zero_point", &yz));
  }
  const vector<float> bs = to_float_vector(ctx.input(kBScale));
  if (bs.size() != 1 && static_cast<int64_t>(bs.size()) != N)
    return ctx.error("input 'b_scale' has " + std::to_string(bs.size()) + " elements; expected 1 or N = " + std::to_string(N));
  vector<int32_t> bias(static_cast<size_t>(N), 0);
  vector<float> fbias;  // Bias float (real units)
  if (ctx.has_input(kBias)) {
    const Tensor& b = ctx.input(kBias);
    if ((b.dtype() != DType::kI32 && b.dtype() != DType::kF32) || b.numel() != N)
      return ctx.error("input 'Bias' must be int32 or float with N = " + std::to_string(N) + " elements, got " +
                       b.type().to_string());
    if (b.dtype() == DType::kI32) std::copy(b.data<int32_t>(), b.data<int32_t>() + N, bias.begin());
    else fbias.assign(b.data<float>(), b.data<float>() + N);
  }
  vector<float> mul(static_cast<size_t>(N)), real(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    real[n] = as * bs[bs.size() == 1 ? 0 : n];
    mul[n] = real[n] / ys;
  }
  const bool relu = ctx.get_int("relu", 0) != 0;
  const DType yt = float_y ? DType::kF32 : ctx.input(kMYZp).dtype();
  float lo = 0, hi = 0;
  if (!float_y && !quant_range(yt, &lo, &hi)) return ctx.error("input 'y_zero_point' must be uint8 or int8");
  const int32_t* pa = acc.data<int32_t>();
  vector<float> q(static_cast<size_t>(acc.numel()));
  for (int64_t i = 0; i < acc.numel(); ++i) {
    const int64_t n = N > 0 ? i % N : 0;
    float v = fbias.empty() ? static_cast<float>(pa[i] + bias[n]) * mul[n]
                            : (static_cast<float>(pa[i]) * real[n] + fbias[n]) / ys;
    if (relu) v = std::max(v, 0.0f);
    q[i] = float_y ? v : quantize_value(v, yz, lo, hi);
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, yt, acc.dims(), false));
  if (float_y) std::copy(q.begin(), q.end(), y->mutable_data<float>());
  else store_quantized(q, y);
  return Status::ok();
}

// ---- QGlobalAveragePool / NhwcQGlobalAveragePool ------------------------------------------------
// Made by qdq_fusion of DQ(x) -> GlobalAveragePool -> Q (per-tensor parameters); the nhwc_layout pass
// turns it into NhwcQGlobalAveragePool inside an NHWC region (x N x H x W x C, y N x 1 x 1 x C).
// Inputs: x (8-bit), x_scale, x_zero_point, y_scale, y_zero_point. Integer semantics (as ONNX Runtime's
// com.microsoft.QLinearGlobalAveragePool): with S the number of spatial positions,
//   acc = sum(x) - S * x_zp                                      exact
//   v   = float(acc) * (x_scale / (y_scale * float(S)))           one rounding for the scale, one here
//   y   = saturate(round_half_even(v) + y_zp)
// The QDQ nodes compute the mean of dequantized values in f32: the two differ only where a value lands
// next to a rounding tie (one step of y).

enum QPoolInput : int64_t { kPX = 0, kPXScale, kPXZp, kPYScale, kPYZp, kNumPoolInputs };

template <bool kNhwc>
Status infer_qgap(InferContext& ctx) {
  const TensorType& x = ctx.input_type(kPX);
  RETURN_IF_ERROR(check_8bit(ctx, x.dtype, "x"));
  const DType yt = ctx.input_type(kPYZp).dtype;
  RETURN_IF_ERROR(check_8bit(ctx, yt, "y_zero_point"));
  for (int64_t i : {kPXScale, kPYScale}) RETURN_IF_ERROR(check_float_scale(ctx, ctx.input_type(i).dtype, "scale input " + std::to_string(i)));
  if (!x.shape) {
    ctx.set_output(0, TensorType{yt, std::nullopt});
    return Status::ok();
  }
  const int64_t r = x.shape->rank();
  if (r < 3 || (kNhwc && r != 4))
    return ctx.error("input 'x' must be " + std::string(kNhwc ? "4-D (N x H x W x C)" : "at least 3-D (N x C x spatial)") +
                     ", got " + x.shape->to_string());
  Shape s = *x.shape;
  for (int64_t i = kNhwc ? 1 : 2; i < (kNhwc ? 3 : r); ++i) s.dims[i] = Dim(int64_t{1});
  ctx.set_output(0, TensorType{yt, s});
  return Status::ok();
}

template <bool kNhwc>
Status k_qgap(KernelContext& ctx) {
  const Tensor& x = ctx.input(kPX);
  RETURN_IF_ERROR(check_8bit(ctx, x.dtype(), "x"));
  if (x.rank() < 3 || (kNhwc && x.rank() != 4))
    return ctx.error("input 'x' has shape " + dims_to_string(x.dims()) + "; expected " +
                     (kNhwc ? "N x H x W x C" : "N x C x spatial"));
  float xs = 0, xz = 0, ys = 0, yz = 0;
  RETURN_IF_ERROR(scalar_input(ctx, kPXScale, "x_scale", &xs));
  RETURN_IF_ERROR(scalar_input(ctx, kPXZp, "x_zero_point", &xz));
  RETURN_IF_ERROR(scalar_input(ctx, kPYScale, "y_scale", &ys));
  RETURN_IF_ERROR(scalar_input(ctx, kPYZp, "y_zero_point", &yz));
  const DType yt = ctx.input(kPYZp).dtype();
  float lo = 0, hi = 0;
  if (!quant_range(yt, &lo, &hi)) return ctx.error("input 'y_zero_point' must be uint8 or int8");
  const int64_t N = x.dim(0), C = kNhwc ? x.dim(3) : x.dim(1);
  int64_t S = 1;
  for (int64_t i = kNhwc ? 1 : 2; i < (kNhwc ? 3 : x.rank()); ++i) S *= x.dim(i);
  vector<int64_t> od = x.dims();
  for (int64_t i = kNhwc ? 1 : 2; i < (kNhwc ? 3 : x.rank()); ++i) od[i] = 1;
  const vector<int32_t> xv = to_int32(x);
  const float scale = xs / (ys * static_cast<float>(S));
  vector<float> q(static_cast<size_t>(N * C));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      int64_t acc = -S * static_cast<int64_t>(xz);
      for (int64_t i = 0; i < S; ++i) acc += xv[kNhwc ? (n * S + i) * C + c : (n * C + c) * S + i];
      q[n * C + c] = quantize_value(static_cast<float>(acc) * scale, yz, lo, hi);
    }
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, yt, od, false));
  store_quantized(q, y);
  return Status::ok();
}

// ---- QuantizeLinearToNhwc ----------------------------------------------------------------------
// Made by the nhwc_layout pass of a per-tensor QuantizeLinear of a 4-D float32 value that only an NHWC region
// reads (an int8 model's input image: the Transpose into the region folded in). Inputs: x (float32,
// N x C x H x W), y_scale (float32 scalar), y_zero_point (uint8 or int8 scalar). y is N x H x W x C of the zero
// point's type: y[n, h, w, c] = saturate(round_half_even(x[n, c, h, w] / y_scale) + y_zero_point), QuantizeLinear's
// formula (ops/quantize.cpp), NaN quantized like 0.
enum QToNhwcInput : int64_t { kQnX = 0, kQnScale, kQnZp };

Status infer_quantize_to_nhwc(InferContext& ctx) {
  const TensorType& x = ctx.input_type(kQnX);
  if (x.dtype != DType::kUndefined && x.dtype != DType::kF32)
    return ctx.error(std::string("input 'x' has element type ") + dtype_name(x.dtype) + "; expected float32");
  RETURN_IF_ERROR(check_float_scale(ctx, ctx.input_type(kQnScale).dtype, "y_scale"));
  const DType yt = ctx.input_type(kQnZp).dtype;
  RETURN_IF_ERROR(check_8bit(ctx, yt, "y_zero_point"));
  if (!x.shape) {
    ctx.set_output(0, TensorType{yt, std::nullopt});
    return Status::ok();
  }
  if (x.shape->rank() != 4) return ctx.error("input 'x' must be 4-D (N x C x H x W), got " + x.shape->to_string());
  Shape s;
  for (int64_t p : {0, 2, 3, 1}) s.dims.push_back(x.shape->dims[static_cast<size_t>(p)]);
  ctx.set_output(0, TensorType{yt, s});
  return Status::ok();
}

Status k_quantize_to_nhwc(KernelContext& ctx) {
  const Tensor& x = ctx.input(kQnX);
  if (x.dtype() != DType::kF32 || x.rank() != 4)
    return ctx.error("input 'x' has type " + x.type().to_string() + "; expected float32 N x C x H x W");
  const DType yt = ctx.input(kQnZp).dtype();
  RETURN_IF_ERROR(check_8bit(ctx, yt, "y_zero_point"));
  float scale = 0, zp = 0, lo = 0, hi = 0;
  RETURN_IF_ERROR(scalar_input(ctx, kQnScale, "y_scale", &scale));
  RETURN_IF_ERROR(scalar_input(ctx, kQnZp, "y_zero_point", &zp));
  quant_range(yt, &lo, &hi);
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const float* px = x.data<float>();
  vector<float> q(static_cast<size_t>(x.numel()));
  for (int64_t n = 0, i = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w, ++i) q[static_cast<size_t>(((n * H + h) * W + w) * C + c)] = quantize_value(px[i] / scale, zp, lo, hi);
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, yt, {N, H, W, C}, false));
  store_quantized(q, y);
  return Status::ok();
}

// ---- QLookup -----------------------------------------------------------------------------------
// Inputs: x (uint8 or int8), table ([256] of y's type: uint8, int8 or float32; int8 x indexes it by x + 128).
//   y[i] = table[x[i]]  (uint8 x)  /  table[x[i] + 128]  (int8 x); y has x's shape.
// x takes 256 values, so a region DQ(x) -> element-wise float ops [-> Q], all per tensor, is a table of its
// 256 results, computed at load by the reference kernels of its nodes (bit for bit what they give). Made by
// the qdq_fusion pass of chains of element-wise ops on x alone (EfficientNet's SiLU: DQ -> Sigmoid, Mul ->
// Q; a float table where the chain's end is read in float) and by the qdq_lookup pass of DQ -> one op (a
// fused com.ferry.Gelu) -> Q (src/passes/qdq_fusion.cpp, qdq_lookup.cpp). ONNX Runtime's QLinearSigmoid /
// QLinearLeakyRelu are such tables too.
enum QLookupInput : int64_t { kLX = 0, kLTable };

Status infer_qlookup(InferContext& ctx) {
  const TensorType& x = ctx.input_type(kLX);
  const TensorType& t = ctx.input_type(kLTable);
  RETURN_IF_ERROR(check_8bit(ctx, x.dtype, "x"));
  if (t.dtype != DType::kF32) RETURN_IF_ERROR(check_8bit(ctx, t.dtype, "table"));
  if (t.shape && t.shape->is_static() && (t.shape->rank() != 1 || t.shape->values()[0] != 256))
    return ctx.error("input 'table' must have shape [256], got " + t.shape->to_string());
  ctx.set_output(0, TensorType{t.dtype, x.shape});
  return Status::ok();
}

Status k_qlookup(KernelContext& ctx) {
  const Tensor& x = ctx.input(kLX);
  const Tensor& t = ctx.input(kLTable);
  RETURN_IF_ERROR(check_8bit(ctx, x.dtype(), "x"));
  if (t.dtype() != DType::kF32) RETURN_IF_ERROR(check_8bit(ctx, t.dtype(), "table"));
  if (t.numel() != 256)
    return ctx.error("input 'table' has " + std::to_string(t.numel()) + " elements; expected 256 (one per 8-bit value of x)");
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, t.dtype(), x.dims(), false));
  const uint8_t* xp = static_cast<const uint8_t*>(x.raw());
  const uint8_t flip = x.dtype() == DType::kI8 ? 0x80 : 0;  // s8 v -> index v + 128 (its byte with the top bit flipped)
  if (t.dtype() == DType::kF32) {
    const float* tab = t.data<float>();
    float* yp = y->mutable_data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = tab[xp[i] ^ flip];
  } else {
    const uint8_t* tab = static_cast<const uint8_t*>(t.raw());
    uint8_t* yp = static_cast<uint8_t*>(y->mutable_raw());
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = tab[xp[i] ^ flip];
  }
  return Status::ok();
}

}  // namespace

void register_quantize_fused_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "QLookup", .domain = "com.ferry", .since_version = 1, .min_inputs = 2, .max_inputs = 2,
                 .types = {DType::kU8, DType::kI8}, .infer = infer_qlookup, .kernel = k_qlookup});
  r.add(OpSchema{.name = "QGlobalAveragePool", .domain = "com.ferry", .since_version = 1, .min_inputs = kNumPoolInputs,
                 .max_inputs = kNumPoolInputs, .types = {DType::kU8, DType::kI8}, .infer = infer_qgap<false>,
                 .kernel = k_qgap<false>});
  r.add(OpSchema{.name = "NhwcQGlobalAveragePool", .domain = "com.ferry", .since_version = 1,
                 .min_inputs = kNumPoolInputs, .max_inputs = kNumPoolInputs, .types = {DType::kU8, DType::kI8},
                 .infer = infer_qgap<true>, .kernel = k_qgap<true>});
  r.add(OpSchema{.name = "QuantizeLinearToNhwc", .domain = "com.ferry", .since_version = 1, .min_inputs = 3, .max_inputs = 3,
                 .types = {DType::kF32}, .infer = infer_quantize_to_nhwc, .kernel = k_quantize_to_nhwc});
  r.add(OpSchema{.name = "QMatMulFused", .domain = "com.ferry", .since_version = 1, .min_inputs = 5,
                 .max_inputs = kNumMatMulInputs, .attrs = {{"relu", AttrType::kInt}}, .types = {DType::kU8, DType::kI8},
                 .infer = infer_qmatmul_fused, .kernel = k_qmatmul_fused});
  r.add(OpSchema{.name = "QConvFused", .domain = "com.ferry", .since_version = 1, .min_inputs = 5,
                 .max_inputs = kNumInputs, .max_outputs = 2,
                 .attrs = {{"auto_pad", AttrType::kString}, {"dilations", AttrType::kInts}, {"group", AttrType::kInt},
                           {"kernel_shape", AttrType::kInts}, {"pads", AttrType::kInts}, {"strides", AttrType::kInts},
                           {"conv_relu", AttrType::kInt}, {"conv_min", AttrType::kFloat}, {"conv_max", AttrType::kFloat},
                           {"activation", AttrType::kString},
                           {"relu", AttrType::kInt},
                           {"channels_last", AttrType::kInt}},
                 .types = {DType::kU8, DType::kI8}, .infer = infer_qconv_fused, .kernel = k_qconv_fused});
}

}  // namespace ferry
