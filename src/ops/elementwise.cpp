// Elementwise math and logic: unary math, broadcasting binary arithmetic and comparisons,
// variadic Sum/Mean/Max/Min, Where, BitShift. f16/bf16 are computed in f32 and rounded back.
#include <cmath>
#include <cstring>

#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

// ---- unary ----------------------------------------------------------------------------------

template <typename F>
Status unary_float(KernelContext& ctx, F f) {
  const Tensor& x = ctx.input(0);
  const DType dt = x.dtype();
  if (is_low_float(dt)) {
    Tensor xf = widen_to_f32(x);
    Tensor yf = Tensor::allocate(DType::kF32, x.dims());
    for (int64_t i = 0; i < x.numel(); ++i) yf.mutable_data<float>()[i] = f(xf.data<float>()[i]);
    ASSIGN_OR_RETURN(Tensor y, cast_tensor(yf, dt));
    ctx.set_output(0, y);
    return Status::ok();
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dt, x.dims()));
  switch (dt) {
    FERRY_DISPATCH_FLOAT_CASES({
      const scalar_t* px = x.data<scalar_t>();
      scalar_t* py = y->mutable_data<scalar_t>();
      for (int64_t i = 0; i < x.numel(); ++i) py[i] = static_cast<scalar_t>(f(px[i]));
    })
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported (float types only)");
  }
  return Status::ok();
}

// Unary ops defined for every numeric type (Abs, Neg, Sign).
template <typename F>
Status unary_numeric(KernelContext& ctx, F f) {
  const Tensor& x = ctx.input(0);
  if (is_low_float(x.dtype())) return unary_float(ctx, f);
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  FERRY_DISPATCH_NUMERIC(x.dtype(), ctx, {
    const scalar_t* px = x.data<scalar_t>();
    scalar_t* py = y->mutable_data<scalar_t>();
    for (int64_t i = 0; i < x.numel(); ++i) py[i] = static_cast<scalar_t>(f(px[i]));
  })
  return Status::ok();
}

#define FLOAT_UNARY(NAME, EXPR)                                           \
  Status k_##NAME(KernelContext& ctx) {                                   \
    return unary_float(ctx, [](auto v) -> decltype(v) { return (EXPR); }); \
  }
FLOAT_UNARY(sqrt, std::sqrt(v))
FLOAT_UNARY(exp, std::exp(v))
FLOAT_UNARY(log, std::log(v))
FLOAT_UNARY(erf, std::erf(v))
FLOAT_UNARY(reciprocal, 1 / v)
FLOAT_UNARY(floor, std::floor(v))
FLOAT_UNARY(ceil, std::ceil(v))
FLOAT_UNARY(round, std::nearbyint(v))  // round half to even, as ONNX specifies
FLOAT_UNARY(sin, std::sin(v))
FLOAT_UNARY(cos, std::cos(v))
FLOAT_UNARY(tan, std::tan(v))
FLOAT_UNARY(asin, std::asin(v))
FLOAT_UNARY(acos, std::acos(v))
FLOAT_UNARY(atan, std::atan(v))
FLOAT_UNARY(sinh, std::sinh(v))
FLOAT_UNARY(cosh, std::cosh(v))
FLOAT_UNARY(asinh, std::asinh(v))
FLOAT_UNARY(acosh, std::acosh(v))
FLOAT_UNARY(atanh, std::atanh(v))
FLOAT_UNARY(tanh, std::tanh(v))
#undef FLOAT_UNARY

Status k_abs(KernelContext& ctx) {
  return unary_numeric(ctx, [](auto v) -> decltype(v) {
    if constexpr (std::is_unsigned_v<decltype(v)>) return v;
    else return v < 0 ? static_cast<decltype(v)>(-v) : v;
  });
}
Status k_neg(KernelContext& ctx) {
  return unary_numeric(ctx, [](auto v) -> decltype(v) { return static_cast<decltype(v)>(-v); });
}
Status k_sign(KernelContext& ctx) {
  return unary_numeric(ctx, [](auto v) -> decltype(v) {
    return static_cast<decltype(v)>(v > 0 ? 1 : (v < 0 ? -1 : 0));
  });
}

Status k_not(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::kBool) return ctx.error("Not expects a bool input");
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kBool, x.dims()));
  for (int64_t i = 0; i < x.numel(); ++i) y->mutable_data<bool>()[i] = !x.data<bool>()[i];
  return Status::ok();
}

template <bool kIsNan>
Status k_isnan_isinf(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor xf = widen_to_f32(x);
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kBool, x.dims()));
  const bool pos = ctx.get_int("detect_positive", 1) != 0;
  const bool neg = ctx.get_int("detect_negative", 1) != 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = xf.get_double(i);
    bool r = kIsNan ? std::isnan(v) : (std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg)));
    y->mutable_data<bool>()[i] = r;
  }
  return Status::ok();
}

Status infer_bool_same_shape(InferContext& ctx) {
  ctx.set_output(0, TensorType{DType::kBool, ctx.input_type(0).shape});
  return Status::ok();
}

// ---- binary ---------------------------------------------------------------------------------

// Applies f over the broadcast of inputs a and b, writing elements of type O.
template <typename T, typename O, typename F>
void binary_loop(const Tensor& a, const Tensor& b, Tensor* out, F f) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  O* po = out->mutable_data<O>();
  const int64_t n = out->numel();
  if (a.dims() == b.dims()) {
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<O>(f(pa[i], pb[i]));
    return;
  }
  if (b.numel() == 1) {
    const T bv = pb[0];
    if (a.numel() == n) {
      for (int64_t i = 0; i < n; ++i) po[i] = static_cast<O>(f(pa[i], bv));
      return;
    }
  }
  std::vector<std::vector<int64_t>> strides = {broadcast_strides(a.dims(), out->dims()),
                                               broadcast_strides(b.dims(), out->dims())};
  for (BroadcastIter it(out->dims(), std::move(strides)); !it.done(); it.next())
    po[it.index()] = static_cast<O>(f(pa[it.offset(0)], pb[it.offset(1)]));
}

enum class BinOp { kAdd, kSub, kMul, kDiv, kPow, kMod, kFMod, kMax, kMin, kEq, kLt, kLe, kGt, kGe, kAnd, kOr, kXor };

bool is_compare(BinOp op) {
  return op == BinOp::kEq || op == BinOp::kLt || op == BinOp::kLe || op == BinOp::kGt || op == BinOp::kGe;
}

template <typename T>
Status binary_typed(KernelContext& ctx, BinOp op, const Tensor& a, const Tensor& b, Tensor* out) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case BinOp::kEq: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x == y; }); break;
      case BinOp::kAnd: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x && y; }); break;
      case BinOp::kOr: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x || y; }); break;
      case BinOp::kXor: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x != y; }); break;
      default: return ctx.error("bool inputs are only supported by And/Or/Xor/Equal");
    }
    return Status::ok();
  } else {
  switch (op) {
    case BinOp::kAdd: binary_loop<T, T>(a, b, out, [](T x, T y) { return x + y; }); break;
    case BinOp::kSub: binary_loop<T, T>(a, b, out, [](T x, T y) { return x - y; }); break;
    case BinOp::kMul: binary_loop<T, T>(a, b, out, [](T x, T y) { return x * y; }); break;
    case BinOp::kDiv:
      if constexpr (std::is_integral_v<T>) {
        const T* pb = b.data<T>();
        for (int64_t i = 0; i < b.numel(); ++i)
          if (pb[i] == 0) return ctx.error("integer division by zero (input B has a zero element)");
      }
      binary_loop<T, T>(a, b, out, [](T x, T y) { return x / y; });
      break;
    case BinOp::kPow:
      binary_loop<T, T>(a, b, out, [](T x, T y) {
        if constexpr (std::is_integral_v<T>) {
          // Integer power by repeated multiplication; negative exponents give 0 (or 1 for base 1).
          if (y < 0) return static_cast<T>(x == 1 ? 1 : 0);
          T r = 1;
          for (T k = 0; k < y; ++k) r = static_cast<T>(r * x);
          return r;
        } else {
          return static_cast<T>(std::pow(x, y));
        }
      });
      break;
    case BinOp::kMod:
    case BinOp::kFMod: {
      if constexpr (std::is_integral_v<T>) {
        const T* pb = b.data<T>();
        for (int64_t i = 0; i < b.numel(); ++i)
          if (pb[i] == 0) return ctx.error("Mod by zero (input B has a zero element)");
      }
      const bool fmod = op == BinOp::kFMod;
      binary_loop<T, T>(a, b, out, [fmod](T x, T y) {
        if constexpr (std::is_integral_v<T>) {
          T r = static_cast<T>(x % y);
          if (!fmod && r != 0 && ((r < 0) != (y < 0))) r = static_cast<T>(r + y);  // sign of divisor
          return r;
        } else {
          T r = std::fmod(x, y);
          if (!fmod && r != 0 && ((r < 0) != (y < 0))) r += y;
          return r;
        }
      });
      break;
    }
    case BinOp::kMax:
      binary_loop<T, T>(a, b, out, [](T x, T y) {
        if constexpr (std::is_floating_point_v<T>) if (std::isnan(x) || std::isnan(y)) return x + y;
        return x > y ? x : y;
      });
      break;
    case BinOp::kMin:
      binary_loop<T, T>(a, b, out, [](T x, T y) {
        if constexpr (std::is_floating_point_v<T>) if (std::isnan(x) || std::isnan(y)) return x + y;
        return x < y ? x : y;
      });
      break;
    case BinOp::kEq: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x == y; }); break;
    case BinOp::kLt: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x < y; }); break;
    case BinOp::kLe: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x <= y; }); break;
    case BinOp::kGt: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x > y; }); break;
    case BinOp::kGe: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x >= y; }); break;
    case BinOp::kAnd: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x && y; }); break;
    case BinOp::kOr: binary_loop<T, bool>(a, b, out, [](T x, T y) { return x || y; }); break;
    case BinOp::kXor: binary_loop<T, bool>(a, b, out, [](T x, T y) { return (x != 0) != (y != 0); }); break;
  }
  return Status::ok();
  }
}

// Computes op(a, b) into a new tensor. Handles f16/bf16 via f32, and Pow's mixed exponent type.
StatusOr<Tensor> binary_apply(KernelContext& ctx, BinOp op, const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  if (op == BinOp::kPow && a.dtype() != b.dtype()) {
    ASSIGN_OR_RETURN(b, cast_tensor(b, a.dtype()));
  }
  if (a.dtype() != b.dtype())
    return ctx.error(std::string("inputs have different element types: ") + dtype_name(a.dtype()) + " and " +
                     dtype_name(b.dtype()));
  std::vector<int64_t> dims;
  if (!broadcast_dims(a.dims(), b.dims(), &dims))
    return ctx.error("input shapes " + dims_to_string(a.dims()) + " and " + dims_to_string(b.dims()) +
                     " cannot be broadcast together");
  const DType dt = a.dtype();
  const bool low = is_low_float(dt);
  if (low) {
    a = widen_to_f32(a);
    b = widen_to_f32(b);
  }
  const bool logical = op == BinOp::kAnd || op == BinOp::kOr || op == BinOp::kXor;
  const DType compute = a.dtype();
  const DType out_dt = (is_compare(op) || logical) ? DType::kBool : compute;
  ASSIGN_OR_RETURN(Tensor out, Tensor::create(out_dt, dims, ctx.node().describe() + " output"));
  if (compute == DType::kBool) {
    if (!logical && op != BinOp::kEq) return ctx.error("bool inputs are only supported by And/Or/Xor/Equal");
    RETURN_IF_ERROR(binary_typed<bool>(ctx, op, a, b, &out));
  } else {
    if (logical) return ctx.error("And/Or/Xor expect bool inputs");
    FERRY_DISPATCH_NUMERIC(compute, ctx, RETURN_IF_ERROR(binary_typed<scalar_t>(ctx, op, a, b, &out)))
  }
  if (low && out_dt != DType::kBool) return cast_tensor(out, dt);
  return out;
}

template <BinOp kOp>
Status k_binary(KernelContext& ctx) {
  BinOp op = kOp;
  if (op == BinOp::kMod && ctx.get_int("fmod", 0) != 0) op = BinOp::kFMod;
  if (op == BinOp::kMod && ctx.get_int("fmod", 0) == 0 && dtype_is_float(ctx.input(0).dtype()))
    return ctx.error("Mod with fmod=0 is only defined for integer inputs; set fmod=1 for floats");
  ASSIGN_OR_RETURN(Tensor out, binary_apply(ctx, op, ctx.input(0), ctx.input(1)));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

// Sum / Mean / Max / Min over 1..N inputs.
template <BinOp kOp, bool kMean = false>
Status k_variadic(KernelContext& ctx) {
  Tensor acc = ctx.input(0);
  for (int64_t i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    ASSIGN_OR_RETURN(acc, binary_apply(ctx, kOp, acc, ctx.input(i)));
  }
  if (kMean) {
    ASSIGN_OR_RETURN(Tensor nd, cast_tensor(Tensor::scalar<double>(static_cast<double>(ctx.num_inputs())), acc.dtype()));
    ASSIGN_OR_RETURN(acc, binary_apply(ctx, BinOp::kDiv, acc, nd));
  }
  if (ctx.num_inputs() == 1) acc = acc.clone();
  ctx.set_output(0, std::move(acc));
  return Status::ok();
}

Status infer_binary(InferContext& ctx) {
  const DType a = ctx.input_type(0).dtype, b = ctx.input_type(1).dtype;
  if (a != b && a != DType::kUndefined && b != DType::kUndefined && ctx.node().op_type != "Pow")
    return ctx.error(std::string("inputs have different element types: ") + dtype_name(a) + " and " + dtype_name(b));
  return infer_broadcast(ctx);
}
Status infer_compare(InferContext& ctx) { return infer_broadcast(ctx, DType::kBool); }
Status infer_broadcast_any(InferContext& ctx) { return infer_broadcast(ctx); }

// ---- Where ----------------------------------------------------------------------------------

Status k_where(KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  if (c.dtype() != DType::kBool) return ctx.error("condition must be bool");
  if (x.dtype() != y.dtype())
    return ctx.error(std::string("X and Y have different element types: ") + dtype_name(x.dtype()) + " and " +
                     dtype_name(y.dtype()));
  std::vector<int64_t> d1, dims;
  if (!broadcast_dims(c.dims(), x.dims(), &d1) || !broadcast_dims(d1, y.dims(), &dims))
    return ctx.error("shapes " + dims_to_string(c.dims()) + ", " + dims_to_string(x.dims()) + ", " +
                     dims_to_string(y.dims()) + " cannot be broadcast together");
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), dims));
  std::vector<std::vector<int64_t>> strides = {broadcast_strides(c.dims(), dims), broadcast_strides(x.dims(), dims),
                                               broadcast_strides(y.dims(), dims)};
  const bool* pc = c.data<bool>();
  if (x.dtype() == DType::kString) {
    for (BroadcastIter it(dims, strides); !it.done(); it.next())
      out->mutable_strings()[it.index()] = pc[it.offset(0)] ? x.strings()[it.offset(1)] : y.strings()[it.offset(2)];
    return Status::ok();
  }
  const int64_t es = dtype_size(x.dtype());
  const char* px = static_cast<const char*>(x.raw());
  const char* py = static_cast<const char*>(y.raw());
  char* po = static_cast<char*>(out->mutable_raw());
  for (BroadcastIter it(dims, strides); !it.done(); it.next()) {
    const char* src = pc[it.offset(0)] ? px + it.offset(1) * es : py + it.offset(2) * es;
    std::memcpy(po + it.index() * es, src, static_cast<size_t>(es));
  }
  return Status::ok();
}

Status infer_where(InferContext& ctx) {
  Shape s;
  const TensorType& c = ctx.input_type(0);
  const TensorType& x = ctx.input_type(1);
  const TensorType& y = ctx.input_type(2);
  std::optional<Shape> shape;
  if (c.shape && x.shape && y.shape) {
    Shape t;
    if (!broadcast_shapes(*c.shape, *x.shape, &t) || !broadcast_shapes(t, *y.shape, &s))
      return ctx.error("condition, X and Y shapes cannot be broadcast together");
    shape = s;
  }
  ctx.set_output(0, TensorType{x.dtype, shape});
  return Status::ok();
}

// ---- BitShift (unsigned integers, numpy broadcasting) ----------------------------------------

template <class Ctx>
Status read_direction(Ctx& ctx, bool* left) {
  if (!ctx.has("direction")) return ctx.error("required attribute 'direction' is missing");
  const std::string d = ctx.get_string("direction", "");
  if (d != "LEFT" && d != "RIGHT") return ctx.error("attribute 'direction' must be LEFT or RIGHT, got '" + d + "'");
  *left = d == "LEFT";
  return Status::ok();
}

bool is_unsigned_int(DType t) { return t == DType::kU8 || t == DType::kU16 || t == DType::kU32 || t == DType::kU64; }

Status infer_bitshift(InferContext& ctx) {
  bool left = true;
  RETURN_IF_ERROR(read_direction(ctx, &left));
  const DType a = ctx.input_type(0).dtype, b = ctx.input_type(1).dtype;
  if (a != DType::kUndefined && !is_unsigned_int(a))
    return ctx.error(std::string("BitShift expects unsigned integer inputs, got ") + dtype_name(a));
  if (a != DType::kUndefined && b != DType::kUndefined && a != b)
    return ctx.error(std::string("inputs have different element types: ") + dtype_name(a) + " and " + dtype_name(b));
  return infer_broadcast(ctx);
}

template <typename T>
void bitshift_loop(const Tensor& x, const Tensor& y, Tensor* out, bool left) {
  constexpr uint64_t kBits = sizeof(T) * 8;
  const T* px = x.data<T>();
  const T* py = y.data<T>();
  T* po = out->mutable_data<T>();
  auto f = [left](T a, T s) -> T {
    if (static_cast<uint64_t>(s) >= kBits) return 0;  // every bit shifted out
    return left ? static_cast<T>(a << s) : static_cast<T>(a >> s);
  };
  vector<vector<int64_t>> strides = {broadcast_strides(x.dims(), out->dims()), broadcast_strides(y.dims(), out->dims())};
  for (BroadcastIter it(out->dims(), std::move(strides)); !it.done(); it.next())
    po[it.index()] = f(px[it.offset(0)], py[it.offset(1)]);
}

Status k_bitshift(KernelContext& ctx) {
  bool left = true;
  RETURN_IF_ERROR(read_direction(ctx, &left));
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  if (!is_unsigned_int(x.dtype())) return ctx.error(std::string("BitShift expects unsigned integer inputs, got ") + dtype_name(x.dtype()));
  if (x.dtype() != y.dtype())
    return ctx.error(std::string("inputs have different element types: ") + dtype_name(x.dtype()) + " and " + dtype_name(y.dtype()));
  vector<int64_t> dims;
  if (!broadcast_dims(x.dims(), y.dims(), &dims))
    return ctx.error("input shapes " + dims_to_string(x.dims()) + " and " + dims_to_string(y.dims()) +
                     " cannot be broadcast together");
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), dims));
  switch (x.dtype()) {
    case DType::kU8: bitshift_loop<uint8_t>(x, y, out, left); break;
    case DType::kU16: bitshift_loop<uint16_t>(x, y, out, left); break;
    case DType::kU32: bitshift_loop<uint32_t>(x, y, out, left); break;
    case DType::kU64: bitshift_loop<uint64_t>(x, y, out, left); break;
    default: break;
  }
  return Status::ok();
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  struct Unary { const char* name; KernelFn fn; int64_t since; };
  const Unary float_unary[] = {
      {"Sqrt", k_sqrt, 6}, {"Exp", k_exp, 6}, {"Log", k_log, 6}, {"Erf", k_erf, 9},
      {"Reciprocal", k_reciprocal, 6}, {"Floor", k_floor, 6}, {"Ceil", k_ceil, 6}, {"Round", k_round, 11},
      {"Sin", k_sin, 7}, {"Cos", k_cos, 7}, {"Tan", k_tan, 7}, {"Asin", k_asin, 7}, {"Acos", k_acos, 7},
      {"Atan", k_atan, 7}, {"Sinh", k_sinh, 9}, {"Cosh", k_cosh, 9}, {"Asinh", k_asinh, 9},
      {"Acosh", k_acosh, 9}, {"Atanh", k_atanh, 9}, {"Tanh", k_tanh, 6},
  };
  for (const Unary& u : float_unary)
    r.add(OpSchema{.name = u.name, .since_version = u.since, .types = kFloatTypes, .infer = infer_same_as_input0, .kernel = u.fn});
  r.add(OpSchema{.name = "Abs", .since_version = 6, .infer = infer_same_as_input0, .kernel = k_abs});
  r.add(OpSchema{.name = "Neg", .since_version = 6, .infer = infer_same_as_input0, .kernel = k_neg});
  r.add(OpSchema{.name = "Sign", .since_version = 9, .infer = infer_same_as_input0, .kernel = k_sign});
  r.add(OpSchema{.name = "Not", .since_version = 1, .types = {DType::kBool}, .infer = infer_same_as_input0, .kernel = k_not});
  r.add(OpSchema{.name = "IsNaN", .since_version = 9, .types = kFloatTypes, .infer = infer_bool_same_shape, .kernel = k_isnan_isinf<true>});
  r.add(OpSchema{.name = "IsInf", .since_version = 10, .types = kFloatTypes, .infer = infer_bool_same_shape, .kernel = k_isnan_isinf<false>});

  struct Binary { const char* name; KernelFn fn; int64_t since; InferFn infer; };
  const Binary binary[] = {
      {"Add", k_binary<BinOp::kAdd>, 7, infer_binary}, {"Sub", k_binary<BinOp::kSub>, 7, infer_binary},
      {"Mul", k_binary<BinOp::kMul>, 7, infer_binary}, {"Div", k_binary<BinOp::kDiv>, 7, infer_binary},
      {"Pow", k_binary<BinOp::kPow>, 7, infer_binary}, {"Mod", k_binary<BinOp::kMod>, 10, infer_binary},
      {"Equal", k_binary<BinOp::kEq>, 7, infer_compare}, {"Less", k_binary<BinOp::kLt>, 7, infer_compare},
      {"LessOrEqual", k_binary<BinOp::kLe>, 12, infer_compare}, {"Greater", k_binary<BinOp::kGt>, 7, infer_compare},
      {"GreaterOrEqual", k_binary<BinOp::kGe>, 12, infer_compare}, {"And", k_binary<BinOp::kAnd>, 7, infer_compare},
      {"Or", k_binary<BinOp::kOr>, 7, infer_compare}, {"Xor", k_binary<BinOp::kXor>, 7, infer_compare},
  };
  for (const Binary& b : binary)
    r.add(OpSchema{.name = b.name, .since_version = b.since, .min_inputs = 2, .max_inputs = 2, .attrs = {{"fmod", AttrType::kInt}},
                   .infer = b.infer, .kernel = b.fn});
  const Binary variadic[] = {
      {"Sum", k_variadic<BinOp::kAdd>, 8, infer_broadcast_any}, {"Mean", k_variadic<BinOp::kAdd, true>, 8, infer_broadcast_any},
      {"Max", k_variadic<BinOp::kMax>, 8, infer_broadcast_any}, {"Min", k_variadic<BinOp::kMin>, 8, infer_broadcast_any},
  };
  for (const Binary& b : variadic)
    r.add(OpSchema{.name = b.name, .since_version = b.since, .min_inputs = 1, .max_inputs = 1 << 20, .infer = b.infer, .kernel = b.fn});
  r.add(OpSchema{.name = "Where", .since_version = 9, .min_inputs = 3, .max_inputs = 3, .infer = infer_where, .kernel = k_where});
  r.add(OpSchema{.name = "BitShift", .since_version = 11, .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"direction", AttrType::kString, true}},
                 .types = {DType::kU8, DType::kU16, DType::kU32, DType::kU64}, .infer = infer_bitshift, .kernel = k_bitshift});
}

}  // namespace ferry
