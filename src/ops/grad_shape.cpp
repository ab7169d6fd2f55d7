// Op family 'grad_shape' (domain com.ferry, see op_families.inc): backward kernels of the indexing
// ops, emitted by the gradient definitions in src/grad/shape_grads.cpp.
//
//   SliceGrad(dY, shape, starts, ends, [axes], [steps]): zeros of `shape` with dY written where
//       Slice(zeros, starts, ends, axes, steps) reads (Slice-10's parameters and clamping).
//   GatherGrad(dY, indices, shape; axis=0): zeros of `shape` with each slice of dY added at the
//       index it was gathered from (repeated indices add up; negative indices count from the end).
//
// Every index and length is checked against `shape`; a mismatch is an error naming the node.
#include <algorithm>
#include <string>
#include <vector>

#include "ops/data_movement.h"
#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using dm::input_desc;
using dm::shape_str;
using std::string;
using std::vector;

// Output type from the `shape` input (input `i`): its value when known, else its length.
Status infer_from_shape_input(InferContext& ctx, int64_t i, DType dt) {
  if (const Tensor* v = ctx.input_value(i)) {
    vector<int64_t> dims;
    if (!dm::read_ints(*v, &dims) || v->rank() != 1)
      return ctx.error(input_desc(ctx.node(), i) + " (shape) must be a 1-D integer tensor");
    for (int64_t d : dims)
      if (d < 0) return ctx.error(input_desc(ctx.node(), i) + " (shape) " + shape_str(dims) + " has a negative dim");
    ctx.set_output(0, TensorType{dt, Shape::of(dims)});
    return Status::ok();
  }
  const int64_t len = dm::static_length_1d(ctx, i);
  ctx.set_output(0, TensorType{dt, len >= 0 ? std::optional<Shape>(dm::unknown_shape(len)) : std::nullopt});
  return Status::ok();
}

Status read_shape(const KernelContext& ctx, int64_t i, vector<int64_t>* dims) {
  RETURN_IF_ERROR(dm::int_values(ctx, ctx.input(i), i, dims));
  for (int64_t d : *dims)
    if (d < 0) return ctx.error(input_desc(ctx.node(), i) + " (shape) " + shape_str(*dims) + " has a negative dim");
  RETURN_IF_ERROR(checked_element_count(*dims, ctx.node().describe() + " output").status());
  return Status::ok();
}

// ---- SliceGrad -------------------------------------------------------------------------------

Status infer_slice_grad(InferContext& ctx) {
  return infer_from_shape_input(ctx, 1, dm::input_dtype(ctx, 0));
}

Status k_slice_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  vector<int64_t> dims, starts, ends, axes, steps;
  RETURN_IF_ERROR(read_shape(ctx, 1, &dims));
  RETURN_IF_ERROR(dm::int_values(ctx, ctx.input(2), 2, &starts));
  RETURN_IF_ERROR(dm::int_values(ctx, ctx.input(3), 3, &ends));
  const size_t n = starts.size();
  if (ends.size() != n)
    return ctx.error("starts " + shape_str(starts) + " and ends " + shape_str(ends) + " differ in length");
  if (ctx.has_input(4)) {
    RETURN_IF_ERROR(dm::int_values(ctx, ctx.input(4), 4, &axes));
    if (axes.size() != n) return ctx.error("axes " + shape_str(axes) + " must have as many entries as starts " + shape_str(starts));
  } else {
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (ctx.has_input(5)) {
    RETURN_IF_ERROR(dm::int_values(ctx, ctx.input(5), 5, &steps));
    if (steps.size() != n) return ctx.error("steps " + shape_str(steps) + " must have as many entries as starts " + shape_str(starts));
  } else {
    steps.assign(n, 1);
  }
  const int64_t rank = static_cast<int64_t>(dims.size());
  vector<bool> seen(dims.size(), false);
  const vector<int64_t> out_strides = strides_of(dims);
  vector<int64_t> slice_dims = dims, strides = out_strides;
  int64_t base = 0;
  for (size_t i = 0; i < n; ++i) {
    int64_t a = axes[i];
    if (!normalize_axis(&a, rank))
      return ctx.error("axes: axis " + std::to_string(axes[i]) + " is out of range for rank " + std::to_string(rank));
    if (seen[static_cast<size_t>(a)]) return ctx.error("axes: axis " + std::to_string(axes[i]) + " is repeated");
    seen[static_cast<size_t>(a)] = true;
    if (steps[i] == 0) return ctx.error("steps " + shape_str(steps) + " contain 0");
    int64_t first = 0, len = 0;
    slice_axis_range(starts[i], ends[i], steps[i], dims[static_cast<size_t>(a)], &first, &len);
    slice_dims[static_cast<size_t>(a)] = len;
    base += first * out_strides[static_cast<size_t>(a)];
    strides[static_cast<size_t>(a)] = out_strides[static_cast<size_t>(a)] * steps[i];
  }
  if (dy.dims() != slice_dims)
    return ctx.error("dY has shape " + shape_str(dy.dims()) + " but slicing " + shape_str(dims) + " gives " +
                     shape_str(slice_dims) + "; pass the forward Slice's input shape and parameters");
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, dy.dtype(), dims, true));
  return dm::visit_storage(dy.dtype(), [&](auto tag) -> Status {
    using S = typename decltype(tag)::type;
    const S* in = dm::elems<S>(dy);
    S* o = dm::mut_elems<S>(*out);
    for (BroadcastIter it(dy.dims(), {strides}); !it.done(); it.next()) o[base + it.offset(0)] = in[it.index()];
    return Status::ok();
  });
}

// ---- GatherGrad ------------------------------------------------------------------------------

Status infer_gather_grad(InferContext& ctx) {
  const DType dt = dm::input_dtype(ctx, 0);
  if (dt != DType::kUndefined && !dtype_is_float(dt))
    return ctx.error(string("input 0 (dY) has element type ") + dtype_name(dt) + "; expected a float type");
  if (const TensorType* it = dm::input_type_or_null(ctx, 1);
      it && it->dtype != DType::kUndefined && !dtype_is_integer(it->dtype))
    return ctx.error(input_desc(ctx.node(), 1) + " (indices) must be int32 or int64, got " + dtype_name(it->dtype));
  RETURN_IF_ERROR(infer_from_shape_input(ctx, 2, dt));
  const TensorType& out = ctx.outputs()[0];
  if (out.shape) {
    int64_t axis = ctx.get_int("axis", 0);
    if (out.shape->rank() == 0) return ctx.error("shape must have rank >= 1 (Gather's data)");
    if (!normalize_axis(&axis, out.shape->rank()))
      return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", 0)) + " is out of range for rank " +
                       std::to_string(out.shape->rank()));
  }
  return Status::ok();
}

Status k_gather_grad(KernelContext& ctx) {
  const Tensor& dy0 = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const DType dt = dy0.dtype();
  if (!dtype_is_float(dt)) return ctx.error(string("input 0 (dY) has element type ") + dtype_name(dt) + "; expected a float type");
  if (!dtype_is_integer(idx.dtype()))
    return ctx.error(input_desc(ctx.node(), 1) + " (indices) must be int32 or int64, got " + dtype_name(idx.dtype()));
  vector<int64_t> dims;
  RETURN_IF_ERROR(read_shape(ctx, 2, &dims));
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (rank == 0) return ctx.error("shape must have rank >= 1 (Gather's data)");
  int64_t axis = ctx.get_int("axis", 0);
  if (!normalize_axis(&axis, rank))
    return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", 0)) + " is out of range for rank " +
                     std::to_string(rank));
  vector<int64_t> expect(dims.begin(), dims.begin() + axis);
  expect.insert(expect.end(), idx.dims().begin(), idx.dims().end());
  expect.insert(expect.end(), dims.begin() + axis + 1, dims.end());
  if (dy0.dims() != expect)
    return ctx.error("dY has shape " + shape_str(dy0.dims()) + " but gathering " + shape_str(idx.dims()) + " indices from " +
                     shape_str(dims) + " along axis " + std::to_string(axis) + " gives " + shape_str(expect));
  const int64_t s = dims[static_cast<size_t>(axis)];
  vector<int64_t> ind = idx.to_int64_vector();
  for (int64_t& v : ind) {
    if (v < -s || v >= s)
      return ctx.error("index " + std::to_string(v) + " is out of range for axis " + std::to_string(axis) + " of size " +
                       std::to_string(s) + " (valid: [" + std::to_string(-s) + ", " + std::to_string(s - 1) + "])");
    if (v < 0) v += s;
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= dims[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= dims[static_cast<size_t>(d)];
  const int64_t n = static_cast<int64_t>(ind.size());
  // Sums in double (the oracle), then rounds once to the element type.
  const Tensor dy = widen_to_f32(dy0);
  Tensor sum;
  if (dt == DType::kF64) {
    ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, dt, dims, true));
    sum = *out;  // shares storage with the output
  } else {
    sum = Tensor::allocate(DType::kF64, dims);
  }
  double* acc = sum.mutable_data<double>();
  auto scatter = [&](const auto* p) {
    for (int64_t b = 0; b < outer; ++b)
      for (int64_t k = 0; k < n; ++k) {
        const auto* src = p + (b * n + k) * inner;
        double* dst = acc + (b * s + ind[static_cast<size_t>(k)]) * inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] += static_cast<double>(src[i]);
      }
  };
  if (dy.dtype() == DType::kF64) scatter(dy.data<double>());
  else scatter(dy.data<float>());
  if (dt != DType::kF64) {
    ASSIGN_OR_RETURN(Tensor r, cast_tensor(sum, dt));
    ctx.set_output(0, std::move(r));
  }
  return Status::ok();
}

}  // namespace

void register_grad_shape_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "SliceGrad", .domain = "com.ferry", .since_version = 1, .min_inputs = 4, .max_inputs = 6,
                 .infer = infer_slice_grad, .kernel = k_slice_grad});
  r.add(OpSchema{.name = "GatherGrad", .domain = "com.ferry", .since_version = 1, .min_inputs = 3, .max_inputs = 3,
                 .attrs = {{"axis", AttrType::kInt}}, .types = kFloatTypes, .infer = infer_gather_grad,
                 .kernel = k_gather_grad});
}

}  // namespace ferry
