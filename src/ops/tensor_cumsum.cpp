// Op family 'tensor_cumsum' (see op_families.inc): CumSum, the running sum along an axis.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

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

// ---- CumSum -----------------------------------------------------------------------------------

template <typename T, typename Acc>
void cumsum_typed(const T* in, T* out, int64_t outer, int64_t len, int64_t inner, bool exclusive, bool reverse) {
  std::vector<Acc> acc(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    std::fill(acc.begin(), acc.end(), Acc(0));
    for (int64_t s = 0; s < len; ++s) {
      const int64_t t = reverse ? len - 1 - s : s;
      const int64_t base = (o * len + t) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        if (exclusive) {
          out[base + i] = static_cast<T>(acc[i]);
          acc[i] = static_cast<Acc>(acc[i] + static_cast<Acc>(in[base + i]));
        } else {
          acc[i] = static_cast<Acc>(acc[i] + static_cast<Acc>(in[base + i]));
          out[base + i] = static_cast<T>(acc[i]);
        }
      }
    }
  }
}

template <typename Ctx>
Status cumsum_axis(const Ctx& ctx, const Tensor& a, int64_t rank, int64_t* axis) {
  if (a.numel() != 1 || !dtype_is_integer(a.dtype()))
    return ctx.error("input 1 (axis) must be an integer scalar, got " + a.type().to_string());
  *axis = a.get_int64(0);
  if (!normalize_axis(axis, rank))
    return ctx.error("axis " + std::to_string(a.get_int64(0)) + " is out of range for rank " + std::to_string(rank));
  return Status::ok();
}

Status k_cumsum(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  int64_t axis = 0;
  RETURN_IF_ERROR(cumsum_axis(ctx, ctx.input(1), x0.rank(), &axis));
  const bool exclusive = ctx.get_int("exclusive", 0) != 0, reverse = ctx.get_int("reverse", 0) != 0;
  const DType dt = x0.dtype();
  Tensor x = widen_to_f32(x0);
  Tensor y = Tensor::allocate(x.dtype(), x.dims());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const int64_t len = x.dim(axis);
  switch (x.dtype()) {
    FERRY_DISPATCH_FLOAT_CASES(cumsum_typed<scalar_t, double>(x.data<scalar_t>(), y.mutable_data<scalar_t>(), outer, len,
                                                              inner, exclusive, reverse))
    FERRY_DISPATCH_INT_CASES(cumsum_typed<scalar_t, uint64_t>(x.data<scalar_t>(), y.mutable_data<scalar_t>(), outer, len,
                                                              inner, exclusive, reverse))
    default: return ctx.error(string("element type ") + dtype_name(dt) + " is not supported");
  }
  if (dt != x.dtype()) {
    ASSIGN_OR_RETURN(y, cast_tensor(y, dt));
  }
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

Status infer_cumsum(InferContext& ctx) {
  const Shape* s = input_shape_or_null(ctx, 0);
  const Tensor* a = ctx.input_value(1);
  if (s && a) {
    int64_t axis = 0;
    RETURN_IF_ERROR(cumsum_axis(ctx, *a, s->rank(), &axis));
  }
  return infer_same_as_input0(ctx);
}

}  // namespace

void register_tensor_cumsum_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "CumSum", .since_version = 11, .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"exclusive", AttrType::kInt}, {"reverse", AttrType::kInt}}, .infer = infer_cumsum,
                 .kernel = k_cumsum});
}

}  // namespace ferry
