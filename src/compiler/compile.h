// The offline compiler behind `ferry compile`: fixes input shapes, runs the graph passes and the
// precision rewriting, optionally tunes kernel choices, once per batch gear, and returns what
// the .ferry writer stores (format/compiled_model.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "format/compiled_model.h"
#include "ir/graph.h"

namespace ferry {

/// Progress of a long step: `stage` ("optimize", "tune"), `done` of `total` units, a detail line.
using ProgressFn = std::function<void(const std::string& stage, int64_t done, int64_t total, const std::string& detail)>;

struct CompileOptions {
  std::string device = "cpu";
  /// Graph optimization level; -1: the device's default (as the executor: 0 on cpu-ref, 2 elsewhere).
  int opt_level = -1;
  /// Input dims to fix, by input name (every dim must be given: rank equals the input's).
  std::vector<std::pair<std::string, std::vector<int64_t>>> input_shapes;
  /// Batch sizes to compile one plan for (empty: one plan at the model's own shapes).
  std::vector<int64_t> batch_gears;
  /// Precision mode (src/passes/precision.h names: force_fp32, allow_mix_precision, fp16, ...).
  std::string precision_mode = "force_fp32";
  /// Optional precision config file (JSON, see passes/precision.h).
  std::string precision_config;
  /// Time candidate kernels per node and keep the fastest (see compiler/tuner.h).
  bool tune = false;
  /// Tuning cache file read before and written after tuning ("" = no cache).
  std::string tuning_cache;
  /// Intra-op threads while tuning (0: try the candidates in tuner.h).
  int threads = 0;
  /// Store the weights in the layout the chosen kernels want (compiler/prepack.h; cpu only).
  bool prepack = true;
  ProgressFn progress;
};

struct CompileReport {
  int64_t nodes_before = 0;
  int64_t nodes_after = 0;   // of the first gear
  int64_t tuned_nodes = 0;   // nodes timed
  int64_t cache_hits = 0;    // nodes whose choice came from the tuning cache
  int64_t changed_nodes = 0; // nodes whose kernel differs from the backend's default choice
  int64_t packed_nodes = 0;  // nodes carrying pre-packed weights (all gears)
  int64_t packed_bytes = 0;  // their bytes before de-duplication across gears
};

/// Parses "name:1,3,224,224;mask:1,128" (also accepts several specs) into `out`.
Status parse_input_shapes(const std::vector<std::string>& specs,
                          std::vector<std::pair<std::string, std::vector<int64_t>>>* out);
/// Parses "1,2,4,8" (positive, strictly increasing after sorting, no duplicates).
StatusOr<std::vector<int64_t>> parse_batch_gears(const std::string& text);

/// Sets the given input dims (and, for batch > 0, dim 0 of every input to `batch`), then
/// re-runs shape inference. Errors name the input and the dims.
Status fix_input_shapes(Model* model, const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes,
                        int64_t batch);

/// Compiles `source` (an imported ONNX model; not modified) into the spec the writer stores.
StatusOr<CompiledModelSpec> compile_model(const Model& source, const CompileOptions& options,
                                          CompileReport* report = nullptr);

}  // namespace ferry
