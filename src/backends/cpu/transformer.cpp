// CPU kernels for transformer blocks: LayerNorm (com.ferry.LayerNorm, LayerNormalization),
// GELU (com.ferry.Gelu, Gelu-20) and Softmax over the last axis (com.ferry.Attention: attention.cpp).
// f32, and bf16 tensors computed in f32 rows (widened on the fly, rounded back on store: the values
// the reference kernels give); other types run the reference kernels.
#include <cmath>
#include <vector>

#include "backends/cpu/bf16_span.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/vec_math.h"
#include "ops/op_util.h"

namespace ferry::cpu {
namespace {

// ---- row kernels (vectorized) ----------------------------------------------------------------

FERRY_VEC void layernorm_row(const float* x, float* y, int64_t n, const float* gamma, const float* beta, float eps) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  float sq = 0.f;
#pragma omp simd reduction(+ : sq)
  for (int64_t i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const float inv = 1.f / std::sqrt(sq / static_cast<float>(n) + eps);
  if (gamma && beta) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * gamma[i] + beta[i];
  } else if (gamma) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * gamma[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv;
  }
}

FERRY_VEC void gelu_erf_span(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = vec::gelu_erf(x[i]);
}
FERRY_VEC void gelu_tanh_span(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = vec::gelu_tanh(x[i]);
}

// In-place softmax of one row: y = exp(x - max) / sum.
FERRY_VEC void softmax_row(float* x, int64_t n) {
  float mx = -__builtin_inff();
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) x[i] = vec::exp(x[i] - mx);
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float inv = 1.f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// The element type shared by every given input (f32 or bf16), or kUndefined.
DType uniform_float_type(const KernelContext& ctx) {
  DType dt = DType::kUndefined;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    if (!ctx.input_value(i).is_tensor()) return DType::kUndefined;
    const DType t = ctx.input(i).dtype();
    if (!f32_or_bf16(t) || (dt != DType::kUndefined && t != dt)) return DType::kUndefined;
    dt = t;
  }
  return dt;
}

// A scratch row of f32 per thread (bf16 rows are widened into it).
float* scratch_row(int64_t n, int slot = 0) {
  thread_local std::vector<float> rows[3];
  if (rows[slot].size() < static_cast<size_t>(n)) rows[slot].resize(static_cast<size_t>(n));
  return rows[slot].data();
}

// ---- LayerNorm ---------------------------------------------------------------------------------

StatusOr<bool> run_layernorm(KernelContext& ctx) {
  const DType dt = uniform_float_type(ctx);
  if (dt == DType::kUndefined || ctx.num_outputs() != 1) return false;
  const Tensor& x = ctx.input(0);
  int64_t axis = ctx.get_int("axis", -1);
  if (!normalize_axis(&axis, x.rank())) return false;
  int64_t inner = 1;
  for (int64_t i = axis; i < x.rank(); ++i) inner *= x.dim(i);
  // Per-element parameters only (the broadcast forms go to the reference kernel).
  if ((ctx.has_input(1) && ctx.input(1).numel() != inner) || (ctx.has_input(2) && ctx.input(2).numel() != inner) ||
      (ctx.has_input(2) && !ctx.has_input(1)) || inner == 0)
    return false;
  std::vector<float> params(static_cast<size_t>(2 * inner));
  const float* gamma = ctx.has_input(1) ? f32_view(ctx.input(1), 0, inner, params.data()) : nullptr;
  const float* beta = ctx.has_input(2) ? f32_view(ctx.input(2), 0, inner, params.data() + inner) : nullptr;
  const float eps = ctx.get_float("epsilon", 1e-5f);
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dt, x.dims(), false));
  parallel_ranges(x.numel() / inner, inner * 4, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* out = f32_target(y, r * inner, scratch_row(inner, 1));
      layernorm_row(f32_view(x, r * inner, inner, scratch_row(inner)), out, inner, gamma, beta, eps);
      store_f32(y, r * inner, inner, out);
    }
  });
  return true;
}

// ---- GELU --------------------------------------------------------------------------------------

StatusOr<bool> run_gelu(KernelContext& ctx) {
  const DType dt = uniform_float_type(ctx);
  if (dt == DType::kUndefined) return false;
  const std::string mode = ctx.get_string("approximate", "none");
  if (mode != "none" && mode != "tanh") return false;
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dt, x.dims(), false));
  const bool tanh_form = mode == "tanh";
  constexpr int64_t kChunk = 4096;
  parallel_ranges(x.numel(), 20, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; c += kChunk) {
      const int64_t n = std::min(kChunk, e - c);
      const float* in = f32_view(x, c, n, scratch_row(n));
      float* out = f32_target(y, c, scratch_row(n, 1));
      if (tanh_form) gelu_tanh_span(in, out, n);
      else gelu_erf_span(in, out, n);
      store_f32(y, c, n, out);
    }
  });
  return true;
}

// ---- Softmax (last axis) -------------------------------------------------------------------------

StatusOr<bool> run_softmax(KernelContext& ctx) {
  const DType dt = uniform_float_type(ctx);
  if (dt == DType::kUndefined) return false;
  const Tensor& x = ctx.input(0);
  if (x.rank() == 0) return false;
  int64_t axis = ctx.get_int("axis", ctx.opset() >= 13 ? -1 : 1);
  if (!normalize_axis(&axis, x.rank())) return false;
  // Before opset 13 the input is flattened at `axis`; that equals the last-axis form only there.
  if (axis != x.rank() - 1) return false;
  const int64_t n = x.dim(axis);
  if (n == 0) return false;
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dt, x.dims(), false));
  parallel_ranges(x.numel() / n, n * 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* in = f32_view(x, r * n, n, scratch_row(n));
      float* out = f32_target(y, r * n, scratch_row(n, 1));
      std::copy(in, in + n, out);
      softmax_row(out, n);
      store_f32(y, r * n, n, out);
    }
  });
  return true;
}

CpuKernelFactory factory(StatusOr<bool> (*fn)(KernelContext&)) {
  return [fn](const Node& node, const OpSchema& schema, const Graph& g) -> StatusOr<std::unique_ptr<Kernel>> {
    if (node.inputs.empty()) return std::unique_ptr<Kernel>();
    const TensorType* t = g.find_type(node.inputs[0]);
    if (t && t->dtype != DType::kUndefined && !f32_or_bf16(t->dtype)) return std::unique_ptr<Kernel>();
    return make_fn_kernel(fn, schema);
  };
}

}  // namespace
}  // namespace ferry::cpu

namespace ferry {
void register_cpu_transformer_kernels(CpuKernelTable& t) {
  t.add("com.ferry", "LayerNorm", cpu::factory(cpu::run_layernorm));
  t.add("", "LayerNormalization", cpu::factory(cpu::run_layernorm));
  t.add("com.ferry", "Gelu", cpu::factory(cpu::run_gelu));
  t.add("", "Gelu", cpu::factory(cpu::run_gelu));
  t.add("", "Softmax", cpu::factory(cpu::run_softmax));
}
}  // namespace ferry
