// MobileNetV2's inverted-residual block in one pass (XNNPACK / TFLite style): expand 1x1 + act ->
// depthwise 3x3 (stride 1 or 2, pad 1) + act -> project 1x1 + act (+ residual), f32 NHWC, computed
// one output row at a time. The expanded (6x wider) activation never goes to memory: three of its
// rows are kept in a ring (L2), the depthwise output row in L1, and the project GEMM reads it there.
// Separately the three convolutions write and read the expanded tensor once each (4.8 MB per image
// for MobileNetV2's 112x112x96 block): memory-bound layers at ~20-28 GB/s (docs/performance.md).
// Weights are packed once: the two 1x1s in panels of up to 64 columns [K][64], the depthwise as [C/16][9][16].
// Activations are clamps (lo, hi): ReLU6 (0, 6), ReLU (0, inf), none (-inf, inf).
// Measured (bench/inverted_residual_probe.cpp, 1 thread, against the three oneDNN convolutions in the
// same run): 1.15-1.28x on MobileNetV2's 112x112 and 56x56 blocks and even on 28x28 with hot caches,
// 1.3-1.9x with cold ones; slower on 14x14 and 7x7 (the pass leaves those). Whole MobileNetV2
// (`bench/ab_vs_ort.py mobilenet_v2 T B R 2 "off=env FERRY_INVERTED_RESIDUAL=0 build/ferry"
// on=build/ferry`, load 4-6): see src/passes/inverted_residual_fusion.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace ferry::cpu {

class InvertedResidual {
 public:
  struct Clamp {
    float lo, hi;
  };
  /// we: [cmid, cin] (the expand 1x1's OIHW weights), be: [cmid]; wd: [cmid, 1, 3, 3], bd: [cmid];
  /// wp: [cout, cmid], bp: [cout]. Biases may be null (zeros). we null: no expand (MobileNetV2's first
  /// block: depthwise -> project), cmid == cin, act_expand unused.
  InvertedResidual(const float* we, const float* be, int64_t cin, int64_t cmid, Clamp act_expand, const float* wd,
                   const float* bd, int64_t stride, Clamp act_dw, const float* wp, const float* bp, int64_t cout,
                   Clamp act_project);

  /// Whether this build and CPU can run it (AVX-512F).
  static bool available();

  int64_t out_size(int64_t in) const { return (in + 2 - 3) / stride_ + 1; }

  /// y[n, oh, ow, cout] = act_p(project(act_d(dw(act_e(expand(x))))) + bp) + z for x [n, h, w, cin]
  /// NHWC; z (y's shape) may be null or equal to y. Runs on the calling thread, or split over the
  /// OpenMP threads by bands of output rows when `threads` > 1 (outside a parallel region).
  void run(const float* x, int64_t n, int64_t h, int64_t w, const float* z, float* y, int threads) const;

  /// How many times run() was called in this process (tests check that the path fires).
  static int64_t calls();

 private:
  void band(const float* x, int64_t h, int64_t w, const float* z, float* y, int64_t oh0, int64_t oh1,
            float* scratch) const;
  int64_t scratch_floats(int64_t w) const;

  int64_t cin_, cmid_, cmid_pad_, cout_, stride_;
  Clamp act_e_, act_d_, act_p_;
  int64_t we_pv_ = 4, wp_pv_ = 4;  // 16-column vectors per packed panel
  std::vector<float> we_;  // [panels][cin][we_pv_ * 16], zero-padded columns; empty: no expand
  std::vector<float> be_;  // [cmid_pad]
  std::vector<float> wd_;  // [cmid_pad / 16][9][16]
  std::vector<float> bd_;  // [cmid_pad]
  std::vector<float> wp_;  // [panels][cmid][wp_pv_ * 16], zero-padded columns
  std::vector<float> bp_;  // [ceil(cout / 64) * 64]
};

}  // namespace ferry::cpu
