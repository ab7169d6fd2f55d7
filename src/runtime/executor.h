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
#include "runtime/partition.h"

namespace ferry {

struct ExecutorOptions {
  std::string device = "cpu";
  /// Graph optimization level (see passes/pipeline.h); -1: the device's default
  /// (0 for cpu-ref, the oracle that runs the model as exported; 2 elsewhere).
  int opt_level = -1;
  /// Intra-op threads; 0: the machine's cores.
  int threads = 0;
  /// Nodes the device does not support run on the CPU ("cpu"); false: such a node is an error
  /// (`--no-fallback`). Irrelevant when the device is a CPU backend.
  bool allow_fallback = true;
};

/// Device<->host copies of one inference (see runtime/partition.h).
struct CrossingStats {
  int64_t boundaries = 0;  // values copied
  int64_t bytes = 0;       // bytes copied
};

/// Called after each node of the main graph runs (profiler, layer-by-layer compare).
using NodeObserver = std::function<void(const Node& node, const std::vector<Value>& outputs, double elapsed_ms)>;

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using NamedValues = std::vector<std::pair<std::string, Value>>;

class Executor {
 public:
  /// Prepares kernels for every node; fails naming the first node the device cannot run.
  static StatusOr<std::unique_ptr<Executor>> create(std::shared_ptr<const Model> model, const ExecutorOptions& options = {});
  /// The same on a given backend instance (tests, embedders); options.device is ignored.
  static StatusOr<std::unique_ptr<Executor>> create(std::shared_ptr<const Model> model, std::unique_ptr<Backend> device,
                                                    const ExecutorOptions& options = {});
  ~Executor();

  /// Checks `feeds` against the model's inputs (names, dtypes, shapes) and runs the graph.
  /// Outputs come back in the model's output order.
  Status run(const NamedTensors& feeds, NamedTensors* outputs);
  /// The same for models whose inputs or outputs are sequences or optionals.
  Status run_values(const NamedValues& feeds, NamedValues* outputs);

  /// Checks feeds without running; the error names the input, the expected and the given type.
  Status check_feeds(const NamedValues& feeds) const;

  void set_observer(NodeObserver observer) {
    observer_ = std::move(observer);
    tell_host_values();
  }
  /// The model that runs: the optimized copy when passes ran, else the one given.
  const Model& model() const { return *model_; }
  /// What the optimizer did (empty at opt level 0).
  const OptimizeReport& optimize_report() const { return optimize_report_; }
  const Backend& backend() const { return *backend_; }
  /// Which backend runs each main-graph node, the partitions and the crossings (one partition
  /// and no crossings when the device is a CPU backend).
  const PartitionPlan& partitions() const { return plan_; }
  /// The copies the last run made across the device<->host boundary (counted from its tensors).
  CrossingStats last_transfers() const { return last_transfers_; }

 private:
  struct Scope;
  struct PreparedGraph;
  Executor() = default;
  /// `backend`: the backend for every node of g (subgraphs); nullptr: per node from plan_ (main graph).
  Status prepare_graph(const Graph& g, Backend* backend);
  Status run_graph(const Graph& g, Scope& scope, bool observe);
  /// Adds the node's outputs that cross the device<->host boundary to last_transfers_.
  void count_crossings(const Node& node, const std::vector<Value>& outputs);
  /// Tells a device backend which of its main-graph values the host needs (Backend::set_host_values):
  /// the crossings to the host, or every value it produces while an observer looks.
  void tell_host_values();

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Backend> host_;  // the fallback for nodes the device does not take (null on CPU devices)
  PartitionPlan plan_;
  std::unordered_map<std::string, int64_t> crossing_count_;  // value -> copies per inference
  CrossingStats last_transfers_;
  std::unordered_map<const Graph*, std::unique_ptr<PreparedGraph>> graphs_;
  NodeObserver observer_;
  OptimizeReport optimize_report_;
};

}  // namespace ferry
