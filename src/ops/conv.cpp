// Op family 'conv' (see op_families.inc): Conv and ConvTranspose. Conv is im2col + gemm_ref per
// (batch, group); ConvTranspose is gemm_ref + col2im (ops/conv_geometry.h). f32 accumulates in f32,
// f64 in f64; f16/bf16 are computed in f32 and rounded back.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "ops/conv_geometry.h"
#include "ops/float_util.h"
#include "ops/gemm_ref.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

int64_t product(const vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// y[m, i] += bias[m] for the M planes of OS elements of one batch item.
template <typename T>
void add_bias(const T* bias, int64_t M, int64_t OS, T* y) {
  for (int64_t m = 0; m < M; ++m) {
    T* ym = y + m * OS;
    const T bm = bias[m];
    for (int64_t i = 0; i < OS; ++i) ym[i] += bm;
  }
}

// ---- Conv -----------------------------------------------------------------------------------

struct ConvInfo {
  SpatialAttrs attrs;
  int64_t group = 1;
  std::optional<Shape> out;  // nullopt when even the rank is unknown
  vector<AxisGeom> axes;     // per spatial axis, filled when the kernel and all input dims are known
};

// Validates a Conv node against its input types and computes the output shape (shared by the
// shape rule, which may see unknown dims, and the kernel, which sees concrete ones).
template <class Ctx>
Status conv_info(Ctx& ctx, const TensorType& x, const TensorType& w, const TensorType* b, ConvInfo* ci) {
  RETURN_IF_ERROR(check_float_dtype(ctx, x.dtype, "X"));
  RETURN_IF_ERROR(check_same_dtype(ctx, x.dtype, "X", w.dtype, "W"));
  if (b) RETURN_IF_ERROR(check_same_dtype(ctx, x.dtype, "X", b->dtype, "B"));
  ci->group = ctx.get_int("group", 1);
  if (ci->group < 1) return ctx.error("attribute 'group' must be >= 1, got " + std::to_string(ci->group));
  if (x.shape && x.shape->rank() < 3)
    return ctx.error("input 'X' must have rank >= 3 (N x C x D1 x ... x Dn), got shape " + x.shape->to_string());
  if (w.shape && w.shape->rank() < 3)
    return ctx.error("input 'W' must have rank >= 3 (M x C/group x k1 x ... x kn), got shape " + w.shape->to_string());
  if (x.shape && w.shape && x.shape->rank() != w.shape->rank())
    return ctx.error("input 'W' has shape " + w.shape->to_string() + " (rank " + std::to_string(w.shape->rank()) +
                     ") but input 'X' has shape " + x.shape->to_string() + "; W must have the same rank as X");
  if (b && b->shape && b->shape->rank() != 1)
    return ctx.error("input 'B' must be 1-D (size M), got shape " + b->shape->to_string());
  if (!x.shape && !w.shape) {
    ci->out.reset();
    return Status::ok();
  }
  RETURN_IF_ERROR(read_conv_attrs(ctx, x, w, "W", &ci->attrs));
  const int64_t g = ci->group;
  const Dim xn = x.shape ? x.shape->dims[0] : Dim(), xc = x.shape ? x.shape->dims[1] : Dim();
  const Dim wm = w.shape ? w.shape->dims[0] : Dim(), wc = w.shape ? w.shape->dims[1] : Dim();
  if (wm.is_known() && wm.value % g != 0)
    return ctx.error("input 'W' has " + std::to_string(wm.value) + " output channels (W.shape[0]), which is not divisible by group = " +
                     std::to_string(g));
  if (xc.is_known() && xc.value % g != 0)
    return ctx.error("input 'X' has " + std::to_string(xc.value) + " channels (X.shape[1]), which is not divisible by group = " +
                     std::to_string(g));
  if (xc.is_known() && wc.is_known() && wc.value * g != xc.value)
    return ctx.error("input 'W' has shape " + w.shape->to_string() + ": W.shape[1] = " + std::to_string(wc.value) +
                     " input channels per group, but input 'X' " + x.shape->to_string() + " has " +
                     std::to_string(xc.value) + " channels and group = " + std::to_string(g) +
                     ", so W.shape[1] must be " + std::to_string(xc.value / g));
  if (b && b->shape && b->shape->dims[0].is_known() && wm.is_known() && b->shape->dims[0].value != wm.value)
    return ctx.error("input 'B' has shape " + b->shape->to_string() + " but input 'W' has " + std::to_string(wm.value) +
                     " output channels; B must have size M = " + std::to_string(wm.value));
  Shape out;
  out.dims = {xn, wm};
  RETURN_IF_ERROR(conv_pool_spatial_out(ctx, ci->attrs, x, &out, &ci->axes));
  ci->out = out;
  return Status::ok();
}

Status infer_conv(InferContext& ctx) {
  ConvInfo ci;
  const TensorType* b = ctx.has_input(2) ? &ctx.input_type(2) : nullptr;
  RETURN_IF_ERROR(conv_info(ctx, ctx.input_type(0), ctx.input_type(1), b, &ci));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, ci.out});
  return Status::ok();
}

template <typename T>
void conv_forward(const T* x, const T* w, const T* bias, T* y, const vector<int64_t>& xd, const vector<int64_t>& wd,
                  const ConvInfo& ci) {
  const int64_t nd = static_cast<int64_t>(xd.size()) - 2;
  const TapGeom g = conv_tap_geom(ci.attrs, ci.axes);
  bool pointwise = true;  // 1x1 kernel, stride 1, no padding: the input planes are the im2col matrix
  for (int64_t i = 0; i < nd; ++i) {
    const AxisGeom& a = ci.axes[i];
    if (ci.attrs.kernel[i] != 1 || ci.attrs.strides[i] != 1 || a.pad_begin != 0 || a.pad_end != 0) pointwise = false;
  }
  const int64_t N = xd[0], C = xd[1], M = wd[0], G = ci.group;
  const int64_t Cg = C / G, Mg = M / G;
  const int64_t K = Cg * g.kernel_size;  // reduction length
  const int64_t OS = g.grid_size, IS = g.image_size;
  const int64_t chunk = pointwise ? OS : std::max<int64_t>(1, std::min<int64_t>(OS, kColumnBudget / std::max<int64_t>(K, 1)));
  vector<T> col(pointwise ? 0 : static_cast<size_t>(K * chunk));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t grp = 0; grp < G; ++grp) {
      const T* xg = x + (n * C + grp * Cg) * IS;
      const T* wg = w + grp * Mg * K;
      T* yg = y + (n * M + grp * Mg) * OS;
      if (pointwise) {
        gemm_ref<T>(Mg, OS, Cg, wg, K, 1, xg, IS, yg, OS);
        continue;
      }
      for (int64_t q0 = 0; q0 < OS; q0 += chunk) {
        const int64_t q1 = std::min(OS, q0 + chunk);
        im2col(xg, Cg, g, q0, q1, col.data());
        gemm_ref<T>(Mg, q1 - q0, K, wg, K, 1, col.data(), q1 - q0, yg + q0, OS);
      }
    }
    if (bias) add_bias(bias, M, OS, y + n * M * OS);
  }
}

Status k_conv(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor* b = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const TensorType bt = b ? b->type() : TensorType{};
  ConvInfo ci;
  RETURN_IF_ERROR(conv_info(ctx, x.type(), w.type(), b ? &bt : nullptr, &ci));
  if (!ci.out || !ci.out->is_static() || ci.attrs.kernel.empty() ||
      static_cast<int64_t>(ci.axes.size()) != x.rank() - 2)
    return internal_error(ctx.node().describe() + ": Conv geometry is incomplete");
  const DType dt = x.dtype();
  Tensor xf = widen_to_f32(x), wf = widen_to_f32(w), bf = b ? widen_to_f32(*b) : Tensor();
  ASSIGN_OR_RETURN(Tensor y, make_result(ctx, xf.dtype(), ci.out->values()));
  switch (xf.dtype()) {
    FERRY_DISPATCH_FLOAT_CASES(conv_forward<scalar_t>(xf.data<scalar_t>(), wf.data<scalar_t>(),
                                                      b ? bf.data<scalar_t>() : nullptr, y.mutable_data<scalar_t>(),
                                                      x.dims(), w.dims(), ci))
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
  return finish_output(ctx, std::move(y), dt);
}

// ---- ConvTranspose --------------------------------------------------------------------------

struct ConvTInfo {
  SpatialAttrs attrs;
  int64_t group = 1;
  std::optional<Shape> out;
  vector<AxisGeom> axes;  // in = input size, out = output size, pads (may be negative with output_shape)
};

template <class Ctx>
Status convt_info(Ctx& ctx, const TensorType& x, const TensorType& w, const TensorType* b, ConvTInfo* ci) {
  RETURN_IF_ERROR(check_float_dtype(ctx, x.dtype, "X"));
  RETURN_IF_ERROR(check_same_dtype(ctx, x.dtype, "X", w.dtype, "W"));
  if (b) RETURN_IF_ERROR(check_same_dtype(ctx, x.dtype, "X", b->dtype, "B"));
  ci->group = ctx.get_int("group", 1);
  const int64_t g = ci->group;
  if (g < 1) return ctx.error("attribute 'group' must be >= 1, got " + std::to_string(g));
  if (x.shape && x.shape->rank() < 3)
    return ctx.error("input 'X' must have rank >= 3 (N x C x D1 x ... x Dn), got shape " + x.shape->to_string());
  if (w.shape && w.shape->rank() < 3)
    return ctx.error("input 'W' must have rank >= 3 (C x M/group x k1 x ... x kn), got shape " + w.shape->to_string());
  if (x.shape && w.shape && x.shape->rank() != w.shape->rank())
    return ctx.error("input 'W' has shape " + w.shape->to_string() + " but input 'X' has shape " + x.shape->to_string() +
                     "; W must have the same rank as X");
  if (b && b->shape && b->shape->rank() != 1)
    return ctx.error("input 'B' must be 1-D (size M), got shape " + b->shape->to_string());
  if (!x.shape && !w.shape) {
    ci->out.reset();
    return Status::ok();
  }
  RETURN_IF_ERROR(read_conv_attrs(ctx, x, w, "W", &ci->attrs));
  const int64_t nd = ci->attrs.nd;
  vector<int64_t> output_padding = ctx.get_ints("output_padding", vector<int64_t>(static_cast<size_t>(nd), 0));
  if (static_cast<int64_t>(output_padding.size()) != nd)
    return ctx.error("attribute 'output_padding' " + dims_to_string(output_padding) + " must have " + std::to_string(nd) +
                     " values");
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t limit = std::max(ci->attrs.strides[i], ci->attrs.dilations[i]);
    if (output_padding[i] < 0 || output_padding[i] >= limit)
      return ctx.error("attribute 'output_padding' " + dims_to_string(output_padding) +
                       ": each value must be >= 0 and smaller than the stride or dilation of its axis");
  }
  std::optional<vector<int64_t>> output_shape;
  if (ctx.has("output_shape")) {
    vector<int64_t> os = ctx.get_ints("output_shape");
    if (static_cast<int64_t>(os.size()) == nd + 2) os.erase(os.begin(), os.begin() + 2);
    if (static_cast<int64_t>(os.size()) != nd)
      return ctx.error("attribute 'output_shape' " + dims_to_string(ctx.get_ints("output_shape")) + " must have " +
                       std::to_string(nd) + " (spatial) values");
    for (int64_t v : os)
      if (v < 0 || v > kMaxTensorElements)
        return ctx.error("attribute 'output_shape' " + dims_to_string(os) + " has a value out of range");
    output_shape = os;
  }
  const Dim xn = x.shape ? x.shape->dims[0] : Dim(), xc = x.shape ? x.shape->dims[1] : Dim();
  const Dim wc = w.shape ? w.shape->dims[0] : Dim(), wm = w.shape ? w.shape->dims[1] : Dim();
  if (xc.is_known() && xc.value % g != 0)
    return ctx.error("input 'X' has " + std::to_string(xc.value) + " channels (X.shape[1]), which is not divisible by group = " +
                     std::to_string(g));
  if (xc.is_known() && wc.is_known() && xc.value != wc.value)
    return ctx.error("input 'W' has shape " + w.shape->to_string() + ": W.shape[0] = " + std::to_string(wc.value) +
                     " must equal the channels of input 'X' " + x.shape->to_string() + " (" + std::to_string(xc.value) + ")");
  Dim m;
  if (wm.is_known()) m = Dim(wm.value * g);
  if (b && b->shape && b->shape->dims[0].is_known() && m.is_known() && b->shape->dims[0].value != m.value)
    return ctx.error("input 'B' has shape " + b->shape->to_string() + " but the output has " + std::to_string(m.value) +
                     " channels (W.shape[1] * group); B must have that size");
  Shape out;
  out.dims = {xn, m};
  ci->axes.assign(static_cast<size_t>(nd), AxisGeom{});
  bool all_known = !ci->attrs.kernel.empty() && x.shape.has_value();
  for (int64_t i = 0; i < nd; ++i) {
    const Dim in = x.shape ? x.shape->dims[2 + i] : Dim();
    if (in.is_known() && !ci->attrs.kernel.empty()) {
      RETURN_IF_ERROR(conv_transpose_axis(ctx, ci->attrs, output_padding[i], output_shape, i, in.value, &ci->axes[i]));
      out.dims.push_back(Dim(ci->axes[i].out));
    } else {
      all_known = false;
      out.dims.push_back(output_shape ? Dim((*output_shape)[i]) : Dim());
    }
  }
  if (!all_known) ci->axes.clear();
  ci->out = out;
  return Status::ok();
}

Status infer_conv_transpose(InferContext& ctx) {
  ConvTInfo ci;
  const TensorType* b = ctx.has_input(2) ? &ctx.input_type(2) : nullptr;
  RETURN_IF_ERROR(convt_info(ctx, ctx.input_type(0), ctx.input_type(1), b, &ci));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, ci.out});
  return Status::ok();
}

template <typename T>
void conv_transpose_forward(const T* x, const T* w, const T* bias, T* y, const vector<int64_t>& xd,
                            const vector<int64_t>& wd, const ConvTInfo& ci) {
  const int64_t nd = static_cast<int64_t>(xd.size()) - 2;
  TapGeom g;  // grid = input positions, image = output
  g.nd = nd;
  for (int64_t i = 0; i < nd; ++i) {
    const AxisGeom& a = ci.axes[i];
    g.grid.push_back(a.in);
    g.image.push_back(a.out);
    g.kernel.push_back(ci.attrs.kernel[i]);
    g.stride.push_back(ci.attrs.strides[i]);
    g.dilation.push_back(ci.attrs.dilations[i]);
    g.pad.push_back(a.pad_begin);
  }
  g.grid_size = product(g.grid);
  g.image_size = product(g.image);
  g.kernel_size = product(g.kernel);
  const int64_t N = xd[0], C = xd[1], G = ci.group;
  const int64_t Cg = C / G, Mg = wd[1], M = Mg * G;
  const int64_t IS = g.grid_size, OS = g.image_size;
  const int64_t rows = Mg * g.kernel_size;
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(IS, kColumnBudget / std::max<int64_t>(rows, 1)));
  vector<T> col(static_cast<size_t>(rows * chunk));
  std::fill(y, y + N * M * OS, T(0));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t grp = 0; grp < G; ++grp) {
      const T* xg = x + (n * C + grp * Cg) * IS;
      const T* wg = w + grp * Cg * rows;  // A(r, c) = W[grp*Cg + c][r]: the group's weights transposed
      T* yg = y + (n * M + grp * Mg) * OS;
      for (int64_t q0 = 0; q0 < IS; q0 += chunk) {
        const int64_t q1 = std::min(IS, q0 + chunk);
        gemm_ref<T>(rows, q1 - q0, Cg, wg, 1, rows, xg + q0, IS, col.data(), q1 - q0);
        col2im(col.data(), Mg, g, q0, q1, yg);
      }
    }
    if (bias) add_bias(bias, M, OS, y + n * M * OS);
  }
}

Status k_conv_transpose(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor* b = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const TensorType bt = b ? b->type() : TensorType{};
  ConvTInfo ci;
  RETURN_IF_ERROR(convt_info(ctx, x.type(), w.type(), b ? &bt : nullptr, &ci));
  if (!ci.out || !ci.out->is_static() || static_cast<int64_t>(ci.axes.size()) != x.rank() - 2)
    return internal_error(ctx.node().describe() + ": ConvTranspose geometry is incomplete");
  const DType dt = x.dtype();
  Tensor xf = widen_to_f32(x), wf = widen_to_f32(w), bf = b ? widen_to_f32(*b) : Tensor();
  ASSIGN_OR_RETURN(Tensor y, make_result(ctx, xf.dtype(), ci.out->values()));
  switch (xf.dtype()) {
    FERRY_DISPATCH_FLOAT_CASES(conv_transpose_forward<scalar_t>(xf.data<scalar_t>(), wf.data<scalar_t>(),
                                                                b ? bf.data<scalar_t>() : nullptr,
                                                                y.mutable_data<scalar_t>(), x.dims(), w.dims(), ci))
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
  return finish_output(ctx, std::move(y), dt);
}

}  // namespace

void register_conv_ops(OpRegistry& r) {
  const vector<AttrSpec> conv_attrs = {{"auto_pad", AttrType::kString}, {"dilations", AttrType::kInts},
                                       {"group", AttrType::kInt},       {"kernel_shape", AttrType::kInts},
                                       {"pads", AttrType::kInts},       {"strides", AttrType::kInts}};
  // Conv-1 and Conv-11 compute the same thing (11 only clarified auto_pad).
  r.add(OpSchema{.name = "Conv", .since_version = 1, .min_inputs = 2, .max_inputs = 3, .attrs = conv_attrs,
                 .types = kFloatTypes, .infer = infer_conv, .kernel = k_conv});
  vector<AttrSpec> convt_attrs = conv_attrs;
  convt_attrs.push_back({"output_padding", AttrType::kInts});
  convt_attrs.push_back({"output_shape", AttrType::kInts});
  r.add(OpSchema{.name = "ConvTranspose", .since_version = 1, .min_inputs = 2, .max_inputs = 3, .attrs = convt_attrs,
                 .types = kFloatTypes, .infer = infer_conv_transpose, .kernel = k_conv_transpose});
}

}  // namespace ferry
