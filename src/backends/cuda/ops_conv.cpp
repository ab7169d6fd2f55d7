// cuDNN kernels for Conv (2-D, NCHW), com.ferry FusedConv (bias, residual, activation) and
// MaxPool / AveragePool. The convolution algorithm is chosen by timing every candidate
// (cudnnFindConvolutionForwardAlgorithmEx) the first time a problem signature is seen, and
// cached per signature in the context; FERRY_CUDA_CONV_TUNE=0 uses cuDNN's heuristic instead.
// TF32 stays off for fp32 (CUDNN_FMA_MATH) unless CudaOptions::allow_tf32.
#include <sstream>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/ops_util.h"

namespace ferry {
namespace {

using Inputs = std::vector<const DeviceTensor*>;
using Outputs = std::vector<DeviceTensor>;

constexpr size_t kMaxConvWorkspace = size_t{512} << 20;

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::kF16: return CUDNN_DATA_HALF;
    case DType::kBF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

/// Spatial attributes of a 2-D Conv or pool, with symmetric padding resolved (auto_pad included).
struct Window {
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, dilation[2] = {1, 1}, pad[2] = {0, 0};
};

/// Resolves pads for input spatial dims `in`; false when the padding is asymmetric (host runs it).
bool resolve_window(const Node& node, const int64_t in[2], const int64_t kernel[2], Window* w) {
  AttrReader r(node);
  const std::vector<int64_t> st = r.get_ints("strides", {1, 1}), dl = r.get_ints("dilations", {1, 1});
  const std::vector<int64_t> pads = r.get_ints("pads", {0, 0, 0, 0});
  const std::string auto_pad = r.get_string("auto_pad", "NOTSET");
  if (st.size() != 2 || dl.size() != 2 || pads.size() != 4) return false;
  for (int i = 0; i < 2; ++i) {
    w->kernel[i] = kernel[i];
    w->stride[i] = st[i];
    w->dilation[i] = dl[i];
    int64_t begin = pads[i], end = pads[i + 2];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t out = (in[i] + st[i] - 1) / st[i];
      const int64_t total = std::max<int64_t>(0, (out - 1) * st[i] + (kernel[i] - 1) * dl[i] + 1 - in[i]);
      begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      end = total - begin;
    } else if (auto_pad == "VALID") {
      begin = end = 0;
    }
    if (begin != end) return false;
    w->pad[i] = begin;
  }
  return true;
}

/// A cuDNN descriptor holder.
struct ConvDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~ConvDescs() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

class ConvKernel : public CudaOpKernel {
 public:
  ConvKernel(const Node& node, bool fused) : node_(node), fused_(fused) {}

  Status run(CudaContext& ctx, KernelContext&, const Inputs& in, Outputs& out) override {
    const DeviceTensor &x = *in[0], &w = *in[1];
    const DeviceTensor* b = in.size() > 2 ? in[2] : nullptr;
    const DeviceTensor* z = fused_ && in.size() > 3 ? in[3] : nullptr;
    if (!is_cuda_float(x.dtype) || w.dtype != x.dtype || (b && b->dtype != x.dtype) || (z && z->dtype != x.dtype))
      return unsupported(node_.describe() + ": cuDNN path takes X, W, B of one float type");
    if (x.rank() != 4 || w.rank() != 4) return unsupported(node_.describe() + ": cuDNN path covers 2-D convolutions");
    const int64_t group = AttrReader(node_).get_int("group", 1);
    const int64_t in_hw[2] = {x.dims[2], x.dims[3]}, k_hw[2] = {w.dims[2], w.dims[3]};
    Window win;
    if (!resolve_window(node_, in_hw, k_hw, &win)) return unsupported(node_.describe() + ": asymmetric padding");
    if (group <= 0 || x.dims[1] != w.dims[1] * group || w.dims[0] % group != 0)
      return invalid_argument(node_.describe() + ": channels " + std::to_string(x.dims[1]) + " do not match W " +
                              dims_to_string(w.dims) + " with group " + std::to_string(group));
    if (!ctx.cudnn()) return internal_error(node_.describe() + ": cuDNN could not be initialized (libcudnn.so.9 missing?)");
    ConvDescs d;
    const cudnnDataType_t dt = cudnn_type(x.dtype);
    CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d.x));
    CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d.y));
    CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&d.w));
    CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&d.conv));
    CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, dt, int(x.dims[0]), int(x.dims[1]),
                                                     int(x.dims[2]), int(x.dims[3])));
    CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(d.w, dt, CUDNN_TENSOR_NCHW, int(w.dims[0]), int(w.dims[1]),
                                                     int(w.dims[2]), int(w.dims[3])));
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(d.conv, int(win.pad[0]), int(win.pad[1]), int(win.stride[0]),
                                                          int(win.stride[1]), int(win.dilation[0]), int(win.dilation[1]),
                                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionGroupCount(d.conv, int(group)));
    const bool fp32 = x.dtype == DType::kF32;
    const cudnnMathType_t math = fp32 && !ctx.options().allow_tf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(d.conv, math));
    int n = 0, c = 0, h = 0, wd = 0;
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &n, &c, &h, &wd));
    CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, dt, n, c, h, wd));
    ASSIGN_OR_RETURN(out[0], ctx.allocate(x.dtype, {n, c, h, wd}));
    if (out[0].numel() == 0) return Status::ok();

    std::ostringstream sig;
    sig << "conv " << static_cast<int>(x.dtype) << " " << dims_to_string(x.dims) << " " << dims_to_string(w.dims) << " p"
        << win.pad[0] << "," << win.pad[1] << " s" << win.stride[0] << "," << win.stride[1] << " d" << win.dilation[0]
        << "," << win.dilation[1] << " g" << group << " m" << static_cast<int>(math);
    auto& cache = ctx.tuned_algos();
    auto it = cache.find(sig.str());
    if (it == cache.end()) {
      ASSIGN_OR_RETURN(CudaContext::TunedAlgo choice, choose(ctx, d, x, w, out[0], fp32 && !ctx.options().allow_tf32));
      it = cache.emplace(sig.str(), choice).first;
    }
    const CudaContext::TunedAlgo& algo = it->second;
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(d.conv, static_cast<cudnnMathType_t>(algo.math_type)));
    void* ws = nullptr;
    if (algo.workspace > 0) {
      ASSIGN_OR_RETURN(ws, ctx.workspace(algo.workspace));
    }
    const float one = 1.f, zero = 0.f;
    CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(ctx.cudnn(), &one, d.x, x.data, d.w, w.data, d.conv,
                                                  static_cast<cudnnConvolutionFwdAlgo_t>(algo.algo), ws, algo.workspace,
                                                  &zero, d.y, out[0].data));
    if (b) {
      if (b->numel() != c) return invalid_argument(node_.describe() + ": bias has " + std::to_string(b->numel()) + " values for " + std::to_string(c) + " channels");
      CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d.bias));
      CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(d.bias, CUDNN_TENSOR_NCHW, dt, 1, c, 1, 1));
      CUDNN_RETURN_IF_ERROR(cudnnAddTensor(ctx.cudnn(), &one, d.bias, b->data, &one, d.y, out[0].data));
    }
    if (z) {
      if (z->dims != out[0].dims) return unsupported(node_.describe() + ": residual of another shape");
      CUDNN_RETURN_IF_ERROR(cudnnAddTensor(ctx.cudnn(), &one, d.y, z->data, &one, d.y, out[0].data));
    }
    if (fused_) return apply_activation(ctx, out[0]);
    return Status::ok();
  }

 private:
  /// Times every algorithm cuDNN offers for the problem (or asks its heuristic) and keeps the fastest
  /// that fits the workspace limit and, for strict fp32, does not use TF32 tensor cores.
  StatusOr<CudaContext::TunedAlgo> choose(CudaContext& ctx, ConvDescs& d, const DeviceTensor& x, const DeviceTensor& w,
                                          DeviceTensor& y, bool strict_fp32) {
    constexpr int kMax = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    int found = 0;
    if (ctx.options().tune_conv) {
      ASSIGN_OR_RETURN(void* ws, ctx.workspace(kMaxConvWorkspace));
      CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionForwardAlgorithmEx(ctx.cudnn(), d.x, x.data, d.w, w.data, d.conv, d.y,
                                                                   y.data, kMax, &found, perf, ws, kMaxConvWorkspace));
    } else {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn(), d.x, d.w, d.conv, d.y, kMax, &found, perf));
    }
    for (int i = 0; i < found; ++i) {
      const cudnnConvolutionFwdAlgoPerf_t& p = perf[i];
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxConvWorkspace) continue;
      if (strict_fp32 && p.mathType != CUDNN_FMA_MATH && p.mathType != CUDNN_DEFAULT_MATH) continue;
      return CudaContext::TunedAlgo{static_cast<int>(p.algo), static_cast<int>(p.mathType), p.memory};
    }
    return unsupported(node_.describe() + ": cuDNN offers no convolution algorithm for this problem");
  }

  Status apply_activation(CudaContext& ctx, DeviceTensor& y) {
    AttrReader r(node_);
    const std::string act = r.get_string("activation", "");
    if (act.empty()) return Status::ok();
    const std::vector<float> p = r.get_floats("activation_params");
    cuda::UnaryOp op;
    float a = 0.f, b = 0.f;
    if (act == "Relu") op = cuda::UnaryOp::kRelu;
    else if (act == "LeakyRelu") { op = cuda::UnaryOp::kLeakyRelu; a = p.empty() ? 0.01f : p[0]; }
    else if (act == "Clip" && p.size() == 2) { op = cuda::UnaryOp::kClip; a = p[0]; b = p[1]; }
    else if (act == "Sigmoid") op = cuda::UnaryOp::kSigmoid;
    else if (act == "HardSigmoid") { op = cuda::UnaryOp::kHardSigmoid; a = p.size() > 0 ? p[0] : 0.2f; b = p.size() > 1 ? p[1] : 0.5f; }
    else if (act == "HardSwish") op = cuda::UnaryOp::kHardSwish;
    else if (act == "Tanh") op = cuda::UnaryOp::kTanh;
    else if (act == "Silu" || act == "Swish") op = cuda::UnaryOp::kSilu;
    else if (act == "Gelu") op = cuda::UnaryOp::kGeluErf;
    else if (act == "GeluTanh") op = cuda::UnaryOp::kGeluTanh;
    else return unsupported(node_.describe() + ": activation '" + act + "' has no CUDA kernel");
    return launched(cuda::launch_unary(op, onnx_type(y.dtype), y.data, y.data, y.numel(), a, b, ctx.stream()), node_,
                    "activation");
  }

  const Node& node_;
  bool fused_;
};

bool accepts_conv(const Node& node, std::string* why) {
  AttrReader r(node);
  std::string problem;
  if (node.domain == "com.ferry" && r.get_int("channels_last", 0) != 0) problem = "channels_last=1";
  const std::vector<int64_t> k = r.get_ints("kernel_shape");
  if (!k.empty() && k.size() != 2) problem = std::to_string(k.size()) + "-D kernels";
  if (problem.empty()) return true;
  if (why) *why = node.op_type + " with " + problem + " runs on the host (cuda: 2-D NCHW)";
  return false;
}

class PoolKernel : public CudaOpKernel {
 public:
  PoolKernel(const Node& node, bool max) : node_(node), max_(max) {}
  Status run(CudaContext& ctx, KernelContext&, const Inputs& in, Outputs& out) override {
    const DeviceTensor& x = *in[0];
    if (!is_cuda_float(x.dtype) || x.rank() != 4) return unsupported(node_.describe() + ": cuDNN pooling covers 4-D float");
    AttrReader r(node_);
    const std::vector<int64_t> k = r.get_ints("kernel_shape");
    if (k.size() != 2) return unsupported(node_.describe() + ": cuDNN pooling covers 2-D windows");
    const int64_t in_hw[2] = {x.dims[2], x.dims[3]}, k_hw[2] = {k[0], k[1]};
    Window win;
    if (!resolve_window(node_, in_hw, k_hw, &win) || win.dilation[0] != 1 || win.dilation[1] != 1)
      return unsupported(node_.describe() + ": asymmetric padding or dilation");
    const cudnnPoolingMode_t mode = max_ ? CUDNN_POOLING_MAX
                                         : (r.get_int("count_include_pad", 0) ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                                              : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING);
    if (!ctx.cudnn()) return internal_error(node_.describe() + ": cuDNN could not be initialized (libcudnn.so.9 missing?)");
    cudnnPoolingDescriptor_t pd = nullptr;
    cudnnTensorDescriptor_t xd = nullptr, yd = nullptr;
    struct Guard {
      cudnnPoolingDescriptor_t& p;
      cudnnTensorDescriptor_t& a;
      cudnnTensorDescriptor_t& b;
      ~Guard() {
        if (p) cudnnDestroyPoolingDescriptor(p);
        if (a) cudnnDestroyTensorDescriptor(a);
        if (b) cudnnDestroyTensorDescriptor(b);
      }
    } guard{pd, xd, yd};
    const cudnnDataType_t dt = cudnn_type(x.dtype);
    CUDNN_RETURN_IF_ERROR(cudnnCreatePoolingDescriptor(&pd));
    CUDNN_RETURN_IF_ERROR(cudnnSetPooling2dDescriptor(pd, mode, CUDNN_PROPAGATE_NAN, int(k[0]), int(k[1]), int(win.pad[0]),
                                                      int(win.pad[1]), int(win.stride[0]), int(win.stride[1])));
    CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&xd));
    CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, dt, int(x.dims[0]), int(x.dims[1]),
                                                     int(x.dims[2]), int(x.dims[3])));
    int n = 0, c = 0, h = 0, w = 0;
    CUDNN_RETURN_IF_ERROR(cudnnGetPooling2dForwardOutputDim(pd, xd, &n, &c, &h, &w));
    CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&yd));
    CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, dt, n, c, h, w));
    ASSIGN_OR_RETURN(out[0], ctx.allocate(x.dtype, {n, c, h, w}));
    if (out[0].numel() == 0) return Status::ok();
    const float one = 1.f, zero = 0.f;
    CUDNN_RETURN_IF_ERROR(cudnnPoolingForward(ctx.cudnn(), pd, &one, xd, x.data, &zero, yd, out[0].data));
    return Status::ok();
  }

 private:
  const Node& node_;
  bool max_;
};

bool accepts_pool(const Node& node, std::string* why) {
  AttrReader r(node);
  std::string problem;
  if (!accepts_single_output(node, nullptr)) problem = "the Indices output";
  else if (r.get_int("ceil_mode", 0) != 0) problem = "ceil_mode=1";
  else if (r.get_int("storage_order", 0) != 0) problem = "storage_order=1";
  else if (r.get_ints("kernel_shape").size() != 2) problem = "a non-2-D window";
  if (problem.empty()) return true;
  if (why) *why = node.op_type + " with " + problem + " runs on the host (cuda: 2-D, floor mode, one output)";
  return false;
}

}  // namespace

void register_cuda_conv_kernels(CudaKernelTable& t) {
  t.add("", "Conv",
        {accepts_conv, [](const CudaKernelArgs& a) -> StatusOr<std::unique_ptr<CudaOpKernel>> {
           return std::unique_ptr<CudaOpKernel>(new ConvKernel(a.node, false));
         }, cuda_float_types()});
  t.add("com.ferry", "FusedConv",
        {accepts_conv, [](const CudaKernelArgs& a) -> StatusOr<std::unique_ptr<CudaOpKernel>> {
           return std::unique_ptr<CudaOpKernel>(new ConvKernel(a.node, true));
         }, cuda_float_types()});
  t.add("", "MaxPool",
        {accepts_pool, [](const CudaKernelArgs& a) -> StatusOr<std::unique_ptr<CudaOpKernel>> {
           return std::unique_ptr<CudaOpKernel>(new PoolKernel(a.node, true));
         }, cuda_float_types()});
  t.add("", "AveragePool",
        {accepts_pool, [](const CudaKernelArgs& a) -> StatusOr<std::unique_ptr<CudaOpKernel>> {
           return std::unique_ptr<CudaOpKernel>(new PoolKernel(a.node, false));
         }, cuda_float_types()});
}

}  // namespace ferry
