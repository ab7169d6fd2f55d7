// Op family 'normalization' (see op_families.inc): BatchNormalization (inference), LayerNormalization,
// InstanceNormalization, GroupNormalization (opset 18 per-group and opset 21 per-channel affine),
// LpNormalization, MeanVarianceNormalization, LRN.
// Statistics are computed in double; f16/bf16 inputs go through f32 and are rounded back.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

template <typename T>
using Elem = std::remove_cv_t<std::remove_pointer_t<T>>;

Status check_float_input(const InferContext& ctx, int64_t i, const std::string& what) {
  if (!ctx.has_input(i)) return Status::ok();
  const DType t = ctx.input_type(i).dtype;
  if (t != DType::kUndefined && !dtype_is_float(t)) return ctx.error(type_error(what, t));
  return Status::ok();
}

Status check_float_tensor(const KernelContext& ctx, const Tensor& t, const std::string& what) {
  if (!dtype_is_float(t.dtype())) return ctx.error(type_error(what, t.dtype()));
  return Status::ok();
}

// Checks a known shape against an expected 1-D length (when both known).
Status check_param_shape(const InferContext& ctx, int64_t i, const char* name, const Dim& expected) {
  if (!ctx.has_input(i)) return Status::ok();
  const TensorType& t = ctx.input_type(i);
  if (!t.shape) return Status::ok();
  if (t.shape->rank() != 1)
    return ctx.error(std::string("input ") + name + " must be 1-D of length " + expected.to_string() + ", got shape " +
                     t.shape->to_string());
  const Dim& d = t.shape->dims[0];
  if (d.is_known() && expected.is_known() && d.value != expected.value)
    return ctx.error(std::string("input ") + name + " has shape " + t.shape->to_string() + "; expected [" +
                     expected.to_string() + "]");
  return Status::ok();
}

Status check_param_len(const KernelContext& ctx, const Tensor& t, const char* name, int64_t expected) {
  RETURN_IF_ERROR(check_float_tensor(ctx, t, std::string("input ") + name));
  if (t.rank() != 1 || t.dim(0) != expected)
    return ctx.error(std::string("input ") + name + " has shape " + dims_to_string(t.dims()) + "; expected [" +
                     std::to_string(expected) + "]");
  return Status::ok();
}

// ---- BatchNormalization ---------------------------------------------------------------------

// Opset 7: spatial attribute; 9: spatial removed; 14: training_mode and 3 outputs; 15: scale/B and
// mean/var may have a different float type than X. Only inference is supported: with extra outputs
// (running mean/var, and at opset < 14 saved mean/var) the unchanged mean and var are returned.
Status batchnorm_common_checks(const AttrReader& a, int64_t opset, int64_t num_outputs) {
  if (opset >= 14 && a.get_int("training_mode", 0) != 0)
    return unsupported(a.node().describe() + ": training mode is not supported (training_mode=1) for inference: this "
                       "is a training-mode export, which `ferry train` takes; to run or compile it, export the model in "
                       "eval mode (model.eval()), or train it and run the model --out writes");
  const int64_t max_out = opset >= 14 ? 3 : 5;
  if (num_outputs > max_out)
    return invalid_model(a.node().describe() + ": BatchNormalization has at most " + std::to_string(max_out) +
                         " outputs at opset " + std::to_string(opset));
  return Status::ok();
}

bool batchnorm_spatial(const AttrReader& a, int64_t opset) { return opset >= 9 || a.get_int("spatial", 1) != 0; }

Status infer_batchnorm(InferContext& ctx) {
  RETURN_IF_ERROR(batchnorm_common_checks(ctx, ctx.opset(), ctx.num_outputs()));
  static const char* kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int64_t i = 0; i < 5; ++i) RETURN_IF_ERROR(check_float_input(ctx, i, std::string("input ") + kNames[i]));
  const TensorType& x = ctx.input_type(0);
  if (x.shape) {
    if (x.shape->rank() < 2)
      return ctx.error("input X must have rank >= 2 (N x C x ...), got shape " + x.shape->to_string());
    if (batchnorm_spatial(ctx, ctx.opset()))
      for (int64_t i = 1; i < 5; ++i) RETURN_IF_ERROR(check_param_shape(ctx, i, kNames[i], x.shape->dims[1]));
  }
  ctx.set_output(0, x);
  for (int64_t i = 1; i < ctx.num_outputs(); ++i) {
    const int64_t src = (i % 2 == 1) ? 3 : 4;  // mean-like outputs from input_mean, var-like from input_var
    if (ctx.has_input(src)) ctx.set_output(i, ctx.input_type(src));
  }
  return Status::ok();
}

Status k_batchnorm(KernelContext& ctx) {
  RETURN_IF_ERROR(batchnorm_common_checks(ctx, ctx.opset(), ctx.num_outputs()));
  const Tensor& x = ctx.input(0);
  if (!dtype_is_float(x.dtype())) return ctx.error(type_error("input X", x.dtype()));
  if (x.rank() < 2) return ctx.error("input X must have rank >= 2 (N x C x ...), got shape " + dims_to_string(x.dims()));
  const int64_t n = x.dim(0), c = x.dim(1);
  int64_t s = 1;
  for (int64_t i = 2; i < x.rank(); ++i) s *= x.dim(i);
  const bool spatial = batchnorm_spatial(ctx, ctx.opset());
  const int64_t plen = spatial ? c : c * s;  // spatial=0 (opset 7): one parameter per (channel, position)
  static const char* kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  vector<vector<double>> prm(5);
  for (int64_t i = 1; i < 5; ++i) {
    const Tensor& t = ctx.input(i);
    RETURN_IF_ERROR(check_float_tensor(ctx, t, std::string("input ") + kNames[i]));
    if (t.numel() != plen || (spatial && t.rank() != 1))
      return ctx.error(std::string("input ") + kNames[i] + " has shape " + dims_to_string(t.dims()) + "; expected " +
                       (spatial ? "[" + std::to_string(c) + "]" : std::to_string(plen) + " elements (C x D1 x ...)"));
    prm[i] = t.to_double_vector();
  }
  const double eps = ctx.get_float("epsilon", 1e-5f);
  vector<double> mul(static_cast<size_t>(plen));
  for (int64_t k = 0; k < plen; ++k) mul[k] = prm[1][k] / std::sqrt(prm[4][k] + eps);
  RETURN_IF_ERROR(float_io(ctx, x, 0, "input X", [&](const auto* px, auto* py) {
    using T = Elem<decltype(px)>;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t base = (b * c + ch) * s;
        for (int64_t k = 0; k < s; ++k) {
          const int64_t pi = spatial ? ch : ch * s + k;
          py[base + k] = static_cast<T>((static_cast<double>(px[base + k]) - prm[3][pi]) * mul[pi] + prm[2][pi]);
        }
      }
  }));
  for (int64_t i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, ctx.input(i % 2 == 1 ? 3 : 4).clone());
  return Status::ok();
}

// Mean and 1/sqrt(biased variance + eps) of one row of `len` values, in double (two passes, as the
// reference normalizations define them).
template <typename T>
void row_moments(const T* xr, int64_t len, double eps, double* mu, double* invstd) {
  double sum = 0;
  for (int64_t j = 0; j < len; ++j) sum += xr[j];
  const double m = sum / static_cast<double>(len);
  double sq = 0;
  for (int64_t j = 0; j < len; ++j) {
    const double d = xr[j] - m;
    sq += d * d;
  }
  *mu = m;
  *invstd = 1.0 / std::sqrt(sq / static_cast<double>(len) + eps);
}

// ---- LayerNormalization ---------------------------------------------------------------------

bool stash_type_ok(int64_t t) {
  return t == static_cast<int64_t>(DType::kF32) || t == static_cast<int64_t>(DType::kF64) ||
         t == static_cast<int64_t>(DType::kF16) || t == static_cast<int64_t>(DType::kBF16);
}

// Unidirectional broadcast of a parameter shape to X's shape (symbolic).
bool unidirectional_ok(const Shape& param, const Shape& x) {
  if (param.rank() > x.rank()) return false;
  const int64_t off = x.rank() - param.rank();
  for (int64_t i = 0; i < param.rank(); ++i) {
    const Dim& p = param.dims[i];
    const Dim& d = x.dims[off + i];
    if (p.is_known() && p.value != 1 && d.is_known() && p.value != d.value) return false;
  }
  return true;
}

Status infer_layernorm(InferContext& ctx) {
  RETURN_IF_ERROR(check_float_input(ctx, 0, "input X"));
  const TensorType& x = ctx.input_type(0);
  static const char* kNames[] = {"X", "Scale", "B"};
  for (int64_t i = 1; i < 3; ++i) {
    if (!ctx.has_input(i)) continue;
    const TensorType& p = ctx.input_type(i);
    if (p.dtype != DType::kUndefined && x.dtype != DType::kUndefined && p.dtype != x.dtype)
      return ctx.error(std::string("input ") + kNames[i] + " has element type " + dtype_name(p.dtype) + " but X is " +
                       dtype_name(x.dtype));
    if (p.shape && x.shape && !unidirectional_ok(*p.shape, *x.shape))
      return ctx.error(std::string("input ") + kNames[i] + " shape " + p.shape->to_string() +
                       " cannot be broadcast to X's shape " + x.shape->to_string());
  }
  const int64_t stash = ctx.get_int("stash_type", 1);
  if (!stash_type_ok(stash)) return ctx.error("attribute stash_type " + std::to_string(stash) + " is not a float type");
  std::optional<Shape> stat_shape;
  if (x.shape) {
    int64_t axis = ctx.get_int("axis", -1);
    if (!normalize_axis(&axis, x.shape->rank()))
      return ctx.error("attribute axis " + std::to_string(ctx.get_int("axis", -1)) +
                       " is out of range for an input of rank " + std::to_string(x.shape->rank()));
    Shape s;
    for (int64_t i = 0; i < x.shape->rank(); ++i) s.dims.push_back(i < axis ? x.shape->dims[i] : Dim(1));
    stat_shape = s;
  }
  ctx.set_output(0, x);
  for (int64_t i = 1; i < ctx.num_outputs() && i < 3; ++i)
    ctx.set_output(i, TensorType{static_cast<DType>(stash), stat_shape});
  return Status::ok();
}

// Offsets of a parameter broadcast to `dims` split at `axis`: offset(o, j) = outer[o] + inner[j].
struct ParamMap {
  vector<int64_t> outer, inner;
};

ParamMap param_map(const vector<int64_t>& pdims, const vector<int64_t>& dims, int64_t axis) {
  const vector<int64_t> st = broadcast_strides(pdims, dims);
  ParamMap m;
  vector<int64_t> od(dims.begin(), dims.begin() + axis), id(dims.begin() + axis, dims.end());
  vector<int64_t> os(st.begin(), st.begin() + axis), is(st.begin() + axis, st.end());
  m.outer.reserve(static_cast<size_t>(element_count(od)));
  m.inner.reserve(static_cast<size_t>(element_count(id)));
  for (BroadcastIter it(od, {os}); !it.done(); it.next()) m.outer.push_back(it.offset(0));
  for (BroadcastIter it(id, {is}); !it.done(); it.next()) m.inner.push_back(it.offset(0));
  return m;
}

Status k_layernorm(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (!dtype_is_float(x.dtype())) return ctx.error(type_error("input X", x.dtype()));
  const int64_t r = x.rank();
  const int64_t axis_attr = ctx.get_int("axis", -1);
  int64_t axis = axis_attr;
  if (!normalize_axis(&axis, r))
    return ctx.error("attribute axis " + std::to_string(axis_attr) + " is out of range for an input of rank " +
                     std::to_string(r));
  const int64_t stash = ctx.get_int("stash_type", 1);
  if (!stash_type_ok(stash)) return ctx.error("attribute stash_type " + std::to_string(stash) + " is not a float type");
  static const char* kNames[] = {"X", "Scale", "B"};
  if (!ctx.has_input(1)) return ctx.error("input Scale is required");
  vector<double> prm[3];
  ParamMap maps[3];
  for (int64_t i = 1; i < 3; ++i) {
    if (!ctx.has_input(i)) continue;
    const Tensor& p = ctx.input(i);
    if (p.dtype() != x.dtype())
      return ctx.error(std::string("input ") + kNames[i] + " has element type " + dtype_name(p.dtype()) + " but X is " +
                       dtype_name(x.dtype()));
    vector<int64_t> bd;
    if (p.rank() > r || !broadcast_dims(x.dims(), p.dims(), &bd) || bd != x.dims())
      return ctx.error(std::string("input ") + kNames[i] + " shape " + dims_to_string(p.dims()) +
                       " cannot be broadcast to X's shape " + dims_to_string(x.dims()));
    prm[i] = p.to_double_vector();
    maps[i] = param_map(p.dims(), x.dims(), axis);
  }
  const bool has_b = ctx.has_input(2);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? outer : inner) *= x.dim(i);
  const double eps = ctx.get_float("epsilon", 1e-5f);
  vector<double> mean(static_cast<size_t>(outer)), inv(static_cast<size_t>(outer));
  RETURN_IF_ERROR(float_io(ctx, x, 0, "input X", [&](const auto* px, auto* py) {
    using T = Elem<decltype(px)>;
    for (int64_t o = 0; o < outer; ++o) {
      const T* xr = px + o * inner;
      T* yr = py + o * inner;
      double mu = 0, is = 0;
      row_moments(xr, inner, eps, &mu, &is);
      mean[o] = mu;
      inv[o] = is;
      const int64_t so = maps[1].outer[o];
      const int64_t bo = has_b ? maps[2].outer[o] : 0;
      for (int64_t j = 0; j < inner; ++j) {
        double v = (xr[j] - mu) * is * prm[1][so + maps[1].inner[j]];
        if (has_b) v += prm[2][bo + maps[2].inner[j]];
        yr[j] = static_cast<T>(v);
      }
    }
  }));
  vector<int64_t> sdims;
  for (int64_t i = 0; i < r; ++i) sdims.push_back(i < axis ? x.dim(i) : 1);
  const vector<double>* stats[3] = {nullptr, &mean, &inv};
  for (int64_t i = 1; i < ctx.num_outputs() && i < 3; ++i) {
    ASSIGN_OR_RETURN(Tensor t, cast_tensor(Tensor::from_vector<double>(*stats[i], sdims), static_cast<DType>(stash)));
    ctx.set_output(i, std::move(t));
  }
  return Status::ok();
}

// ---- InstanceNormalization / GroupNormalization ---------------------------------------------

// Normalizes x viewed as [rows, len] row by row: y = (x - mean) * invstd * scale[ch] + bias[ch],
// where the channel of element j in row `row` is given by `chan(row, j)`.
template <typename T, typename Chan>
void normalize_rows(const T* px, T* py, int64_t rows, int64_t len, double eps, const vector<double>& scale,
                    const vector<double>& bias, Chan chan) {
  for (int64_t row = 0; row < rows; ++row) {
    const T* xr = px + row * len;
    T* yr = py + row * len;
    double mu = 0, is = 0;
    row_moments(xr, len, eps, &mu, &is);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t c = chan(row, j);
      yr[j] = static_cast<T>((xr[j] - mu) * is * scale[c] + bias[c]);
    }
  }
}

Status infer_instancenorm(InferContext& ctx) {
  for (int64_t i = 0; i < 3; ++i) RETURN_IF_ERROR(check_float_input(ctx, i, "input " + std::to_string(i)));
  const TensorType& x = ctx.input_type(0);
  if (x.shape) {
    if (x.shape->rank() < 2)
      return ctx.error("input must have rank >= 2 (N x C x ...), got shape " + x.shape->to_string());
    RETURN_IF_ERROR(check_param_shape(ctx, 1, "scale", x.shape->dims[1]));
    RETURN_IF_ERROR(check_param_shape(ctx, 2, "B", x.shape->dims[1]));
  }
  ctx.set_output(0, x);
  return Status::ok();
}

Status k_instancenorm(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (!dtype_is_float(x.dtype())) return ctx.error(type_error("input", x.dtype()));
  if (x.rank() < 2) return ctx.error("input must have rank >= 2 (N x C x ...), got shape " + dims_to_string(x.dims()));
  const int64_t c = x.dim(1);
  RETURN_IF_ERROR(check_param_len(ctx, ctx.input(1), "scale", c));
  RETURN_IF_ERROR(check_param_len(ctx, ctx.input(2), "B", c));
  int64_t s = 1;
  for (int64_t i = 2; i < x.rank(); ++i) s *= x.dim(i);
  const vector<double> scale = ctx.input(1).to_double_vector(), bias = ctx.input(2).to_double_vector();
  const double eps = ctx.get_float("epsilon", 1e-5f);
  const int64_t rows = x.dim(0) * c;
  return float_io(ctx, x, 0, "input X", [&](const auto* px, auto* py) {
    normalize_rows(px, py, rows, s, eps, scale, bias, [c](int64_t row, int64_t) { return row % c; });
  });
}

// Opset 18: scale/bias have one value per group; opset 21: one per channel.
template <bool kPerChannel>
Status infer_groupnorm(InferContext& ctx) {
  for (int64_t i = 0; i < 3; ++i) RETURN_IF_ERROR(check_float_input(ctx, i, "input " + std::to_string(i)));
  if (!ctx.has("num_groups")) return ctx.error("required attribute num_groups is missing");
  const int64_t g = ctx.get_int("num_groups", 0);
  if (g <= 0) return ctx.error("attribute num_groups must be positive, got " + std::to_string(g));
  if (kPerChannel) {
    const int64_t stash = ctx.get_int("stash_type", 1);
    if (!stash_type_ok(stash)) return ctx.error("attribute stash_type " + std::to_string(stash) + " is not a float type");
  }
  const TensorType& x = ctx.input_type(0);
  if (x.shape) {
    if (x.shape->rank() < 2)
      return ctx.error("input X must have rank >= 2 (N x C x ...), got shape " + x.shape->to_string());
    const Dim& c = x.shape->dims[1];
    if (c.is_known() && c.value % g != 0)
      return ctx.error("the channel count " + std::to_string(c.value) + " is not divisible by num_groups " +
                       std::to_string(g));
    const Dim plen = kPerChannel ? c : Dim(g);
    RETURN_IF_ERROR(check_param_shape(ctx, 1, "scale", plen));
    RETURN_IF_ERROR(check_param_shape(ctx, 2, "bias", plen));
  }
  ctx.set_output(0, x);
  return Status::ok();
}

template <bool kPerChannel>
Status k_groupnorm(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (!dtype_is_float(x.dtype())) return ctx.error(type_error("input X", x.dtype()));
  if (x.rank() < 2) return ctx.error("input X must have rank >= 2 (N x C x ...), got shape " + dims_to_string(x.dims()));
  if (!ctx.has("num_groups")) return ctx.error("required attribute num_groups is missing");
  const int64_t g = ctx.get_int("num_groups", 0);
  if (g <= 0) return ctx.error("attribute num_groups must be positive, got " + std::to_string(g));
  const int64_t c = x.dim(1);
  if (c % g != 0)
    return ctx.error("the channel count " + std::to_string(c) + " is not divisible by num_groups " + std::to_string(g));
  const int64_t plen = kPerChannel ? c : g;
  RETURN_IF_ERROR(check_param_len(ctx, ctx.input(1), "scale", plen));
  RETURN_IF_ERROR(check_param_len(ctx, ctx.input(2), "bias", plen));
  int64_t s = 1;
  for (int64_t i = 2; i < x.rank(); ++i) s *= x.dim(i);
  const int64_t cpg = c / g;  // channels per group
  const vector<double> scale = ctx.input(1).to_double_vector(), bias = ctx.input(2).to_double_vector();
  const double eps = ctx.get_float("epsilon", 1e-5f);
  const int64_t rows = x.dim(0) * g, len = cpg * s;
  return float_io(ctx, x, 0, "input X", [&](const auto* px, auto* py) {
    normalize_rows(px, py, rows, len, eps, scale, bias, [g, cpg, s](int64_t row, int64_t j) -> int64_t {
      const int64_t grp = row % g;
      return kPerChannel ? grp * cpg + j / s : grp;
    });
  });
}

// ---- LpNormalization ------------------------------------------------------------------------

Status lp_attrs(const AttrReader& a, int64_t rank, int64_t* axis, int64_t* p) {
  *p = a.get_int("p", 2);
  if (*p != 1 && *p != 2)
    return invalid_model(a.node().describe() + ": attribute p is " + std::to_string(*p) + "; only 1 and 2 are supported");
  *axis = a.get_int("axis", -1);
  if (rank >= 0 && !normalize_axis(axis, rank))
    return invalid_model(a.node().describe() + ": attribute axis " + std::to_string(a.get_int("axis", -1)) +
                         " is out of range for an input of rank " + std::to_string(rank));
  return Status::ok();
}

Status infer_lpnorm(InferContext& ctx) {
  RETURN_IF_ERROR(check_float_input(ctx, 0, "input"));
  const TensorType& x = ctx.input_type(0);
  int64_t axis, p;
  RETURN_IF_ERROR(lp_attrs(ctx, x.shape ? x.shape->rank() : -1, &axis, &p));
  ctx.set_output(0, x);
  return Status::ok();
}

// y = x / ||x||_p along axis. A zero norm gives 0 (as onnxruntime), not NaN.
Status k_lpnorm(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t axis, p;
  {
    Status s = lp_attrs(ctx, x.rank(), &axis, &p);
    if (!s.is_ok()) return invalid_argument(s.message());
  }
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
  for (int64_t i = axis + 1; i < x.rank(); ++i) inner *= x.dim(i);
  const int64_t n = x.rank() > 0 ? x.dim(axis) : 1;
  return float_io(ctx, x, 0, "input X", [&](const auto* px, auto* py) {
    using T = Elem<decltype(px)>;
    vector<double> norm(static_cast<size_t>(inner));
    for (int64_t o = 0; o < outer; ++o) {
      const T* xb = px + o * n * inner;
      T* yb = py + o * n * inner;
      std::fill(norm.begin(), norm.end(), 0.0);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < inner; ++i) {
          const double v = xb[k * inner + i];
          norm[i] += p == 1 ? std::fabs(v) : v * v;
        }
      if (p == 2)
        for (double& v : norm) v = std::sqrt(v);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < inner; ++i)
          yb[k * inner + i] = norm[i] == 0 ? T(0) : static_cast<T>(static_cast<double>(xb[k * inner + i]) / norm[i]);
    }
  });
}

// ---- MeanVarianceNormalization --------------------------------------------------------------

// Y = (X - mean) / (sqrt(var) + 1e-9), statistics over `axes` (default [0, 2, 3]).
Status mvn_mask(const AttrReader& a, int64_t rank, vector<bool>* mask) {
  const vector<int64_t> axes = a.get_ints("axes", {0, 2, 3});
  mask->assign(static_cast<size_t>(rank), false);
  for (int64_t ax : axes) {
    int64_t n = ax;
    if (!normalize_axis(&n, rank))
      return invalid_model(a.node().describe() + ": axis " + std::to_string(ax) +
                           " in axes is out of range for an input of rank " + std::to_string(rank));
    if ((*mask)[n]) return invalid_model(a.node().describe() + ": axis " + std::to_string(ax) + " is given twice in axes");
    (*mask)[n] = true;
  }
  return Status::ok();
}

Status infer_mvn(InferContext& ctx) {
  RETURN_IF_ERROR(check_float_input(ctx, 0, "input"));
  const TensorType& x = ctx.input_type(0);
  if (x.shape) {
    vector<bool> mask;
    RETURN_IF_ERROR(mvn_mask(ctx, x.shape->rank(), &mask));
  }
  ctx.set_output(0, x);
  return Status::ok();
}

Status k_mvn(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  vector<bool> mask;
  {
    Status s = mvn_mask(ctx, x.rank(), &mask);
    if (!s.is_ok()) return invalid_argument(s.message());
  }
  const int64_t r = x.rank();
  vector<int64_t> kept;
  int64_t count = 1;
  for (int64_t i = 0; i < r; ++i) {
    kept.push_back(mask[i] ? 1 : x.dim(i));
    if (mask[i]) count *= x.dim(i);
  }
  const vector<int64_t> ks = strides_of(kept);
  vector<int64_t> st(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) st[i] = mask[i] ? 0 : ks[i];
  const int64_t m = element_count(kept);
  return float_io(ctx, x, 0, "input X", [&](const auto* px, auto* py) {
    using T = Elem<decltype(px)>;
    vector<double> mean(static_cast<size_t>(m), 0.0), var(static_cast<size_t>(m), 0.0);
    for (BroadcastIter it(x.dims(), {st}); !it.done(); it.next()) mean[it.offset(0)] += px[it.index()];
    for (double& v : mean) v /= static_cast<double>(count);
    for (BroadcastIter it(x.dims(), {st}); !it.done(); it.next()) {
      const double d = px[it.index()] - mean[it.offset(0)];
      var[it.offset(0)] += d * d;
    }
    for (double& v : var) v = std::sqrt(v / static_cast<double>(count)) + 1e-9;
    for (BroadcastIter it(x.dims(), {st}); !it.done(); it.next()) {
      const int64_t j = it.offset(0);
      py[it.index()] = static_cast<T>((px[it.index()] - mean[j]) / var[j]);
    }
  });
}

// ---- LRN ------------------------------------------------------------------------------------

Status lrn_size(const AttrReader& a, int64_t* size) {
  if (!a.has("size")) return invalid_model(a.node().describe() + ": required attribute size is missing");
  *size = a.get_int("size", 0);
  if (*size <= 0) return invalid_model(a.node().describe() + ": attribute size must be positive, got " + std::to_string(*size));
  return Status::ok();
}

Status infer_lrn(InferContext& ctx) {
  RETURN_IF_ERROR(check_float_input(ctx, 0, "input X"));
  int64_t size;
  RETURN_IF_ERROR(lrn_size(ctx, &size));
  const TensorType& x = ctx.input_type(0);
  if (x.shape && x.shape->rank() < 2)
    return ctx.error("input X must have rank >= 2 (N x C x ...), got shape " + x.shape->to_string());
  ctx.set_output(0, x);
  return Status::ok();
}

// square_sum[n,c,...] = sum of X[n,i,...]^2 for i in [c - floor((size-1)/2), c + ceil((size-1)/2)];
// Y = X / (bias + alpha / size * square_sum)^beta.
Status k_lrn(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t size;
  {
    Status s = lrn_size(ctx, &size);
    if (!s.is_ok()) return invalid_argument(s.message());
  }
  if (x.rank() < 2) return ctx.error("input X must have rank >= 2 (N x C x ...), got shape " + dims_to_string(x.dims()));
  const double alpha = ctx.get_float("alpha", 1e-4f), beta = ctx.get_float("beta", 0.75f), bias = ctx.get_float("bias", 1.0f);
  const int64_t n = x.dim(0), c = x.dim(1);
  int64_t s = 1;
  for (int64_t i = 2; i < x.rank(); ++i) s *= x.dim(i);
  const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;  // floor and ceil of (size-1)/2
  return float_io(ctx, x, 0, "input X", [&](const auto* px, auto* py) {
    using T = Elem<decltype(px)>;
    vector<double> sq(static_cast<size_t>(s));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch) {
        std::fill(sq.begin(), sq.end(), 0.0);
        const int64_t c0 = std::max<int64_t>(0, ch - lo), c1 = std::min<int64_t>(c - 1, ch + hi);
        for (int64_t k = c0; k <= c1; ++k) {
          const T* xr = px + (b * c + k) * s;
          for (int64_t j = 0; j < s; ++j) sq[j] += static_cast<double>(xr[j]) * xr[j];
        }
        const T* xr = px + (b * c + ch) * s;
        T* yr = py + (b * c + ch) * s;
        for (int64_t j = 0; j < s; ++j)
          yr[j] = static_cast<T>(xr[j] / std::pow(bias + alpha / static_cast<double>(size) * sq[j], beta));
      }
  });
}

}  // namespace

void register_normalization_ops(OpRegistry& r) {
  const std::vector<AttrSpec> bn_attrs = {{"epsilon", AttrType::kFloat}, {"momentum", AttrType::kFloat},
                                          {"spatial", AttrType::kInt}, {"training_mode", AttrType::kInt}};
  for (int64_t since : {7, 9})
    r.add(OpSchema{.name = "BatchNormalization", .since_version = since, .min_inputs = 5, .max_inputs = 5,
                   .min_outputs = 1, .max_outputs = 5, .attrs = bn_attrs, .types = kFloatTypes,
                   .infer = infer_batchnorm, .kernel = k_batchnorm});
  for (int64_t since : {14, 15})
    r.add(OpSchema{.name = "BatchNormalization", .since_version = since, .min_inputs = 5, .max_inputs = 5,
                   .min_outputs = 1, .max_outputs = 3, .attrs = bn_attrs, .types = kFloatTypes,
                   .infer = infer_batchnorm, .kernel = k_batchnorm});
  r.add(OpSchema{.name = "LayerNormalization", .since_version = 17, .min_inputs = 2, .max_inputs = 3,
                 .min_outputs = 1, .max_outputs = 3,
                 .attrs = {{"axis", AttrType::kInt}, {"epsilon", AttrType::kFloat}, {"stash_type", AttrType::kInt}},
                 .types = kFloatTypes, .infer = infer_layernorm, .kernel = k_layernorm});
  r.add(OpSchema{.name = "InstanceNormalization", .since_version = 6, .min_inputs = 3, .max_inputs = 3,
                 .attrs = {{"epsilon", AttrType::kFloat}}, .types = kFloatTypes, .infer = infer_instancenorm,
                 .kernel = k_instancenorm});
  r.add(OpSchema{.name = "GroupNormalization", .since_version = 18, .min_inputs = 3, .max_inputs = 3,
                 .attrs = {{"epsilon", AttrType::kFloat}, {"num_groups", AttrType::kInt, true}},
                 .types = kFloatTypes, .infer = infer_groupnorm<false>, .kernel = k_groupnorm<false>});
  r.add(OpSchema{.name = "GroupNormalization", .since_version = 21, .min_inputs = 3, .max_inputs = 3,
                 .attrs = {{"epsilon", AttrType::kFloat}, {"num_groups", AttrType::kInt, true},
                           {"stash_type", AttrType::kInt}},
                 .types = kFloatTypes, .infer = infer_groupnorm<true>, .kernel = k_groupnorm<true>});
  r.add(OpSchema{.name = "LpNormalization", .since_version = 1,
                 .attrs = {{"axis", AttrType::kInt}, {"p", AttrType::kInt}}, .types = kFloatTypes,
                 .infer = infer_lpnorm, .kernel = k_lpnorm});
  r.add(OpSchema{.name = "MeanVarianceNormalization", .since_version = 9, .attrs = {{"axes", AttrType::kInts}},
                 .types = kFloatTypes, .infer = infer_mvn, .kernel = k_mvn});
  r.add(OpSchema{.name = "LRN", .since_version = 1,
                 .attrs = {{"alpha", AttrType::kFloat}, {"beta", AttrType::kFloat}, {"bias", AttrType::kFloat},
                           {"size", AttrType::kInt, true}},
                 .types = kFloatTypes, .infer = infer_lrn, .kernel = k_lrn});
}

}  // namespace ferry
