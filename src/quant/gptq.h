// GPTQ weight rounding (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for
// Generative Pre-trained Transformers"): the int8 values of a per-channel symmetric weight chosen
// to minimize the error of the layer's output on its calibration inputs, not of each weight.
// See docs/quantization.md, "Weight rounding".
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::quant {

/// Accumulates H = sum x x^T over rows x of length `k` (the layer's input patches).
class HessianAccumulator {
 public:
  explicit HessianAccumulator(int64_t k) : k_(k), h_(static_cast<size_t>(k * k), 0.0) {}
  /// `rows` rows of `k` floats, contiguous.
  void add(const float* rows, int64_t count);
  int64_t k() const { return k_; }
  int64_t rows() const { return rows_; }
  const std::vector<double>& h() const { return h_; }

 private:
  int64_t k_;
  int64_t rows_ = 0;
  std::vector<double> h_;  // upper triangle filled by add(), symmetrized by gptq_round
};

/// GPTQ: `w` is [n, k] row-major (n output channels, k the reduction: for a Conv the
/// [C/group * kh * kw] patch in weight order), `scales` [n] the fixed per-row scales
/// (int8 value v means v * scale). Columns are rounded one at a time (in order; with `act_order`
/// largest H diagonal first),
/// each rounding error spread over the columns not yet rounded through the inverse of H + damp.
/// Returns the int8 values in [-qmax, qmax] (127, or 64 with --reduce-range), [n, k]. An H that is not positive definite after
/// damping (should not happen) falls back to round to nearest (`*fell_back` set).
std::vector<int8_t> gptq_round(const float* w, int64_t n, const std::vector<float>& scales,
                               const HessianAccumulator& h, double damp, bool act_order, bool* fell_back,
                               int qmax = 127);

/// Round to nearest (ties to even) with the same clamp: the default rounding.
std::vector<int8_t> nearest_round(const float* w, int64_t n, int64_t k, const std::vector<float>& scales, int qmax = 127);

/// sum over the accumulated rows of |(Q - W) x|^2 / rows, the quantity GPTQ minimizes (Q: the int8 values
/// times the scales), to report what it bought.
double output_error(const float* w, const int8_t* q, int64_t n, const std::vector<float>& scales,
                    const HessianAccumulator& h);

}  // namespace ferry::quant
