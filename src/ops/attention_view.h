// Strided views for com.ferry.Attention: each operand is a tensor read through an optional
// permutation (a Transpose the fusion absorbed), so the reference kernel and the CPU kernel
// address Q, K^T, V and the output without materializing the transposes.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/shape.h"

namespace ferry {

/// A permuted view of a row-major tensor: logical dim i is the tensor's dim perm[i].
struct PermutedView {
  std::vector<int64_t> dims;     // logical dims
  std::vector<int64_t> strides;  // element strides of the logical dims in the tensor
};

/// View of a tensor with `dims` through `perm` (empty perm: identity). False when perm is not a
/// permutation of the tensor's axes.
bool make_permuted_view(const std::vector<int64_t>& dims, const std::vector<int64_t>& perm, PermutedView* view);

/// Symbolic version for shape rules: the logical shape; false when perm is invalid.
bool permute_shape(const Shape& s, const std::vector<int64_t>& perm, Shape* out);

/// An operand read as a slice of its input (attributes q_slice / k_slice / v_slice = [axis, start,
/// end]: elements [start, end) of the stored input's `axis`, before the permutation; empty: the whole
/// input). Lets one packed QKV tensor feed all three operands without Slice copies.
/// View of that slice of a tensor with `dims` through `perm`; `offset` gets the element offset of
/// the slice's first element. False when the slice or perm is invalid for dims.
bool make_sliced_view(const std::vector<int64_t>& dims, const std::vector<int64_t>& slice,
                      const std::vector<int64_t>& perm, PermutedView* view, int64_t* offset);

/// Symbolic version: the shape of the slice (before the permutation). False when the slice is not
/// [axis, start, end] with 0 <= start <= end <= the axis's dim (when known).
bool slice_shape(const Shape& s, const std::vector<int64_t>& slice, Shape* out);

/// The view through which a kernel writes its logical output O when the stored tensor is
/// Transpose(O, out_perm): returns the stored tensor's dims and, per logical dim, its stride.
bool make_output_view(const std::vector<int64_t>& logical_dims, const std::vector<int64_t>& out_perm,
                      std::vector<int64_t>* stored_dims, std::vector<int64_t>* logical_strides);

/// MatMul-style broadcast of the batch dims (all but the last two logical dims) of views of one
/// rank: each view's batch dims become the broadcast dims, with stride 0 where it is broadcast.
/// `batch_dims` gets the broadcast batch dims. False when the ranks differ or the dims do not broadcast.
bool broadcast_batch_dims(const std::vector<PermutedView*>& views, std::vector<int64_t>* batch_dims);

/// Symbolic version for shape rules: broadcast of the batch dims of shapes of one rank (a dim
/// unknown in one shape takes the other's when that is known and not 1). False when known dims conflict.
bool broadcast_batch_shape(const std::vector<const Shape*>& shapes, std::vector<Dim>* batch_dims);

/// Offset of batch index `b` (row-major over the first dims.size()-2 logical dims) in a view.
inline int64_t batch_offset(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, int64_t b) {
  int64_t off = 0;
  for (int64_t i = static_cast<int64_t>(dims.size()) - 3; i >= 0; --i) {
    off += (b % dims[i]) * strides[i];
    b /= dims[i];
  }
  return off;
}

}  // namespace ferry
