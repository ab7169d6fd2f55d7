// CPU kernels for transformer blocks: LayerNorm (com.ferry.LayerNorm, LayerNormalization),
// GELU (com.ferry.Gelu, Gelu-20), Softmax over the last axis, and com.ferry.Attention (scores and
// weighted sums through oneDNN's sgemm on strided head views, softmax in between, parallel over
// batch x heads). f32 only; other types run the reference kernels.
#include <dnnl.h>

#include <cmath>
#include <vector>

#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/vec_math.h"
#include "ops/attention_view.h"
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

FERRY_VEC void add_row(float* x, const float* m, int64_t n, int64_t stride) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) x[i] += m[i];
  } else if (stride == 0) {
    for (int64_t i = 0; i < n; ++i) x[i] += m[0];
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] += m[i * stride];
  }
}

// ---- LayerNorm ---------------------------------------------------------------------------------

StatusOr<bool> run_layernorm(KernelContext& ctx) {
  if (!all_f32(ctx) || ctx.num_outputs() != 1) return false;
  const Tensor& x = ctx.input(0);
  int64_t axis = ctx.get_int("axis", -1);
  if (!normalize_axis(&axis, x.rank())) return false;
  int64_t inner = 1;
  for (int64_t i = axis; i < x.rank(); ++i) inner *= x.dim(i);
  const float* gamma = ctx.has_input(1) ? ctx.input(1).data<float>() : nullptr;
  const float* beta = ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr;
  // Per-element parameters only (the broadcast forms go to the reference kernel).
  if ((gamma && ctx.input(1).numel() != inner) || (beta && ctx.input(2).numel() != inner) || (beta && !gamma) || inner == 0)
    return false;
  const float eps = ctx.get_float("epsilon", 1e-5f);
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kF32, x.dims()));
  const float* px = x.data<float>();
  float* py = y->mutable_data<float>();
  parallel_ranges(x.numel() / inner, inner * 4, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) layernorm_row(px + r * inner, py + r * inner, inner, gamma, beta, eps);
  });
  return true;
}

// ---- GELU --------------------------------------------------------------------------------------

StatusOr<bool> run_gelu(KernelContext& ctx) {
  if (!all_f32(ctx)) return false;
  const std::string mode = ctx.get_string("approximate", "none");
  if (mode != "none" && mode != "tanh") return false;
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kF32, x.dims()));
  const float* px = x.data<float>();
  float* py = y->mutable_data<float>();
  const bool tanh_form = mode == "tanh";
  parallel_ranges(x.numel(), 20, [&](int64_t b, int64_t e) {
    if (tanh_form) gelu_tanh_span(px + b, py + b, e - b);
    else gelu_erf_span(px + b, py + b, e - b);
  });
  return true;
}

// ---- Softmax (last axis) -------------------------------------------------------------------------

StatusOr<bool> run_softmax(KernelContext& ctx) {
  if (!all_f32(ctx)) return false;
  const Tensor& x = ctx.input(0);
  if (x.rank() == 0) return false;
  int64_t axis = ctx.get_int("axis", ctx.opset() >= 13 ? -1 : 1);
  if (!normalize_axis(&axis, x.rank())) return false;
  // Before opset 13 the input is flattened at `axis`; that equals the last-axis form only there.
  if (axis != x.rank() - 1) return false;
  const int64_t n = x.dim(axis);
  if (n == 0) return false;
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kF32, x.dims()));
  const float* px = x.data<float>();
  float* py = y->mutable_data<float>();
  parallel_ranges(x.numel() / n, n * 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      std::copy(px + r * n, px + (r + 1) * n, py + r * n);
      softmax_row(py + r * n, n);
    }
  });
  return true;
}

// ---- Attention ---------------------------------------------------------------------------------

// A matrix operand for sgemm: row-major with leading dimension ld, or its transpose.
struct GemmOperand {
  char trans = 'N';
  int64_t ld = 0;
};

// The sgemm description of the last two logical dims (rows, cols) of a view; false when neither
// dim is contiguous.
bool gemm_operand(int64_t row_stride, int64_t col_stride, int64_t cols, int64_t rows, GemmOperand* op) {
  if (col_stride == 1 || cols == 1) {
    op->trans = 'N';
    op->ld = std::max<int64_t>(row_stride, std::max<int64_t>(cols, 1));
    return true;
  }
  if (row_stride == 1 || rows == 1) {
    op->trans = 'T';
    op->ld = std::max<int64_t>(col_stride, std::max<int64_t>(rows, 1));
    return true;
  }
  return false;
}

StatusOr<bool> run_attention(KernelContext& ctx) {
  if (!all_f32(ctx)) return false;
  const Tensor &q = ctx.input(0), &k = ctx.input(1), &v = ctx.input(2);
  PermutedView vq, vk, vv;
  if (!make_permuted_view(q.dims(), ctx.get_ints("q_perm"), &vq) || !make_permuted_view(k.dims(), ctx.get_ints("k_perm"), &vk) ||
      !make_permuted_view(v.dims(), ctx.get_ints("v_perm"), &vv))
    return false;
  const size_t r = vq.dims.size();
  if (r < 2 || vk.dims.size() != r || vv.dims.size() != r) return false;
  for (size_t i = 0; i + 2 < r; ++i)
    if (vq.dims[i] != vk.dims[i] || vq.dims[i] != vv.dims[i]) return false;
  const int64_t sq = vq.dims[r - 2], d = vq.dims[r - 1], sk = vk.dims[r - 1], dv = vv.dims[r - 1];
  if (vk.dims[r - 2] != d || vv.dims[r - 2] != sk || sq == 0 || sk == 0) return false;
  std::vector<int64_t> logical_out(vq.dims.begin(), vq.dims.end() - 1);
  logical_out.push_back(dv);
  std::vector<int64_t> stored, ost;
  if (!make_output_view(logical_out, ctx.get_ints("out_perm"), &stored, &ost)) return false;
  GemmOperand oq, ok, ov;
  if (!gemm_operand(vq.strides[r - 2], vq.strides[r - 1], d, sq, &oq) ||
      !gemm_operand(vk.strides[r - 2], vk.strides[r - 1], sk, d, &ok) ||
      !gemm_operand(vv.strides[r - 2], vv.strides[r - 1], dv, sk, &ov) || (ost[r - 1] != 1 && dv != 1))
    return false;
  std::vector<int64_t> score_dims(vq.dims.begin(), vq.dims.end() - 1);
  score_dims.push_back(sk);
  const float* mask = nullptr;
  std::vector<int64_t> mst;
  if (ctx.has_input(3)) {
    const Tensor& m = ctx.input(3);
    std::vector<int64_t> bd;
    if (!broadcast_dims(m.dims(), score_dims, &bd) || bd != score_dims) return false;
    mask = m.data<float>();
    mst = broadcast_strides(m.dims(), score_dims);
  }
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < r; ++i) batch *= vq.dims[i];
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kF32, stored));
  const float scale = ctx.get_float("scale", 1.0f);
  const float *pq = q.data<float>(), *pk = k.data<float>(), *pv = v.data<float>();
  float* py = y->mutable_data<float>();
  const int64_t ldo = std::max<int64_t>(ost[r - 2], dv);
  Status failure = Status::ok();
  parallel_ranges(batch, sq * sk * (d + dv), [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>(sq * sk));
    for (int64_t b = b0; b < b1; ++b) {
      const float* qb = pq + batch_offset(vq.dims, vq.strides, b);
      const float* kb = pk + batch_offset(vk.dims, vk.strides, b);
      const float* vb = pv + batch_offset(vv.dims, vv.strides, b);
      float* ob = py + batch_offset(logical_out, ost, b);
      dnnl_status_t st = dnnl_sgemm(oq.trans, ok.trans, sq, sk, d, scale, qb, oq.ld, kb, ok.ld, 0.f, scores.data(), sk);
      if (st != dnnl_success) {
#pragma omp critical
        failure = ctx.error("oneDNN sgemm failed for the attention scores");
        return;
      }
      const float* mb = mask ? mask + batch_offset(score_dims, mst, b) : nullptr;
      for (int64_t i = 0; i < sq; ++i) {
        float* row = scores.data() + i * sk;
        if (mb) add_row(row, mb + i * mst[r - 2], sk, mst[r - 1]);
        softmax_row(row, sk);
      }
      st = dnnl_sgemm('N', ov.trans, sq, dv, sk, 1.f, scores.data(), sk, vb, ov.ld, 0.f, ob, ldo);
      if (st != dnnl_success) {
#pragma omp critical
        failure = ctx.error("oneDNN sgemm failed for the attention output");
        return;
      }
    }
  });
  RETURN_IF_ERROR(failure);
  return true;
}

CpuKernelFactory factory(StatusOr<bool> (*fn)(KernelContext&)) {
  return [fn](const Node& node, const OpSchema& schema, const Graph& g) -> StatusOr<std::unique_ptr<Kernel>> {
    if (node.inputs.empty() || !maybe_f32(g, node.inputs[0])) return std::unique_ptr<Kernel>();
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
  t.add("com.ferry", "Attention", cpu::factory(cpu::run_attention));
}
}  // namespace ferry
