// Op family 'tensor_layout' (see op_families.inc): ops that rearrange elements without computing
// new values: Reshape, Flatten, Transpose, Squeeze, Unsqueeze, SpaceToDepth, DepthToSpace, and
// Shape / Size. (Sibling families: tensor_concat_split, tensor_construction, tensor_broadcast,
// tensor_cumsum, tensor_gather_scatter, tensor_selection.)
// Shape rules use constant inputs (shape, axes, split, repeats) to give static shapes, and Shape/Size
// publish their values so shape subgraphs of PyTorch exports fold to constants.
#include <algorithm>
#include <set>

#include "ops/data_movement.h"

namespace ferry {
namespace {

using dm::input_desc;
using dm::input_dtype;
using dm::int_values;
using dm::input_shape_or_null;
using dm::input_type_or_null;
using dm::shape_str;
using std::string;
using std::vector;

// Normalizes a list of axes against `rank`; errors name `what` on out-of-range or repeated axes.
template <typename Ctx>
Status normalize_axes(const Ctx& ctx, vector<int64_t>* axes, int64_t rank, const string& what) {
  std::set<int64_t> seen;
  for (int64_t& a : *axes) {
    const int64_t orig = a;
    if (!normalize_axis(&a, rank))
      return ctx.error(what + ": axis " + std::to_string(orig) + " is out of range for rank " + std::to_string(rank));
    if (!seen.insert(a).second) return ctx.error(what + ": axis " + std::to_string(orig) + " is repeated");
  }
  return Status::ok();
}

// ---- Reshape ----------------------------------------------------------------------------------

// Resolves a Reshape target against static input dims. Returns an error message or "".
string resolve_reshape(const vector<int64_t>& in, const vector<int64_t>& shape, bool allowzero, vector<int64_t>* out) {
  out->assign(shape.size(), 0);
  int64_t infer_at = -1;
  int64_t known = 1;
  const string both = "input shape " + shape_str(in) + " and requested shape " + shape_str(shape);
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t s = shape[i];
    if (s == -1) {
      if (infer_at >= 0) return "requested shape " + shape_str(shape) + " has more than one -1";
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    if (s < -1) return "requested shape " + shape_str(shape) + " has the invalid dimension " + std::to_string(s);
    if (s == 0 && !allowzero) {
      if (i >= in.size())
        return both + ": dimension " + std::to_string(i) + " is 0 (copy the input dimension) but the input has rank " +
               std::to_string(in.size());
      s = in[i];
    }
    (*out)[i] = s;
    if (s != 0 && known > kMaxTensorElements / s) return both + ": the requested shape is too large";
    known *= s;
  }
  const int64_t total = element_count(in);
  if (infer_at >= 0) {
    if (allowzero && std::find(shape.begin(), shape.end(), 0) != shape.end())
      return "requested shape " + shape_str(shape) + " has both 0 and -1 while allowzero=1";
    if (known == 0 || total % known != 0)
      return "cannot reshape " + both + ": " + std::to_string(total) + " elements do not fill the -1 dimension";
    (*out)[static_cast<size_t>(infer_at)] = total / known;
  } else if (known != total) {
    return "cannot reshape " + both + ": " + std::to_string(total) + " elements vs " + std::to_string(known);
  }
  return "";
}

Status k_reshape(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (!ctx.has_input(1)) return ctx.error("input 1 (shape) is required");
  vector<int64_t> shape, dims;
  RETURN_IF_ERROR(int_values(ctx, ctx.input(1), 1, &shape));
  const bool allowzero = ctx.opset() >= 14 && ctx.get_int("allowzero", 0) != 0;
  string err = resolve_reshape(x.dims(), shape, allowzero, &dims);
  if (!err.empty()) return ctx.error(err);
  ctx.set_output(0, x.reshaped(dims));
  return Status::ok();
}

Status infer_reshape(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Tensor* sv = ctx.input_value(1);
  if (!sv) {
    int64_t k = dm::static_length_1d(ctx, 1);
    ctx.set_output(0, TensorType{dt, k >= 0 ? std::optional<Shape>(dm::unknown_shape(k)) : std::nullopt});
    return Status::ok();
  }
  vector<int64_t> shape;
  RETURN_IF_ERROR(int_values(ctx, *sv, 1, &shape));
  const bool allowzero = ctx.opset() >= 14 && ctx.get_int("allowzero", 0) != 0;
  const Shape* is = input_shape_or_null(ctx, 0);
  if (is && is->is_static()) {
    vector<int64_t> dims;
    string err = resolve_reshape(is->values(), shape, allowzero, &dims);
    if (!err.empty()) return ctx.error(err);
    ctx.set_output(0, TensorType{dt, Shape::of(dims)});
    return Status::ok();
  }
  // Symbolic input: copy 0s, and solve -1 when the unknown dims cancel.
  vector<Dim> out(shape.size());
  int64_t infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t s = shape[i];
    if (s == -1) {
      if (infer_at >= 0) return ctx.error("requested shape " + shape_str(shape) + " has more than one -1");
      infer_at = static_cast<int64_t>(i);
    } else if (s < -1) {
      return ctx.error("requested shape " + shape_str(shape) + " has the invalid dimension " + std::to_string(s));
    } else if (s == 0 && !allowzero) {
      if (is && static_cast<int64_t>(i) >= is->rank())
        return ctx.error("requested shape " + shape_str(shape) + ": dimension " + std::to_string(i) +
                         " is 0 (copy the input dimension) but the input has rank " + std::to_string(is->rank()));
      if (is) out[i] = is->dims[i];
    } else {
      out[i] = Dim(s);
    }
  }
  if (infer_at >= 0 && is) {
    vector<Dim> num = is->dims;
    vector<Dim> den;
    for (size_t i = 0; i < out.size(); ++i)
      if (static_cast<int64_t>(i) != infer_at) den.push_back(out[i]);
    // Cancel equal symbols on both sides.
    for (auto it = den.begin(); it != den.end();) {
      if (!it->is_known() && !it->symbol.empty()) {
        auto m = std::find(num.begin(), num.end(), *it);
        if (m != num.end()) {
          num.erase(m);
          it = den.erase(it);
          continue;
        }
      }
      ++it;
    }
    // -1 = product(num) / product(den): known when den is known and num has at most one unknown
    // dim whose known cofactor equals den.
    const Dim pd = dm::dim_product(den);
    int64_t known = 1;
    vector<Dim> unknown;
    for (const Dim& d : num) {
      if (d.is_known()) known *= d.value;
      else unknown.push_back(d);
    }
    if (pd.is_known() && pd.value != 0) {
      if (unknown.empty()) {
        if (known % pd.value != 0)
          return ctx.error("cannot reshape input shape " + is->to_string() + " to " + shape_str(shape));
        out[static_cast<size_t>(infer_at)] = Dim(known / pd.value);
      } else if (unknown.size() == 1 && known == pd.value) {
        out[static_cast<size_t>(infer_at)] = unknown[0];
      }
    }
  }
  ctx.set_output(0, TensorType{dt, Shape(out)});
  return Status::ok();
}

// ---- Flatten ----------------------------------------------------------------------------------

template <typename Ctx>
Status flatten_axis(const Ctx& ctx, int64_t rank, int64_t* axis) {
  const int64_t a = ctx.get_int("axis", 1);
  *axis = a < 0 ? a + rank : a;
  if (*axis < 0 || *axis > rank)
    return ctx.error("attribute axis=" + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return Status::ok();
}

Status k_flatten(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t axis = 0;
  RETURN_IF_ERROR(flatten_axis(ctx, x.rank(), &axis));
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < x.rank(); ++i) (i < axis ? a : b) *= x.dim(i);
  ctx.set_output(0, x.reshaped({a, b}));
  return Status::ok();
}

Status infer_flatten(InferContext& ctx) {
  const Shape* s = input_shape_or_null(ctx, 0);
  if (!s) {
    ctx.set_output(0, TensorType{input_dtype(ctx, 0), dm::unknown_shape(2)});
    return Status::ok();
  }
  int64_t axis = 0;
  RETURN_IF_ERROR(flatten_axis(ctx, s->rank(), &axis));
  vector<Dim> a(s->dims.begin(), s->dims.begin() + axis), b(s->dims.begin() + axis, s->dims.end());
  ctx.set_output(0, TensorType{input_dtype(ctx, 0), Shape({dm::dim_product(a), dm::dim_product(b)})});
  return Status::ok();
}

// ---- Transpose --------------------------------------------------------------------------------

template <typename Ctx>
Status transpose_perm(const Ctx& ctx, int64_t rank, vector<int64_t>* perm) {
  if (!ctx.has("perm")) {
    perm->resize(static_cast<size_t>(rank));
    for (int64_t i = 0; i < rank; ++i) (*perm)[i] = rank - 1 - i;
    return Status::ok();
  }
  *perm = ctx.get_ints("perm");
  if (static_cast<int64_t>(perm->size()) != rank)
    return ctx.error("attribute perm " + shape_str(*perm) + " has " + std::to_string(perm->size()) +
                     " entries but the input has rank " + std::to_string(rank));
  vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t p : *perm) {
    if (p < 0 || p >= rank || seen[p]) return ctx.error("attribute perm " + shape_str(*perm) + " is not a permutation");
    seen[p] = true;
  }
  return Status::ok();
}

Status k_transpose(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  vector<int64_t> perm;
  RETURN_IF_ERROR(transpose_perm(ctx, x.rank(), &perm));
  // Moving only size-1 axes keeps the element order: a reshape.
  vector<int64_t> moved;
  for (int64_t p : perm)
    if (x.dim(p) != 1) moved.push_back(p);
  vector<int64_t> dims;
  for (int64_t p : perm) dims.push_back(x.dim(p));
  if (std::is_sorted(moved.begin(), moved.end())) {
    ctx.set_output(0, x.reshaped(dims));
    return Status::ok();
  }
  ASSIGN_OR_RETURN(Tensor y, dm::permute(x, perm));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

Status infer_transpose(InferContext& ctx) {
  const Shape* s = input_shape_or_null(ctx, 0);
  if (!s) {
    std::optional<Shape> shape;
    if (ctx.has("perm")) shape = dm::unknown_shape(static_cast<int64_t>(ctx.get_ints("perm").size()));
    ctx.set_output(0, TensorType{input_dtype(ctx, 0), shape});
    return Status::ok();
  }
  vector<int64_t> perm;
  RETURN_IF_ERROR(transpose_perm(ctx, s->rank(), &perm));
  vector<Dim> dims;
  for (int64_t p : perm) dims.push_back(s->dims[p]);
  ctx.set_output(0, TensorType{input_dtype(ctx, 0), Shape(dims)});
  return Status::ok();
}

// ---- Squeeze / Unsqueeze ----------------------------------------------------------------------

// Axes of Squeeze/Unsqueeze: the attribute before opset 13, input 1 from 13.
// *given: axes were specified; *known: their values are known (always true in kernels).
template <typename Ctx>
Status squeeze_axes(const Ctx& ctx, const Tensor* axes_value, vector<int64_t>* axes, bool* given, bool* known) {
  return dm::attr_or_input_ints(ctx, "axes", axes_value, /*empty_is_absent=*/false, axes, given, known);
}

// Output dims of Squeeze for static-or-symbolic dims; symbolic dims named in axes are taken to be 1.
template <typename Ctx>
Status squeeze_dims(const Ctx& ctx, const vector<Dim>& in, vector<int64_t> axes, bool given, vector<Dim>* out,
                    bool* rank_known) {
  *rank_known = true;
  const int64_t r = static_cast<int64_t>(in.size());
  out->clear();
  if (!given) {
    for (const Dim& d : in) {
      if (!d.is_known()) *rank_known = false;
      if (!(d.is_known() && d.value == 1)) out->push_back(d);
    }
    return Status::ok();
  }
  RETURN_IF_ERROR(normalize_axes(ctx, &axes, r, "axes"));
  vector<bool> drop(static_cast<size_t>(r), false);
  for (int64_t a : axes) {
    if (in[a].is_known() && in[a].value != 1)
      return ctx.error("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(in[a].value) +
                       " (input shape " + Shape(in).to_string() + ")");
    drop[a] = true;
  }
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) out->push_back(in[i]);
  return Status::ok();
}

Status k_squeeze(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  vector<int64_t> axes;
  bool given, known;
  RETURN_IF_ERROR(squeeze_axes(ctx, ctx.has_input(1) ? &ctx.input(1) : nullptr, &axes, &given, &known));
  vector<Dim> out;
  bool rank_known;
  RETURN_IF_ERROR(squeeze_dims(ctx, Shape::of(x.dims()).dims, axes, given, &out, &rank_known));
  ctx.set_output(0, x.reshaped(Shape(out).values()));
  return Status::ok();
}

Status infer_squeeze(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Shape* s = input_shape_or_null(ctx, 0);
  vector<int64_t> axes;
  bool given, known;
  RETURN_IF_ERROR(squeeze_axes(ctx, ctx.input_value(1), &axes, &given, &known));
  if (!s) {
    ctx.set_output(0, TensorType{dt, std::nullopt});
    return Status::ok();
  }
  if (!known) {
    int64_t k = dm::static_length_1d(ctx, 1);
    ctx.set_output(0, TensorType{dt, k >= 0 && k <= s->rank() ? std::optional<Shape>(dm::unknown_shape(s->rank() - k))
                                                              : std::nullopt});
    return Status::ok();
  }
  vector<Dim> out;
  bool rank_known;
  RETURN_IF_ERROR(squeeze_dims(ctx, s->dims, axes, given, &out, &rank_known));
  ctx.set_output(0, TensorType{dt, rank_known ? std::optional<Shape>(Shape(out)) : std::nullopt});
  return Status::ok();
}

template <typename Ctx>
Status unsqueeze_dims(const Ctx& ctx, const vector<Dim>& in, vector<int64_t> axes, vector<Dim>* out) {
  const int64_t r = static_cast<int64_t>(in.size()) + static_cast<int64_t>(axes.size());
  RETURN_IF_ERROR(normalize_axes(ctx, &axes, r, "axes"));
  vector<bool> inserted(static_cast<size_t>(r), false);
  for (int64_t a : axes) inserted[a] = true;
  out->clear();
  size_t k = 0;
  for (int64_t i = 0; i < r; ++i) out->push_back(inserted[i] ? Dim(1) : in[k++]);
  return Status::ok();
}

Status k_unsqueeze(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  vector<int64_t> axes;
  bool given, known;
  RETURN_IF_ERROR(squeeze_axes(ctx, ctx.has_input(1) ? &ctx.input(1) : nullptr, &axes, &given, &known));
  if (!given) return ctx.error(ctx.opset() < 13 ? "attribute axes is required" : "input 1 (axes) is required");
  vector<Dim> out;
  RETURN_IF_ERROR(unsqueeze_dims(ctx, Shape::of(x.dims()).dims, axes, &out));
  ctx.set_output(0, x.reshaped(Shape(out).values()));
  return Status::ok();
}

Status infer_unsqueeze(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Shape* s = input_shape_or_null(ctx, 0);
  vector<int64_t> axes;
  bool given, known;
  RETURN_IF_ERROR(squeeze_axes(ctx, ctx.input_value(1), &axes, &given, &known));
  if (!given) return ctx.error(ctx.opset() < 13 ? "attribute axes is required" : "input 1 (axes) is required");
  if (!s || !known) {
    int64_t k = known ? static_cast<int64_t>(axes.size()) : dm::static_length_1d(ctx, 1);
    ctx.set_output(0, TensorType{dt, s && k >= 0 ? std::optional<Shape>(dm::unknown_shape(s->rank() + k)) : std::nullopt});
    return Status::ok();
  }
  vector<Dim> out;
  RETURN_IF_ERROR(unsqueeze_dims(ctx, s->dims, axes, &out));
  ctx.set_output(0, TensorType{dt, Shape(out)});
  return Status::ok();
}

// ---- Shape / Size -----------------------------------------------------------------------------

void shape_range(const InferContext* ictx, const KernelContext* kctx, int64_t rank, int64_t* start, int64_t* end) {
  auto get = [&](const char* n, int64_t d) { return ictx ? ictx->get_int(n, d) : kctx->get_int(n, d); };
  const int64_t opset = ictx ? ictx->opset() : kctx->opset();
  *start = 0;
  *end = rank;
  if (opset < 15) return;
  *start = get("start", 0);
  *end = get("end", rank);
  if (*start < 0) *start += rank;
  if (*end < 0) *end += rank;
  *start = std::clamp<int64_t>(*start, 0, rank);
  *end = std::clamp<int64_t>(*end, 0, rank);
  if (*end < *start) *end = *start;
}

Status k_shape(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t start = 0, end = 0;
  shape_range(nullptr, &ctx, x.rank(), &start, &end);
  vector<int64_t> v(x.dims().begin() + start, x.dims().begin() + end);
  ctx.set_output(0, Tensor::from_vector<int64_t>(v, {end - start}));
  return Status::ok();
}

Status infer_shape(InferContext& ctx) {
  const Shape* s = input_shape_or_null(ctx, 0);
  if (!s) {
    ctx.set_output(0, TensorType{DType::kI64, dm::unknown_shape(1)});
    return Status::ok();
  }
  int64_t start = 0, end = 0;
  shape_range(&ctx, nullptr, s->rank(), &start, &end);
  ctx.set_output(0, TensorType{DType::kI64, Shape::of({end - start})});
  Shape part(vector<Dim>(s->dims.begin() + start, s->dims.begin() + end));
  if (part.is_static()) ctx.set_output_value(0, Tensor::from_vector<int64_t>(part.values(), {end - start}));
  return Status::ok();
}

Status k_size(KernelContext& ctx) {
  ctx.set_output(0, Tensor::scalar<int64_t>(ctx.input(0).numel()));
  return Status::ok();
}

Status infer_size(InferContext& ctx) {
  ctx.set_output(0, TensorType{DType::kI64, Shape()});
  const Shape* s = input_shape_or_null(ctx, 0);
  if (s && s->is_static()) ctx.set_output_value(0, Tensor::scalar<int64_t>(element_count(s->values())));
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

void register_tensor_layout_ops(OpRegistry& r) {
  for (int64_t v : {5, 14})
    r.add(OpSchema{.name = "Reshape", .since_version = v, .min_inputs = 2, .max_inputs = 2,
                   .attrs = {{"allowzero", AttrType::kInt}}, .infer = infer_reshape, .kernel = k_reshape});
  r.add(OpSchema{.name = "Flatten", .since_version = 1, .attrs = {{"axis", AttrType::kInt}}, .infer = infer_flatten,
                 .kernel = k_flatten});
  r.add(OpSchema{.name = "Transpose", .since_version = 1, .attrs = {{"perm", AttrType::kInts}}, .infer = infer_transpose,
                 .kernel = k_transpose});
  for (int64_t v : {1, 13}) {
    const int max_in = v >= 13 ? 2 : 1;
    r.add(OpSchema{.name = "Squeeze", .since_version = v, .min_inputs = 1, .max_inputs = max_in,
                   .attrs = {{"axes", AttrType::kInts}}, .infer = infer_squeeze, .kernel = k_squeeze});
    r.add(OpSchema{.name = "Unsqueeze", .since_version = v, .min_inputs = max_in, .max_inputs = max_in,
                   .attrs = {{"axes", AttrType::kInts, v < 13}}, .infer = infer_unsqueeze, .kernel = k_unsqueeze});
  }
  r.add(OpSchema{.name = "Shape", .since_version = 1, .attrs = {{"start", AttrType::kInt}, {"end", AttrType::kInt}},
                 .infer = infer_shape, .kernel = k_shape});
  r.add(OpSchema{.name = "Size", .since_version = 1, .infer = infer_size, .kernel = k_size});
  r.add(OpSchema{.name = "SpaceToDepth", .since_version = 1, .attrs = {{"blocksize", AttrType::kInt, true}},
                 .infer = infer_space_depth<true>, .kernel = k_space_depth<true>});
  r.add(OpSchema{.name = "DepthToSpace", .since_version = 1,
                 .attrs = {{"blocksize", AttrType::kInt, true}, {"mode", AttrType::kString}},
                 .infer = infer_space_depth<false>, .kernel = k_space_depth<false>});
}

}  // namespace ferry
