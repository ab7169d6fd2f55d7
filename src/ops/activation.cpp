// Op family 'activation' (see op_families.inc): pointwise activations (Relu, Sigmoid, Gelu, ...),
// Clip, Shrink, and the axis-wise Softmax / LogSoftmax / Hardmax.
// Float math is done in double and rounded to the element type; f16/bf16 go through f32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

template <typename T>
constexpr bool is_negative(T v) {
  if constexpr (std::is_signed_v<T>) return v < 0;
  else return false;
}

// y = f(x) elementwise, f: double -> double.
template <typename F>
Status map_float(KernelContext& ctx, F f) {
  const int64_t n = ctx.input(0).numel();
  return float_io(ctx, ctx.input(0), 0, "input 0", [&](const auto* px, auto* py) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(px)>>;
    for (int64_t i = 0; i < n; ++i) py[i] = static_cast<T>(f(static_cast<double>(px[i])));
  });
}

// Clamps to [lo, hi], propagating NaN.
inline double clamp_nan(double v, double lo, double hi) {
  if (std::isnan(v)) return v;
  return v < lo ? lo : (v > hi ? hi : v);
}

double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

// ---- shape rules ----------------------------------------------------------------------------

Status check_float_type(const InferContext& ctx, int64_t i, const char* what) {
  if (!ctx.has_input(i)) return Status::ok();
  const DType t = ctx.input_type(i).dtype;
  if (t != DType::kUndefined && !dtype_is_float(t))
    return ctx.error(type_error(what, t, "a float type (f16, bf16, f32, f64)"));
  return Status::ok();
}

Status infer_float_unary(InferContext& ctx) {
  RETURN_IF_ERROR(check_float_type(ctx, 0, "input X"));
  ctx.set_output(0, ctx.input_type(0));
  return Status::ok();
}

Status infer_relu(InferContext& ctx) {
  const DType t = ctx.input_type(0).dtype;
  if (t != DType::kUndefined && !dtype_is_float(t) && !dtype_is_signed(t))
    return ctx.error(type_error("input X", t, "a float or signed integer type"));
  ctx.set_output(0, ctx.input_type(0));
  return Status::ok();
}

// ---- simple activations ---------------------------------------------------------------------

Status k_relu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (dtype_is_float(x.dtype())) return map_float(ctx, [](double v) { return v < 0 ? 0.0 : v; });
  if (!dtype_is_signed(x.dtype()))
    return ctx.error(type_error("input X", x.dtype(), "a float or signed integer type"));
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  switch (x.dtype()) {
    FERRY_DISPATCH_INT_CASES({
      const scalar_t* px = x.data<scalar_t>();
      scalar_t* py = y->mutable_data<scalar_t>();
      for (int64_t i = 0; i < x.numel(); ++i) py[i] = is_negative(px[i]) ? scalar_t(0) : px[i];
    })
    default: return ctx.error(type_error("input X", x.dtype(), "a float or signed integer type"));
  }
  return Status::ok();
}

Status k_leaky_relu(KernelContext& ctx) {
  const double alpha = ctx.get_float("alpha", 0.01f);
  return map_float(ctx, [alpha](double v) { return v < 0 ? alpha * v : v; });
}

Status k_elu(KernelContext& ctx) {
  const double alpha = ctx.get_float("alpha", 1.0f);
  return map_float(ctx, [alpha](double v) { return v < 0 ? alpha * std::expm1(v) : v; });
}

Status k_selu(KernelContext& ctx) {
  const double alpha = ctx.get_float("alpha", 1.67326319217681884765625f);
  const double gamma = ctx.get_float("gamma", 1.05070102214813232421875f);
  return map_float(ctx, [alpha, gamma](double v) { return v <= 0 ? gamma * alpha * std::expm1(v) : gamma * v; });
}

Status k_celu(KernelContext& ctx) {
  const double alpha = ctx.get_float("alpha", 1.0f);
  if (alpha == 0) return ctx.error("attribute alpha must not be 0 (Celu divides by it)");
  return map_float(ctx, [alpha](double v) { return v < 0 ? alpha * std::expm1(v / alpha) : v; });
}

Status k_thresholded_relu(KernelContext& ctx) {
  const double alpha = ctx.get_float("alpha", 1.0f);
  return map_float(ctx, [alpha](double v) { return std::isnan(v) ? v : (v > alpha ? v : 0.0); });
}

Status k_sigmoid(KernelContext& ctx) { return map_float(ctx, [](double v) { return sigmoid(v); }); }

Status k_hard_sigmoid(KernelContext& ctx) {
  const double alpha = ctx.get_float("alpha", 0.2f);
  const double beta = ctx.get_float("beta", 0.5f);
  return map_float(ctx, [alpha, beta](double v) { return clamp_nan(alpha * v + beta, 0.0, 1.0); });
}

Status k_hard_swish(KernelContext& ctx) {
  return map_float(ctx, [](double v) { return v * clamp_nan(v / 6.0 + 0.5, 0.0, 1.0); });
}

Status k_softplus(KernelContext& ctx) { return map_float(ctx, [](double v) { return softplus(v); }); }

Status k_softsign(KernelContext& ctx) { return map_float(ctx, [](double v) { return v / (1.0 + std::fabs(v)); }); }

Status k_mish(KernelContext& ctx) { return map_float(ctx, [](double v) { return v * std::tanh(softplus(v)); }); }

Status gelu_mode(const AttrReader& a, bool* tanh_mode) {
  const std::string approx = a.get_string("approximate", "none");
  if (approx == "none") *tanh_mode = false;
  else if (approx == "tanh") *tanh_mode = true;
  else return invalid_model(a.node().describe() + ": attribute approximate is '" + approx + "'; expected 'none' or 'tanh'");
  return Status::ok();
}

Status infer_gelu(InferContext& ctx) {
  bool tanh_mode = false;
  RETURN_IF_ERROR(gelu_mode(ctx, &tanh_mode));
  return infer_float_unary(ctx);
}

Status k_gelu(KernelContext& ctx) {
  bool tanh_mode = false;
  RETURN_IF_ERROR(gelu_mode(ctx, &tanh_mode));
  if (tanh_mode) {
    const double k = std::sqrt(2.0 / 3.14159265358979323846);
    return map_float(ctx, [k](double v) { return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))); });
  }
  return map_float(ctx, [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); });
}

// ---- PRelu ----------------------------------------------------------------------------------

bool prelu_type_ok(DType t) {
  return dtype_is_float(t) || t == DType::kI32 || t == DType::kI64 || t == DType::kU32 || t == DType::kU64;
}

Status infer_prelu(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  const TensorType& s = ctx.input_type(1);
  if (x.dtype != DType::kUndefined && !prelu_type_ok(x.dtype))
    return ctx.error(type_error("input X", x.dtype, "a float type or i32/i64/u32/u64"));
  if (x.dtype != DType::kUndefined && s.dtype != DType::kUndefined && x.dtype != s.dtype)
    return ctx.error(std::string("X and slope have different element types: ") + dtype_name(x.dtype) + " and " +
                     dtype_name(s.dtype));
  if (x.shape && s.shape) {
    Shape b;
    bool ok = s.shape->rank() <= x.shape->rank() && broadcast_shapes(*x.shape, *s.shape, &b);
    // Unidirectional: slope must not grow X. A known slope dim must be 1 or equal X's known dim.
    if (ok) {
      const int64_t off = x.shape->rank() - s.shape->rank();
      for (int64_t i = 0; i < s.shape->rank(); ++i) {
        const Dim& sd = s.shape->dims[i];
        const Dim& xd = x.shape->dims[off + i];
        if (sd.is_known() && xd.is_known() && sd.value != 1 && sd.value != xd.value) ok = false;
      }
    }
    if (!ok)
      return ctx.error("slope shape " + s.shape->to_string() + " cannot be broadcast to X's shape " +
                       x.shape->to_string());
  }
  ctx.set_output(0, x);
  return Status::ok();
}

Status k_prelu(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  const Tensor& s0 = ctx.input(1);
  if (!prelu_type_ok(x0.dtype())) return ctx.error(type_error("input X", x0.dtype(), "a float type or i32/i64/u32/u64"));
  if (x0.dtype() != s0.dtype())
    return ctx.error(std::string("X and slope have different element types: ") + dtype_name(x0.dtype()) + " and " +
                     dtype_name(s0.dtype()));
  std::vector<int64_t> bd;
  if (s0.rank() > x0.rank() || !broadcast_dims(x0.dims(), s0.dims(), &bd) || bd != x0.dims())
    return ctx.error("slope shape " + dims_to_string(s0.dims()) + " cannot be broadcast to X's shape " +
                     dims_to_string(x0.dims()));
  const std::vector<int64_t> sstr = broadcast_strides(s0.dims(), x0.dims());
  if (dtype_is_float(x0.dtype())) {
    Tensor s = widen_to_f32(s0);
    return float_io(ctx, x0, 0, "input 0", [&](const auto* px, auto* py) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(px)>>;
      const T* ps = s.data<T>();
      if (s.numel() == 1) {
        const double a = ps[0];
        for (int64_t i = 0; i < x0.numel(); ++i) py[i] = px[i] < 0 ? static_cast<T>(a * px[i]) : px[i];
        return;
      }
      for (BroadcastIter it(x0.dims(), {sstr}); !it.done(); it.next()) {
        const int64_t i = it.index();
        py[i] = px[i] < 0 ? static_cast<T>(static_cast<double>(ps[it.offset(0)]) * px[i]) : px[i];
      }
    });
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x0.dtype(), x0.dims()));
  switch (x0.dtype()) {
    FERRY_DISPATCH_INT_CASES({
      const scalar_t* px = x0.data<scalar_t>();
      const scalar_t* ps = s0.data<scalar_t>();
      scalar_t* py = y->mutable_data<scalar_t>();
      for (BroadcastIter it(x0.dims(), {sstr}); !it.done(); it.next()) {
        const int64_t i = it.index();
        py[i] = is_negative(px[i]) ? static_cast<scalar_t>(ps[it.offset(0)] * px[i]) : px[i];
      }
    })
    default: return ctx.error(type_error("input X", x0.dtype(), "a float type or i32/i64/u32/u64"));
  }
  return Status::ok();
}

// ---- Clip -----------------------------------------------------------------------------------

bool clip_type_ok(DType t, int64_t opset) {
  return dtype_is_float(t) || (opset >= 12 && dtype_is_integer(t));
}

Status infer_clip(InferContext& ctx) {
  const DType t = ctx.input_type(0).dtype;
  if (t != DType::kUndefined && !clip_type_ok(t, ctx.opset()))
    return ctx.error(type_error("input", t, ctx.opset() >= 12 ? "a float or integer type" : "a float type"));
  static const char* kNames[] = {"input", "min", "max"};
  for (int64_t i = 1; i < 3; ++i) {
    if (!ctx.has_input(i)) continue;
    const TensorType& b = ctx.input_type(i);
    if (b.dtype != DType::kUndefined && t != DType::kUndefined && b.dtype != t)
      return ctx.error(std::string("input '") + kNames[i] + "' has element type " + dtype_name(b.dtype) +
                       " but the input is " + dtype_name(t));
    if (b.shape && b.shape->is_static() && element_count(b.shape->values()) != 1)
      return ctx.error(std::string("input '") + kNames[i] + "' must be a scalar, got shape " + b.shape->to_string());
  }
  ctx.set_output(0, ctx.input_type(0));
  return Status::ok();
}

// opset 6: min/max attributes; opset 11+: optional min/max inputs.
template <bool kAttrs>
Status k_clip(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const DType dt = x.dtype();
  if (!clip_type_ok(dt, ctx.opset()))
    return ctx.error(type_error("input", dt, ctx.opset() >= 12 ? "a float or integer type" : "a float type"));
  const Tensor* bound[3] = {nullptr, nullptr, nullptr};
  if (!kAttrs) {
    static const char* kNames[] = {"input", "min", "max"};
    for (int64_t i = 1; i < 3; ++i) {
      if (!ctx.has_input(i)) continue;
      const Tensor& b = ctx.input(i);
      if (b.dtype() != dt)
        return ctx.error(std::string("input '") + kNames[i] + "' has element type " + dtype_name(b.dtype()) +
                         " but the input is " + dtype_name(dt));
      if (b.numel() != 1)
        return ctx.error(std::string("input '") + kNames[i] + "' must be a scalar, got shape " + dims_to_string(b.dims()));
      bound[i] = &b;
    }
  }
  if (dtype_is_float(dt)) {
    double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
    if (kAttrs) {
      lo = ctx.get_float("min", std::numeric_limits<float>::lowest());
      hi = ctx.get_float("max", std::numeric_limits<float>::max());
    } else {
      if (bound[1]) lo = bound[1]->get_double(0);
      if (bound[2]) hi = bound[2]->get_double(0);
    }
    // min(max(x, lo), hi): when lo > hi every element becomes hi.
    return map_float(ctx, [lo, hi](double v) {
      if (std::isnan(v)) return v;
      v = v < lo ? lo : v;
      return v > hi ? hi : v;
    });
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dt, x.dims()));
  switch (dt) {
    FERRY_DISPATCH_INT_CASES({
      const scalar_t lo = bound[1] ? bound[1]->data<scalar_t>()[0] : std::numeric_limits<scalar_t>::lowest();
      const scalar_t hi = bound[2] ? bound[2]->data<scalar_t>()[0] : std::numeric_limits<scalar_t>::max();
      const scalar_t* px = x.data<scalar_t>();
      scalar_t* py = y->mutable_data<scalar_t>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        scalar_t v = px[i] < lo ? lo : px[i];
        py[i] = v > hi ? hi : v;
      }
    })
    default: return ctx.error(type_error("input", dt, "a float or integer type"));
  }
  return Status::ok();
}

// ---- Softmax / LogSoftmax / Hardmax ---------------------------------------------------------

enum class SoftKind { kSoftmax, kLogSoftmax, kHardmax };

template <bool kLegacy>
int64_t softmax_default_axis() { return kLegacy ? 1 : -1; }

template <bool kLegacy>
Status infer_softmax(InferContext& ctx) {
  RETURN_IF_ERROR(check_float_type(ctx, 0, "input"));
  const TensorType& x = ctx.input_type(0);
  if (x.shape) {
    int64_t axis = ctx.get_int("axis", softmax_default_axis<kLegacy>());
    if (!normalize_axis(&axis, x.shape->rank()))
      return ctx.error("attribute axis " + std::to_string(ctx.get_int("axis", softmax_default_axis<kLegacy>())) +
                       " is out of range for an input of rank " + std::to_string(x.shape->rank()));
  }
  ctx.set_output(0, x);
  return Status::ok();
}

// Opset 1/11 (kLegacy): the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])] and each
// row is normalized. Opset 13: normalized along the single axis `axis`.
template <SoftKind kKind, bool kLegacy>
Status k_softmax(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  const int64_t axis_attr = ctx.get_int("axis", softmax_default_axis<kLegacy>());
  int64_t axis = axis_attr;
  if (!normalize_axis(&axis, r))
    return ctx.error("attribute axis " + std::to_string(axis_attr) + " is out of range for an input of rank " +
                     std::to_string(r));
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
  if (kLegacy) {
    for (int64_t i = axis; i < r; ++i) n *= x.dim(i);
  } else {
    n = x.dim(axis);
    for (int64_t i = axis + 1; i < r; ++i) inner *= x.dim(i);
  }
  return float_io(ctx, x, 0, "input 0", [&](const auto* px, auto* py) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(px)>>;
    const double kNegInf = -std::numeric_limits<double>::infinity();
    vector<double> mx(static_cast<size_t>(inner)), sum(static_cast<size_t>(inner));
    vector<int64_t> arg(static_cast<size_t>(inner));
    for (int64_t o = 0; o < outer; ++o) {
      const T* xb = px + o * n * inner;
      T* yb = py + o * n * inner;
      if (kKind == SoftKind::kHardmax) {
        // First index of the maximum (NaN counts as the maximum, as numpy's argmax).
        std::fill(arg.begin(), arg.end(), 0);
        for (int64_t k = 1; k < n; ++k)
          for (int64_t i = 0; i < inner; ++i) {
            const T best = xb[arg[i] * inner + i];
            const T v = xb[k * inner + i];
            if (!std::isnan(best) && (std::isnan(v) || v > best)) arg[i] = k;
          }
        for (int64_t k = 0; k < n; ++k)
          for (int64_t i = 0; i < inner; ++i) yb[k * inner + i] = static_cast<T>(arg[i] == k ? 1 : 0);
        continue;
      }
      // Subtract the max for stability. A row of all -inf gives NaN (as PyTorch), -inf entries give 0.
      std::fill(mx.begin(), mx.end(), kNegInf);
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < inner; ++i) {
          const double v = xb[k * inner + i];
          if (v > mx[i]) mx[i] = v;
        }
      for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < inner; ++i) sum[i] += std::exp(static_cast<double>(xb[k * inner + i]) - mx[i]);
      if (kKind == SoftKind::kSoftmax) {
        for (int64_t k = 0; k < n; ++k)
          for (int64_t i = 0; i < inner; ++i)
            yb[k * inner + i] = static_cast<T>(std::exp(static_cast<double>(xb[k * inner + i]) - mx[i]) / sum[i]);
      } else {
        for (int64_t i = 0; i < inner; ++i) sum[i] = std::log(sum[i]);
        for (int64_t k = 0; k < n; ++k)
          for (int64_t i = 0; i < inner; ++i)
            yb[k * inner + i] = static_cast<T>(static_cast<double>(xb[k * inner + i]) - mx[i] - sum[i]);
      }
    }
  });
}

// ---- Shrink ---------------------------------------------------------------------------------

Status k_shrink(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const double bias = ctx.get_float("bias", 0.0f);
  const double lambd = ctx.get_float("lambd", 0.5f);
  auto f = [&](double v) { return v < -lambd ? v + bias : (v > lambd ? v - bias : 0.0); };
  const DType dt = x.dtype();
  if (dt == DType::kF16 || dt == DType::kBF16 || dt == DType::kF64) {
    vector<double> y(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) y[i] = f(x.get_double(i));
    ASSIGN_OR_RETURN(Tensor out, doubles_to_tensor(y, x.dims(), dt));
    ctx.set_output(0, std::move(out));
    return Status::ok();
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, dt, x.dims()));
  switch (dt) {
    case DType::kF32: {
      const float* px = x.data<float>();
      float* po = out->mutable_data<float>();
      const float b = static_cast<float>(bias), l = static_cast<float>(lambd);
      for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i] < -l ? px[i] + b : (px[i] > l ? px[i] - b : 0.0f);
      break;
    }
    FERRY_DISPATCH_INT_CASES({
      const scalar_t* px = x.data<scalar_t>();
      scalar_t* po = out->mutable_data<scalar_t>();
      for (int64_t i = 0; i < x.numel(); ++i) po[i] = static_cast<scalar_t>(f(static_cast<double>(px[i])));
    })
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
  return Status::ok();
}

}  // namespace

void register_activation_ops(OpRegistry& r) {
  struct Simple {
    const char* name;
    int64_t since;
    KernelFn fn;
    std::vector<AttrSpec> attrs;
  };
  const Simple simple[] = {
      {"LeakyRelu", 6, k_leaky_relu, {{"alpha", AttrType::kFloat}}},
      {"Elu", 6, k_elu, {{"alpha", AttrType::kFloat}}},
      {"Selu", 6, k_selu, {{"alpha", AttrType::kFloat}, {"gamma", AttrType::kFloat}}},
      {"Celu", 12, k_celu, {{"alpha", AttrType::kFloat}}},
      {"ThresholdedRelu", 10, k_thresholded_relu, {{"alpha", AttrType::kFloat}}},
      {"Sigmoid", 6, k_sigmoid, {}},
      {"HardSigmoid", 6, k_hard_sigmoid, {{"alpha", AttrType::kFloat}, {"beta", AttrType::kFloat}}},
      {"HardSwish", 14, k_hard_swish, {}},
      {"Softplus", 1, k_softplus, {}},
      {"Softsign", 1, k_softsign, {}},
      {"Mish", 18, k_mish, {}},
  };
  for (const Simple& s : simple)
    r.add(OpSchema{.name = s.name, .since_version = s.since, .attrs = s.attrs, .types = kFloatTypes,
                   .infer = infer_float_unary, .kernel = s.fn});
  r.add(OpSchema{.name = "Relu", .since_version = 6, .infer = infer_relu, .kernel = k_relu});
  r.add(OpSchema{.name = "Gelu", .since_version = 20, .attrs = {{"approximate", AttrType::kString}}, .types = kFloatTypes,
                 .infer = infer_gelu, .kernel = k_gelu});
  r.add(OpSchema{.name = "PRelu", .since_version = 7, .min_inputs = 2, .max_inputs = 2, .infer = infer_prelu,
                 .kernel = k_prelu});
  r.add(OpSchema{.name = "Clip", .since_version = 6, .attrs = {{"min", AttrType::kFloat}, {"max", AttrType::kFloat}},
                 .types = kFloatTypes, .infer = infer_clip, .kernel = k_clip<true>});
  r.add(OpSchema{.name = "Clip", .since_version = 11, .min_inputs = 1, .max_inputs = 3, .infer = infer_clip,
                 .kernel = k_clip<false>});

  struct Soft {
    const char* name;
    KernelFn legacy;
    KernelFn current;
  };
  const Soft soft[] = {
      {"Softmax", k_softmax<SoftKind::kSoftmax, true>, k_softmax<SoftKind::kSoftmax, false>},
      {"LogSoftmax", k_softmax<SoftKind::kLogSoftmax, true>, k_softmax<SoftKind::kLogSoftmax, false>},
      {"Hardmax", k_softmax<SoftKind::kHardmax, true>, k_softmax<SoftKind::kHardmax, false>},
  };
  for (const Soft& s : soft) {
    r.add(OpSchema{.name = s.name, .since_version = 1, .attrs = {{"axis", AttrType::kInt}}, .types = kFloatTypes,
                   .infer = infer_softmax<true>, .kernel = s.legacy});
    r.add(OpSchema{.name = s.name, .since_version = 13, .attrs = {{"axis", AttrType::kInt}}, .types = kFloatTypes,
                   .infer = infer_softmax<false>, .kernel = s.current});
  }
  r.add(OpSchema{.name = "Shrink", .since_version = 9, .attrs = {{"bias", AttrType::kFloat}, {"lambd", AttrType::kFloat}},
                 .infer = infer_same_as_input0, .kernel = k_shrink});
}

}  // namespace ferry
