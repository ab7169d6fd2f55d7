// The executor: runs a model's graph node by node on one backend, in topological order.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/shared_forms.h"
#include "common/status.h"
#include "ir/graph.h"
#include "ir/value.h"
#include "passes/pipeline.h"
#include "runtime/arena.h"
#include "runtime/batch_split.h"
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
  /// Main-graph tensors come from one arena laid out once per set of input shapes (see
  /// runtime/arena.h); false: every tensor is its own heap allocation (for debugging).
  bool plan_memory = true;
  /// The arena is marked for transparent huge pages when it spans several (fewer TLB misses in
  /// memory-bound layers). Huge pages come from memory the process never touched, which costs
  /// about a second per 1.5 GB on first use on a VM; `ferry train` turns them off (its arena is
  /// bound once, on the second step). $FERRY_ARENA_HUGEPAGES=0 turns them off everywhere.
  bool arena_huge_pages = true;
  /// A batch whose activations would overflow the last-level cache runs as several smaller
  /// parts when the graph keeps batch rows apart (runtime/batch_split.h), on CPU backends except
  /// the reference one. Rows per part: -1 sized by the cache, 0 never split, N > 0 at most N.
  /// $FERRY_BATCH_SPLIT (same values) overrides it.
  int64_t batch_split_rows = -1;
  /// A split batch runs only the graph's front as parts when one value alone crosses a place in
  /// the node order after which every tensor, at the whole batch, fits `split_front_bytes`
  /// (runtime/batch_split.h, BatchSplitCut): the rest runs once on the whole batch (its weights
  /// read once, its GEMMs on every row). -1: a third of the last-level cache; 0: off (the whole
  /// graph runs as parts). $FERRY_SPLIT_FRONT (same values) overrides it.
  int64_t split_front_bytes = -1;
  /// Each weight held once: a constant only kernels read is dropped from the executor's graph as
  /// soon as the kernels that read it keep their own (packed) form of it
  /// (Kernel::release_constant_input), as ONNX Runtime frees an initializer once prepacked. Only
  /// where the executor optimizes the model itself (its own copy of the graph: the caller's model
  /// is never changed; model().graph then lacks those initializers). The originals are freed when
  /// the caller holds no other reference to the model it passes (`ferry run`).
  bool release_weights = false;
  /// Where the kernels take their own forms of constant weights (packed layouts, Winograd's
  /// transformed weights, panels) from, shared with every executor given the same object over the
  /// same model (compiler/Session's pool: one form of each weight whichever executor or batch size
  /// made it). Null: each kernel makes and holds its own.
  std::shared_ptr<SharedWeightForms> shared_forms;
};

/// The memory plan of the last input shapes run (see Executor::memory_stats).
struct MemoryStats {
  bool planned = false;         // false until a run has recorded a plan
  int64_t arena_bytes = 0;      // what the arena takes
  int64_t tensor_bytes = 0;     // the planned tensors' sizes summed: what separate allocations take
  int64_t tensors = 0;          // planned tensors
  int64_t in_place = 0;         // of which written over a dead input
  int64_t unplanned_bytes = 0;  // graph outputs (and tensors kept past the run): heap
  int64_t unplanned = 0;
};

/// The resident bytes by kind (Executor::resident_bytes; `ferry bench` prints them).
struct ResidentBytes {
  int64_t weights = 0;         // the constants (initializers) the executor's graphs still hold
  int64_t packed_weights = 0;  // the kernels' own (packed) forms of them (PackedWeightsHolder)
  int64_t arena = 0;           // the arenas bound by the runs' memory plans (idle runs only)
  int64_t process = 0;         // the whole process's resident set now (/proc/self/statm; 0: unreadable)
  int64_t other = 0;           // process less the three above, at least 0: code, libraries, heap,
                               // graph outputs, other executors
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

  /// Whether the graph keeps batch rows apart (see ExecutorOptions::batch_split_rows).
  const BatchSplitInfo& batch_split() const { return split_info_; }
  /// Rows per part of the last run that split its batch (0: the last run was whole).
  int64_t last_split_rows() const { return last_split_rows_.load(); }
  /// The node after which the last split run went on with the whole batch (-1: its parts ran the
  /// whole graph, or it did not split).
  int64_t last_split_cut() const { return last_split_cut_.load(); }

  /// Checks feeds without running; the error names the input, the expected and the given type.
  Status check_feeds(const NamedValues& feeds) const;

  /// `keeps_outputs`: whether the observer keeps the output tensors it is shown beyond the call.
  /// Then the arena is not used while it is set (its memory is reused by later nodes); an
  /// observer that only looks (the profiler) passes false and the run stays on the fast path.
  void set_observer(NodeObserver observer, bool keeps_outputs = true) {
    observer_ = std::move(observer);
    tell_host_values();
    observer_keeps_outputs_ = keeps_outputs;
  }
  /// Arena size against the sum of the planned tensors' sizes, for the last input shapes run.
  MemoryStats memory_stats() const;
  /// What this executor holds resident by kind, and the process's resident set beside it. Weights
  /// count each buffer once (a kernel's reference to a graph constant is not a copy); a weight
  /// released to its kernels (ExecutorOptions::release_weights) counts only as packed. Call it
  /// between runs: the arena of a run in progress is not counted.
  ResidentBytes resident_bytes() const;
  /// Frees the arenas that idle runs keep for the next one (which binds a new arena from the stored
  /// memory plan, as the run after a recording one does): for a caller about to hold memory
  /// elsewhere for a while (`ferry train`'s evaluation between epochs). Runs in progress keep theirs.
  void release_idle_arenas();
  /// The model that runs: the optimized copy when passes ran, else the one given.
  const Model& model() const { return *model_; }
  /// What the optimizer did (empty at opt level 0).
  const OptimizeReport& optimize_report() const { return optimize_report_; }
  const Backend& backend() const { return *backend_; }
  /// Which backend runs each main-graph node, the partitions and the crossings (one partition
  /// and no crossings when the device is a CPU backend).
  const PartitionPlan& partitions() const { return plan_; }
  /// The copies the last run made across the device<->host boundary (counted from its tensors).
  CrossingStats last_transfers() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return last_transfers_;
  }

 private:
  struct PreparedNode;
  struct PreparedGraph;
  struct Frame;
  struct RunState;
  struct RunMemory;
  static constexpr size_t kMaxPlans = 8;
  Executor() = default;
  /// `backend`: the backend for every node of g (subgraphs); nullptr: per node from plan_ (main graph).
  Status prepare_graph(const Graph& g, Backend* backend);
  /// One run of the main graph on `feeds` as given (run_values may split a batch into several).
  Status run_whole(const NamedValues& feeds, NamedValues* outputs);
  /// Which nodes one run_phase call runs: the whole graph, a split's front (graph inputs in, the
  /// cut's value out) or its back (the cut's value in, the graph outputs out).
  struct Phase {
    int tag = 0;  // 0 whole, 1 front, 2 back: keys the memory plans apart
    size_t begin = 0, end = 0;
    const BatchSplitCut* cut = nullptr;
  };
  /// Runs `phase` on `feeds` (checked by the caller); a front's output is its cut value, made in
  /// `cut_rows` (its part's rows of the whole-batch tensor) when the producer's shapes agree.
  Status run_phase(const NamedValues& feeds, const Phase& phase, NamedValues* outputs, const Tensor* cut_rows = nullptr);
  /// A split of the front only (see ExecutorOptions::split_front_bytes).
  Status run_split_front(const NamedValues& feeds, int64_t sub, const BatchSplitCut& cut, NamedValues* outputs);
  /// Rows of the batch per run when run_values splits `feeds` (0: it runs them whole).
  int64_t sub_batch(const NamedValues& feeds) const;
  /// Runs g's nodes [begin, end) (end 0: all); `memory` is non-null for the main graph only.
  Status run_graph(const Graph& g, const PreparedGraph& pg, Frame& frame, RunMemory* memory, size_t begin = 0,
                   size_t end = 0);
  Status run_body(const Graph& body, const Frame& outer, const std::vector<Value>& inputs, std::vector<Value>* outputs);
  static void copy_out_of_arena(const ArenaAllocator& arena, Value* v);
  std::shared_ptr<const ArenaPlan> find_plan(const std::vector<int64_t>& shapes_key);
  /// nullptr: forget the plan for these shapes.
  void store_plan(const std::vector<int64_t>& shapes_key, std::shared_ptr<const ArenaPlan> plan);
  std::unique_ptr<RunState> acquire_state();
  void release_state(std::unique_ptr<RunState> state);
  /// Adds the node's outputs that cross the device<->host boundary to *stats (the run's own).
  void count_crossings(const Node& node, const std::vector<Value>& outputs, CrossingStats* stats) const;
  /// Tells a device backend which of its main-graph values the host needs (Backend::set_host_values):
  /// the crossings to the host, or every value it produces while an observer looks.
  void tell_host_values();

  std::shared_ptr<const Model> model_;
  std::shared_ptr<Model> own_model_;  // model_ when the executor optimized a copy and may release weights
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Backend> host_;  // the fallback for nodes the device does not take (null on CPU devices)
  PartitionPlan plan_;
  std::unordered_map<std::string, int64_t> crossing_count_;  // value -> copies per inference
  mutable std::mutex stats_mu_;
  CrossingStats last_transfers_;  // guarded by stats_mu_
  std::unordered_map<const Graph*, std::unique_ptr<PreparedGraph>> graphs_;
  NodeObserver observer_;
  bool observer_keeps_outputs_ = true;
  OptimizeReport optimize_report_;
  bool plan_memory_ = true;
  bool arena_huge_pages_ = true;
  bool split_enabled_ = false;
  int64_t split_rows_option_ = -1;
  BatchSplitInfo split_info_;
  std::atomic<int64_t> last_split_rows_{0};
  int64_t split_front_bytes_ = -1;
  std::vector<BatchSplitCut> split_cuts_;
  std::atomic<int64_t> last_split_cut_{-1};
  std::mutex cut_mu_;
  std::vector<Tensor> cut_spares_;  // whole-batch cut values of finished runs, for the next ones
  mutable std::mutex plans_mu_;
  std::map<std::vector<int64_t>, std::shared_ptr<const ArenaPlan>> plans_;  // input shapes -> plan
  std::shared_ptr<const ArenaPlan> last_plan_;
  mutable std::mutex states_mu_;
  std::vector<std::unique_ptr<RunState>> idle_states_;
};

}  // namespace ferry
