// CUDA kernels for elementwise ops: activations, broadcast arithmetic and comparisons, Where,
// Cast, BatchNormalization (inference). Launchers in elementwise.cu.
#include <cmath>
#include <limits>

#include "backends/cuda/ops_util.h"

namespace ferry {
namespace {

using cuda::BinaryOp;
using cuda::CompareOp;
using cuda::UnaryOp;

struct UnaryDef {
  const char* op;
  const char* domain;
  UnaryOp kind;
};

const UnaryDef kUnary[] = {
    {"Relu", "", UnaryOp::kRelu},          {"Sigmoid", "", UnaryOp::kSigmoid},   {"Tanh", "", UnaryOp::kTanh},
    {"Exp", "", UnaryOp::kExp},            {"Log", "", UnaryOp::kLog},           {"Sqrt", "", UnaryOp::kSqrt},
    {"Neg", "", UnaryOp::kNeg},            {"Abs", "", UnaryOp::kAbs},           {"Erf", "", UnaryOp::kErf},
    {"Reciprocal", "", UnaryOp::kReciprocal}, {"Floor", "", UnaryOp::kFloor},    {"Ceil", "", UnaryOp::kCeil},
    {"LeakyRelu", "", UnaryOp::kLeakyRelu}, {"Clip", "", UnaryOp::kClip},        {"HardSigmoid", "", UnaryOp::kHardSigmoid},
    {"HardSwish", "", UnaryOp::kHardSwish}, {"Elu", "", UnaryOp::kElu},          {"Softplus", "", UnaryOp::kSoftplus},
    {"Sin", "", UnaryOp::kSin},            {"Cos", "", UnaryOp::kCos},           {"Round", "", UnaryOp::kRound},
    {"Sign", "", UnaryOp::kSign},          {"Gelu", "", UnaryOp::kGeluErf},      {"Gelu", "com.ferry", UnaryOp::kGeluErf},
    {"Identity", "", UnaryOp::kIdentity},  {"Dropout", "", UnaryOp::kIdentity},
};

/// Clip's bounds: attributes before opset 11, constant inputs after (a non-constant bound: host).
bool clip_bounds(const CudaKernelArgs& a, float* lo, float* hi) {
  *lo = -std::numeric_limits<float>::infinity();
  *hi = std::numeric_limits<float>::infinity();
  if (a.opset < 11) {
    AttrReader r(a.node);
    *lo = r.get_float("min", *lo);
    *hi = r.get_float("max", *hi);
    return true;
  }
  for (size_t i = 1; i <= 2; ++i) {
    if (i >= a.node.inputs.size() || a.node.inputs[i].empty()) continue;
    const Tensor* c = a.constant_input(i);
    if (!c || c->numel() != 1) return false;
    (i == 1 ? *lo : *hi) = static_cast<float>(c->get_double(0));
  }
  return true;
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_unary(const CudaKernelArgs& a, UnaryOp kind) {
  const DType t = a.input_dtype(0);
  if (t != DType::kUndefined && !is_cuda_float(t) && kind != UnaryOp::kIdentity) return std::unique_ptr<CudaOpKernel>();
  AttrReader r(a.node);
  float alpha = 0.f, beta = 0.f;
  switch (kind) {
    case UnaryOp::kLeakyRelu: alpha = r.get_float("alpha", 0.01f); break;
    case UnaryOp::kElu: alpha = r.get_float("alpha", 1.0f); break;
    case UnaryOp::kHardSigmoid: alpha = r.get_float("alpha", 0.2f); beta = r.get_float("beta", 0.5f); break;
    case UnaryOp::kClip:
      if (!clip_bounds(a, &alpha, &beta)) return std::unique_ptr<CudaOpKernel>();
      break;
    case UnaryOp::kGeluErf:
      if (r.get_string("approximate", "none") == "tanh") kind = UnaryOp::kGeluTanh;
      break;
    default: break;
  }
  const Node& node = a.node;
  if (kind == UnaryOp::kIdentity) {  // Identity, Dropout in inference: share the input's memory
    return make_fn_kernel([](CudaContext&, KernelContext&, const std::vector<const DeviceTensor*>& in,
                             std::vector<DeviceTensor>& out) {
      out[0] = *in[0];
      return Status::ok();
    });
  }
  return make_fn_kernel([kind, alpha, beta, &node](CudaContext& ctx, KernelContext&, const std::vector<const DeviceTensor*>& in,
                                                   std::vector<DeviceTensor>& out) -> Status {
    const DeviceTensor& x = *in[0];
    if (!is_cuda_float(x.dtype)) return unsupported(node.describe() + ": cuda kernel takes f32/f16/bf16");
    ASSIGN_OR_RETURN(out[0], ctx.allocate(x.dtype, x.dims));
    return launched(cuda::launch_unary(kind, onnx_type(x.dtype), x.data, out[0].data, x.numel(), alpha, beta, ctx.stream()),
                    node, node.op_type.c_str());
  });
}

bool accepts_dropout(const Node& node, std::string* why) {
  if (node.op_type != "Dropout") return true;
  if (!accepts_single_output(node, why)) return false;
  // training_mode (input 2) must be absent or a constant false; checked again in the factory.
  return true;
}

/// Broadcast output dims of all inputs, or an error naming the node.
StatusOr<std::vector<int64_t>> broadcast_all(const Node& node, const std::vector<const DeviceTensor*>& in) {
  std::vector<int64_t> out;
  bool first = true;
  for (const DeviceTensor* t : in) {
    if (!t) continue;
    if (first) {
      out = t->dims;
      first = false;
      continue;
    }
    std::vector<int64_t> next;
    if (!broadcast_dims(out, t->dims, &next))
      return invalid_argument(node.describe() + ": shapes " + dims_to_string(out) + " and " + dims_to_string(t->dims) +
                              " do not broadcast");
    out = next;
  }
  return out;
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_binary(const CudaKernelArgs& a, BinaryOp kind) {
  const DType t = a.input_dtype(0);
  const bool is_int = t == DType::kI64 || t == DType::kI32;
  if (t != DType::kUndefined && !is_cuda_float(t) && !is_int) return std::unique_ptr<CudaOpKernel>();
  if (is_int && (kind == BinaryOp::kPow || kind == BinaryOp::kPRelu)) return std::unique_ptr<CudaOpKernel>();
  if (kind == BinaryOp::kMod) {
    // Float Mod must use fmod=1 (C fmod); integer Mod with fmod=0 (Python's %), as the kernels do.
    const bool fmod = AttrReader(a.node).get_int("fmod", 0) != 0;
    if (t == DType::kUndefined || fmod == is_int) return std::unique_ptr<CudaOpKernel>();
  }
  if (a.input_dtype(1) != DType::kUndefined && t != DType::kUndefined && a.input_dtype(1) != t)
    return std::unique_ptr<CudaOpKernel>();  // Pow with a different exponent type: host
  const Node& node = a.node;
  return make_fn_kernel([kind, &node](CudaContext& ctx, KernelContext&, const std::vector<const DeviceTensor*>& in,
                                      std::vector<DeviceTensor>& out) -> Status {
    if (in[0]->dtype != in[1]->dtype) return unsupported(node.describe() + ": mixed input types");
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, broadcast_all(node, in));
    cuda::StridedDesc d;
    std::vector<std::vector<int64_t>> extra;
    RETURN_IF_ERROR(make_broadcast_desc(dims, {in[0]->dims, in[1]->dims}, &d, &extra));
    ASSIGN_OR_RETURN(out[0], ctx.allocate(in[0]->dtype, dims));
    return launched(cuda::launch_binary(kind, onnx_type(in[0]->dtype), in[0]->data, in[1]->data, out[0].data, d,
                                        extra[0].data(), ctx.stream()),
                    node, node.op_type.c_str());
  });
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_compare(const CudaKernelArgs& a, CompareOp kind) {
  const Node& node = a.node;
  return make_fn_kernel([kind, &node](CudaContext& ctx, KernelContext&, const std::vector<const DeviceTensor*>& in,
                                      std::vector<DeviceTensor>& out) -> Status {
    if (in[0]->dtype != in[1]->dtype) return unsupported(node.describe() + ": mixed input types");
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, broadcast_all(node, in));
    cuda::StridedDesc d;
    std::vector<std::vector<int64_t>> extra;
    RETURN_IF_ERROR(make_broadcast_desc(dims, {in[0]->dims, in[1]->dims}, &d, &extra));
    ASSIGN_OR_RETURN(out[0], ctx.allocate(DType::kBool, dims));
    return launched(cuda::launch_compare(kind, onnx_type(in[0]->dtype), in[0]->data, in[1]->data, out[0].data, d,
                                         extra[0].data(), ctx.stream()),
                    node, node.op_type.c_str());
  });
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_where(const CudaKernelArgs& a) {
  const Node& node = a.node;
  return make_fn_kernel([&node](CudaContext& ctx, KernelContext&, const std::vector<const DeviceTensor*>& in,
                                std::vector<DeviceTensor>& out) -> Status {
    if (in[1]->dtype != in[2]->dtype || in[0]->dtype != DType::kBool || in[1]->dtype == DType::kString)
      return unsupported(node.describe() + ": types not covered");
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, broadcast_all(node, in));
    cuda::StridedDesc d;
    std::vector<std::vector<int64_t>> extra;
    RETURN_IF_ERROR(make_broadcast_desc(dims, {in[0]->dims, in[1]->dims, in[2]->dims}, &d, &extra));
    ASSIGN_OR_RETURN(out[0], ctx.allocate(in[1]->dtype, dims));
    return launched(cuda::launch_where(static_cast<int>(dtype_size(in[1]->dtype)), in[0]->data, in[1]->data, in[2]->data,
                                       out[0].data, d, extra[0].data(), extra[1].data(), ctx.stream()),
                    node, "Where");
  });
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_cast(const CudaKernelArgs& a) {
  DType to;
  if (!dtype_from_onnx(static_cast<int32_t>(AttrReader(a.node).get_int("to", 0)), &to) || to == DType::kString)
    return std::unique_ptr<CudaOpKernel>();
  const Node& node = a.node;
  return make_fn_kernel([to, &node](CudaContext& ctx, KernelContext&, const std::vector<const DeviceTensor*>& in,
                                    std::vector<DeviceTensor>& out) -> Status {
    if (in[0]->dtype == to) {
      out[0] = *in[0];
      return Status::ok();
    }
    ASSIGN_OR_RETURN(out[0], ctx.allocate(to, in[0]->dims));
    return launched(cuda::launch_cast(onnx_type(in[0]->dtype), onnx_type(to), in[0]->data, out[0].data, in[0]->numel(),
                                      ctx.stream()),
                    node, "Cast");
  });
}

/// BatchNormalization in inference: y = x * a[c] + b[c], a = scale / sqrt(var + eps), b = bias - mean * a,
/// folded on the host from the constant statistics.
StatusOr<std::unique_ptr<CudaOpKernel>> make_batchnorm(const CudaKernelArgs& a) {
  AttrReader r(a.node);
  if (r.get_int("training_mode", 0) != 0 || a.node.inputs.size() < 5) return std::unique_ptr<CudaOpKernel>();
  const Tensor *scale = a.constant_input(1), *bias = a.constant_input(2), *mean = a.constant_input(3),
               *var = a.constant_input(4);
  if (!scale || !bias || !mean || !var) return std::unique_ptr<CudaOpKernel>();
  const int64_t c = scale->numel();
  if (bias->numel() != c || mean->numel() != c || var->numel() != c) return std::unique_ptr<CudaOpKernel>();
  const double eps = r.get_float("epsilon", 1e-5f);
  Tensor coef = Tensor::allocate(DType::kF32, {2, c});
  float* p = coef.mutable_data<float>();
  for (int64_t i = 0; i < c; ++i) {
    const double s = scale->get_double(i) / std::sqrt(var->get_double(i) + eps);
    p[i] = static_cast<float>(s);
    p[c + i] = static_cast<float>(bias->get_double(i) - mean->get_double(i) * s);
  }
  ASSIGN_OR_RETURN(DeviceTensor dcoef, a.ctx.upload(coef));
  const Node& node = a.node;
  return make_fn_kernel([dcoef, c, &node](CudaContext& ctx, KernelContext&, const std::vector<const DeviceTensor*>& in,
                                          std::vector<DeviceTensor>& out) -> Status {
    const DeviceTensor& x = *in[0];
    if (x.rank() < 2 || x.dims[1] != c) return unsupported(node.describe() + ": channel count differs from the statistics");
    int64_t inner = 1;
    for (int64_t i = 2; i < x.rank(); ++i) inner *= x.dims[i];
    ASSIGN_OR_RETURN(out[0], ctx.allocate(x.dtype, x.dims));
    const float* ca = dcoef.as<float>();
    return launched(cuda::launch_channel_affine(onnx_type(x.dtype), x.data, ca, ca + c, out[0].data, x.dims[0], c, inner,
                                                ctx.stream()),
                    node, "BatchNormalization");
  });
}

}  // namespace

void register_cuda_elementwise_kernels(CudaKernelTable& t) {
  for (const UnaryDef& u : kUnary) {
    const UnaryOp kind = u.kind;
    t.add(u.domain, u.op,
          {accepts_dropout, [kind](const CudaKernelArgs& a) { return make_unary(a, kind); }, cuda_float_types()});
  }
  const std::pair<const char*, BinaryOp> binary[] = {{"Add", BinaryOp::kAdd}, {"Sub", BinaryOp::kSub},
                                                     {"Mul", BinaryOp::kMul}, {"Div", BinaryOp::kDiv},
                                                     {"Pow", BinaryOp::kPow}, {"Max", BinaryOp::kMax},
                                                     {"Min", BinaryOp::kMin}, {"Mod", BinaryOp::kMod},
                                                     {"PRelu", BinaryOp::kPRelu}};
  const std::vector<DType> arith_types = {DType::kF32, DType::kF16, DType::kBF16, DType::kI64, DType::kI32};
  for (const auto& [name, kind] : binary) {
    const BinaryOp k = kind;
    t.add("", name,
          {[](const Node& n, std::string* why) {
             if (n.inputs.size() == 2) return true;
             if (why) *why = n.op_type + " with " + std::to_string(n.inputs.size()) + " inputs runs on the host (cuda: 2)";
             return false;
           },
           [k](const CudaKernelArgs& a) { return make_binary(a, k); }, arith_types});
  }
  const std::pair<const char*, CompareOp> compare[] = {
      {"Equal", CompareOp::kEqual}, {"Less", CompareOp::kLess}, {"Greater", CompareOp::kGreater},
      {"LessOrEqual", CompareOp::kLessEqual}, {"GreaterOrEqual", CompareOp::kGreaterEqual},
      {"And", CompareOp::kAnd}, {"Or", CompareOp::kOr}, {"Xor", CompareOp::kXor}};
  for (const auto& [name, kind] : compare) {
    const CompareOp k = kind;
    t.add("", name, {nullptr, [k](const CudaKernelArgs& a) { return make_compare(a, k); }, {}});
  }
  t.add("", "Where", {nullptr, make_where, {}});
  t.add("", "Cast", {nullptr, make_cast, {}});
  t.add("", "BatchNormalization", {accepts_single_output, make_batchnorm, cuda_float_types()});
}

}  // namespace ferry
