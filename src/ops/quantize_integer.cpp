// Op family 'quantize_integer': MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv (10).
// Integer products accumulate in int32 (gemm_ref<int32_t> on zero-point-adjusted operands, the
// convolutions through Conv's im2col: ops/conv_geometry.h); the QLinear ops requantize
// acc * (scale_a * scale_b / scale_y) in f32 (ops/quantize_util.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "ops/conv_geometry.h"
#include "ops/gemm_ref.h"
#include "ops/op_util.h"
#include "ops/quantize_util.h"

namespace ferry {
namespace {

using std::vector;

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
  MatMulDims d;
  if (!matmul_dims(a.dims(), b.dims(), &d)) return internal_error(ctx.node().describe() + ": batch broadcast");
  const int64_t M = d.M, K = d.K, N = d.N;
  vector<int64_t> sa = broadcast_strides(d.a_batch, d.batch), sb = broadcast_strides(d.b_batch, d.batch);
  for (int64_t& s : sa) s *= M * K;
  for (int64_t& s : sb) s *= K * N;
  int64_t total = 1;
  for (int64_t d : out_dims) total *= d;
  acc->assign(static_cast<size_t>(total), 0);
  for (BroadcastIter it(d.batch, {sa, sb}); !it.done(); it.next())
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

void register_quantize_integer_ops(OpRegistry& r) {
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
