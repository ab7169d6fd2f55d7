// Comparing two runs of one model (`ferry compare`): a reference (device + precision, or saved
// outputs) and a target, over one or many input samples. Metrics per output and, per layer,
// per node output shared by both graphs (values are matched by precision_base_name, so fused
// graphs compare at their fused boundaries; a channels-last twin `v_nhwc` made by the cpu
// backend's layout pass is compared with `v` after permuting it back). The per-layer path never holds every intermediate
// of both runs: the reference run spills the values the target also computes to a temporary
// folder, and the target run reads each back, compares it and deletes it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "passes/precision.h"
#include "precision/precision_run.h"
#include "runtime/executor.h"

namespace ferry {

/// Pass/fail thresholds (the seeds' defaults: cosine >= 0.99, max abs error <= 0.01).
struct Thresholds {
  double cosine_min = 0.99;
  double max_abs = 0.01;
  /// False: max abs is reported, not judged (`ferry compare` on an int8 model without --max-abs:
  /// its rounding error scales with its outputs, so an absolute bound fails good models).
  bool check_max_abs = true;
};

/// How one tensor differs from its reference. Error metrics cover positions finite in both.
struct TensorMetrics {
  int64_t count = 0;
  double cosine = 1.0;
  double max_abs = 0.0;
  double mean_abs = 0.0;
  /// max |t - r| / max(|r|, 1e-6)
  double max_rel = 0.0;
  double rmse = 0.0;
  double ref_max_abs_value = 0.0;  // max |r|: the scale the errors are against
  int64_t ref_nan = 0, ref_inf = 0, target_nan = 0, target_inf = 0;
  /// Non-empty when the tensors cannot be compared (shape or type differs).
  std::string mismatch;

  /// True when the target has NaN/inf where the reference has none.
  bool new_non_finite() const { return target_nan > ref_nan || target_inf > ref_inf; }
};

TensorMetrics compare_tensors(const Tensor& ref, const Tensor& target);
/// Folds `m` into `worst` (the worst of each metric; counts summed).
void merge_worst(TensorMetrics* worst, const TensorMetrics& m);
/// An output passes: cosine and max abs within thresholds, no new NaN/inf, same shape.
bool output_passes(const TensorMetrics& m, const Thresholds& t);

/// One criterion an output failed, for a verdict that says why: "max_abs", "cosine", "non_finite"
/// or "mismatch", the measured value and the threshold it missed.
struct FailedCriterion {
  std::string criterion;
  double value = 0.0;
  double threshold = 0.0;
  std::string text;  // "max abs 0.063 > 0.01"
};
/// Every criterion of output_passes that `m` fails (empty when it passes).
std::vector<FailedCriterion> failed_criteria(const TensorMetrics& m, const Thresholds& t);
/// A layer passes on cosine and NaN/inf only: intermediate values have their own scales, so an
/// absolute error bound meant for outputs would flag every large activation.
bool layer_passes(const TensorMetrics& m, const Thresholds& t);

/// `device:precision[:opt-level]` (cpu-ref:fp32, cpu:fp16, cuda:0:bf16:2) or `outputs:DIR`.
struct RunSpec {
  std::string text;
  bool is_outputs = false;
  std::string outputs_dir;
  std::string device;
  PrecisionMode mode = PrecisionMode::kForceFp32;
  int opt_level = -1;
};
StatusOr<RunSpec> parse_run_spec(const std::string& text);

/// Where the samples come from (built by the CLI: one --input set, or a dataset folder).
struct SampleSource {
  size_t count = 0;
  std::function<std::string(size_t)> name;
  std::function<StatusOr<NamedTensors>(size_t)> inputs;
  /// Reference outputs for an `outputs:DIR` reference (by output name).
  std::function<StatusOr<NamedTensors>(size_t)> reference_outputs;
};

struct CompareOptions {
  RunSpec ref;
  RunSpec target;
  /// The reference runs this model instead of the target's (`--ref-model`: a float model against
  /// its quantized form, matched by input, output and value names); null: the same model.
  std::shared_ptr<const Model> ref_model;
  /// Added to the target's precision (--keep-fp32, --precision-config).
  PrecisionOptions target_precision;
  Thresholds thresholds;
  bool per_layer = false;
  int threads = 0;
  /// Folder for per-layer spill files (a fresh temporary folder when empty).
  std::string spill_dir;
  /// Called after each sample (progress bar).
  std::function<void(size_t done, size_t total)> progress;
};

struct OutputRecord {
  std::string name;
  TensorMetrics worst;
  double mean_cosine = 0.0;
  double mean_max_abs = 0.0;
  int64_t samples_passed = 0;
  /// The first sample this output failed on and its metrics there (empty name: passed on all).
  std::string first_failing_sample;
  TensorMetrics first_failure;
  /// Classifier-like outputs ([N, C] or [C], C >= 2): rows whose argmax agrees; ref's top-1 within target's top-5.
  int64_t rows = 0;
  int64_t top1_agree = 0;
  int64_t top5_agree = 0;
  bool top5_defined = false;
};

struct LayerRecord {
  std::string node;  // target node name
  std::string op;
  std::vector<std::string> origin;  // ONNX nodes a fused node covers
  std::string value;                // base value name
  std::vector<std::string> inputs;  // base names of the node's inputs
  TensorMetrics worst;
  double mean_cosine = 0.0;
  int64_t samples = 0;
  bool passes = true;
};

struct CompareResult {
  std::vector<OutputRecord> outputs;
  std::vector<LayerRecord> layers;
  /// Index into layers of the first node over threshold whose compared inputs were within it.
  std::optional<size_t> first_diverging;
  /// The first NaN/inf-producing target node (first sample where one appeared).
  std::optional<NonFiniteEvent> first_non_finite;
  std::string first_non_finite_sample;
  size_t samples = 0;
  size_t samples_passed = 0;
  std::vector<std::string> failing_samples;  // names, first 20
  double ref_ms = 0.0, target_ms = 0.0;       // mean latency per sample
  PrecisionReport target_precision;
  bool passed() const { return samples > 0 && samples_passed == samples; }
};

class Comparator {
 public:
  static StatusOr<std::unique_ptr<Comparator>> create(std::shared_ptr<const Model> model, const CompareOptions& options);
  ~Comparator();

  /// Runs every sample through both sides (per layer when options.per_layer). Reference outputs
  /// are cached for later calls to run_target_only.
  StatusOr<CompareResult> run(const SampleSource& samples);
  /// Rebuilds the target with `precision` (mode from the target spec; lists replaced).
  Status set_target_precision(const PrecisionOptions& precision);
  /// Compares outputs only, against the reference outputs cached by run() (for repair search);
  /// stops at the first failing sample when `stop_at_first_failure`.
  StatusOr<CompareResult> run_target_only(const SampleSource& samples, bool stop_at_first_failure);
  /// Per-layer compare of one sample (reference re-run), for locating divergence.
  StatusOr<CompareResult> run_per_layer(const SampleSource& samples, size_t index);

  const CompareOptions& options() const { return options_; }
  /// The target's graph as it runs (optimized, precision-rewritten).
  const Model& target_model() const;
  /// The precision options the target runs with now, and what the rewrite did.
  const PrecisionOptions& target_precision() const { return target_precision_; }
  const PrecisionReport& target_precision_report() const { return target_report_; }

 private:
  Comparator() = default;
  Status run_samples_(const SampleSource& samples, const std::vector<size_t>& indices, bool per_layer, bool use_cache,
                      bool stop_at_first_failure, CompareResult* result);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  CompareOptions options_;
  PrecisionOptions target_precision_;
  PrecisionReport target_report_;
};

}  // namespace ferry
