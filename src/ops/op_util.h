// Helpers shared by op families: shape rules for broadcasting and axes, strided iteration.
#pragma once

#include <cstdint>
#include <optional>
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
/// One sliced axis clamped as Slice-10+ defines it: the first index read and how many are read
/// (Slice's kernel and shape rule, and SliceGrad, which must land where the forward read).
void slice_axis_range(int64_t start, int64_t end, int64_t step, int64_t dim, int64_t* first, int64_t* len);
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

/// numpy matmul's shape rule (MatMul, MatMulInteger, QLinearMatMul): 1-D A is [1, K] and 1-D B is
/// [K, 1] (the added 1s dropped from the result), leading (batch) dims broadcast. `out` stays empty
/// while a rank is unknown; `who` ends the scalar error ("input 'A' is a scalar; <who> needs rank >= 1").
template <class Ctx>
Status matmul_shape(Ctx& ctx, const TensorType& a, const TensorType& b, const char* who, std::optional<Shape>* out) {
  out->reset();
  if (a.shape && a.shape->rank() == 0) return ctx.error(std::string("input 'A' is a scalar; ") + who + " needs rank >= 1");
  if (b.shape && b.shape->rank() == 0) return ctx.error(std::string("input 'B' is a scalar; ") + who + " needs rank >= 1");
  if (!a.shape || !b.shape) return Status::ok();
  std::vector<Dim> ad = a.shape->dims, bd = b.shape->dims;
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  if (a1) ad.insert(ad.begin(), Dim(1));
  if (b1) bd.push_back(Dim(1));
  const Dim& ka = ad[ad.size() - 1];
  const Dim& kb = bd[bd.size() - 2];
  if (ka.is_known() && kb.is_known() && ka.value != kb.value)
    return ctx.error("inner dimensions differ: input 'A' " + a.shape->to_string() + " has K = " +
                     std::to_string(ka.value) + " but input 'B' " + b.shape->to_string() + " has K = " +
                     std::to_string(kb.value));
  Shape batch;
  if (!broadcast_shapes(Shape(std::vector<Dim>(ad.begin(), ad.end() - 2)), Shape(std::vector<Dim>(bd.begin(), bd.end() - 2)),
                        &batch))
    return ctx.error("batch dimensions of input 'A' " + a.shape->to_string() + " and input 'B' " + b.shape->to_string() +
                     " cannot be broadcast together");
  Shape o = batch;
  if (!a1) o.dims.push_back(ad[ad.size() - 2]);
  if (!b1) o.dims.push_back(bd[bd.size() - 1]);
  *out = o;
  return Status::ok();
}

/// numpy matmul's operands for concrete dims (the kernels' side of matmul_shape): A [batch..., M, K],
/// B [batch..., K, N] after the 1-D promotions, and the broadcast batch dims.
struct MatMulDims {
  int64_t M = 0, K = 0, N = 0;
  std::vector<int64_t> a_batch, b_batch, batch;
};
/// False when the batch dims do not broadcast (the shape rule has already refused that).
bool matmul_dims(std::vector<int64_t> a, std::vector<int64_t> b, MatMulDims* d);

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

/// A float tensor of dtype `dt` holding `v` (values computed in double, rounded to dt).
StatusOr<Tensor> doubles_to_tensor(const std::vector<double>& v, std::vector<int64_t> dims, DType dt);
/// Dim i of a tensor type; unknown when the shape or the axis is unknown.
Dim dim_or_unknown(const TensorType& t, int64_t i);
/// The value of dim i of a tensor type, or -1 when it is unknown.
int64_t known_dim(const TensorType& t, int64_t i);
/// Backward and training kernels run in f32 or f64: an error naming the input otherwise
/// (kUndefined, an absent optional input, passes).
template <class Ctx>
Status check_f32_f64(Ctx& ctx, DType t, const char* name) {
  if (t == DType::kUndefined || t == DType::kF32 || t == DType::kF64) return Status::ok();
  return ctx.error(std::string("input '") + name + "' has element type " + dtype_name(t) +
                   "; backward and training kernels support f32 and f64 (train in f32 and cast the model's weights)");
}
/// Whether the node has output i and something reads it (an empty name: the output is unused).
template <class Ctx>
bool wants_output(Ctx& ctx, int64_t i) {
  return i < ctx.num_outputs() && !ctx.node().outputs[static_cast<size_t>(i)].empty();
}
}  // namespace ferry
