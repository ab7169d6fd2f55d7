// The node profiler behind `ferry profile`: an executor observer that adds up each node's time
// (calls, total, mean), remembers shapes, and keeps one trace event per node run for a Chrome
// trace (Trace Event Format: Perfetto and chrome://tracing open it).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "runtime/executor.h"

namespace ferry::cli {

struct NodeProfile {
  const Node* node = nullptr;
  int64_t calls = 0;
  double total_ms = 0;
  double cpu_ms = 0;  // process CPU time (all threads) from the previous node's end to this one's
  std::vector<std::string> input_shapes;   // "f32[1,3,224,224]"; "" for an omitted input
  std::vector<std::string> output_shapes;
};

struct OpTypeProfile {
  std::string op_type;
  int64_t nodes = 0;
  int64_t calls = 0;
  double total_ms = 0;
  double cpu_ms = 0;
};

class Profiler {
 public:
  /// Profiles `graph`'s nodes (the executor's main graph); `feeds` give the inputs' shapes.
  Profiler(const Graph& graph, const NamedTensors& feeds);
  /// The observer to install (Executor::set_observer(observer(), false): it keeps no tensors).
  NodeObserver observer();
  /// Marks the start / end of one timed inference (trace events and the run total).
  void begin_run();
  void end_run();
  /// Stops collecting (warm-up runs are not counted: call reset() after them).
  void reset();

  /// Nodes that ran, sorted by total time (largest first).
  std::vector<NodeProfile> by_node() const;
  /// Op types, sorted by total time.
  std::vector<OpTypeProfile> by_op_type() const;
  /// Sum of the timed inferences' wall times (ms) and their count.
  double run_total_ms() const { return run_total_ms_; }
  /// Sum of the timed inferences' process CPU times (ms, all threads): well below run_total_ms()
  /// x threads, the runs waited for a core (machine load) and the wall times are inflated.
  double run_cpu_ms() const { return run_cpu_ms_; }
  int64_t runs() const { return runs_; }
  /// The profiler's own time inside the timed runs (ms, wall): its observer's bookkeeping after
  /// every node (a process CPU clock read alone costs 2-3 us), which a run without the profiler
  /// does not spend. run_total_ms() includes it; the tables show it on its own line.
  double own_ms() const { return own_ms_; }

  /// Writes the Chrome trace (JSON object format, "X" events, microseconds).
  Status write_trace(const std::string& path, const std::string& title) const;

 private:
  struct Event {
    int32_t node;
    double start_us;
    double dur_us;
  };
  using Clock = std::chrono::steady_clock;
  double now_us() const;
  void on_node(const Node& node, const std::vector<Value>& outputs, double ms);

  const Graph& graph_;
  std::vector<NodeProfile> nodes_;
  std::unordered_map<std::string, std::string> shapes_;  // value -> "f32[1,64]" (inputs, weights, outputs seen)
  std::vector<Event> events_;
  std::vector<Event> runs_events_;  // node = run index
  Clock::time_point origin_;
  double run_start_us_ = 0;
  double run_total_ms_ = 0;
  double run_cpu_start_ = 0, cpu_mark_ = 0, run_cpu_ms_ = 0;
  double own_ms_ = 0;
  int64_t runs_ = 0;
};

}  // namespace ferry::cli
