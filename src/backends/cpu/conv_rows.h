// Direct f32 NHWC convolution for small images with large weights (ResNet-50's 7x7 stage: 3x3
// 512->512, 9.4 MB of weights per node, read once per batch-1 run from DRAM). The weights are packed
// once into 64-output-channel panels of up to 512 input channels per kernel tap, stored in the order
// the loops read them (one sequential stream per call); each panel is read once from memory and
// reused from L2 by every block of 7 output pixels, and the next panel is software-prefetched while
// the current one is in use (oneDNN 2.6's brgconv runs 1.2-1.5x slower on these shapes with cold
// caches than hot; this 1.1-1.2x: bench/conv_prefetch_probe.cpp). Microkernel: 7 output pixels x 64
// channels in 28 accumulators. The bias, a residual and ReLU are applied in the last pass. With
// several OpenMP threads (outside a parallel region) each takes a range of the 64-channel panels.
#pragma once

#include <cstdint>
#include <vector>

namespace ferry::cpu {

class ConvRows {
 public:
  /// w: [cout, cin, kh, kw] (OIHW) f32; bias: [cout] or null (copied). cout % 64 == 0.
  ConvRows(const float* w, const float* bias, int64_t cout, int64_t cin, int64_t kh, int64_t kw, int64_t stride_h,
           int64_t stride_w, int64_t pad_h, int64_t pad_w);

  /// Whether this build and CPU can run it (AVX-512F).
  static bool available();

  /// y[n, oh, ow, cout] = relu?(conv(x)[..] + bias + z?) for x [n, h, w, cin] NHWC; z (same shape as y)
  /// may be null or equal to y (the residual already in y).
  void run(const float* x, int64_t n, int64_t h, int64_t w, const float* z, float* y, bool relu) const;

  /// How many times run() was called in this process (tests check that a path fires).
  static int64_t calls();

  /// Whether run() takes the pixel-major 1x1 form for `pixels` output pixels: a 1x1 kernel without
  /// padding, at most 2048 input channels, and at most kPixelMajorWeightBytes of weights or more than
  /// 49 output pixels (few pixels with large weights keep the form above: one stream over the
  /// weights). The 64-channel panels run in chunks of at most kPixelMajorWeightBytes (they stay in
  /// L2); each block of 7 output pixels runs every panel of a chunk with its accumulators started
  /// from the bias, the residual and ReLU applied before the one store of y: no pass over y before
  /// the products and no partial sums through memory.
  bool pixel_major(int64_t pixels) const;
  static constexpr int64_t kPixelMajorWeightBytes = int64_t{512} << 10;

  int64_t out_h(int64_t h) const { return (h + 2 * pad_h_ - kh_) / sh_ + 1; }
  int64_t out_w(int64_t w) const { return (w + 2 * pad_w_ - kw_) / sw_ + 1; }

 /// Bytes of the packed weights and bias this holds.
  int64_t packed_bytes() const { return static_cast<int64_t>((packed_.size() + bias_.size()) * sizeof(float)); }

 private:
  void run_1x1(const float* x, int64_t n, int64_t h, int64_t w, const float* z, float* y, bool relu) const;

  int64_t cout_, cin_, kh_, kw_, sh_, sw_, pad_h_, pad_w_, kc_;
  std::vector<float> packed_;  // [cin / kc][kh * kw][cout / 64][kc][64]
  std::vector<float> bias_;    // [cout], zeros when none
  std::vector<float> zeros_;   // [kc]: the row of a padded pixel
};

}  // namespace ferry::cpu
