// The executor: runs a model's graph node by node on one backend, in topological order.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "common/status.h"
#include "ir/graph.h"
#include "ir/value.h"
#include "passes/pipeline.h"

namespace ferry {

struct ExecutorOptions {
  std::string device = "cpu";
  /// Graph optimization level (see passes/pipeline.h); -1: the device's default
  /// (0 for cpu-ref, the oracle that runs the model as exported; 2 elsewhere).
  int opt_level = -1;
  /// Intra-op threads; 0: the machine's cores.
  int threads = 0;
};

/// Called after each node of the main graph runs (profiler, layer-by-layer compare).
using NodeObserver = std::function<void(const Node& node, const std::vector<Value>& outputs, double elapsed_ms)>;

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using NamedValues = std::vector<std::pair<std::string, Value>>;

class Executor {
 public:
  /// Prepares kernels for every node; fails naming the first node the device cannot run.
  static StatusOr<std::unique_ptr<Executor>> create(std::shared_ptr<const Model> model, const ExecutorOptions& options = {});
  ~Executor();

  /// Checks `feeds` against the model's inputs (names, dtypes, shapes) and runs the graph.
  /// Outputs come back in the model's output order.
  Status run(const NamedTensors& feeds, NamedTensors* outputs);
  /// The same for models whose inputs or outputs are sequences or optionals.
  Status run_values(const NamedValues& feeds, NamedValues* outputs);

  /// Checks feeds without running; the error names the input, the expected and the given type.
  Status check_feeds(const NamedValues& feeds) const;

  void set_observer(NodeObserver observer) { observer_ = std::move(observer); }
  /// The model that runs: the optimized copy when passes ran, else the one given.
  const Model& model() const { return *model_; }
  /// What the optimizer did (empty at opt level 0).
  const OptimizeReport& optimize_report() const { return optimize_report_; }
  const Backend& backend() const { return *backend_; }

 private:
  struct Scope;
  struct PreparedGraph;
  Executor() = default;
  Status prepare_graph(const Graph& g);
  Status run_graph(const Graph& g, Scope& scope, bool observe);

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  std::unordered_map<const Graph*, std::unique_ptr<PreparedGraph>> graphs_;
  NodeObserver observer_;
  OptimizeReport optimize_report_;
};

}  // namespace ferry
