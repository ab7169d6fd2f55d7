#include "ops/op_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace ferry {

bool broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>* out) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> o(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) o[i] = da;
    else if (da == 1) o[i] = db;
    else return false;
  }
  *out = std::move(o);
  return true;
}

bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out) {
  size_t r = std::max(a.dims.size(), b.dims.size());
  Shape o;
  o.dims.resize(r);
  for (size_t i = 0; i < r; ++i) {
    Dim da = i < r - a.dims.size() ? Dim(1) : a.dims[i - (r - a.dims.size())];
    Dim db = i < r - b.dims.size() ? Dim(1) : b.dims[i - (r - b.dims.size())];
    if (da.is_known() && db.is_known()) {
      if (da.value == db.value || db.value == 1) o.dims[i] = da;
      else if (da.value == 1) o.dims[i] = db;
      else return false;
    } else if (da.is_known() && da.value == 1) {
      o.dims[i] = db;
    } else if (db.is_known() && db.value == 1) {
      o.dims[i] = da;
    } else if (da == db) {
      o.dims[i] = da;
    } else if (!da.is_known() && db.is_known()) {
      o.dims[i] = db;  // da must equal db (or be 1, which then broadcasts to db)
    } else if (da.is_known() && !db.is_known()) {
      o.dims[i] = da;
    } else {
      o.dims[i] = Dim();
    }
  }
  *out = std::move(o);
  return true;
}

void slice_axis_range(int64_t start, int64_t end, int64_t step, int64_t dim, int64_t* first, int64_t* len) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (dim == 0) {
    *first = 0;
    *len = 0;
    return;
  }
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    *len = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    *len = start > end ? (start - end - 1) / (-step) + 1 : 0;
  }
  *first = start;
}

bool normalize_axis(int64_t* axis, int64_t rank) {
  if (*axis < -rank || *axis >= rank) return false;
  if (*axis < 0) *axis += rank;
  return true;
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  std::vector<int64_t> s(out.size(), 0);
  std::vector<int64_t> in_strides = strides_of(in);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[off + i] = in[i] == 1 ? 0 : in_strides[i];
  return s;
}

BroadcastIter::BroadcastIter(const std::vector<int64_t>& dims, std::vector<std::vector<int64_t>> strides)
    : dims_(dims), strides_(std::move(strides)), coord_(dims.size(), 0), offsets_(strides_.size(), 0) {
  for (int64_t d : dims_)
    if (d == 0) done_ = true;
}

void BroadcastIter::next() {
  ++linear_;
  for (int64_t i = static_cast<int64_t>(dims_.size()) - 1; i >= 0; --i) {
    if (++coord_[i] < dims_[i]) {
      for (size_t k = 0; k < offsets_.size(); ++k) offsets_[k] += strides_[k][i];
      return;
    }
    coord_[i] = 0;
    for (size_t k = 0; k < offsets_.size(); ++k) offsets_[k] -= strides_[k][i] * (dims_[i] - 1);
  }
  done_ = true;
}

Status infer_same_as_input0(InferContext& ctx) {
  for (int64_t i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, ctx.input_type(0));
  return Status::ok();
}

Status infer_broadcast(InferContext& ctx, DType out_dtype) {
  std::optional<Shape> shape = ctx.input_type(0).shape;
  for (int64_t i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const TensorType& t = ctx.input_type(i);
    if (!shape || !t.shape) {
      shape.reset();
      continue;
    }
    Shape out;
    if (!broadcast_shapes(*shape, *t.shape, &out))
      return ctx.error("input shapes " + shape->to_string() + " and " + t.shape->to_string() +
                       " cannot be broadcast together (input " + std::to_string(i) + ")");
    shape = out;
  }
  ctx.set_output(0, TensorType{out_dtype == DType::kUndefined ? ctx.input_type(0).dtype : out_dtype, shape});
  return Status::ok();
}

std::vector<float> to_float_vector(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = static_cast<float>(t.get_double(i));
  return v;
}

}  // namespace ferry

namespace ferry {

namespace {
template <typename D>
void cast_into(const Tensor& src, D* dst) {
  const int64_t n = src.numel();
  switch (src.dtype()) {
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(f16_to_f32(src.data<uint16_t>()[i]));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(bf16_to_f32(src.data<uint16_t>()[i]));
      return;
    case DType::kBool:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(src.data<bool>()[i] ? 1 : 0);
      return;
    FERRY_DISPATCH_FLOAT_CASES(for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(src.data<scalar_t>()[i]))
    FERRY_DISPATCH_INT_CASES(for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(src.data<scalar_t>()[i]))
    default: return;
  }
}
}  // namespace

StatusOr<Tensor> cast_tensor(const Tensor& src, DType dtype) {
  if (src.dtype() == dtype) return src;
  ASSIGN_OR_RETURN(Tensor out, Tensor::try_allocate(dtype, src.dims()));
  const int64_t n = src.numel();
  if (src.dtype() == DType::kString) {
    if (dtype_is_float(dtype) || dtype_is_integer(dtype) || dtype == DType::kBool) {
      std::vector<double> vals(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const std::string& s = src.strings()[i];
        char* end = nullptr;
        vals[i] = std::strtod(s.c_str(), &end);
        if (end == s.c_str()) return invalid_argument("cannot cast string '" + s + "' to a number");
      }
      Tensor d = Tensor::from_vector(vals, src.dims());
      return cast_tensor(d, dtype);
    }
    return invalid_argument(std::string("cannot cast string to ") + dtype_name(dtype));
  }
  switch (dtype) {
    case DType::kF16: {
      std::vector<float> tmp(static_cast<size_t>(n));
      cast_into(src, tmp.data());
      for (int64_t i = 0; i < n; ++i) out.mutable_data<uint16_t>()[i] = f32_to_f16(tmp[i]);
      break;
    }
    case DType::kBF16: {
      std::vector<float> tmp(static_cast<size_t>(n));
      cast_into(src, tmp.data());
      for (int64_t i = 0; i < n; ++i) out.mutable_data<uint16_t>()[i] = f32_to_bf16(tmp[i]);
      break;
    }
    case DType::kBool: {
      std::vector<double> tmp(static_cast<size_t>(n));
      cast_into(src, tmp.data());
      for (int64_t i = 0; i < n; ++i) out.mutable_data<bool>()[i] = tmp[i] != 0.0;
      break;
    }
    case DType::kString: {
      for (int64_t i = 0; i < n; ++i) {
        double v = src.get_double(i);
        char buf[64];
        if (dtype_is_float(src.dtype())) std::snprintf(buf, sizeof buf, "%.9g", v);
        else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(src.get_int64(i)));
        out.mutable_strings()[i] = buf;
      }
      break;
    }
    FERRY_DISPATCH_FLOAT_CASES(cast_into(src, out.mutable_data<scalar_t>()))
    FERRY_DISPATCH_INT_CASES(cast_into(src, out.mutable_data<scalar_t>()))
    default: return invalid_argument(std::string("cannot cast to ") + dtype_name(dtype));
  }
  return out;
}

Tensor widen_to_f32(const Tensor& t) {
  if (t.dtype() != DType::kF16 && t.dtype() != DType::kBF16) return t;
  return cast_tensor(t, DType::kF32).value();
}

StatusOr<Tensor> doubles_to_tensor(const std::vector<double>& v, std::vector<int64_t> dims, DType dt) {
  ASSIGN_OR_RETURN(Tensor t, Tensor::try_allocate(DType::kF64, std::move(dims)));
  std::copy(v.begin(), v.end(), t.mutable_data<double>());
  if (dt == DType::kF64) return t;
  return cast_tensor(t, dt);
}

Dim dim_or_unknown(const TensorType& t, int64_t i) {
  if (!t.shape || i < 0 || i >= t.shape->rank()) return Dim();
  return t.shape->dims[static_cast<size_t>(i)];
}

int64_t known_dim(const TensorType& t, int64_t i) {
  const Dim d = dim_or_unknown(t, i);
  return d.is_known() ? d.value : -1;
}

bool matmul_dims(std::vector<int64_t> a, std::vector<int64_t> b, MatMulDims* d) {
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  d->M = a[a.size() - 2];
  d->K = a[a.size() - 1];
  d->N = b[b.size() - 1];
  d->a_batch.assign(a.begin(), a.end() - 2);
  d->b_batch.assign(b.begin(), b.end() - 2);
  return broadcast_dims(d->a_batch, d->b_batch, &d->batch);
}

}  // namespace ferry
