// Op family 'grad_nn' (domain com.ferry, see op_families.inc): backward kernels emitted by the
// gradient definitions in src/grad/nn_grads.cpp, and the training-mode dropout.
//
//   ConvGrad(dY, X, W; Conv's attributes) -> (dX, dW, dB)
//   ConvTransposeGrad(dY, X, W; ConvTranspose's attributes) -> (dX, dW, dB)
//       any output may be given as "" and is then not computed.
//   TrainDropout(X, seed: int64 scalar; ratio = 0.5) -> (Y = X * mask / (1 - ratio), mask: bool)
//       element i is kept iff u(seed, i) >= ratio, u = the top 53 bits of
//       splitmix64(seed ^ (0x9E3779B97F4A7C15 * i)) / 2^53 (counter-based: the same mask on every
//       thread count and backend). ratio 1 drops everything (Y = 0).
//   DropoutGrad(dY, mask; ratio) -> dX = dY * mask / (1 - ratio)
//   ResizeGrad(dY, X_shape, <the Resize node's inputs 1..>; Resize's attributes, forward_opset)
//       -> dX: the adjoint of the forward interpolation taps (ops/resize.h). Input 1 may also be X.
//
// Reference kernels for f32 and f64. Convolutions relate a "grid" (Conv: the output; ConvTranspose:
// the input) to an "image" (Conv: the input; ConvTranspose: the output) through kernel taps
// p = q * stride - pad_begin + k * dilation, with weights W [grid channels, image channels / group,
// k...] in both cases; the three products (grid from image, image gradient, weight gradient) are
// im2col + gemm_ref.
#include <algorithm>
#include <cmath>
#include <optional>

#include "common/splitmix64.h"
#include "ops/conv_pool_util.h"
#include "ops/gemm_ref.h"
#include "ops/op_util.h"
#include "ops/resize.h"

namespace ferry {
namespace {

using std::vector;

// ---- convolution geometry -------------------------------------------------------------------

struct TapTable {
  int64_t nd = 0, GS = 1, IS = 1, KS = 1;
  vector<int64_t> tap;  // GS * KS: image offset of tap k of grid position q (q * KS + k), or -1
};

TapTable make_taps(const vector<int64_t>& grid, const vector<int64_t>& image, const SpatialAttrs& a,
                   const vector<int64_t>& pad_begin) {
  TapTable t;
  t.nd = static_cast<int64_t>(grid.size());
  for (int64_t d = 0; d < t.nd; ++d) {
    t.GS *= grid[d];
    t.IS *= image[d];
    t.KS *= a.kernel[d];
  }
  t.tap.assign(static_cast<size_t>(t.GS * t.KS), -1);
  vector<int64_t> q(static_cast<size_t>(t.nd), 0), k(static_cast<size_t>(t.nd), 0);
  for (int64_t qi = 0; qi < t.GS; ++qi) {
    std::fill(k.begin(), k.end(), 0);
    for (int64_t ki = 0; ki < t.KS; ++ki) {
      int64_t off = 0;
      bool inside = true;
      for (int64_t d = 0; d < t.nd && inside; ++d) {
        const int64_t p = q[d] * a.strides[d] - pad_begin[d] + k[d] * a.dilations[d];
        inside = p >= 0 && p < image[d];
        off = off * image[d] + p;
      }
      t.tap[qi * t.KS + ki] = inside ? off : -1;
      for (int64_t d = t.nd - 1; d >= 0; --d) {
        if (++k[d] < a.kernel[d]) break;
        k[d] = 0;
      }
    }
    for (int64_t d = t.nd - 1; d >= 0; --d) {
      if (++q[d] < grid[d]) break;
      q[d] = 0;
    }
  }
  return t;
}

// Shapes of one convolution seen as grid/image: grid [N, GC, grid...], image [N, G * ICg, image...],
// W [GC, ICg, k...].
struct ConvRoles {
  int64_t N = 0, G = 1, GC = 0, ICg = 0;
  TapTable t;
};

// col[(c * KS + k) * GS + q] (transposed: colT[q * K + c * KS + k]) = image plane c under tap k of q.
template <typename T>
void im2col(const T* img, int64_t channels, const TapTable& t, bool transposed, T* col) {
  const int64_t K = channels * t.KS;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t q = 0; q < t.GS; ++q)
      for (int64_t k = 0; k < t.KS; ++k) {
        const int64_t p = t.tap[q * t.KS + k];
        const T v = p >= 0 ? img[c * t.IS + p] : T(0);
        if (transposed) col[q * K + c * t.KS + k] = v;
        else col[(c * t.KS + k) * t.GS + q] = v;
      }
}

template <typename T>
void col2im(const T* col, int64_t channels, const TapTable& t, T* img) {
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t k = 0; k < t.KS; ++k) {
      const T* src = col + (c * t.KS + k) * t.GS;
      for (int64_t q = 0; q < t.GS; ++q) {
        const int64_t p = t.tap[q * t.KS + k];
        if (p >= 0) img[c * t.IS + p] += src[q];
      }
    }
}

// grid = conv(image, W) (no bias).
template <typename T>
void grid_from_image(const ConvRoles& r, const T* img, const T* w, T* grid) {
  const int64_t GCg = r.GC / r.G, K = r.ICg * r.t.KS;
  vector<T> col(static_cast<size_t>(K * r.t.GS));
  for (int64_t n = 0; n < r.N; ++n)
    for (int64_t g = 0; g < r.G; ++g) {
      im2col(img + (n * r.G + g) * r.ICg * r.t.IS, r.ICg, r.t, false, col.data());
      gemm_ref<T>(GCg, r.t.GS, K, w + g * GCg * K, K, 1, col.data(), r.t.GS, grid + (n * r.GC + g * GCg) * r.t.GS,
                  r.t.GS);
    }
}

// d image = conv^T(d grid, W).
template <typename T>
void image_from_grid(const ConvRoles& r, const T* dgrid, const T* w, T* dimg) {
  const int64_t GCg = r.GC / r.G, K = r.ICg * r.t.KS;
  vector<T> col(static_cast<size_t>(K * r.t.GS));
  std::fill(dimg, dimg + r.N * r.G * r.ICg * r.t.IS, T(0));
  for (int64_t n = 0; n < r.N; ++n)
    for (int64_t g = 0; g < r.G; ++g) {
      gemm_ref<T>(K, r.t.GS, GCg, w + g * GCg * K, 1, K, dgrid + (n * r.GC + g * GCg) * r.t.GS, r.t.GS, col.data(),
                  r.t.GS);
      col2im(col.data(), r.ICg, r.t, dimg + (n * r.G + g) * r.ICg * r.t.IS);
    }
}

// dW[gc, c, k] = sum_{n, q} grid[n, gc, q] * image[n, c, tap(q, k)].
template <typename T>
void weight_grad(const ConvRoles& r, const T* grid, const T* img, T* dw) {
  const int64_t GCg = r.GC / r.G, K = r.ICg * r.t.KS;
  vector<T> colT(static_cast<size_t>(K * r.t.GS)), tmp(static_cast<size_t>(GCg * K));
  std::fill(dw, dw + r.GC * K, T(0));
  for (int64_t n = 0; n < r.N; ++n)
    for (int64_t g = 0; g < r.G; ++g) {
      im2col(img + (n * r.G + g) * r.ICg * r.t.IS, r.ICg, r.t, true, colT.data());
      gemm_ref<T>(GCg, K, r.t.GS, grid + (n * r.GC + g * GCg) * r.t.GS, r.t.GS, 1, colT.data(), K, tmp.data(), K);
      T* dst = dw + g * GCg * K;
      for (int64_t i = 0; i < GCg * K; ++i) dst[i] += tmp[i];
    }
}

// dB[c] = sum over batch and positions of t [N, C, S...].
template <typename T>
void bias_grad(const Tensor& t, T* db) {
  const int64_t N = t.dim(0), C = t.dim(1), S = t.numel() / std::max<int64_t>(1, N * C);
  const T* p = t.data<T>();
  for (int64_t c = 0; c < C; ++c) {
    T s = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) s += p[(n * C + c) * S + i];
    db[c] = s;
  }
}

// Common checks of (dY, X, W) and the spatial attributes.
template <class Ctx>
Status conv_grad_types(Ctx& ctx, const TensorType& dy, const TensorType& x, const TensorType& w) {
  RETURN_IF_ERROR(check_f32_f64(ctx, x.dtype, "X"));
  if (dy.dtype != x.dtype || w.dtype != x.dtype)
    return ctx.error(std::string("inputs dY, X and W must have one element type, got ") + dtype_name(dy.dtype) + ", " +
                     dtype_name(x.dtype) + ", " + dtype_name(w.dtype));
  if (x.shape && w.shape && (x.shape->rank() < 3 || x.shape->rank() != w.shape->rank()))
    return ctx.error("inputs X " + x.shape->to_string() + " and W " + w.shape->to_string() +
                     " must have one rank >= 3");
  return Status::ok();
}

template <bool kTranspose>
Status infer_conv_grad(InferContext& ctx) {
  const TensorType &dy = ctx.input_type(0), &x = ctx.input_type(1), &w = ctx.input_type(2);
  RETURN_IF_ERROR(conv_grad_types(ctx, dy, x, w));
  const int64_t group = ctx.get_int("group", 1);
  if (group < 1) return ctx.error("attribute 'group' must be >= 1, got " + std::to_string(group));
  ctx.set_output(0, x);
  if (ctx.num_outputs() > 1) ctx.set_output(1, w);
  if (ctx.num_outputs() > 2) {
    Dim m;
    if (w.shape) {
      const Dim& d = w.shape->dims[kTranspose ? 1 : 0];
      if (d.is_known()) m = Dim(kTranspose ? d.value * group : d.value);
    }
    ctx.set_output(2, TensorType{x.dtype, Shape({m})});
  }
  return Status::ok();
}

template <bool kTranspose>
Status k_conv_grad(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1), &w = ctx.input(2);
  RETURN_IF_ERROR(conv_grad_types(ctx, dy.type(), x.type(), w.type()));
  const int64_t rank = x.rank(), nd = rank - 2, G = ctx.get_int("group", 1);
  if (dy.rank() != rank || dy.dim(0) != x.dim(0))
    return ctx.error("input dY " + dims_to_string(dy.dims()) + " does not match X " + dims_to_string(x.dims()));
  vector<int64_t> wk(w.dims().begin() + 2, w.dims().end());
  SpatialAttrs a;
  RETURN_IF_ERROR(read_spatial_attrs(ctx, nd, &wk, true, &a));
  if (G < 1 || x.dim(1) % G != 0 || w.dim(0) % G != 0)
    return ctx.error("attribute 'group' = " + std::to_string(G) + " must divide the channels of X " +
                     dims_to_string(x.dims()) + " and W.shape[0] " + dims_to_string(w.dims()));
  ConvRoles r;
  r.N = x.dim(0);
  r.G = G;
  r.GC = w.dim(0);
  r.ICg = w.dim(1);
  vector<int64_t> grid, image, pad(static_cast<size_t>(nd));
  const Tensor& grid_t = kTranspose ? x : dy;    // Conv: dY is the grid; ConvTranspose: X is
  const Tensor& image_t = kTranspose ? dy : x;
  if (grid_t.dim(1) != r.GC || image_t.dim(1) != G * r.ICg)
    return ctx.error("channels of dY " + dims_to_string(dy.dims()) + ", X " + dims_to_string(x.dims()) + " and W " +
                     dims_to_string(w.dims()) + " do not agree (group " + std::to_string(G) + ")");
  const vector<int64_t> op = ctx.get_ints("output_padding", vector<int64_t>(static_cast<size_t>(nd), 0));
  const bool output_shape_given = !ctx.get_ints("output_shape").empty();
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t gin = grid_t.dim(2 + i), iin = image_t.dim(2 + i);
    grid.push_back(gin);
    image.push_back(iin);
    int64_t expect_grid = gin;
    if (!kTranspose) {
      AxisGeom ag;
      RETURN_IF_ERROR(conv_pool_axis(ctx, a, i, iin, &ag));
      pad[i] = ag.pad_begin;
      expect_grid = ag.out;
    } else {
      // The forward's geometry with the output size dY has (what output_shape or SAME gave it).
      const int64_t opi = i < static_cast<int64_t>(op.size()) ? op[i] : 0;
      const bool sized = output_shape_given || a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower;
      vector<int64_t> out_size(static_cast<size_t>(nd), 0);
      out_size[static_cast<size_t>(i)] = iin;
      AxisGeom ag;
      RETURN_IF_ERROR(conv_transpose_axis(ctx, a, opi, sized ? std::optional<vector<int64_t>>(out_size) : std::nullopt, i,
                                          gin, &ag));
      pad[i] = ag.pad_begin;
      if (ag.out != iin)
        return ctx.error("input dY " + dims_to_string(dy.dims()) + " is not the output shape of the ConvTranspose");
    }
    if (expect_grid != gin)
      return ctx.error("input dY " + dims_to_string(dy.dims()) + " is not the output shape of the Conv of X " +
                       dims_to_string(x.dims()));
  }
  r.t = make_taps(grid, image, a, pad);
  auto run = [&](auto tag) -> Status {
    using T = decltype(tag);
    if (wants_output(ctx, 0)) {
      ASSIGN_OR_RETURN(Tensor * dx, ctx.allocate_output(0, x.dtype(), x.dims(), false));
      if (kTranspose) grid_from_image<T>(r, dy.data<T>(), w.data<T>(), dx->mutable_data<T>());
      else image_from_grid<T>(r, dy.data<T>(), w.data<T>(), dx->mutable_data<T>());
    }
    if (wants_output(ctx, 1)) {
      ASSIGN_OR_RETURN(Tensor * dw, ctx.allocate_output(1, w.dtype(), w.dims(), false));
      weight_grad<T>(r, grid_t.data<T>(), image_t.data<T>(), dw->mutable_data<T>());
    }
    if (wants_output(ctx, 2)) {
      ASSIGN_OR_RETURN(Tensor * db, ctx.allocate_output(2, dy.dtype(), {dy.dim(1)}, false));
      bias_grad<T>(dy, db->mutable_data<T>());
    }
    return Status::ok();
  };
  return x.dtype() == DType::kF64 ? run(double{}) : run(float{});
}

// ---- TrainDropout / DropoutGrad -------------------------------------------------------------

template <class Ctx>
Status dropout_ratio(Ctx& ctx, double* ratio) {
  *ratio = ctx.get_float("ratio", 0.5f);
  if (!(*ratio >= 0.0 && *ratio <= 1.0))
    return ctx.error("attribute 'ratio' must be in [0, 1], got " + std::to_string(*ratio));
  return Status::ok();
}

Status infer_train_dropout(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  RETURN_IF_ERROR(check_f32_f64(ctx, x.dtype, "X"));
  double ratio;
  RETURN_IF_ERROR(dropout_ratio(ctx, &ratio));
  const TensorType& s = ctx.input_type(1);
  if (s.dtype != DType::kUndefined && s.dtype != DType::kI64)
    return ctx.error(std::string("input 'seed' must be an int64 scalar, got ") + dtype_name(s.dtype));
  if (s.shape && s.shape->is_static() && element_count(s.shape->values()) != 1)
    return ctx.error("input 'seed' must be an int64 scalar, got shape " + s.shape->to_string());
  ctx.set_output(0, x);
  if (ctx.num_outputs() > 1) ctx.set_output(1, TensorType{DType::kBool, x.shape});
  return Status::ok();
}

Status k_train_dropout(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& seed_t = ctx.input(1);
  RETURN_IF_ERROR(check_f32_f64(ctx, x.dtype(), "X"));
  if (seed_t.dtype() != DType::kI64 || seed_t.numel() != 1)
    return ctx.error("input 'seed' must be an int64 scalar, got " + seed_t.type().to_string());
  double ratio;
  RETURN_IF_ERROR(dropout_ratio(ctx, &ratio));
  const uint64_t seed = static_cast<uint64_t>(seed_t.data<int64_t>()[0]);
  const double scale = ratio < 1.0 ? 1.0 / (1.0 - ratio) : 0.0;
  const int64_t n = x.numel();
  bool* mask = nullptr;
  if (wants_output(ctx, 1)) {
    ASSIGN_OR_RETURN(Tensor * m, ctx.allocate_output(1, DType::kBool, x.dims(), false));
    mask = m->mutable_data<bool>();
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims(), false));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y->mutable_data<T>();
    const T s = static_cast<T>(scale);
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t z = splitmix64(seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i)));
      const double u = static_cast<double>(z >> 11) * 0x1.0p-53;
      const bool keep = u >= ratio;
      if (mask) mask[i] = keep;
      py[i] = keep ? px[i] * s : T(0);
    }
  };
  if (x.dtype() == DType::kF64) run(double{});
  else run(float{});
  return Status::ok();
}

Status infer_dropout_grad(InferContext& ctx) {
  RETURN_IF_ERROR(check_f32_f64(ctx, ctx.input_type(0).dtype, "dY"));
  double ratio;
  RETURN_IF_ERROR(dropout_ratio(ctx, &ratio));
  const DType m = ctx.input_type(1).dtype;
  if (m != DType::kUndefined && m != DType::kBool)
    return ctx.error(std::string("input 'mask' must be bool, got ") + dtype_name(m));
  ctx.set_output(0, ctx.input_type(0));
  return Status::ok();
}

Status k_dropout_grad(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &mask = ctx.input(1);
  RETURN_IF_ERROR(check_f32_f64(ctx, dy.dtype(), "dY"));
  if (mask.dtype() != DType::kBool || mask.dims() != dy.dims())
    return ctx.error("input 'mask' " + mask.type().to_string() + " must be bool with dY's shape " +
                     dims_to_string(dy.dims()));
  double ratio;
  RETURN_IF_ERROR(dropout_ratio(ctx, &ratio));
  const double scale = ratio < 1.0 ? 1.0 / (1.0 - ratio) : 0.0;
  ASSIGN_OR_RETURN(Tensor * dx, ctx.allocate_output(0, dy.dtype(), dy.dims(), false));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T s = static_cast<T>(scale);
    const bool* m = mask.data<bool>();
    for (int64_t i = 0; i < dy.numel(); ++i) dx->mutable_data<T>()[i] = m[i] ? dy.data<T>()[i] * s : T(0);
  };
  if (dy.dtype() == DType::kF64) run(double{});
  else run(float{});
  return Status::ok();
}

// ---- ResizeGrad -----------------------------------------------------------------------------

// X's dims from input 1 (X itself, or its shape as int64).
template <class Ctx>
Status resize_grad_x_type(Ctx& ctx, const TensorType& in1, const Tensor* value, DType dt, TensorType* x) {
  if (dtype_is_float(in1.dtype)) {
    *x = in1;
    return Status::ok();
  }
  if (in1.dtype != DType::kI64) return ctx.error("input 1 must be X or X's shape (int64)");
  *x = TensorType{dt, std::nullopt};
  if (value) x->shape = Shape::of(value->to_int64_vector());
  return Status::ok();
}

Status infer_resize_grad(InferContext& ctx) {
  RETURN_IF_ERROR(check_f32_f64(ctx, ctx.input_type(0).dtype, "dY"));
  TensorType x;
  RETURN_IF_ERROR(resize_grad_x_type(ctx, ctx.input_type(1), ctx.input_value(1), ctx.input_type(0).dtype, &x));
  x.dtype = ctx.input_type(0).dtype;
  ctx.set_output(0, x);
  return Status::ok();
}

template <typename T>
void adjoint_taps(vector<T>& buf, vector<int64_t>& dims, int64_t axis, const ResizeAxisTaps& taps, int64_t in_len) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= dims[d];
  for (int64_t d = axis + 1; d < static_cast<int64_t>(dims.size()); ++d) inner *= dims[d];
  const int64_t out_len = dims[axis];
  vector<T> res(static_cast<size_t>(outer * in_len * inner), T(0));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < out_len; ++j) {
      const T* src = buf.data() + (o * out_len + j) * inner;
      for (int64_t k = 0; k < taps.n; ++k) {
        const T wk = static_cast<T>(taps.w[j * taps.n + k]);
        if (wk == T(0)) continue;
        T* dst = res.data() + (o * in_len + taps.idx[j * taps.n + k]) * inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] += wk * src[i];
      }
    }
  buf.swap(res);
  dims[axis] = in_len;
}

Status k_resize_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  RETURN_IF_ERROR(check_f32_f64(ctx, dy.dtype(), "dY"));
  const Tensor& in1 = ctx.input(1);
  vector<int64_t> xdims = dtype_is_float(in1.dtype()) ? in1.dims() : in1.to_int64_vector();
  if (!dtype_is_float(in1.dtype()) && in1.dtype() != DType::kI64)
    return ctx.error("input 1 must be X or X's shape (int64)");
  // The forward Resize as the interpolation plan sees it: X (dims only, never read), then its inputs 1...
  Node fwd = ctx.node();
  fwd.op_type = "Resize";
  fwd.domain.clear();
  fwd.inputs.erase(fwd.inputs.begin());
  static const char kNoData = 0;
  Value xv(Tensor::wrap(dy.dtype(), xdims, nullptr, &kNoData));
  vector<const Value*> ins = {&xv};
  for (int64_t i = 2; i < ctx.num_inputs(); ++i) ins.push_back(ctx.has_input(i) ? &ctx.input_value(i) : nullptr);
  vector<Value> outs(1);
  const int64_t opset = ctx.get_int("forward_opset", 13);
  KernelContext fctx(fwd, opset, std::move(ins), &outs);
  vector<int64_t> out_dims;
  vector<ResizeAxisTaps> taps;
  ASSIGN_OR_RETURN(bool ok, resize_taps(fctx, &out_dims, &taps));
  if (!ok)
    return ctx.error("this Resize has no gradient (tf_crop_and_resize); use another coordinate_transformation_mode");
  if (out_dims != dy.dims())
    return ctx.error("input dY " + dims_to_string(dy.dims()) + " is not the Resize's output shape " +
                     dims_to_string(out_dims));
  auto run = [&](auto tag) -> Status {
    using T = decltype(tag);
    vector<T> buf(dy.data<T>(), dy.data<T>() + dy.numel());
    vector<int64_t> dims = dy.dims();
    for (int64_t d = 0; d < static_cast<int64_t>(xdims.size()); ++d) {
      const ResizeAxisTaps& t = taps[d];
      if (t.identity && dims[d] == xdims[d]) continue;
      if (t.idx.empty()) return internal_error(ctx.node().describe() + ": axis " + std::to_string(d) + " has no taps");
      adjoint_taps<T>(buf, dims, d, t, xdims[d]);
    }
    ASSIGN_OR_RETURN(Tensor * dx, ctx.allocate_output(0, dy.dtype(), xdims, false));
    std::copy(buf.begin(), buf.end(), dx->mutable_data<T>());
    return Status::ok();
  };
  return dy.dtype() == DType::kF64 ? run(double{}) : run(float{});
}

}  // namespace

void register_grad_nn_ops(OpRegistry& r) {
  const vector<DType> kTypes = {DType::kF32, DType::kF64};
  const vector<AttrSpec> conv_attrs = {{"auto_pad", AttrType::kString}, {"dilations", AttrType::kInts},
                                       {"group", AttrType::kInt},       {"kernel_shape", AttrType::kInts},
                                       {"pads", AttrType::kInts},       {"strides", AttrType::kInts}};
  vector<AttrSpec> convt_attrs = conv_attrs;
  convt_attrs.push_back({"output_padding", AttrType::kInts});
  convt_attrs.push_back({"output_shape", AttrType::kInts});
  r.add(OpSchema{.name = "ConvGrad", .domain = "com.ferry", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1,
                 .max_outputs = 3, .attrs = conv_attrs, .types = kTypes, .infer = infer_conv_grad<false>,
                 .kernel = k_conv_grad<false>});
  r.add(OpSchema{.name = "ConvTransposeGrad", .domain = "com.ferry", .min_inputs = 3, .max_inputs = 3,
                 .min_outputs = 1, .max_outputs = 3, .attrs = convt_attrs, .types = kTypes,
                 .infer = infer_conv_grad<true>, .kernel = k_conv_grad<true>});
  r.add(OpSchema{.name = "TrainDropout", .domain = "com.ferry", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,
                 .max_outputs = 2, .attrs = {{"ratio", AttrType::kFloat}}, .types = kTypes,
                 .infer = infer_train_dropout, .kernel = k_train_dropout});
  r.add(OpSchema{.name = "DropoutGrad", .domain = "com.ferry", .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"ratio", AttrType::kFloat}}, .types = kTypes, .infer = infer_dropout_grad,
                 .kernel = k_dropout_grad});
  r.add(OpSchema{.name = "ResizeGrad", .domain = "com.ferry", .min_inputs = 2, .max_inputs = 5,
                 .attrs = {{"mode", AttrType::kString}, {"coordinate_transformation_mode", AttrType::kString},
                           {"nearest_mode", AttrType::kString}, {"cubic_coeff_a", AttrType::kFloat},
                           {"exclude_outside", AttrType::kInt}, {"antialias", AttrType::kInt},
                           {"axes", AttrType::kInts}, {"keep_aspect_ratio_policy", AttrType::kString},
                           {"forward_opset", AttrType::kInt}},
                 .types = kTypes, .infer = infer_resize_grad, .kernel = k_resize_grad});
}

}  // namespace ferry
