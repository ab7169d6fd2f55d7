// Op family 'fused_conv' (domain com.ferry, opset 1): the nodes the conv/matmul fusion and layout
// passes produce. Each reference kernel runs the plain ONNX op's reference kernel (Conv, Gemm, MatMul,
// MaxPool, ...) and applies the fused part around it, so the fused graph computes exactly what the
// original nodes computed (up to one rounding for f16/bf16).
//
//   FusedConv(X, W, [B], [Z])   Conv attributes + activation, activation_params, channels_last:
//                               Y = act(conv(X, W) + B + Z). channels_last = 1: X, Z and Y are NHWC
//                               (W stays M x C/group x kH x kW); with nchw_input = 1 too, X stays NCHW
//                               and only Z and Y are NHWC (a channels-last region's entry: the layout
//                               change happens inside the convolution instead of in a Transpose).
//   FusedGemm(A, B, [C])        Gemm attributes + activation: Y = act(alpha * A' B' + beta * C).
//   FusedMatMul(A, B, [Bias], [Z])  activation: Y = act(A @ B + Bias + Z) (Bias, Z broadcast to A @ B).
//   NhwcMaxPool / NhwcAveragePool / NhwcGlobalAveragePool(X): the ONNX pools on NHWC tensors
//                               (4-D only; one output), produced by the channels-last layout pass.
// Activation names and parameters: src/ops/fused_activation.h.
#include <algorithm>
#include <vector>

#include "ops/data_movement.h"
#include "ops/float_util.h"
#include "ops/fused_activation.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

const vector<int64_t> kToNchw = {0, 3, 1, 2};
const vector<int64_t> kToNhwc = {0, 2, 3, 1};

// The ONNX op a fused op builds on, at an opset where its attributes are those of the fused node.
const OpSchema& base_schema(const char* op) {
  const OpSchema* s = op_registry().find("", op, 17);
  return *s;  // Conv, Gemm, MatMul and the pools are always registered
}

TensorType permuted_type(const TensorType& t, const vector<int64_t>& perm) {
  if (!t.shape || t.shape->rank() != 4) return t;
  Shape s;
  for (int64_t p : perm) s.dims.push_back(t.shape->dims[p]);
  return TensorType{t.dtype, s};
}

// Runs the base op's shape rule for this node on `types` (first `n` inputs of the fused node).
Status infer_base(InferContext& ctx, const char* op, vector<const TensorType*> types, TensorType* out) {
  vector<const Tensor*> values;
  for (size_t i = 0; i < types.size(); ++i) values.push_back(ctx.input_value(static_cast<int64_t>(i)));
  InferContext base(ctx.node(), 17, types, values);
  RETURN_IF_ERROR(base_schema(op).infer(base));
  *out = base.outputs()[0];
  return Status::ok();
}

// Runs the base op's reference kernel for this node on `inputs` (nullptr: omitted).
StatusOr<Tensor> run_base(KernelContext& ctx, const char* op, const vector<const Tensor*>& inputs) {
  vector<Value> values(inputs.size());
  vector<const Value*> ptrs(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]) {
      values[i] = Value(*inputs[i]);
      ptrs[i] = &values[i];
    }
  vector<Value> outputs(1);
  KernelContext base(ctx.node(), 17, ptrs, &outputs);
  RETURN_IF_ERROR(base_schema(op).kernel(base));
  return outputs[0].tensor;
}

Status check_4d(InferContext& ctx, const TensorType& t, const char* what) {
  if (t.shape && t.shape->rank() != 4)
    return ctx.error(std::string("input '") + what + "' must be 4-D (N x H x W x C) when channels_last = 1, got " +
                     t.shape->to_string());
  return Status::ok();
}

// Checks that residual/bias input `i` broadcasts to `out` without changing it.
Status check_addend(InferContext& ctx, int64_t i, const char* what, const TensorType& out) {
  if (!ctx.has_input(i) || !out.shape || !ctx.input_type(i).shape) return Status::ok();
  const Shape& z = *ctx.input_type(i).shape;
  Shape b;
  if (z.rank() > out.shape->rank() || !broadcast_shapes(*out.shape, z, &b))
    return ctx.error(std::string("input '") + what + "' " + z.to_string() + " does not broadcast to the output " +
                     out.shape->to_string());
  for (int64_t d = 0; d < b.rank(); ++d)
    if (b.dims[d].is_known() && out.shape->dims[d].is_known() && b.dims[d].value != out.shape->dims[d].value)
      return ctx.error(std::string("input '") + what + "' " + z.to_string() + " would enlarge the output " +
                       out.shape->to_string());
  return Status::ok();
}

Status check_activation(const AttrReader& r, FusedActivation* act) {
  auto a = parse_fused_activation(r.get_string("activation", ""), r.get_floats("activation_params"));
  if (!a.is_ok()) return invalid_model(r.node().describe() + ": " + a.status().message());
  *act = a.value();
  return Status::ok();
}

// y = act(y + addends...), in place on an f32/f64 tensor; addends broadcast to y.
template <typename T>
void add_and_activate(Tensor* y, const vector<Tensor>& addends, const FusedActivation& act) {
  T* py = y->mutable_data<T>();
  for (const Tensor& a : addends) {
    vector<int64_t> s = broadcast_strides(a.dims(), y->dims());
    const T* pa = a.data<T>();
    for (BroadcastIter it(y->dims(), {s}); !it.done(); it.next()) py[it.index()] += pa[it.offset(0)];
  }
  if (act.kind == ActKind::kNone) return;
  for (int64_t i = 0; i < y->numel(); ++i) py[i] = static_cast<T>(apply_fused_activation(act, py[i]));
}

// The fused tail shared by all three ops: widen, add the addends, activate, round back to `dt`.
Status finish(KernelContext& ctx, Tensor y, const vector<const Tensor*>& addends, DType dt) {
  FusedActivation act;
  RETURN_IF_ERROR(check_activation(ctx, &act));
  Tensor yw = widen_to_f32(y);
  if (yw.raw() == y.raw()) yw = y.clone();  // the base kernel's output may be shared; never write into it
  vector<Tensor> adds;
  for (const Tensor* a : addends)
    if (a) adds.push_back(widen_to_f32(*a));
  if (yw.dtype() == DType::kF64) add_and_activate<double>(&yw, adds, act);
  else add_and_activate<float>(&yw, adds, act);
  if (yw.dtype() != dt) {
    ASSIGN_OR_RETURN(yw, cast_tensor(yw, dt));
  }
  ctx.set_output(0, std::move(yw));
  return Status::ok();
}

const Tensor* opt_input(KernelContext& ctx, int64_t i) { return ctx.has_input(i) ? &ctx.input(i) : nullptr; }

// ---- FusedConv ------------------------------------------------------------------------------

Status infer_fused_conv(InferContext& ctx) {
  FusedActivation act;
  RETURN_IF_ERROR(check_activation(ctx, &act));
  const bool cl = ctx.get_int("channels_last", 0) != 0;
  TensorType x = ctx.input_type(0);
  if (cl) RETURN_IF_ERROR(check_4d(ctx, x, "X"));
  if (cl && ctx.get_int("nchw_input", 0) == 0) x = permuted_type(x, kToNchw);
  vector<const TensorType*> types = {&x, &ctx.input_type(1)};
  if (ctx.has_input(2)) types.push_back(&ctx.input_type(2));
  TensorType out;
  RETURN_IF_ERROR(infer_base(ctx, "Conv", types, &out));
  if (cl) out = permuted_type(out, kToNhwc);
  RETURN_IF_ERROR(check_addend(ctx, 3, "Z", out));
  ctx.set_output(0, out);
  return Status::ok();
}

Status k_fused_conv(KernelContext& ctx) {
  const bool cl = ctx.get_int("channels_last", 0) != 0;
  Tensor x = ctx.input(0);
  if (cl && x.rank() != 4) return ctx.error("input 'X' must be 4-D when channels_last = 1");
  if (cl && ctx.get_int("nchw_input", 0) == 0) {
    ASSIGN_OR_RETURN(x, dm::permute(x, kToNchw));
  }
  ASSIGN_OR_RETURN(Tensor y, run_base(ctx, "Conv", {&x, &ctx.input(1), opt_input(ctx, 2)}));
  // Z is in Y's layout: add it after converting y back when channels_last.
  if (cl) {
    ASSIGN_OR_RETURN(y, dm::permute(y, kToNhwc));
  }
  return finish(ctx, y, {opt_input(ctx, 3)}, ctx.input(0).dtype());
}

// ---- FusedGemm / FusedMatMul -----------------------------------------------------------------

Status infer_fused_gemm(InferContext& ctx) {
  FusedActivation act;
  RETURN_IF_ERROR(check_activation(ctx, &act));
  vector<const TensorType*> types = {&ctx.input_type(0), &ctx.input_type(1)};
  if (ctx.has_input(2)) types.push_back(&ctx.input_type(2));
  TensorType out;
  RETURN_IF_ERROR(infer_base(ctx, "Gemm", types, &out));
  ctx.set_output(0, out);
  return Status::ok();
}

Status k_fused_gemm(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Tensor y, run_base(ctx, "Gemm", {&ctx.input(0), &ctx.input(1), opt_input(ctx, 2)}));
  return finish(ctx, y, {}, ctx.input(0).dtype());
}

Status infer_fused_matmul(InferContext& ctx) {
  FusedActivation act;
  RETURN_IF_ERROR(check_activation(ctx, &act));
  TensorType out;
  RETURN_IF_ERROR(infer_base(ctx, "MatMul", {&ctx.input_type(0), &ctx.input_type(1)}, &out));
  RETURN_IF_ERROR(check_addend(ctx, 2, "Bias", out));
  RETURN_IF_ERROR(check_addend(ctx, 3, "Z", out));
  ctx.set_output(0, out);
  return Status::ok();
}

Status k_fused_matmul(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Tensor y, run_base(ctx, "MatMul", {&ctx.input(0), &ctx.input(1)}));
  for (int64_t i : {2, 3})
    if (ctx.has_input(i) && ctx.input(i).rank() > y.rank())
      return ctx.error("input " + std::to_string(i) + " has a higher rank than the product");
  return finish(ctx, y, {opt_input(ctx, 2), opt_input(ctx, 3)}, ctx.input(0).dtype());
}

// ---- NHWC pools -----------------------------------------------------------------------------

template <const char* kBase>
Status infer_nhwc_pool(InferContext& ctx) {
  RETURN_IF_ERROR(check_4d(ctx, ctx.input_type(0), "X"));
  TensorType x = permuted_type(ctx.input_type(0), kToNchw);
  TensorType out;
  RETURN_IF_ERROR(infer_base(ctx, kBase, {&x}, &out));
  ctx.set_output(0, permuted_type(out, kToNhwc));
  return Status::ok();
}

template <const char* kBase>
Status k_nhwc_pool(KernelContext& ctx) {
  if (ctx.input(0).rank() != 4) return ctx.error("input 'X' must be 4-D (N x H x W x C)");
  ASSIGN_OR_RETURN(Tensor x, dm::permute(ctx.input(0), kToNchw));
  ASSIGN_OR_RETURN(Tensor y, run_base(ctx, kBase, {&x}));
  ASSIGN_OR_RETURN(y, dm::permute(y, kToNhwc));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

constexpr char kMaxPool[] = "MaxPool";
constexpr char kAveragePool[] = "AveragePool";
constexpr char kGlobalAveragePool[] = "GlobalAveragePool";

}  // namespace

void register_fused_conv_ops(OpRegistry& r) {
  const vector<AttrSpec> act_attrs = {{"activation", AttrType::kString}, {"activation_params", AttrType::kFloats}};
  auto with_act = [&](vector<AttrSpec> attrs) {
    attrs.insert(attrs.end(), act_attrs.begin(), act_attrs.end());
    return attrs;
  };
  const vector<AttrSpec> spatial = {{"auto_pad", AttrType::kString}, {"dilations", AttrType::kInts},
                                    {"kernel_shape", AttrType::kInts}, {"pads", AttrType::kInts},
                                    {"strides", AttrType::kInts}};
  vector<AttrSpec> conv = spatial;
  conv.push_back({"group", AttrType::kInt});
  conv.push_back({"channels_last", AttrType::kInt});
  conv.push_back({"nchw_input", AttrType::kInt});
  r.add(OpSchema{.name = "FusedConv", .domain = "com.ferry", .since_version = 1, .min_inputs = 2, .max_inputs = 4,
                 .attrs = with_act(conv), .types = kFloatTypes, .infer = infer_fused_conv, .kernel = k_fused_conv});
  r.add(OpSchema{.name = "FusedGemm", .domain = "com.ferry", .since_version = 1, .min_inputs = 2, .max_inputs = 3,
                 .attrs = with_act({{"alpha", AttrType::kFloat}, {"beta", AttrType::kFloat},
                                    {"transA", AttrType::kInt}, {"transB", AttrType::kInt}}),
                 .types = kFloatTypes, .infer = infer_fused_gemm, .kernel = k_fused_gemm});
  r.add(OpSchema{.name = "FusedMatMul", .domain = "com.ferry", .since_version = 1, .min_inputs = 2, .max_inputs = 4,
                 .attrs = act_attrs, .types = kFloatTypes, .infer = infer_fused_matmul, .kernel = k_fused_matmul});

  vector<AttrSpec> maxpool = spatial;
  maxpool.push_back({"ceil_mode", AttrType::kInt});
  maxpool.push_back({"storage_order", AttrType::kInt});
  vector<AttrSpec> avgpool = spatial;
  avgpool.push_back({"ceil_mode", AttrType::kInt});
  avgpool.push_back({"count_include_pad", AttrType::kInt});
  vector<DType> maxpool_types = kFloatTypes;  // and 8-bit: MaxPool in an int8 region (qdq_fusion)
  maxpool_types.push_back(DType::kU8);
  maxpool_types.push_back(DType::kI8);
  r.add(OpSchema{.name = "NhwcMaxPool", .domain = "com.ferry", .since_version = 1, .attrs = maxpool,
                 .types = maxpool_types, .infer = infer_nhwc_pool<kMaxPool>, .kernel = k_nhwc_pool<kMaxPool>});
  r.add(OpSchema{.name = "NhwcAveragePool", .domain = "com.ferry", .since_version = 1, .attrs = avgpool,
                 .types = kFloatTypes, .infer = infer_nhwc_pool<kAveragePool>, .kernel = k_nhwc_pool<kAveragePool>});
  r.add(OpSchema{.name = "NhwcGlobalAveragePool", .domain = "com.ferry", .since_version = 1, .types = kFloatTypes,
                 .infer = infer_nhwc_pool<kGlobalAveragePool>, .kernel = k_nhwc_pool<kGlobalAveragePool>});
}

}  // namespace ferry
