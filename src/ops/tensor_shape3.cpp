// Tensor construction and broadcasting: Expand, Tile, Identity, Constant, ConstantOfShape,
// SpaceToDepth, DepthToSpace. (Part of the tensor_shape family, registered from tensor_shape.cpp.)
#include <algorithm>

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

// ---- SpaceToDepth / DepthToSpace --------------------------------------------------------------

template <typename Ctx>
Status block_size(const Ctx& ctx, int64_t* b) {
  *b = ctx.get_int("blocksize", 0);
  if (*b <= 0) return ctx.error("attribute blocksize must be positive, got " + std::to_string(*b));
  return Status::ok();
}

template <bool kToDepth>
Status k_space_depth(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t b = 0;
  RETURN_IF_ERROR(block_size(ctx, &b));
  if (x.rank() != 4) return ctx.error("input must be 4-D (N,C,H,W), got shape " + shape_str(x.dims()));
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  if (kToDepth) {
    if (h % b != 0 || w % b != 0)
      return ctx.error("input shape " + shape_str(x.dims()) + ": H and W must be divisible by blocksize " + std::to_string(b));
    Tensor r = x.reshaped({n, c, h / b, b, w / b, b});
    ASSIGN_OR_RETURN(Tensor y, dm::permute(r, {0, 3, 5, 1, 2, 4}));
    ctx.set_output(0, y.reshaped({n, c * b * b, h / b, w / b}));
    return Status::ok();
  }
  if (c % (b * b) != 0)
    return ctx.error("input shape " + shape_str(x.dims()) + ": C must be divisible by blocksize^2 = " + std::to_string(b * b));
  const bool crd = ctx.get_string("mode", "DCR") == "CRD";
  if (!crd && ctx.get_string("mode", "DCR") != "DCR")
    return ctx.error("attribute mode must be DCR or CRD, got '" + ctx.get_string("mode", "") + "'");
  Tensor y;
  if (crd) {
    ASSIGN_OR_RETURN(y, dm::permute(x.reshaped({n, c / (b * b), b, b, h, w}), {0, 1, 4, 2, 5, 3}));
  } else {
    ASSIGN_OR_RETURN(y, dm::permute(x.reshaped({n, b, b, c / (b * b), h, w}), {0, 3, 4, 1, 5, 2}));
  }
  ctx.set_output(0, y.reshaped({n, c / (b * b), h * b, w * b}));
  return Status::ok();
}

template <bool kToDepth>
Status infer_space_depth(InferContext& ctx) {
  int64_t b = 0;
  RETURN_IF_ERROR(block_size(ctx, &b));
  const DType dt = input_dtype(ctx, 0);
  const Shape* s = input_shape_or_null(ctx, 0);
  if (!s) {
    ctx.set_output(0, TensorType{dt, dm::unknown_shape(4)});
    return Status::ok();
  }
  if (s->rank() != 4) return ctx.error("input must be 4-D (N,C,H,W), got shape " + s->to_string());
  if (!kToDepth) {
    const string mode = ctx.get_string("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") return ctx.error("attribute mode must be DCR or CRD, got '" + mode + "'");
  }
  auto scale = [&](const Dim& d, bool mul, int64_t f, const char* what) -> StatusOr<Dim> {
    if (!d.is_known()) return Dim();
    if (mul) return Dim(d.value * f);
    if (d.value % f != 0)
      return ctx.error(string("input shape ") + s->to_string() + ": " + what + " must be divisible by " + std::to_string(f));
    return Dim(d.value / f);
  };
  Shape out = *s;
  ASSIGN_OR_RETURN(out.dims[1], scale(s->dims[1], kToDepth, b * b, "C"));
  ASSIGN_OR_RETURN(out.dims[2], scale(s->dims[2], !kToDepth, b, "H"));
  ASSIGN_OR_RETURN(out.dims[3], scale(s->dims[3], !kToDepth, b, "W"));
  ctx.set_output(0, TensorType{dt, out});
  return Status::ok();
}

}  // namespace

void register_tensor_shape3_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "Expand", .since_version = 8, .min_inputs = 2, .max_inputs = 2, .infer = infer_expand,
                 .kernel = k_expand});
  r.add(OpSchema{.name = "Tile", .since_version = 6, .min_inputs = 2, .max_inputs = 2, .infer = infer_tile,
                 .kernel = k_tile});
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
  r.add(OpSchema{.name = "SpaceToDepth", .since_version = 1, .attrs = {{"blocksize", AttrType::kInt, true}},
                 .infer = infer_space_depth<true>, .kernel = k_space_depth<true>});
  r.add(OpSchema{.name = "DepthToSpace", .since_version = 1,
                 .attrs = {{"blocksize", AttrType::kInt, true}, {"mode", AttrType::kString}},
                 .infer = infer_space_depth<false>, .kernel = k_space_depth<false>});
}

}  // namespace ferry
