// The executor's private structures (runtime/ only): a graph prepared for running (value names
// resolved to slots once, kernels made) and one run's state, shared by executor.cpp (create,
// prepare, feeds, plans, run states, resident bytes) and executor_run.cpp (the run paths: whole,
// batch split, subgraphs).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/executor.h"

namespace ferry {

/// Where a node reads a value: a slot of the graph `depth` levels up (0: its own graph, 1: the
/// graph holding the If/Loop/Scan that runs it, ...), or one of that graph's constants.
struct ValueRef {
  int32_t depth = 0;
  int32_t index = -1;  // -1: an omitted optional input
  bool constant = false;
};

struct Executor::PreparedNode {
  const OpSchema* schema = nullptr;
  int64_t opset = 0;
  std::unique_ptr<Kernel> kernel;
  std::vector<ValueRef> inputs;
  std::vector<int32_t> outputs;  // local slots; -1: an omitted output
  std::vector<int32_t> frees;    // local slots whose last reader this node is (released after it)
  bool has_subgraphs = false;
};

/// A graph ready to run: every value name resolved to a slot index once, at prepare time.
struct Executor::PreparedGraph {
  const PreparedGraph* parent = nullptr;
  std::unordered_map<std::string, int32_t> slot_of;
  std::unordered_map<std::string, int32_t> constant_of;
  std::vector<Value> constants;  // the initializers
  std::unordered_set<int32_t> released;  // constants dropped: their readers hold their own form
  int32_t num_slots = 0;
  std::vector<int32_t> input_slots;  // per graph input
  std::vector<ValueRef> outputs;     // per graph output
  std::vector<PreparedNode> nodes;

  int32_t add_slot(const std::string& name) {
    auto [it, fresh] = slot_of.emplace(name, num_slots);
    if (fresh) ++num_slots;
    return it->second;
  }
  /// Looks a name up here, then in the enclosing graphs.
  bool resolve(const std::string& name, ValueRef* ref) const {
    int32_t depth = 0;
    for (const PreparedGraph* p = this; p; p = p->parent, ++depth) {
      auto s = p->slot_of.find(name);
      if (s != p->slot_of.end()) {
        *ref = ValueRef{depth, s->second, false};
        return true;
      }
      auto c = p->constant_of.find(name);
      if (c != p->constant_of.end()) {
        *ref = ValueRef{depth, c->second, true};
        return true;
      }
    }
    return false;
  }
};

/// The values of one running graph; subgraph frames point at the frame that runs them.
struct Executor::Frame {
  const PreparedGraph* graph = nullptr;
  std::vector<Value>* slots = nullptr;
  const Frame* parent = nullptr;
  const Value* get(const ValueRef& r) const {
    const Frame* f = this;
    for (int32_t d = 0; d < r.depth && f; ++d) f = f->parent;
    if (!f) return nullptr;
    return r.constant ? &f->graph->constants[static_cast<size_t>(r.index)] : &(*f->slots)[static_cast<size_t>(r.index)];
  }
};

/// Per-run memory: the slots of the main graph and its arena. Pooled, one per concurrent run.
struct Executor::RunState {
  std::vector<Value> slots;
  ArenaAllocator arena;
};

/// How the main graph's outputs are allocated in this run.
struct Executor::RunMemory {
  AllocationRecorder* recorder = nullptr;  // first run with these input shapes: record
  ArenaAllocator* arena = nullptr;         // a plan exists: serve from the arena
  bool violated = false;                   // a planned tensor outlived its step: heap from then on
  CrossingStats transfers;                 // this run's device<->host copies (published at the end)
  int32_t rows_step = -1;                  // a split's front: node rows_step writes its output
  int32_t rows_output = -1;                // rows_output into rows_dest (its part's rows of the
  Tensor rows_dest;                        // whole-batch cut value) when the shapes agree
};

}  // namespace ferry
