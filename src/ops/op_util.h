// Helpers shared by op families: shape rules for broadcasting and axes, strided iteration.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "ops/registry.h"

namespace ferry {

/// Numpy/ONNX multidirectional broadcast of static dims; false when incompatible.
bool broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>* out);
/// Symbolic version; unknown where it cannot be decided. False when provably incompatible.
bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out);

/// Maps axis in [-rank, rank) to [0, rank); false when out of range.
bool normalize_axis(int64_t* axis, int64_t rank);
/// Row-major strides in elements.
std::vector<int64_t> strides_of(const std::vector<int64_t>& dims);
/// Strides of `in` (right-aligned to out's rank) with 0 where `in` is broadcast along a dim.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out);

/// Walks every index of `dims` in row-major order, keeping one offset per operand.
/// Usage: for (BroadcastIter it(out_dims, {sa, sb}); !it.done(); it.next()) f(it.offset(0), it.offset(1));
class BroadcastIter {
 public:
  BroadcastIter(const std::vector<int64_t>& dims, std::vector<std::vector<int64_t>> strides);
  bool done() const { return done_; }
  void next();
  int64_t offset(size_t operand) const { return offsets_[operand]; }
  int64_t index() const { return linear_; }

 private:
  std::vector<int64_t> dims_;
  std::vector<std::vector<int64_t>> strides_;
  std::vector<int64_t> coord_;
  std::vector<int64_t> offsets_;
  int64_t linear_ = 0;
  bool done_ = false;
};

/// Shape rule: output 0 = input 0's type (unary elementwise ops, activations).
Status infer_same_as_input0(InferContext& ctx);
/// Shape rule: output 0 = broadcast of all given inputs, dtype of input 0 (or `out_dtype` when set).
Status infer_broadcast(InferContext& ctx, DType out_dtype = DType::kUndefined);

/// Converts a float tensor of any float dtype to float32 values (f16/bf16/f64 widened or narrowed).
std::vector<float> to_float_vector(const Tensor& t);

/// Calls body.template operator()<T>() for the tensor's numeric dtype; errors for others.
/// Float16/BFloat16 are not dispatched: reference kernels compute those via float.
#define FERRY_DISPATCH_NUMERIC(dtype, ctx, ...)                                                   \
  switch (dtype) {                                                                                \
    FERRY_DISPATCH_FLOAT_CASES(__VA_ARGS__)                                                       \
    FERRY_DISPATCH_INT_CASES(__VA_ARGS__)                                                         \
    default:                                                                                      \
      return (ctx).error(std::string("element type ") + dtype_name(dtype) + " is not supported"); \
  }

}  // namespace ferry

namespace ferry {
/// Converts any numeric/bool tensor to `dtype` with C++ conversion semantics (float->int truncates
/// toward zero, saturation not applied; f16/bf16 round to nearest even). Strings parse/format numbers.
StatusOr<Tensor> cast_tensor(const Tensor& src, DType dtype);
/// Widens f16/bf16 tensors to f32 (others returned as is, sharing storage).
Tensor widen_to_f32(const Tensor& t);
}  // namespace ferry
