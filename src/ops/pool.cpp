// Op family 'pool': MaxPool (with Indices), AveragePool, LpPool and GlobalAveragePool, GlobalMaxPool,
// GlobalLpPool, over any number of spatial axes, and MaxUnpool. f16/bf16 are computed in f32 and rounded back.
//
// A window of output position o covers input positions start + k * dilation (start = o * stride -
// pad_begin) on every axis; positions in the padding are skipped (MaxPool, LpPool: as if -inf / 0;
// AveragePool divides by the count of real elements, or with count_include_pad by the count of
// positions inside the padded input, [-pad_begin, in + pad_end), as PyTorch and onnxruntime do).
#include <cmath>
#include <limits>
#include <optional>

#include "ops/conv_pool_util.h"
#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

const vector<DType> kMaxPoolTypes = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI8, DType::kU8};

enum class PoolKind { kMax, kAverage, kLp };

template <class Ctx>
Status check_pool_dtype(Ctx& ctx, DType t, bool allow_8bit) {
  if (t == DType::kUndefined || dtype_is_float(t)) return Status::ok();
  if (allow_8bit && (t == DType::kI8 || t == DType::kU8)) return Status::ok();
  return ctx.error(std::string("input 'X' has element type ") + dtype_name(t) + "; supported: f16, bf16, f32, f64" +
                   (allow_8bit ? ", i8, u8" : ""));
}

// MaxPool takes int8/uint8 from opset 12.
bool allows_8bit(PoolKind kind, int64_t opset) { return kind == PoolKind::kMax && opset >= 12; }

struct PoolInfo {
  SpatialAttrs attrs;
  std::optional<Shape> out;
  vector<AxisGeom> axes;  // filled when every spatial input dim is known
};

template <class Ctx>
Status pool_info(Ctx& ctx, PoolKind kind, const TensorType& x, PoolInfo* pi) {
  RETURN_IF_ERROR(check_pool_dtype(ctx, x.dtype, allows_8bit(kind, ctx.opset())));
  if (kind == PoolKind::kMax) {
    const int64_t so = ctx.get_int("storage_order", 0);
    if (so != 0 && so != 1) return ctx.error("attribute 'storage_order' must be 0 or 1, got " + std::to_string(so));
  }
  if (kind == PoolKind::kAverage) {
    const int64_t cip = ctx.get_int("count_include_pad", 0);
    if (cip != 0 && cip != 1)
      return ctx.error("attribute 'count_include_pad' must be 0 or 1, got " + std::to_string(cip));
  }
  if (kind == PoolKind::kLp && ctx.get_int("p", 2) < 1)
    return ctx.error("attribute 'p' must be >= 1, got " + std::to_string(ctx.get_int("p", 2)));
  if (!ctx.has("kernel_shape")) return ctx.error("required attribute 'kernel_shape' is missing");
  if (!x.shape) {
    // The rank still follows from kernel_shape.
    const int64_t nd = static_cast<int64_t>(ctx.get_ints("kernel_shape").size());
    RETURN_IF_ERROR(read_spatial_attrs(ctx, nd, nullptr, true, &pi->attrs));
    pi->out = Shape(vector<Dim>(static_cast<size_t>(nd + 2)));
    return Status::ok();
  }
  if (x.shape->rank() < 3)
    return ctx.error("input 'X' must have rank >= 3 (N x C x D1 x ... x Dn), got shape " + x.shape->to_string());
  const int64_t nd = x.shape->rank() - 2;
  RETURN_IF_ERROR(read_spatial_attrs(ctx, nd, nullptr, true, &pi->attrs));
  Shape out;
  out.dims = {x.shape->dims[0], x.shape->dims[1]};
  RETURN_IF_ERROR(conv_pool_spatial_out(ctx, pi->attrs, x, &out, &pi->axes));
  pi->out = out;
  return Status::ok();
}

template <PoolKind kKind>
Status infer_pool(InferContext& ctx) {
  PoolInfo pi;
  RETURN_IF_ERROR(pool_info(ctx, kKind, ctx.input_type(0), &pi));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, pi.out});
  if (ctx.num_outputs() > 1) ctx.set_output(1, TensorType{DType::kI64, pi.out});
  return Status::ok();
}

// Enumerates pooling windows: for output position o (row-major), the flattened input offsets of the
// real (non-padding) elements in row-major kernel order, their column-major offsets (for MaxPool's
// storage_order = 1), and the number of window positions inside the padded input.
class WindowWalker {
 public:
  WindowWalker(const SpatialAttrs& a, const vector<AxisGeom>& axes) : a_(a), axes_(axes) {
    const size_t nd = axes.size();
    rm_stride_.assign(nd, 1);
    cm_stride_.assign(nd, 1);
    for (int64_t d = static_cast<int64_t>(nd) - 2; d >= 0; --d) rm_stride_[d] = rm_stride_[d + 1] * axes[d + 1].in;
    for (size_t d = 1; d < nd; ++d) cm_stride_[d] = cm_stride_[d - 1] * axes[d - 1].in;
    pos_.resize(nd);
  }

  /// Computes the window of the output position with per-axis coordinates `o`.
  void compute(const vector<int64_t>& o) {
    offs_.assign(1, 0);
    cm_offs_.assign(1, 0);
    padded_count_ = 1;
    for (size_t d = 0; d < axes_.size(); ++d) {
      const AxisGeom& g = axes_[d];
      const int64_t start = o[d] * a_.strides[d] - g.pad_begin;
      pos_.clear();
      int64_t padded = 0;
      for (int64_t k = 0; k < a_.kernel[d]; ++k) {
        const int64_t p = start + k * a_.dilations[d];
        if (p >= -g.pad_begin && p < g.in + g.pad_end) ++padded;
        if (p >= 0 && p < g.in) pos_.push_back(p);
      }
      padded_count_ *= padded;
      tmp_.clear();
      tmp_cm_.clear();
      for (size_t t = 0; t < offs_.size(); ++t) {
        for (int64_t p : pos_) {
          tmp_.push_back(offs_[t] + p * rm_stride_[d]);
          tmp_cm_.push_back(cm_offs_[t] + p * cm_stride_[d]);
        }
      }
      offs_.swap(tmp_);
      cm_offs_.swap(tmp_cm_);
    }
  }
  const vector<int64_t>& offsets() const { return offs_; }
  const vector<int64_t>& column_major_offsets() const { return cm_offs_; }
  int64_t padded_count() const { return padded_count_; }

 private:
  const SpatialAttrs& a_;
  const vector<AxisGeom>& axes_;
  vector<int64_t> rm_stride_, cm_stride_, pos_, offs_, cm_offs_, tmp_, tmp_cm_;
  int64_t padded_count_ = 0;
};

template <typename T>
T lowest_value() {
  if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// |v|^p and sum^(1/p), exact for the common p = 1, 2.
template <typename T>
T lp_term(T v, int64_t p) {
  if (p == 1) return std::abs(v);
  if (p == 2) return v * v;
  return std::pow(std::abs(v), static_cast<T>(p));
}
template <typename T>
T lp_root(T sum, int64_t p) {
  if (p == 1) return sum;
  if (p == 2) return std::sqrt(sum);
  return std::pow(sum, T(1) / static_cast<T>(p));
}

// Runs one pooling op over all N*C planes of x (float/double/int8/uint8 T).
template <typename T>
void pool_forward(PoolKind kind, const T* x, T* y, int64_t* indices, int64_t planes, const PoolInfo& pi,
                  bool count_include_pad, int64_t p, bool column_major) {
  const vector<AxisGeom>& axes = pi.axes;
  const int64_t nd = static_cast<int64_t>(axes.size());
  int64_t IS = 1, OS = 1;
  for (const AxisGeom& g : axes) {
    IS *= g.in;
    OS *= g.out;
  }
  WindowWalker walker(pi.attrs, axes);
  vector<int64_t> o(static_cast<size_t>(nd), 0);
  for (int64_t oi = 0; oi < OS; ++oi) {
    walker.compute(o);
    const vector<int64_t>& offs = walker.offsets();
    const int64_t n = static_cast<int64_t>(offs.size());
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T* xp = x + pl * IS;
      if (kind == PoolKind::kMax) {
        // The first maximum in kernel order wins; NaN propagates (as in PyTorch).
        T m = lowest_value<T>();
        int64_t best = n > 0 ? 0 : -1;
        for (int64_t t = 0; t < n; ++t) {
          const T v = xp[offs[t]];
          if (v > m || is_nan(v)) {
            m = v;
            best = t;
          }
        }
        y[pl * OS + oi] = m;
        if (indices) {
          const vector<int64_t>& src = column_major ? walker.column_major_offsets() : offs;
          indices[pl * OS + oi] = best < 0 ? -1 : pl * IS + src[best];
        }
      } else if constexpr (std::is_floating_point_v<T>) {  // AveragePool, LpPool: float types only
        T sum = 0;
        if (kind == PoolKind::kAverage) {
          for (int64_t t = 0; t < n; ++t) sum += xp[offs[t]];
          const int64_t div = count_include_pad ? walker.padded_count() : n;
          y[pl * OS + oi] = sum / static_cast<T>(div);
        } else {
          for (int64_t t = 0; t < n; ++t) sum += lp_term(xp[offs[t]], p);
          y[pl * OS + oi] = lp_root(sum, p);
        }
      }
    }
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++o[d] < axes[d].out) break;
      o[d] = 0;
    }
  }
}

template <PoolKind kKind>
Status k_pool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  PoolInfo pi;
  RETURN_IF_ERROR(pool_info(ctx, kKind, x.type(), &pi));
  if (!pi.out || !pi.out->is_static() || static_cast<int64_t>(pi.axes.size()) != x.rank() - 2)
    return internal_error(ctx.node().describe() + ": pooling geometry is incomplete");
  const vector<int64_t> out_dims = pi.out->values();
  const DType dt = x.dtype();
  const Tensor xf = widen_to_f32(x);
  ASSIGN_OR_RETURN(Tensor y, Tensor::create(xf.dtype(), out_dims, ctx.node().describe() + " output 0"));
  int64_t* indices = nullptr;
  const bool want_indices = kKind == PoolKind::kMax && ctx.num_outputs() > 1;
  if (want_indices) {
    ASSIGN_OR_RETURN(Tensor * ind, ctx.allocate_output(1, DType::kI64, out_dims));
    indices = ind->mutable_data<int64_t>();
  }
  const int64_t planes = x.dim(0) * x.dim(1);
  const bool cip = ctx.get_int("count_include_pad", 0) != 0;
  const int64_t p = ctx.get_int("p", 2);
  const bool column_major = ctx.get_int("storage_order", 0) == 1;
  switch (xf.dtype()) {
    FERRY_DISPATCH_FLOAT_CASES(pool_forward<scalar_t>(kKind, xf.data<scalar_t>(), y.mutable_data<scalar_t>(), indices,
                                                      planes, pi, cip, p, column_major))
    FERRY_DISPATCH_CASE(kI8, int8_t, pool_forward<scalar_t>(kKind, xf.data<scalar_t>(), y.mutable_data<scalar_t>(),
                                                            indices, planes, pi, cip, p, column_major))
    FERRY_DISPATCH_CASE(kU8, uint8_t, pool_forward<scalar_t>(kKind, xf.data<scalar_t>(), y.mutable_data<scalar_t>(),
                                                             indices, planes, pi, cip, p, column_major))
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
  if (y.dtype() != dt) {
    ASSIGN_OR_RETURN(y, cast_tensor(y, dt));
  }
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

// ---- global pools ---------------------------------------------------------------------------

template <PoolKind kKind>
Status infer_global_pool(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  RETURN_IF_ERROR(check_pool_dtype(ctx, x.dtype, false));
  if (kKind == PoolKind::kLp && ctx.get_int("p", 2) < 1)
    return ctx.error("attribute 'p' must be >= 1, got " + std::to_string(ctx.get_int("p", 2)));
  std::optional<Shape> out;
  if (x.shape) {
    if (x.shape->rank() < 2)
      return ctx.error("input 'X' must have rank >= 2 (N x C x D1 x ... x Dn), got shape " + x.shape->to_string());
    Shape s = *x.shape;
    for (int64_t i = 2; i < s.rank(); ++i) s.dims[i] = Dim(1);
    out = s;
  }
  ctx.set_output(0, TensorType{x.dtype, out});
  return Status::ok();
}

template <typename T>
void global_pool_forward(PoolKind kind, const T* x, T* y, int64_t planes, int64_t size, int64_t p) {
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * size;
    if (kind == PoolKind::kMax) {
      T m = lowest_value<T>();
      for (int64_t i = 0; i < size; ++i)
        if (xp[i] > m || is_nan(xp[i])) m = xp[i];
      y[pl] = m;
    } else if (kind == PoolKind::kAverage) {
      T sum = 0;
      for (int64_t i = 0; i < size; ++i) sum += xp[i];
      y[pl] = sum / static_cast<T>(size);
    } else {
      T sum = 0;
      for (int64_t i = 0; i < size; ++i) sum += lp_term(xp[i], p);
      y[pl] = lp_root(sum, p);
    }
  }
}

template <PoolKind kKind>
Status k_global_pool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  RETURN_IF_ERROR(check_pool_dtype(ctx, x.dtype(), false));
  if (x.rank() < 2)
    return ctx.error("input 'X' must have rank >= 2 (N x C x D1 x ... x Dn), got shape " + dims_to_string(x.dims()));
  const int64_t p = ctx.get_int("p", 2);
  if (kKind == PoolKind::kLp && p < 1) return ctx.error("attribute 'p' must be >= 1, got " + std::to_string(p));
  vector<int64_t> out_dims = x.dims();
  int64_t size = 1;
  for (int64_t i = 2; i < x.rank(); ++i) {
    size *= out_dims[i];
    out_dims[i] = 1;
  }
  const DType dt = x.dtype();
  const Tensor xf = widen_to_f32(x);
  ASSIGN_OR_RETURN(Tensor y, Tensor::create(xf.dtype(), out_dims, ctx.node().describe() + " output 0"));
  const int64_t planes = x.dim(0) * x.dim(1);
  switch (xf.dtype()) {
    FERRY_DISPATCH_FLOAT_CASES(global_pool_forward<scalar_t>(kKind, xf.data<scalar_t>(), y.mutable_data<scalar_t>(),
                                                             planes, size, p))
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
  if (y.dtype() != dt) {
    ASSIGN_OR_RETURN(y, cast_tensor(y, dt));
  }
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

// ---- MaxUnpool ------------------------------------------------------------------------------

struct UnpoolAttrs {
  vector<int64_t> kernel, strides, pads;
};

template <class Ctx>
Status read_unpool_attrs(Ctx& ctx, int64_t nd, UnpoolAttrs* a) {
  if (!ctx.has("kernel_shape")) return ctx.error("required attribute 'kernel_shape' is missing");
  a->kernel = ctx.get_ints("kernel_shape");
  if (nd < 0) nd = static_cast<int64_t>(a->kernel.size());
  auto check = [&](const char* name, const vector<int64_t>& v, size_t want, int64_t lo) -> Status {
    if (v.size() != want)
      return ctx.error(std::string("attribute '") + name + "' has " + std::to_string(v.size()) + " values " +
                       dims_to_string(v) + " but " + std::to_string(want) + " are expected for " + std::to_string(nd) +
                       " spatial axes");
    for (int64_t x : v)
      if (x < lo || x > (int64_t(1) << 24))
        return ctx.error(std::string("attribute '") + name + "' " + dims_to_string(v) + " has a value out of range");
    return Status::ok();
  };
  RETURN_IF_ERROR(check("kernel_shape", a->kernel, static_cast<size_t>(nd), 1));
  a->strides = ctx.get_ints("strides", vector<int64_t>(static_cast<size_t>(nd), 1));
  RETURN_IF_ERROR(check("strides", a->strides, static_cast<size_t>(nd), 1));
  a->pads = ctx.get_ints("pads", vector<int64_t>(static_cast<size_t>(2 * nd), 0));
  RETURN_IF_ERROR(check("pads", a->pads, static_cast<size_t>(2 * nd), 0));
  return Status::ok();
}

/// Default output size of spatial axis i: (in - 1) * stride + kernel - pad_begin - pad_end.
int64_t unpool_out(const UnpoolAttrs& a, int64_t i, int64_t in) {
  const size_t nd = a.kernel.size();
  return (in - 1) * a.strides[i] + a.kernel[i] - a.pads[i] - a.pads[i + nd];
}

Status infer_maxunpool(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  const int64_t rank = x.shape ? x.shape->rank() : -1;
  if (rank >= 0 && rank < 3) return ctx.error("input 'X' must have rank >= 3 [N, C, D1, ...], got " + x.shape->to_string());
  UnpoolAttrs a;
  RETURN_IF_ERROR(read_unpool_attrs(ctx, rank >= 0 ? rank - 2 : -1, &a));
  const int64_t r = static_cast<int64_t>(a.kernel.size()) + 2;
  if (ctx.has_input(2)) {
    const Tensor* os = ctx.input_value(2);
    if (os) {
      vector<int64_t> v = os->to_int64_vector();
      if (static_cast<int64_t>(v.size()) != r)
        return ctx.error("input 'output_shape' has " + std::to_string(v.size()) + " values; expected " + std::to_string(r));
      for (int64_t d : v)
        if (d < 0) return ctx.error("input 'output_shape' " + dims_to_string(v) + " has a negative value");
      ctx.set_output(0, TensorType{x.dtype, Shape::of(v)});
    } else {
      ctx.set_output(0, TensorType{x.dtype, Shape(vector<Dim>(static_cast<size_t>(r)))});
    }
    return Status::ok();
  }
  Shape s;
  s.dims.push_back(dim_or_unknown(x, 0));
  s.dims.push_back(dim_or_unknown(x, 1));
  for (int64_t i = 0; i < r - 2; ++i) {
    const int64_t in = known_dim(x, i + 2);
    if (in < 0) {
      s.dims.push_back(Dim());
      continue;
    }
    const int64_t o = unpool_out(a, i, in);
    if (in == 0 || o < 0)
      return ctx.error("spatial axis " + std::to_string(i) + ": input size " + std::to_string(in) +
                       " gives output size " + std::to_string(o));
    s.dims.push_back(Dim(o));
  }
  ctx.set_output(0, TensorType{x.dtype, s});
  return Status::ok();
}

Status k_maxunpool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  if (x.rank() < 3) return ctx.error("input 'X' must have rank >= 3 [N, C, D1, ...], got " + dims_to_string(x.dims()));
  if (x.dtype() == DType::kString || x.dtype() == DType::kUndefined) return ctx.error("input 'X' must be numeric");
  if (ind.dtype() != DType::kI64 && ind.dtype() != DType::kI32) return ctx.error("input 'I' must be an int64 tensor");
  if (ind.dims() != x.dims())
    return ctx.error("input 'I' " + dims_to_string(ind.dims()) + " must have the shape of 'X' " + dims_to_string(x.dims()));
  UnpoolAttrs a;
  RETURN_IF_ERROR(read_unpool_attrs(ctx, x.rank() - 2, &a));
  vector<int64_t> inferred = {x.dim(0), x.dim(1)};
  for (int64_t i = 0; i < x.rank() - 2; ++i) {
    const int64_t o = unpool_out(a, i, x.dim(i + 2));
    if (x.dim(i + 2) == 0 || o < 0)
      return ctx.error("spatial axis " + std::to_string(i) + ": input size " + std::to_string(x.dim(i + 2)) +
                       " gives output size " + std::to_string(o));
    inferred.push_back(o);
  }
  vector<int64_t> out_dims = inferred;
  if (ctx.has_input(2)) {
    out_dims = ctx.input(2).to_int64_vector();
    if (out_dims.size() != inferred.size())
      return ctx.error("input 'output_shape' " + dims_to_string(out_dims) + " must have " +
                       std::to_string(inferred.size()) + " values");
    for (size_t i = 0; i < out_dims.size(); ++i)
      if (out_dims[i] < inferred[i] || (i < 2 && out_dims[i] != inferred[i]))
        return ctx.error("input 'output_shape' " + dims_to_string(out_dims) +
                         " must keep N and C and be at least the default output shape " + dims_to_string(inferred));
  }
  ASSIGN_OR_RETURN(int64_t inferred_n, checked_element_count(inferred, ctx.node().describe() + " output"));
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out_dims));
  const int64_t es = dtype_size(x.dtype());
  const char* px = static_cast<const char*>(x.raw());
  char* py = static_cast<char*>(y->mutable_raw());
  // The indices address the default-shaped output; it is then placed at the origin of output_shape.
  const vector<int64_t> in_str = strides_of(inferred), out_str = strides_of(out_dims);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t idx = ind.get_int64(i);
    if (idx < 0 || idx >= inferred_n)
      return ctx.error("index I[" + std::to_string(i) + "] = " + std::to_string(idx) + " is out of range [0, " +
                       std::to_string(inferred_n) + ") for the unpooled shape " + dims_to_string(inferred));
    int64_t off = 0;
    for (size_t d = 0; d < inferred.size(); ++d) {
      off += (idx / in_str[d]) * out_str[d];
      idx %= in_str[d];
    }
    std::memcpy(py + off * es, px + i * es, static_cast<size_t>(es));
  }
  return Status::ok();
}

}  // namespace

void register_pool_ops(OpRegistry& r) {
  const vector<AttrSpec> base = {{"auto_pad", AttrType::kString},
                                 {"kernel_shape", AttrType::kInts, true},
                                 {"pads", AttrType::kInts},
                                 {"strides", AttrType::kInts}};
  auto with = [&](std::initializer_list<AttrSpec> extra) {
    vector<AttrSpec> v = base;
    v.insert(v.end(), extra);
    return v;
  };
  // MaxPool-1; 8: Indices output, storage_order; 10: ceil_mode, dilations; 11: pads clarified; 12: int8/uint8.
  r.add(OpSchema{.name = "MaxPool", .since_version = 1, .attrs = base, .types = kFloatTypes,
                 .infer = infer_pool<PoolKind::kMax>, .kernel = k_pool<PoolKind::kMax>});
  r.add(OpSchema{.name = "MaxPool", .since_version = 8, .max_outputs = 2, .attrs = with({{"storage_order", AttrType::kInt}}),
                 .types = kFloatTypes, .infer = infer_pool<PoolKind::kMax>, .kernel = k_pool<PoolKind::kMax>});
  const vector<AttrSpec> max10 = with({{"storage_order", AttrType::kInt}, {"ceil_mode", AttrType::kInt}, {"dilations", AttrType::kInts}});
  for (int64_t v : {10, 11})
    r.add(OpSchema{.name = "MaxPool", .since_version = v, .max_outputs = 2, .attrs = max10, .types = kFloatTypes,
                   .infer = infer_pool<PoolKind::kMax>, .kernel = k_pool<PoolKind::kMax>});
  r.add(OpSchema{.name = "MaxPool", .since_version = 12, .max_outputs = 2, .attrs = max10, .types = kMaxPoolTypes,
                 .infer = infer_pool<PoolKind::kMax>, .kernel = k_pool<PoolKind::kMax>});

  // AveragePool-7: count_include_pad; 10: ceil_mode; 11: pads clarified; 19: dilations.
  r.add(OpSchema{.name = "AveragePool", .since_version = 7, .attrs = with({{"count_include_pad", AttrType::kInt}}),
                 .types = kFloatTypes, .infer = infer_pool<PoolKind::kAverage>, .kernel = k_pool<PoolKind::kAverage>});
  for (int64_t v : {10, 11})
    r.add(OpSchema{.name = "AveragePool", .since_version = v,
                   .attrs = with({{"count_include_pad", AttrType::kInt}, {"ceil_mode", AttrType::kInt}}),
                   .types = kFloatTypes, .infer = infer_pool<PoolKind::kAverage>, .kernel = k_pool<PoolKind::kAverage>});
  r.add(OpSchema{.name = "AveragePool", .since_version = 19,
                 .attrs = with({{"count_include_pad", AttrType::kInt}, {"ceil_mode", AttrType::kInt}, {"dilations", AttrType::kInts}}),
                 .types = kFloatTypes, .infer = infer_pool<PoolKind::kAverage>, .kernel = k_pool<PoolKind::kAverage>});

  // LpPool-2: integer p; 11: pads clarified; 18: ceil_mode, dilations.
  for (int64_t v : {2, 11})
    r.add(OpSchema{.name = "LpPool", .since_version = v, .attrs = with({{"p", AttrType::kInt}}), .types = kFloatTypes,
                   .infer = infer_pool<PoolKind::kLp>, .kernel = k_pool<PoolKind::kLp>});
  r.add(OpSchema{.name = "LpPool", .since_version = 18,
                 .attrs = with({{"p", AttrType::kInt}, {"ceil_mode", AttrType::kInt}, {"dilations", AttrType::kInts}}),
                 .types = kFloatTypes, .infer = infer_pool<PoolKind::kLp>, .kernel = k_pool<PoolKind::kLp>});

  r.add(OpSchema{.name = "GlobalAveragePool", .since_version = 1, .types = kFloatTypes,
                 .infer = infer_global_pool<PoolKind::kAverage>, .kernel = k_global_pool<PoolKind::kAverage>});
  r.add(OpSchema{.name = "GlobalMaxPool", .since_version = 1, .types = kFloatTypes,
                 .infer = infer_global_pool<PoolKind::kMax>, .kernel = k_global_pool<PoolKind::kMax>});
  r.add(OpSchema{.name = "GlobalLpPool", .since_version = 2, .attrs = {{"p", AttrType::kInt}}, .types = kFloatTypes,
                 .infer = infer_global_pool<PoolKind::kLp>, .kernel = k_global_pool<PoolKind::kLp>});

  const vector<AttrSpec> unpool_attrs = {{"kernel_shape", AttrType::kInts, true}, {"pads", AttrType::kInts},
                                         {"strides", AttrType::kInts}};
  for (int64_t v : {9, 11})
    r.add(OpSchema{.name = "MaxUnpool", .since_version = v, .min_inputs = 2, .max_inputs = 3, .attrs = unpool_attrs,
                   .infer = infer_maxunpool, .kernel = k_maxunpool});
}

}  // namespace ferry
