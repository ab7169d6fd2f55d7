// CPU kernel for com.ferry.Attention (f32, and bf16 computed in f32): the heads are gathered from
// their strided views (the transposes the fusion absorbed) into dense [batch, rows, cols] blocks
// (K by its rows: brgemm takes K^T as acb weights, so no transpose), then two batched oneDNN
// matmuls (brgemm) run over all heads at once, with the row softmax (and the additive mask) in between, and the result is scattered into the output's view. Gathering costs a
// copy of Q, K and V; in exchange both products run as one large JIT kernel call each instead of
// one small sgemm per head (which ran at a fraction of the core's peak).
#include <mutex>
#include <map>
#include <tuple>
#include <vector>

#include "backends/cpu/bf16_span.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/vec_math.h"
#include "ops/attention_view.h"
#include "ops/op_util.h"

namespace ferry::cpu {
namespace {

using dnnl::memory;

// Copies the matrix view (rows x cols, element strides rs / cs) at `src` into dense row-major f32.
void gather_matrix(const void* src, bool bf16, int64_t rows, int64_t cols, int64_t rs, int64_t cs, float* dst) {
  if (cs != 1 && rs == 1) {  // a transposed view (K^T of [S, B*H, D] keys): read its columns contiguously
    thread_local std::vector<float> column;
    column.resize(static_cast<size_t>(rows));
    for (int64_t j = 0; j < cols; ++j) {
      const float* in = bf16 ? column.data() : static_cast<const float*>(src) + j * cs;
      if (bf16) widen_bf16(static_cast<const uint16_t*>(src) + j * cs, column.data(), rows);
      for (int64_t i = 0; i < rows; ++i) dst[i * cols + j] = in[i];
    }
    return;
  }
  for (int64_t i = 0; i < rows; ++i) {
    float* out = dst + i * cols;
    if (bf16) {
      const uint16_t* in = static_cast<const uint16_t*>(src) + i * rs;
      if (cs == 1) widen_bf16(in, out, cols);
      else
        for (int64_t j = 0; j < cols; ++j) out[j] = bf16_to_f32(in[j * cs]);
    } else {
      const float* in = static_cast<const float*>(src) + i * rs;
      if (cs == 1) std::copy(in, in + cols, out);
      else
        for (int64_t j = 0; j < cols; ++j) out[j] = in[j * cs];
    }
  }
}

FERRY_VEC void masked_softmax_row(float* x, const float* m, int64_t n, int64_t mstride) {
  if (m) {
    if (mstride == 1)
      for (int64_t i = 0; i < n; ++i) x[i] += m[i];
    else
      for (int64_t i = 0; i < n; ++i) x[i] += m[i * mstride];
  }
  float mx = -__builtin_inff();
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    x[i] = vec::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

class AttentionKernel : public Kernel {
 public:
  AttentionKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  Status compute(KernelContext& ctx) override {
    // Plans and scratch buffers are shared by every run of this node: one run at a time.
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(bool done, run(ctx));
    return done ? Status::ok() : fallback_(ctx);
  }

 private:
  struct Plan {
    dnnl::matmul scores, weighted;  // [B,sq,d] x [B,d,sk] (scaled); [B,sq,sk] x [B,sk,dv]
    memory::desc q, kt, s, v, o;
  };

  StatusOr<bool> run(KernelContext& ctx) {
    DType dt = DType::kUndefined;
    for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) continue;
      if (!ctx.input_value(i).is_tensor()) return false;
      const DType t = ctx.input(i).dtype();
      if (!f32_or_bf16(t) || (dt != DType::kUndefined && t != dt)) return false;
      dt = t;
    }
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
    if (vk.dims[r - 2] != d || vv.dims[r - 2] != sk || sq == 0 || sk == 0 || d == 0 || dv == 0) return false;
    std::vector<int64_t> logical_out(vq.dims.begin(), vq.dims.end() - 1);
    logical_out.push_back(dv);
    std::vector<int64_t> stored, ost;
    if (!make_output_view(logical_out, ctx.get_ints("out_perm"), &stored, &ost)) return false;
    std::vector<int64_t> score_dims(vq.dims.begin(), vq.dims.end() - 1);
    score_dims.push_back(sk);
    const float* mask = nullptr;
    std::vector<int64_t> mst;
    if (ctx.has_input(3)) {
      const Tensor& m = ctx.input(3);
      std::vector<int64_t> bd;
      if (!broadcast_dims(m.dims(), score_dims, &bd) || bd != score_dims) return false;
      if (bf16) {
        mask_.resize(static_cast<size_t>(m.numel()));
        widen_bf16(m.data<uint16_t>(), mask_.data(), m.numel());
        mask = mask_.data();
      } else {
        mask = m.data<float>();
      }
      mst = broadcast_strides(m.dims(), score_dims);
    }
    int64_t batch = 1;
    for (int64_t b : batch_dims) batch *= b;
    const float scale = ctx.get_float("scale", 1.0f);
    Plan* plan = nullptr;
    if (!plan_for(batch, sq, d, sk, dv, scale, &plan).is_ok()) return false;
    qbuf_.resize(static_cast<size_t>(batch * sq * d));
    ktbuf_.resize(static_cast<size_t>(batch * d * sk));
    vbuf_.resize(static_cast<size_t>(batch * sk * dv));
    sbuf_.resize(static_cast<size_t>(batch * sq * sk));
    obuf_.resize(static_cast<size_t>(batch * sq * dv));
    const size_t es = bf16 ? 2 : 4;
    const char *pq = static_cast<const char*>(q.raw()), *pk = static_cast<const char*>(k.raw()),
               *pv = static_cast<const char*>(v.raw());
    parallel_ranges(batch, sq * d + d * sk + sk * dv, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        gather_matrix(pq + es * batch_offset(vq.dims, vq.strides, b), bf16, sq, d, vq.strides[r - 2], vq.strides[r - 1],
                      qbuf_.data() + b * sq * d);
        // K^T is kept as K's rows ([sk, d] dense, oneDNN's acb weights): row copies, not a transpose.
        gather_matrix(pk + es * batch_offset(vk.dims, vk.strides, b), bf16, sk, d, vk.strides[r - 1], vk.strides[r - 2],
                      ktbuf_.data() + b * d * sk);
        gather_matrix(pv + es * batch_offset(vv.dims, vv.strides, b), bf16, sk, dv, vv.strides[r - 2], vv.strides[r - 1],
                      vbuf_.data() + b * sk * dv);
      }
    });
    try {
      auto mem = [](const memory::desc& md, std::vector<float>& buf) { return memory(md, dnnl_engine(), buf.data()); };
      plan->scores.execute(dnnl_stream(), {{DNNL_ARG_SRC, mem(plan->q, qbuf_)}, {DNNL_ARG_WEIGHTS, mem(plan->kt, ktbuf_)},
                                           {DNNL_ARG_DST, mem(plan->s, sbuf_)}});
      dnnl_stream().wait();
      parallel_ranges(batch * sq, sk * 8, [&](int64_t r0, int64_t r1) {
        for (int64_t row = r0; row < r1; ++row) {
          const int64_t b = row / sq, i = row % sq;
          const float* mrow = mask ? mask + batch_offset(score_dims, mst, b) + i * mst[r - 2] : nullptr;
          masked_softmax_row(sbuf_.data() + row * sk, mrow, sk, mask ? mst[r - 1] : 1);
        }
      });
      plan->weighted.execute(dnnl_stream(), {{DNNL_ARG_SRC, mem(plan->s, sbuf_)}, {DNNL_ARG_WEIGHTS, mem(plan->v, vbuf_)},
                                             {DNNL_ARG_DST, mem(plan->o, obuf_)}});
      dnnl_stream().wait();
    } catch (const dnnl::error& e) {
      return dnnl_error(node_, e);
    }
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dt, stored, false));
    char* py = static_cast<char*>(y->mutable_raw());
    const int64_t row_stride = ost[r - 2], col_stride = ost[r - 1];
    parallel_ranges(batch * sq, dv, [&](int64_t r0, int64_t r1) {
      for (int64_t row = r0; row < r1; ++row) {
        const int64_t b = row / sq, i = row % sq;
        const float* o = obuf_.data() + row * dv;
        const int64_t off = batch_offset(logical_out, ost, b) + i * row_stride;
        if (bf16 && col_stride == 1) {
          narrow_bf16(o, reinterpret_cast<uint16_t*>(py) + off, dv);
        } else if (bf16) {
          for (int64_t c = 0; c < dv; ++c) reinterpret_cast<uint16_t*>(py)[off + c * col_stride] = f32_to_bf16(o[c]);
        } else if (col_stride == 1) {
          std::copy(o, o + dv, reinterpret_cast<float*>(py) + off);
        } else {
          for (int64_t c = 0; c < dv; ++c) reinterpret_cast<float*>(py)[off + c * col_stride] = o[c];
        }
      }
    });
    return true;
  }

  Status plan_for(int64_t batch, int64_t sq, int64_t d, int64_t sk, int64_t dv, float scale, Plan** out) {
    const auto key = std::make_tuple(batch, sq, d, sk, dv, scale);
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      *out = &it->second;
      return Status::ok();
    }
    Plan p;
    try {
      const auto f32 = memory::data_type::f32;
      const auto abc = memory::format_tag::abc;
      p.q = memory::desc({batch, sq, d}, f32, abc);
      p.kt = memory::desc({batch, d, sk}, f32, memory::format_tag::acb);  // K's rows: brgemm takes it as is
      p.s = memory::desc({batch, sq, sk}, f32, abc);
      p.v = memory::desc({batch, sk, dv}, f32, abc);
      p.o = memory::desc({batch, sq, dv}, f32, abc);
      dnnl::primitive_attr scaled;
      if (scale != 1.0f) scaled.set_output_scales(0, {scale});
      p.scores = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(p.q, p.kt, p.s), scaled, dnnl_engine()));
      p.weighted = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(p.s, p.v, p.o), dnnl_engine()));
    } catch (const dnnl::error& e) {
      return dnnl_error(node_, e);
    }
    *out = &plans_.emplace(key, std::move(p)).first->second;
    return Status::ok();
  }

  Node node_;
  KernelFn fallback_;
  std::mutex mu_;  // guards plans_ and the buffers (concurrent runs of one model)
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, float>, Plan> plans_;
  std::vector<float> qbuf_, ktbuf_, vbuf_, sbuf_, obuf_, mask_;
};

StatusOr<std::unique_ptr<Kernel>> make_attention(const Node& node, const OpSchema& schema, const Graph& g) {
  const TensorType* t = node.inputs.empty() ? nullptr : g.find_type(node.inputs[0]);
  if (node.inputs.empty() || (t && t->dtype != DType::kUndefined && !f32_or_bf16(t->dtype))) return std::unique_ptr<Kernel>();
  return std::unique_ptr<Kernel>(new AttentionKernel(node, schema.kernel));
}

}  // namespace
}  // namespace ferry::cpu

namespace ferry {
void register_cpu_attention_kernels(CpuKernelTable& t) { t.add("com.ferry", "Attention", cpu::make_attention); }
}  // namespace ferry
