// oneDNN matrix products for MatMul, Gemm and com.ferry.FusedMatMul / FusedGemm (f32, bf16).
//
// Constant 2-D weights (the usual Linear / Gemm layer) are reordered once into oneDNN's packed format
// and the input's leading dims are folded into M, so [batch, seq, K] x [K, N] is one [batch*seq, K]
// product. Other products (both operands computed, batched, broadcast batch dims) run oneDNN's plain
// batched matmul. Bias (FusedMatMul input 2, Gemm's C of N elements) is oneDNN's bias, a residual Z
// is a sum post-op, the activation eltwise post-ops. Plans are cached per input shape.
//
// A product of at most kGemvRows rows with constant f32 weights and no residual or activation (the
// classifier Gemm after a global pool: 1x1280 x 1280x1000, 5 MB of weights read for 2.6 MFLOP) is
// memory-bound: it runs as cpu::small_gemm_panels on the weights packed in column panels (each panel
// one sequential stream), the panels split over the threads. See kGemvRows for the measurements.
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <list>
#include <map>
#include <memory>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/dnnl_matmul.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/row_gemm.h"
#include "ir/file_pages.h"
#include "backends/cpu/small_gemm.h"
#include "common/env_switch.h"
#include "ops/op_util.h"
#include "backends/cpu/prepacked.h"
#include "backends/packed_weights.h"
#include "backends/shared_forms.h"

namespace ferry {
namespace {

using cpu::dnnl_engine;
using cpu::dnnl_stream;
using cpu::wrap;
using dnnl::memory;
using tag = dnnl::memory::format_tag;

// Most rows for the small_gemm path. Measured (bench/gemv_probe.cpp, 1x1280 or 8x1280 x 1280x1000 +
// bias, best of 200 calls, the caches flushed by 48 MB of other traffic before each call as the rest
// of a model does, 1 thread): 1 row 0.155-0.185 ms against oneDNN's packed brgemm 0.243-0.252 ms,
// 8 rows 0.237-0.255 against 0.290-0.340; with warm caches both are equal (0.055 / 0.18 ms).
constexpr int64_t kGemvRows = 8;

// Products of at most this many rows with constant f32 weights run, with 2+ threads, as one
// single-thread oneDNN primitive per thread over its own block of N columns (a 64-column multiple;
// weights copied per block) instead of one 2-thread brgemm splitting the rows. The blocks' dst rows
// are strided, so oneDNN 2.6 runs them as gemm:jit (sgemm), and that is the gain: BERT b1 at 2
// threads (bench/ab_vs_ort.py bert_encoder 2 1 5 2, interleaved, load 3.4-4.8), ferry CPU p50
// median 78.9 -> 69.5 ms, wall 152.8 -> 139.0, lower in 5 of 5 rounds; the same blocks as brgemm
// into dense per-block buffers copied into y gave 78.5 (no gain, dropped). An earlier 5-round run
// (load 4.5-5.3): 86.3 -> 74.0. ViT's 197 rows gained nothing (CPU 206.5 -> 216.0 ms, load 4-5),
// so the limit is 128. Where oneDNN keeps the weights plain (its gemm path already: AVX2 hosts) the
// split gains nothing and holds a second copy of the weights: there the whole product runs as one
// 2-thread primitive (BERT-like, 2 threads, 5 alternated rounds, load 5.8-6.7: CPU p50 130.1 ->
// 125.1 ms, lower in 5 of 5; wall / ORT 0.93 -> 0.91; peak RSS 420 -> 227 MiB). FERRY_MATMUL_NSPLIT=0
// turns it off, =ROWS sets the limit and splits plain weights too (read on each call: tests set it).
int64_t nsplit_max_rows(bool plain_weights) {
  const char* e = env_value("FERRY_MATMUL_NSPLIT");
  if (e) return std::max<int64_t>(0, std::atoll(e));
  return plain_weights ? 0 : 128;
}

std::atomic<int64_t> g_column_split_runs{0};
std::atomic<int64_t> g_weight_packings{0};  // cpu::matmul_weight_packings

// At 1 thread, products of kRowGemmMinRows..kRowGemmMaxRows rows with constant f32 weights (N a
// multiple of 48, no activation but GELU) run as cpu::RowGemm: the weights packed once more (on huge
// pages) in the order its loops read them, the next sliver prefetched (row_gemm.h); oneDNN's packed
// copy is then dropped. FERRY_MATMUL_ROW_GEMM=0 keeps oneDNN. Against oneDNN's brgemm on an AVX-512
// host, per call, cold weights, interleaved call by call (bench/matmul_probe.cpp ILV=cold, 41 rounds,
// load 5.2-5.4), time / oneDNN's per round: 0.975 (128x768x2304), 0.928 (128x3072x768), 0.961
// (128x768x3072 + GELU), 0.915 (128x768x768); 0.98-1.02 at 197 rows; whole model at 1 thread, batch 1
// (bench/ab_vs_ort.py MODEL 1 1 6 1.5, FERRY_MATMUL_ROW_GEMM=0 / 1): BERT-like CPU p50 65.5 -> 59.2 ms,
// ViT-B/16 186.1 -> 173.4. More rows reuse each weight enough for oneDNN.
// Where oneDNN keeps the weights plain (its gemm path: AVX2 hosts) with their rows padded
// (cpu::padded_plain_weights), it is ahead from about 24 rows, so there RowGemm stops at
// kRowGemmMaxPlainRows (Zen 3, ILV=cold ILVPAD=1 CPUTIME=1, RowGemm / padded oneDNN per round, load
// 8-9: 16 rows 0.865 (x768x768), 0.946 (x768x3072 + GELU); 24 rows 0.892, 1.033 (x768x2304), 1.032
// (x3072x768); 32 rows 0.962-1.116; 48-64 rows 1.06-1.19; 128 rows 0.99-1.05; 197 rows 1.06-1.10;
// quiet: docs/performance.md, "Padded weight rows in MatMul / Gemm"). Whole model, 1 thread, batch 1:
// BERT-like CPU p50 128.0 -> 124.3 ms, ViT-B/16 386.9 -> 366.0 with oneDNN at 128 / 197 rows.
constexpr int64_t kRowGemmMinRows = 16, kRowGemmMaxRows = 256, kRowGemmMaxPlainRows = 24;
// On AVX2 CPUs without AVX-512 RowGemm also serves 2+ threads (its rows), each thread a share of its
// column chunks; that was measured when oneDNN 2.6 ran [128, 768] x [768, 3072] at half speed (its
// weight rows unpadded): Zen 3, 2 threads, batch 1, bench/ab_vs_ort.py MODEL 2 1 3 1.5, load 10.5-12,
// process CPU p50 BERT-like 155.8 -> 136.1 ms, ViT-B/16 524.0 -> 405.2. With padded rows oneDNN
// takes those products back (128 / 197 rows: BERT-like CPU 129.5 -> 129.9 ms, wall / ORT 0.66 -> 0.58;
// ViT-B/16 394.3 -> 375.6, 0.68 -> 0.51; load 8.7-9.5). On AVX-512 CPUs 2+ threads keep oneDNN
// (RowGemm was measured there at 1 thread only).
bool row_gemm_threads() { return cpu::RowGemm::best_isa() == cpu::RowGemm::Isa::kAvx2; }
bool row_gemm_enabled() {  // read on each eligible call (tests turn it on)
  const char* e = env_value("FERRY_MATMUL_ROW_GEMM");
  return !(e && std::string(e) == "0");
}

class DnnlMatMulKernel : public Kernel, public PackedWeightsHolder {
 public:
  DnnlMatMulKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback), forms_(current_shared_forms()) {}

  // The fused residual (sum) and activation as oneDNN post-ops: one rule for every plan of the node.
  Status post_op_attr(dnnl::primitive_attr* attr) const {
    dnnl::post_ops ops;
    if (has_z_) ops.append_sum(1.f);
    if (!cpu::append_activation(act_, &ops)) return unsupported("activation");
    attr->set_post_ops(ops);
    return Status::ok();
  }

  bool init(const Graph& graph) {
    const bool gemm = node_.op_type == "Gemm" || node_.op_type == "FusedGemm";
    if (!cpu::node_activation(node_, &act_)) return false;
    const TensorType* at = graph.find_type(node_.inputs[0]);
    if (!at || (at->dtype != DType::kF32 && at->dtype != DType::kBF16)) return false;
    dtype_ = at->dtype;
    const Tensor* b = cpu::constant_input(graph, node_, 1);
    AttrReader r(node_);
    if (gemm) {
      if (r.get_int("transA", 0) != 0 || r.get_float("alpha", 1.f) != 1.f || !b || b->rank() != 2) return false;
      trans_b_ = r.get_int("transB", 0) != 0;
      if (node_.inputs.size() > 2 && !node_.inputs[2].empty()) {
        const Tensor* c = cpu::constant_input(graph, node_, 2);
        const int64_t n = trans_b_ ? b->dim(0) : b->dim(1);
        if (!c || c->numel() != n || c->dtype() != b->dtype() || c->rank() > 2) return false;
        const float beta = r.get_float("beta", 1.f);
        bias_t_ = Tensor::allocate(DType::kF32, {1, n});
        uint32_t beta_bits = 0;
        std::memcpy(&beta_bits, &beta, sizeof(beta_bits));
        bias_key_ = weight_form_key("bias", c, "beta " + std::to_string(beta_bits));
        for (int64_t j = 0; j < n; ++j) bias_t_.mutable_data<float>()[j] = static_cast<float>(beta * c->get_double(j));
      }
    } else {
      if (node_.inputs.size() > 2 && !node_.inputs[2].empty()) {
        const Tensor* bias = cpu::constant_input(graph, node_, 2);
        if (!bias || (bias->dtype() != DType::kF32 && bias->dtype() != DType::kBF16)) return false;
        // Always an f32 bias: oneDNN's bf16 matmul runs several times slower with a bf16 one (2.6).
        bias_t_ = bias->dtype() == DType::kF32 ? *bias : cast_tensor(*bias, DType::kF32).value();
        bias_key_ = weight_form_key("bias", bias);
      }
      has_z_ = node_.inputs.size() > 3 && !node_.inputs[3].empty();
    }
    if (b && b->rank() == 2 && b->dtype() == dtype_) {
      w_ = *b;
      w_source_ = b;
      const_w_ = true;
      wk_ = trans_b_ ? w_.dim(1) : w_.dim(0);
      wn_ = trans_b_ ? w_.dim(0) : w_.dim(1);
      if (bias_t_.defined() && bias_t_.numel() != wn_) return false;
    } else if (gemm) {
      return false;
    }
    std::vector<int64_t> a_dims;
    if (const_w_ && cpu::static_dims(graph, node_.inputs[0], &a_dims)) {
      Plan* p = nullptr;
      if (!plan_for(a_dims, {}, &p).is_ok()) return false;
    }
    return true;
  }

  // Constant weights (input 1): every path packs its own form of them, re-derived from another
  // form when the original is gone (original()), so the graph's copy may go, and ours once packed.
  bool release_constant_input(size_t i) override {
    if (i != 1 || !const_w_) return false;
    std::lock_guard<std::mutex> lock(mu_);
    release_ = true;
    drop_original_if_packed();
    return true;
  }

  // oneDNN's packed forms (one per layout, and the per-thread column blocks), the small_gemm
  // panels and RowGemm's: each made by the first run that needs it.
  int64_t packed_weight_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t b = gemv_w_ ? static_cast<int64_t>(gemv_w_->data.size() * sizeof(float)) : 0;
    for (const auto& [desc, form] : packed_) b += static_cast<int64_t>(desc.get_size());
    for (const auto& [key, plan] : plans_)
      for (const auto& [threads, splits] : plan.splits)
        for (const Split& sp : splits) b += static_cast<int64_t>(sp.weights.get_desc().get_size());
    if (row_gemm_) b += row_gemm_->packed_bytes();
    return b;
  }

  Status compute(KernelContext& ctx) override {
    // Plans and their buffers are shared by every run of this node: one run at a time.
    std::lock_guard<std::mutex> lock(mu_);
    const Tensor& a = ctx.input(0);
    if (a.dtype() != dtype_) return fallback(ctx);
    const std::vector<int64_t> no_b;
    const Tensor* b = const_w_ ? nullptr : &ctx.input(1);
    if (b && b->dtype() != dtype_) return fallback(ctx);
    Plan* p = nullptr;
    if (!plan_for(a.dims(), b ? b->dims() : no_b, &p).is_ok()) return fallback(ctx);
    if (has_z_ && (ctx.input(3).dims() != p->out_dims || ctx.input(3).dtype() != dtype_)) return fallback(ctx);
    // The sum post-op adds what dst holds; dst may be the residual's own buffer (memory plan).
    ASSIGN_OR_RETURN(Tensor * y, has_z_ ? ctx.allocate_output_over(0, 3, dtype_, p->out_dims)
                                        : ctx.allocate_output(0, dtype_, p->out_dims, false));
    if (p->gemv) {
      const float* ap = a.data<float>();
      float* yp = y->mutable_data<float>();
      const float* bias = bias_t_.defined() ? bias_t_.data<float>() : nullptr;
      const int64_t m = p->gemv_rows, k = gemv_w_->rows, n = gemv_w_->cols;
      const int64_t panels = (n + cpu::PanelMatrix::kPanel - 1) / cpu::PanelMatrix::kPanel;
      parallel_ranges(panels, m * k * cpu::PanelMatrix::kPanel, [&](int64_t b, int64_t e) {
        cpu::small_gemm_panels(m, ap, k, *gemv_w_, bias, yp, n, b, e);
      });
      return Status::ok();
    }
    if (has_z_ && ctx.input(3).raw() != y->raw())
      std::memcpy(y->mutable_raw(), ctx.input(3).raw(), static_cast<size_t>(y->nbytes()));
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (row_gemm_takes(*p)) {
      if (!row_gemm_) {
        Status st;
        const auto make = [&]() -> std::shared_ptr<const cpu::RowGemm> {
          StatusOr<Tensor> w = original();
          if (!w.is_ok()) return st = w.status(), nullptr;
          StatusOr<std::unique_ptr<cpu::RowGemm>> g =
              cpu::RowGemm::create(w.value().data<float>(), trans_b_, bias_t_.defined() ? bias_t_.data<float>() : nullptr, p->k, p->n);
          if (!g.is_ok()) return st = g.status(), nullptr;
          drop_source_pages(w.value());
          ++g_weight_packings;
          return std::shared_ptr<const cpu::RowGemm>(std::move(g.value()));
        };
        // With the weights and the bias: one per pair for the executors sharing forms.
        row_gemm_ = shared_form<const cpu::RowGemm>("row_gemm", bias_key_, make);
        if (!row_gemm_) return st.is_ok() ? internal_error("node '" + node_.name + "': no RowGemm form") : st;
        // Our oneDNN packed copy is dropped (packed again, or taken from the shared forms, by a later
        // run that needs it): one copy of the weights per path in use, not two.
        for (auto& [key, plan] : plans_) plan.weights = nullptr;
        packed_.clear();
        drop_original_if_packed();
      }
      const cpu::RowGemm& g = *row_gemm_;
      const bool gelu = act_.kind == ActKind::kGelu;
      // Threads take whole column chunks (each its own part of the weight stream).
      parallel_ranges(g.chunks(), p->m * p->k * p->n / g.chunks(), [&](int64_t b, int64_t e) {
        g.run_chunks(a.data<float>(), p->m, p->k, y->mutable_data<float>(), has_z_, gelu, b, e);
      });
      return Status::ok();
    }
    if (const_w_ && !p->weights) {
      RETURN_IF_ERROR(cpu::dnnl_call(node_, [&]() -> Status {
        ASSIGN_OR_RETURN(p->weights, packed_weights(p->prim_wei, p->wei));
        return Status::ok();
      }));
    }
    if (threads > 1 && p->weights && dtype_ == DType::kF32 && p->m <= nsplit_max_rows(p->plain_weights)) {
      std::vector<Split>* splits = nullptr;
      RETURN_IF_ERROR(splits_for(p, threads, &splits));
      if (splits) return run_splits(*splits, a.data<float>(), y->mutable_data<float>());
    }
    return cpu::dnnl_call(node_, [&] {
      std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wrap(p->src, a)}, {DNNL_ARG_DST, wrap(p->dst, *y)}};
      args[DNNL_ARG_WEIGHTS] = p->weights ? *p->weights : wrap(p->wei, *b);
      if (bias_t_.defined()) args[DNNL_ARG_BIAS] = wrap(p->bias, bias_t_);
      p->prim.execute(dnnl_stream(), args);
      dnnl_stream().wait();
    });
  }

 private:
  // One thread's part of a product split over N: columns [n0, n0 + n) with their own packed weights.
  struct Split {
    dnnl::matmul prim;
    memory::desc src, dst, bias;
    memory weights;
    int64_t n0 = 0;
  };
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  // A packed form of the weights: oneDNN's memory, over a buffer of its own for plain forms.
  struct PackedForm {
    memory mem;
    std::unique_ptr<void, Free> buf;  // a plain form's buffer (pack), else null
  };
  struct Plan {
    dnnl::matmul prim;
    memory::desc src, wei, dst, bias;
    const memory* weights = nullptr;  // packed constant weights (null while cpu::RowGemm has them)
    memory::desc prim_wei;            // the layout prim reads them in
    bool plain_weights = false;       // prim_wei is a plain (strided) layout: oneDNN's gemm path
    std::vector<int64_t> out_dims;
    bool gemv = false;       // computed by cpu::small_gemm_panels on gemv_w_ instead of the primitive
    int64_t gemv_rows = 0;   // its M
    int64_t m = 0, k = 0, n = 0;  // the 2-D product (constant weights)
    std::map<int, std::vector<Split>> splits;  // by thread count (nsplit_max_rows)
  };

  // Whether a run of plan p on this thread goes to cpu::RowGemm: constant f32 weights, 16-256 rows
  // (16-24 where oneDNN keeps the weights plain),
  // one thread (the calling thread's count, as the executor set it), or any count on AVX2 CPUs
  // without AVX-512 (row_gemm_threads).
  bool row_gemm_takes(const Plan& p) const {
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    return (threads == 1 || row_gemm_threads()) && const_w_ && dtype_ == DType::kF32 && p.m >= kRowGemmMinRows &&
           p.m <= (p.plain_weights ? kRowGemmMaxPlainRows : kRowGemmMaxRows) &&
           row_gemm_enabled() && (act_.kind == ActKind::kNone || act_.kind == ActKind::kGelu) &&
           cpu::RowGemm::supported(p.k, p.n);
  }

  // The per-thread column blocks of plan p for `threads` threads (64-column multiples), built once;
  // *out stays null when N is too narrow to give each thread a block.
  Status splits_for(Plan* p, int threads, std::vector<Split>** out) {
    auto it = p->splits.find(threads);
    if (it != p->splits.end()) {
      *out = it->second.empty() ? nullptr : &it->second;
      return Status::ok();
    }
    std::vector<Split>& v = p->splits[threads];
    const int64_t blocks = (p->n + 63) / 64;
    if (blocks < threads) return Status::ok();
    // Single-thread primitives: they run inside our parallel region.
    const SingleThreadScope one_thread;
    // The original, unpacked (when released) only if a block is not in the shared forms yet.
    Tensor w;
    Status st;
    try {
      const memory::data_type f32 = memory::data_type::f32;
      for (int t = 0; t < threads; ++t) {
        const int64_t c0 = blocks * t / threads * 64, c1 = std::min(p->n, blocks * (t + 1) / threads * 64);
        const int64_t nb = c1 - c0;
        Split sp;
        sp.n0 = c0;
        sp.src = memory::desc({p->m, p->k}, f32, tag::ab);
        // The block's dst rows are strided (N apart): oneDNN 2.6 runs it as gemm:jit (sgemm) on plain
        // weights (its brgemm wants a dense dst), which is where the gain comes from (see nsplit_max_rows).
        sp.dst = memory::desc({p->m, nb}, f32, memory::dims{p->n, 1});
        dnnl::primitive_attr attr;
        RETURN_IF_ERROR(post_op_attr(&attr));
        if (bias_t_.defined()) sp.bias = memory::desc({1, nb}, f32, tag::ab);
        const auto make_pd = [&](const memory::desc& wei) {
          return bias_t_.defined() ? dnnl::matmul::primitive_desc({sp.src, wei, sp.bias, sp.dst}, attr, dnnl_engine())
                                   : dnnl::matmul::primitive_desc({sp.src, wei, sp.dst}, attr, dnnl_engine());
        };
        dnnl::matmul::primitive_desc pd = make_pd(memory::desc({p->k, nb}, f32, tag::any));
        if (const memory::desc padded = cpu::padded_plain_weights(pd.weights_desc()); !padded.is_zero()) pd = make_pd(padded);
        sp.prim = dnnl::matmul(pd);
        // Columns c0.. of B = w_ [K, N], or of w_ [N, K] read transposed (Gemm transB).
        const memory::desc user_d = trans_b_ ? memory::desc({p->k, nb}, f32, memory::dims{1, p->k})
                                             : memory::desc({p->k, nb}, f32, memory::dims{p->n, 1});
        const auto make = [&]() -> std::shared_ptr<const memory> {
          if (!w.defined()) {
            StatusOr<Tensor> o = original();
            if (!o.is_ok()) return st = o.status(), nullptr;
            w = o.value();
          }
          const float* w0 = w.data<float>() + (trans_b_ ? c0 * p->k : c0);
          memory user(user_d, dnnl_engine(), const_cast<float*>(w0));
          auto block = std::make_shared<memory>(pd.weights_desc(), dnnl_engine());
          dnnl::reorder(user, *block).execute(dnnl_stream(), user, *block);
          dnnl_stream().wait();
          ++g_weight_packings;
          return block;
        };
        // A block of the weights alone (the bias is the primitive's argument): by its columns and layout.
        const std::shared_ptr<const memory> block = shared_form<const memory>(
            "dnnl_matmul_block", std::to_string(c0) + "," + std::to_string(nb) + "|" + cpu::packed_key("", pd.weights_desc()), make);
        if (!block) {
          v.clear();
          return st.is_ok() ? internal_error("node '" + node_.name + "': no weight block") : st;
        }
        sp.weights = *block;
        v.push_back(std::move(sp));
      }
    } catch (const dnnl::error& e) {
      v.clear();
      return cpu::dnnl_error(node_, e);
    }
    if (w.defined()) drop_source_pages(w);
    *out = &v;
    return Status::ok();
  }

  Status run_splits(std::vector<Split>& splits, const float* a, float* y) {
    const int64_t parts = static_cast<int64_t>(splits.size());
    ++g_column_split_runs;
    const float* bias = bias_t_.defined() ? bias_t_.data<float>() : nullptr;
    bool failed = false;
#pragma omp parallel for num_threads(static_cast<int>(parts)) schedule(static)
    for (int64_t t = 0; t < parts; ++t) {
      Split& sp = splits[static_cast<size_t>(t)];
      try {
        std::unordered_map<int, memory> args = {
            {DNNL_ARG_SRC, memory(sp.src, dnnl_engine(), const_cast<float*>(a))},
            {DNNL_ARG_DST, memory(sp.dst, dnnl_engine(), y + sp.n0)},
            {DNNL_ARG_WEIGHTS, sp.weights}};
        if (bias) args[DNNL_ARG_BIAS] = memory(sp.bias, dnnl_engine(), const_cast<float*>(bias + sp.n0));
        sp.prim.execute(dnnl_stream(), args);
        dnnl_stream().wait();
      } catch (const dnnl::error&) {
#pragma omp atomic write
        failed = true;
      }
    }
    if (failed) return internal_error("node '" + node_.name + "' (" + node_.op_type + "): oneDNN matmul block failed");
    return Status::ok();
  }

  // Builds the problem's dims: src [.., M, K], weights [.., K, N], dst; out_dims is the ONNX output shape.
  Status plan_for(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims, Plan** out) {
    const auto key = std::make_pair(a_dims, b_dims);
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      *out = &it->second;
      return Status::ok();
    }
    if (a_dims.empty()) return unsupported("scalar");
    for (int64_t d : a_dims)
      if (d == 0) return unsupported("empty");
    memory::data_type dt;
    cpu::to_dnnl_type(dtype_, &dt);
    Plan plan;
    memory::dims sd, wd, dd;
    memory::dims w_strides;
    if (const_w_) {
      const int64_t k = wk_, n = wn_;
      if (a_dims.back() != k || k == 0 || n == 0) return unsupported("shape");
      int64_t m = 1;
      for (size_t i = 0; i + 1 < a_dims.size(); ++i) m *= a_dims[i];
      sd = {m, k};
      wd = {k, n};
      dd = {m, n};
      plan.m = m;
      plan.k = k;
      plan.n = n;
      plan.out_dims.assign(a_dims.begin(), a_dims.end() - 1);
      plan.out_dims.push_back(n);
    } else {
      std::vector<int64_t> ad = a_dims, bd = b_dims;
      if (bd.empty()) return unsupported("scalar");
      if (ad.size() == 1) ad.insert(ad.begin(), 1);
      if (bd.size() == 1) bd.push_back(1);
      const size_t rank = std::max(ad.size(), bd.size());
      if (rank > DNNL_MAX_NDIMS) return unsupported("rank");
      ad.insert(ad.begin(), rank - ad.size(), 1);
      bd.insert(bd.begin(), rank - bd.size(), 1);
      if (ad[rank - 1] != bd[rank - 2]) return unsupported("shape");
      for (size_t i = 0; i + 2 < rank; ++i)
        if (ad[i] != bd[i] && ad[i] != 1 && bd[i] != 1) return unsupported("broadcast");
      for (int64_t d : bd)
        if (d == 0) return unsupported("empty");
      sd = cpu::to_dnnl_dims(ad);
      wd = cpu::to_dnnl_dims(bd);
      dd = sd;
      for (size_t i = 0; i + 2 < rank; ++i) dd[i] = std::max(ad[i], bd[i]);
      dd[rank - 1] = bd[rank - 1];
      const size_t orig_rank = std::max(a_dims.size(), b_dims.size());
      const size_t batch_rank = orig_rank >= 2 ? orig_rank - 2 : 0;
      std::vector<int64_t> o(dd.end() - 2 - static_cast<long>(batch_rank), dd.end() - 2);
      if (a_dims.size() > 1) o.push_back(dd[rank - 2]);
      if (b_dims.size() > 1) o.push_back(dd[rank - 1]);
      plan.out_dims = o;
    }
    if (bias_t_.defined() && bias_t_.numel() != dd.back()) return unsupported("bias");
    static const bool gemv_enabled = [] {  // FERRY_MATMUL_SMALL_GEMM=0: always oneDNN (to compare)
      const char* e = env_value("FERRY_MATMUL_SMALL_GEMM");
      return !(e && std::string(e) == "0");
    }();
    if (gemv_enabled && const_w_ && dtype_ == DType::kF32 && !has_z_ && act_.kind == ActKind::kNone && sd[0] <= kGemvRows &&
        (!bias_t_.defined() || bias_t_.dtype() == DType::kF32)) {
      const int64_t k = sd[1], n = dd[1];
      // Packed once, under mu_; (k, n) of B is w_[n][k] with transB, w_[k][n] without.
      if (!gemv_w_) {
        ASSIGN_OR_RETURN(const Tensor w, original());
        const auto pack = [&] {
          return std::make_shared<const cpu::PanelMatrix>(trans_b_ ? cpu::pack_panels(k, n, w.data<float>(), 1, k)
                                                                   : cpu::pack_panels(k, n, w.data<float>(), n, 1));
        };
        // The panels of the weights alone (the bias is applied beside them): one per weight for the
        // executors sharing forms (ExecutorOptions::shared_forms).
        gemv_w_ = forms_ && w_source_ ? forms_->get<const cpu::PanelMatrix>(weight_form_key("matmul_panels", w_source_, trans_b_ ? "transB" : ""), pack)
                                      : pack();
        drop_original_if_packed();
        drop_source_pages(w);
      }
      plan.gemv = true;
      plan.gemv_rows = sd[0];
      *out = &plans_.emplace(key, std::move(plan)).first->second;
      return Status::ok();
    }
    const auto plan_primitives = [&] {
      const tag plain = cpu::plain_tag(sd.size());
      plan.src = memory::desc(sd, dt, plain);
      plan.dst = memory::desc(dd, dt, plain);
      plan.wei = memory::desc(wd, dt, trans_b_ ? tag::ba : plain);
      const memory::desc wei_md = const_w_ ? memory::desc(wd, dt, tag::any) : plan.wei;
      dnnl::primitive_attr attr;
      RETURN_IF_ERROR(post_op_attr(&attr));
      if (bias_t_.defined()) {
        memory::data_type bt;
        cpu::to_dnnl_type(bias_t_.dtype(), &bt);
        memory::dims bdims(dd.size(), 1);
        bdims.back() = dd.back();
        plan.bias = memory::desc(bdims, bt, cpu::plain_tag(bdims.size()));
      }
      const auto make_pd = [&](const memory::desc& wei) {
        return bias_t_.defined() ? dnnl::matmul::primitive_desc({plan.src, wei, plan.bias, plan.dst}, attr, dnnl_engine())
                                 : dnnl::matmul::primitive_desc({plan.src, wei, plan.dst}, attr, dnnl_engine());
      };
      dnnl::matmul::primitive_desc pd = make_pd(wei_md);
      // Constant weights oneDNN keeps plain with a row stride of a multiple of 256 floats: padded rows
      // (cpu::padded_plain_weights; packed_weights copies them into that layout).
      if (const_w_) {
        if (const memory::desc padded = cpu::padded_plain_weights(pd.weights_desc()); !padded.is_zero()) pd = make_pd(padded);
      }
      plan.prim = dnnl::matmul(pd);
      plan.prim_wei = pd.weights_desc();
      plan.plain_weights = plan.prim_wei.data.format_kind == dnnl_blocked && plan.prim_wei.data.format_desc.blocking.inner_nblks == 0;
      // Not where its runs go to RowGemm (at the executor's thread count): oneDNN's form would be made
      // here and dropped when the first run packs RowGemm's, its heap kept (issue 40: ViT-B/16's peak
      // 415 -> 733 MiB at 1 thread). A run that does need it packs it then (compute).
      if (const_w_ && !row_gemm_takes(plan)) {
        ASSIGN_OR_RETURN(plan.weights, packed_weights(plan.prim_wei, plan.wei));
      }
      return Status::ok();
    };
    RETURN_IF_ERROR(cpu::dnnl_call(node_, plan_primitives));
    *out = &plans_.emplace(key, std::move(plan)).first->second;
    return Status::ok();
  }

  StatusOr<const memory*> packed_weights(const memory::desc& want, const memory::desc& user_desc) {
    for (auto& [desc, form] : packed_)
      if (desc == want) return &form->mem;
    Status st;
    const auto make = [&]() -> std::shared_ptr<const PackedForm> {
      StatusOr<std::unique_ptr<PackedForm>> made = pack(want, user_desc);
      if (!made.is_ok()) return st = made.status(), nullptr;
      return std::shared_ptr<const PackedForm>(std::move(made.value()));
    };
    // A form of the weights alone (the bias is the primitive's argument): by its layout.
    std::shared_ptr<const PackedForm> form = shared_form<const PackedForm>("dnnl_matmul", cpu::packed_key("", want), make);
    if (!form) return st.is_ok() ? internal_error("node '" + node_.name + "': no packed weights") : st;
    packed_.emplace_back(want, std::move(form));
    drop_original_if_packed();
    return &packed_.back().second->mem;
  }

  // The weights packed into `want` (a new form, the caller's).
  StatusOr<std::unique_ptr<PackedForm>> pack(const memory::desc& want, const memory::desc& user_desc) const {
    ASSIGN_OR_RETURN(const Tensor w, original());
    const auto user = [&] { return memory(user_desc, dnnl_engine(), const_cast<void*>(w.raw())); };
    auto form = std::make_unique<PackedForm>();
    if (want.data.format_kind == dnnl_blocked && want.data.format_desc.blocking.inner_nblks == 0) {
      // A plain form (oneDNN's gemm path on AVX2 hosts; its rows padded: padded_plain_weights) is a copy
      // made at load as fast as the plain weights are read, so `ferry compile` does not store it beside
      // them: storing it took BERT-like's .ferry from 179 to 343 MiB and the peak RSS of a run from it
      // from 253 to 365 MiB (1 thread, `ferry bench`), with nothing gained per run.
      // On transparent huge pages (2 MiB aligned, not rounded up): the copy faults 2 MiB at a time.
      const size_t bytes = want.get_size(), huge = size_t{2} << 20;
      void* buf = nullptr;
      if (::posix_memalign(&buf, bytes >= huge ? huge : 64, bytes) != 0 || !buf)
        return resource_exhausted("node '" + node_.name + "': cannot allocate " + std::to_string(bytes) +
                                  " bytes for its packed weights");
      form->buf.reset(buf);
      if (bytes >= huge) ::madvise(buf, bytes, MADV_HUGEPAGE);
      memory src = user();
      form->mem = memory(want, dnnl_engine(), buf);
      dnnl::reorder(src, form->mem).execute(dnnl_stream(), src, form->mem);
      dnnl_stream().wait();
      ++g_weight_packings;
    } else {
      form->mem = cpu::packed_weights(node_, "dnnl_matmul", want, user);  // stored by `ferry compile`, or reordered
    }
    drop_source_pages(w);
    return form;
  }

  // A form of the weights (`detail`: what else it depends on): from the executors' shared forms,
  // made once for all of them and never changed, else made here; transB is in the key (a square
  // initializer read both ways gives two forms of one layout).
  template <class T>
  std::shared_ptr<T> shared_form(const char* kind, const std::string& detail, const std::function<std::shared_ptr<T>()>& make) {
    if (!forms_ || !w_source_) return make();
    return forms_->get<T>(weight_form_key(kind, w_source_, std::string(trans_b_ ? "transB|" : "|") + detail), make);
  }

  // The constant weights as the graph gave them ([K, N], or [N, K] with transB): w_ while held, else
  // unpacked from a form this kernel keeps (the same values: every form is a copy). Under mu_.
  StatusOr<Tensor> original() const {
    if (w_.defined()) return w_;
    const std::vector<int64_t> dims = trans_b_ ? std::vector<int64_t>{wn_, wk_} : std::vector<int64_t>{wk_, wn_};
    ASSIGN_OR_RETURN(Tensor w, Tensor::try_allocate(dtype_, dims));
    float* out = dtype_ == DType::kF32 ? w.mutable_data<float>() : nullptr;
    if (out && gemv_w_) {
      cpu::unpack_panels(*gemv_w_, out, trans_b_ ? 1 : wn_, trans_b_ ? wk_ : 1);
    } else if (!packed_.empty()) {
      RETURN_IF_ERROR(cpu::dnnl_call(node_, [&] {
        memory::data_type dt;
        cpu::to_dnnl_type(dtype_, &dt);
        memory user(memory::desc({wk_, wn_}, dt, trans_b_ ? tag::ba : tag::ab), dnnl_engine(), w.mutable_raw());
        memory packed = packed_.front().second->mem;
        dnnl::reorder(packed, user).execute(dnnl_stream(), packed, user);
        dnnl_stream().wait();
      }));
    } else if (out && row_gemm_) {
      row_gemm_->unpack(out, trans_b_);
    } else {
      return internal_error("node '" + node_.name + "': its weights were released before any packed form was made");
    }
    return w;
  }

  // With the graph's copy released, the original goes once some form of it is packed.
  void drop_original_if_packed() {
    if (release_ && (!packed_.empty() || gemv_w_ || row_gemm_)) w_ = Tensor();
  }

  // Weights read from a .ferry file's mapping (ir/file_pages.h) that a form of ours now holds:
  // their pages leave the process, as a released original does from the heap (ViT-B/16's from the
  // .ferry at 1 thread, on RowGemm: 767 MiB peak with them resident). Whatever reads them later (the
  // reference fallback, another plan's form, another node) gets the same bytes from the file.
  static void drop_source_pages(const Tensor& w) { (void)drop_file_pages(w.raw(), w.nbytes()); }

  // The reference kernel (shapes or types this kernel does not take), given the weights back.
  Status fallback(KernelContext& ctx) {
    if (!const_w_ || ctx.has_input(1)) return fallback_(ctx);
    ASSIGN_OR_RETURN(Tensor w, original());
    return run_fallback_with_input(fallback_, ctx, 1, Value(std::move(w)));
  }

  Node node_;
  KernelFn fallback_;
  DType dtype_ = DType::kUndefined;
  Tensor w_;       // constant 2-D weights (packed path) or undefined; dropped once packed when released
  bool const_w_ = false;  // input 1 is constant 2-D weights, [wk_, wn_] as B (whether or not w_ still holds them)
  bool release_ = false;  // the graph's copy is released: ours goes once packed
  int64_t wk_ = 0, wn_ = 0;
  Tensor bias_t_;  // bias as [N] / [1, N] (Gemm: beta * C in f32)
  bool trans_b_ = false, has_z_ = false;
  FusedActivation act_;
  std::shared_ptr<const cpu::RowGemm> row_gemm_;  // made (or taken from forms_) by the first run taking the RowGemm path
  std::shared_ptr<const cpu::PanelMatrix> gemv_w_;  // w_ as [K, N] column panels, packed by the first plan taking the small_gemm path
  // The executors' shared forms (ExecutorOptions::shared_forms; null: this kernel's own) and the
  // graph's initializer the weights came from (the forms' key).
  std::shared_ptr<SharedWeightForms> forms_;
  const Tensor* w_source_ = nullptr;
  std::string bias_key_ = "no bias";  // the bias's initializer (and Gemm's beta): RowGemm's key
  std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, Plan> plans_;
  mutable std::mutex mu_;  // guards plans_ and the plans' buffers (concurrent runs of one model)
  std::list<std::pair<memory::desc, std::shared_ptr<const PackedForm>>> packed_;  // ours, or shared (forms_)
};

StatusOr<std::unique_ptr<Kernel>> make_matmul(const Node& node, const OpSchema& schema, const Graph& graph) {
  auto k = std::make_unique<DnnlMatMulKernel>(node, schema.kernel);
  if (!k->init(graph)) return std::unique_ptr<Kernel>();
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace

int64_t cpu::matmul_column_split_runs() { return g_column_split_runs.load(); }
int64_t cpu::matmul_weight_packings() { return g_weight_packings.load(); }

void register_cpu_dnnl_matmul_kernels(CpuKernelTable& t) {
  t.add("", "MatMul", make_matmul);
  t.add("", "Gemm", make_matmul);
  t.add("com.ferry", "FusedMatMul", make_matmul);
  t.add("com.ferry", "FusedGemm", make_matmul);
}

}  // namespace ferry
