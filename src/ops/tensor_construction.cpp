// Op family 'tensor_construction' (see op_families.inc): tensors made from attributes, shapes or
// another tensor's type: Constant, ConstantOfShape, Identity, Range, EyeLike, Cast, CastLike.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "ops/data_movement.h"

namespace ferry {
namespace {

using dm::input_desc;
using dm::input_dtype;
using dm::input_shape_or_null;
using dm::input_type_or_null;
using dm::int_values;
using dm::shape_str;
using std::string;
using std::vector;

// ---- Cast -------------------------------------------------------------------------------------

// Float -> integer: NaN gives 0, values outside int64 saturate, then wraps to the target width
// (what x86, numpy and PyTorch do for in-range values, e.g. 300.0 -> uint8 gives 44).
template <typename D>
D float_to_int(double v) {
  if (std::isnan(v)) return D(0);
  if constexpr (std::is_same_v<D, uint64_t>) {
    if (v >= 18446744073709551616.0) return std::numeric_limits<uint64_t>::max();
    if (v >= 9223372036854775808.0) return static_cast<uint64_t>(v);
  }
  if (v >= 9223372036854775807.0) return static_cast<D>(std::numeric_limits<int64_t>::max());
  if (v <= -9223372036854775808.0) return static_cast<D>(std::numeric_limits<int64_t>::min());
  return static_cast<D>(static_cast<int64_t>(v));
}

// Writes one element of dtype `to` at index i of `out` from a double (float sources) or an int64
// (integer/bool sources; exact for any width).
void store_double(Tensor& out, int64_t i, double v) {
  switch (out.dtype()) {
    case DType::kF32: out.mutable_data<float>()[i] = static_cast<float>(v); break;
    case DType::kF64: out.mutable_data<double>()[i] = v; break;
    case DType::kF16: out.mutable_data<uint16_t>()[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::kBF16: out.mutable_data<uint16_t>()[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::kBool: out.mutable_data<bool>()[i] = v != 0.0; break;
    FERRY_DISPATCH_INT_CASES(out.mutable_data<scalar_t>()[i] = float_to_int<scalar_t>(v))
    default: break;
  }
}
void store_int(Tensor& out, int64_t i, int64_t v, bool from_unsigned) {
  switch (out.dtype()) {
    case DType::kF32: case DType::kF64: case DType::kF16: case DType::kBF16:
      store_double(out, i, from_unsigned ? static_cast<double>(static_cast<uint64_t>(v)) : static_cast<double>(v));
      break;
    case DType::kBool: out.mutable_data<bool>()[i] = v != 0; break;
    FERRY_DISPATCH_INT_CASES(out.mutable_data<scalar_t>()[i] = static_cast<scalar_t>(v))
    default: break;
  }
}

// Shortest "%.Ng" that reads back as the same value (numpy-like), with NaN / INF / -INF.
string float_to_string(double v, bool is_double) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "INF" : "-INF";
  char buf[64];
  int p = 1;
  for (; p < 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    double back = std::strtod(buf, nullptr);
    if (is_double ? back == v : static_cast<float>(back) == static_cast<float>(v)) break;
  }
  // Plain notation for integral parts up to 16 digits: 100 prints "100", not "1e+02".
  const double a = std::fabs(v);
  if (a >= 1 && a < 1e16) p = std::max(p, static_cast<int>(std::floor(std::log10(a))) + 1);
  std::snprintf(buf, sizeof buf, "%.*g", p, v);
  return buf;
}

bool iequals(const string& a, const char* b) {
  size_t n = std::strlen(b);
  if (a.size() != n) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

StatusOr<Tensor> cast_elements(const Tensor& x, DType to, const Node& node) {
  if (x.dtype() == to) return x;
  Tensor out = Tensor::allocate(to, x.dims());
  const int64_t n = x.numel();
  const DType from = x.dtype();
  if (from == DType::kString) {
    for (int64_t i = 0; i < n; ++i) {
      const string& s = x.strings()[i];
      if (to == DType::kString) continue;
      if (to == DType::kBool && (iequals(s, "true") || iequals(s, "false"))) {
        out.mutable_data<bool>()[i] = iequals(s, "true");
        continue;
      }
      const char* c = s.c_str();
      char* end = nullptr;
      if (dtype_is_integer(to)) {  // exact for integers that fit
        errno = 0;
        long long iv = std::strtoll(c, &end, 10);
        if (end != c && *end == '\0' && errno == 0) {
          store_int(out, i, iv, false);
          continue;
        }
      }
      double v = std::strtod(c, &end);  // accepts INF, +INF, -INF, NaN in any case
      while (end && *end && std::isspace(static_cast<unsigned char>(*end))) ++end;
      if (end == c || *end != '\0')
        return invalid_argument(node.describe() + ": cannot cast the string '" + s + "' to " + dtype_name(to));
      store_double(out, i, v);
    }
    return out;
  }
  const bool from_float = dtype_is_float(from);
  const bool from_unsigned = from == DType::kU64;
  if (to == DType::kString) {
    char buf[32];
    for (int64_t i = 0; i < n; ++i) {
      string& s = out.mutable_strings()[i];
      if (from_float) {
        s = float_to_string(x.get_double(i), from == DType::kF64);
      } else if (from == DType::kBool) {
        s = x.data<bool>()[i] ? "True" : "False";
      } else if (from_unsigned) {
        std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(x.data<uint64_t>()[i]));
        s = buf;
      } else {
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(x.get_int64(i)));
        s = buf;
      }
    }
    return out;
  }
  if (from_float) {
    if (from == DType::kF32 && to == DType::kF16) {
      for (int64_t i = 0; i < n; ++i) out.mutable_data<uint16_t>()[i] = f32_to_f16(x.data<float>()[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) store_double(out, i, x.get_double(i));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) store_int(out, i, x.get_int64(i), from_unsigned);
  }
  return out;
}

template <typename Ctx>
Status cast_target(const Ctx& ctx, DType* to) {
  if (!ctx.has("to")) return ctx.error("attribute 'to' is required");
  const int64_t v = ctx.get_int("to", 0);
  if (!dtype_from_onnx(static_cast<int32_t>(v), to) || *to == DType::kUndefined)
    return unsupported(ctx.node().describe() + ": casting to ONNX data type " + std::to_string(v) + " is not supported");
  return Status::ok();
}

Status k_cast(KernelContext& ctx) {
  DType to;
  RETURN_IF_ERROR(cast_target(ctx, &to));
  ASSIGN_OR_RETURN(Tensor y, cast_elements(ctx.input(0), to, ctx.node()));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

Status infer_cast(InferContext& ctx) {
  DType to;
  RETURN_IF_ERROR(cast_target(ctx, &to));
  const TensorType* t = input_type_or_null(ctx, 0);
  ctx.set_output(0, TensorType{to, t ? t->shape : std::nullopt});
  return Status::ok();
}

Status k_cast_like(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Tensor y, cast_elements(ctx.input(0), ctx.input(1).dtype(), ctx.node()));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

Status infer_cast_like(InferContext& ctx) {
  const TensorType* t = input_type_or_null(ctx, 0);
  ctx.set_output(0, TensorType{input_dtype(ctx, 1), t ? t->shape : std::nullopt});
  return Status::ok();
}

// ---- Identity / Constant / ConstantOfShape ----------------------------------------------------

Status k_identity(KernelContext& ctx) {
  ctx.set_output_value(0, ctx.input_value(0));  // tensors, sequences and optionals pass through
  return Status::ok();
}

// Builds Constant's value from whichever attribute is set.
template <typename Ctx>
StatusOr<Tensor> constant_value(const Ctx& ctx) {
  int count = 0;
  Tensor v;
  if (const Tensor* t = ctx.get_tensor("value")) {
    v = *t;
    ++count;
  }
  if (ctx.has("sparse_value")) return unsupported(ctx.node().describe() + ": sparse_value is not supported");
  if (ctx.has("value_float")) {
    v = Tensor::scalar<float>(ctx.get_float("value_float", 0.0f));
    ++count;
  }
  if (ctx.has("value_floats")) {
    vector<float> f = ctx.get_floats("value_floats");
    v = Tensor::from_vector<float>(f, {static_cast<int64_t>(f.size())});
    ++count;
  }
  if (ctx.has("value_int")) {
    v = Tensor::scalar<int64_t>(ctx.get_int("value_int", 0));
    ++count;
  }
  if (ctx.has("value_ints")) {
    vector<int64_t> i = ctx.get_ints("value_ints");
    v = Tensor::from_vector<int64_t>(i, {static_cast<int64_t>(i.size())});
    ++count;
  }
  if (ctx.has("value_string")) {
    v = Tensor::scalar<string>(ctx.get_string("value_string", ""));
    ++count;
  }
  if (ctx.has("value_strings")) {
    vector<string> s = ctx.get_strings("value_strings");
    v = Tensor::from_vector<string>(s, {static_cast<int64_t>(s.size())});
    ++count;
  }
  if (count != 1 || !v.defined())
    return ctx.error("exactly one of the attributes value, value_float(s), value_int(s), value_string(s) must be set (" +
                     std::to_string(count) + " are)");
  return v;
}

Status k_constant(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Tensor v, constant_value(ctx));
  ctx.set_output(0, v);
  return Status::ok();
}

Status infer_constant(InferContext& ctx) {
  ASSIGN_OR_RETURN(Tensor v, constant_value(ctx));
  ctx.set_output(0, v.type());
  return Status::ok();
}

template <typename Ctx>
Status constant_of_shape_fill(const Ctx& ctx, Tensor* fill) {
  const Tensor* v = ctx.get_tensor("value");
  if (!v) {
    *fill = Tensor::scalar<float>(0.0f);
    return Status::ok();
  }
  if (v->numel() != 1)
    return ctx.error("attribute value must hold exactly one element, it has " + std::to_string(v->numel()));
  *fill = *v;
  return Status::ok();
}

Status k_constant_of_shape(KernelContext& ctx) {
  Tensor fill;
  RETURN_IF_ERROR(constant_of_shape_fill(ctx, &fill));
  vector<int64_t> dims;
  RETURN_IF_ERROR(int_values(ctx, ctx.input(0), 0, &dims));
  for (int64_t d : dims)
    if (d < 0) return ctx.error("input 0 (shape) " + shape_str(dims) + " has a negative dimension");
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, fill.dtype(), dims));
  return dm::visit_storage(fill.dtype(), [&](auto tag) -> Status {
    using S = typename decltype(tag)::type;
    std::fill_n(dm::mut_elems<S>(*out), out->numel(), dm::elems<S>(fill)[0]);
    return Status::ok();
  });
}

Status infer_constant_of_shape(InferContext& ctx) {
  Tensor fill;
  RETURN_IF_ERROR(constant_of_shape_fill(ctx, &fill));
  const Tensor* sv = ctx.input_value(0);
  std::optional<Shape> shape;
  if (sv) {
    vector<int64_t> dims;
    RETURN_IF_ERROR(int_values(ctx, *sv, 0, &dims));
    for (int64_t d : dims)
      if (d < 0) return ctx.error("input 0 (shape) " + shape_str(dims) + " has a negative dimension");
    shape = Shape::of(dims);
  } else if (int64_t k = dm::static_length_1d(ctx, 0); k >= 0) {
    shape = dm::unknown_shape(k);
  }
  ctx.set_output(0, TensorType{fill.dtype(), shape});
  return Status::ok();
}

// ---- Range ------------------------------------------------------------------------------------

template <typename Ctx>
Status range_count(const Ctx& ctx, const Tensor& s, const Tensor& l, const Tensor& d, int64_t* n) {
  const char* names[] = {"start", "limit", "delta"};
  const Tensor* ts[] = {&s, &l, &d};
  for (int i = 0; i < 3; ++i) {
    if (ts[i]->numel() != 1 || ts[i]->rank() > 1)
      return ctx.error(string("input ") + names[i] + " must be a scalar, got shape " + shape_str(ts[i]->dims()));
    if (ts[i]->dtype() != s.dtype())
      return ctx.error(string("input ") + names[i] + " has element type " + dtype_name(ts[i]->dtype()) +
                       ", start has " + dtype_name(s.dtype()));
  }
  if (dtype_is_integer(s.dtype())) {
    const __int128 a = s.get_int64(0), b = l.get_int64(0), c = d.get_int64(0);
    if (c == 0) return ctx.error("delta is 0");
    __int128 diff = b - a, cnt = 0;
    if (c > 0 && diff > 0) cnt = (diff + c - 1) / c;
    if (c < 0 && diff < 0) cnt = (-diff + (-c) - 1) / (-c);
    if (cnt > kMaxTensorElements) return ctx.error("the range has too many elements");
    *n = static_cast<int64_t>(cnt);
    return Status::ok();
  }
  if (!dtype_is_float(s.dtype())) return ctx.error(string("element type ") + dtype_name(s.dtype()) + " is not supported");
  const double a = s.get_double(0), b = l.get_double(0), c = d.get_double(0);
  if (c == 0) return ctx.error("delta is 0");
  const double cnt = std::ceil((b - a) / c);
  if (std::isnan(cnt)) return ctx.error("start, limit and delta must be finite");
  if (cnt > static_cast<double>(kMaxTensorElements)) return ctx.error("the range has too many elements");
  *n = cnt > 0 ? static_cast<int64_t>(cnt) : 0;
  return Status::ok();
}

Status k_range(KernelContext& ctx) {
  const Tensor &s = ctx.input(0), &l = ctx.input(1), &d = ctx.input(2);
  int64_t n = 0;
  RETURN_IF_ERROR(range_count(ctx, s, l, d, &n));
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, s.dtype(), {n}));
  if (dtype_is_integer(s.dtype())) {
    const int64_t a = s.get_int64(0), c = d.get_int64(0);
    for (int64_t i = 0; i < n; ++i) store_int(*out, i, a + i * c, false);
  } else {
    const double a = s.get_double(0), c = d.get_double(0);
    for (int64_t i = 0; i < n; ++i) store_double(*out, i, a + static_cast<double>(i) * c);
  }
  return Status::ok();
}

Status infer_range(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Tensor *s = ctx.input_value(0), *l = ctx.input_value(1), *d = ctx.input_value(2);
  if (s && l && d) {
    int64_t n = 0;
    RETURN_IF_ERROR(range_count(ctx, *s, *l, *d, &n));
    ctx.set_output(0, TensorType{dt, Shape::of({n})});
    return Status::ok();
  }
  ctx.set_output(0, TensorType{dt, dm::unknown_shape(1)});
  return Status::ok();
}

// ---- EyeLike ----------------------------------------------------------------------------------

template <typename Ctx>
Status eye_dtype(const Ctx& ctx, DType in, DType* out) {
  *out = in;
  if (!ctx.has("dtype")) return Status::ok();
  const int64_t v = ctx.get_int("dtype", 0);
  if (!dtype_from_onnx(static_cast<int32_t>(v), out) || *out == DType::kUndefined || *out == DType::kString)
    return ctx.error("attribute dtype=" + std::to_string(v) + " is not a supported element type");
  return Status::ok();
}

Status k_eye_like(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() != 2) return ctx.error("input must be 2-D, got shape " + shape_str(x.dims()));
  DType dt;
  RETURN_IF_ERROR(eye_dtype(ctx, x.dtype(), &dt));
  const int64_t k = ctx.get_int("k", 0);
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, dt, x.dims()));
  ASSIGN_OR_RETURN(Tensor one, cast_tensor(Tensor::scalar<float>(1.0f), dt));
  return dm::visit_storage(dt, [&](auto tag) -> Status {
    using S = typename decltype(tag)::type;
    S* p = dm::mut_elems<S>(*out);
    const S v = dm::elems<S>(one)[0];
    for (int64_t i = 0; i < x.dim(0); ++i) {
      const int64_t j = i + k;
      if (j >= 0 && j < x.dim(1)) p[i * x.dim(1) + j] = v;
    }
    return Status::ok();
  });
}

Status infer_eye_like(InferContext& ctx) {
  const TensorType* t = input_type_or_null(ctx, 0);
  DType dt;
  RETURN_IF_ERROR(eye_dtype(ctx, t ? t->dtype : DType::kUndefined, &dt));
  if (t && t->shape && t->shape->rank() != 2) return ctx.error("input must be 2-D, got shape " + t->shape->to_string());
  ctx.set_output(0, TensorType{dt, t && t->shape ? t->shape : std::optional<Shape>(dm::unknown_shape(2))});
  return Status::ok();
}

}  // namespace

void register_tensor_construction_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "Identity", .since_version = 1, .infer = infer_same_as_input0, .kernel = k_identity,
                 .accepts_sequences = true});
  r.add(OpSchema{.name = "Constant", .since_version = 1, .min_inputs = 0, .max_inputs = 0,
                 .attrs = {{"value", AttrType::kTensor}, {"value_float", AttrType::kFloat},
                           {"value_floats", AttrType::kFloats}, {"value_int", AttrType::kInt},
                           {"value_ints", AttrType::kInts}, {"value_string", AttrType::kString},
                           {"value_strings", AttrType::kStrings}},
                 .infer = infer_constant, .kernel = k_constant});
  r.add(OpSchema{.name = "ConstantOfShape", .since_version = 9, .attrs = {{"value", AttrType::kTensor}},
                 .infer = infer_constant_of_shape, .kernel = k_constant_of_shape});
  r.add(OpSchema{.name = "Range", .since_version = 11, .min_inputs = 3, .max_inputs = 3, .infer = infer_range,
                 .kernel = k_range});
  r.add(OpSchema{.name = "EyeLike", .since_version = 9, .attrs = {{"dtype", AttrType::kInt}, {"k", AttrType::kInt}},
                 .infer = infer_eye_like, .kernel = k_eye_like});
  r.add(OpSchema{.name = "Cast", .since_version = 6, .attrs = {{"to", AttrType::kInt, true}, {"saturate", AttrType::kInt}},
                 .infer = infer_cast, .kernel = k_cast});
  r.add(OpSchema{.name = "CastLike", .since_version = 15, .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"saturate", AttrType::kInt}}, .infer = infer_cast_like, .kernel = k_cast_like});
}

}  // namespace ferry
