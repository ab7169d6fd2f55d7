// Op family 'tensor_gather_scatter' (see op_families.inc): reading and writing at indices: Gather,
// GatherElements, GatherND, Scatter, ScatterElements, ScatterND, and Slice.
// Every index read from a tensor is range-checked: an out-of-range index is an error naming the
// index, the axis and its size, never an out-of-bounds read. (Selection by value or mask: TopK,
// NonZero, OneHot, Compress, ... are in tensor_selection.cpp.)
#include <algorithm>
#include <limits>

#include "ops/data_movement.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using dm::input_desc;
using dm::input_dtype;
using dm::input_shape_or_null;
using dm::input_type_or_null;
using dm::shape_str;
using std::string;
using std::vector;

template <typename Ctx>
Status check_indices_type(const Ctx& ctx, const Tensor& t, int64_t i) {
  if (!dtype_is_integer(t.dtype()))
    return ctx.error(input_desc(ctx.node(), i) + " (indices) must be int32 or int64, got " + dtype_name(t.dtype()));
  return Status::ok();
}

// Maps index v of an axis of size n to [0, n); errors when v is outside [-n, n).
template <typename Ctx>
Status norm_index(const Ctx& ctx, int64_t v, int64_t n, int64_t axis, int64_t* out) {
  if (v < -n || v >= n)
    return ctx.error("index " + std::to_string(v) + " is out of range for axis " + std::to_string(axis) + " of size " +
                     std::to_string(n) + " (valid: [" + std::to_string(-n) + ", " + std::to_string(n - 1) + "])");
  *out = v < 0 ? v + n : v;
  return Status::ok();
}

template <typename Ctx>
Status axis_attr(const Ctx& ctx, int64_t rank, int64_t dflt, int64_t* axis) {
  const int64_t a = ctx.get_int("axis", dflt);
  *axis = a;
  if (!normalize_axis(axis, rank))
    return ctx.error("attribute axis=" + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return Status::ok();
}

// ---- Gather -----------------------------------------------------------------------------------

Status k_gather(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  RETURN_IF_ERROR(check_indices_type(ctx, idx, 1));
  if (x.rank() == 0) return ctx.error("input 0 (data) must have rank >= 1");
  int64_t axis = 0;
  RETURN_IF_ERROR(axis_attr(ctx, x.rank(), 0, &axis));
  const int64_t s = x.dim(axis), n = idx.numel();
  vector<int64_t> ind = idx.to_int64_vector();
  for (int64_t& v : ind) RETURN_IF_ERROR(norm_index(ctx, v, s, axis, &v));
  vector<int64_t> dims(x.dims().begin(), x.dims().begin() + axis);
  dims.insert(dims.end(), idx.dims().begin(), idx.dims().end());
  dims.insert(dims.end(), x.dims().begin() + axis + 1, x.dims().end());
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), dims));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  return dm::visit_storage(x.dtype(), [&](auto tag) -> Status {
    using S = typename decltype(tag)::type;
    const S* in = dm::elems<S>(x);
    S* o = dm::mut_elems<S>(*out);
    for (int64_t b = 0; b < outer; ++b)
      for (int64_t k = 0; k < n; ++k) {
        const S* src = in + (b * s + ind[k]) * inner;
        std::copy(src, src + inner, o + (b * n + k) * inner);
      }
    return Status::ok();
  });
}

Status infer_gather(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Shape* xs = input_shape_or_null(ctx, 0);
  const Shape* is = input_shape_or_null(ctx, 1);
  if (const TensorType* it = input_type_or_null(ctx, 1);
      it && it->dtype != DType::kUndefined && !dtype_is_integer(it->dtype))
    return ctx.error(input_desc(ctx.node(), 1) + " (indices) must be int32 or int64, got " + dtype_name(it->dtype));
  if (!xs || !is) {
    ctx.set_output(0, TensorType{dt, std::nullopt});
    return Status::ok();
  }
  if (xs->rank() == 0) return ctx.error("input 0 (data) must have rank >= 1");
  int64_t axis = 0;
  RETURN_IF_ERROR(axis_attr(ctx, xs->rank(), 0, &axis));
  // Constant indices can be checked now.
  if (const Tensor* iv = ctx.input_value(1); iv && xs->dims[axis].is_known()) {
    int64_t tmp;
    for (int64_t v : iv->to_int64_vector()) RETURN_IF_ERROR(norm_index(ctx, v, xs->dims[axis].value, axis, &tmp));
  }
  vector<Dim> dims(xs->dims.begin(), xs->dims.begin() + axis);
  dims.insert(dims.end(), is->dims.begin(), is->dims.end());
  dims.insert(dims.end(), xs->dims.begin() + axis + 1, xs->dims.end());
  ctx.set_output(0, TensorType{dt, Shape(dims)});
  return Status::ok();
}

// ---- GatherElements / ScatterElements ---------------------------------------------------------

// For every element of `indices` (same rank as data, dims <= data's off the axis): the flat data offset
// it addresses. Errors on out-of-range indices.
template <typename Ctx>
Status element_offsets(const Ctx& ctx, const Tensor& data, const Tensor& indices, int64_t axis, vector<int64_t>* offs) {
  RETURN_IF_ERROR(check_indices_type(ctx, indices, 1));
  if (indices.rank() != data.rank())
    return ctx.error("indices shape " + shape_str(indices.dims()) + " must have the same rank as data shape " +
                     shape_str(data.dims()));
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && indices.dim(d) > data.dim(d))
      return ctx.error("indices shape " + shape_str(indices.dims()) + " exceeds data shape " + shape_str(data.dims()) +
                       " on axis " + std::to_string(d));
  vector<int64_t> strides = strides_of(data.dims());
  const int64_t axis_stride = strides[axis], n = data.dim(axis);
  strides[axis] = 0;
  const vector<int64_t> ind = indices.to_int64_vector();
  offs->resize(ind.size());
  for (BroadcastIter it(indices.dims(), {strides}); !it.done(); it.next()) {
    int64_t v = 0;
    RETURN_IF_ERROR(norm_index(ctx, ind[it.index()], n, axis, &v));
    (*offs)[it.index()] = it.offset(0) + v * axis_stride;
  }
  return Status::ok();
}

Status k_gather_elements(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  if (x.rank() == 0) return ctx.error("input 0 (data) must have rank >= 1");
  int64_t axis = 0;
  RETURN_IF_ERROR(axis_attr(ctx, x.rank(), 0, &axis));
  vector<int64_t> offs;
  RETURN_IF_ERROR(element_offsets(ctx, x, idx, axis, &offs));
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), idx.dims()));
  return dm::visit_storage(x.dtype(), [&](auto tag) -> Status {
    using S = typename decltype(tag)::type;
    const S* in = dm::elems<S>(x);
    S* o = dm::mut_elems<S>(*out);
    for (size_t i = 0; i < offs.size(); ++i) o[i] = in[offs[i]];
    return Status::ok();
  });
}

Status infer_gather_elements(InferContext& ctx) {
  const Shape* xs = input_shape_or_null(ctx, 0);
  const Shape* is = input_shape_or_null(ctx, 1);
  if (xs && is && xs->rank() != is->rank())
    return ctx.error("indices shape " + is->to_string() + " must have the same rank as data shape " + xs->to_string());
  if (xs) {
    int64_t axis = 0;
    RETURN_IF_ERROR(axis_attr(ctx, xs->rank(), 0, &axis));
  }
  ctx.set_output(0, TensorType{input_dtype(ctx, 0), is ? std::optional<Shape>(*is) : std::nullopt});
  return Status::ok();
}

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

template <typename Ctx>
Status reduction_attr(const Ctx& ctx, Reduction* r) {
  const string s = ctx.get_string("reduction", "none");
  const int64_t opset = ctx.opset();
  if (s == "none") *r = Reduction::kNone;
  else if (s == "add" && opset >= 16) *r = Reduction::kAdd;
  else if (s == "mul" && opset >= 16) *r = Reduction::kMul;
  else if (s == "max" && opset >= 18) *r = Reduction::kMax;
  else if (s == "min" && opset >= 18) *r = Reduction::kMin;
  else return ctx.error("attribute reduction='" + s + "' is not supported at opset " + std::to_string(opset));
  return Status::ok();
}

template <typename T>
void reduce_into(T* out, const T* upd, const vector<int64_t>& targets, int64_t chunk, Reduction r) {
  for (size_t k = 0; k < targets.size(); ++k) {
    T* o = out + targets[k];
    const T* u = upd + static_cast<int64_t>(k) * chunk;
    for (int64_t j = 0; j < chunk; ++j) {
      switch (r) {
        case Reduction::kAdd: o[j] = static_cast<T>(o[j] + u[j]); break;
        case Reduction::kMul: o[j] = static_cast<T>(o[j] * u[j]); break;
        case Reduction::kMax: o[j] = std::max(o[j], u[j]); break;
        case Reduction::kMin: o[j] = std::min(o[j], u[j]); break;
        case Reduction::kNone: o[j] = u[j]; break;
      }
    }
  }
}

// Writes `updates` (chunks of `chunk` elements) into a copy of `data` at `targets` with reduction r.
Status scatter_apply(KernelContext& ctx, const Tensor& data, const Tensor& updates, const vector<int64_t>& targets,
                     int64_t chunk, Reduction r) {
  if (updates.dtype() != data.dtype())
    return ctx.error(string("updates have element type ") + dtype_name(updates.dtype()) + ", data has " +
                     dtype_name(data.dtype()));
  if (r == Reduction::kNone) {
    Tensor out = data.clone();
    RETURN_IF_ERROR(dm::visit_storage(data.dtype(), [&](auto tag) -> Status {
      using S = typename decltype(tag)::type;
      S* o = dm::mut_elems<S>(out);
      const S* u = dm::elems<S>(updates);
      for (size_t k = 0; k < targets.size(); ++k)
        std::copy(u + static_cast<int64_t>(k) * chunk, u + (static_cast<int64_t>(k) + 1) * chunk, o + targets[k]);
      return Status::ok();
    }));
    ctx.set_output(0, std::move(out));
    return Status::ok();
  }
  const DType dt = data.dtype();
  Tensor out = widen_to_f32(data).clone();
  Tensor upd = widen_to_f32(updates);
  if (out.dtype() == DType::kBool) return ctx.error("reductions are not supported for bool data");
  FERRY_DISPATCH_NUMERIC(out.dtype(), ctx,
                         reduce_into<scalar_t>(out.mutable_data<scalar_t>(), upd.data<scalar_t>(), targets, chunk, r))
  if (out.dtype() != dt) {
    ASSIGN_OR_RETURN(out, cast_tensor(out, dt));
  }
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

Status k_scatter_elements(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  if (x.rank() == 0) return ctx.error("input 0 (data) must have rank >= 1");
  Reduction r = Reduction::kNone;
  if (ctx.node().op_type != "Scatter") RETURN_IF_ERROR(reduction_attr(ctx, &r));
  int64_t axis = 0;
  RETURN_IF_ERROR(axis_attr(ctx, x.rank(), 0, &axis));
  if (upd.dims() != idx.dims())
    return ctx.error("updates shape " + shape_str(upd.dims()) + " must equal indices shape " + shape_str(idx.dims()));
  vector<int64_t> offs;
  RETURN_IF_ERROR(element_offsets(ctx, x, idx, axis, &offs));
  return scatter_apply(ctx, x, upd, offs, 1, r);
}

Status infer_scatter(InferContext& ctx) {
  if (ctx.node().op_type != "Scatter") {
    Reduction r;
    RETURN_IF_ERROR(reduction_attr(ctx, &r));
  }
  return infer_same_as_input0(ctx);
}

// ---- GatherND / ScatterND ---------------------------------------------------------------------

Status k_gather_nd(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  RETURN_IF_ERROR(check_indices_type(ctx, idx, 1));
  const int64_t b = ctx.opset() >= 12 ? ctx.get_int("batch_dims", 0) : 0;
  const int64_t r = x.rank(), q = idx.rank();
  if (q < 1) return ctx.error("indices must have rank >= 1");
  if (b < 0 || b >= q || b >= r)
    return ctx.error("batch_dims=" + std::to_string(b) + " must be less than the ranks of data and indices");
  const int64_t m = idx.dim(q - 1);
  if (m < 1 || b + m > r)
    return ctx.error("indices shape " + shape_str(idx.dims()) + ": the last dimension (" + std::to_string(m) +
                     ") must be in [1, " + std::to_string(r - b) + "] for data shape " + shape_str(x.dims()));
  for (int64_t d = 0; d < b; ++d)
    if (x.dim(d) != idx.dim(d))
      return ctx.error("batch dimensions of data " + shape_str(x.dims()) + " and indices " + shape_str(idx.dims()) +
                       " differ");
  vector<int64_t> dims(idx.dims().begin(), idx.dims().end() - 1);
  dims.insert(dims.end(), x.dims().begin() + b + m, x.dims().end());
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), dims));
  int64_t batches = 1, tuples = 1, slice = 1;
  for (int64_t d = 0; d < b; ++d) batches *= x.dim(d);
  for (int64_t d = b; d < q - 1; ++d) tuples *= idx.dim(d);
  for (int64_t d = b + m; d < r; ++d) slice *= x.dim(d);
  const vector<int64_t> xs = strides_of(x.dims());
  const int64_t batch_stride = b > 0 ? xs[b - 1] : 0;
  const vector<int64_t> ind = idx.to_int64_vector();
  vector<int64_t> src(static_cast<size_t>(batches * tuples));
  for (int64_t bi = 0; bi < batches; ++bi)
    for (int64_t t = 0; t < tuples; ++t) {
      const int64_t row = bi * tuples + t;
      int64_t off = bi * batch_stride;
      for (int64_t j = 0; j < m; ++j) {
        int64_t v = 0;
        RETURN_IF_ERROR(norm_index(ctx, ind[row * m + j], x.dim(b + j), b + j, &v));
        off += v * xs[b + j];
      }
      src[row] = off;
    }
  return dm::visit_storage(x.dtype(), [&](auto tag) -> Status {
    using S = typename decltype(tag)::type;
    const S* in = dm::elems<S>(x);
    S* o = dm::mut_elems<S>(*out);
    for (size_t k = 0; k < src.size(); ++k) std::copy(in + src[k], in + src[k] + slice, o + static_cast<int64_t>(k) * slice);
    return Status::ok();
  });
}

Status infer_gather_nd(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Shape* xs = input_shape_or_null(ctx, 0);
  const Shape* is = input_shape_or_null(ctx, 1);
  const int64_t b = ctx.opset() >= 12 ? ctx.get_int("batch_dims", 0) : 0;
  if (!xs || !is || is->rank() < 1 || !is->dims.back().is_known()) {
    ctx.set_output(0, TensorType{dt, std::nullopt});
    return Status::ok();
  }
  const int64_t m = is->dims.back().value;
  if (b < 0 || b >= is->rank() || m < 1 || b + m > xs->rank())
    return ctx.error("indices shape " + is->to_string() + " does not fit data shape " + xs->to_string() +
                     " with batch_dims=" + std::to_string(b));
  vector<Dim> dims(is->dims.begin(), is->dims.end() - 1);
  dims.insert(dims.end(), xs->dims.begin() + b + m, xs->dims.end());
  ctx.set_output(0, TensorType{dt, Shape(dims)});
  return Status::ok();
}

Status k_scatter_nd(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  RETURN_IF_ERROR(check_indices_type(ctx, idx, 1));
  Reduction red;
  RETURN_IF_ERROR(reduction_attr(ctx, &red));
  const int64_t r = x.rank(), q = idx.rank();
  if (q < 1) return ctx.error("indices must have rank >= 1");
  const int64_t k = idx.dim(q - 1);
  if (k > r) return ctx.error("indices shape " + shape_str(idx.dims()) + " has a last dimension larger than the data rank");
  vector<int64_t> expect(idx.dims().begin(), idx.dims().end() - 1);
  expect.insert(expect.end(), x.dims().begin() + k, x.dims().end());
  if (upd.dims() != expect)
    return ctx.error("updates shape " + shape_str(upd.dims()) + " must be " + shape_str(expect) + " for data shape " +
                     shape_str(x.dims()) + " and indices shape " + shape_str(idx.dims()));
  int64_t n = 1, chunk = 1;
  for (int64_t d = 0; d < q - 1; ++d) n *= idx.dim(d);
  for (int64_t d = k; d < r; ++d) chunk *= x.dim(d);
  const vector<int64_t> xs = strides_of(x.dims());
  const vector<int64_t> ind = idx.to_int64_vector();
  vector<int64_t> targets(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t v = 0;
      RETURN_IF_ERROR(norm_index(ctx, ind[i * k + j], x.dim(j), j, &v));
      off += v * xs[j];
    }
    targets[i] = off;
  }
  return scatter_apply(ctx, x, upd, targets, chunk, red);
}

// ---- Slice ------------------------------------------------------------------------------------

struct SliceParams {
  vector<int64_t> starts, ends, axes, steps;
  bool axes_given = false;
};

// Reads Slice's parameters from attributes (opset < 10) or inputs. *known false when an input value
// is unknown (shape rules); `values[i]` is the value of input i or nullptr.
template <typename Ctx>
Status slice_params(const Ctx& ctx, const vector<const Tensor*>& values, SliceParams* p, bool* known) {
  *known = true;
  if (ctx.opset() < 10) {
    p->starts = ctx.get_ints("starts");
    p->ends = ctx.get_ints("ends");
    p->axes_given = ctx.has("axes");
    p->axes = ctx.get_ints("axes");
  } else {
    const char* names[] = {"", "starts", "ends", "axes", "steps"};
    vector<int64_t>* dst[] = {nullptr, &p->starts, &p->ends, &p->axes, &p->steps};
    for (int i = 1; i <= 4; ++i) {
      const bool given = ctx.has_input(i);
      if (i == 3) p->axes_given = given;
      if (!given) {
        if (i <= 2) return ctx.error(string("input ") + std::to_string(i) + " (" + names[i] + ") is required");
        continue;
      }
      if (!values[i]) {
        *known = false;
        continue;
      }
      if (!dm::read_ints(*values[i], dst[i]) || values[i]->rank() > 1)
        return ctx.error(input_desc(ctx.node(), i) + " (" + names[i] + ") must be a 1-D integer tensor");
    }
    if (!*known) return Status::ok();
  }
  const size_t n = p->starts.size();
  if (p->ends.size() != n)
    return ctx.error("starts " + shape_str(p->starts) + " and ends " + shape_str(p->ends) + " differ in length");
  if (p->axes_given && p->axes.size() != n)
    return ctx.error("axes " + shape_str(p->axes) + " must have as many entries as starts " + shape_str(p->starts));
  if (!p->steps.empty() && p->steps.size() != n)
    return ctx.error("steps " + shape_str(p->steps) + " must have as many entries as starts " + shape_str(p->starts));
  if (!p->axes_given) {
    p->axes.resize(n);
    for (size_t i = 0; i < n; ++i) p->axes[i] = static_cast<int64_t>(i);
  }
  if (p->steps.empty()) p->steps.assign(n, 1);
  for (int64_t s : p->steps)
    if (s == 0) return ctx.error("steps " + shape_str(p->steps) + " contain 0");
  return Status::ok();
}

template <typename Ctx>
Status slice_axes(const Ctx& ctx, SliceParams* p, int64_t rank) {
  vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t& a : p->axes) {
    const int64_t orig = a;
    if (!normalize_axis(&a, rank))
      return ctx.error("axes: axis " + std::to_string(orig) + " is out of range for rank " + std::to_string(rank));
    if (seen[a]) return ctx.error("axes: axis " + std::to_string(orig) + " is repeated");
    seen[a] = true;
  }
  return Status::ok();
}

Status k_slice(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  vector<const Tensor*> values(5, nullptr);
  for (int i = 1; i <= 4; ++i) values[i] = ctx.has_input(i) ? &ctx.input(i) : nullptr;
  SliceParams p;
  bool known;
  RETURN_IF_ERROR(slice_params(ctx, values, &p, &known));
  RETURN_IF_ERROR(slice_axes(ctx, &p, x.rank()));
  const vector<int64_t> xs = strides_of(x.dims());
  vector<int64_t> dims = x.dims(), strides = xs;
  int64_t base = 0;
  for (size_t i = 0; i < p.axes.size(); ++i) {
    const int64_t a = p.axes[i];
    int64_t first = 0, len = 0;
    slice_axis_range(p.starts[i], p.ends[i], p.steps[i], x.dim(a), &first, &len);
    dims[a] = len;
    base += first * xs[a];
    strides[a] = xs[a] * p.steps[i];
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), dims));
  return dm::strided_gather(x, base, strides, out);
}

Status infer_slice(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Shape* s = input_shape_or_null(ctx, 0);
  vector<const Tensor*> values(5, nullptr);
  for (int i = 1; i <= 4; ++i) values[i] = ctx.input_value(i);
  SliceParams p;
  bool known;
  RETURN_IF_ERROR(slice_params(ctx, values, &p, &known));
  if (!s) {
    ctx.set_output(0, TensorType{dt, std::nullopt});
    return Status::ok();
  }
  Shape out = *s;
  if (!known) {
    // Only the axes may be known: the other dims pass through.
    const Tensor* av = ctx.opset() >= 10 && ctx.has_input(3) ? ctx.input_value(3) : nullptr;
    vector<int64_t> axes;
    if (av && dm::read_ints(*av, &axes)) {
      p.axes = axes;
      RETURN_IF_ERROR(slice_axes(ctx, &p, s->rank()));
      for (int64_t a : p.axes) out.dims[a] = Dim();
    } else {
      out = dm::unknown_shape(s->rank());
    }
    ctx.set_output(0, TensorType{dt, out});
    return Status::ok();
  }
  RETURN_IF_ERROR(slice_axes(ctx, &p, s->rank()));
  for (size_t i = 0; i < p.axes.size(); ++i) {
    Dim& d = out.dims[p.axes[i]];
    if (d.is_known()) {
      int64_t first = 0, len = 0;
      slice_axis_range(p.starts[i], p.ends[i], p.steps[i], d.value, &first, &len);
      d = Dim(len);
    } else if (!(p.steps[i] == 1 && p.starts[i] == 0 && p.ends[i] >= (int64_t(1) << 62))) {
      d = Dim();  // a full slice [0:INT64_MAX:1] keeps the symbol
    }
  }
  ctx.set_output(0, TensorType{dt, out});
  return Status::ok();
}

}  // namespace

void register_tensor_gather_scatter_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "Gather", .since_version = 1, .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"axis", AttrType::kInt}}, .infer = infer_gather, .kernel = k_gather});
  r.add(OpSchema{.name = "GatherElements", .since_version = 11, .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"axis", AttrType::kInt}}, .infer = infer_gather_elements, .kernel = k_gather_elements});
  r.add(OpSchema{.name = "GatherND", .since_version = 11, .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"batch_dims", AttrType::kInt}}, .infer = infer_gather_nd, .kernel = k_gather_nd});
  r.add(OpSchema{.name = "Scatter", .since_version = 9, .min_inputs = 3, .max_inputs = 3,
                 .attrs = {{"axis", AttrType::kInt}}, .infer = infer_scatter, .kernel = k_scatter_elements});
  r.add(OpSchema{.name = "ScatterElements", .since_version = 11, .min_inputs = 3, .max_inputs = 3,
                 .attrs = {{"axis", AttrType::kInt}, {"reduction", AttrType::kString}}, .infer = infer_scatter,
                 .kernel = k_scatter_elements});
  r.add(OpSchema{.name = "ScatterND", .since_version = 11, .min_inputs = 3, .max_inputs = 3,
                 .attrs = {{"reduction", AttrType::kString}}, .infer = infer_scatter, .kernel = k_scatter_nd});
  r.add(OpSchema{.name = "Slice", .since_version = 1, .min_inputs = 1, .max_inputs = 1,
                 .attrs = {{"starts", AttrType::kInts, true}, {"ends", AttrType::kInts, true}, {"axes", AttrType::kInts}},
                 .infer = infer_slice, .kernel = k_slice});
  r.add(OpSchema{.name = "Slice", .since_version = 10, .min_inputs = 3, .max_inputs = 5, .infer = infer_slice,
                 .kernel = k_slice});
}

}  // namespace ferry
