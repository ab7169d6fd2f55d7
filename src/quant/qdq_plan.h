// The QDQ rewrite of a float model (docs/quantization.md, "Conventions"): which nodes are
// quantized, the Q/DQ pairs on their activations (uint8 asymmetric, per tensor), int8 per-channel
// weights and int32 biases, as an edit of the source .onnx file (onnx/onnx_edit.h).
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"
#include "onnx/onnx_edit.h"

namespace ferry::quant {

/// The range [lo, hi] of a float tensor on the calibration data (false: never seen).
using RangeFn = std::function<bool(const std::string& tensor, float* lo, float* hi)>;

/// uint8 asymmetric parameters of [lo, hi] (0 always representable).
void activation_params(float lo, float hi, float* scale, uint8_t* zero_point);

/// kBiasAdd: Add(MatMul output, 1-D bias constant) taken into the MatMul (int32 bias, no Q/DQ between).
enum class Role { kFloat, kCompute, kBinary, kOwnRange, kPassThrough, kAbsorbed, kBiasAdd };

struct QdqPlan {
  OnnxGraphEdit edit;
  /// Graph node index -> its role (kFloat for nodes left in float).
  std::vector<Role> roles;
  /// Quantized nodes (names), in graph order.
  std::vector<std::string> quantized;
  /// Nodes left in float because ferry does not quantize them: op type -> node names.
  std::map<std::string, std::vector<std::string>> left_float;
  /// Nodes kept in float on request.
  std::vector<std::string> kept;
  int64_t qdq_pairs = 0;
  int64_t int8_weights = 0;
  int64_t reduced_weights = 0;  // of them, 7-bit ([-64, 64])
  /// The Conv/Gemm/MatMul nodes whose weight is 7-bit, in graph order.
  std::vector<std::string> reduced_nodes;
  int64_t int32_biases = 0;
  /// The tensors whose bias became int32 (a Conv/Gemm output, or the Add of a MatMul + bias), with
  /// the axis of their channels (1, or -1: the last): where bias correction measures.
  std::vector<std::pair<std::string, int>> biased_outputs;
};

/// Bias correction: per biased output tensor (QdqPlan::biased_outputs), per channel, the amount to
/// subtract from the float bias before it is quantized to int32.
using BiasShift = std::map<std::string, std::vector<float>>;

/// Data-aware weight rounding (--weight-rounding gptq): per float weight initializer name, its int8
/// values (same shape, the per-channel scales of weight_scales unchanged) used instead of round to nearest.
using WeightValues = std::map<std::string, std::vector<int8_t>>;

/// The int8 weights' largest magnitude: 127 (8 bits, [-127, 127]), or kReducedWeightMax with "reduce
/// range" (ONNX Runtime's reduce_range: symmetric [-64, 64], 7 bits and the sign's extra step), where no
/// pair of u8 x s8 products can saturate vpmaddubsw's int16 (255 * 64 * 2 = 32640; docs/quantization.md).
constexpr int kFullWeightMax = 127;
constexpr int kReducedWeightMax = 64;

/// The per-channel symmetric scales of a float weight along `axis`: max|W_c| / qmax (1 for an all-zero channel).
std::vector<float> weight_scales(const Tensor& w, int64_t axis, int qmax = kFullWeightMax);

/// The per-channel symmetric scales chosen by squared error (docs/quantization.md "Reduce range"): for each
/// channel c, s_c = a * max|W_c| / qmax for the clip ratio a in {1, 0.99, ..., 0.50} with the least
/// sum_k (W_ck - s_c * clamp(round(W_ck / s_c), -qmax, qmax))^2 (ties: the larger a; a = 1 is MinMax).
std::vector<float> weight_scales_mse(const Tensor& w, int64_t axis, int qmax);

/// The scales the plan gives a weight of range qmax: MinMax at 8 bits (the plain baseline's), the squared-error
/// search at 7 (where MinMax's coarser steps cost the most and a clipped outlier is cheaper than rounding).
std::vector<float> plan_weight_scales(const Tensor& w, int64_t axis, int qmax);

/// What the plan wraps besides the defaults (docs/quantization.md, "Never below plain MinMax").
struct PlanOptions {
  /// The plain structure of bench/int8_baseline.py: Q/DQ only on the activation inputs of Conv, Gemm
  /// and MatMul, int8 weights, float biases; their outputs and every other op stay float.
  bool inputs_only = false;
  /// Conv/Gemm/MatMul nodes (names) that stay quantized (Q/DQ inputs, int8 weights) but whose output
  /// gets no Q/DQ (float bias; float consumers read the unrounded output; no Relu absorbed).
  std::set<std::string> float_outputs;
  /// The int8 weights' range [-weight_qmax, weight_qmax]: kFullWeightMax or kReducedWeightMax (--reduce-range).
  int weight_qmax = kFullWeightMax;
  /// With weight_qmax reduced: only the weights whose 8-bit form costs ferry's int8 kernels the split on a
  /// host without VNNI, those of MatMul/Gemm (the int8 GEMM) and of the Convs whose input has a nonzero zero
  /// point (a zero-point-0 source runs unsplit with the repair; docs/quantization.md "Reduce range").
  bool reduce_where_split = false;
  /// With weight_qmax reduced: Conv/Gemm/MatMul nodes (names) whose weights stay 8-bit all the same (the
  /// automatic choice's layers put back to 8 bits, docs/quantization.md "Reduce range").
  std::set<std::string> full_range_nodes;
  /// Where given: the 7-bit weight scales already searched (weight name#axis#qmax -> scales), reused by every plan
  /// of the same model (the automatic choice plans it once per probe and per re-measure).
  std::map<std::string, std::vector<float>>* weight_scale_cache = nullptr;
};

/// Plans the rewrite. `keep_fp32`: node names (or their first output's name) left in float.
/// `bias_shift` (may be null): bias correction (docs/quantization.md, "Bias correction").
/// `weight_values` (may be null): int8 weight values to use (a size mismatch is ignored: round to nearest).
StatusOr<QdqPlan> plan_qdq(const Model& model, const RangeFn& range, const std::set<std::string>& keep_fp32,
                           const BiasShift* bias_shift = nullptr, const WeightValues* weight_values = nullptr,
                           const PlanOptions* options = nullptr);

/// Whether the model already holds quantization ops (QuantizeLinear, QLinearConv, ...): their count.
int64_t count_quantization_ops(const Model& model);

/// Whether `name` names a node of the graph (by name or by its first output).
bool names_node(const Model& model, const std::string& name);

}  // namespace ferry::quant
