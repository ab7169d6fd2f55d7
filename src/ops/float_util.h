// The reference kernels' float rule, in one place: f16/bf16 are stored narrow and computed in f32,
// then rounded back (ARCHITECTURE.md: "Reference kernels are the oracle").
#pragma once

#include <string>
#include <vector>

#include "ops/op_util.h"
#include "ops/registry.h"

namespace ferry {

/// The element types of float-only ops (OpSchema::types).
inline const std::vector<DType> kFloatTypes = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};

/// f16 and bf16: computed in f32 and rounded back.
inline bool is_low_float(DType t) { return t == DType::kF16 || t == DType::kBF16; }

/// "<what> has element type <t>; expected <expected>" (for KernelContext/InferContext::error).
inline std::string type_error(const std::string& what, DType t,
                              const std::string& expected = "a float type (f16, bf16, f32, f64)") {
  return what + " has element type " + dtype_name(t) + "; expected " + expected;
}

/// Calls body(const T* x, T* y) with T = float or double for the float tensor x0 and writes output
/// `out_index` with x0's dims and dtype; f16/bf16 are widened to f32 and the result rounded back.
/// A non-float x0 is an error naming `input_name`.
template <typename Body>
Status float_io(KernelContext& ctx, const Tensor& x0, int64_t out_index, const char* input_name, Body body) {
  const DType dt = x0.dtype();
  if (!dtype_is_float(dt)) return ctx.error(type_error(input_name, dt));
  const bool low = is_low_float(dt);
  Tensor x = widen_to_f32(x0);
  Tensor y;
  if (low) {
    ASSIGN_OR_RETURN(y, Tensor::try_allocate(DType::kF32, x.dims()));
  } else {
    ASSIGN_OR_RETURN(Tensor * p, ctx.allocate_output(out_index, dt, x.dims()));
    y = *p;  // shares storage with the output
  }
  if (x.dtype() == DType::kF32) body(x.data<float>(), y.mutable_data<float>());
  else body(x.data<double>(), y.mutable_data<double>());
  if (low) {
    ASSIGN_OR_RETURN(Tensor r, cast_tensor(y, dt));
    ctx.set_output(out_index, std::move(r));
  }
  return Status::ok();
}

/// Errors unless `t` (input `name`) is a float type or still unknown.
template <class Ctx>
Status check_float_dtype(Ctx& ctx, DType t, const char* name) {
  if (t != DType::kUndefined && !dtype_is_float(t))
    return ctx.error(std::string("input '") + name + "' has element type " + dtype_name(t) +
                     "; only float types (f16, bf16, f32, f64) are supported");
  return Status::ok();
}

/// Errors when inputs `first` and `other` both have known, different element types.
template <class Ctx>
Status check_same_dtype(Ctx& ctx, DType first, const char* first_name, DType other, const char* other_name) {
  if (first != DType::kUndefined && other != DType::kUndefined && first != other)
    return ctx.error(std::string("input '") + other_name + "' has element type " + dtype_name(other) + " but input '" +
                     first_name + "' has " + dtype_name(first) + "; they must match");
  return Status::ok();
}

/// Output 0 of a kernel that computes in `compute` (f32 for f16/bf16 inputs: widen_to_f32), a
/// separate tensor that finish_output rounds back to the output's dtype.
inline StatusOr<Tensor> make_result(KernelContext& ctx, DType compute, const std::vector<int64_t>& dims) {
  return Tensor::create(compute, dims, ctx.node().describe() + " output 0");
}
inline Status finish_output(KernelContext& ctx, Tensor result, DType out_dtype) {
  if (result.dtype() != out_dtype) {
    ASSIGN_OR_RETURN(result, cast_tensor(result, out_dtype));
  }
  ctx.set_output(0, std::move(result));
  return Status::ok();
}

}  // namespace ferry
