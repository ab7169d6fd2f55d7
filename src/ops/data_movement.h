// Element-type-generic data movement shared by the tensor_* families (layout, broadcast, gather_scatter, ...) and resize:
// kernels that only move elements (Transpose, Slice, Gather, Pad, ...) work on every dtype,
// strings included, by copying storage units of the element's size.
#pragma once

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/op_util.h"

namespace ferry::dm {

template <typename T>
struct Tag {
  using type = T;
};

/// Calls f(Tag<S>{}) where S is the storage type of `dt`: an unsigned integer of the element's
/// size, or std::string. Returns f's Status.
template <typename F>
Status visit_storage(DType dt, F&& f) {
  if (dt == DType::kString) return f(Tag<std::string>{});
  switch (dtype_size(dt)) {
    case 1: return f(Tag<uint8_t>{});
    case 2: return f(Tag<uint16_t>{});
    case 4: return f(Tag<uint32_t>{});
    case 8: return f(Tag<uint64_t>{});
    default: return invalid_argument(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
}

template <typename S>
const S* elems(const Tensor& t) {
  if constexpr (std::is_same_v<S, std::string>) return t.strings().data();
  else return static_cast<const S*>(t.raw());
}
template <typename S>
S* mut_elems(Tensor& t) {
  if constexpr (std::is_same_v<S, std::string>) return t.mutable_strings().data();
  else return static_cast<S*>(t.mutable_raw());
}

/// out[c] = src[base + sum_i c[i] * strides[i]] for every coordinate c of out's dims (row-major).
/// Strides are in elements and may be 0 (broadcast) or negative (reversed). out must be allocated
/// with src's dtype.
template <typename S>
void strided_gather_typed(const Tensor& src, int64_t base, const std::vector<int64_t>& strides, Tensor* out) {
  const S* in = elems<S>(src);
  S* o = mut_elems<S>(*out);
  const std::vector<int64_t>& dims = out->dims();
  const int64_t n = out->numel();
  if (n == 0) return;
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (rank == 0) {
    o[0] = in[base];
    return;
  }
  const int64_t inner = dims[rank - 1];
  const int64_t istride = strides[rank - 1];
  std::vector<int64_t> coord(static_cast<size_t>(rank), 0);
  int64_t off = base;
  for (int64_t pos = 0; pos < n; pos += inner) {
    if constexpr (!std::is_same_v<S, std::string>) {
      if (istride == 1) {
        std::memcpy(o + pos, in + off, static_cast<size_t>(inner) * sizeof(S));
      } else {
        for (int64_t j = 0; j < inner; ++j) o[pos + j] = in[off + j * istride];
      }
    } else {
      for (int64_t j = 0; j < inner; ++j) o[pos + j] = in[off + j * istride];
    }
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++coord[d] < dims[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (dims[d] - 1);
      coord[d] = 0;
    }
  }
}

inline Status strided_gather(const Tensor& src, int64_t base, const std::vector<int64_t>& strides, Tensor* out) {
  return visit_storage(src.dtype(), [&](auto tag) -> Status {
    strided_gather_typed<typename decltype(tag)::type>(src, base, strides, out);
    return Status::ok();
  });
}

/// Transposes `x` by `perm` (a valid permutation of its axes) into a new tensor.
inline StatusOr<Tensor> permute(const Tensor& x, const std::vector<int64_t>& perm) {
  const std::vector<int64_t> in_strides = strides_of(x.dims());
  std::vector<int64_t> dims(perm.size()), strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    dims[i] = x.dims()[static_cast<size_t>(perm[i])];
    strides[i] = in_strides[static_cast<size_t>(perm[i])];
  }
  Tensor out = Tensor::allocate(x.dtype(), dims);
  RETURN_IF_ERROR(strided_gather(x, 0, strides, &out));
  return out;
}

/// Product of dims: known when all are known; the single non-1 dim when the others are all 1
/// (keeps a symbol); unknown otherwise.
inline Dim dim_product(const std::vector<Dim>& dims) {
  int64_t known = 1;
  int unknown = 0;
  Dim sym;
  for (const Dim& d : dims) {
    if (d.is_known()) {
      known *= d.value;
    } else {
      ++unknown;
      sym = d;
    }
  }
  if (unknown == 0) return Dim(known);
  if (known == 0) return Dim(0);
  if (unknown == 1 && known == 1) return sym;
  return Dim();
}

/// "[2,3]" for messages.
inline std::string shape_str(const std::vector<int64_t>& dims) { return dims_to_string(dims); }

/// Reads a 1-D (or scalar) integer tensor into `out`; false when its dtype is not an integer type.
inline bool read_ints(const Tensor& t, std::vector<int64_t>* out) {
  if (!dtype_is_integer(t.dtype())) return false;
  *out = t.to_int64_vector();
  return true;
}

}  // namespace ferry::dm

namespace ferry::dm {

/// out[c] = src[sum_a maps[a][c_a] * stride_a] for every coordinate c of out's dims, or `fill`
/// (element 0 of a tensor of src's dtype; zero / "" when undefined) where any maps[a][c_a] < 0.
/// maps[a] has out->dims()[a] entries, each in [-1, src.dims()[a]).
template <typename S>
void axis_map_gather_typed(const Tensor& src, const std::vector<std::vector<int64_t>>& maps, const Tensor& fill,
                           Tensor* out) {
  const S* in = elems<S>(src);
  S* o = mut_elems<S>(*out);
  S fv{};
  if (fill.defined() && fill.numel() > 0) fv = elems<S>(fill)[0];
  const std::vector<int64_t>& dims = out->dims();
  const int64_t n = out->numel();
  if (n == 0) return;
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (rank == 0) {
    o[0] = in[0];
    return;
  }
  const std::vector<int64_t> in_strides = strides_of(src.dims());
  const std::vector<int64_t>& last = maps[static_cast<size_t>(rank - 1)];
  const int64_t inner = dims[rank - 1];
  std::vector<int64_t> coord(static_cast<size_t>(rank), 0);
  for (int64_t pos = 0; pos < n; pos += inner) {
    int64_t row = 0;
    bool filled = false;
    for (int64_t d = 0; d < rank - 1; ++d) {
      int64_t idx = maps[static_cast<size_t>(d)][static_cast<size_t>(coord[d])];
      if (idx < 0) {
        filled = true;
        break;
      }
      row += idx * in_strides[d];
    }
    if (filled) {
      for (int64_t j = 0; j < inner; ++j) o[pos + j] = fv;
    } else {
      for (int64_t j = 0; j < inner; ++j) {
        int64_t idx = last[static_cast<size_t>(j)];
        o[pos + j] = idx < 0 ? fv : in[row + idx];
      }
    }
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++coord[d] < dims[d]) break;
      coord[d] = 0;
    }
  }
}

inline Status axis_map_gather(const Tensor& src, const std::vector<std::vector<int64_t>>& maps, const Tensor& fill,
                              Tensor* out) {
  return visit_storage(src.dtype(), [&](auto tag) -> Status {
    axis_map_gather_typed<typename decltype(tag)::type>(src, maps, fill, out);
    return Status::ok();
  });
}

/// "input 1 ('shape')" for messages.
inline std::string input_desc(const Node& node, int64_t i) {
  std::string s = "input " + std::to_string(i);
  if (i < static_cast<int64_t>(node.inputs.size()) && !node.inputs[static_cast<size_t>(i)].empty())
    s += " ('" + node.inputs[static_cast<size_t>(i)] + "')";
  return s;
}

/// Type of input i, or nullptr when it is omitted.
inline const TensorType* input_type_or_null(const InferContext& ctx, int64_t i) {
  return ctx.has_input(i) ? &ctx.input_type(i) : nullptr;
}
/// Shape of input i when its rank is known, else nullptr.
inline const Shape* input_shape_or_null(const InferContext& ctx, int64_t i) {
  const TensorType* t = input_type_or_null(ctx, i);
  return t && t->shape ? &*t->shape : nullptr;
}
/// The static length of a 1-D input (e.g. a shape or axes input whose value is unknown), or -1.
inline int64_t static_length_1d(const InferContext& ctx, int64_t i) {
  const Shape* s = input_shape_or_null(ctx, i);
  if (!s || s->rank() != 1 || !s->dims[0].is_known()) return -1;
  return s->dims[0].value;
}
/// A shape of `rank` unknown dims.
inline Shape unknown_shape(int64_t rank) { return Shape(std::vector<Dim>(static_cast<size_t>(rank))); }

inline DType input_dtype(const InferContext& ctx, int64_t i) {
  const TensorType* t = input_type_or_null(ctx, i);
  return t ? t->dtype : DType::kUndefined;
}

// Reads an integer input (shape, axes, repeats...) as int64 values; errors on non-integer types.
template <typename Ctx>
Status int_values(const Ctx& ctx, const Tensor& t, int64_t i, std::vector<int64_t>* out) {
  if (!read_ints(t, out))
    return ctx.error(input_desc(ctx.node(), i) + " must be an integer tensor, got " + dtype_name(t.dtype()));
  if (t.rank() > 1) return ctx.error(input_desc(ctx.node(), i) + " must be 1-D, got shape " + shape_str(t.dims()));
  return Status::ok();
}

// An integer list that opset 13 moved from attribute `attr` to input 1 (Squeeze / Unsqueeze axes,
// Split's split): *given: it was specified; *known: its values are known (always in a kernel; at load
// not when input 1 is computed). `value`: input 1's value, or null when unknown. With
// `empty_is_absent` an empty input 1 counts as not given (Split).
template <typename Ctx>
Status attr_or_input_ints(const Ctx& ctx, const char* attr, const Tensor* value, bool empty_is_absent,
                          std::vector<int64_t>* out, bool* given, bool* known) {
  *known = true;
  if (ctx.opset() < 13) {
    *given = ctx.has(attr);
    *out = ctx.get_ints(attr);
    return Status::ok();
  }
  *given = ctx.has_input(1);
  if (!*given) return Status::ok();
  if (!value) {
    *known = false;
    return Status::ok();
  }
  if (empty_is_absent && value->numel() == 0) {
    *given = false;
    return Status::ok();
  }
  return int_values(ctx, *value, 1, out);
}

}  // namespace ferry::dm
