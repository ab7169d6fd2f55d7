// Calibration for post-training quantization: the data (an .npz, a folder of .npy/.npz, an image
// folder) cut into batches matched to the model's inputs, and the ranges of activations seen while
// the float model runs on it (minmax, percentile, entropy).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"
#include "runtime/executor.h"

namespace ferry::quant {

struct CalibrationDataOptions {
  std::string path;         // .npz, a folder of .npy/.npz, or an image folder
  int64_t image_size = 0;   // > 0: `path` is an image folder (eval transform into [N, 3, S, S])
  int64_t batch = 8;        // samples per run (a model input with a fixed batch dimension wins)
  int64_t max_samples = 0;  // 0: all
};

struct CalibrationData {
  std::vector<NamedTensors> batches;
  int64_t samples = 0;
};

/// Loads the calibration data and matches it to `model`'s inputs: every input needs an array (by
/// name; a single-input model takes a single array of any name) whose dims after axis 0 match the
/// input's (the error names the input, the expected and the given shape).
StatusOr<CalibrationData> load_calibration_data(const Model& model, const CalibrationDataOptions& options);

/// kMse: the range with the least expected squared error (clipping + rounding) over the histogram.
/// kAuto: `ferry quantize` writes the file with each of the four and keeps the one with the best
/// output cosine on the calibration data (ranges: treated as percentile).
enum class Method { kMinMax, kEntropy, kPercentile, kMse, kAuto };
StatusOr<Method> parse_method(const std::string& name);
const char* method_name(Method m);

/// Called after each calibration batch: (stage, batches done, batches in all).
using Progress = std::function<void(const std::string& stage, int64_t done, int64_t total)>;

/// Per-tensor statistics of the float model's values on the calibration data.
class RangeCollector {
 public:
  /// Runs `model` (cpu, opt level 0: every node's outputs under their ONNX names) over `data` and
  /// records min/max of every float tensor (graph inputs and node outputs); methods other than
  /// minmax run the data a second time for histograms over those ranges. The float graph
  /// outputs of each batch are kept in `*outputs` (the reference for output cosines).
  Status collect(std::shared_ptr<const Model> model, const CalibrationData& data, Method method, int threads,
                 const Progress& progress, std::vector<NamedTensors>* outputs);
  /// The range to quantize `name` with (false when it was never seen or held inf/NaN).
  bool range(const std::string& name, Method method, float* lo, float* hi) const;

 private:
  struct Stats {
    float min = 0, max = 0;
    bool seen = false;
    bool nonfinite = false;    // held inf/NaN (an attention mask's -inf): not quantized
    std::vector<double> hist;  // kBins over [min, max]
  };
  void observe_minmax(const std::string& name, const Tensor& t);
  void observe_hist(const std::string& name, const Tensor& t);
  std::map<std::string, Stats> stats_;
};

}  // namespace ferry::quant
