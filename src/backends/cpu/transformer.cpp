// CPU kernels for transformer blocks: LayerNorm (com.ferry.LayerNorm, LayerNormalization),
// GELU (com.ferry.Gelu, Gelu-20), Softmax over the last axis, and com.ferry.Attention (scores and
// weighted sums through oneDNN's sgemm on strided head views, softmax in between, parallel over
// batch x heads). f32, and bf16 tensors computed in f32 rows (widened on the fly, rounded back on
// store: the values the reference kernels give); other types run the reference kernels.
#include <dnnl.h>

#include <cmath>
#include <vector>

#include "backends/cpu/bf16_span.h"
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

// Widens a bf16 matrix view (rows x cols, element strides rs / cs; one of them 1, as gemm_operand
// accepted) into `buf`, keeping its orientation; `op` describes the f32 copy.
const float* widen_operand(const uint16_t* p, int64_t rows, int64_t cols, int64_t rs, int64_t cs, float* buf,
                           GemmOperand* op) {
  if (cs == 1 || cols == 1) {
    for (int64_t i = 0; i < rows; ++i) widen_bf16(p + i * rs, buf + i * cols, cols);
    *op = {'N', std::max<int64_t>(cols, 1)};
  } else {
    for (int64_t j = 0; j < cols; ++j) widen_bf16(p + j * cs, buf + j * rows, rows);
    *op = {'T', std::max<int64_t>(rows, 1)};
  }
  return buf;
}

StatusOr<bool> run_attention(KernelContext& ctx) {
  const DType dt = uniform_float_type(ctx);
  if (dt == DType::kUndefined) return false;
  const bool bf16 = dt == DType::kBF16;
  const Tensor &q = ctx.input(0), &k = ctx.input(1), &v = ctx.input(2);
  PermutedView vq, vk, vv;
  if (!make_permuted_view(q.dims(), ctx.get_ints("q_perm"), &vq) || !make_permuted_view(k.dims(), ctx.get_ints("k_perm"), &vk) ||
      !make_permuted_view(v.dims(), ctx.get_ints("v_perm"), &vv))
    return false;
  const size_t r = vq.dims.size();
  std::vector<int64_t> batch_dims;
  if (r < 2 || !broadcast_batch_dims({&vq, &vk, &vv}, &batch_dims)) return false;
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
  std::vector<float> mask_f32;  // a bf16 mask, widened once
  std::vector<int64_t> mst;
  if (ctx.has_input(3)) {
    const Tensor& m = ctx.input(3);
    std::vector<int64_t> bd;
    if (!broadcast_dims(m.dims(), score_dims, &bd) || bd != score_dims) return false;
    if (bf16) {
      mask_f32.resize(static_cast<size_t>(m.numel()));
      widen_bf16(m.data<uint16_t>(), mask_f32.data(), m.numel());
      mask = mask_f32.data();
    } else {
      mask = m.data<float>();
    }
    mst = broadcast_strides(m.dims(), score_dims);
  }
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < r; ++i) batch *= vq.dims[i];
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dt, stored, false));
  const float scale = ctx.get_float("scale", 1.0f);
  const size_t es = bf16 ? 2 : 4;  // element size: views address q, k, v and y in elements
  const char *pq = static_cast<const char*>(q.raw()), *pk = static_cast<const char*>(k.raw()),
             *pv = static_cast<const char*>(v.raw());
  char* py = static_cast<char*>(y->mutable_raw());
  const int64_t ldo = std::max<int64_t>(ost[r - 2], dv);
  Status failure = Status::ok();
  parallel_ranges(batch, sq * sk * (d + dv), [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> scores, qbuf, kbuf, vbuf, obuf;
    scores.resize(static_cast<size_t>(sq * sk));
    if (bf16) {
      qbuf.resize(static_cast<size_t>(sq * d));
      kbuf.resize(static_cast<size_t>(d * sk));
      vbuf.resize(static_cast<size_t>(sk * dv));
      obuf.resize(static_cast<size_t>(sq * dv));
    }
    for (int64_t b = b0; b < b1; ++b) {
      const void* qb = pq + es * batch_offset(vq.dims, vq.strides, b);
      const void* kb = pk + es * batch_offset(vk.dims, vk.strides, b);
      const void* vb = pv + es * batch_offset(vv.dims, vv.strides, b);
      char* ob = py + es * batch_offset(logical_out, ost, b);
      GemmOperand gq = oq, gk = ok, gv = ov;
      const float *fq = static_cast<const float*>(qb), *fk = static_cast<const float*>(kb), *fv = static_cast<const float*>(vb);
      if (bf16) {
        fq = widen_operand(static_cast<const uint16_t*>(qb), sq, d, vq.strides[r - 2], vq.strides[r - 1], qbuf.data(), &gq);
        fk = widen_operand(static_cast<const uint16_t*>(kb), d, sk, vk.strides[r - 2], vk.strides[r - 1], kbuf.data(), &gk);
        fv = widen_operand(static_cast<const uint16_t*>(vb), sk, dv, vv.strides[r - 2], vv.strides[r - 1], vbuf.data(), &gv);
      }
      dnnl_status_t st = dnnl_sgemm(gq.trans, gk.trans, sq, sk, d, scale, fq, gq.ld, fk, gk.ld, 0.f, scores.data(), sk);
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
      float* fo = bf16 ? obuf.data() : reinterpret_cast<float*>(ob);
      const int64_t ldf = bf16 ? dv : ldo;
      st = dnnl_sgemm('N', gv.trans, sq, dv, sk, 1.f, scores.data(), sk, fv, gv.ld, 0.f, fo, ldf);
      if (st != dnnl_success) {
#pragma omp critical
        failure = ctx.error("oneDNN sgemm failed for the attention output");
        return;
      }
      if (bf16)
        for (int64_t i = 0; i < sq; ++i) narrow_bf16(fo + i * dv, reinterpret_cast<uint16_t*>(ob) + i * ldo, dv);
    }
  });
  RETURN_IF_ERROR(failure);
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
  t.add("com.ferry", "Attention", cpu::factory(cpu::run_attention));
}
}  // namespace ferry
