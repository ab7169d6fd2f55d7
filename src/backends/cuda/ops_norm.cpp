// CUDA kernels for row-wise ops: Softmax/LogSoftmax, LayerNormalization (ONNX and com.ferry),
// Reduce*, GlobalAverage/MaxPool, Resize (2-D nearest/linear). Launchers in norm_reduce.cu
// and data_attention.cu.
#include <cmath>

#include "backends/cuda/ops_util.h"

namespace ferry {
namespace {

using Inputs = std::vector<const DeviceTensor*>;
using Outputs = std::vector<DeviceTensor>;

StatusOr<std::unique_ptr<CudaOpKernel>> make_softmax(const CudaKernelArgs& a, bool log) {
  const Node& node = a.node;
  const bool legacy = a.opset < 13;  // coerced to 2-D at `axis` (default 1) before opset 13
  const int64_t axis_attr = AttrReader(node).get_int("axis", legacy ? 1 : -1);
  return make_fn_kernel([&node, legacy, axis_attr, log](CudaContext& ctx, KernelContext&, const Inputs& in,
                                                         Outputs& out) -> Status {
    const DeviceTensor& x = *in[0];
    if (!is_cuda_float(x.dtype)) return unsupported(node.describe() + ": cuda kernel takes f32/f16/bf16");
    int64_t axis = axis_attr;
    if (!normalize_axis(&axis, x.rank())) return invalid_argument(node.describe() + ": axis out of range");
    int64_t outer = 1, n = 1, inner = 1;
    for (int64_t i = 0; i < x.rank(); ++i) {
      if (i < axis) outer *= x.dims[i];
      else if (legacy || i == axis) n *= x.dims[i];
      else inner *= x.dims[i];
    }
    ASSIGN_OR_RETURN(out[0], ctx.allocate(x.dtype, x.dims));
    return launched(cuda::launch_softmax(onnx_type(x.dtype), x.data, out[0].data, outer, n, inner, log, ctx.stream()), node,
                    "Softmax");
  });
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_layernorm(const CudaKernelArgs& a) {
  const Node& node = a.node;
  AttrReader r(node);
  const int64_t axis_attr = r.get_int("axis", -1);
  const float eps = r.get_float("epsilon", 1e-5f);
  return make_fn_kernel([&node, axis_attr, eps](CudaContext& ctx, KernelContext&, const Inputs& in, Outputs& out) -> Status {
    const DeviceTensor& x = *in[0];
    if (!is_cuda_float(x.dtype)) return unsupported(node.describe() + ": cuda kernel takes f32/f16/bf16");
    int64_t axis = axis_attr;
    if (!normalize_axis(&axis, x.rank())) return invalid_argument(node.describe() + ": axis out of range");
    int64_t rows = 1, cols = 1;
    for (int64_t i = 0; i < x.rank(); ++i) (i < axis ? rows : cols) *= x.dims[i];
    // Scale and bias must cover the normalized dims exactly (broadcast forms run on the host).
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i] && (in[i]->numel() != cols || in[i]->dtype != x.dtype))
        return unsupported(node.describe() + ": scale/bias of shape " + dims_to_string(in[i]->dims) +
                           " (cuda needs one value per normalized element, in X's type)");
    ASSIGN_OR_RETURN(out[0], ctx.allocate(x.dtype, x.dims));
    const void* scale = in.size() > 1 && in[1] ? in[1]->data : nullptr;
    const void* bias = in.size() > 2 && in[2] ? in[2]->data : nullptr;
    return launched(cuda::launch_layernorm(onnx_type(x.dtype), x.data, scale, bias, out[0].data, rows, cols, eps,
                                           ctx.stream()),
                    node, "LayerNormalization");
  });
}

struct ReduceDef {
  const char* op;
  cuda::ReduceOp kind;
};
const ReduceDef kReduce[] = {{"ReduceSum", cuda::ReduceOp::kSum},         {"ReduceMean", cuda::ReduceOp::kMean},
                             {"ReduceMax", cuda::ReduceOp::kMax},         {"ReduceMin", cuda::ReduceOp::kMin},
                             {"ReduceProd", cuda::ReduceOp::kProd},       {"ReduceSumSquare", cuda::ReduceOp::kSumSquare},
                             {"ReduceL1", cuda::ReduceOp::kL1},           {"ReduceL2", cuda::ReduceOp::kL2},
                             {"ReduceLogSumExp", cuda::ReduceOp::kLogSumExp}};

/// Reduces `axes` of x (all when empty) into out (contiguous over the kept axes).
Status run_reduce(CudaContext& ctx, const Node& node, cuda::ReduceOp kind, const DeviceTensor& x,
                  std::vector<int64_t> axes, bool keepdims, DeviceTensor* out) {
  const int64_t r = x.rank();
  std::vector<bool> red(static_cast<size_t>(r), axes.empty());
  for (int64_t ax : axes) {
    if (!normalize_axis(&ax, r)) return invalid_argument(node.describe() + ": axis out of range");
    red[static_cast<size_t>(ax)] = true;
  }
  const std::vector<int64_t> xs = strides_of(x.dims);
  std::vector<int64_t> kept_dims, kept_strides, r_dims, r_strides, out_dims;
  for (int64_t i = 0; i < r; ++i) {
    if (red[i]) {
      r_dims.push_back(x.dims[i]);
      r_strides.push_back(xs[i]);
      if (keepdims) out_dims.push_back(1);
    } else {
      kept_dims.push_back(x.dims[i]);
      kept_strides.push_back(xs[i]);
      out_dims.push_back(x.dims[i]);
    }
  }
  if (kept_dims.size() > static_cast<size_t>(cuda::kMaxRank) || r_dims.size() > static_cast<size_t>(cuda::kMaxRank))
    return unsupported(node.describe() + ": rank above " + std::to_string(cuda::kMaxRank));
  cuda::StridedDesc d;
  d.rank = static_cast<int>(kept_dims.size());
  for (size_t i = 0; i < kept_dims.size(); ++i) {
    d.dims[i] = kept_dims[i];
    d.in_strides[i] = kept_strides[i];
  }
  ASSIGN_OR_RETURN(*out, ctx.allocate(x.dtype, out_dims));
  return launched(cuda::launch_reduce(kind, onnx_type(x.dtype), x.data, out->data, d, static_cast<int>(r_dims.size()),
                                      r_dims.data(), r_strides.data(), ctx.stream()),
                  node, node.op_type.c_str());
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_reduce(const CudaKernelArgs& a, cuda::ReduceOp kind) {
  const Node& node = a.node;
  AttrReader r(node);
  const bool axes_input = a.schema.since_version > 1;
  const bool keepdims = r.get_int("keepdims", 1) != 0;
  const bool noop_empty = r.get_int("noop_with_empty_axes", 0) != 0;
  const std::vector<int64_t> attr_axes = r.get_ints("axes");
  return make_fn_kernel(
      [&node, kind, axes_input, keepdims, noop_empty, attr_axes](CudaContext& ctx, KernelContext& kc, const Inputs& in,
                                                                 Outputs& out) -> Status {
        const DeviceTensor& x = *in[0];
        if (!is_cuda_float(x.dtype)) return unsupported(node.describe() + ": cuda kernel takes f32/f16/bf16");
        std::vector<int64_t> axes = attr_axes;
        if (axes_input) axes = kc.has_input(1) ? kc.input(1).to_int64_vector() : std::vector<int64_t>{};
        if (axes.empty() && noop_empty) {
          out[0] = x;
          return Status::ok();
        }
        return run_reduce(ctx, node, kind, x, axes, keepdims, &out[0]);
      },
      axes_input ? 0x2 : 0);
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_global_pool(const CudaKernelArgs& a, cuda::ReduceOp kind) {
  const Node& node = a.node;
  return make_fn_kernel([&node, kind](CudaContext& ctx, KernelContext&, const Inputs& in, Outputs& out) -> Status {
    const DeviceTensor& x = *in[0];
    if (!is_cuda_float(x.dtype) || x.rank() < 3) return unsupported(node.describe() + ": type or rank not covered");
    std::vector<int64_t> axes;
    for (int64_t i = 2; i < x.rank(); ++i) axes.push_back(i);
    return run_reduce(ctx, node, kind, x, axes, true, &out[0]);
  });
}

bool accepts_resize(const Node& node, std::string* why) {
  AttrReader r(node);
  const std::string mode = r.get_string("mode", "nearest");
  const std::string coord = r.get_string("coordinate_transformation_mode", "half_pixel");
  std::string problem;
  if (mode != "nearest" && mode != "linear") problem = "mode='" + mode + "'";
  else if (coord == "tf_crop_and_resize" || coord == "half_pixel_symmetric") problem = "coordinate_transformation_mode='" + coord + "'";
  else if (r.get_int("antialias", 0) != 0) problem = "antialias=1";
  else if (r.has("axes")) problem = "the axes attribute";
  else if (r.get_string("keep_aspect_ratio_policy", "stretch") != "stretch") problem = "keep_aspect_ratio_policy";
  if (problem.empty()) return true;
  if (why) *why = "Resize with " + problem + " runs on the host (cuda: nearest/linear over H and W)";
  return false;
}

StatusOr<std::unique_ptr<CudaOpKernel>> make_resize(const CudaKernelArgs& a) {
  if (a.opset < 11) return std::unique_ptr<CudaOpKernel>();
  const Node& node = a.node;
  AttrReader r(node);
  const cuda::ResizeMode mode = r.get_string("mode", "nearest") == "linear" ? cuda::ResizeMode::kLinear : cuda::ResizeMode::kNearest;
  const std::string c = r.get_string("coordinate_transformation_mode", "half_pixel");
  cuda::CoordMode coord = cuda::CoordMode::kHalfPixel;
  if (c == "asymmetric") coord = cuda::CoordMode::kAsymmetric;
  else if (c == "align_corners") coord = cuda::CoordMode::kAlignCorners;
  else if (c == "pytorch_half_pixel") coord = cuda::CoordMode::kPytorchHalfPixel;
  else if (c == "tf_half_pixel_for_nearest") coord = cuda::CoordMode::kTfHalfPixelForNearest;
  const std::string nm = r.get_string("nearest_mode", "round_prefer_floor");
  cuda::NearestMode nearest = cuda::NearestMode::kRoundPreferFloor;
  if (nm == "round_prefer_ceil") nearest = cuda::NearestMode::kRoundPreferCeil;
  else if (nm == "floor") nearest = cuda::NearestMode::kFloor;
  else if (nm == "ceil") nearest = cuda::NearestMode::kCeil;
  return make_fn_kernel(
      [&node, mode, coord, nearest](CudaContext& ctx, KernelContext& kc, const Inputs& in, Outputs& out) -> Status {
        const DeviceTensor& x = *in[0];
        if (!is_cuda_float(x.dtype) || x.rank() != 4) return unsupported(node.describe() + ": cuda Resize takes 4-D float");
        std::vector<float> scales(4, 1.f);
        std::vector<int64_t> dims = x.dims;
        if (kc.has_input(3) && kc.input(3).numel() > 0) {
          const std::vector<int64_t> sizes = kc.input(3).to_int64_vector();
          if (sizes.size() != 4) return invalid_argument(node.describe() + ": sizes must have 4 values");
          for (size_t i = 0; i < 4; ++i) {
            dims[i] = sizes[i];
            scales[i] = static_cast<float>(sizes[i]) / static_cast<float>(x.dims[i]);
          }
        } else if (kc.has_input(2) && kc.input(2).numel() > 0) {
          const std::vector<double> s = kc.input(2).to_double_vector();
          if (s.size() != 4) return invalid_argument(node.describe() + ": scales must have 4 values");
          for (size_t i = 0; i < 4; ++i) {
            scales[i] = static_cast<float>(s[i]);
            dims[i] = static_cast<int64_t>(std::floor(static_cast<double>(x.dims[i]) * s[i]));
          }
        } else {
          return invalid_argument(node.describe() + ": neither scales nor sizes is given");
        }
        if (dims[0] != x.dims[0] || dims[1] != x.dims[1])
          return unsupported(node.describe() + ": resizing N or C runs on the host");
        ASSIGN_OR_RETURN(out[0], ctx.allocate(x.dtype, dims));
        return launched(cuda::launch_resize2d(onnx_type(x.dtype), x.data, out[0].data, x.dims[0] * x.dims[1], x.dims[2],
                                              x.dims[3], dims[2], dims[3], scales[2], scales[3], mode, coord, nearest,
                                              ctx.stream()),
                        node, "Resize");
      },
      0xe);  // roi, scales, sizes on the host
}

}  // namespace

void register_cuda_norm_kernels(CudaKernelTable& t) {
  t.add("", "Softmax", {nullptr, [](const CudaKernelArgs& a) { return make_softmax(a, false); }, cuda_float_types()});
  t.add("", "LogSoftmax", {nullptr, [](const CudaKernelArgs& a) { return make_softmax(a, true); }, cuda_float_types()});
  t.add("", "LayerNormalization", {accepts_single_output, make_layernorm, cuda_float_types()});
  t.add("com.ferry", "LayerNorm", {nullptr, make_layernorm, cuda_float_types()});
  for (const ReduceDef& d : kReduce) {
    const cuda::ReduceOp kind = d.kind;
    t.add("", d.op, {nullptr, [kind](const CudaKernelArgs& a) { return make_reduce(a, kind); }, cuda_float_types()});
  }
  t.add("", "GlobalAveragePool",
        {nullptr, [](const CudaKernelArgs& a) { return make_global_pool(a, cuda::ReduceOp::kMean); }, cuda_float_types()});
  t.add("", "GlobalMaxPool",
        {nullptr, [](const CudaKernelArgs& a) { return make_global_pool(a, cuda::ReduceOp::kMax); }, cuda_float_types()});
  t.add("", "Resize", {accepts_resize, make_resize, cuda_float_types()});
}

}  // namespace ferry
