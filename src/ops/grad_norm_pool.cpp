// Op family 'grad_norm_pool' (domain com.ferry, see op_families.inc): backward kernels of the pooling
// and normalization ops (emitted by src/grad/norm_pool_grads.cpp) and training-mode BatchNorm.
//
//   MaxPoolGrad(dY, X; MaxPool's attributes) -> dX: each dY goes to the first maximum of its window
//       in kernel order (NaN wins, as the forward kernel and PyTorch).
//   AveragePoolGrad(dY, X_shape; AveragePool's attributes) -> dX (input 1 may also be X itself).
//   LayerNormalizationGrad(dY, X, Scale[, dMean, dInvStdDev]; axis, epsilon) -> (dX, dScale, dBias):
//       dScale and dBias have Scale's shape; dY may be "" (zero) and the optional gradients of the
//       Mean / InvStdDev outputs are added when given.
//   BatchNormTraining(X [N, C, ...], scale, B, input_mean, input_var; epsilon = 1e-5,
//       momentum = 0.9) -> (Y, running_mean, running_var, saved_mean, saved_inv_std): Y uses the
//       biased batch variance (PyTorch train()); running_* = input_* * momentum + batch * (1 -
//       momentum) with the unbiased batch variance; saved_inv_std = 1 / sqrt(biased var + eps).
//       relu = 1: Y = Relu(BN(X)) (the training graph's fusion of BatchNormTraining -> Relu).
//   BatchNormTrainingGrad(dY, X, scale, saved_mean, saved_inv_std[, Z]) -> (dX, dScale, dB); with Z
//       (the output of a relu = 1 forward), dY is first masked as ReluGrad does: Z > 0 ? dY : 0.
//   SyncBatchNormTraining / SyncBatchNormTrainingGrad: the same signatures with torch.nn.SyncBatchNorm's
//       semantics over the ranks of a data-parallel job (ops/kernel_collectives.h): forward gathers
//       every rank's count, mean and sum of squared deviations per channel and normalizes with the
//       global batch statistics (running_var from the global unbiased variance); backward gathers
//       sum(dY) and sum(dY * (X - mean)) for dX, while dScale and dB stay local (DDP averages them).
//       Without collectives (a world of one) they compute what BatchNormTraining(Grad) does.
// Outputs given as "" are not computed. Reference kernels for f32 and f64; statistics in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/conv_pool_util.h"
#include "ops/kernel_collectives.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

template <typename F>
void dispatch_f32_f64(DType t, F&& f) {
  if (t == DType::kF64) f(double{});
  else f(float{});
}

// ---- pooling --------------------------------------------------------------------------------

// dX's type from input 1: X itself, or X's shape (int64, dtype from dY).
Status pool_grad_x_type(InferContext& ctx, TensorType* x) {
  const TensorType& in1 = ctx.input_type(1);
  const DType dt = ctx.input_type(0).dtype;
  if (in1.dtype == DType::kI64) {
    *x = TensorType{dt, std::nullopt};
    if (const Tensor* v = ctx.input_value(1)) x->shape = Shape::of(v->to_int64_vector());
    return Status::ok();
  }
  RETURN_IF_ERROR(check_f32_f64(ctx, in1.dtype, "X"));
  *x = TensorType{dt, in1.shape};
  return Status::ok();
}

Status infer_pool_grad(InferContext& ctx) {
  RETURN_IF_ERROR(check_f32_f64(ctx, ctx.input_type(0).dtype, "dY"));
  TensorType x;
  RETURN_IF_ERROR(pool_grad_x_type(ctx, &x));
  ctx.set_output(0, x);
  return Status::ok();
}

// Every pooling window: real (non-padding) input offsets in row-major kernel order and the count
// of positions inside the padded input (count_include_pad's divisor), as the forward kernel.
struct PoolWindows {
  int64_t IS = 1, OS = 1;
  vector<vector<int64_t>> offs;  // per output position
  vector<int64_t> padded;
};

Status pool_windows(KernelContext& ctx, const vector<int64_t>& xdims, const vector<int64_t>& ydims, PoolWindows* w) {
  const int64_t nd = static_cast<int64_t>(xdims.size()) - 2;
  if (nd < 1) return ctx.error("input X must have rank >= 3, got " + dims_to_string(xdims));
  SpatialAttrs a;
  RETURN_IF_ERROR(read_spatial_attrs(ctx, nd, nullptr, true, &a));
  vector<AxisGeom> axes(static_cast<size_t>(nd));
  vector<int64_t> expect = {xdims[0], xdims[1]};
  for (int64_t d = 0; d < nd; ++d) {
    RETURN_IF_ERROR(conv_pool_axis(ctx, a, d, xdims[2 + d], &axes[d]));
    expect.push_back(axes[d].out);
    w->IS *= axes[d].in;
    w->OS *= axes[d].out;
  }
  if (expect != ydims)
    return ctx.error("input dY " + dims_to_string(ydims) + " is not the pooling output shape " + dims_to_string(expect) +
                     " of X " + dims_to_string(xdims));
  w->offs.assign(static_cast<size_t>(w->OS), {});
  w->padded.assign(static_cast<size_t>(w->OS), 1);
  vector<int64_t> o(static_cast<size_t>(nd), 0), rm(static_cast<size_t>(nd), 1), pos, tmp;
  for (int64_t d = nd - 2; d >= 0; --d) rm[d] = rm[d + 1] * axes[d + 1].in;
  for (int64_t oi = 0; oi < w->OS; ++oi) {
    vector<int64_t>& offs = w->offs[oi];
    offs.assign(1, 0);
    for (int64_t d = 0; d < nd; ++d) {
      const int64_t start = o[d] * a.strides[d] - axes[d].pad_begin;
      pos.clear();
      int64_t padded = 0;
      for (int64_t k = 0; k < a.kernel[d]; ++k) {
        const int64_t p = start + k * a.dilations[d];
        if (p >= -axes[d].pad_begin && p < axes[d].in + axes[d].pad_end) ++padded;
        if (p >= 0 && p < axes[d].in) pos.push_back(p);
      }
      w->padded[oi] *= padded;
      tmp.clear();
      for (int64_t b : offs)
        for (int64_t p : pos) tmp.push_back(b + p * rm[d]);
      offs.swap(tmp);
    }
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++o[d] < axes[d].out) break;
      o[d] = 0;
    }
  }
  return Status::ok();
}

template <bool kMax>
Status k_pool_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& in1 = ctx.input(1);
  RETURN_IF_ERROR(check_f32_f64(ctx, dy.dtype(), "dY"));
  if (kMax && in1.dtype() != dy.dtype())
    return ctx.error(std::string("input X must have dY's element type ") + dtype_name(dy.dtype()));
  const vector<int64_t> xdims = in1.dtype() == DType::kI64 ? in1.to_int64_vector() : in1.dims();
  PoolWindows w;
  RETURN_IF_ERROR(pool_windows(ctx, xdims, dy.dims(), &w));
  const bool cip = ctx.get_int("count_include_pad", 0) != 0;
  ASSIGN_OR_RETURN(Tensor * dx, ctx.allocate_output(0, dy.dtype(), xdims, true));
  const int64_t planes = xdims[0] * xdims[1];
  dispatch_f32_f64(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    T* out = dx->mutable_data<T>();
    for (int64_t pl = 0; pl < planes; ++pl) {
      T* dxp = out + pl * w.IS;
      for (int64_t oi = 0; oi < w.OS; ++oi) {
        const vector<int64_t>& offs = w.offs[oi];
        const int64_t n = static_cast<int64_t>(offs.size());
        const T gv = g[pl * w.OS + oi];
        if constexpr (kMax) {
          const T* xp = in1.data<T>() + pl * w.IS;
          T m = -std::numeric_limits<T>::infinity();
          int64_t best = n > 0 ? 0 : -1;
          for (int64_t t = 0; t < n; ++t) {
            const T v = xp[offs[t]];
            if (v > m || std::isnan(v)) {
              m = v;
              best = t;
            }
          }
          if (best >= 0) dxp[offs[best]] += gv;
        } else {
          const int64_t div = cip ? w.padded[oi] : n;
          if (div <= 0) continue;
          const T s = gv / static_cast<T>(div);
          for (int64_t t = 0; t < n; ++t) dxp[offs[t]] += s;
        }
      }
    }
  });
  return Status::ok();
}

// ---- LayerNormalizationGrad -----------------------------------------------------------------

Status infer_layernorm_grad(InferContext& ctx) {
  const TensorType& x = ctx.input_type(1);
  RETURN_IF_ERROR(check_f32_f64(ctx, x.dtype, "X"));
  ctx.set_output(0, x);
  for (int64_t i = 1; i < ctx.num_outputs() && i < 3; ++i) ctx.set_output(i, ctx.input_type(2));
  return Status::ok();
}

Status k_layernorm_grad(KernelContext& ctx) {
  const Tensor& x = ctx.input(1);
  const Tensor& scale = ctx.input(2);
  RETURN_IF_ERROR(check_f32_f64(ctx, x.dtype(), "X"));
  const Tensor* dy = ctx.has_input(0) ? &ctx.input(0) : nullptr;
  if (dy && (dy->dims() != x.dims() || dy->dtype() != x.dtype()))
    return ctx.error("input dY " + dy->type().to_string() + " must have X's type " + x.type().to_string());
  const int64_t r = x.rank();
  int64_t axis = ctx.get_int("axis", -1);
  if (!normalize_axis(&axis, r))
    return ctx.error("attribute axis " + std::to_string(ctx.get_int("axis", -1)) + " is out of range for X of rank " +
                     std::to_string(r));
  vector<int64_t> bd;
  if (scale.rank() > r || !broadcast_dims(x.dims(), scale.dims(), &bd) || bd != x.dims())
    return ctx.error("input Scale " + dims_to_string(scale.dims()) + " cannot be broadcast to X " + dims_to_string(x.dims()));
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? outer : inner) *= x.dim(i);
  vector<double> dstat[2];
  for (int64_t k = 0; k < 2; ++k) {
    if (!ctx.has_input(3 + k)) continue;
    const Tensor& t = ctx.input(3 + k);
    if (t.numel() != outer) return ctx.error("input " + std::to_string(3 + k) + " must have " + std::to_string(outer) + " elements");
    dstat[k] = t.to_double_vector();
  }
  const double eps = ctx.get_float("epsilon", 1e-5f);
  const vector<double> xs = x.to_double_vector(), sc = scale.to_double_vector();
  const vector<double> g = dy ? dy->to_double_vector() : vector<double>(static_cast<size_t>(x.numel()), 0.0);
  // Scale's offset of every element of X.
  vector<int64_t> soff(static_cast<size_t>(x.numel()));
  for (BroadcastIter it(x.dims(), {broadcast_strides(scale.dims(), x.dims())}); !it.done(); it.next())
    soff[it.index()] = it.offset(0);
  vector<double> dx(xs.size()), dscale(sc.size(), 0.0), dbias(sc.size(), 0.0);
  const double n = static_cast<double>(inner);
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t base = o * inner;
    double mu = 0, var = 0;
    for (int64_t j = 0; j < inner; ++j) mu += xs[base + j];
    mu /= n;
    for (int64_t j = 0; j < inner; ++j) var += (xs[base + j] - mu) * (xs[base + j] - mu);
    const double inv = 1.0 / std::sqrt(var / n + eps);
    double mg = 0, mgx = 0;
    for (int64_t j = 0; j < inner; ++j) {
      const int64_t i = base + j;
      const double xh = (xs[i] - mu) * inv, gs = g[i] * sc[soff[i]];
      mg += gs;
      mgx += gs * xh;
      dscale[soff[i]] += g[i] * xh;
      dbias[soff[i]] += g[i];
    }
    mg /= n;
    mgx /= n;
    const double dmean = dstat[0].empty() ? 0.0 : dstat[0][o];
    const double dinv = dstat[1].empty() ? 0.0 : dstat[1][o];
    for (int64_t j = 0; j < inner; ++j) {
      const int64_t i = base + j;
      const double xh = (xs[i] - mu) * inv;
      dx[i] = inv * (g[i] * sc[soff[i]] - mg - xh * mgx) + dmean / n - dinv * inv * inv * xh / n;
    }
  }
  const vector<double>* res[3] = {&dx, &dscale, &dbias};
  const vector<int64_t>* dims[3] = {&x.dims(), &scale.dims(), &scale.dims()};
  for (int64_t k = 0; k < 3; ++k) {
    if (!wants_output(ctx, k)) continue;
    ASSIGN_OR_RETURN(Tensor t, cast_tensor(Tensor::from_vector<double>(*res[k], *dims[k]), k == 0 ? x.dtype() : scale.dtype()));
    ctx.set_output(k, std::move(t));
  }
  return Status::ok();
}

// ---- BatchNormTraining ----------------------------------------------------------------------

// N, C and the spatial size of X [N, C, ...], with the parameters checked to be [C].
template <class Ctx>
Status bn_params(Ctx& ctx, const Tensor& x, std::initializer_list<std::pair<const Tensor*, const char*>> params,
                 int64_t* N, int64_t* C, int64_t* S) {
  RETURN_IF_ERROR(check_f32_f64(ctx, x.dtype(), "X"));
  if (x.rank() < 2) return ctx.error("input X must have rank >= 2 (N x C x ...), got " + dims_to_string(x.dims()));
  *N = x.dim(0);
  *C = x.dim(1);
  *S = 1;
  for (int64_t i = 2; i < x.rank(); ++i) *S *= x.dim(i);
  for (const auto& [t, name] : params) {
    if (!dtype_is_float(t->dtype()) || t->rank() != 1 || t->dim(0) != *C)
      return ctx.error(std::string("input ") + name + " " + t->type().to_string() + " must be a float tensor of shape [" +
                       std::to_string(*C) + "]");
  }
  return Status::ok();
}

Status infer_bn_training(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  RETURN_IF_ERROR(check_f32_f64(ctx, x.dtype, "X"));
  if (x.shape && x.shape->rank() < 2)
    return ctx.error("input X must have rank >= 2 (N x C x ...), got shape " + x.shape->to_string());
  ctx.set_output(0, x);
  const Dim c = x.shape ? x.shape->dims[1] : Dim();
  for (int64_t i = 1; i < ctx.num_outputs(); ++i) {
    const DType dt = i <= 2 ? ctx.input_type(i == 1 ? 3 : 4).dtype : x.dtype;
    ctx.set_output(i, TensorType{dt, Shape({c})});
  }
  return Status::ok();
}

Status k_bn_training(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &scale = ctx.input(1), &bias = ctx.input(2), &rmean = ctx.input(3),
               &rvar = ctx.input(4);
  int64_t N, C, S;
  RETURN_IF_ERROR(bn_params(ctx, x, {{&scale, "scale"}, {&bias, "B"}, {&rmean, "input_mean"}, {&rvar, "input_var"}},
                            &N, &C, &S));
  const int64_t count = N * S;
  if (count <= 1)
    return ctx.error("training needs more than one value per channel (X " + dims_to_string(x.dims()) +
                     "); use a batch of 2 or more, or run BatchNormalization in inference mode");
  const double eps = ctx.get_float("epsilon", 1e-5f), momentum = ctx.get_float("momentum", 0.9f);
  const bool relu = ctx.get_int("relu", 0) != 0;
  const vector<double> xs = x.to_double_vector(), sc = scale.to_double_vector(), b = bias.to_double_vector(),
                       rm = rmean.to_double_vector(), rv = rvar.to_double_vector();
  vector<double> y(xs.size()), mean(static_cast<size_t>(C)), inv(static_cast<size_t>(C)),
      new_mean(static_cast<size_t>(C)), new_var(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    double mu = 0, ss = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) mu += xs[(n * C + c) * S + s];
    mu /= static_cast<double>(count);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const double d = xs[(n * C + c) * S + s] - mu;
        ss += d * d;
      }
    const double var = ss / static_cast<double>(count);
    mean[c] = mu;
    inv[c] = 1.0 / std::sqrt(var + eps);
    new_mean[c] = rm[c] * momentum + mu * (1.0 - momentum);
    new_var[c] = rv[c] * momentum + ss / static_cast<double>(count - 1) * (1.0 - momentum);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = (n * C + c) * S + s;
        y[i] = (xs[i] - mu) * inv[c] * sc[c] + b[c];
        if (relu && y[i] < 0) y[i] = 0;  // NaN stays NaN, as Relu
      }
  }
  const vector<double>* res[5] = {&y, &new_mean, &new_var, &mean, &inv};
  const DType types[5] = {x.dtype(), rmean.dtype(), rvar.dtype(), x.dtype(), x.dtype()};
  for (int64_t k = 0; k < 5; ++k) {
    if (!wants_output(ctx, k)) continue;
    ASSIGN_OR_RETURN(Tensor t, cast_tensor(Tensor::from_vector<double>(*res[k], k == 0 ? x.dims() : vector<int64_t>{C}), types[k]));
    ctx.set_output(k, std::move(t));
  }
  return Status::ok();
}

Status infer_bn_training_grad(InferContext& ctx) {
  const TensorType& x = ctx.input_type(1);
  RETURN_IF_ERROR(check_f32_f64(ctx, x.dtype, "X"));
  ctx.set_output(0, x);
  for (int64_t i = 1; i < ctx.num_outputs() && i < 3; ++i) ctx.set_output(i, ctx.input_type(2));
  return Status::ok();
}

Status k_bn_training_grad(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1), &scale = ctx.input(2), &mean = ctx.input(3), &inv = ctx.input(4);
  int64_t N, C, S;
  RETURN_IF_ERROR(bn_params(ctx, x, {{&scale, "scale"}, {&mean, "saved_mean"}, {&inv, "saved_inv_std"}}, &N, &C, &S));
  if (dy.dims() != x.dims()) return ctx.error("input dY " + dims_to_string(dy.dims()) + " must have X's shape " + dims_to_string(x.dims()));
  vector<double> g = dy.to_double_vector();
  const vector<double> xs = x.to_double_vector(), sc = scale.to_double_vector(), mu = mean.to_double_vector(),
                       is = inv.to_double_vector();
  if (ctx.has_input(5)) {  // Z of a relu = 1 forward: ReluGrad's mask first
    const Tensor& z = ctx.input(5);
    if (z.dims() != x.dims()) return ctx.error("input Z " + dims_to_string(z.dims()) + " must have X's shape " + dims_to_string(x.dims()));
    const vector<double> zs = z.to_double_vector();
    for (size_t i = 0; i < g.size(); ++i)
      if (!(zs[i] > 0)) g[i] = 0;
  }
  const double count = static_cast<double>(N * S);
  vector<double> dx(xs.size()), dscale(static_cast<size_t>(C)), db(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    double sg = 0, sgx = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = (n * C + c) * S + s;
        sg += g[i];
        sgx += g[i] * (xs[i] - mu[c]) * is[c];
      }
    db[c] = sg;
    dscale[c] = sgx;
    const double k = sc[c] * is[c] / count;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = (n * C + c) * S + s;
        dx[i] = k * (count * g[i] - sg - (xs[i] - mu[c]) * is[c] * sgx);
      }
  }
  const vector<double>* res[3] = {&dx, &dscale, &db};
  for (int64_t k = 0; k < 3; ++k) {
    if (!wants_output(ctx, k)) continue;
    ASSIGN_OR_RETURN(Tensor t, cast_tensor(Tensor::from_vector<double>(*res[k], k == 0 ? x.dims() : vector<int64_t>{C}),
                                           k == 0 ? x.dtype() : scale.dtype()));
    ctx.set_output(k, std::move(t));
  }
  return Status::ok();
}

// ---- SyncBatchNormTraining ------------------------------------------------------------------

template <typename T>
Status sync_bn_training(KernelContext& ctx, int64_t N, int64_t C, int64_t S) {
  const Tensor &x = ctx.input(0), &rmean = ctx.input(3), &rvar = ctx.input(4);
  const T* xs = x.data<T>();
  const vector<double> sc = ctx.input(1).to_double_vector(), b = ctx.input(2).to_double_vector(),
                       rm = rmean.to_double_vector(), rv = rvar.to_double_vector();
  const double eps = ctx.get_float("epsilon", 1e-5f), momentum = ctx.get_float("momentum", 0.9f);
  // [count, mean_0, m2_0, mean_1, ...] of the local batch, then of every rank's (kernel_collectives.h).
  const double local = static_cast<double>(N * S);
  vector<double> st(static_cast<size_t>(1 + 2 * C), 0.0);
  st[0] = local;
  for (int64_t c = 0; c < C && local > 0; ++c) {
    double mu = 0, ss = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) mu += static_cast<double>(xs[(n * C + c) * S + s]);
    mu /= local;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const double d = static_cast<double>(xs[(n * C + c) * S + s]) - mu;
        ss += d * d;
      }
    st[1 + 2 * c] = mu;
    st[2 + 2 * c] = ss;
  }
  RETURN_IF_ERROR(sync_batchnorm_moments(&st, ctx.node().describe()));
  const double count = st[0];
  if (count <= 1)
    return ctx.error("training needs more than one value per channel over all ranks (X " + dims_to_string(x.dims()) +
                     " here); use a batch of 2 or more");
  vector<double> mean(static_cast<size_t>(C)), inv(static_cast<size_t>(C)), new_mean(static_cast<size_t>(C)),
      new_var(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    mean[c] = st[1 + 2 * c];
    inv[c] = 1.0 / std::sqrt(st[2 + 2 * c] / count + eps);
    new_mean[c] = rm[c] * momentum + mean[c] * (1.0 - momentum);
    new_var[c] = rv[c] * momentum + st[2 + 2 * c] / (count - 1) * (1.0 - momentum);
  }
  if (wants_output(ctx, 0)) {  // written as it is computed: no double copy of the batch
    ASSIGN_OR_RETURN(Tensor * yt, ctx.allocate_output(0, x.dtype(), x.dims(), false));
    T* y = yt->mutable_data<T>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = (n * C + c) * S + s;
          y[i] = static_cast<T>((static_cast<double>(xs[i]) - mean[c]) * inv[c] * sc[c] + b[c]);
        }
  }
  const vector<double>* res[5] = {nullptr, &new_mean, &new_var, &mean, &inv};
  const DType types[5] = {x.dtype(), rmean.dtype(), rvar.dtype(), x.dtype(), x.dtype()};
  for (int64_t k = 1; k < 5; ++k) {
    if (!wants_output(ctx, k)) continue;
    ASSIGN_OR_RETURN(Tensor t, cast_tensor(Tensor::from_vector<double>(*res[k], {C}), types[k]));
    ctx.set_output(k, std::move(t));
  }
  return Status::ok();
}

Status k_sync_bn_training(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t N, C, S;
  RETURN_IF_ERROR(bn_params(ctx, x, {{&ctx.input(1), "scale"}, {&ctx.input(2), "B"}, {&ctx.input(3), "input_mean"},
                                     {&ctx.input(4), "input_var"}}, &N, &C, &S));
  Status st;
  dispatch_f32_f64(x.dtype(), [&](auto t) { st = sync_bn_training<decltype(t)>(ctx, N, C, S); });
  return st;
}

template <typename T>
Status sync_bn_training_grad(KernelContext& ctx, int64_t N, int64_t C, int64_t S) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1), &scale = ctx.input(2);
  const T *g = dy.data<T>(), *xs = x.data<T>();
  const vector<double> sc = scale.to_double_vector(), mu = ctx.input(3).to_double_vector(), is = ctx.input(4).to_double_vector();
  // [count, sum(dY)_0, sum(dY * (X - mean))_0, ...] of the local batch.
  vector<double> sums(static_cast<size_t>(1 + 2 * C), 0.0);
  sums[0] = static_cast<double>(N * S);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = (n * C + c) * S + s;
        sums[1 + 2 * c] += static_cast<double>(g[i]);
        sums[2 + 2 * c] += static_cast<double>(g[i]) * (static_cast<double>(xs[i]) - mu[c]);
      }
  vector<double> dscale(static_cast<size_t>(C)), db(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {  // local, as SyncBatchNorm's grad_weight / grad_bias
    db[c] = sums[1 + 2 * c];
    dscale[c] = sums[2 + 2 * c] * is[c];
  }
  if (wants_output(ctx, 0)) {  // dX needs the sums over every rank's batch (the same decision on all ranks)
    RETURN_IF_ERROR(sync_batchnorm_grad_sums(&sums, ctx.node().describe()));
    const double count = sums[0];
    ASSIGN_OR_RETURN(Tensor * dxt, ctx.allocate_output(0, x.dtype(), x.dims(), false));
    T* dx = dxt->mutable_data<T>();
    for (int64_t c = 0; c < C; ++c) {
      const double mean_dy = sums[1 + 2 * c] / count, mean_dy_xmu = sums[2 + 2 * c] / count;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = (n * C + c) * S + s;
          dx[i] = static_cast<T>((static_cast<double>(g[i]) - mean_dy -
                                  (static_cast<double>(xs[i]) - mu[c]) * is[c] * is[c] * mean_dy_xmu) * is[c] * sc[c]);
        }
    }
  }
  const vector<double>* res[3] = {nullptr, &dscale, &db};
  for (int64_t k = 1; k < 3; ++k) {
    if (!wants_output(ctx, k)) continue;
    ASSIGN_OR_RETURN(Tensor t, cast_tensor(Tensor::from_vector<double>(*res[k], {C}), scale.dtype()));
    ctx.set_output(k, std::move(t));
  }
  return Status::ok();
}

Status k_sync_bn_training_grad(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1);
  int64_t N, C, S;
  RETURN_IF_ERROR(bn_params(ctx, x, {{&ctx.input(2), "scale"}, {&ctx.input(3), "saved_mean"}, {&ctx.input(4), "saved_inv_std"}},
                            &N, &C, &S));
  if (dy.dims() != x.dims() || dy.dtype() != x.dtype())
    return ctx.error("input dY " + dy.type().to_string() + " must have X's type " + x.type().to_string());
  Status st;
  dispatch_f32_f64(x.dtype(), [&](auto t) { st = sync_bn_training_grad<decltype(t)>(ctx, N, C, S); });
  return st;
}

}  // namespace

void register_grad_norm_pool_ops(OpRegistry& r) {
  const vector<DType> kTypes = {DType::kF32, DType::kF64};
  const vector<AttrSpec> pool_attrs = {{"auto_pad", AttrType::kString}, {"kernel_shape", AttrType::kInts, true},
                                       {"pads", AttrType::kInts},       {"strides", AttrType::kInts},
                                       {"ceil_mode", AttrType::kInt},   {"dilations", AttrType::kInts}};
  vector<AttrSpec> avg_attrs = pool_attrs;
  avg_attrs.push_back({"count_include_pad", AttrType::kInt});
  r.add(OpSchema{.name = "MaxPoolGrad", .domain = "com.ferry", .min_inputs = 2, .max_inputs = 2, .attrs = pool_attrs,
                 .types = kTypes, .infer = infer_pool_grad, .kernel = k_pool_grad<true>});
  r.add(OpSchema{.name = "AveragePoolGrad", .domain = "com.ferry", .min_inputs = 2, .max_inputs = 2, .attrs = avg_attrs,
                 .types = kTypes, .infer = infer_pool_grad, .kernel = k_pool_grad<false>});
  r.add(OpSchema{.name = "LayerNormalizationGrad", .domain = "com.ferry", .min_inputs = 3, .max_inputs = 5,
                 .min_outputs = 1, .max_outputs = 3, .attrs = {{"axis", AttrType::kInt}, {"epsilon", AttrType::kFloat}},
                 .types = kTypes, .infer = infer_layernorm_grad, .kernel = k_layernorm_grad, .optional_input_mask = 1});
  r.add(OpSchema{.name = "BatchNormTraining", .domain = "com.ferry", .min_inputs = 5, .max_inputs = 5,
                 .min_outputs = 1, .max_outputs = 5,
                 .attrs = {{"epsilon", AttrType::kFloat}, {"momentum", AttrType::kFloat}, {"relu", AttrType::kInt}},
                 .types = kTypes, .infer = infer_bn_training, .kernel = k_bn_training});
  r.add(OpSchema{.name = "BatchNormTrainingGrad", .domain = "com.ferry", .min_inputs = 5, .max_inputs = 6,
                 .min_outputs = 1, .max_outputs = 3, .types = kTypes, .infer = infer_bn_training_grad,
                 .kernel = k_bn_training_grad});
  r.add(OpSchema{.name = "SyncBatchNormTraining", .domain = "com.ferry", .min_inputs = 5, .max_inputs = 5,
                 .min_outputs = 1, .max_outputs = 5,
                 .attrs = {{"epsilon", AttrType::kFloat}, {"momentum", AttrType::kFloat}}, .types = kTypes,
                 .infer = infer_bn_training, .kernel = k_sync_bn_training});
  r.add(OpSchema{.name = "SyncBatchNormTrainingGrad", .domain = "com.ferry", .min_inputs = 5, .max_inputs = 5,
                 .min_outputs = 1, .max_outputs = 3, .types = kTypes, .infer = infer_bn_training_grad,
                 .kernel = k_sync_bn_training_grad});
}

}  // namespace ferry
