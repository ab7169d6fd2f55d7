// `ferry compile --tune`: times the candidate kernel implementations of each node on this
// machine and pins the fastest (the AOE idea). Candidates: the reference kernel and the device's
// kernels that accept the node (Backend::kernel_choices; on "cpu", every optimized kernel factory
// that accepts it); the intra-op thread count is tuned for the whole model first. Choices are
// pinned on the node as the kKernelChoiceAttr attribute (which the backend honours) and kept in a
// JSON tuning cache keyed by device, ISA, op, input types and attributes, so later compiles of the
// same layers skip the timing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "compiler/compile.h"
#include "format/compiled_model.h"
#include "ir/graph.h"

namespace ferry {

struct TuneOptions {
  std::string device = "cpu";
  /// Intra-op threads; 0: time 1, 2, 4, ... up to the machine's cores on the whole model.
  int threads = 0;
  /// JSON cache read before and written after tuning ("" = none).
  std::string cache_path;
  ProgressFn progress;
  /// Names the plan in progress lines ("batch 4").
  std::string label;
};

struct TuneResult {
  std::vector<TuningChoice> choices;  // one per node with several candidates
  int threads = 0;                    // the thread count chosen (or given)
  int64_t timed = 0;                  // nodes timed on this machine
  int64_t cache_hits = 0;             // nodes decided by the cache
  int64_t changed = 0;                // nodes whose choice differs from the backend's default
};

/// Tunes `model` (already optimized, shapes fixed) in place. Nodes whose input shapes are not
/// static, or that hold subgraphs, keep the default choice.
Status tune_model(Model* model, const TuneOptions& options, TuneResult* result);

/// The default tuning cache: $FERRY_TUNING_CACHE, else $XDG_CACHE_HOME/ferry/tuning.json,
/// else ~/.cache/ferry/tuning.json ("" when none can be named).
std::string default_tuning_cache_path();

}  // namespace ferry
