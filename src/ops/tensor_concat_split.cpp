// Op family 'tensor_concat_split' (see op_families.inc): Concat (any number of inputs along one
// axis) and Split (by sizes, by an output count, or evenly), from tensor_layout's siblings.
#include <algorithm>
#include <set>

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

// ---- Concat -----------------------------------------------------------------------------------

Status k_concat(KernelContext& ctx) {
  vector<const Tensor*> ins;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.error(input_desc(ctx.node(), i) + " is empty");
    ins.push_back(&ctx.input(i));
  }
  const Tensor& first = *ins[0];
  const int64_t rank = first.rank();
  if (rank == 0) return ctx.error("cannot concatenate scalars (input 0 has rank 0)");
  int64_t axis = ctx.get_int("axis", 0);
  if (!normalize_axis(&axis, rank))
    return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", 0)) + " is out of range for rank " +
                     std::to_string(rank));
  vector<int64_t> dims = first.dims();
  dims[axis] = 0;
  for (size_t i = 0; i < ins.size(); ++i) {
    const Tensor& t = *ins[i];
    if (t.dtype() != first.dtype())
      return ctx.error(input_desc(ctx.node(), i) + " has element type " + dtype_name(t.dtype()) + ", input 0 has " +
                       dtype_name(first.dtype()));
    bool ok = t.rank() == rank;
    for (int64_t d = 0; ok && d < rank; ++d) ok = d == axis || t.dim(d) == first.dim(d);
    if (!ok)
      return ctx.error(input_desc(ctx.node(), i) + " has shape " + shape_str(t.dims()) +
                       ", which does not match input 0's shape " + shape_str(first.dims()) + " outside axis " +
                       std::to_string(axis));
    dims[axis] += t.dim(axis);
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, first.dtype(), dims));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= dims[d];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= dims[d];
  return dm::visit_storage(first.dtype(), [&](auto tag) -> Status {
    using S = typename decltype(tag)::type;
    S* o = dm::mut_elems<S>(*out);
    int64_t pos = 0;
    for (int64_t b = 0; b < outer; ++b) {
      for (const Tensor* t : ins) {
        const int64_t chunk = t->dim(axis) * inner;
        const S* src = dm::elems<S>(*t) + b * chunk;
        std::copy(src, src + chunk, o + pos);
        pos += chunk;
      }
    }
    return Status::ok();
  });
}

Status infer_concat(InferContext& ctx) {
  DType dt = DType::kUndefined;
  const Shape* ref = nullptr;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    const TensorType* t = input_type_or_null(ctx, i);
    if (!t) return ctx.error(input_desc(ctx.node(), i) + " is empty");
    if (t->dtype != DType::kUndefined) {
      if (dt != DType::kUndefined && dt != t->dtype)
        return ctx.error(input_desc(ctx.node(), i) + " has element type " + dtype_name(t->dtype) + ", expected " +
                         dtype_name(dt));
      dt = t->dtype;
    }
    if (t->shape && !ref) ref = &*t->shape;
  }
  if (!ref) {
    ctx.set_output(0, TensorType{dt, std::nullopt});
    return Status::ok();
  }
  const int64_t rank = ref->rank();
  int64_t axis = ctx.get_int("axis", 0);
  if (rank == 0) return ctx.error("cannot concatenate scalars");
  if (!normalize_axis(&axis, rank))
    return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", 0)) + " is out of range for rank " +
                     std::to_string(rank));
  vector<Dim> out = ref->dims;
  int64_t total = 0;
  bool total_known = true;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    const TensorType& t = ctx.input_type(i);
    if (!t.shape) {
      total_known = false;
      continue;
    }
    if (t.shape->rank() != rank)
      return ctx.error(input_desc(ctx.node(), i) + " has rank " + std::to_string(t.shape->rank()) + " (shape " +
                       t.shape->to_string() + "), other inputs have rank " + std::to_string(rank));
    for (int64_t d = 0; d < rank; ++d) {
      const Dim& x = t.shape->dims[d];
      if (d == axis) {
        if (x.is_known()) total += x.value;
        else total_known = false;
        continue;
      }
      if (x.is_known() && out[d].is_known() && x.value != out[d].value)
        return ctx.error(input_desc(ctx.node(), i) + " has shape " + t.shape->to_string() +
                         ", which does not match the other inputs outside axis " + std::to_string(axis));
      if (x.is_known() && !out[d].is_known()) out[d] = x;
    }
  }
  out[axis] = total_known ? Dim(total) : Dim();
  if (!total_known && ctx.num_inputs() == 1) out[axis] = ref->dims[axis];
  ctx.set_output(0, TensorType{dt, Shape(out)});
  return Status::ok();
}

// ---- Split ------------------------------------------------------------------------------------

// Split sizes for a dim of size `dim` (-1 = unknown) into `n` outputs. `split` empty = not given.
// Fills `sizes` (entries -1 when unknown).
template <typename Ctx>
Status split_sizes(const Ctx& ctx, int64_t dim, int64_t n, bool split_given, const vector<int64_t>& split,
                   vector<int64_t>* sizes) {
  if (split_given) {
    if (static_cast<int64_t>(split.size()) != n)
      return ctx.error("split " + shape_str(split) + " has " + std::to_string(split.size()) + " entries but the node has " +
                       std::to_string(n) + " outputs");
    int64_t sum = 0;
    for (int64_t s : split) {
      if (s < 0) return ctx.error("split " + shape_str(split) + " has a negative size");
      sum += s;
    }
    if (dim >= 0 && sum != dim)
      return ctx.error("split " + shape_str(split) + " sums to " + std::to_string(sum) + " but the axis has size " +
                       std::to_string(dim));
    *sizes = split;
    return Status::ok();
  }
  sizes->assign(static_cast<size_t>(n), -1);
  if (ctx.opset() >= 18 && ctx.has("num_outputs")) {
    const int64_t k = ctx.get_int("num_outputs", 0);
    if (k != n)
      return ctx.error("attribute num_outputs=" + std::to_string(k) + " but the node has " + std::to_string(n) + " outputs");
    if (dim < 0) return Status::ok();
    const int64_t chunk = (dim + n - 1) / n;
    const int64_t last = dim - chunk * (n - 1);
    if (last < 0)
      return ctx.error("cannot split an axis of size " + std::to_string(dim) + " into " + std::to_string(n) + " outputs");
    sizes->assign(static_cast<size_t>(n), chunk);
    sizes->back() = last;
    return Status::ok();
  }
  if (dim < 0) return Status::ok();
  if (dim % n != 0)
    return ctx.error("cannot split an axis of size " + std::to_string(dim) + " evenly into " + std::to_string(n) +
                     " outputs (give 'split')");
  sizes->assign(static_cast<size_t>(n), dim / n);
  return Status::ok();
}

// The split given by attribute (opset < 13) or input 1 (an empty one: not given). *known false when
// the input's value is unknown.
template <typename Ctx>
Status split_arg(const Ctx& ctx, const Tensor* value, vector<int64_t>* split, bool* given, bool* known) {
  return dm::attr_or_input_ints(ctx, "split", value, /*empty_is_absent=*/true, split, given, known);
}

Status k_split(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t axis = ctx.get_int("axis", 0);
  if (!normalize_axis(&axis, x.rank()))
    return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", 0)) + " is out of range for rank " +
                     std::to_string(x.rank()));
  vector<int64_t> split, sizes;
  bool given, known;
  RETURN_IF_ERROR(split_arg(ctx, ctx.has_input(1) ? &ctx.input(1) : nullptr, &split, &given, &known));
  RETURN_IF_ERROR(split_sizes(ctx, x.dim(axis), ctx.num_outputs(), given, split, &sizes));
  const vector<int64_t> in_strides = strides_of(x.dims());
  int64_t start = 0;
  for (int64_t k = 0; k < ctx.num_outputs(); ++k) {
    vector<int64_t> dims = x.dims();
    dims[axis] = sizes[k];
    ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(k, x.dtype(), dims));
    RETURN_IF_ERROR(dm::strided_gather(x, start * in_strides[axis], in_strides, out));
    start += sizes[k];
  }
  return Status::ok();
}

Status infer_split(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Shape* s = input_shape_or_null(ctx, 0);
  if (!s) {
    for (int64_t k = 0; k < ctx.num_outputs(); ++k) ctx.set_output(k, TensorType{dt, std::nullopt});
    return Status::ok();
  }
  int64_t axis = ctx.get_int("axis", 0);
  if (!normalize_axis(&axis, s->rank()))
    return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", 0)) + " is out of range for rank " +
                     std::to_string(s->rank()));
  vector<int64_t> split, sizes(static_cast<size_t>(ctx.num_outputs()), -1);
  bool given, known;
  RETURN_IF_ERROR(split_arg(ctx, ctx.input_value(1), &split, &given, &known));
  if (known) {
    const Dim& d = s->dims[axis];
    RETURN_IF_ERROR(split_sizes(ctx, d.is_known() ? d.value : -1, ctx.num_outputs(), given, split, &sizes));
  }
  for (int64_t k = 0; k < ctx.num_outputs(); ++k) {
    Shape o = *s;
    o.dims[axis] = sizes[k] >= 0 ? Dim(sizes[k]) : (ctx.num_outputs() == 1 ? s->dims[axis] : Dim());
    ctx.set_output(k, TensorType{dt, o});
  }
  return Status::ok();
}

}  // namespace

void register_tensor_concat_split_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "Concat", .since_version = 4, .min_inputs = 1, .max_inputs = 1 << 20,
                 .attrs = {{"axis", AttrType::kInt, true}}, .infer = infer_concat, .kernel = k_concat});
  for (int64_t v : {2, 13, 18})
    r.add(OpSchema{.name = "Split", .since_version = v, .min_inputs = 1, .max_inputs = v >= 13 ? 2 : 1,
                   .min_outputs = 1, .max_outputs = 1 << 20,
                   .attrs = {{"axis", AttrType::kInt}, {"split", AttrType::kInts}, {"num_outputs", AttrType::kInt}},
                   .infer = infer_split, .kernel = k_split});
}

}  // namespace ferry
