// Tensor construction and conversion: Cast, CastLike, Range, Pad, Trilu, CumSum, EyeLike.
// (The second half of the tensor_shape family, registered from tensor_shape.cpp.)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cctype>
#include <cerrno>
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

// ---- Pad --------------------------------------------------------------------------------------

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

template <typename Ctx>
Status pad_mode(const Ctx& ctx, PadMode* m) {
  const string s = ctx.get_string("mode", "constant");
  if (s == "constant") *m = PadMode::kConstant;
  else if (s == "reflect") *m = PadMode::kReflect;
  else if (s == "edge") *m = PadMode::kEdge;
  else if (s == "wrap" && ctx.opset() >= 19) *m = PadMode::kWrap;
  else return ctx.error("attribute mode='" + s + "' is not supported (constant, reflect, edge" +
                        string(ctx.opset() >= 19 ? ", wrap)" : ")"));
  return Status::ok();
}

// Full pads [begin_0..begin_{r-1}, end_0..end_{r-1}] from the attribute (opset < 11) or the
// pads/axes inputs. *known is false when an input's value is unknown (shape rules only).
template <typename Ctx>
Status pad_amounts(const Ctx& ctx, int64_t rank, const Tensor* pads_v, const Tensor* axes_v, bool axes_given,
                   vector<int64_t>* pads, bool* known) {
  *known = true;
  vector<int64_t> raw;
  if (ctx.opset() < 11) {
    if (!ctx.has("pads")) return ctx.error("attribute pads is required");
    raw = ctx.get_ints("pads");
  } else {
    if (!pads_v) {
      *known = false;
      return Status::ok();
    }
    if (!dm::read_ints(*pads_v, &raw) || pads_v->rank() > 1)
      return ctx.error(input_desc(ctx.node(), 1) + " (pads) must be a 1-D integer tensor");
  }
  vector<int64_t> axes;
  if (axes_given) {
    if (!axes_v) {
      *known = false;
      return Status::ok();
    }
    if (!dm::read_ints(*axes_v, &axes)) return ctx.error(input_desc(ctx.node(), 3) + " (axes) must be an integer tensor");
    for (int64_t& a : axes) {
      const int64_t orig = a;
      if (!normalize_axis(&a, rank))
        return ctx.error("axes: axis " + std::to_string(orig) + " is out of range for rank " + std::to_string(rank));
    }
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  const int64_t na = static_cast<int64_t>(axes.size());
  for (int64_t v : raw)
    if (v > kMaxTensorElements || v < -kMaxTensorElements) return ctx.error("pads " + shape_str(raw) + " are too large");
  if (static_cast<int64_t>(raw.size()) != 2 * na)
    return ctx.error("pads " + shape_str(raw) + " must have " + std::to_string(2 * na) + " entries (2 per axis)");
  pads->assign(static_cast<size_t>(2 * rank), 0);
  for (int64_t i = 0; i < na; ++i) {
    (*pads)[axes[i]] = raw[i];
    (*pads)[axes[i] + rank] = raw[i + na];
  }
  return Status::ok();
}

Status k_pad(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  PadMode mode = PadMode::kConstant;
  RETURN_IF_ERROR(pad_mode(ctx, &mode));
  const bool new_style = ctx.opset() >= 11;
  vector<int64_t> pads;
  bool known;
  const bool axes_given = new_style && ctx.opset() >= 18 && ctx.has_input(3);
  RETURN_IF_ERROR(pad_amounts(ctx, rank, new_style && ctx.has_input(1) ? &ctx.input(1) : nullptr,
                              axes_given ? &ctx.input(3) : nullptr, axes_given, &pads, &known));
  if (!known) return ctx.error("input 1 (pads) is required");
  // The fill value, as one element of x's dtype.
  Tensor fill;
  if (x.dtype() == DType::kString) {
    fill = Tensor::scalar<string>("");
    if (new_style && ctx.has_input(2) && ctx.input(2).dtype() == DType::kString && ctx.input(2).numel() > 0)
      fill = Tensor::scalar<string>(ctx.input(2).strings()[0]);
  } else {
    Tensor v = Tensor::scalar<float>(new_style ? 0.0f : ctx.get_float("value", 0.0f));
    if (new_style && ctx.has_input(2) && ctx.input(2).numel() > 0) {
      const Tensor& c = ctx.input(2);
      if (c.numel() != 1) return ctx.error("input 2 (constant_value) must hold one element, got shape " + shape_str(c.dims()));
      v = c;
    }
    ASSIGN_OR_RETURN(fill, cast_tensor(v, x.dtype()));
  }
  vector<int64_t> dims(static_cast<size_t>(rank));
  for (int64_t a = 0; a < rank; ++a) {
    dims[a] = x.dim(a) + pads[a] + pads[a + rank];
    if (dims[a] < 0)
      return ctx.error("pads " + shape_str(pads) + " crop axis " + std::to_string(a) + " of size " +
                       std::to_string(x.dim(a)) + " below zero");
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), dims));
  if (rank == 0) {
    *out = x.clone();
    return Status::ok();
  }
  vector<vector<int64_t>> maps(static_cast<size_t>(rank));
  for (int64_t a = 0; a < rank; ++a) {
    const int64_t d = x.dim(a), pb = pads[a], pe = pads[a + rank];
    const int64_t cb = std::max<int64_t>(-pb, 0), ce = std::max<int64_t>(-pe, 0);
    const int64_t len = std::max<int64_t>(d - cb - ce, 0), lead = std::max<int64_t>(pb, 0);
    if (mode != PadMode::kConstant && len == 0 && dims[a] > 0)
      return ctx.error("cannot pad an empty axis " + std::to_string(a) + " in this mode");
    if (out->numel() == 0) continue;
    maps[a].resize(static_cast<size_t>(dims[a]));
    for (int64_t j = 0; j < dims[a]; ++j) {
      int64_t k = j - lead;  // index into the cropped range [0, len)
      if (k < 0 || k >= len) {
        switch (mode) {
          case PadMode::kConstant: k = -1; break;
          case PadMode::kEdge: k = std::clamp<int64_t>(k, 0, len - 1); break;
          case PadMode::kWrap: k = ((k % len) + len) % len; break;
          case PadMode::kReflect: {
            if (len == 1) {
              k = 0;
              break;
            }
            const int64_t period = 2 * (len - 1);
            k = ((k % period) + period) % period;
            if (k >= len) k = period - k;
            break;
          }
        }
      }
      maps[a][j] = k < 0 ? -1 : cb + k;
    }
  }
  return dm::axis_map_gather(x, maps, fill, out);
}

Status infer_pad(InferContext& ctx) {
  PadMode mode = PadMode::kConstant;
  RETURN_IF_ERROR(pad_mode(ctx, &mode));
  const DType dt = input_dtype(ctx, 0);
  const Shape* s = input_shape_or_null(ctx, 0);
  if (!s) {
    ctx.set_output(0, TensorType{dt, std::nullopt});
    return Status::ok();
  }
  const int64_t rank = s->rank();
  const bool new_style = ctx.opset() >= 11;
  const bool axes_given = new_style && ctx.opset() >= 18 && ctx.has_input(3);
  vector<int64_t> pads;
  bool known;
  RETURN_IF_ERROR(pad_amounts(ctx, rank, new_style ? ctx.input_value(1) : nullptr,
                              axes_given ? ctx.input_value(3) : nullptr, axes_given, &pads, &known));
  Shape out = *s;
  for (int64_t a = 0; a < rank; ++a) {
    Dim& d = out.dims[a];
    if (!known) {
      d = Dim();
      continue;
    }
    const int64_t delta = pads[a] + pads[a + rank];
    if (d.is_known()) {
      if (d.value + delta < 0)
        return ctx.error("pads " + shape_str(pads) + " crop axis " + std::to_string(a) + " of size " +
                         std::to_string(d.value) + " below zero");
      d = Dim(d.value + delta);
    } else if (delta != 0) {
      d = Dim();
    }
  }
  ctx.set_output(0, TensorType{dt, out});
  return Status::ok();
}

// ---- Trilu ------------------------------------------------------------------------------------

Status k_trilu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) return ctx.error("input must have rank >= 2, got shape " + shape_str(x.dims()));
  int64_t k = 0;
  if (ctx.has_input(1)) {
    const Tensor& kt = ctx.input(1);
    if (kt.numel() != 1 || !dtype_is_integer(kt.dtype()))
      return ctx.error("input 1 (k) must be an integer scalar, got " + kt.type().to_string());
    k = kt.get_int64(0);
  }
  const bool upper = ctx.get_int("upper", 1) != 0;
  Tensor y = x.clone();
  const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  const int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
  RETURN_IF_ERROR(dm::visit_storage(x.dtype(), [&](auto tag) -> Status {
    using S = typename decltype(tag)::type;
    S* p = dm::mut_elems<S>(y);
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          if (upper ? (j - i < k) : (j - i > k)) p[(m * rows + i) * cols + j] = S{};
    return Status::ok();
  }));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

// ---- CumSum -----------------------------------------------------------------------------------

template <typename T, typename Acc>
void cumsum_typed(const T* in, T* out, int64_t outer, int64_t len, int64_t inner, bool exclusive, bool reverse) {
  std::vector<Acc> acc(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    std::fill(acc.begin(), acc.end(), Acc(0));
    for (int64_t s = 0; s < len; ++s) {
      const int64_t t = reverse ? len - 1 - s : s;
      const int64_t base = (o * len + t) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        if (exclusive) {
          out[base + i] = static_cast<T>(acc[i]);
          acc[i] = static_cast<Acc>(acc[i] + static_cast<Acc>(in[base + i]));
        } else {
          acc[i] = static_cast<Acc>(acc[i] + static_cast<Acc>(in[base + i]));
          out[base + i] = static_cast<T>(acc[i]);
        }
      }
    }
  }
}

template <typename Ctx>
Status cumsum_axis(const Ctx& ctx, const Tensor& a, int64_t rank, int64_t* axis) {
  if (a.numel() != 1 || !dtype_is_integer(a.dtype()))
    return ctx.error("input 1 (axis) must be an integer scalar, got " + a.type().to_string());
  *axis = a.get_int64(0);
  if (!normalize_axis(axis, rank))
    return ctx.error("axis " + std::to_string(a.get_int64(0)) + " is out of range for rank " + std::to_string(rank));
  return Status::ok();
}

Status k_cumsum(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  int64_t axis = 0;
  RETURN_IF_ERROR(cumsum_axis(ctx, ctx.input(1), x0.rank(), &axis));
  const bool exclusive = ctx.get_int("exclusive", 0) != 0, reverse = ctx.get_int("reverse", 0) != 0;
  const DType dt = x0.dtype();
  Tensor x = widen_to_f32(x0);
  Tensor y = Tensor::allocate(x.dtype(), x.dims());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const int64_t len = x.dim(axis);
  switch (x.dtype()) {
    FERRY_DISPATCH_FLOAT_CASES(cumsum_typed<scalar_t, double>(x.data<scalar_t>(), y.mutable_data<scalar_t>(), outer, len,
                                                              inner, exclusive, reverse))
    FERRY_DISPATCH_INT_CASES(cumsum_typed<scalar_t, uint64_t>(x.data<scalar_t>(), y.mutable_data<scalar_t>(), outer, len,
                                                              inner, exclusive, reverse))
    default: return ctx.error(string("element type ") + dtype_name(dt) + " is not supported");
  }
  if (dt != x.dtype()) {
    ASSIGN_OR_RETURN(y, cast_tensor(y, dt));
  }
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

Status infer_cumsum(InferContext& ctx) {
  const Shape* s = input_shape_or_null(ctx, 0);
  const Tensor* a = ctx.input_value(1);
  if (s && a) {
    int64_t axis = 0;
    RETURN_IF_ERROR(cumsum_axis(ctx, *a, s->rank(), &axis));
  }
  return infer_same_as_input0(ctx);
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

void register_tensor_shape2_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "Cast", .since_version = 6, .attrs = {{"to", AttrType::kInt, true}, {"saturate", AttrType::kInt}},
                 .infer = infer_cast, .kernel = k_cast});
  r.add(OpSchema{.name = "CastLike", .since_version = 15, .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"saturate", AttrType::kInt}}, .infer = infer_cast_like, .kernel = k_cast_like});
  r.add(OpSchema{.name = "Range", .since_version = 11, .min_inputs = 3, .max_inputs = 3, .infer = infer_range,
                 .kernel = k_range});
  r.add(OpSchema{.name = "Pad", .since_version = 2, .min_inputs = 1, .max_inputs = 1,
                 .attrs = {{"pads", AttrType::kInts, true}, {"mode", AttrType::kString}, {"value", AttrType::kFloat}},
                 .infer = infer_pad, .kernel = k_pad});
  r.add(OpSchema{.name = "Pad", .since_version = 11, .min_inputs = 2, .max_inputs = 3, .attrs = {{"mode", AttrType::kString}},
                 .infer = infer_pad, .kernel = k_pad});
  r.add(OpSchema{.name = "Pad", .since_version = 18, .min_inputs = 2, .max_inputs = 4, .attrs = {{"mode", AttrType::kString}},
                 .infer = infer_pad, .kernel = k_pad});
  r.add(OpSchema{.name = "Trilu", .since_version = 14, .min_inputs = 1, .max_inputs = 2,
                 .attrs = {{"upper", AttrType::kInt}}, .infer = infer_same_as_input0, .kernel = k_trilu});
  r.add(OpSchema{.name = "CumSum", .since_version = 11, .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"exclusive", AttrType::kInt}, {"reverse", AttrType::kInt}}, .infer = infer_cumsum,
                 .kernel = k_cumsum});
  r.add(OpSchema{.name = "EyeLike", .since_version = 9, .attrs = {{"dtype", AttrType::kInt}, {"k", AttrType::kInt}},
                 .infer = infer_eye_like, .kernel = k_eye_like});
}

}  // namespace ferry
