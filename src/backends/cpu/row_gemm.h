// Single-thread f32 product y[M, N] = x[M, K] * W[K, N] (+ bias, + the residual already in y, GELU)
// for a constant W that does not fit the last-level cache (the transformer matmuls: 2.4-9.4 MB of
// weights per node, read from DRAM on every run). W is packed once, on transparent huge pages, into
// 48-column slivers of up to kc rows, stored in the order the loops read them (one sequential stream
// per call); each sliver is reused from L1 by every block of 8 rows of x, and the next sliver is
// software-prefetched while the current one is in use. oneDNN 2.6's brgemm runs BERT's shapes 7-13%
// slower with cold weights than hot (bench/matmul_probe.cpp COLD=1); RowGemm on huge pages takes back
// about half of that (ILV=cold), on 4 KiB pages it is no faster than oneDNN: the page walks of the
// cold weight stream cost more than the prefetch saves. Microkernel (AVX-512F): 8 rows x 48 columns in 24
// accumulators; with a residual and several K blocks the partial sums go through a scratch chunk
// and the residual is added last, as oneDNN's sum post-op does. On AVX2 + FMA CPUs (no AVX-512F)
// the same slivers run through a 4 rows x 24 columns microkernel (row_gemm.cpp), which gives the
// same bits. There (a Zen 3 core, 1 thread, thread CPU time: bench/matmul_probe.cpp CPUTIME=1
// ONLY=rowgemm M K N [gelu]) oneDNN 2.6's f32 matmul runs [128, 768] x [768, 3072] at 40 GFLOP/s,
// with or without GELU, RowGemm at 84 -- but oneDNN with its weight rows padded (the stride of 3072
// floats was the cause: cpu::padded_plain_weights) at 87, so there dnnl_matmul.cpp gives RowGemm only
// 16-24 rows there (kRowGemmMaxPlainRows).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"

namespace ferry::cpu {

class RowGemm {
 public:
  /// The microkernels: 8 rows x 48 columns in 24 zmm accumulators (AVX-512F), or 4 rows x 24 columns
  /// in 12 ymm ones (AVX2 + FMA), run over the same packed slivers; both sum each element's products
  /// in the same order with the same operations, so they give the same bits.
  enum class Isa { kAvx2, kAvx512 };

  /// w: [K, N] row-major, or [N, K] when trans_b (Gemm transB); bias: [N] or null (copied).
  /// Requires supported(K, N).
  /// huge_pages: the packed weights on transparent huge pages (madvise) where the system gives them.
  /// kResourceExhausted, naming the bytes, when the packed copy cannot be allocated.
  /// isa: the microkernels (default best_isa(); tests pick each one has() says this CPU runs).
  static StatusOr<std::unique_ptr<RowGemm>> create(const float* w, bool trans_b, const float* bias, int64_t k, int64_t n,
                                                   bool huge_pages = true, std::optional<Isa> isa = std::nullopt);

  /// Whether this build and CPU can run it (AVX-512F, or AVX2 + FMA) and the shape fits (N a multiple of 48).
  static bool supported(int64_t k, int64_t n);
  /// Whether this build and CPU run the microkernels of `isa`; the widest of them (AVX-512F over AVX2).
  static bool has(Isa isa);
  static Isa best_isa();

  /// y = x * W + bias (+ y's own values when accumulate: the residual already in y), then GELU
  /// (erf form) when gelu. x: [m, K] rows lda apart; y: [m, N] dense. One thread.
  void run(const float* x, int64_t m, int64_t lda, float* y, bool accumulate, bool gelu) const;
  /// run() for the columns of chunks [chunk_begin, chunk_end) only (chunk c: columns [c nc, (c + 1) nc)
  /// of y, its own part of the weight stream), so threads can share one product; the same bits as run().
  void run_chunks(const float* x, int64_t m, int64_t lda, float* y, bool accumulate, bool gelu, int64_t chunk_begin,
                  int64_t chunk_end) const;
  /// The column chunks (N / nc).
  int64_t chunks() const { return n_ / nc_; }

  /// The weights back as create() was given them ([K, N], or [N, K] when trans_b): the same values.
  void unpack(float* w, bool trans_b) const;
  /// How many times run() was called in this process (tests check that a path fires).
  static int64_t calls();
  /// Bytes of the packed weights and bias this holds.
  int64_t packed_bytes() const { return packed_bytes_ + static_cast<int64_t>(bias_.size() * sizeof(float)); }

  static constexpr int64_t kCols = 48;  // sliver width
  static constexpr int64_t kRows = 8;   // microkernel rows

 private:
  RowGemm(int64_t k, int64_t n);  // the blocking for [K, N]; create() packs
  int64_t k_, n_, kc_, nc_;
  Isa isa_ = Isa::kAvx2;
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], Free> packed_;  // [N / nc][ceil(K / kc)][nc / 48][kc_b][48] (+ one sliver of slack)
  std::vector<float> bias_;    // [N], zeros when none
  int64_t packed_bytes_ = 0;   // packed_'s allocation
};

}  // namespace ferry::cpu
