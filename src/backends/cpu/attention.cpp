// CPU kernel for com.ferry.Attention (f32, and bf16 computed in f32): the heads are gathered from
// their strided views (the transposes the fusion absorbed) into dense [heads, rows, cols] blocks
// (K by its rows: brgemm takes K^T as acb weights, so no transpose), then two batched oneDNN
// matmuls (brgemm) run over a chunk of heads at a time, with the row softmax (and the additive
// mask) in between, and the result is scattered into the output's view. A chunk's scores fit in
// L2 (kChunkBytes); each thread runs whole chunks with its own single-thread plans, so the node is
// one parallel region. Gathering costs a copy of Q, K and V; in exchange both products run as one
// JIT kernel call per chunk instead of one small sgemm per head (which ran at a fraction of peak).
#include <omp.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/bf16_span.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/dnnl_plan_cache.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/vec_math.h"
#include "common/env_switch.h"
#include "ops/attention_view.h"
#include "ops/op_util.h"

namespace ferry::cpu {
namespace {

using dnnl::memory;

// Bytes of one chunk of heads (Q, K, V, scores, output in f32): half of a Zen 4/5 or Ice Lake
// core's L2 (1 MB / 1.25 MB), so the scores written by the first product are read back from L2.
constexpr int64_t kChunkBytes = 512 << 10;

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

FERRY_VEC void masked_softmax_row_plain(float* x, const float* m, int64_t n, int64_t mstride) {
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

#if defined(__x86_64__)
// Masked forms throughout: gcc 12 warns (-Wmaybe-uninitialized) on the unmasked ones' undefined
// pass-through operand.
constexpr __mmask16 kAll = 0xFFFF;

__attribute__((target("avx512f"))) inline float lane_max(__m512 v) {
  alignas(64) float a[16];
  _mm512_store_ps(a, v);
  float m = a[0];
  for (int i = 1; i < 16; ++i) m = a[i] > m ? a[i] : m;
  return m;
}
__attribute__((target("avx512f"))) inline float lane_sum(__m512 v) {
  alignas(64) float a[16];
  _mm512_store_ps(a, v);
  float s = 0.f;
  for (int i = 0; i < 16; ++i) s += a[i];
  return s;
}

// e^x for 16 lanes: vec::exp's polynomial (0 below -87.3, NaN stays NaN; the argument of a softmax
// is <= 0, so no overflow).
__attribute__((target("avx512f"))) inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3365447505531f), hi = _mm512_set1_ps(88.3762626647949f);
  const __m512 magic = _mm512_set1_ps(12582912.f);
  const __m512 xc = _mm512_maskz_min_ps(kAll, _mm512_maskz_max_ps(kAll, x, lo), hi);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), magic), magic);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.f));
  const __m512i e = _mm512_maskz_slli_epi32(kAll, _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll, n), _mm512_set1_epi32(127)), 23);
  __m512 v = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
  v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), v, _mm512_setzero_ps());
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), v, x);
}

// masked_softmax_row_plain in three AVX-512 passes (mask add + max, exp + sum, scale), tails masked.
__attribute__((target("avx512f"))) void masked_softmax_row_avx512(float* x, const float* m, int64_t n, int64_t mstride) {
  if (m && mstride != 1) {
    for (int64_t i = 0; i < n; ++i) x[i] += m[i * mstride];
    m = nullptr;
  }
  __m512 vmax = _mm512_set1_ps(-__builtin_inff());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    if (m) {
      v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, m + i));
      _mm512_mask_storeu_ps(x + i, k, v);
    }
    vmax = _mm512_mask_max_ps(vmax, k, vmax, v);
  }
  const __m512 mx = _mm512_set1_ps(lane_max(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mx));
    _mm512_mask_storeu_ps(x + i, k, e);
    vsum = _mm512_mask_add_ps(vsum, k, vsum, e);
  }
  const __m512 inv = _mm512_set1_ps(1.f / lane_sum(vsum));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
  }
}
#endif

// Adds the mask row (element stride mstride; none when null) to x[0..n) and replaces it by its softmax.
void masked_softmax_row(float* x, const float* m, int64_t n, int64_t mstride) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return masked_softmax_row_avx512(x, m, n, mstride);
#endif
  masked_softmax_row_plain(x, m, n, mstride);
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
    memory::desc q, kt, s, v, o, scores_pad, weighted_pad;
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
    // q_slice / k_slice / v_slice: the operands are parts of one packed QKV tensor, read in place.
    PermutedView vq, vk, vv;
    int64_t q0 = 0, k0 = 0, v0 = 0;
    if (!make_sliced_view(q.dims(), ctx.get_ints("q_slice"), ctx.get_ints("q_perm"), &vq, &q0) ||
        !make_sliced_view(k.dims(), ctx.get_ints("k_slice"), ctx.get_ints("k_perm"), &vk, &k0) ||
        !make_sliced_view(v.dims(), ctx.get_ints("v_slice"), ctx.get_ints("v_perm"), &vv, &v0))
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
    // Heads run in chunks small enough that a chunk's scores stay in the core's L2 between the two
    // products and the softmax (all heads at once: ViT-B/16's 12 x 197 x 197 scores are 1.9 MB per
    // image); each thread takes whole chunks, so one parallel region covers the node.
    const int64_t item_floats = sq * d + d * sk + sk * dv + sq * sk + sq * dv;
    const int max_threads = omp_in_parallel() ? 1 : std::max(1, omp_get_max_threads());
    int64_t chunk = std::max<int64_t>(1, kChunkBytes / (item_floats * 4));
    if (const char* e = env_value("FERRY_ATTENTION_CHUNK")) chunk = std::max<long>(1, std::atol(e));
    chunk = std::min(chunk, (batch + max_threads - 1) / max_threads);
    const int64_t chunks = (batch + chunk - 1) / chunk, tail = batch - (chunks - 1) * chunk;
    // Too little work to wake the second thread: one thread (as parallel_ranges decides).
    const int threads = batch * item_floats * std::max<int64_t>(d, 8) < (int64_t{1} << 15) ? 1
                        : static_cast<int>(std::min<int64_t>(max_threads, chunks));
    Plan *plan = nullptr, *tail_plan = nullptr;
    if (!plan_for(chunk, sq, d, sk, dv, scale, &plan).is_ok() || !plan_for(tail, sq, d, sk, dv, scale, &tail_plan).is_ok())
      return false;
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dt, stored, false));
    char* py = static_cast<char*>(y->mutable_raw());
    const int64_t row_stride = ost[r - 2], col_stride = ost[r - 1];
    if (bufs_.size() < static_cast<size_t>(threads)) bufs_.resize(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t) bufs_[static_cast<size_t>(t)].resize(static_cast<size_t>(chunk * item_floats));
    const size_t es = bf16 ? 2 : 4;
    const char *pq = static_cast<const char*>(q.raw()) + es * q0, *pk = static_cast<const char*>(k.raw()) + es * k0,
               *pv = static_cast<const char*>(v.raw()) + es * v0;
    std::atomic<bool> failed{false};
    std::string error;
    std::mutex error_mu;
    auto run_chunk = [&](int t, int64_t c) {
      const int64_t b0 = c * chunk, n = std::min(chunk, batch - b0);
      const Plan& p = n == chunk ? *plan : *tail_plan;
      float* qb = bufs_[static_cast<size_t>(t)].data();
      float* kb = qb + n * sq * d;
      float* vb = kb + n * d * sk;
      float* sb = vb + n * sk * dv;
      float* ob = sb + n * sq * sk;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t b = b0 + j;
        gather_matrix(pq + es * batch_offset(vq.dims, vq.strides, b), bf16, sq, d, vq.strides[r - 2], vq.strides[r - 1],
                      qb + j * sq * d);
        // K^T is kept as K's rows ([sk, d] dense, oneDNN's acb weights): row copies, not a transpose.
        gather_matrix(pk + es * batch_offset(vk.dims, vk.strides, b), bf16, sk, d, vk.strides[r - 1], vk.strides[r - 2],
                      kb + j * d * sk);
        gather_matrix(pv + es * batch_offset(vv.dims, vv.strides, b), bf16, sk, dv, vv.strides[r - 2], vv.strides[r - 1],
                      vb + j * sk * dv);
      }
      try {
        auto mem = [](const memory::desc& md, float* buf) { return memory(md, dnnl_engine(), buf); };
        p.scores.execute(dnnl_stream(), {{DNNL_ARG_SRC, mem(p.q, qb)}, {DNNL_ARG_WEIGHTS, mem(p.kt, kb)},
                                         {DNNL_ARG_DST, mem(p.s, sb)},
                                         {DNNL_ARG_SCRATCHPAD, scratch_memory(p.scores_pad, ScratchSlot::kScratchpad)}});
        for (int64_t row = 0; row < n * sq; ++row) {
          const int64_t b = b0 + row / sq, i = row % sq;
          const float* mrow = mask ? mask + batch_offset(score_dims, mst, b) + i * mst[r - 2] : nullptr;
          masked_softmax_row(sb + row * sk, mrow, sk, mask ? mst[r - 1] : 1);
        }
        p.weighted.execute(dnnl_stream(), {{DNNL_ARG_SRC, mem(p.s, sb)}, {DNNL_ARG_WEIGHTS, mem(p.v, vb)},
                                           {DNNL_ARG_DST, mem(p.o, ob)},
                                           {DNNL_ARG_SCRATCHPAD, scratch_memory(p.weighted_pad, ScratchSlot::kScratchpad)}});
        dnnl_stream().wait();
      } catch (const dnnl::error& e) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!failed.exchange(true)) error = e.what();
        return;
      }
      for (int64_t row = 0; row < n * sq; ++row) {
        const int64_t b = b0 + row / sq, i = row % sq;
        const float* o = ob + row * dv;
        const int64_t off = batch_offset(logical_out, ost, b) + i * row_stride;
        if (bf16 && col_stride == 1) {
          narrow_bf16(o, reinterpret_cast<uint16_t*>(py) + off, dv);
        } else if (bf16) {
          for (int64_t cc = 0; cc < dv; ++cc) reinterpret_cast<uint16_t*>(py)[off + cc * col_stride] = f32_to_bf16(o[cc]);
        } else if (col_stride == 1) {
          std::copy(o, o + dv, reinterpret_cast<float*>(py) + off);
        } else {
          for (int64_t cc = 0; cc < dv; ++cc) reinterpret_cast<float*>(py)[off + cc * col_stride] = o[cc];
        }
      }
    };
    if (threads <= 1) {
      for (int64_t c = 0; c < chunks; ++c) run_chunk(0, c);
    } else {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t c = 0; c < chunks; ++c) run_chunk(omp_get_thread_num(), c);
    }
    if (failed) return internal_error("node '" + node_.name + "' (Attention): oneDNN matmul: " + error);
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
    // Each chunk runs on one thread: plan for one (oneDNN sizes its work split at creation).
    const SingleThreadScope one_thread;
    const auto plan_primitives = [&] {
      const auto f32 = memory::data_type::f32;
      const auto abc = memory::format_tag::abc;
      p.q = memory::desc({batch, sq, d}, f32, abc);
      p.kt = memory::desc({batch, d, sk}, f32, memory::format_tag::acb);  // K's rows: brgemm takes it as is
      p.s = memory::desc({batch, sq, sk}, f32, abc);
      p.v = memory::desc({batch, sk, dv}, f32, abc);
      p.o = memory::desc({batch, sq, dv}, f32, abc);
      dnnl::primitive_attr scaled = concurrent_attr();
      if (scale != 1.0f) scaled.set_output_scales(0, {scale});
      const dnnl::matmul::primitive_desc spd(dnnl::matmul::desc(p.q, p.kt, p.s), scaled, dnnl_engine());
      const dnnl::matmul::primitive_desc wpd(dnnl::matmul::desc(p.s, p.v, p.o), concurrent_attr(), dnnl_engine());
      p.scores = dnnl::matmul(spd);
      p.weighted = dnnl::matmul(wpd);
      p.scores_pad = spd.scratchpad_desc();
      p.weighted_pad = wpd.scratchpad_desc();
    };
    RETURN_IF_ERROR(cpu::dnnl_call(node_, plan_primitives));
    *out = &plans_.emplace(key, std::move(p)).first->second;
    return Status::ok();
  }

  Node node_;
  KernelFn fallback_;
  std::mutex mu_;  // guards plans_ and the buffers (concurrent runs of one model)
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, float>, Plan> plans_;
  std::vector<std::vector<float>> bufs_;  // per thread: one chunk's Q, K rows, V, scores, output
  std::vector<float> mask_;
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
