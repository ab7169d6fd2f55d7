// Op family 'quantize': QuantizeLinear / DequantizeLinear (opsets 10, 13, 19, 21) and
// DynamicQuantizeLinear (11); the integer ops are in ops/quantize_integer.cpp.
//
// Quantization: q = saturate(round_half_even(x / scale) + zero_point), computed in f32 like
// onnxruntime and the ONNX reference (numpy float32). Dequantization: (q - zero_point) * scale.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "ops/op_util.h"
#include "ops/quantize_util.h"

namespace ferry {
namespace {

using std::vector;

// ---- QuantizeLinear / DequantizeLinear: scale layout ----------------------------------------

enum class QMode { kTensor, kAxis, kBlocked };

struct QLayout {
  QMode mode = QMode::kTensor;
  int64_t axis = 0;
  int64_t block = 0;
};

// Decides per-tensor / per-axis / blocked quantization from the scale's shape (x: input 0,
// scale: input 1, zero point: input 2) and checks the zero point against the scale.
template <class Ctx>
Status quant_layout(Ctx& ctx, const TensorType& x, const TensorType& scale, const TensorType* zp, QLayout* q) {
  const int64_t opset = ctx.opset();
  const char* sname = ctx.node().op_type == "QuantizeLinear" ? "y_scale" : "x_scale";
  const char* zname = ctx.node().op_type == "QuantizeLinear" ? "y_zero_point" : "x_zero_point";
  int64_t axis = opset >= 13 ? ctx.get_int("axis", 1) : 1;
  const int64_t block = opset >= 21 ? ctx.get_int("block_size", 0) : 0;
  if (block < 0) return ctx.error("attribute 'block_size' must be >= 0, got " + std::to_string(block));
  if (zp && zp->shape && scale.shape && !(*zp->shape == *scale.shape)) {
    bool compatible = zp->shape->rank() == scale.shape->rank();
    for (int64_t i = 0; compatible && i < zp->shape->rank(); ++i) {
      const Dim &a = zp->shape->dims[i], &b = scale.shape->dims[i];
      if (a.is_known() && b.is_known() && a.value != b.value) compatible = false;
    }
    if (!compatible && !(is_scalar_like(*zp->shape) && is_scalar_like(*scale.shape)))
      return ctx.error(std::string("input '") + zname + "' has shape " + zp->shape->to_string() + " but input '" +
                       sname + "' has shape " + scale.shape->to_string() + "; they must match");
  }
  q->mode = QMode::kTensor;
  q->block = block;
  if (!scale.shape) return Status::ok();
  const Shape& s = *scale.shape;
  if (block == 0 && is_scalar_like(s)) return Status::ok();
  if (opset < 13)
    return ctx.error(std::string("input '") + sname + "' has shape " + s.to_string() +
                     "; before opset 13 it must be a scalar");
  if (!x.shape) {
    q->mode = block > 0 ? QMode::kBlocked : QMode::kAxis;
    return Status::ok();
  }
  const Shape& xs = *x.shape;
  if (!normalize_axis(&axis, xs.rank()))
    return ctx.error("attribute 'axis' = " + std::to_string(axis) + " is out of range for input 'x' of rank " +
                     std::to_string(xs.rank()));
  q->axis = axis;
  if (block == 0) {
    if (s.rank() != 1)
      return ctx.error(std::string("input '") + sname + "' has shape " + s.to_string() +
                       "; it must be a scalar (per-tensor) or 1-D (per-axis)");
    const Dim& xa = xs.dims[axis];
    if (xa.is_known() && s.dims[0].is_known() && xa.value != s.dims[0].value)
      return ctx.error(std::string("input '") + sname + "' has " + std::to_string(s.dims[0].value) +
                       " elements but input 'x' " + xs.to_string() + " has " + std::to_string(xa.value) +
                       " along axis " + std::to_string(axis));
    q->mode = QMode::kAxis;
    return Status::ok();
  }
  // Blocked: scale has x's rank, x's dims except ceil(dim / block_size) along axis.
  if (s.rank() != xs.rank())
    return ctx.error(std::string("input '") + sname + "' has shape " + s.to_string() +
                     "; with block_size it must have the rank of input 'x' " + xs.to_string());
  for (int64_t i = 0; i < xs.rank(); ++i) {
    const Dim& xd = xs.dims[i];
    const Dim& sd = s.dims[i];
    if (!xd.is_known() || !sd.is_known()) continue;
    const int64_t want = i == axis ? (xd.value + block - 1) / block : xd.value;
    if (sd.value != want)
      return ctx.error(std::string("input '") + sname + "' has shape " + s.to_string() + " but input 'x' " +
                       xs.to_string() + " with block_size " + std::to_string(block) + " along axis " +
                       std::to_string(axis) + " needs " + std::to_string(want) + " at dimension " + std::to_string(i));
  }
  q->mode = QMode::kBlocked;
  return Status::ok();
}

// Calls fn(element index, parameter index) for every element of x.
template <class Fn>
void for_each_param(const vector<int64_t>& xd, const QLayout& q, Fn&& fn) {
  int64_t n = 1;
  for (int64_t d : xd) n *= d;
  if (q.mode == QMode::kTensor) {
    for (int64_t i = 0; i < n; ++i) fn(i, int64_t(0));
    return;
  }
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < q.axis; ++i) outer *= xd[i];
  for (size_t i = static_cast<size_t>(q.axis) + 1; i < xd.size(); ++i) inner *= xd[i];
  const int64_t A = xd[q.axis];
  const int64_t nb = q.mode == QMode::kBlocked ? (A + q.block - 1) / q.block : A;
  int64_t idx = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < A; ++a) {
      const int64_t ab = q.mode == QMode::kBlocked ? a / q.block : a;
      for (int64_t i = 0; i < inner; ++i, ++idx)
        fn(idx, q.mode == QMode::kAxis ? a : (o * nb + ab) * inner + i);
    }
}

// Output type of QuantizeLinear: the zero point's type, else output_dtype (opset 21), else uint8.
template <class Ctx>
Status quantize_out_type(Ctx& ctx, DType zp, DType* out) {
  const int64_t od = ctx.opset() >= 21 ? ctx.get_int("output_dtype", 0) : 0;
  DType want = DType::kUndefined;
  if (od != 0) {
    float lo, hi;
    if (!dtype_from_onnx(static_cast<int32_t>(od), &want) || !quant_range(want, &lo, &hi))
      return ctx.error("attribute 'output_dtype' = " + std::to_string(od) +
                       " is not supported; expected uint8 (2), int8 (3), uint16 (4) or int16 (5)");
  }
  if (zp != DType::kUndefined) {
    float lo, hi;
    if (!quant_range(zp, &lo, &hi) || (ctx.opset() < 21 && !is_8bit(zp)))
      return ctx.error(std::string("input 'y_zero_point' has element type ") + dtype_name(zp) + "; expected uint8 or int8" +
                       (ctx.opset() >= 21 ? " (or uint16, int16)" : ""));
    if (want != DType::kUndefined && want != zp)
      return ctx.error(std::string("attribute 'output_dtype' (") + dtype_name(want) +
                       ") differs from the element type of input 'y_zero_point' (" + dtype_name(zp) + ")");
    *out = zp;
    return Status::ok();
  }
  *out = want != DType::kUndefined ? want : DType::kU8;
  return Status::ok();
}

Status infer_quantize(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  const TensorType& s = ctx.input_type(1);
  const TensorType* zp = ctx.has_input(2) ? &ctx.input_type(2) : nullptr;
  if (x.dtype != DType::kUndefined && !dtype_is_float(x.dtype) && x.dtype != DType::kI32)
    return ctx.error(std::string("input 'x' has element type ") + dtype_name(x.dtype) + "; expected a float type or int32");
  RETURN_IF_ERROR(check_float_scale(ctx, s.dtype, "y_scale"));
  QLayout q;
  RETURN_IF_ERROR(quant_layout(ctx, x, s, zp, &q));
  DType out = DType::kUndefined;
  RETURN_IF_ERROR(quantize_out_type(ctx, zp ? zp->dtype : DType::kUndefined, &out));
  if (zp && zp->dtype == DType::kUndefined) out = DType::kUndefined;
  ctx.set_output(0, TensorType{out, x.shape});
  return Status::ok();
}

Status k_quantize(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& s = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const TensorType zt = zp ? zp->type() : TensorType{};
  if (!dtype_is_float(x.dtype()) && x.dtype() != DType::kI32)
    return ctx.error(std::string("input 'x' has element type ") + dtype_name(x.dtype()) + "; expected a float type or int32");
  RETURN_IF_ERROR(check_float_scale(ctx, s.dtype(), "y_scale"));
  QLayout q;
  RETURN_IF_ERROR(quant_layout(ctx, x.type(), s.type(), zp ? &zt : nullptr, &q));
  if (zp && zp->numel() != s.numel())
    return ctx.error("input 'y_zero_point' has " + std::to_string(zp->numel()) + " elements but 'y_scale' has " +
                     std::to_string(s.numel()));
  DType out_t = DType::kUndefined;
  RETURN_IF_ERROR(quantize_out_type(ctx, zp ? zp->dtype() : DType::kUndefined, &out_t));
  float lo = 0, hi = 0;
  quant_range(out_t, &lo, &hi);
  const vector<float> scale = to_float_vector(s);
  vector<float> zero(static_cast<size_t>(s.numel()), 0.0f);
  if (zp)
    for (int64_t i = 0; i < zp->numel(); ++i) zero[i] = static_cast<float>(zp->get_int64(i));
  vector<float> xv;
  if (x.dtype() == DType::kI32) {
    xv.resize(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) xv[i] = static_cast<float>(x.data<int32_t>()[i]);
  } else {
    xv = to_float_vector(x);
  }
  vector<float> qv(static_cast<size_t>(x.numel()));
  for_each_param(x.dims(), q, [&](int64_t i, int64_t p) { qv[i] = quantize_value(xv[i] / scale[p], zero[p], lo, hi); });
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, out_t, x.dims()));
  store_quantized(qv, y);
  return Status::ok();
}

template <class Ctx>
Status check_dequant_types(Ctx& ctx, DType x, DType s, DType zp) {
  const bool x_ok = is_8bit(x) || x == DType::kI32 || (ctx.opset() >= 21 && (x == DType::kU16 || x == DType::kI16));
  if (x != DType::kUndefined && !x_ok)
    return ctx.error(std::string("input 'x' has element type ") + dtype_name(x) + "; expected uint8, int8 or int32" +
                     (ctx.opset() >= 21 ? " (or uint16, int16)" : ""));
  RETURN_IF_ERROR(check_float_scale(ctx, s, "x_scale"));
  if (ctx.opset() < 19 && s != DType::kUndefined && s != DType::kF32)
    return ctx.error(std::string("input 'x_scale' has element type ") + dtype_name(s) + "; before opset 19 it must be float32");
  if (zp != DType::kUndefined && x != DType::kUndefined && zp != x)
    return ctx.error(std::string("input 'x_zero_point' has element type ") + dtype_name(zp) + " but input 'x' has " +
                     dtype_name(x) + "; they must match");
  return Status::ok();
}

Status infer_dequantize(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  const TensorType& s = ctx.input_type(1);
  const TensorType* zp = ctx.has_input(2) ? &ctx.input_type(2) : nullptr;
  RETURN_IF_ERROR(check_dequant_types(ctx, x.dtype, s.dtype, zp ? zp->dtype : DType::kUndefined));
  QLayout q;
  RETURN_IF_ERROR(quant_layout(ctx, x, s, zp, &q));
  ctx.set_output(0, TensorType{ctx.opset() >= 19 ? s.dtype : DType::kF32, x.shape});
  return Status::ok();
}

Status k_dequantize(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& s = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const TensorType zt = zp ? zp->type() : TensorType{};
  RETURN_IF_ERROR(check_dequant_types(ctx, x.dtype(), s.dtype(), zp ? zp->dtype() : DType::kUndefined));
  QLayout q;
  RETURN_IF_ERROR(quant_layout(ctx, x.type(), s.type(), zp ? &zt : nullptr, &q));
  if (zp && zp->numel() != s.numel())
    return ctx.error("input 'x_zero_point' has " + std::to_string(zp->numel()) + " elements but 'x_scale' has " +
                     std::to_string(s.numel()));
  const vector<float> scale = to_float_vector(s);
  vector<int64_t> zero(static_cast<size_t>(s.numel()), 0);
  if (zp) zero = zp->to_int64_vector();
  const vector<int32_t> xv = to_int32(x);
  Tensor y = Tensor::allocate(DType::kF32, x.dims());
  float* py = y.mutable_data<float>();
  for_each_param(x.dims(), q, [&](int64_t i, int64_t p) {
    py[i] = static_cast<float>(static_cast<int64_t>(xv[i]) - zero[p]) * scale[p];
  });
  const DType out_t = s.dtype() == DType::kF64 ? DType::kF32 : s.dtype();
  if (out_t != DType::kF32) {
    ASSIGN_OR_RETURN(y, cast_tensor(y, out_t));
  }
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

// ---- DynamicQuantizeLinear ------------------------------------------------------------------

Status infer_dynamic_quantize(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  if (x.dtype != DType::kUndefined && x.dtype != DType::kF32)
    return ctx.error(std::string("input 'x' has element type ") + dtype_name(x.dtype) + "; expected float32");
  ctx.set_output(0, TensorType{DType::kU8, x.shape});
  if (ctx.num_outputs() > 1) ctx.set_output(1, TensorType{DType::kF32, Shape(vector<Dim>{})});
  if (ctx.num_outputs() > 2) ctx.set_output(2, TensorType{DType::kU8, Shape(vector<Dim>{})});
  return Status::ok();
}

Status k_dynamic_quantize(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::kF32)
    return ctx.error(std::string("input 'x' has element type ") + dtype_name(x.dtype()) + "; expected float32");
  const float* px = x.data<float>();
  float mn = 0.0f, mx = 0.0f;  // the range always includes 0
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (std::isnan(px[i])) continue;
    mn = std::min(mn, px[i]);
    mx = std::max(mx, px[i]);
  }
  const float scale = (mx - mn) / 255.0f;
  float zp = 0.0f;
  if (scale > 0.0f) zp = quantize_value(0.0f - mn / scale, 0.0f, 0.0f, 255.0f);
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kU8, x.dims()));
  uint8_t* py = y->mutable_data<uint8_t>();
  for (int64_t i = 0; i < x.numel(); ++i)
    py[i] = scale > 0.0f ? static_cast<uint8_t>(quantize_value(px[i] / scale, zp, 0.0f, 255.0f)) : uint8_t(0);
  if (ctx.num_outputs() > 1) ctx.set_output(1, Tensor::scalar<float>(scale));
  if (ctx.num_outputs() > 2) ctx.set_output(2, Tensor::scalar<uint8_t>(static_cast<uint8_t>(zp)));
  return Status::ok();
}

}  // namespace

void register_quantize_ops(OpRegistry& r) {
  const vector<AttrSpec> q_attrs = {{"axis", AttrType::kInt}, {"saturate", AttrType::kInt},
                                    {"block_size", AttrType::kInt}, {"output_dtype", AttrType::kInt}};
  const vector<AttrSpec> dq_attrs = {{"axis", AttrType::kInt}, {"block_size", AttrType::kInt}};
  for (int64_t since : {int64_t(10), int64_t(13), int64_t(19), int64_t(21)}) {
    r.add(OpSchema{.name = "QuantizeLinear", .since_version = since, .min_inputs = 2, .max_inputs = 3,
                   .attrs = q_attrs, .infer = infer_quantize, .kernel = k_quantize});
    r.add(OpSchema{.name = "DequantizeLinear", .since_version = since, .min_inputs = 2, .max_inputs = 3,
                   .attrs = dq_attrs, .infer = infer_dequantize, .kernel = k_dequantize});
  }
  r.add(OpSchema{.name = "DynamicQuantizeLinear", .since_version = 11, .min_inputs = 1, .max_inputs = 1,
                 .min_outputs = 3, .max_outputs = 3, .types = {DType::kF32}, .infer = infer_dynamic_quantize,
                 .kernel = k_dynamic_quantize});
}

}  // namespace ferry
