// The graph optimization pipeline run when a model is loaded for execution (and by
// `ferry compile`): an ordered list of passes, each gated by an optimization level and, for the
// passes that pay off only on some devices, by the device trait it needs (GraphPass::needs,
// answered by Backend::graph_traits: no pass names a device).
//
//   level 0: none (the graph runs as exported; the reference backend's default)
//   level 1: clean-ups that keep every node's arithmetic (constant folding, dead nodes,
//            identities, shape-subgraph folding, transpose elimination)
//   level 2: fusions that change how values are computed (Conv+BatchNorm folding,
//            Conv/Gemm/MatMul+bias+activation(+residual), LayerNorm, GELU, attention)
//
// Passes are listed once in src/passes/passes.inc; each lives in its own file and is tested alone.
// A pass keeps the graph valid: every value it creates has an entry in value_types, and a node
// that replaces original nodes lists them in Node::origin (the precision tools map fused nodes
// back to the ONNX nodes they cover).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

struct OptimizeOptions {
  int opt_level = 2;
  /// What the device the graph is optimized for has kernels to profit from (Backend::graph_traits,
  /// or device_graph_traits of a --device name): a pass whose GraphPass::needs is not listed is
  /// skipped. Fused ops exist for every backend through the reference kernels, so this is a
  /// performance choice, not a correctness one. Empty: the portable passes only; unset (no device
  /// named: unit tests, the fuzzer): every pass.
  std::optional<std::vector<std::string>> device_traits;
  /// Whether the device runs a node (set by the executor from Backend::supports; empty: every
  /// node runs). The decompose pass rewrites the nodes it rejects into ops it accepts.
  std::function<bool(const Model& model, const Node& node)> device_supports;
  /// Names of passes to skip (`--disable-pass`).
  std::vector<std::string> disabled;
};

struct PassContext {
  const OptimizeOptions& options;
  /// Number of rewrites the pass made (reported by `ferry info --optimized` / profile).
  int changes = 0;
};

struct GraphPass {
  const char* name;
  /// Lowest --opt-level at which the pass runs.
  int level;
  const char* summary;
  /// Rewrites model->graph (main graph; passes may recurse into subgraphs themselves).
  Status (*run)(Model* model, PassContext& ctx);
  /// The device trait the pass applies to (as ONNX Runtime's transformers take their compatible
  /// execution providers): it runs only when OptimizeOptions::device_traits lists it. nullptr:
  /// every device. A pass names no device; the backends say which traits they have.
  const char* needs = nullptr;
};

struct PassRecord {
  std::string name;
  int changes = 0;
  double ms = 0;
};

struct OptimizeReport {
  std::vector<PassRecord> passes;
  int64_t nodes_before = 0;
  int64_t nodes_after = 0;
};

/// Every pass, in the order the pipeline runs them.
const std::vector<GraphPass>& graph_passes();

/// Whether `pass` applies to a device with `options.device_traits` (GraphPass::needs).
bool pass_applies(const GraphPass& pass, const OptimizeOptions& options);

/// Runs the passes enabled at options.opt_level and applying to the device (pass_applies), then
/// re-runs shape inference so value_types stay complete. Errors name the pass.
Status optimize_model(Model* model, const OptimizeOptions& options, OptimizeReport* report = nullptr);

}  // namespace ferry
