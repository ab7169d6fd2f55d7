// `ferry check`: will this model run on a target? A target is a ferry backend ("cpu", "cpu-ref",
// "cuda": answered by Backend::supports, the kernel registry) or an external profile
// ("tensorrt-10.1", "ascend-atc-2025", "ascend-atc-2022", "openvino": target_profile.h). Every
// node is classified: runs, runs via a decomposition, falls back to the CPU (ferry devices), or
// fails — with the reason and a concrete fix.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"
#include "runtime/partition.h"

namespace ferry {

enum class NodeVerdict { kRuns, kDecomposed, kFallback, kFails };
const char* node_verdict_name(NodeVerdict v);  // "runs", "decomposed", "fallback", "fails"

struct NodeFinding {
  std::string node;      // node name ("Loop_3/Add_1" for a node of a subgraph)
  std::string op;        // "Resize" or "com.microsoft::Attention"
  int64_t opset = 0;
  NodeVerdict verdict = NodeVerdict::kRuns;
  std::string reason;    // why it does not run as is
  std::string fix;       // what to do (empty when none is known)
  std::string target_says;  // the profile's restriction text for the op, verbatim
};

struct TargetCheck {
  std::string target;
  std::string kind;         // "ferry backend" or "external profile"
  std::string title;
  int64_t nodes = 0;
  int64_t runs = 0, decomposed = 0, fallback = 0, fails = 0;
  /// Nodes that do not simply run (verdict != kRuns), in graph order.
  std::vector<NodeFinding> findings;
  /// Target-level remarks (assumptions, unavailability).
  std::vector<std::string> notes;
  /// For ferry device backends: the partitions when the model runs with CPU fallback.
  std::optional<PartitionPlan> plan;
  /// Set when a ferry device is not usable here (no GPU): the check cannot answer per node then,
  /// and the target does not pass.
  std::string unavailable;
  bool passed() const { return fails == 0 && unavailable.empty(); }
  /// "pass", "FAIL", or "unknown" (device unavailable).
  const char* verdict() const { return !unavailable.empty() ? "unknown" : fails == 0 ? "pass" : "FAIL"; }
};

struct CheckOptions {
  /// Nodes a ferry device does not run are failures instead of CPU fallback.
  bool no_fallback = false;
};

/// Checks `model` against one target; errors only for an unknown target (listing the known ones).
StatusOr<TargetCheck> check_model(const Model& model, const std::string& target, const CheckOptions& options = {});

/// Every target name `check` knows: ferry backends compiled in, then the external profiles.
std::vector<std::string> check_targets();

}  // namespace ferry
