// Op family 'gemm' (see op_families.inc): Gemm and MatMul, both gemm_ref (ops/gemm_ref.h) over
// the operands; f32 accumulates in f32, f64 in f64, integers in their own type; f16/bf16 are
// computed in f32 and rounded back.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "ops/float_util.h"
#include "ops/gemm_ref.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

const vector<DType> kGemmTypes = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                                  DType::kI32, DType::kI64, DType::kU32, DType::kU64};

// ---- Gemm -----------------------------------------------------------------------------------

template <class Ctx>
Status check_gemm_dtype(Ctx& ctx, DType t, const char* name) {
  if (t == DType::kUndefined) return Status::ok();
  if (std::find(kGemmTypes.begin(), kGemmTypes.end(), t) == kGemmTypes.end())
    return ctx.error(std::string("input '") + name + "' has element type " + dtype_name(t) +
                     "; supported: f16, bf16, f32, f64, i32, i64, u32, u64");
  return Status::ok();
}

// Validates Gemm's inputs; out = [M, N] with unknown dims where they cannot be told.
template <class Ctx>
Status gemm_info(Ctx& ctx, const TensorType& a, const TensorType& b, const TensorType* c, Shape* out) {
  RETURN_IF_ERROR(check_gemm_dtype(ctx, a.dtype, "A"));
  RETURN_IF_ERROR(check_same_dtype(ctx, a.dtype, "A", b.dtype, "B"));
  if (c) RETURN_IF_ERROR(check_same_dtype(ctx, a.dtype, "A", c->dtype, "C"));
  const bool ta = ctx.get_int("transA", 0) != 0, tb = ctx.get_int("transB", 0) != 0;
  if (a.shape && a.shape->rank() != 2) return ctx.error("input 'A' must be 2-D, got shape " + a.shape->to_string());
  if (b.shape && b.shape->rank() != 2) return ctx.error("input 'B' must be 2-D, got shape " + b.shape->to_string());
  const Dim m = a.shape ? a.shape->dims[ta ? 1 : 0] : Dim(), ka = a.shape ? a.shape->dims[ta ? 0 : 1] : Dim();
  const Dim kb = b.shape ? b.shape->dims[tb ? 1 : 0] : Dim(), n = b.shape ? b.shape->dims[tb ? 0 : 1] : Dim();
  if (ka.is_known() && kb.is_known() && ka.value != kb.value)
    return ctx.error("inner dimensions differ: input 'A' " + a.shape->to_string() + (ta ? " (transposed)" : "") +
                     " has K = " + std::to_string(ka.value) + " but input 'B' " + b.shape->to_string() +
                     (tb ? " (transposed)" : "") + " has K = " + std::to_string(kb.value));
  if (c && c->shape) {
    if (c->shape->rank() > 2)
      return ctx.error("input 'C' must have rank <= 2 (broadcastable to [M, N]), got shape " + c->shape->to_string());
    const int64_t cr = c->shape->rank();
    const Dim want[2] = {m, n};
    for (int64_t i = 0; i < cr; ++i) {
      const Dim& cd = c->shape->dims[i];
      const Dim& od = want[2 - cr + i];
      if (cd.is_known() && od.is_known() && cd.value != 1 && cd.value != od.value)
        return ctx.error("input 'C' with shape " + c->shape->to_string() + " cannot be broadcast to the output [M, N] = " +
                         Shape({m, n}).to_string());
    }
  }
  *out = Shape({m, n});
  return Status::ok();
}

Status infer_gemm(InferContext& ctx) {
  Shape out;
  const TensorType* c = ctx.has_input(2) ? &ctx.input_type(2) : nullptr;
  RETURN_IF_ERROR(gemm_info(ctx, ctx.input_type(0), ctx.input_type(1), c, &out));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, out});
  return Status::ok();
}

template <typename T>
void gemm_forward(const Tensor& a, const Tensor& b, const Tensor* c, bool ta, bool tb, float alpha, float beta,
                  Tensor* y) {
  const int64_t M = y->dim(0), N = y->dim(1);
  const int64_t K = ta ? a.dim(0) : a.dim(1);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  vector<T> bt;
  if (tb) {  // gemm_ref wants B's rows contiguous: materialize B^T as K x N
    bt.resize(static_cast<size_t>(K * N));
    for (int64_t nn = 0; nn < N; ++nn)
      for (int64_t k = 0; k < K; ++k) bt[k * N + nn] = pb[nn * K + k];
    pb = bt.data();
  }
  T* py = y->mutable_data<T>();
  gemm_ref<T>(M, N, K, pa, ta ? 1 : K, ta ? M : 1, pb, N, py, N);
  const bool use_c = c != nullptr && beta != 0.0f;
  if (alpha == 1.0f && !use_c) return;
  int64_t cs0 = 0, cs1 = 0;
  const T* pc = nullptr;
  if (use_c) {
    vector<int64_t> s = broadcast_strides(c->dims(), {M, N});
    cs0 = s[0];
    cs1 = s[1];
    pc = c->data<T>();
  }
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      T& v = py[i * N + j];
      if constexpr (std::is_floating_point_v<T>) {
        v = static_cast<T>(alpha) * v;
        if (use_c) v += static_cast<T>(beta) * pc[i * cs0 + j * cs1];
      } else {
        double r = static_cast<double>(alpha) * static_cast<double>(v);
        if (use_c) r += static_cast<double>(beta) * static_cast<double>(pc[i * cs0 + j * cs1]);
        v = static_cast<T>(r);
      }
    }
  }
}

Status k_gemm(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const Tensor* c = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const TensorType ct = c ? c->type() : TensorType{};
  Shape out;
  RETURN_IF_ERROR(gemm_info(ctx, a.type(), b.type(), c ? &ct : nullptr, &out));
  const bool ta = ctx.get_int("transA", 0) != 0, tb = ctx.get_int("transB", 0) != 0;
  const float alpha = ctx.get_float("alpha", 1.0f), beta = ctx.get_float("beta", 1.0f);
  const DType dt = a.dtype();
  Tensor af = widen_to_f32(a), bf = widen_to_f32(b), cf = c ? widen_to_f32(*c) : Tensor();
  ASSIGN_OR_RETURN(Tensor y, make_result(ctx, af.dtype(), out.values()));
  switch (af.dtype()) {
    FERRY_DISPATCH_FLOAT_CASES(gemm_forward<scalar_t>(af, bf, c ? &cf : nullptr, ta, tb, alpha, beta, &y))
    FERRY_DISPATCH_CASE(kI32, int32_t, gemm_forward<scalar_t>(af, bf, c ? &cf : nullptr, ta, tb, alpha, beta, &y))
    FERRY_DISPATCH_CASE(kI64, int64_t, gemm_forward<scalar_t>(af, bf, c ? &cf : nullptr, ta, tb, alpha, beta, &y))
    FERRY_DISPATCH_CASE(kU32, uint32_t, gemm_forward<scalar_t>(af, bf, c ? &cf : nullptr, ta, tb, alpha, beta, &y))
    FERRY_DISPATCH_CASE(kU64, uint64_t, gemm_forward<scalar_t>(af, bf, c ? &cf : nullptr, ta, tb, alpha, beta, &y))
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
  return finish_output(ctx, std::move(y), dt);
}

// ---- MatMul ---------------------------------------------------------------------------------

// numpy matmul shapes: 1-D A is [1, K] (the 1 dropped from the result), 1-D B is [K, 1] (likewise),
// leading (batch) dims broadcast.
template <class Ctx>
Status matmul_info(Ctx& ctx, const TensorType& a, const TensorType& b, std::optional<Shape>* out) {
  RETURN_IF_ERROR(check_gemm_dtype(ctx, a.dtype, "A"));
  RETURN_IF_ERROR(check_same_dtype(ctx, a.dtype, "A", b.dtype, "B"));
  return matmul_shape(ctx, a, b, "MatMul", out);
}

Status infer_matmul(InferContext& ctx) {
  std::optional<Shape> out;
  RETURN_IF_ERROR(matmul_info(ctx, ctx.input_type(0), ctx.input_type(1), &out));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, out});
  return Status::ok();
}

template <typename T>
void matmul_forward(const Tensor& a, const Tensor& b, const vector<int64_t>& batch, const vector<int64_t>& a_batch,
                    const vector<int64_t>& b_batch, int64_t M, int64_t N, int64_t K, Tensor* y) {
  vector<int64_t> sa = broadcast_strides(a_batch, batch), sb = broadcast_strides(b_batch, batch);
  for (int64_t& s : sa) s *= M * K;
  for (int64_t& s : sb) s *= K * N;
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* py = y->mutable_data<T>();
  for (BroadcastIter it(batch, {sa, sb}); !it.done(); it.next())
    gemm_ref<T>(M, N, K, pa + it.offset(0), K, 1, pb + it.offset(1), N, py + it.index() * M * N, N);
}

Status k_matmul(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  std::optional<Shape> out;
  RETURN_IF_ERROR(matmul_info(ctx, a.type(), b.type(), &out));
  MatMulDims d;
  if (!matmul_dims(a.dims(), b.dims(), &d)) return internal_error("MatMul batch broadcast");
  const int64_t M = d.M, K = d.K, N = d.N;
  const vector<int64_t>& a_batch = d.a_batch;
  const vector<int64_t>& b_batch = d.b_batch;
  const vector<int64_t>& batch = d.batch;
  const DType dt = a.dtype();
  Tensor af = widen_to_f32(a), bf = widen_to_f32(b);
  ASSIGN_OR_RETURN(Tensor y, make_result(ctx, af.dtype(), out->values()));
  switch (af.dtype()) {
    FERRY_DISPATCH_FLOAT_CASES(matmul_forward<scalar_t>(af, bf, batch, a_batch, b_batch, M, N, K, &y))
    FERRY_DISPATCH_CASE(kI32, int32_t, matmul_forward<scalar_t>(af, bf, batch, a_batch, b_batch, M, N, K, &y))
    FERRY_DISPATCH_CASE(kI64, int64_t, matmul_forward<scalar_t>(af, bf, batch, a_batch, b_batch, M, N, K, &y))
    FERRY_DISPATCH_CASE(kU32, uint32_t, matmul_forward<scalar_t>(af, bf, batch, a_batch, b_batch, M, N, K, &y))
    FERRY_DISPATCH_CASE(kU64, uint64_t, matmul_forward<scalar_t>(af, bf, batch, a_batch, b_batch, M, N, K, &y))
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
  return finish_output(ctx, std::move(y), dt);
}

}  // namespace

void register_gemm_ops(OpRegistry& r) {
  const vector<AttrSpec> gemm_attrs = {{"alpha", AttrType::kFloat}, {"beta", AttrType::kFloat},
                                       {"transA", AttrType::kInt}, {"transB", AttrType::kInt}};
  // Gemm-7/9: C required; Gemm-11/13: C optional.
  r.add(OpSchema{.name = "Gemm", .since_version = 7, .min_inputs = 3, .max_inputs = 3, .attrs = gemm_attrs,
                 .types = kGemmTypes, .infer = infer_gemm, .kernel = k_gemm});
  r.add(OpSchema{.name = "Gemm", .since_version = 11, .min_inputs = 2, .max_inputs = 3, .attrs = gemm_attrs,
                 .types = kGemmTypes, .infer = infer_gemm, .kernel = k_gemm});
  r.add(OpSchema{.name = "MatMul", .since_version = 1, .min_inputs = 2, .max_inputs = 2, .types = kGemmTypes,
                 .infer = infer_matmul, .kernel = k_matmul});
}

}  // namespace ferry
