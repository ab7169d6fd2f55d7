// Op family 'tensor_broadcast' (see op_families.inc): a tensor copied out to a larger shape:
// Expand (broadcasting), Tile (repetition), Pad (constant, edge, reflect, wrap).
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

// ---- Expand / Tile ----------------------------------------------------------------------------

Status k_expand(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  vector<int64_t> shape, dims;
  RETURN_IF_ERROR(int_values(ctx, ctx.input(1), 1, &shape));
  for (int64_t d : shape)
    if (d < 0) return ctx.error("input 1 (shape) " + shape_str(shape) + " has a negative dimension");
  if (!broadcast_dims(x.dims(), shape, &dims))
    return ctx.error("input shape " + shape_str(x.dims()) + " cannot be broadcast to " + shape_str(shape));
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), dims));
  return dm::strided_gather(x, 0, broadcast_strides(x.dims(), dims), out);
}

Status infer_expand(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Shape* s = input_shape_or_null(ctx, 0);
  const Tensor* sv = ctx.input_value(1);
  if (sv) {
    vector<int64_t> shape;
    RETURN_IF_ERROR(int_values(ctx, *sv, 1, &shape));
    for (int64_t d : shape)
      if (d < 0) return ctx.error("input 1 (shape) " + shape_str(shape) + " has a negative dimension");
    if (!s) {
      ctx.set_output(0, TensorType{dt, std::nullopt});
      return Status::ok();
    }
    Shape out;
    if (!broadcast_shapes(*s, Shape::of(shape), &out))
      return ctx.error("input shape " + s->to_string() + " cannot be broadcast to " + shape_str(shape));
    ctx.set_output(0, TensorType{dt, out});
    return Status::ok();
  }
  const int64_t k = dm::static_length_1d(ctx, 1);
  if (!s || k < 0) {
    ctx.set_output(0, TensorType{dt, std::nullopt});
    return Status::ok();
  }
  // Unknown target values: dims where the input is known and > 1 stay.
  const int64_t r = std::max(s->rank(), k);
  Shape out = dm::unknown_shape(r);
  for (int64_t i = 0; i < s->rank(); ++i) {
    const Dim& d = s->dims[i];
    if (d.is_known() && d.value != 1) out.dims[r - s->rank() + i] = d;
  }
  ctx.set_output(0, TensorType{dt, out});
  return Status::ok();
}

Status k_tile(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  vector<int64_t> rep;
  RETURN_IF_ERROR(int_values(ctx, ctx.input(1), 1, &rep));
  if (static_cast<int64_t>(rep.size()) != x.rank())
    return ctx.error("input 1 (repeats) has " + std::to_string(rep.size()) + " entries but the input has rank " +
                     std::to_string(x.rank()));
  vector<int64_t> dims(rep.size());
  vector<vector<int64_t>> maps(rep.size());
  for (size_t i = 0; i < rep.size(); ++i) {
    if (rep[i] < 0) return ctx.error("input 1 (repeats) " + shape_str(rep) + " has a negative entry");
    if (x.dim(i) != 0 && rep[i] > kMaxTensorElements / x.dim(i)) return ctx.error("repeats " + shape_str(rep) + " are too large");
    dims[i] = x.dim(i) * rep[i];
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), dims));
  if (out->numel() == 0) return Status::ok();
  for (size_t i = 0; i < rep.size(); ++i) {
    maps[i].resize(static_cast<size_t>(dims[i]));
    for (int64_t j = 0; j < dims[i]; ++j) maps[i][j] = j % x.dim(i);
  }
  return dm::axis_map_gather(x, maps, Tensor(), out);
}

Status infer_tile(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Shape* s = input_shape_or_null(ctx, 0);
  if (!s) {
    ctx.set_output(0, TensorType{dt, std::nullopt});
    return Status::ok();
  }
  Shape out = *s;
  const Tensor* rv = ctx.input_value(1);
  if (!rv) {
    for (Dim& d : out.dims) d = Dim();
  } else {
    vector<int64_t> rep;
    RETURN_IF_ERROR(int_values(ctx, *rv, 1, &rep));
    if (static_cast<int64_t>(rep.size()) != s->rank())
      return ctx.error("input 1 (repeats) has " + std::to_string(rep.size()) + " entries but the input has rank " +
                       std::to_string(s->rank()));
    for (size_t i = 0; i < rep.size(); ++i) {
      if (rep[i] < 0) return ctx.error("input 1 (repeats) " + shape_str(rep) + " has a negative entry");
      if (rep[i] > kMaxTensorElements) return ctx.error("input 1 (repeats) " + shape_str(rep) + " is too large");
      Dim& d = out.dims[i];
      if (rep[i] == 0) d = Dim(0);
      else if (d.is_known()) d = Dim(d.value * rep[i]);
      else if (rep[i] != 1) d = Dim();
    }
  }
  ctx.set_output(0, TensorType{dt, out});
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

}  // namespace

void register_tensor_broadcast_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "Expand", .since_version = 8, .min_inputs = 2, .max_inputs = 2, .infer = infer_expand,
                 .kernel = k_expand});
  r.add(OpSchema{.name = "Tile", .since_version = 6, .min_inputs = 2, .max_inputs = 2, .infer = infer_tile,
                 .kernel = k_tile});
  r.add(OpSchema{.name = "Pad", .since_version = 2, .min_inputs = 1, .max_inputs = 1,
                 .attrs = {{"pads", AttrType::kInts, true}, {"mode", AttrType::kString}, {"value", AttrType::kFloat}},
                 .infer = infer_pad, .kernel = k_pad});
  r.add(OpSchema{.name = "Pad", .since_version = 11, .min_inputs = 2, .max_inputs = 3, .attrs = {{"mode", AttrType::kString}},
                 .infer = infer_pad, .kernel = k_pad});
  r.add(OpSchema{.name = "Pad", .since_version = 18, .min_inputs = 2, .max_inputs = 4, .attrs = {{"mode", AttrType::kString}},
                 .infer = infer_pad, .kernel = k_pad});
}

}  // namespace ferry
