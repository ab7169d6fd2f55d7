// Op family 'quantize': QuantizeLinear / DequantizeLinear (opsets 10, 13, 19, 21),
// DynamicQuantizeLinear (11), and the integer ops QLinearConv, QLinearMatMul, ConvInteger,
// MatMulInteger (10).
//
// Quantization: q = saturate(round_half_even(x / scale) + zero_point), computed in f32 like
// onnxruntime and the ONNX reference (numpy float32). Dequantization: (q - zero_point) * scale.
// Integer products accumulate in int32 (gemm_ref<int32_t> on zero-point-adjusted operands); the
// QLinear ops requantize acc * (scale_a * scale_b / scale_y) in f32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "ops/conv_geometry.h"
#include "ops/gemm_ref.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

// ---- element helpers ------------------------------------------------------------------------

bool quant_range(DType t, float* lo, float* hi) {
  switch (t) {
    case DType::kU8: *lo = 0; *hi = 255; return true;
    case DType::kI8: *lo = -128; *hi = 127; return true;
    case DType::kU16: *lo = 0; *hi = 65535; return true;
    case DType::kI16: *lo = -32768; *hi = 32767; return true;
    default: return false;
  }
}

// round_half_even(v) + zp, saturated to [lo, hi]; NaN quantizes like 0.
inline float quantize_value(float v, float zp, float lo, float hi) {
  if (std::isnan(v)) v = 0.0f;
  float q = std::nearbyint(v) + zp;
  return q < lo ? lo : (q > hi ? hi : q);
}

// Writes float values that are already integral and in range into a tensor of an 8/16-bit type.
void store_quantized(const vector<float>& q, Tensor* out) {
  const int64_t n = out->numel();
  switch (out->dtype()) {
    case DType::kU8: for (int64_t i = 0; i < n; ++i) out->mutable_data<uint8_t>()[i] = static_cast<uint8_t>(q[i]); break;
    case DType::kI8: for (int64_t i = 0; i < n; ++i) out->mutable_data<int8_t>()[i] = static_cast<int8_t>(q[i]); break;
    case DType::kU16: for (int64_t i = 0; i < n; ++i) out->mutable_data<uint16_t>()[i] = static_cast<uint16_t>(q[i]); break;
    case DType::kI16: for (int64_t i = 0; i < n; ++i) out->mutable_data<int16_t>()[i] = static_cast<int16_t>(q[i]); break;
    default: break;
  }
}

// Integer tensor elements as int32 (for 8/16-bit and int32 inputs).
vector<int32_t> to_int32(const Tensor& t) {
  vector<int32_t> v(static_cast<size_t>(t.numel()));
  switch (t.dtype()) {
    case DType::kU8: for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.data<uint8_t>()[i]; break;
    case DType::kI8: for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.data<int8_t>()[i]; break;
    case DType::kU16: for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.data<uint16_t>()[i]; break;
    case DType::kI16: for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.data<int16_t>()[i]; break;
    case DType::kI32: std::memcpy(v.data(), t.data<int32_t>(), static_cast<size_t>(t.numel()) * 4); break;
    default: for (int64_t i = 0; i < t.numel(); ++i) v[i] = static_cast<int32_t>(t.get_int64(i)); break;
  }
  return v;
}

bool is_8bit(DType t) { return t == DType::kU8 || t == DType::kI8; }

template <class Ctx>
Status check_8bit(Ctx& ctx, DType t, const std::string& name) {
  if (t != DType::kUndefined && !is_8bit(t))
    return ctx.error("input '" + name + "' has element type " + dtype_name(t) + "; expected uint8 or int8");
  return Status::ok();
}

template <class Ctx>
Status check_float_scale(Ctx& ctx, DType t, const std::string& name) {
  if (t != DType::kUndefined && !dtype_is_float(t))
    return ctx.error("input '" + name + "' has element type " + dtype_name(t) + "; expected a float type");
  return Status::ok();
}

bool is_scalar_like(const Shape& s) {
  if (s.rank() == 0) return true;
  return s.rank() == 1 && s.dims[0].is_known() && s.dims[0].value == 1;
}

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
  DType out;
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
  DType out_t;
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

// ---- MatMulInteger / QLinearMatMul ----------------------------------------------------------

// A quantization parameter (zero point or scale) of a matmul operand, as dims that broadcast
// against the operand: a 1-D parameter of A is per row ([M] -> [M, 1]); one of B is per column.
StatusOr<vector<int64_t>> param_dims(KernelContext& ctx, const Tensor& p, const vector<int64_t>& operand, bool is_a,
                                     const std::string& name) {
  vector<int64_t> d = p.dims();
  if (p.numel() == 1) return vector<int64_t>{};
  if (is_a && d.size() == 1 && operand.size() >= 2) d.push_back(1);
  vector<int64_t> b;
  if (!broadcast_dims(d, operand, &b) || b != operand)
    return ctx.error("input '" + name + "' has shape " + dims_to_string(p.dims()) + ", which does not fit input '" +
                     (is_a ? "A" : "B") + "' " + dims_to_string(operand) + " (expected a scalar or per-" +
                     (is_a ? "row" : "column") + " values)");
  return d;
}

// operand - zero_point (broadcast) as int32.
StatusOr<vector<int32_t>> subtract_zero_point(KernelContext& ctx, const Tensor& x, const Tensor* zp, bool is_a,
                                              const std::string& zname) {
  vector<int32_t> v = to_int32(x);
  if (!zp) return v;
  ASSIGN_OR_RETURN(vector<int64_t> zd, param_dims(ctx, *zp, x.dims(), is_a, zname));
  const vector<int32_t> z = to_int32(*zp);
  if (zd.empty()) {
    for (int32_t& e : v) e -= z[0];
    return v;
  }
  for (BroadcastIter it(x.dims(), {broadcast_strides(zd, x.dims())}); !it.done(); it.next()) v[it.index()] -= z[it.offset(0)];
  return v;
}

// acc[batch..., M, N] (int32) = A' * B' with A', B' the zero-point-adjusted operands.
Status int_matmul(KernelContext& ctx, const Tensor& a, const vector<int32_t>& av, const Tensor& b,
                  const vector<int32_t>& bv, const vector<int64_t>& out_dims, vector<int32_t>* acc) {
  vector<int64_t> ad = a.dims(), bd = b.dims();
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  const int64_t M = ad[ad.size() - 2], K = ad[ad.size() - 1], N = bd[bd.size() - 1];
  const vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  vector<int64_t> batch;
  if (!broadcast_dims(a_batch, b_batch, &batch)) return internal_error(ctx.node().describe() + ": batch broadcast");
  vector<int64_t> sa = broadcast_strides(a_batch, batch), sb = broadcast_strides(b_batch, batch);
  for (int64_t& s : sa) s *= M * K;
  for (int64_t& s : sb) s *= K * N;
  int64_t total = 1;
  for (int64_t d : out_dims) total *= d;
  acc->assign(static_cast<size_t>(total), 0);
  for (BroadcastIter it(batch, {sa, sb}); !it.done(); it.next())
    gemm_ref<int32_t>(M, N, K, av.data() + it.offset(0), K, 1, bv.data() + it.offset(1), N,
                      acc->data() + it.index() * M * N, N);
  return Status::ok();
}

Status infer_matmul_integer(InferContext& ctx) {
  const TensorType& a = ctx.input_type(0);
  const TensorType& b = ctx.input_type(1);
  RETURN_IF_ERROR(check_8bit(ctx, a.dtype, "A"));
  RETURN_IF_ERROR(check_8bit(ctx, b.dtype, "B"));
  if (ctx.has_input(2) && ctx.input_type(2).dtype != DType::kUndefined && a.dtype != DType::kUndefined &&
      ctx.input_type(2).dtype != a.dtype)
    return ctx.error("input 'a_zero_point' must have the element type of input 'A'");
  if (ctx.has_input(3) && ctx.input_type(3).dtype != DType::kUndefined && b.dtype != DType::kUndefined &&
      ctx.input_type(3).dtype != b.dtype)
    return ctx.error("input 'b_zero_point' must have the element type of input 'B'");
  std::optional<Shape> out;
  RETURN_IF_ERROR(matmul_shape(ctx, a, b, "it", &out));
  ctx.set_output(0, TensorType{DType::kI32, out});
  return Status::ok();
}

Status k_matmul_integer(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const Tensor* azp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const Tensor* bzp = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  RETURN_IF_ERROR(check_8bit(ctx, a.dtype(), "A"));
  RETURN_IF_ERROR(check_8bit(ctx, b.dtype(), "B"));
  if (azp && azp->dtype() != a.dtype()) return ctx.error("input 'a_zero_point' must have the element type of input 'A'");
  if (bzp && bzp->dtype() != b.dtype()) return ctx.error("input 'b_zero_point' must have the element type of input 'B'");
  std::optional<Shape> out;
  RETURN_IF_ERROR(matmul_shape(ctx, a.type(), b.type(), "it", &out));
  ASSIGN_OR_RETURN(vector<int32_t> av, subtract_zero_point(ctx, a, azp, true, "a_zero_point"));
  ASSIGN_OR_RETURN(vector<int32_t> bv, subtract_zero_point(ctx, b, bzp, false, "b_zero_point"));
  vector<int32_t> acc;
  const vector<int64_t> od = out->values();
  RETURN_IF_ERROR(int_matmul(ctx, a, av, b, bv, od, &acc));
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kI32, od));
  std::copy(acc.begin(), acc.end(), y->mutable_data<int32_t>());
  return Status::ok();
}

// QLinearMatMul inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
template <class Ctx>
Status check_qlinear_matmul_types(Ctx& ctx, const vector<DType>& t) {
  RETURN_IF_ERROR(check_8bit(ctx, t[0], "a"));
  RETURN_IF_ERROR(check_8bit(ctx, t[3], "b"));
  RETURN_IF_ERROR(check_8bit(ctx, t[7], "y_zero_point"));
  RETURN_IF_ERROR(check_float_scale(ctx, t[1], "a_scale"));
  RETURN_IF_ERROR(check_float_scale(ctx, t[4], "b_scale"));
  RETURN_IF_ERROR(check_float_scale(ctx, t[6], "y_scale"));
  if (t[2] != DType::kUndefined && t[0] != DType::kUndefined && t[2] != t[0])
    return ctx.error("input 'a_zero_point' must have the element type of input 'a'");
  if (t[5] != DType::kUndefined && t[3] != DType::kUndefined && t[5] != t[3])
    return ctx.error("input 'b_zero_point' must have the element type of input 'b'");
  return Status::ok();
}

Status infer_qlinear_matmul(InferContext& ctx) {
  vector<DType> t;
  for (int64_t i = 0; i < 8; ++i) t.push_back(ctx.has_input(i) ? ctx.input_type(i).dtype : DType::kUndefined);
  RETURN_IF_ERROR(check_qlinear_matmul_types(ctx, t));
  std::optional<Shape> out;
  RETURN_IF_ERROR(matmul_shape(ctx, ctx.input_type(0), ctx.input_type(3), "it", &out));
  ctx.set_output(0, TensorType{t[7], out});
  return Status::ok();
}

// Requantizes int32 accumulators: y = saturate(round(acc * multiplier) + y_zp), element-wise
// multipliers given as a function of the output index.
template <class MulFn>
void requantize(const vector<int32_t>& acc, MulFn&& mul, float y_zp, Tensor* y) {
  float lo = 0, hi = 0;
  quant_range(y->dtype(), &lo, &hi);
  vector<float> q(acc.size());
  for (size_t i = 0; i < acc.size(); ++i)
    q[i] = quantize_value(static_cast<float>(acc[i]) * mul(static_cast<int64_t>(i)), y_zp, lo, hi);
  store_quantized(q, y);
}

template <class Ctx>
Status check_scalar_param(Ctx& ctx, const Tensor& t, const std::string& name) {
  if (t.numel() != 1)
    return ctx.error("input '" + name + "' has shape " + dims_to_string(t.dims()) + "; it must be a scalar");
  return Status::ok();
}

Status k_qlinear_matmul(KernelContext& ctx) {
  vector<DType> t;
  for (int64_t i = 0; i < 8; ++i) t.push_back(ctx.has_input(i) ? ctx.input(i).dtype() : DType::kUndefined);
  RETURN_IF_ERROR(check_qlinear_matmul_types(ctx, t));
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(3);
  const Tensor& a_scale = ctx.input(1);
  const Tensor& b_scale = ctx.input(4);
  const Tensor& y_scale = ctx.input(6);
  const Tensor& y_zp = ctx.input(7);
  RETURN_IF_ERROR(check_scalar_param(ctx, y_scale, "y_scale"));
  RETURN_IF_ERROR(check_scalar_param(ctx, y_zp, "y_zero_point"));
  std::optional<Shape> out;
  RETURN_IF_ERROR(matmul_shape(ctx, a.type(), b.type(), "it", &out));
  const vector<int64_t> od = out->values();
  ASSIGN_OR_RETURN(vector<int32_t> av, subtract_zero_point(ctx, a, &ctx.input(2), true, "a_zero_point"));
  ASSIGN_OR_RETURN(vector<int32_t> bv, subtract_zero_point(ctx, b, &ctx.input(5), false, "b_zero_point"));
  vector<int32_t> acc;
  RETURN_IF_ERROR(int_matmul(ctx, a, av, b, bv, od, &acc));
  // Per-element multiplier a_scale * b_scale / y_scale, with per-row a_scale and per-column b_scale
  // broadcast over the output (1-D A or B drop those axes; their scales must then be scalars).
  const vector<float> as = to_float_vector(a_scale), bs = to_float_vector(b_scale);
  const float ys = to_float_vector(y_scale)[0];
  vector<int64_t> ad = a.dims(), bd = b.dims();
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  if (a1 && as.size() != 1) return ctx.error("input 'a_scale' must be a scalar when input 'a' is 1-D");
  if (b1 && bs.size() != 1) return ctx.error("input 'b_scale' must be a scalar when input 'b' is 1-D");
  ASSIGN_OR_RETURN(vector<int64_t> asd, param_dims(ctx, a_scale, ad, true, "a_scale"));
  ASSIGN_OR_RETURN(vector<int64_t> bsd, param_dims(ctx, b_scale, bd, false, "b_scale"));
  // Output index -> operand parameter index, via the full (un-dropped) output dims.
  vector<int64_t> full = od;
  if (a1) full.insert(full.end() - (b1 ? 0 : 1), 1);
  if (b1) full.push_back(1);
  // A's parameter varies over rows (its dims [..., M, 1]), B's over columns ([..., 1, N]).
  vector<int64_t> sa_full(full.size(), 0), sb_full(full.size(), 0);
  if (!asd.empty()) {
    if (asd.back() != 1)
      return ctx.error("input 'a_scale' has shape " + dims_to_string(a_scale.dims()) + "; expected per-row values");
    sa_full = broadcast_strides(asd, full);
  }
  if (!bsd.empty()) {
    if (bsd.size() >= 2 && bsd[bsd.size() - 2] != 1)
      return ctx.error("input 'b_scale' has shape " + dims_to_string(b_scale.dims()) + "; expected per-column values");
    sb_full = broadcast_strides(bsd, full);
  }
  vector<float> mul(acc.size());
  for (BroadcastIter it(full, {sa_full, sb_full}); !it.done(); it.next())
    mul[it.index()] = as[it.offset(0)] * bs[it.offset(1)] / ys;
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, y_zp.dtype(), od));
  requantize(acc, [&](int64_t i) { return mul[i]; }, static_cast<float>(y_zp.get_int64(0)), y);
  return Status::ok();
}

// ---- ConvInteger / QLinearConv --------------------------------------------------------------

struct QConvInfo {
  SpatialAttrs attrs;
  int64_t group = 1;
  std::optional<Shape> out;
  vector<AxisGeom> axes;  // filled when all dims are known
};

template <class Ctx>
Status qconv_info(Ctx& ctx, const TensorType& x, const TensorType& w, QConvInfo* ci) {
  RETURN_IF_ERROR(check_8bit(ctx, x.dtype, "x"));
  RETURN_IF_ERROR(check_8bit(ctx, w.dtype, "w"));
  ci->group = ctx.get_int("group", 1);
  if (ci->group < 1) return ctx.error("attribute 'group' must be >= 1, got " + std::to_string(ci->group));
  if (x.shape && x.shape->rank() < 3)
    return ctx.error("input 'x' must have rank >= 3 (N x C x D1 x ... x Dn), got shape " + x.shape->to_string());
  if (w.shape && w.shape->rank() < 3)
    return ctx.error("input 'w' must have rank >= 3 (M x C/group x k1 x ... x kn), got shape " + w.shape->to_string());
  if (x.shape && w.shape && x.shape->rank() != w.shape->rank())
    return ctx.error("input 'w' has shape " + w.shape->to_string() + " but input 'x' has shape " +
                     x.shape->to_string() + "; they must have the same rank");
  ci->out.reset();
  ci->axes.clear();
  if (!x.shape && !w.shape) return Status::ok();
  RETURN_IF_ERROR(read_conv_attrs(ctx, x, w, "w", &ci->attrs));
  const int64_t g = ci->group;
  const Dim xn = x.shape ? x.shape->dims[0] : Dim(), xc = x.shape ? x.shape->dims[1] : Dim();
  const Dim wm = w.shape ? w.shape->dims[0] : Dim(), wc = w.shape ? w.shape->dims[1] : Dim();
  if (wm.is_known() && wm.value % g != 0)
    return ctx.error("input 'w' has " + std::to_string(wm.value) + " output channels, not divisible by group = " +
                     std::to_string(g));
  if (xc.is_known() && wc.is_known() && wc.value * g != xc.value)
    return ctx.error("input 'w' has shape " + w.shape->to_string() + " but input 'x' " + x.shape->to_string() +
                     " has " + std::to_string(xc.value) + " channels and group = " + std::to_string(g) +
                     "; w.shape[1] must be channels / group");
  Shape out;
  out.dims = {xn, wm};
  RETURN_IF_ERROR(conv_pool_spatial_out(ctx, ci->attrs, x, &out, &ci->axes));
  ci->out = out;
  return Status::ok();
}

// acc[N, M, out...] = conv(x', w') with x' = x - x_zp (padding contributes 0) and w' = w - w_zp[m].
// im2col in column chunks + gemm_ref<int32_t> per (batch, group), as Conv's reference kernel.
void int_conv(const vector<int32_t>& x, const vector<int32_t>& w, const vector<int64_t>& xd, const vector<int64_t>& wd,
              const QConvInfo& ci, vector<int32_t>* acc) {
  const TapGeom g = conv_tap_geom(ci.attrs, ci.axes);
  const int64_t N = xd[0], C = xd[1], M = wd[0], G = ci.group;
  const int64_t Cg = C / G, Mg = M / G;
  const int64_t IS = g.image_size, OS = g.grid_size;
  const int64_t K = Cg * g.kernel_size;
  acc->assign(static_cast<size_t>(N * M * OS), 0);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(OS, kColumnBudget / std::max<int64_t>(K, 1)));
  vector<int32_t> col(static_cast<size_t>(K * chunk));
  for (int64_t q0 = 0; q0 < OS; q0 += chunk) {
    const int64_t q1 = std::min(OS, q0 + chunk), nc = q1 - q0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t grp = 0; grp < G; ++grp) {
        im2col(x.data() + (n * C + grp * Cg) * IS, Cg, g, q0, q1, col.data());
        gemm_ref<int32_t>(Mg, nc, K, w.data() + grp * Mg * K, K, 1, col.data(), nc,
                          acc->data() + (n * M + grp * Mg) * OS + q0, OS);
      }
  }
}

// x - x_zp (scalar) and w - w_zp (scalar or per output channel) as int32.
StatusOr<std::pair<vector<int32_t>, vector<int32_t>>> conv_operands(KernelContext& ctx, const Tensor& x,
                                                                     const Tensor* xzp, const Tensor& w,
                                                                     const Tensor* wzp, const char* xzp_name,
                                                                     const char* wzp_name) {
  vector<int32_t> xv = to_int32(x), wv = to_int32(w);
  if (xzp) {
    if (xzp->dtype() != x.dtype())
      return ctx.error(std::string("input '") + xzp_name + "' must have the element type of input 'x'");
    if (xzp->numel() != 1)
      return ctx.error(std::string("input '") + xzp_name + "' has shape " + dims_to_string(xzp->dims()) +
                       "; it must be a scalar");
    const int32_t z = static_cast<int32_t>(xzp->get_int64(0));
    for (int32_t& v : xv) v -= z;
  }
  if (wzp) {
    if (wzp->dtype() != w.dtype())
      return ctx.error(std::string("input '") + wzp_name + "' must have the element type of input 'w'");
    const int64_t M = w.dim(0);
    if (wzp->numel() != 1 && !(wzp->rank() == 1 && wzp->numel() == M))
      return ctx.error(std::string("input '") + wzp_name + "' has shape " + dims_to_string(wzp->dims()) +
                       "; it must be a scalar or have M = " + std::to_string(M) + " elements");
    const int64_t per = M > 0 ? w.numel() / M : 0;
    for (int64_t m = 0; m < M; ++m) {
      const int32_t z = static_cast<int32_t>(wzp->get_int64(wzp->numel() == 1 ? 0 : m));
      for (int64_t i = 0; i < per; ++i) wv[m * per + i] -= z;
    }
  }
  return std::make_pair(std::move(xv), std::move(wv));
}

Status infer_conv_integer(InferContext& ctx) {
  QConvInfo ci;
  RETURN_IF_ERROR(qconv_info(ctx, ctx.input_type(0), ctx.input_type(1), &ci));
  ctx.set_output(0, TensorType{DType::kI32, ci.out});
  return Status::ok();
}

Status k_conv_integer(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  QConvInfo ci;
  RETURN_IF_ERROR(qconv_info(ctx, x.type(), w.type(), &ci));
  if (!ci.out || !ci.out->is_static() || static_cast<int64_t>(ci.axes.size()) != x.rank() - 2)
    return internal_error(ctx.node().describe() + ": ConvInteger geometry is incomplete");
  const Tensor* xzp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const Tensor* wzp = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  ASSIGN_OR_RETURN(auto ops, conv_operands(ctx, x, xzp, w, wzp, "x_zero_point", "w_zero_point"));
  vector<int32_t> acc;
  int_conv(ops.first, ops.second, x.dims(), w.dims(), ci, &acc);
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kI32, ci.out->values()));
  std::copy(acc.begin(), acc.end(), y->mutable_data<int32_t>());
  return Status::ok();
}

// QLinearConv inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B.
Status infer_qlinear_conv(InferContext& ctx) {
  QConvInfo ci;
  RETURN_IF_ERROR(qconv_info(ctx, ctx.input_type(0), ctx.input_type(3), &ci));
  const DType yt = ctx.input_type(7).dtype;
  RETURN_IF_ERROR(check_8bit(ctx, yt, "y_zero_point"));
  for (int64_t i : {1, 4, 6}) {
    static const char* names[] = {"", "x_scale", "", "", "w_scale", "", "y_scale"};
    RETURN_IF_ERROR(check_float_scale(ctx, ctx.input_type(i).dtype, names[i]));
  }
  if (ctx.has_input(8) && ctx.input_type(8).dtype != DType::kUndefined && ctx.input_type(8).dtype != DType::kI32)
    return ctx.error(std::string("input 'B' has element type ") + dtype_name(ctx.input_type(8).dtype) + "; expected int32");
  ctx.set_output(0, TensorType{yt, ci.out});
  return Status::ok();
}

Status k_qlinear_conv(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(3);
  QConvInfo ci;
  RETURN_IF_ERROR(qconv_info(ctx, x.type(), w.type(), &ci));
  if (!ci.out || !ci.out->is_static() || static_cast<int64_t>(ci.axes.size()) != x.rank() - 2)
    return internal_error(ctx.node().describe() + ": QLinearConv geometry is incomplete");
  const Tensor& x_scale = ctx.input(1);
  const Tensor& w_scale = ctx.input(4);
  const Tensor& y_scale = ctx.input(6);
  const Tensor& y_zp = ctx.input(7);
  RETURN_IF_ERROR(check_8bit(ctx, y_zp.dtype(), "y_zero_point"));
  RETURN_IF_ERROR(check_float_scale(ctx, x_scale.dtype(), "x_scale"));
  RETURN_IF_ERROR(check_float_scale(ctx, w_scale.dtype(), "w_scale"));
  RETURN_IF_ERROR(check_float_scale(ctx, y_scale.dtype(), "y_scale"));
  RETURN_IF_ERROR(check_scalar_param(ctx, x_scale, "x_scale"));
  RETURN_IF_ERROR(check_scalar_param(ctx, y_scale, "y_scale"));
  RETURN_IF_ERROR(check_scalar_param(ctx, y_zp, "y_zero_point"));
  const int64_t M = w.dim(0);
  if (w_scale.numel() != 1 && !(w_scale.rank() == 1 && w_scale.numel() == M))
    return ctx.error("input 'w_scale' has shape " + dims_to_string(w_scale.dims()) +
                     "; it must be a scalar or have M = " + std::to_string(M) + " elements");
  ASSIGN_OR_RETURN(auto ops, conv_operands(ctx, x, &ctx.input(2), w, &ctx.input(5), "x_zero_point", "w_zero_point"));
  vector<int32_t> acc;
  int_conv(ops.first, ops.second, x.dims(), w.dims(), ci, &acc);
  const vector<int64_t> od = ci.out->values();
  int64_t OS = 1;
  for (size_t i = 2; i < od.size(); ++i) OS *= od[i];
  if (ctx.has_input(8)) {
    const Tensor& bias = ctx.input(8);
    if (bias.dtype() != DType::kI32 || bias.rank() != 1 || bias.numel() != M)
      return ctx.error("input 'B' must be int32 with M = " + std::to_string(M) + " elements, got " +
                       bias.type().to_string());
    const int32_t* pb = bias.data<int32_t>();
    for (int64_t n = 0; n < od[0]; ++n)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t i = 0; i < OS; ++i) acc[(n * M + m) * OS + i] += pb[m];
  }
  const float xs = to_float_vector(x_scale)[0], ys = to_float_vector(y_scale)[0];
  const vector<float> ws = to_float_vector(w_scale);
  vector<float> mul(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) mul[m] = xs * ws[ws.size() == 1 ? 0 : m] / ys;
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, y_zp.dtype(), od));
  requantize(acc, [&](int64_t i) { return mul[(i / OS) % M]; }, static_cast<float>(y_zp.get_int64(0)), y);
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
  r.add(OpSchema{.name = "MatMulInteger", .since_version = 10, .min_inputs = 2, .max_inputs = 4,
                 .types = {DType::kU8, DType::kI8}, .infer = infer_matmul_integer, .kernel = k_matmul_integer});
  r.add(OpSchema{.name = "QLinearMatMul", .since_version = 10, .min_inputs = 8, .max_inputs = 8,
                 .types = {DType::kU8, DType::kI8}, .infer = infer_qlinear_matmul, .kernel = k_qlinear_matmul});
  const vector<AttrSpec> conv_attrs = {{"auto_pad", AttrType::kString}, {"dilations", AttrType::kInts},
                                       {"group", AttrType::kInt},       {"kernel_shape", AttrType::kInts},
                                       {"pads", AttrType::kInts},       {"strides", AttrType::kInts}};
  r.add(OpSchema{.name = "ConvInteger", .since_version = 10, .min_inputs = 2, .max_inputs = 4, .attrs = conv_attrs,
                 .types = {DType::kU8, DType::kI8}, .infer = infer_conv_integer, .kernel = k_conv_integer});
  r.add(OpSchema{.name = "QLinearConv", .since_version = 10, .min_inputs = 8, .max_inputs = 9, .attrs = conv_attrs,
                 .types = {DType::kU8, DType::kI8}, .infer = infer_qlinear_conv, .kernel = k_qlinear_conv});
}

}  // namespace ferry
