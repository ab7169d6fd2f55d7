// oneDNN's u8 x s8 products on hosts without VNNI, and what the int8 convolution and matmul
// (dnnl_int8_conv.cpp, dnnl_int8_matmul.cpp) do about them.
//
// Without VNNI (AVX2; AVX-512 before VNNI) oneDNN multiplies u8 x s8 with vpmaddubsw, which adds each
// pair of products in int16 with saturation (oneDNN's "Nuances of int8 computations"): 255 * 127 * 2 >
// 32767, so large inputs on large weights silently lose the excess (mlp.int8.onnx on an AVX2 EPYC:
// max |cpu - cpu-ref| 0.165, cosine to fp32 0.9960 against the reference's 0.9996; weights clipped to
// [-64, 64] gave bit-identical outputs). There, where a weight is outside [-64, 64], the conv and matmul
// split each weight w into w1 = w >> 1 and w2 = w - w1 (both in [-64, 64]: no pair exceeds 255 * 64 * 2 =
// 32640) and run one primitive on twice the reduction, [x, x] against [w1; w2] per group: the same exact
// integer sum (x * w1 + x * w2 = x * w) for one copy of the source per run. An s8 source there is made
// u8 in that copy (x + 128, the zero point + 128: the same x - zp), as oneDNN's s8 x s8 convolutions
// without VNNI halve the weights (scale_adjust 0.5, rounded): one step off in FullRangeWeightsExactWithoutVnni.
// (Depthwise convolutions are not split: oneDNN's depthwise kernels widen to 32 bits before multiplying.) With VNNI (vpdpbusd adds
// in int32) or AMX nothing changes. The effective ISA honours ONEDNN_MAX_CPU_ISA. Read once.
//
// ---- Unsplit with repair ----
// vpmaddubsw adds the products of input channels 2j and 2j + 1 of one tap (oneDNN's int8 convolutions
// group input channels in fours per tap; a gemm im2col reduction orders (kh, kw, c): the same pairs
// where C % 4 == 0), and saturates that pair's sum to int16. A pair can only saturate where its two
// weights have one sign and |w0| + |w1| > 128 (255 * 128 = 32640 fits): ResNet-50's default file has
// 1-7% such pairs in every layer, so no layer runs unsplit by the bound alone. It saturates only where
// its inputs are large too (a0 + a1 >= 256 at the least): on ResNet-50's ReLU outputs ~1% of the
// values are >= 128 and at most 0.003% of the outputs after the stem are touched
// (bench/int8_pair_saturation.py, docs/performance.md "INT8"). So the
// convolution runs unsplit (half the split's multiply-adds), SaturatingPairs::find lists every output a
// saturating pair feeds (a superset is harmless; one pass over the source in 128-byte steps, split over
// the threads, and per pair the weight pairs by |w0 + w1| so that max(a0, a1) |w0 + w1| <= 32767 ends the
// look early), and the convolution's repair recomputes those outputs
// exactly, in the reference's order (its integer sum and f32 epilogue), over what oneDNN wrote (ResNet-50
// at 1 thread: 52 CPU ms per run against 93 split, the same outputs). Only on a source with zero point 0,
// a Relu's output whose values >= 128 are its tail: MobileNetV2's expansions read residual sums (zero point
// ~128, half the values >= 128), 0.7-3% of their outputs touched, and the scan and repair there cost
// more than the split saves (12.2 CPU ms per run against 10.5). Where a run touches more than 1/256 of
// the outputs anyway (adversarial inputs), it takes the split (made then).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "ir/tensor.h"

namespace ferry::cpu {

/// Whether oneDNN's u8 x s8 products saturate in pairs on this host (no VNNI); read once.
bool int8_pairs_saturate();

/// Whether `w` (s8) needs the split on this host: some weight outside [-64, 64].
bool needs_split(const Tensor& w);

/// w viewed as [outer, block] -> [outer, 2 * block]: each block's w >> 1, then w - (w >> 1); shaped `dims`.
Tensor split_weights(const Tensor& w, int64_t outer, std::vector<int64_t> dims);

/// x viewed as [blocks, block] -> [blocks, copies * block]: each block `copies` times (2: the source of
/// the split), s8 made u8 (x + 128: the top bit flipped) where `flip`.
void copy_blocks(const uint8_t* x, int64_t blocks, int64_t block, int copies, bool flip, uint8_t* d);

/// The weight pairs of an NHWC convolution (OIHW s8 weights, C even) that may saturate, and the scan of
/// a u8 source for the outputs they feed.
class SaturatingPairs {
 public:
  /// Finds the pairs of `w`; false (and empty) where none can saturate: exact unsplit.
  bool init(const Tensor& w);
  bool empty() const { return fixup_.empty(); }

  /// Every output (NHWC offset) some pair of `x` (NHWC u8, dims `in_dims`; the output's `out_dims`,
  /// the spatial stride, dilation and leading padding as given) may saturate in, sorted, once each;
  /// false (stopped early) where more than `limit` are.
  bool find(const std::vector<int64_t>& in_dims, const std::vector<int64_t>& out_dims, const std::array<int64_t, 2>& stride,
            const std::array<int64_t, 2>& dil, const std::array<int64_t, 2>& pad, const uint8_t* x, int64_t limit,
            std::vector<int64_t>* out) const;

 private:
  struct Viol {
    int32_t m;
    int16_t w0, w1;
  };
  int64_t kh_ = 0, kw_ = 0;
  std::vector<std::vector<Viol>> fixup_;  // per (tap, pair j): the output channels whose pair may saturate, largest |w0 + w1| first
  std::vector<int> pair_max_;             // per pair j: the largest |w0 + w1| of its lists (0: none)
};

}  // namespace ferry::cpu
