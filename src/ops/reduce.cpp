// Op family 'reduce' (see op_families.inc): ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/
// SumSquare (axes as an attribute in older opsets, as an optional input from opset 13 for ReduceSum
// and 18 for the rest), and ArgMax/ArgMin.
//
// Reductions over an empty set follow the ONNX spec and its reference implementation: sum-like
// ops give 0, ReduceProd 1, ReduceMax -inf (integers: the type's minimum), ReduceMin +inf (the
// maximum), ReduceLogSum/ReduceLogSumExp -inf, ReduceMean NaN (0 for integers).
// Float accumulation is in double; integer sums/products wrap in 64 bits.
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

enum class RedOp { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

bool is_minmax(RedOp op) { return op == RedOp::kMax || op == RedOp::kMin; }

// Which axes are reduced, resolved against a concrete or inferred rank.
struct AxesSpec {
  bool known = true;          // false: axes is a runtime input whose value is unknown
  vector<int64_t> axes;       // as given (may be negative); empty = "no axes given"
};

// Validates `axes` for `rank` and returns a mask of reduced axes. Empty axes reduce every axis.
Status axes_mask(const vector<int64_t>& axes, int64_t rank, const std::string& who, vector<bool>* mask) {
  mask->assign(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    int64_t n = a;
    if (!normalize_axis(&n, rank))
      return invalid_model(who + ": axis " + std::to_string(a) + " is out of range for an input of rank " +
                           std::to_string(rank));
    if ((*mask)[n])
      return invalid_model(who + ": axis " + std::to_string(a) + " is given more than once in axes");
    (*mask)[n] = true;
  }
  return Status::ok();
}

bool reduce_type_ok(RedOp op, DType t) {
  if (dtype_is_float(t) || dtype_is_integer(t)) return true;
  return t == DType::kBool && is_minmax(op);
}

std::string reduce_type_error(DType t) {
  return std::string("input data has element type ") + dtype_name(t) +
         "; expected a numeric type (bool only for ReduceMax/ReduceMin)";
}

// ---- shape rule -----------------------------------------------------------------------------

template <RedOp kOp, bool kAxesInput>
Status infer_reduce(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  if (x.dtype != DType::kUndefined && !reduce_type_ok(kOp, x.dtype)) return ctx.error(reduce_type_error(x.dtype));
  const bool keepdims = ctx.get_int("keepdims", 1) != 0;
  const bool noop = kAxesInput && ctx.get_int("noop_with_empty_axes", 0) != 0;
  AxesSpec spec;
  if (kAxesInput) {
    if (ctx.has("axes"))
      return ctx.error("axes is an input, not an attribute, at opset " + std::to_string(ctx.opset()));
    if (ctx.has_input(1)) {
      const TensorType& at = ctx.input_type(1);
      if (at.dtype != DType::kUndefined && at.dtype != DType::kI64)
        return ctx.error(std::string("input axes must be int64, got ") + dtype_name(at.dtype));
      if (at.shape && at.shape->rank() > 1) return ctx.error("input axes must be 1-D, got shape " + at.shape->to_string());
      if (const Tensor* v = ctx.input_value(1)) {
        spec.axes = v->to_int64_vector();
      } else if (at.shape && at.shape->rank() == 1 && at.shape->dims[0].is_known() && at.shape->dims[0].value == 0) {
        spec.axes.clear();
      } else {
        spec.known = false;
      }
    }
  } else {
    spec.axes = ctx.get_ints("axes");
  }
  if (!spec.known) {
    // Unknown axes: keepdims keeps the rank (dims that are 1 stay 1); otherwise the rank is unknown.
    std::optional<Shape> out;
    if (keepdims && x.shape) {
      Shape s = *x.shape;
      for (Dim& d : s.dims)
        if (!(d.is_known() && d.value == 1)) d = Dim();
      out = s;
    }
    ctx.set_output(0, TensorType{x.dtype, out});
    return Status::ok();
  }
  if (spec.axes.empty() && noop) {
    ctx.set_output(0, x);
    return Status::ok();
  }
  if (!x.shape) {
    ctx.set_output(0, TensorType{x.dtype, std::nullopt});
    return Status::ok();
  }
  vector<bool> mask;
  RETURN_IF_ERROR(axes_mask(spec.axes, x.shape->rank(), ctx.node().describe(), &mask));
  Shape out;
  for (int64_t i = 0; i < x.shape->rank(); ++i) {
    if (!mask[i]) out.dims.push_back(x.shape->dims[i]);
    else if (keepdims) out.dims.push_back(Dim(1));
  }
  ctx.set_output(0, TensorType{x.dtype, out});
  return Status::ok();
}

// ---- kernel ---------------------------------------------------------------------------------

// How the input maps onto the output: either one contiguous block of reduced axes
// (x viewed as [outer, red, inner], output [outer, inner]) or a general strided walk.
struct Plan {
  vector<int64_t> in_dims;
  vector<int64_t> out_dims;       // with keepdims applied
  vector<int64_t> acc_strides;    // output strides per input axis, 0 on reduced axes
  int64_t out_numel = 1;
  int64_t count = 1;              // input elements per output element
  bool contiguous = false;
  int64_t outer = 1, red = 1, inner = 1;
};

Plan make_plan(const vector<int64_t>& dims, const vector<bool>& mask, bool keepdims) {
  Plan p;
  p.in_dims = dims;
  const int64_t r = static_cast<int64_t>(dims.size());
  vector<int64_t> kept;  // output dims with keepdims=1
  for (int64_t i = 0; i < r; ++i) {
    kept.push_back(mask[i] ? 1 : dims[i]);
    if (mask[i]) p.count *= dims[i];
    if (!mask[i] || keepdims) p.out_dims.push_back(mask[i] ? 1 : dims[i]);
  }
  p.out_numel = element_count(kept);
  vector<int64_t> ks = strides_of(kept);
  p.acc_strides.resize(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) p.acc_strides[i] = mask[i] ? 0 : ks[i];
  int64_t first = -1, last = -1;
  for (int64_t i = 0; i < r; ++i)
    if (mask[i]) {
      if (first < 0) first = i;
      last = i;
    }
  p.contiguous = true;
  for (int64_t i = first; first >= 0 && i <= last; ++i) p.contiguous = p.contiguous && mask[i];
  if (p.contiguous) {
    if (first < 0) first = last = r;  // nothing reduced
    for (int64_t i = 0; i < r; ++i) {
      if (i < first) p.outer *= dims[i];
      else if (i > last) p.inner *= dims[i];
      else p.red *= dims[i];
    }
  }
  return p;
}

// acc[j] = step(acc[j], x, j) for every input element x, j its output index.
template <typename T, typename A, typename Step>
void accumulate(const Plan& p, const T* px, A* acc, Step step) {
  if (p.contiguous) {
    for (int64_t o = 0; o < p.outer; ++o)
      for (int64_t k = 0; k < p.red; ++k) {
        const T* xr = px + (o * p.red + k) * p.inner;
        A* ar = acc + o * p.inner;
        for (int64_t i = 0; i < p.inner; ++i) ar[i] = step(ar[i], xr[i], o * p.inner + i);
      }
    return;
  }
  for (BroadcastIter it(p.in_dims, {p.acc_strides}); !it.done(); it.next()) {
    const int64_t j = it.offset(0);
    acc[j] = step(acc[j], px[it.index()], j);
  }
}

template <typename T>
T to_int_safe(double v) {
  if (!std::isfinite(v)) return T(0);
  if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

template <typename T>
T from_double(double v) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v);
  else return to_int_safe<T>(v);
}

// Reduces into y (already allocated with p.out_numel elements). T is float, double, an integer or bool.
template <RedOp kOp, typename T>
void reduce_typed(const Plan& p, const T* px, T* py) {
  const int64_t m = p.out_numel;
  constexpr bool kFloat = std::is_floating_point_v<T>;
  if constexpr (kOp == RedOp::kMax || kOp == RedOp::kMin) {
    constexpr bool kMax = kOp == RedOp::kMax;
    T init;
    if constexpr (kFloat) init = kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    else init = kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    std::unique_ptr<T[]> acc(new T[static_cast<size_t>(m > 0 ? m : 1)]);
    for (int64_t j = 0; j < m; ++j) acc[j] = init;
    accumulate(p, px, acc.get(), [](T a, T v, int64_t) -> T {
      if constexpr (kFloat) {
        if (std::isnan(a)) return a;
        if (std::isnan(v)) return v;
      }
      return (kMax ? v > a : v < a) ? v : a;
    });
    for (int64_t j = 0; j < m; ++j) py[j] = acc[j];
  } else if constexpr (std::is_same_v<T, bool>) {
    // bool is only accepted by Max/Min (checked by the caller).
  } else if constexpr (!kFloat && (kOp == RedOp::kSum || kOp == RedOp::kProd || kOp == RedOp::kL1 ||
                                   kOp == RedOp::kSumSquare)) {
    // Exact integer arithmetic, wrapping modulo 2^64 like the element type would.
    vector<uint64_t> acc(static_cast<size_t>(m), kOp == RedOp::kProd ? 1u : 0u);
    accumulate(p, px, acc.data(), [](uint64_t a, T v, int64_t) -> uint64_t {
      const uint64_t u = static_cast<uint64_t>(static_cast<int64_t>(v));
      if constexpr (std::is_signed_v<T>) {
        if (kOp == RedOp::kL1) return a + (v < 0 ? uint64_t(0) - u : u);
      }
      if constexpr (std::is_unsigned_v<T>) {
        const uint64_t w = static_cast<uint64_t>(v);
        if (kOp == RedOp::kProd) return a * w;
        if (kOp == RedOp::kSumSquare) return a + w * w;
        return a + w;
      }
      if (kOp == RedOp::kProd) return a * u;
      if (kOp == RedOp::kSumSquare) return a + u * u;
      return a + u;
    });
    for (int64_t j = 0; j < m; ++j) py[j] = static_cast<T>(acc[j]);
  } else if constexpr (kOp == RedOp::kLogSumExp) {
    const double kInf = std::numeric_limits<double>::infinity();
    vector<double> mx(static_cast<size_t>(m), -kInf), acc(static_cast<size_t>(m), 0.0);
    accumulate(p, px, mx.data(), [](double a, T v, int64_t) -> double {
      const double d = static_cast<double>(v);
      if (std::isnan(a) || std::isnan(d)) return std::nan("");
      return d > a ? d : a;
    });
    accumulate(p, px, acc.data(), [&mx](double a, T v, int64_t j) -> double {
      if (std::isinf(mx[j])) return a;
      return a + std::exp(static_cast<double>(v) - mx[j]);
    });
    // All -inf (or empty) gives -inf; a +inf element gives +inf; NaN propagates through mx.
    for (int64_t j = 0; j < m; ++j) py[j] = from_double<T>(std::isinf(mx[j]) ? mx[j] : mx[j] + std::log(acc[j]));
  } else {
    // Double accumulation: sums of floats, and the integer ops whose result is not an integer.
    const double init = kOp == RedOp::kProd ? 1.0 : 0.0;
    vector<double> acc(static_cast<size_t>(m), init);
    accumulate(p, px, acc.data(), [](double a, T v, int64_t) -> double {
      const double d = static_cast<double>(v);
      switch (kOp) {
        case RedOp::kProd: return a * d;
        case RedOp::kL1: return a + std::fabs(d);
        case RedOp::kL2:
        case RedOp::kSumSquare: return a + d * d;
        default: return a + d;  // Sum, Mean, LogSum
      }
    });
    const double n = static_cast<double>(p.count);
    for (int64_t j = 0; j < m; ++j) {
      double v = acc[j];
      if (kOp == RedOp::kMean) v = (p.count == 0 && !kFloat) ? 0.0 : v / n;
      else if (kOp == RedOp::kL2) v = std::sqrt(v);
      else if (kOp == RedOp::kLogSum) v = std::log(v);
      py[j] = from_double<T>(v);
    }
  }
}

Status read_axes(KernelContext& ctx, bool axes_input, vector<int64_t>* axes) {
  if (!axes_input) {
    *axes = ctx.get_ints("axes");
    return Status::ok();
  }
  axes->clear();
  if (!ctx.has_input(1)) return Status::ok();
  const Tensor& a = ctx.input(1);
  if (a.dtype() != DType::kI64) return ctx.error(std::string("input axes must be int64, got ") + dtype_name(a.dtype()));
  if (a.rank() > 1) return ctx.error("input axes must be 1-D, got shape " + dims_to_string(a.dims()));
  *axes = a.to_int64_vector();
  return Status::ok();
}

template <RedOp kOp, bool kAxesInput>
Status k_reduce(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  const DType dt = x0.dtype();
  if (!reduce_type_ok(kOp, dt)) return ctx.error(reduce_type_error(dt));
  vector<int64_t> axes;
  RETURN_IF_ERROR(read_axes(ctx, kAxesInput, &axes));
  const bool keepdims = ctx.get_int("keepdims", 1) != 0;
  if (axes.empty() && kAxesInput && ctx.get_int("noop_with_empty_axes", 0) != 0) {
    ctx.set_output(0, x0.clone());
    return Status::ok();
  }
  vector<bool> mask;
  {
    Status s = axes_mask(axes, x0.rank(), ctx.node().describe(), &mask);
    if (!s.is_ok()) return invalid_argument(s.message());
  }
  const Plan p = make_plan(x0.dims(), mask, keepdims);
  const bool low = is_low_float(dt);
  Tensor x = widen_to_f32(x0);
  Tensor y;
  if (low) {
    y = Tensor::allocate(DType::kF32, p.out_dims);
  } else {
    ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, dt, p.out_dims));
    y = *out;
  }
  switch (x.dtype()) {
    FERRY_DISPATCH_FLOAT_CASES(reduce_typed<kOp>(p, x.data<scalar_t>(), y.mutable_data<scalar_t>()))
    FERRY_DISPATCH_INT_CASES(reduce_typed<kOp>(p, x.data<scalar_t>(), y.mutable_data<scalar_t>()))
    FERRY_DISPATCH_CASE(kBool, bool, reduce_typed<kOp>(p, x.data<scalar_t>(), y.mutable_data<scalar_t>()))
    default: return ctx.error(reduce_type_error(dt));
  }
  if (low) {
    ASSIGN_OR_RETURN(Tensor r, cast_tensor(y, dt));
    ctx.set_output(0, std::move(r));
  }
  return Status::ok();
}

// ---- ArgMax / ArgMin ------------------------------------------------------------------------

Status infer_arg(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  if (x.dtype != DType::kUndefined && !dtype_is_float(x.dtype) && !dtype_is_integer(x.dtype) && x.dtype != DType::kBool)
    return ctx.error(std::string("input data has element type ") + dtype_name(x.dtype) + "; expected a numeric type");
  if (!x.shape) {
    ctx.set_output(0, TensorType{DType::kI64, std::nullopt});
    return Status::ok();
  }
  int64_t axis = ctx.get_int("axis", 0);
  if (!normalize_axis(&axis, x.shape->rank()))
    return ctx.error("attribute axis " + std::to_string(ctx.get_int("axis", 0)) +
                     " is out of range for an input of rank " + std::to_string(x.shape->rank()));
  const Dim& d = x.shape->dims[axis];
  if (d.is_known() && d.value == 0) return ctx.error("cannot take " + ctx.node().op_type + " over axis " +
                                                     std::to_string(axis) + " of size 0");
  Shape out;
  for (int64_t i = 0; i < x.shape->rank(); ++i) {
    if (i != axis) out.dims.push_back(x.shape->dims[i]);
    else if (ctx.get_int("keepdims", 1) != 0) out.dims.push_back(Dim(1));
  }
  ctx.set_output(0, TensorType{DType::kI64, out});
  return Status::ok();
}

template <bool kMax>
Status k_arg(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  const DType dt = x0.dtype();
  if (!dtype_is_float(dt) && !dtype_is_integer(dt) && dt != DType::kBool)
    return ctx.error(std::string("input data has element type ") + dtype_name(dt) + "; expected a numeric type");
  const int64_t axis_attr = ctx.get_int("axis", 0);
  int64_t axis = axis_attr;
  if (!normalize_axis(&axis, x0.rank()))
    return ctx.error("attribute axis " + std::to_string(axis_attr) + " is out of range for an input of rank " +
                     std::to_string(x0.rank()));
  const bool keepdims = ctx.get_int("keepdims", 1) != 0;
  const bool last = ctx.get_int("select_last_index", 0) != 0;
  const int64_t n = x0.dim(axis);
  if (n == 0)
    return ctx.error("cannot take " + ctx.node().op_type + " over axis " + std::to_string(axis) + " of size 0");
  int64_t outer = 1, inner = 1;
  vector<int64_t> out_dims;
  for (int64_t i = 0; i < x0.rank(); ++i) {
    if (i < axis) outer *= x0.dim(i);
    if (i > axis) inner *= x0.dim(i);
    if (i != axis) out_dims.push_back(x0.dim(i));
    else if (keepdims) out_dims.push_back(1);
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kI64, out_dims));
  int64_t* py = y->mutable_data<int64_t>();
  Tensor x = widen_to_f32(x0);
  auto run = [&](const auto* px) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(px)>>;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T* xr = px + o * n * inner + i;
        int64_t best = 0;
        for (int64_t k = 1; k < n; ++k) {
          const T b = xr[best * inner];
          const T v = xr[k * inner];
          bool take;
          if constexpr (std::is_floating_point_v<T>) {
            // NaN wins (numpy's argmax/argmin return the first NaN; select_last_index the last).
            if (std::isnan(b)) take = last && std::isnan(v);
            else if (std::isnan(v)) take = true;
            else take = (kMax ? v > b : v < b) || (last && v == b);
          } else {
            take = (kMax ? v > b : v < b) || (last && v == b);
          }
          if (take) best = k;
        }
        py[o * inner + i] = best;
      }
  };
  switch (x.dtype()) {
    FERRY_DISPATCH_FLOAT_CASES(run(x.data<scalar_t>()))
    FERRY_DISPATCH_INT_CASES(run(x.data<scalar_t>()))
    FERRY_DISPATCH_CASE(kBool, bool, run(x.data<scalar_t>()))
    default: return ctx.error(std::string("input data has element type ") + dtype_name(dt) + "; expected a numeric type");
  }
  return Status::ok();
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  struct Red {
    const char* name;
    int64_t input_since;  // first opset with axes as an input
    KernelFn attr_kernel;
    InferFn attr_infer;
    KernelFn input_kernel;
    InferFn input_infer;
  };
#define FERRY_RED(NAME, OP, SINCE) \
  Red { NAME, SINCE, k_reduce<OP, false>, infer_reduce<OP, false>, k_reduce<OP, true>, infer_reduce<OP, true> }
  const Red reds[] = {
      FERRY_RED("ReduceSum", RedOp::kSum, 13),        FERRY_RED("ReduceMean", RedOp::kMean, 18),
      FERRY_RED("ReduceMax", RedOp::kMax, 18),        FERRY_RED("ReduceMin", RedOp::kMin, 18),
      FERRY_RED("ReduceProd", RedOp::kProd, 18),      FERRY_RED("ReduceL1", RedOp::kL1, 18),
      FERRY_RED("ReduceL2", RedOp::kL2, 18),          FERRY_RED("ReduceLogSum", RedOp::kLogSum, 18),
      FERRY_RED("ReduceLogSumExp", RedOp::kLogSumExp, 18), FERRY_RED("ReduceSumSquare", RedOp::kSumSquare, 18),
  };
#undef FERRY_RED
  for (const Red& d : reds) {
    r.add(OpSchema{.name = d.name, .since_version = 1,
                   .attrs = {{"axes", AttrType::kInts}, {"keepdims", AttrType::kInt}},
                   .infer = d.attr_infer, .kernel = d.attr_kernel});
    r.add(OpSchema{.name = d.name, .since_version = d.input_since, .min_inputs = 1, .max_inputs = 2,
                   .attrs = {{"keepdims", AttrType::kInt}, {"noop_with_empty_axes", AttrType::kInt}},
                   .infer = d.input_infer, .kernel = d.input_kernel});
  }
  const std::vector<AttrSpec> arg_attrs = {
      {"axis", AttrType::kInt}, {"keepdims", AttrType::kInt}, {"select_last_index", AttrType::kInt}};
  r.add(OpSchema{.name = "ArgMax", .since_version = 1, .attrs = arg_attrs, .infer = infer_arg, .kernel = k_arg<true>});
  r.add(OpSchema{.name = "ArgMin", .since_version = 1, .attrs = arg_attrs, .infer = infer_arg, .kernel = k_arg<false>});
}

}  // namespace ferry
