// Op family 'dropout' (see op_families.inc): Dropout in inference mode (the training form is
// com.ferry TrainDropout, ops/grad_nn.cpp).
#include <algorithm>
#include <string>

#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

// ---- Dropout --------------------------------------------------------------------------------

// Inference mode only: output = input, mask = all true. From opset 12 ratio and training_mode are
// inputs; training with a nonzero ratio is random and not supported.
template <class Ctx>
Status check_dropout_inputs(Ctx& ctx, const Tensor* ratio, const Tensor* training, bool ratio_given) {
  if (ratio) {
    if (ratio->numel() != 1) return ctx.error("input 'ratio' must be a scalar, got shape " + dims_to_string(ratio->dims()));
    if (!dtype_is_float(ratio->dtype()))
      return ctx.error(std::string("input 'ratio' must be a float scalar, got ") + dtype_name(ratio->dtype()));
    const double r = ratio->get_double(0);
    if (!(r >= 0.0 && r < 1.0)) return ctx.error("input 'ratio' must be in [0, 1), got " + std::to_string(r));
  }
  if (training) {
    if (training->dtype() != DType::kBool)
      return ctx.error(std::string("input 'training_mode' must be bool, got ") + dtype_name(training->dtype()));
    if (training->numel() != 1)
      return ctx.error("input 'training_mode' must be a scalar, got shape " + dims_to_string(training->dims()));
    // Training with ratio 0 is still the identity; the ratio defaults to 0.5 when omitted.
    const bool ratio_unknown = ratio_given && !ratio;  // a runtime input: the kernel checks it
    const bool ratio_zero = ratio && ratio->get_double(0) == 0.0;
    if (training->data<bool>()[0] && !ratio_unknown && !ratio_zero)
      return ctx.error("training mode not supported: input 'training_mode' is true (ferry runs Dropout in inference mode only)");
  }
  return Status::ok();
}

Status infer_dropout(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  ctx.set_output(0, x);
  if (ctx.num_outputs() > 1) ctx.set_output(1, TensorType{ctx.opset() >= 10 ? DType::kBool : x.dtype, x.shape});
  if (ctx.opset() >= 12) {
    const Tensor* ratio = ctx.has_input(1) ? ctx.input_value(1) : nullptr;
    const Tensor* training = ctx.has_input(2) ? ctx.input_value(2) : nullptr;
    if (ctx.has_input(2) && ctx.input_type(2).dtype != DType::kUndefined && ctx.input_type(2).dtype != DType::kBool)
      return ctx.error(std::string("input 'training_mode' must be bool, got ") + dtype_name(ctx.input_type(2).dtype));
    RETURN_IF_ERROR(check_dropout_inputs(ctx, ratio, training, ctx.has_input(1)));
  }
  return Status::ok();
}

Status k_dropout(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (ctx.opset() >= 12) {
    const Tensor* ratio = ctx.has_input(1) ? &ctx.input(1) : nullptr;
    const Tensor* training = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    RETURN_IF_ERROR(check_dropout_inputs(ctx, ratio, training, ctx.has_input(1)));
  }
  ctx.set_output(0, x);
  if (ctx.num_outputs() > 1) {
    if (ctx.opset() >= 10) {
      ASSIGN_OR_RETURN(Tensor * mask, ctx.allocate_output(1, DType::kBool, x.dims()));
      std::fill(mask->mutable_data<bool>(), mask->mutable_data<bool>() + mask->numel(), true);
    } else {  // opsets 7-9: the mask has the data's type
      ASSIGN_OR_RETURN(Tensor ones, Tensor::create(DType::kF64, x.dims(), ctx.node().describe() + " output 1"));
      std::fill(ones.mutable_data<double>(), ones.mutable_data<double>() + ones.numel(), 1.0);
      ASSIGN_OR_RETURN(Tensor mask, cast_tensor(ones, x.dtype()));
      ctx.set_output(1, std::move(mask));
    }
  }
  return Status::ok();
}

}  // namespace

void register_dropout_ops(OpRegistry& r) {
  // Dropout-7: ratio attribute, mask of the data's type; 10: bool mask; 12: ratio and training_mode inputs.
  r.add(OpSchema{.name = "Dropout", .since_version = 7, .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
                 .max_outputs = 2, .attrs = {{"ratio", AttrType::kFloat}}, .types = kFloatTypes,
                 .infer = infer_dropout, .kernel = k_dropout});
  r.add(OpSchema{.name = "Dropout", .since_version = 10, .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
                 .max_outputs = 2, .attrs = {{"ratio", AttrType::kFloat}}, .types = kFloatTypes,
                 .infer = infer_dropout, .kernel = k_dropout});
  r.add(OpSchema{.name = "Dropout", .since_version = 12, .min_inputs = 1, .max_inputs = 3, .min_outputs = 1,
                 .max_outputs = 2, .attrs = {{"seed", AttrType::kInt}}, .types = kFloatTypes, .infer = infer_dropout,
                 .kernel = k_dropout});
}

}  // namespace ferry
