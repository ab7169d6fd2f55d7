// Op family 'tensor_selection' (see op_families.inc): elements picked by value, mask or position:
// TopK, NonZero, OneHot, Compress, ReverseSequence, Unique, Trilu.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

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

// Copies elements of `src` at flat offsets `offs` into a new tensor of `dims` (any dtype).
StatusOr<Tensor> gather_flat(const Tensor& src, const vector<int64_t>& offs, const vector<int64_t>& dims) {
  Tensor out = Tensor::allocate(src.dtype(), dims);
  RETURN_IF_ERROR(dm::visit_storage(src.dtype(), [&](auto tag) -> Status {
    using S = typename decltype(tag)::type;
    const S* in = dm::elems<S>(src);
    S* o = dm::mut_elems<S>(out);
    for (size_t i = 0; i < offs.size(); ++i) o[i] = in[offs[i]];
    return Status::ok();
  }));
  return out;
}

// ---- TopK -------------------------------------------------------------------------------------

// NaN orders above every number (as numpy's sort places it last).
template <typename T>
bool greater_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
  }
  return a > b;
}

template <typename Ctx>
Status topk_k(const Ctx& ctx, const Tensor* kv, int64_t* k) {
  if (ctx.opset() < 10) {
    if (!ctx.has("k")) return ctx.error("attribute k is required");
    *k = ctx.get_int("k", 0);
    return Status::ok();
  }
  if (!kv) return ctx.error("input 1 (K) is required");
  if (kv->numel() != 1 || !dtype_is_integer(kv->dtype()))
    return ctx.error(input_desc(ctx.node(), 1) + " (K) must be a 1-element int64 tensor, got " + kv->type().to_string());
  *k = kv->get_int64(0);
  return Status::ok();
}

template <typename T>
void topk_lines(const T* p, int64_t outer, int64_t len, int64_t inner, int64_t k, bool largest, vector<int64_t>* sel) {
  vector<int64_t> idx(static_cast<size_t>(len));
  vector<T> line(static_cast<size_t>(len));
  sel->resize(static_cast<size_t>(outer * k * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t j = 0; j < len; ++j) line[j] = p[(o * len + j) * inner + i];
      std::iota(idx.begin(), idx.end(), int64_t(0));
      auto cmp = [&](int64_t a, int64_t b) {
        const T va = line[a], vb = line[b];
        if (largest ? greater_nan(va, vb) : greater_nan(vb, va)) return true;
        if (largest ? greater_nan(vb, va) : greater_nan(va, vb)) return false;
        return a < b;  // ties: the lower index first
      };
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), cmp);
      for (int64_t j = 0; j < k; ++j) (*sel)[(o * k + j) * inner + i] = idx[j];
    }
}

Status k_topk(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() == 0) return ctx.error("input must have rank >= 1");
  int64_t axis = ctx.get_int("axis", -1);
  if (!normalize_axis(&axis, x.rank()))
    return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", -1)) + " is out of range for rank " +
                     std::to_string(x.rank()));
  int64_t k = 0;
  RETURN_IF_ERROR(topk_k(ctx, ctx.has_input(1) ? &ctx.input(1) : nullptr, &k));
  const int64_t len = x.dim(axis);
  if (k < 0 || k > len)
    return ctx.error("K=" + std::to_string(k) + " is out of range for axis " + std::to_string(axis) + " of size " +
                     std::to_string(len));
  const bool largest = ctx.opset() < 11 || ctx.get_int("largest", 1) != 0;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  vector<int64_t> dims = x.dims();
  dims[axis] = k;
  vector<int64_t> sel;
  Tensor xf = widen_to_f32(x);
  FERRY_DISPATCH_NUMERIC(xf.dtype(), ctx, topk_lines<scalar_t>(xf.data<scalar_t>(), outer, len, inner, k, largest, &sel))
  ASSIGN_OR_RETURN(Tensor * ind, ctx.allocate_output(1, DType::kI64, dims));
  vector<int64_t> offs(sel.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t pos = (o * k + j) * inner + i;
        ind->mutable_data<int64_t>()[pos] = sel[pos];
        offs[pos] = (o * len + sel[pos]) * inner + i;
      }
  ASSIGN_OR_RETURN(Tensor vals, gather_flat(x, offs, dims));
  ctx.set_output(0, std::move(vals));
  return Status::ok();
}

Status infer_topk(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Shape* s = input_shape_or_null(ctx, 0);
  if (!s) {
    ctx.set_output(0, TensorType{dt, std::nullopt});
    ctx.set_output(1, TensorType{DType::kI64, std::nullopt});
    return Status::ok();
  }
  int64_t axis = ctx.get_int("axis", -1);
  if (!normalize_axis(&axis, s->rank()))
    return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", -1)) + " is out of range for rank " +
                     std::to_string(s->rank()));
  Shape out = *s;
  const Tensor* kv = ctx.input_value(1);
  if (ctx.opset() < 10 || kv) {
    int64_t k = 0;
    RETURN_IF_ERROR(topk_k(ctx, kv, &k));
    if (k < 0 || (s->dims[axis].is_known() && k > s->dims[axis].value))
      return ctx.error("K=" + std::to_string(k) + " is out of range for axis " + std::to_string(axis) + " of size " +
                       s->dims[axis].to_string());
    out.dims[axis] = Dim(k);
  } else {
    out.dims[axis] = Dim();
  }
  ctx.set_output(0, TensorType{dt, out});
  ctx.set_output(1, TensorType{DType::kI64, out});
  return Status::ok();
}

// ---- NonZero ----------------------------------------------------------------------------------

Status k_nonzero(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  const Tensor x = widen_to_f32(x0);
  vector<int64_t> hits;
  if (x.dtype() == DType::kBool) {
    for (int64_t i = 0; i < x.numel(); ++i)
      if (x.data<bool>()[i]) hits.push_back(i);
  } else {
    FERRY_DISPATCH_NUMERIC(x.dtype(), ctx, {
      const scalar_t* p = x.data<scalar_t>();
      for (int64_t i = 0; i < x.numel(); ++i)
        if (p[i] != scalar_t(0)) hits.push_back(i);
    })
  }
  const int64_t rank = std::max<int64_t>(x.rank(), 1);  // a scalar is treated as shape [1]
  const int64_t n = static_cast<int64_t>(hits.size());
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, DType::kI64, {rank, n}));
  int64_t* o = out->mutable_data<int64_t>();
  const vector<int64_t> dims = x.rank() == 0 ? vector<int64_t>{1} : x.dims();
  for (int64_t k = 0; k < n; ++k) {
    int64_t rem = hits[k];
    for (int64_t d = rank - 1; d >= 0; --d) {
      o[d * n + k] = rem % dims[d];
      rem /= dims[d];
    }
  }
  return Status::ok();
}

Status infer_nonzero(InferContext& ctx) {
  const Shape* s = input_shape_or_null(ctx, 0);
  Shape out = dm::unknown_shape(2);
  if (s) out.dims[0] = Dim(std::max<int64_t>(s->rank(), 1));
  ctx.set_output(0, TensorType{DType::kI64, out});
  return Status::ok();
}

// ---- OneHot -----------------------------------------------------------------------------------

template <typename Ctx>
Status onehot_depth(const Ctx& ctx, const Tensor& d, int64_t* depth) {
  if (d.numel() != 1 || d.dtype() == DType::kString || d.dtype() == DType::kBool)
    return ctx.error(input_desc(ctx.node(), 1) + " (depth) must be a numeric scalar, got " + d.type().to_string());
  const double v = d.get_double(0);
  if (!(v >= 0) || v > static_cast<double>(kMaxTensorElements))
    return ctx.error("depth " + std::to_string(v) + " must be a non-negative number");
  *depth = static_cast<int64_t>(v);
  return Status::ok();
}

Status k_onehot(KernelContext& ctx) {
  const Tensor& idx = ctx.input(0);
  const Tensor& values = ctx.input(2);
  int64_t depth;
  RETURN_IF_ERROR(onehot_depth(ctx, ctx.input(1), &depth));
  if (values.numel() != 2)
    return ctx.error(input_desc(ctx.node(), 2) + " (values) must hold [off_value, on_value], got shape " +
                     shape_str(values.dims()));
  if (idx.dtype() == DType::kString || idx.dtype() == DType::kBool)
    return ctx.error(input_desc(ctx.node(), 0) + " (indices) must be numeric");
  const int64_t r = idx.rank();
  int64_t axis = ctx.get_int("axis", -1);
  if (!normalize_axis(&axis, r + 1))
    return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", -1)) + " is out of range for output rank " +
                     std::to_string(r + 1));
  vector<int64_t> dims = idx.dims();
  dims.insert(dims.begin() + axis, depth);
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, values.dtype(), dims));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= idx.dim(d);
  for (int64_t d = axis; d < r; ++d) inner *= idx.dim(d);
  return dm::visit_storage(values.dtype(), [&](auto tag) -> Status {
    using S = typename decltype(tag)::type;
    const S off = dm::elems<S>(values)[0], on = dm::elems<S>(values)[1];
    S* o = dm::mut_elems<S>(*out);
    std::fill_n(o, out->numel(), off);
    for (int64_t b = 0; b < outer; ++b)
      for (int64_t i = 0; i < inner; ++i) {
        const double dv = idx.get_double(b * inner + i);
        if (!(dv >= -static_cast<double>(depth) && dv < static_cast<double>(depth))) continue;
        int64_t v = static_cast<int64_t>(dv);
        if (v < 0) v += depth;
        o[(b * depth + v) * inner + i] = on;
      }
    return Status::ok();
  });
}

Status infer_onehot(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 2);
  const Shape* s = input_shape_or_null(ctx, 0);
  if (!s) {
    ctx.set_output(0, TensorType{dt, std::nullopt});
    return Status::ok();
  }
  int64_t axis = ctx.get_int("axis", -1);
  if (!normalize_axis(&axis, s->rank() + 1))
    return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", -1)) + " is out of range for output rank " +
                     std::to_string(s->rank() + 1));
  Dim depth;
  if (const Tensor* dv = ctx.input_value(1)) {
    int64_t d = 0;
    RETURN_IF_ERROR(onehot_depth(ctx, *dv, &d));
    depth = Dim(d);
  }
  Shape out = *s;
  out.dims.insert(out.dims.begin() + axis, depth);
  ctx.set_output(0, TensorType{dt, out});
  return Status::ok();
}

// ---- Compress ---------------------------------------------------------------------------------

Status k_compress(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& cond = ctx.input(1);
  if (cond.rank() != 1 || cond.dtype() == DType::kString)
    return ctx.error(input_desc(ctx.node(), 1) + " (condition) must be a 1-D bool tensor, got " + cond.type().to_string());
  const bool has_axis = ctx.has("axis");
  int64_t axis = ctx.get_int("axis", 0);
  if (has_axis && !normalize_axis(&axis, x.rank()))
    return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", 0)) + " is out of range for rank " +
                     std::to_string(x.rank()));
  const Tensor src = has_axis ? x : x.reshaped({x.numel()});
  if (!has_axis) axis = 0;
  const int64_t len = src.dim(axis);
  if (cond.numel() > len)
    return ctx.error("condition has " + std::to_string(cond.numel()) + " entries but the axis has size " +
                     std::to_string(len));
  vector<int64_t> keep;
  for (int64_t i = 0; i < cond.numel(); ++i)
    if (cond.get_double(i) != 0) keep.push_back(i);
  vector<vector<int64_t>> maps(static_cast<size_t>(src.rank()));
  vector<int64_t> dims = src.dims();
  dims[axis] = static_cast<int64_t>(keep.size());
  for (int64_t d = 0; d < src.rank(); ++d) {
    if (d == axis) {
      maps[d] = keep;
    } else {
      maps[d].resize(static_cast<size_t>(dims[d]));
      std::iota(maps[d].begin(), maps[d].end(), int64_t(0));
    }
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), dims));
  return dm::axis_map_gather(src, maps, Tensor(), out);
}

Status infer_compress(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Shape* s = input_shape_or_null(ctx, 0);
  if (!ctx.has("axis")) {
    ctx.set_output(0, TensorType{dt, dm::unknown_shape(1)});
    return Status::ok();
  }
  if (!s) {
    ctx.set_output(0, TensorType{dt, std::nullopt});
    return Status::ok();
  }
  int64_t axis = ctx.get_int("axis", 0);
  if (!normalize_axis(&axis, s->rank()))
    return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", 0)) + " is out of range for rank " +
                     std::to_string(s->rank()));
  Shape out = *s;
  out.dims[axis] = Dim();
  ctx.set_output(0, TensorType{dt, out});
  return Status::ok();
}

// ---- ReverseSequence --------------------------------------------------------------------------

template <typename Ctx>
Status rs_axes(const Ctx& ctx, int64_t rank, int64_t* batch, int64_t* time) {
  *batch = ctx.get_int("batch_axis", 1);
  *time = ctx.get_int("time_axis", 0);
  if (rank < 2) return ctx.error("input must have rank >= 2");
  if (!((*batch == 0 && *time == 1) || (*batch == 1 && *time == 0)))
    return ctx.error("batch_axis=" + std::to_string(*batch) + " and time_axis=" + std::to_string(*time) +
                     " must be 0 and 1 in some order");
  return Status::ok();
}

Status k_reverse_sequence(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& lens_t = ctx.input(1);
  int64_t batch_axis, time_axis;
  RETURN_IF_ERROR(rs_axes(ctx, x.rank(), &batch_axis, &time_axis));
  const int64_t nb = x.dim(batch_axis), nt = x.dim(time_axis);
  if (!dtype_is_integer(lens_t.dtype()) || lens_t.rank() != 1 || lens_t.numel() != nb)
    return ctx.error(input_desc(ctx.node(), 1) + " (sequence_lens) must be a 1-D integer tensor of " +
                     std::to_string(nb) + " entries, got " + lens_t.type().to_string());
  const vector<int64_t> lens = lens_t.to_int64_vector();
  for (int64_t l : lens)
    if (l < 0 || l > nt)
      return ctx.error("sequence length " + std::to_string(l) + " is outside [0, " + std::to_string(nt) + "]");
  const vector<int64_t> st = strides_of(x.dims());
  const int64_t inner = st[1];
  vector<int64_t> offs(static_cast<size_t>(x.numel()));
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t src_t = t < lens[b] ? lens[b] - 1 - t : t;
      const int64_t dst = b * st[batch_axis] + t * st[time_axis];
      const int64_t src = b * st[batch_axis] + src_t * st[time_axis];
      for (int64_t i = 0; i < inner; ++i) offs[dst + i] = src + i;
    }
  ASSIGN_OR_RETURN(Tensor y, gather_flat(x, offs, x.dims()));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

Status infer_reverse_sequence(InferContext& ctx) {
  if (const Shape* s = input_shape_or_null(ctx, 0)) {
    int64_t b, t;
    RETURN_IF_ERROR(rs_axes(ctx, s->rank(), &b, &t));
  }
  return infer_same_as_input0(ctx);
}

// ---- Unique -----------------------------------------------------------------------------------

template <typename T>
Status unique_typed(KernelContext& ctx, const Tensor& x, const Tensor& orig, bool has_axis, int64_t axis, bool sorted) {
  const Tensor src = has_axis ? x : x.reshaped({x.numel()});
  const Tensor osrc = has_axis ? orig : orig.reshaped({orig.numel()});
  if (!has_axis) axis = 0;
  const int64_t len = src.dim(axis);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= src.dim(d);
  for (int64_t d = axis + 1; d < src.rank(); ++d) inner *= src.dim(d);
  const T* p = dm::elems<T>(src);
  // Slice i = all elements with index i on the axis, in row-major order.
  auto slice_less = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T& va = p[(o * len + a) * inner + i];
        const T& vb = p[(o * len + b) * inner + i];
        if (va < vb) return true;
        if (vb < va) return false;
      }
    return false;
  };
  std::map<int64_t, int64_t, decltype(slice_less)> first(slice_less);  // slice -> first occurrence
  vector<int64_t> order, counts, inverse(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) {
    auto [it, inserted] = first.emplace(i, static_cast<int64_t>(order.size()));
    if (inserted) {
      order.push_back(i);
      counts.push_back(0);
    }
    inverse[i] = it->second;
    ++counts[it->second];
  }
  // order: unique slices by first occurrence. Sorted output reorders them.
  vector<int64_t> rank_of(order.size());
  std::iota(rank_of.begin(), rank_of.end(), int64_t(0));
  vector<int64_t> perm(order.size());
  std::iota(perm.begin(), perm.end(), int64_t(0));
  if (sorted) {
    std::sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return slice_less(order[a], order[b]); });
    for (size_t k = 0; k < perm.size(); ++k) rank_of[perm[k]] = static_cast<int64_t>(k);
  }
  const int64_t n = static_cast<int64_t>(order.size());
  vector<int64_t> dims = src.dims();
  dims[axis] = n;
  vector<int64_t> offs;
  offs.reserve(static_cast<size_t>(outer * n * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < inner; ++i) offs.push_back((o * len + order[perm[k]]) * inner + i);
  ASSIGN_OR_RETURN(Tensor y, gather_flat(osrc, offs, dims));
  ctx.set_output(0, std::move(y));
  auto out_vec = [&](int64_t slot, const vector<int64_t>& v) -> Status {
    if (slot >= ctx.num_outputs() || ctx.node().outputs[slot].empty()) return Status::ok();
    ctx.set_output(slot, Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}));
    return Status::ok();
  };
  vector<int64_t> idx_out(static_cast<size_t>(n)), cnt_out(static_cast<size_t>(n)), inv_out(inverse.size());
  for (int64_t k = 0; k < n; ++k) {
    idx_out[k] = order[perm[k]];
    cnt_out[k] = counts[perm[k]];
  }
  for (size_t i = 0; i < inverse.size(); ++i) inv_out[i] = rank_of[inverse[i]];
  RETURN_IF_ERROR(out_vec(1, idx_out));
  RETURN_IF_ERROR(out_vec(2, inv_out));
  return out_vec(3, cnt_out);
}

Status k_unique(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const bool has_axis = ctx.has("axis");
  int64_t axis = ctx.get_int("axis", 0);
  if (has_axis && !normalize_axis(&axis, x.rank()))
    return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", 0)) + " is out of range for rank " +
                     std::to_string(x.rank()));
  const bool sorted = ctx.get_int("sorted", 1) != 0;
  if (x.dtype() == DType::kString) return unique_typed<string>(ctx, x, x, has_axis, axis, sorted);
  const Tensor xf = widen_to_f32(x);
  if (xf.dtype() == DType::kBool) return unique_typed<bool>(ctx, xf, x, has_axis, axis, sorted);
  FERRY_DISPATCH_NUMERIC(xf.dtype(), ctx, return unique_typed<scalar_t>(ctx, xf, x, has_axis, axis, sorted))
  return Status::ok();
}

Status infer_unique(InferContext& ctx) {
  const DType dt = input_dtype(ctx, 0);
  const Shape* s = input_shape_or_null(ctx, 0);
  std::optional<Shape> y = dm::unknown_shape(1);
  if (ctx.has("axis")) {
    y.reset();
    if (s) {
      int64_t axis = ctx.get_int("axis", 0);
      if (!normalize_axis(&axis, s->rank()))
        return ctx.error("attribute axis=" + std::to_string(ctx.get_int("axis", 0)) + " is out of range for rank " +
                         std::to_string(s->rank()));
      y = *s;
      y->dims[axis] = Dim();
    }
  }
  ctx.set_output(0, TensorType{dt, y});
  for (int64_t i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, TensorType{DType::kI64, dm::unknown_shape(1)});
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

}  // namespace

void register_tensor_selection_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "TopK", .since_version = 1, .min_inputs = 1, .max_inputs = 1, .min_outputs = 2, .max_outputs = 2,
                 .attrs = {{"axis", AttrType::kInt}, {"k", AttrType::kInt, true}}, .infer = infer_topk, .kernel = k_topk});
  r.add(OpSchema{.name = "TopK", .since_version = 10, .min_inputs = 2, .max_inputs = 2, .min_outputs = 2,
                 .max_outputs = 2,
                 .attrs = {{"axis", AttrType::kInt}, {"largest", AttrType::kInt}, {"sorted", AttrType::kInt}},
                 .infer = infer_topk, .kernel = k_topk});
  r.add(OpSchema{.name = "NonZero", .since_version = 9, .infer = infer_nonzero, .kernel = k_nonzero});
  r.add(OpSchema{.name = "OneHot", .since_version = 9, .min_inputs = 3, .max_inputs = 3,
                 .attrs = {{"axis", AttrType::kInt}}, .infer = infer_onehot, .kernel = k_onehot});
  r.add(OpSchema{.name = "Compress", .since_version = 9, .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"axis", AttrType::kInt}}, .infer = infer_compress, .kernel = k_compress});
  r.add(OpSchema{.name = "ReverseSequence", .since_version = 10, .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"batch_axis", AttrType::kInt}, {"time_axis", AttrType::kInt}},
                 .infer = infer_reverse_sequence, .kernel = k_reverse_sequence});
  r.add(OpSchema{.name = "Unique", .since_version = 11, .min_outputs = 1, .max_outputs = 4,
                 .attrs = {{"axis", AttrType::kInt}, {"sorted", AttrType::kInt}}, .infer = infer_unique,
                 .kernel = k_unique});
  r.add(OpSchema{.name = "Trilu", .since_version = 14, .min_inputs = 1, .max_inputs = 2,
                 .attrs = {{"upper", AttrType::kInt}}, .infer = infer_same_as_input0, .kernel = k_trilu});
}

}  // namespace ferry
