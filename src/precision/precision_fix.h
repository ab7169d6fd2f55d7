// Automatic mixed-precision repair (`ferry compare --fix`): the search for a small set of nodes
// to keep in fp32 so that the target passes. The search is independent of how a probe runs
// (tests drive it with a fake), see search_fp32_set; fix_precision wires it to a Comparator.
//
//   1. greedy: keep the first diverging node in fp32 and re-check, while that names a new node
//   2. bisection: the shortest prefix of the candidates (topological order) that, kept in fp32
//      together with step 1's nodes, passes
//   3. pruning: drop each kept node whose removal still passes (within the probe budget)
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "precision/compare.h"

namespace ferry {

/// What one probe learned: whether the target passes with the given nodes in fp32, and if not,
/// the first diverging node (empty when unknown).
struct FixProbe {
  bool passes = false;
  std::string first_diverging;
};
/// `locate`: also find the first diverging node when the probe fails (costs a per-layer run).
using FixEvaluator = std::function<StatusOr<FixProbe>(const std::vector<std::string>& keep_fp32, bool locate)>;

struct FixSearchOptions {
  int max_probes = 48;
  int max_greedy_rounds = 8;
};

struct FixSearchResult {
  bool found = false;
  std::vector<std::string> keep_fp32;  // candidate names, in candidate order
  int probes = 0;
  std::vector<std::string> log;        // one line per step, for the report
};

/// Searches over `candidates` (node names in topological order).
StatusOr<FixSearchResult> search_fp32_set(const std::vector<std::string>& candidates, const FixEvaluator& evaluate,
                                          const FixSearchOptions& options = {});

struct FixResult {
  FixSearchResult search;
  /// The names written to the config: for each kept node its ONNX origin names (or its own name).
  std::vector<std::string> config_names;
  /// The verification: a full compare of the target with the config applied.
  CompareResult verified;
  double target_ms_before = 0.0;
  double target_ms_after = 0.0;
};

/// Runs the search on `comparator` (whose run() has cached the reference outputs), writes the
/// config to `config_path`, reloads it and verifies with a full compare.
StatusOr<FixResult> fix_precision(Comparator* comparator, const SampleSource& samples, const std::string& config_path,
                                  const FixSearchOptions& options = {});

}  // namespace ferry
