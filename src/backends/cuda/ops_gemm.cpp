// cuBLASLt kernels for MatMul, Gemm and com.ferry FusedMatMul / FusedGemm: row-major products
// computed as column-major D^T = B^T A^T (no copies), batched with strides (0 for a shared
// weight), bias and ReLU fused as cuBLASLt epilogues; other activations run as one extra
// in-place kernel. fp32 accumulates in fp32 (TF32 only when allowed: CudaOptions::allow_tf32),
// fp16/bf16 on tensor cores with fp32 accumulation. Plans (descriptors + the heuristic's
// algorithm) are cached per shape in the kernel.
#include <map>
#include <tuple>

#include "backends/cuda/cuda_status.h"
#include "backends/cuda/ops_util.h"

namespace ferry {
namespace {

using Inputs = std::vector<const DeviceTensor*>;
using Outputs = std::vector<DeviceTensor>;

constexpr size_t kLtWorkspace = size_t{32} << 20;

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

/// Activation after the product: ReLU goes into the epilogue, the rest through launch_unary.
struct Activation {
  bool any = false;
  bool relu = false;
  cuda::UnaryOp op = cuda::UnaryOp::kIdentity;
  float alpha = 0.f, beta = 0.f;
};

/// Reads com.ferry's 'activation' / 'activation_params' (src/ops/fused_conv.cpp); false for a name
/// the cuda kernels do not know (the node then runs on the host).
bool parse_activation(const Node& node, Activation* act) {
  AttrReader r(node);
  const std::string name = r.get_string("activation", "");
  const std::vector<float> p = r.get_floats("activation_params");
  *act = Activation{};
  if (name.empty()) return true;
  act->any = true;
  if (name == "Relu") { act->relu = true; act->op = cuda::UnaryOp::kRelu; return true; }
  if (name == "LeakyRelu") { act->op = cuda::UnaryOp::kLeakyRelu; act->alpha = p.empty() ? 0.01f : p[0]; return true; }
  if (name == "Clip") {
    if (p.size() != 2) return false;
    act->op = cuda::UnaryOp::kClip; act->alpha = p[0]; act->beta = p[1];
    return true;
  }
  if (name == "Sigmoid") { act->op = cuda::UnaryOp::kSigmoid; return true; }
  if (name == "HardSigmoid") {
    act->op = cuda::UnaryOp::kHardSigmoid;
    act->alpha = p.size() > 0 ? p[0] : 0.2f;
    act->beta = p.size() > 1 ? p[1] : 0.5f;
    return true;
  }
  if (name == "HardSwish") { act->op = cuda::UnaryOp::kHardSwish; return true; }
  if (name == "Tanh") { act->op = cuda::UnaryOp::kTanh; return true; }
  if (name == "Silu" || name == "Swish") { act->op = cuda::UnaryOp::kSilu; return true; }
  if (name == "Gelu") { act->op = cuda::UnaryOp::kGeluErf; return true; }
  if (name == "GeluTanh") { act->op = cuda::UnaryOp::kGeluTanh; return true; }
  return false;
}

bool accepts_activation(const Node& node, std::string* why) {
  Activation a;
  if (parse_activation(node, &a)) return true;
  if (why) *why = node.op_type + ": activation '" + AttrReader(node).get_string("activation", "") + "' has no CUDA kernel";
  return false;
}

/// One problem: row-major Y[b] = act(alpha * op(A[b]) op(B[b]) + beta * C[b] + bias), b < batch.
struct GemmProblem {
  DType dtype = DType::kF32;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool trans_a = false, trans_b = false;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_y = 0;  // batch strides (elements)
  bool has_c = false, has_bias = false, relu = false;
  auto key() const {
    return std::make_tuple(static_cast<int>(dtype), m, n, k, batch, trans_a, trans_b, stride_a, stride_b,
                           stride_c, has_c, has_bias, relu);
  }
};

/// Descriptors and the chosen algorithm for one GemmProblem.
class LtPlan {
 public:
  ~LtPlan() {
    if (pref_) cublasLtMatmulPreferenceDestroy(pref_);
    for (auto* l : {a_, b_, c_, d_})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (op_) cublasLtMatmulDescDestroy(op_);
  }

  Status init(CudaContext& ctx, const GemmProblem& p) {
    if (!ctx.cublaslt()) return internal_error("cuBLASLt could not be initialized (libcublasLt.so.13 missing?)");
    const cudaDataType_t dt = cuda_type(p.dtype);
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if (p.dtype == DType::kF32 && ctx.options().allow_tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&op_, compute, CUDA_R_32F));
    // Column-major view: D^T[n, m] = op(B)^T[n, k] * op(A)^T[k, m]; Lt's "A" is our B.
    const cublasOperation_t ta = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (p.has_bias) epi = p.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    else if (p.relu) epi = CUBLASLT_EPILOGUE_RELU;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    // Stored shapes (column-major rows x cols, leading dim).
    const uint64_t a_rows = p.trans_b ? p.k : p.n, a_cols = p.trans_b ? p.n : p.k;
    const uint64_t b_rows = p.trans_a ? p.m : p.k, b_cols = p.trans_a ? p.k : p.m;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&a_, dt, a_rows, a_cols, static_cast<int64_t>(a_rows)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&b_, dt, b_rows, b_cols, static_cast<int64_t>(b_rows)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&c_, dt, p.n, p.m, p.n));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&d_, dt, p.n, p.m, p.n));
    if (p.batch > 1) {
      const int32_t count = static_cast<int32_t>(p.batch);
      auto set_batch = [&](cublasLtMatrixLayout_t l, int64_t stride) -> Status {
        CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
        return Status::ok();
      };
      RETURN_IF_ERROR(set_batch(a_, p.stride_b));
      RETURN_IF_ERROR(set_batch(b_, p.stride_a));
      RETURN_IF_ERROR(set_batch(c_, p.stride_c));
      RETURN_IF_ERROR(set_batch(d_, p.stride_y));
    }
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref_));
    const uint64_t ws = kLtWorkspace;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    int found = 0;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(ctx.cublaslt(), op_, a_, b_, c_, d_, pref_, 1, &heuristic_, &found));
    if (found == 0) return unsupported("cuBLASLt has no algorithm for this product");
    return Status::ok();
  }

  /// y = act(alpha * a b + beta * c + bias) with the plan's shapes.
  Status run(CudaContext& ctx, const void* a, const void* b, const void* c, const void* bias, void* y, float alpha,
             float beta) {
    if (bias)
      CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    ASSIGN_OR_RETURN(void* ws, ctx.workspace(kLtWorkspace));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(ctx.cublaslt(), op_, &alpha, b, a_, a, b_, &beta, c ? c : y, c_, y, d_,
                                          &heuristic_.algo, ws, kLtWorkspace, ctx.stream()));
    return Status::ok();
  }

 private:
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr, d_ = nullptr;
  cublasLtMatmulPreference_t pref_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
};

/// MatMul / Gemm / FusedMatMul / FusedGemm with a plan cache.
class GemmKernel : public CudaOpKernel {
 public:
  GemmKernel(const Node& node, bool gemm, Activation act) : node_(node), gemm_(gemm), act_(act) {
    AttrReader r(node);
    if (gemm) {
      alpha_ = r.get_float("alpha", 1.f);
      beta_ = r.get_float("beta", 1.f);
      trans_a_ = r.get_int("transA", 0) != 0;
      trans_b_ = r.get_int("transB", 0) != 0;
    }
  }

  Status run(CudaContext& ctx, KernelContext&, const Inputs& in, Outputs& out) override {
    const DeviceTensor &a = *in[0], &b = *in[1];
    if (!is_cuda_float(a.dtype) || b.dtype != a.dtype)
      return unsupported(node_.describe() + ": cuBLASLt path takes A and B of one float type (f32/f16/bf16)");
    GemmProblem p;
    p.dtype = a.dtype;
    p.trans_a = trans_a_;
    p.trans_b = trans_b_;
    std::vector<int64_t> out_dims;
    if (gemm_) {
      if (a.rank() != 2 || b.rank() != 2) return invalid_argument(node_.describe() + ": Gemm takes 2-D A and B");
      p.m = trans_a_ ? a.dims[1] : a.dims[0];
      p.k = trans_a_ ? a.dims[0] : a.dims[1];
      p.n = trans_b_ ? b.dims[0] : b.dims[1];
      if ((trans_b_ ? b.dims[1] : b.dims[0]) != p.k)
        return invalid_argument(node_.describe() + ": inner dims differ: A " + dims_to_string(a.dims) + ", B " + dims_to_string(b.dims));
      out_dims = {p.m, p.n};
    } else {
      RETURN_IF_ERROR(matmul_shape(a, b, &p, &out_dims));
    }
    // Bias (FusedMatMul input 2, Gemm C of N values with beta 1) and full C (Gemm C [M, N], FusedMatMul Z).
    const DeviceTensor* bias = nullptr;
    const DeviceTensor* c = nullptr;
    float beta = 0.f;
    if (gemm_ && in.size() > 2 && in[2] && beta_ != 0.f) {
      const DeviceTensor& cc = *in[2];
      if (cc.numel() == p.n && beta_ == 1.f && (cc.rank() == 1 || (cc.rank() == 2 && cc.dims[0] == 1))) bias = &cc;
      else if (cc.dims == out_dims) { c = &cc; beta = beta_; }
      else return unsupported(node_.describe() + ": C of shape " + dims_to_string(cc.dims) + " with beta " + std::to_string(beta_));
    }
    if (!gemm_ && in.size() > 2 && in[2]) {
      if (in[2]->numel() != p.n || in[2]->dims.back() != p.n) return unsupported(node_.describe() + ": bias broadcast not covered");
      bias = in[2];
    }
    if (!gemm_ && in.size() > 3 && in[3]) {
      if (in[3]->dims != out_dims) return unsupported(node_.describe() + ": residual Z must have the output's shape");
      c = in[3];
      beta = 1.f;
    }
    if ((bias && bias->dtype != a.dtype) || (c && c->dtype != a.dtype))
      return unsupported(node_.describe() + ": bias/C of another type");
    p.has_bias = bias != nullptr;
    p.has_c = c != nullptr;
    p.stride_c = c ? p.stride_y : 0;
    p.relu = act_.relu;
    ASSIGN_OR_RETURN(out[0], ctx.allocate(a.dtype, out_dims));
    if (out[0].numel() == 0) return Status::ok();
    if (p.k == 0) return unsupported(node_.describe() + ": empty inner dimension");
    auto it = plans_.find(p.key());
    if (it == plans_.end()) {
      auto plan = std::make_unique<LtPlan>();
      Status st = plan->init(ctx, p);
      if (!st.is_ok()) return st.with_context(node_.describe());
      it = plans_.emplace(p.key(), std::move(plan)).first;
    }
    Status st = it->second->run(ctx, a.data, b.data, c ? c->data : nullptr, bias ? bias->data : nullptr, out[0].data,
                                gemm_ ? alpha_ : 1.f, beta);
    if (!st.is_ok()) return st.with_context(node_.describe());
    if (act_.any && !act_.relu)
      return launched(cuda::launch_unary(act_.op, onnx_type(a.dtype), out[0].data, out[0].data, out[0].numel(), act_.alpha,
                                         act_.beta, ctx.stream()),
                      node_, "activation");
    return Status::ok();
  }

 private:
  /// numpy matmul shapes mapped onto one strided batch: A [..., M, K] x B [..., K, N].
  Status matmul_shape(const DeviceTensor& a, const DeviceTensor& b, GemmProblem* p, std::vector<int64_t>* out_dims) const {
    if (a.rank() == 0 || b.rank() == 0) return invalid_argument(node_.describe() + ": MatMul of a scalar");
    std::vector<int64_t> ad = a.dims, bd = b.dims;
    const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
    if (a_vec) ad.insert(ad.begin(), 1);
    if (b_vec) bd.push_back(1);
    p->m = ad[ad.size() - 2];
    p->k = ad.back();
    p->n = bd.back();
    if (bd[bd.size() - 2] != p->k)
      return invalid_argument(node_.describe() + ": inner dims differ: A " + dims_to_string(a.dims) + ", B " + dims_to_string(b.dims));
    const std::vector<int64_t> ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2);
    std::vector<int64_t> batch_dims;
    if (!broadcast_dims(ab, bb, &batch_dims))
      return invalid_argument(node_.describe() + ": batch dims " + dims_to_string(ab) + " and " + dims_to_string(bb) + " do not broadcast");
    int64_t batch = 1, a_batch = 1, b_batch = 1;
    for (int64_t d : batch_dims) batch *= d;
    for (int64_t d : ab) a_batch *= d;
    for (int64_t d : bb) b_batch *= d;
    if (b_batch == 1 && !b_vec) {
      // A shared weight: fold A's batch into M (A is contiguous).
      p->m *= a_batch;
      p->batch = 1;
    } else {
      if ((a_batch != batch && a_batch != 1) || (b_batch != batch && b_batch != 1))
        return unsupported(node_.describe() + ": partially broadcast batch dims (" + dims_to_string(ab) + " x " +
                           dims_to_string(bb) + ")");
      // Only whole-operand broadcast is expressible with one stride; check the dims agree too.
      if (a_batch == batch && ab.size() != batch_dims.size() && !ab.empty())
        return unsupported(node_.describe() + ": batch dims of different rank");
      p->batch = batch;
      p->stride_a = a_batch == 1 ? 0 : p->m * p->k;
      p->stride_b = b_batch == 1 ? 0 : p->k * p->n;
    }
    p->stride_y = p->m * p->n;  // used only when batch > 1
    *out_dims = batch_dims;
    if (!a_vec) out_dims->push_back(ad[ad.size() - 2]);
    if (!b_vec) out_dims->push_back(p->n);
    return Status::ok();
  }

  const Node& node_;
  bool gemm_;
  Activation act_;
  float alpha_ = 1.f, beta_ = 1.f;
  bool trans_a_ = false, trans_b_ = false;
  std::map<decltype(GemmProblem{}.key()), std::unique_ptr<LtPlan>> plans_;
};

StatusOr<std::unique_ptr<CudaOpKernel>> make_gemm(const CudaKernelArgs& a, bool gemm) {
  Activation act;
  if (!parse_activation(a.node, &act)) return std::unique_ptr<CudaOpKernel>();
  const DType t = a.input_dtype(0);
  if (t != DType::kUndefined && !is_cuda_float(t)) return std::unique_ptr<CudaOpKernel>();
  return std::unique_ptr<CudaOpKernel>(new GemmKernel(a.node, gemm, act));
}

}  // namespace

void register_cuda_gemm_kernels(CudaKernelTable& t) {
  auto matmul = [](const CudaKernelArgs& a) { return make_gemm(a, false); };
  auto gemm = [](const CudaKernelArgs& a) { return make_gemm(a, true); };
  t.add("", "MatMul", {nullptr, matmul, cuda_float_types()});
  t.add("", "Gemm", {nullptr, gemm, cuda_float_types()});
  t.add("com.ferry", "FusedMatMul", {accepts_activation, matmul, cuda_float_types()});
  t.add("com.ferry", "FusedGemm", {accepts_activation, gemm, cuda_float_types()});
}

}  // namespace ferry
