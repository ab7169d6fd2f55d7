// `ferry quantize`: calibrate a float ONNX model, write its QDQ form, measure the output cosine
// against the float model on the calibration data, and (--target-cosine) keep the most sensitive
// layers in float until the cosine is reached. See docs/quantization.md.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "quant/calibration.h"

namespace ferry::quant {

/// How the int8 weight values are chosen (the per-channel scales are max|W_c| / 127 either way).
enum class WeightRounding { kNearest, kGptq };
StatusOr<WeightRounding> parse_weight_rounding(const std::string& name);
const char* weight_rounding_name(WeightRounding r);

/// --reduce-range (ONNX Runtime's reduce_range): int8 weights in [-64, 64] (7 bits) instead of [-127, 127].
/// kAuto: on a host whose u8 x s8 products saturate in int16 pairs (no VNNI), 7-bit on the layers where
/// 8 bits cost the split, per layer, where the file's output cosine on the calibration data reaches the
/// bar (the plain floor plus half the 8-bit file's margin over it; needs the floor on), else 8-bit;
/// elsewhere 8-bit. See docs/quantization.md "Reduce range".
enum class ReduceRange { kAuto, kOn, kOff };

/// The kAuto rule (kOn / kOff: as told): 7-bit on a host whose pairs saturate, the plain floor measured, when
/// the 7-bit file's output cosine is at least `bar` (quantize_model passes the plain floor plus half the 8-bit
/// file's margin over it).
bool choose_reduce_range(ReduceRange mode, bool host_saturates, bool plain_floor, double cosine_reduced, double bar);

/// The automatic reduce range's per-layer search (docs/quantization.md "Reduce range"), on any measure:
/// `measure(S)` is the output cosine of the file with the layers of S at 8 bits and the other candidates at 7
/// (`initial`: its value for S empty). Forward: the layers of `order` join S one at a time, each measured,
/// until the cosine reaches `bar` or `max_restored` have joined. Backward, once the bar is reached: each
/// layer of S, the largest `macs` first, leaves S again where the file still reaches the bar without it.
struct LayerSearch {
  std::vector<std::pair<std::string, double>> restored;  // forward: layer put back to 8 bits, cosine after
  std::vector<std::pair<std::string, double>> released;  // backward: layer returned to 7 bits, cosine after
  std::vector<std::string> tried_back;                   // backward: every layer tried, released or not
  std::vector<std::string> eight_bit;                    // the final S, in the order the layers joined
  double cosine = 0;                                     // the final S's measure
  bool reached = false;                                  // cosine >= bar
};
StatusOr<LayerSearch> search_8bit_layers(
    double initial, double bar, const std::vector<std::string>& order, const std::map<std::string, int64_t>& macs,
    int max_restored, const std::function<StatusOr<double>(const std::vector<std::string>&)>& measure);

struct QuantizeOptions {
  std::string model_path;
  std::string out_path;
  CalibrationDataOptions data;
  Method method = Method::kPercentile;  // the most accurate on the zoo (docs/quantization.md)
  std::vector<std::string> keep_fp32;  // node names (or first output names)
  double target_cosine = 0;            // 0: no search
  int max_kept_layers = 24;            // the search gives up after keeping this many
  /// Empirical bias correction (docs/quantization.md): each int32 bias absorbs the per-channel mean
  /// error of its output measured on the calibration data, the quantized model's inputs coming from
  /// the corrected layers before it: the biased layers in graph order cut into
  /// `bias_correction_rounds` blocks (0: one layer per block, exactly sequential), one run of the
  /// quantized model over the data per block.
  bool bias_correction = false;
  int bias_correction_rounds = 0;
  /// --weight-rounding gptq (docs/quantization.md, "Weight rounding"): every Conv (group 1), Gemm and
  /// 2-D-weight MatMul, in graph order, rounds its weight by GPTQ on its inputs in the quantized model
  /// of the layers before it, over the first `gptq_samples` calibration samples.
  WeightRounding weight_rounding = WeightRounding::kNearest;
  int gptq_samples = 8;
  /// Never below plain MinMax (docs/quantization.md): the file is measured against the plain structure
  /// (Q/DQ on Conv/Gemm/MatMul inputs only, MinMax ranges) on the calibration data and, when below it,
  /// the Conv/Gemm/MatMul outputs read only by float ops lose their Q/DQ, the most costly first.
  bool plain_floor = true;
  ReduceRange reduce_range = ReduceRange::kAuto;
  /// -1: ask the host (host_int8_pairs_saturate); 0 / 1: as if the host's pairs did not / did saturate.
  int host_pairs_saturate = -1;
  /// Held-out data (same forms as `data.path`; empty: none): the output cosine is also reported on it.
  std::string holdout_path;
  int threads = 0;
  Progress progress;
  std::function<void(const std::string&)> log;  // one line at a time, for the user
};

/// A layer the --target-cosine search kept in float, and why: the output cosine on the probe
/// samples (the first >= 4 calibration samples) with everything quantized, and with only this
/// layer kept in float (layers are tried in the order of that gain).
struct KeptLayer {
  std::string node;
  std::string op_type;
  double input_cosine = 1;   // the probe cosine with every layer quantized
  double output_cosine = 1;  // the probe cosine with only this layer in float
  double model_cosine = 0;   // the calibration-data cosine after keeping it (and those before it)
};

/// The automatic reduce range puts at most this many layers back to 8-bit weights, each re-measured over the
/// calibration data (docs/quantization.md "Reduce range").
constexpr int kMaxRestored = 16;

struct QuantizeReport {
  int64_t samples = 0;
  int64_t batches = 0;
  std::vector<std::string> warnings;
  int64_t quantized_nodes = 0;
  int64_t qdq_pairs = 0;
  int64_t int8_weights = 0;
  int64_t reduced_weights = 0;  // of them, 7-bit (--reduce-range or its automatic choice)
  int64_t int32_biases = 0;
  std::map<std::string, std::vector<std::string>> left_float;  // op type -> nodes
  std::vector<std::string> kept_by_user;
  std::vector<KeptLayer> kept_for_target;
  double cosine_mean = 0;  // per-sample output cosine to fp32, mean over the calibration samples (worst output)
  double cosine_min = 0;   // the worst sample's
  double first_cosine = 0; // before any --target-cosine repair
  /// The method the ranges came from (--method auto: the best of the three), and with --method
  /// auto each method's output cosine (mean over the calibration samples) with every layer quantized.
  Method method = Method::kPercentile;
  std::vector<std::pair<std::string, double>> method_cosines;
  bool target_reached = true;
  /// The layers were kept in graph order from the input (the sensitivity order did not reach the
  /// target); then a KeptLayer's cosines are the model's before and after keeping it.
  bool graph_order = false;
  /// Bias correction: the biases corrected, and the calibration output cosine after each round
  /// (the first entry: before any).
  int64_t biases_corrected = 0;
  std::vector<double> bias_rounds;  // the calibration cosine (opt level 0) at the start of each round
  double bias_cosine_before = 0;    // the calibration cosine without it
  /// Weight rounding: the weights GPTQ rounded, and the calibration output cosine before it.
  int64_t weights_gptq = 0;
  double gptq_cosine_before = 0;
  /// Never below plain MinMax: the plain structure's output cosine on the calibration data, the
  /// Conv/Gemm/MatMul nodes whose output Q/DQ was dropped (all candidates, each with the output cosine of
  /// the file with all of them float), and whether the plain structure itself was written (nothing else
  /// reached it).
  double plain_cosine = 0;
  std::vector<std::pair<std::string, double>> float_outputs;
  bool plain_written = false;
  /// Reduce range: whether the file's weights are 7-bit ([-64, 64]), whether this host's int8 pairs saturate,
  /// and for the automatic choice the calibration output cosine of the file with 8-bit and 7-bit weights
  /// (0: not measured).
  bool reduce_range = false;
  bool host_pairs_saturate = false;
  double cosine_full_range = 0, cosine_reduced_range = 0;
  /// The automatic choice per layer: the layers put back to 8 bits (in order; input_cosine / output_cosine: the
  /// probe cosine with all candidates 7-bit / with only this one 8-bit; model_cosine: the calibration cosine
  /// after it), the calibration cosine of that mix (0: no layer put back), and the nodes whose weights are 7-bit.
  std::vector<KeptLayer> restored_8bit;
  /// Then, the bar reached, those of them returned to 7 bits because the file still reached it without them (the
  /// most multiply-adds first; model_cosine: the calibration cosine after it).
  std::vector<KeptLayer> released_7bit;
  double cosine_mixed_range = 0;
  double reduce_range_bar = 0;  // what 7-bit weights must reach: the plain floor + half the 8-bit file's margin over it
  std::vector<std::string> layers_7bit;
  /// --holdout: samples and the output cosine on them (mean, worst), of the written file, and of the
  /// same file without bias correction (when it was on; else equal).
  int64_t holdout_samples = 0;
  double holdout_mean = 0, holdout_min = 0, holdout_uncorrected = 0;
};

/// kInvalidArgument for an already quantized model (nothing written), bad data or names.
StatusOr<QuantizeReport> quantize_model(const QuantizeOptions& options);

}  // namespace ferry::quant
