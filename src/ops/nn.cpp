// Op family 'nn': Conv, ConvTranspose, Gemm, MatMul, Dropout (inference mode).
// Conv is im2col + gemm_ref per (batch, group); ConvTranspose is gemm_ref + col2im; Gemm and MatMul
// call gemm_ref directly. f32 accumulates in f32, f64 in f64; f16/bf16 are computed in f32 and rounded back.
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

const vector<DType> kGemmTypes = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                                  DType::kI32, DType::kI64, DType::kU32, DType::kU64};

int64_t product(const vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

template <class Ctx>
Status check_float_input(Ctx& ctx, DType t, const char* name) {
  if (t != DType::kUndefined && !dtype_is_float(t))
    return ctx.error(std::string("input '") + name + "' has element type " + dtype_name(t) +
                     "; only float types (f16, bf16, f32, f64) are supported");
  return Status::ok();
}

template <class Ctx>
Status check_same_dtype(Ctx& ctx, DType first, const char* first_name, DType other, const char* other_name) {
  if (first != DType::kUndefined && other != DType::kUndefined && first != other)
    return ctx.error(std::string("input '") + other_name + "' has element type " + dtype_name(other) + " but input '" +
                     first_name + "' has " + dtype_name(first) + "; they must match");
  return Status::ok();
}

// Creates the kernel's output (f32 scratch for f16/bf16, which is rounded back by finish_output).
StatusOr<Tensor> make_result(KernelContext& ctx, DType compute, const vector<int64_t>& dims) {
  return Tensor::create(compute, dims, ctx.node().describe() + " output 0");
}
Status finish_output(KernelContext& ctx, Tensor result, DType out_dtype) {
  if (result.dtype() != out_dtype) {
    ASSIGN_OR_RETURN(result, cast_tensor(result, out_dtype));
  }
  ctx.set_output(0, std::move(result));
  return Status::ok();
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
  RETURN_IF_ERROR(check_float_input(ctx, x.dtype, "X"));
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
    if (bias) {
      for (int64_t m = 0; m < M; ++m) {
        T* ym = y + (n * M + m) * OS;
        const T bm = bias[m];
        for (int64_t i = 0; i < OS; ++i) ym[i] += bm;
      }
    }
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
  RETURN_IF_ERROR(check_float_input(ctx, x.dtype, "X"));
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
    if (bias) {
      for (int64_t m = 0; m < M; ++m) {
        T* ym = y + (n * M + m) * OS;
        const T bm = bias[m];
        for (int64_t i = 0; i < OS; ++i) ym[i] += bm;
      }
    }
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

// ---- Gemm -----------------------------------------------------------------------------------

template <class Ctx>
Status check_gemm_dtype(Ctx& ctx, DType t, const char* name) {
  if (t == DType::kUndefined) return Status::ok();
  if (std::find(kGemmTypes.begin(), kGemmTypes.end(), t) == kGemmTypes.end())
    return ctx.error(std::string("input '") + name + "' has element type " + dtype_name(t) +
                     "; supported: f16, bf16, f32, f64, i32, i64, u32, u64");
  return Status::ok();
}

// Validates Gemm's inputs; out = [M, N] with unknown dims where they cannot be told.
template <class Ctx>
Status gemm_info(Ctx& ctx, const TensorType& a, const TensorType& b, const TensorType* c, Shape* out) {
  RETURN_IF_ERROR(check_gemm_dtype(ctx, a.dtype, "A"));
  RETURN_IF_ERROR(check_same_dtype(ctx, a.dtype, "A", b.dtype, "B"));
  if (c) RETURN_IF_ERROR(check_same_dtype(ctx, a.dtype, "A", c->dtype, "C"));
  const bool ta = ctx.get_int("transA", 0) != 0, tb = ctx.get_int("transB", 0) != 0;
  if (a.shape && a.shape->rank() != 2) return ctx.error("input 'A' must be 2-D, got shape " + a.shape->to_string());
  if (b.shape && b.shape->rank() != 2) return ctx.error("input 'B' must be 2-D, got shape " + b.shape->to_string());
  const Dim m = a.shape ? a.shape->dims[ta ? 1 : 0] : Dim(), ka = a.shape ? a.shape->dims[ta ? 0 : 1] : Dim();
  const Dim kb = b.shape ? b.shape->dims[tb ? 1 : 0] : Dim(), n = b.shape ? b.shape->dims[tb ? 0 : 1] : Dim();
  if (ka.is_known() && kb.is_known() && ka.value != kb.value)
    return ctx.error("inner dimensions differ: input 'A' " + a.shape->to_string() + (ta ? " (transposed)" : "") +
                     " has K = " + std::to_string(ka.value) + " but input 'B' " + b.shape->to_string() +
                     (tb ? " (transposed)" : "") + " has K = " + std::to_string(kb.value));
  if (c && c->shape) {
    if (c->shape->rank() > 2)
      return ctx.error("input 'C' must have rank <= 2 (broadcastable to [M, N]), got shape " + c->shape->to_string());
    const int64_t cr = c->shape->rank();
    const Dim want[2] = {m, n};
    for (int64_t i = 0; i < cr; ++i) {
      const Dim& cd = c->shape->dims[i];
      const Dim& od = want[2 - cr + i];
      if (cd.is_known() && od.is_known() && cd.value != 1 && cd.value != od.value)
        return ctx.error("input 'C' with shape " + c->shape->to_string() + " cannot be broadcast to the output [M, N] = " +
                         Shape({m, n}).to_string());
    }
  }
  *out = Shape({m, n});
  return Status::ok();
}

Status infer_gemm(InferContext& ctx) {
  Shape out;
  const TensorType* c = ctx.has_input(2) ? &ctx.input_type(2) : nullptr;
  RETURN_IF_ERROR(gemm_info(ctx, ctx.input_type(0), ctx.input_type(1), c, &out));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, out});
  return Status::ok();
}

template <typename T>
void gemm_forward(const Tensor& a, const Tensor& b, const Tensor* c, bool ta, bool tb, float alpha, float beta,
                  Tensor* y) {
  const int64_t M = y->dim(0), N = y->dim(1);
  const int64_t K = ta ? a.dim(0) : a.dim(1);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  vector<T> bt;
  if (tb) {  // gemm_ref wants B's rows contiguous: materialize B^T as K x N
    bt.resize(static_cast<size_t>(K * N));
    for (int64_t nn = 0; nn < N; ++nn)
      for (int64_t k = 0; k < K; ++k) bt[k * N + nn] = pb[nn * K + k];
    pb = bt.data();
  }
  T* py = y->mutable_data<T>();
  gemm_ref<T>(M, N, K, pa, ta ? 1 : K, ta ? M : 1, pb, N, py, N);
  const bool use_c = c != nullptr && beta != 0.0f;
  if (alpha == 1.0f && !use_c) return;
  int64_t cs0 = 0, cs1 = 0;
  const T* pc = nullptr;
  if (use_c) {
    vector<int64_t> s = broadcast_strides(c->dims(), {M, N});
    cs0 = s[0];
    cs1 = s[1];
    pc = c->data<T>();
  }
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      T& v = py[i * N + j];
      if constexpr (std::is_floating_point_v<T>) {
        v = static_cast<T>(alpha) * v;
        if (use_c) v += static_cast<T>(beta) * pc[i * cs0 + j * cs1];
      } else {
        double r = static_cast<double>(alpha) * static_cast<double>(v);
        if (use_c) r += static_cast<double>(beta) * static_cast<double>(pc[i * cs0 + j * cs1]);
        v = static_cast<T>(r);
      }
    }
  }
}

Status k_gemm(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const Tensor* c = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const TensorType ct = c ? c->type() : TensorType{};
  Shape out;
  RETURN_IF_ERROR(gemm_info(ctx, a.type(), b.type(), c ? &ct : nullptr, &out));
  const bool ta = ctx.get_int("transA", 0) != 0, tb = ctx.get_int("transB", 0) != 0;
  const float alpha = ctx.get_float("alpha", 1.0f), beta = ctx.get_float("beta", 1.0f);
  const DType dt = a.dtype();
  Tensor af = widen_to_f32(a), bf = widen_to_f32(b), cf = c ? widen_to_f32(*c) : Tensor();
  ASSIGN_OR_RETURN(Tensor y, make_result(ctx, af.dtype(), out.values()));
  switch (af.dtype()) {
    FERRY_DISPATCH_FLOAT_CASES(gemm_forward<scalar_t>(af, bf, c ? &cf : nullptr, ta, tb, alpha, beta, &y))
    FERRY_DISPATCH_CASE(kI32, int32_t, gemm_forward<scalar_t>(af, bf, c ? &cf : nullptr, ta, tb, alpha, beta, &y))
    FERRY_DISPATCH_CASE(kI64, int64_t, gemm_forward<scalar_t>(af, bf, c ? &cf : nullptr, ta, tb, alpha, beta, &y))
    FERRY_DISPATCH_CASE(kU32, uint32_t, gemm_forward<scalar_t>(af, bf, c ? &cf : nullptr, ta, tb, alpha, beta, &y))
    FERRY_DISPATCH_CASE(kU64, uint64_t, gemm_forward<scalar_t>(af, bf, c ? &cf : nullptr, ta, tb, alpha, beta, &y))
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
  return finish_output(ctx, std::move(y), dt);
}

// ---- MatMul ---------------------------------------------------------------------------------

// numpy matmul shapes: 1-D A is [1, K] (the 1 dropped from the result), 1-D B is [K, 1] (likewise),
// leading (batch) dims broadcast.
template <class Ctx>
Status matmul_info(Ctx& ctx, const TensorType& a, const TensorType& b, std::optional<Shape>* out) {
  RETURN_IF_ERROR(check_gemm_dtype(ctx, a.dtype, "A"));
  RETURN_IF_ERROR(check_same_dtype(ctx, a.dtype, "A", b.dtype, "B"));
  return matmul_shape(ctx, a, b, "MatMul", out);
}

Status infer_matmul(InferContext& ctx) {
  std::optional<Shape> out;
  RETURN_IF_ERROR(matmul_info(ctx, ctx.input_type(0), ctx.input_type(1), &out));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, out});
  return Status::ok();
}

template <typename T>
void matmul_forward(const Tensor& a, const Tensor& b, const vector<int64_t>& batch, const vector<int64_t>& a_batch,
                    const vector<int64_t>& b_batch, int64_t M, int64_t N, int64_t K, Tensor* y) {
  vector<int64_t> sa = broadcast_strides(a_batch, batch), sb = broadcast_strides(b_batch, batch);
  for (int64_t& s : sa) s *= M * K;
  for (int64_t& s : sb) s *= K * N;
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* py = y->mutable_data<T>();
  for (BroadcastIter it(batch, {sa, sb}); !it.done(); it.next())
    gemm_ref<T>(M, N, K, pa + it.offset(0), K, 1, pb + it.offset(1), N, py + it.index() * M * N, N);
}

Status k_matmul(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  std::optional<Shape> out;
  RETURN_IF_ERROR(matmul_info(ctx, a.type(), b.type(), &out));
  vector<int64_t> ad = a.dims(), bd = b.dims();
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  const int64_t M = ad[ad.size() - 2], K = ad[ad.size() - 1], N = bd[bd.size() - 1];
  const vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  vector<int64_t> batch;
  if (!broadcast_dims(a_batch, b_batch, &batch)) return internal_error("MatMul batch broadcast");
  const DType dt = a.dtype();
  Tensor af = widen_to_f32(a), bf = widen_to_f32(b);
  ASSIGN_OR_RETURN(Tensor y, make_result(ctx, af.dtype(), out->values()));
  switch (af.dtype()) {
    FERRY_DISPATCH_FLOAT_CASES(matmul_forward<scalar_t>(af, bf, batch, a_batch, b_batch, M, N, K, &y))
    FERRY_DISPATCH_CASE(kI32, int32_t, matmul_forward<scalar_t>(af, bf, batch, a_batch, b_batch, M, N, K, &y))
    FERRY_DISPATCH_CASE(kI64, int64_t, matmul_forward<scalar_t>(af, bf, batch, a_batch, b_batch, M, N, K, &y))
    FERRY_DISPATCH_CASE(kU32, uint32_t, matmul_forward<scalar_t>(af, bf, batch, a_batch, b_batch, M, N, K, &y))
    FERRY_DISPATCH_CASE(kU64, uint64_t, matmul_forward<scalar_t>(af, bf, batch, a_batch, b_batch, M, N, K, &y))
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
  return finish_output(ctx, std::move(y), dt);
}

// ---- Dropout --------------------------------------------------------------------------------

// Inference mode only: output = input, mask = all true. From opset 12 ratio and training_mode are
// inputs; training with a nonzero ratio is random and not supported.
template <class Ctx>
Status check_dropout_inputs(Ctx& ctx, const Tensor* ratio, const Tensor* training, bool ratio_given) {
  if (ratio) {
    if (ratio->numel() != 1) return ctx.error("input 'ratio' must be a scalar, got shape " + dims_to_string(ratio->dims()));
    if (!dtype_is_float(ratio->dtype()))
      return ctx.error(std::string("input 'ratio' must be a float scalar, got ") + dtype_name(ratio->dtype()));
    const double r = ratio->get_double(0);
    if (!(r >= 0.0 && r < 1.0)) return ctx.error("input 'ratio' must be in [0, 1), got " + std::to_string(r));
  }
  if (training) {
    if (training->dtype() != DType::kBool)
      return ctx.error(std::string("input 'training_mode' must be bool, got ") + dtype_name(training->dtype()));
    if (training->numel() != 1)
      return ctx.error("input 'training_mode' must be a scalar, got shape " + dims_to_string(training->dims()));
    // Training with ratio 0 is still the identity; the ratio defaults to 0.5 when omitted.
    const bool ratio_unknown = ratio_given && !ratio;  // a runtime input: the kernel checks it
    const bool ratio_zero = ratio && ratio->get_double(0) == 0.0;
    if (training->data<bool>()[0] && !ratio_unknown && !ratio_zero)
      return ctx.error("training mode not supported: input 'training_mode' is true (ferry runs Dropout in inference mode only)");
  }
  return Status::ok();
}

Status infer_dropout(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  ctx.set_output(0, x);
  if (ctx.num_outputs() > 1) ctx.set_output(1, TensorType{ctx.opset() >= 10 ? DType::kBool : x.dtype, x.shape});
  if (ctx.opset() >= 12) {
    const Tensor* ratio = ctx.has_input(1) ? ctx.input_value(1) : nullptr;
    const Tensor* training = ctx.has_input(2) ? ctx.input_value(2) : nullptr;
    if (ctx.has_input(2) && ctx.input_type(2).dtype != DType::kUndefined && ctx.input_type(2).dtype != DType::kBool)
      return ctx.error(std::string("input 'training_mode' must be bool, got ") + dtype_name(ctx.input_type(2).dtype));
    RETURN_IF_ERROR(check_dropout_inputs(ctx, ratio, training, ctx.has_input(1)));
  }
  return Status::ok();
}

Status k_dropout(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (ctx.opset() >= 12) {
    const Tensor* ratio = ctx.has_input(1) ? &ctx.input(1) : nullptr;
    const Tensor* training = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    RETURN_IF_ERROR(check_dropout_inputs(ctx, ratio, training, ctx.has_input(1)));
  }
  ctx.set_output(0, x);
  if (ctx.num_outputs() > 1) {
    if (ctx.opset() >= 10) {
      ASSIGN_OR_RETURN(Tensor * mask, ctx.allocate_output(1, DType::kBool, x.dims()));
      std::fill(mask->mutable_data<bool>(), mask->mutable_data<bool>() + mask->numel(), true);
    } else {  // opsets 7-9: the mask has the data's type
      ASSIGN_OR_RETURN(Tensor ones, Tensor::create(DType::kF64, x.dims(), ctx.node().describe() + " output 1"));
      std::fill(ones.mutable_data<double>(), ones.mutable_data<double>() + ones.numel(), 1.0);
      ASSIGN_OR_RETURN(Tensor mask, cast_tensor(ones, x.dtype()));
      ctx.set_output(1, std::move(mask));
    }
  }
  return Status::ok();
}

}  // namespace

void register_nn_ops(OpRegistry& r) {
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

  const vector<AttrSpec> gemm_attrs = {{"alpha", AttrType::kFloat}, {"beta", AttrType::kFloat},
                                       {"transA", AttrType::kInt}, {"transB", AttrType::kInt}};
  // Gemm-7/9: C required; Gemm-11/13: C optional.
  r.add(OpSchema{.name = "Gemm", .since_version = 7, .min_inputs = 3, .max_inputs = 3, .attrs = gemm_attrs,
                 .types = kGemmTypes, .infer = infer_gemm, .kernel = k_gemm});
  r.add(OpSchema{.name = "Gemm", .since_version = 11, .min_inputs = 2, .max_inputs = 3, .attrs = gemm_attrs,
                 .types = kGemmTypes, .infer = infer_gemm, .kernel = k_gemm});
  r.add(OpSchema{.name = "MatMul", .since_version = 1, .min_inputs = 2, .max_inputs = 2, .types = kGemmTypes,
                 .infer = infer_matmul, .kernel = k_matmul});

  // Dropout-7: ratio attribute, mask of the data's type; 10: bool mask; 12: ratio and training_mode inputs.
  r.add(OpSchema{.name = "Dropout", .since_version = 7, .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
                 .max_outputs = 2, .attrs = {{"ratio", AttrType::kFloat}}, .types = kFloatTypes,
                 .infer = infer_dropout, .kernel = k_dropout});
  r.add(OpSchema{.name = "Dropout", .since_version = 10, .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
                 .max_outputs = 2, .attrs = {{"ratio", AttrType::kFloat}}, .types = kFloatTypes,
                 .infer = infer_dropout, .kernel = k_dropout});
  r.add(OpSchema{.name = "Dropout", .since_version = 12, .min_inputs = 1, .max_inputs = 3, .min_outputs = 1,
                 .max_outputs = 2, .attrs = {{"seed", AttrType::kInt}}, .types = kFloatTypes, .infer = infer_dropout,
                 .kernel = k_dropout});
}

}  // namespace ferry
