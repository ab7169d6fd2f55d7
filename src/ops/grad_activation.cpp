// Op family 'grad_activation' (domain com.ferry, see op_families.inc): backward kernels of the
// activations, emitted by the gradient definitions in src/grad/activation_grads.cpp. Each takes
// the incoming gradient dY and one forward value of the same shape and dtype (the forward input X
// or output Y, whichever gives the simpler formula) and returns dX:
//
//   ReluGrad(dY, Y)                 dY * (Y > 0)
//   SigmoidGrad(dY, Y)              dY * Y * (1 - Y)
//   TanhGrad(dY, Y)                 dY * (1 - Y^2)
//   LeakyReluGrad(dY, X; alpha)     dY * (X > 0 ? 1 : alpha)
//   ClipGrad(dY, X, [min], [max])   dY where min <= X <= max, else 0 (PyTorch's clamp)
//   HardSigmoidGrad(dY, X; alpha, beta)   dY * alpha where 0 < alpha X + beta < 1, else 0
//   HardSwishGrad(dY, X)            dY * (X < -3 ? 0 : X <= 3 ? X / 3 + 1/2 : 1)
//   GeluGrad(dY, X; approximate)    dY * Gelu'(X) (erf form, or the tanh approximation's)
//   SoftmaxGrad(dY, Y; axis)        Y * (dY - sum_axis(dY * Y))
//   LogSoftmaxGrad(dY, Y; axis)     dY - exp(Y) * sum_axis(dY)
//
// Softmax's axis is the single-axis form of opset 13; the gradient of the older 2-D-coerced form
// reshapes to 2-D around it. Math in double; f16/bf16 through f32 and rounded back.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;


// ---- shape rules -----------------------------------------------------------------------------

const char* const kPairNames[] = {"dY", "the forward value"};

// dY (input 0) and the forward value (input 1): float, one dtype, one shape; output = dY's type.
// Inputs 2 and 3 (ClipGrad's bounds), when given, are scalars of the same dtype.
Status infer_pointwise_grad(InferContext& ctx) {
  const TensorType& dy = ctx.input_type(0);
  const TensorType& z = ctx.input_type(1);
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const DType t = ctx.input_type(i).dtype;
    if (t != DType::kUndefined && !dtype_is_float(t))
      return ctx.error("input " + std::to_string(i) + " has element type " + dtype_name(t) +
                       "; expected a float type (f16, bf16, f32, f64)");
    if (t != DType::kUndefined && dy.dtype != DType::kUndefined && t != dy.dtype)
      return ctx.error("input " + std::to_string(i) + " has element type " + dtype_name(t) + " but dY is " +
                       dtype_name(dy.dtype) + "; the backward op takes one element type");
  }
  if (dy.shape && z.shape && dy.shape->rank() != z.shape->rank())
    return ctx.error(std::string(kPairNames[0]) + " has shape " + dy.shape->to_string() + " but " + kPairNames[1] +
                     " has shape " + z.shape->to_string() + "; they must be equal");
  if (dy.shape && z.shape)
    for (int64_t d = 0; d < dy.shape->rank(); ++d) {
      const Dim& a = dy.shape->dims[d];
      const Dim& b = z.shape->dims[d];
      if (a.is_known() && b.is_known() && a.value != b.value)
        return ctx.error(std::string(kPairNames[0]) + " has shape " + dy.shape->to_string() + " but " + kPairNames[1] +
                         " has shape " + z.shape->to_string() + "; they must be equal");
    }
  for (int64_t i = 2; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const TensorType& b = ctx.input_type(i);
    if (b.shape && b.shape->is_static() && element_count(b.shape->values()) != 1)
      return ctx.error("input " + std::to_string(i) + " (a bound) must be a scalar, got shape " + b.shape->to_string());
  }
  TensorType out = dy;
  if (!out.shape) out.shape = z.shape;
  ctx.set_output(0, out);
  return Status::ok();
}

Status infer_softmax_grad(InferContext& ctx) {
  RETURN_IF_ERROR(infer_pointwise_grad(ctx));
  const TensorType& y = ctx.input_type(1);
  if (y.shape) {
    int64_t axis = ctx.get_int("axis", -1);
    if (!normalize_axis(&axis, y.shape->rank()))
      return ctx.error("attribute axis " + std::to_string(ctx.get_int("axis", -1)) + " is out of range for rank " +
                       std::to_string(y.shape->rank()));
  }
  return Status::ok();
}

Status gelu_grad_mode(const AttrReader& a, bool* tanh_mode) {
  const std::string mode = a.get_string("approximate", "none");
  if (mode != "none" && mode != "tanh")
    return invalid_model(a.node().describe() + ": attribute approximate is '" + mode + "'; expected 'none' or 'tanh'");
  *tanh_mode = mode == "tanh";
  return Status::ok();
}

Status infer_gelu_grad(InferContext& ctx) {
  bool tanh_mode = false;
  RETURN_IF_ERROR(gelu_grad_mode(ctx, &tanh_mode));
  return infer_pointwise_grad(ctx);
}

// ---- kernels ---------------------------------------------------------------------------------

// Checks dY and Z (inputs 0 and 1) as the shape rule does, for values known only at run time.
Status check_pair(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& z = ctx.input(1);
  if (!dtype_is_float(dy.dtype()))
    return ctx.error(std::string("input 0 (dY) has element type ") + dtype_name(dy.dtype()) +
                     "; expected a float type (f16, bf16, f32, f64)");
  if (z.dtype() != dy.dtype())
    return ctx.error(std::string("input 1 has element type ") + dtype_name(z.dtype()) + " but dY is " +
                     dtype_name(dy.dtype()) + "; the backward op takes one element type");
  if (z.dims() != dy.dims())
    return ctx.error("dY has shape " + dims_to_string(dy.dims()) + " but input 1 has shape " + dims_to_string(z.dims()) +
                     "; they must be equal");
  return Status::ok();
}

// Calls body(const T* dy, const T* z, T* dx) with T = float or double; f16/bf16 are widened to f32
// and the result rounded back.
template <typename Body>
Status pair_io(KernelContext& ctx, Body body) {
  RETURN_IF_ERROR(check_pair(ctx));
  const DType dt = ctx.input(0).dtype();
  const Tensor dy = widen_to_f32(ctx.input(0));
  const Tensor z = widen_to_f32(ctx.input(1));
  Tensor dx;
  if (is_low_float(dt)) {
    dx = Tensor::allocate(DType::kF32, dy.dims());
  } else {
    ASSIGN_OR_RETURN(Tensor * p, ctx.allocate_output(0, dt, dy.dims(), false));
    dx = *p;  // shares storage with the output
  }
  if (dy.dtype() == DType::kF32) body(dy.data<float>(), z.data<float>(), dx.mutable_data<float>());
  else body(dy.data<double>(), z.data<double>(), dx.mutable_data<double>());
  if (is_low_float(dt)) {
    ASSIGN_OR_RETURN(Tensor r, cast_tensor(dx, dt));
    ctx.set_output(0, std::move(r));
  }
  return Status::ok();
}

// dx = f(dy, z) elementwise, f: (double, double) -> double.
template <typename F>
Status map_pair(KernelContext& ctx, F f) {
  const int64_t n = ctx.input(0).numel();
  return pair_io(ctx, [&](const auto* pdy, const auto* pz, auto* pdx) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(pdy)>>;
    for (int64_t i = 0; i < n; ++i) pdx[i] = static_cast<T>(f(static_cast<double>(pdy[i]), static_cast<double>(pz[i])));
  });
}

Status k_relu_grad(KernelContext& ctx) {
  return map_pair(ctx, [](double dy, double y) { return y > 0 ? dy : 0.0; });
}

Status k_sigmoid_grad(KernelContext& ctx) {
  return map_pair(ctx, [](double dy, double y) { return dy * y * (1.0 - y); });
}

Status k_tanh_grad(KernelContext& ctx) {
  return map_pair(ctx, [](double dy, double y) { return dy * (1.0 - y * y); });
}

Status k_leaky_relu_grad(KernelContext& ctx) {
  const double alpha = ctx.get_float("alpha", 0.01f);
  return map_pair(ctx, [alpha](double dy, double x) { return x > 0 ? dy : alpha * dy; });  // PyTorch: slope alpha at 0
}

Status k_clip_grad(KernelContext& ctx) {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  for (int64_t i = 2; i < 4; ++i) {
    if (!ctx.has_input(i)) continue;
    const Tensor& b = ctx.input(i);
    if (b.dtype() != ctx.input(0).dtype())
      return ctx.error(std::string(i == 2 ? "min" : "max") + " has element type " + dtype_name(b.dtype()) + " but dY is " +
                       dtype_name(ctx.input(0).dtype()));
    if (b.numel() != 1)
      return ctx.error(std::string(i == 2 ? "min" : "max") + " must be a scalar, got shape " + dims_to_string(b.dims()));
    (i == 2 ? lo : hi) = b.get_double(0);
  }
  // NaN fails both comparisons: no gradient, as no bound is known to hold.
  return map_pair(ctx, [lo, hi](double dy, double x) { return x >= lo && x <= hi ? dy : 0.0; });
}

Status k_hard_sigmoid_grad(KernelContext& ctx) {
  const double alpha = ctx.get_float("alpha", 0.2f);
  const double beta = ctx.get_float("beta", 0.5f);
  return map_pair(ctx, [alpha, beta](double dy, double x) {
    const double v = alpha * x + beta;
    return v > 0 && v < 1 ? alpha * dy : 0.0;
  });
}

Status k_hard_swish_grad(KernelContext& ctx) {
  return map_pair(ctx, [](double dy, double x) {
    if (x < -3) return 0.0;
    if (x <= 3) return dy * (x / 3.0 + 0.5);
    return dy;
  });
}

Status k_gelu_grad(KernelContext& ctx) {
  bool tanh_mode = false;
  RETURN_IF_ERROR(gelu_grad_mode(ctx, &tanh_mode));
  constexpr double kPi = 3.14159265358979323846;
  if (tanh_mode) {
    const double k = std::sqrt(2.0 / kPi);
    return map_pair(ctx, [k](double dy, double x) {
      const double t = std::tanh(k * (x + 0.044715 * x * x * x));
      return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x));
    });
  }
  const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * kPi);
  return map_pair(ctx, [inv_sqrt_2pi](double dy, double x) {
    return dy * (0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) * inv_sqrt_2pi);
  });
}

// Softmax (kLog false) or LogSoftmax (kLog true) backward along one axis.
template <bool kLog>
Status k_softmax_grad(KernelContext& ctx) {
  RETURN_IF_ERROR(check_pair(ctx));
  const Tensor& y0 = ctx.input(1);
  const int64_t axis_attr = ctx.get_int("axis", -1);
  int64_t axis = axis_attr;
  if (!normalize_axis(&axis, y0.rank()))
    return ctx.error("attribute axis " + std::to_string(axis_attr) + " is out of range for rank " +
                     std::to_string(y0.rank()));
  int64_t outer = 1, inner = 1;
  const int64_t n = y0.dim(axis);
  for (int64_t i = 0; i < axis; ++i) outer *= y0.dim(i);
  for (int64_t i = axis + 1; i < y0.rank(); ++i) inner *= y0.dim(i);
  return pair_io(ctx, [&](const auto* pdy, const auto* py, auto* pdx) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(pdy)>>;
    vector<double> sum(static_cast<size_t>(inner));
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t base = o * n * inner;
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t e = base + k * inner + i;
          sum[i] += kLog ? static_cast<double>(pdy[e]) : static_cast<double>(pdy[e]) * py[e];
        }
      for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t e = base + k * inner + i;
          const double dy = pdy[e], y = py[e];
          pdx[e] = static_cast<T>(kLog ? dy - std::exp(y) * sum[i] : y * (dy - sum[i]));
        }
    }
  });
}

}  // namespace

void register_grad_activation_ops(OpRegistry& r) {
  struct Pointwise {
    const char* name;
    KernelFn fn;
    std::vector<AttrSpec> attrs;
    InferFn infer;
  };
  const Pointwise ops[] = {
      {"ReluGrad", k_relu_grad, {}, infer_pointwise_grad},
      {"SigmoidGrad", k_sigmoid_grad, {}, infer_pointwise_grad},
      {"TanhGrad", k_tanh_grad, {}, infer_pointwise_grad},
      {"LeakyReluGrad", k_leaky_relu_grad, {{"alpha", AttrType::kFloat}}, infer_pointwise_grad},
      {"HardSigmoidGrad", k_hard_sigmoid_grad, {{"alpha", AttrType::kFloat}, {"beta", AttrType::kFloat}},
       infer_pointwise_grad},
      {"HardSwishGrad", k_hard_swish_grad, {}, infer_pointwise_grad},
      {"GeluGrad", k_gelu_grad, {{"approximate", AttrType::kString}}, infer_gelu_grad},
      {"SoftmaxGrad", k_softmax_grad<false>, {{"axis", AttrType::kInt}}, infer_softmax_grad},
      {"LogSoftmaxGrad", k_softmax_grad<true>, {{"axis", AttrType::kInt}}, infer_softmax_grad},
  };
  for (const Pointwise& p : ops)
    r.add(OpSchema{.name = p.name, .domain = "com.ferry", .since_version = 1, .min_inputs = 2, .max_inputs = 2,
                   .attrs = p.attrs, .types = kFloatTypes, .infer = p.infer, .kernel = p.fn});
  r.add(OpSchema{.name = "ClipGrad", .domain = "com.ferry", .since_version = 1, .min_inputs = 2, .max_inputs = 4,
                 .types = kFloatTypes, .infer = infer_pointwise_grad, .kernel = k_clip_grad});
}

}  // namespace ferry
