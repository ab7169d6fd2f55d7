// Winograd F(2x2, 3x3) and F(4x4, 3x3) convolution for f32 NHWC tensors (3x3 kernel, stride 1, dilation 1, one pixel
// of zero padding on each side, group 1), for the small images where oneDNN's own Winograd is slower
// than its direct kernel (ResNet-50's 14x14 and 7x7 stages). 2.25x fewer multiplications than the
// direct convolution: the weights are transformed once (U[16][Cin][Cout], packed for a oneDNN batched
// matmul), each run transforms the input into V[16][tiles][Cin], multiplies the 16 [tiles, Cin] x
// [Cin, Cout] products in one matmul call per block of tiles (blocks sized so V and M stay in cache),
// and applies the output transform fused with the bias, a residual add and ReLU.
#pragma once

#include <dnnl.hpp>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ferry::cpu {

/// One convolution's transformed weights; plans (per input shape) are made from it.
class WinogradConv3x3 {
 public:
  /// w: [Cout, Cin, 3, 3] (OIHW) f32, kept by the caller while this object lives (plans transform
  /// and pack it; the transformed copy is not kept); bias: [Cout] or null, copied.
  WinogradConv3x3(const float* w, const float* bias, int64_t cout, int64_t cin);

  /// What a run needs for one input shape: immutable once made, shared by concurrent runs.
  struct Plan {
    int64_t n = 0, h = 0, w = 0;   // input (= output) batch and spatial size
    int tile = 2;                  // output tile side: F(2x2, 3x3) or F(4x4, 3x3)
    int64_t elems = 16;            // (tile + 2)^2: products per tile
    int64_t tiles_h = 0, tiles_w = 0, tiles = 0;  // output tiles per column / row / in all
    int64_t block = 0;             // most tiles per matmul call
    // Thread i computes output channels slice (i % slices) of tile range (i / slices): few tiles
    // split over the output channels, so that each thread's matmuls keep all the rows.
    int threads = 1, slices = 1;
    struct Gemm {                  // [E, m, Cin] x [E, Cin, n] for output channels [n0, n0 + n)
      int64_t m = 0, n0 = 0, n = 0;
      dnnl::matmul prim;           // planned for one thread
      const dnnl::memory* weights = nullptr;  // U's columns [n0, n0 + n) packed for it
    };
    std::vector<Gemm> gemms;       // one per distinct block size the split gives
    size_t scratchpad_bytes = 0;
  };
  /// Makes the plan for an input [n, h, w, Cin], split over omp_get_max_threads() threads.
  /// Thread-safe (the packing takes this object's lock: the kernels of several executors may share
  /// one, backends/shared_forms.h). `block_tiles` > 0 sets the
  /// most tiles per matmul call (tests, measurements); `slices` > 0 the output-channel slices;
  /// `tile` 2 or 4 the output tile (F(2x2, 3x3) or F(4x4, 3x3)), 0: default_tile's choice.
  Status make_plan(int64_t n, int64_t h, int64_t w, Plan* plan, int64_t block_tiles = 0, int slices = 0, int tile = 0);
  /// The output tile make_plan takes by default for an input [n, h, w, cin] and cout output
  /// channels (FERRY_WINOGRAD_TILE=2 or 4 forces one).
  static int default_tile(int64_t cin, int64_t cout, int64_t n, int64_t h, int64_t w);

  /// y[n, h, w, Cout] = relu?(conv(x) + bias + z); x [n, h, w, Cin], z (the residual) null or the
  /// output's shape and may be y itself. Thread-safe for concurrent calls on one plan.
  Status run(const Plan& plan, const float* x, const float* z, float* y, bool relu) const;

  /// Transformed weights packed so far in this process (tests: executors sharing one object pack once).
  static int64_t packings();

  int64_t cin() const { return cin_; }
  int64_t cout() const { return cout_; }
  /// Bytes of the transformed weights (U, packed per plan's column blocks) and bias this holds.
  int64_t packed_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t b = static_cast<int64_t>(bias_.size() * sizeof(float));
    for (const Packed& p : packed_) b += static_cast<int64_t>(p.mem.get_desc().get_size());
    return b;
  }

 private:
  const dnnl::memory* packed_weights(const dnnl::memory::desc& want, int64_t n0);

  int64_t cout_, cin_;
  const float* w_;           // the caller's OIHW weights
  std::vector<float> bias_;  // [Cout] (zeros when the node has none)
  struct Packed {
    dnnl::memory::desc desc;
    int64_t n0;
    dnnl::memory mem;
  };
  std::list<Packed> packed_;  // a list: plans point at its elements
  mutable std::mutex mu_;     // guards packed_ (make_plan, packed_bytes)
};

}  // namespace ferry::cpu
