#include "runtime/executor.h"
#include "backends/packed_weights.h"

#include "common/env_switch.h"
#include "runtime/batch_split_parts.h"
#include "runtime/page_blocks.h"
#include "runtime/run_control.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_set>
#if defined(__GLIBC__)
#include <malloc.h>
#include <unistd.h>
#endif

namespace ferry {

namespace {
thread_local const std::atomic<bool>* t_run_terminate = nullptr;
}  // namespace

const std::atomic<bool>* run_terminate_flag() { return t_run_terminate; }
ScopedRunTerminate::ScopedRunTerminate(const std::atomic<bool>* flag) : saved_(t_run_terminate) { t_run_terminate = flag; }
ScopedRunTerminate::~ScopedRunTerminate() { t_run_terminate = saved_; }

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

namespace {
/// Serves one output from given memory (a part's rows of a whole-batch tensor), the rest from
/// `inner` (the arena, the recorder, or the heap when null).
class RowsAllocator : public OutputAllocator {
 public:
  RowsAllocator(OutputAllocator* inner, int64_t output, Tensor* dest) : inner_(inner), output_(output), dest_(dest) {}
  bool allocate(int64_t index, DType dtype, std::vector<int64_t>* dims, bool zero_fill, Tensor* out) override {
    if (index == output_ && !served_ && dtype == dest_->dtype() && *dims == dest_->dims()) {
      served_ = true;
      if (zero_fill) std::memset(dest_->mutable_raw(), 0, static_cast<size_t>(dest_->nbytes()));
      *out = *dest_;
      return true;
    }
    return inner_ && inner_->allocate(index, dtype, dims, zero_fill, out);
  }
  bool allocate_over(int64_t index, int64_t input, DType dtype, std::vector<int64_t>* dims, Tensor* out) override {
    if (index == output_) return allocate(index, dtype, dims, false, out);  // never over an input: it is the whole's
    return inner_ && inner_->allocate_over(index, input, dtype, dims, out);
  }

 private:
  OutputAllocator* inner_;
  int64_t output_;
  Tensor* dest_;
  bool served_ = false;
};
}  // namespace

Executor::~Executor() = default;

StatusOr<std::unique_ptr<Executor>> Executor::create(std::shared_ptr<const Model> model, const ExecutorOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> device, make_backend(options.device));
  return create(std::move(model), std::move(device), options);
}

StatusOr<std::unique_ptr<Executor>> Executor::create(std::shared_ptr<const Model> model, std::unique_ptr<Backend> device,
                                                     const ExecutorOptions& options) {
  std::unique_ptr<Executor> ex(new Executor());
  ex->backend_ = std::move(device);
  ex->backend_->set_num_threads(options.threads);
  if (!is_host_backend(*ex->backend_)) {
    ASSIGN_OR_RETURN(ex->host_, make_backend("cpu"));
    ex->host_->set_num_threads(options.threads);
  }
  const int level = options.opt_level >= 0 ? options.opt_level : (ex->backend_->name() == "cpu-ref" ? 0 : 2);
  if (level > 0 && !model->metadata.count(kOptimizedMetadataKey)) {  // compiled models are optimized
    std::shared_ptr<Model> optimized = model->clone();
    OptimizeOptions oo;
    oo.opt_level = level;
    oo.device_traits = ex->backend_->graph_traits();
    const Backend* dev = ex->backend_.get();
    oo.device_supports = [dev](const Model& m, const Node& n) { return backend_takes(m, *dev, n, nullptr); };
    RETURN_IF_ERROR(optimize_model(optimized.get(), oo, &ex->optimize_report_));
    if (options.release_weights && is_host_backend(*ex->backend_)) ex->own_model_ = optimized;
    model = std::move(optimized);  // the caller's model (and the weights only it held) freed here when not shared
  }
  ex->model_ = std::move(model);
  ex->plan_memory_ = options.plan_memory && is_host_backend(*ex->backend_);
  ex->arena_huge_pages_ = options.arena_huge_pages;
  ex->split_rows_option_ = options.batch_split_rows;
  if (const char* e = env_value("FERRY_BATCH_SPLIT"); e && *e) ex->split_rows_option_ = std::atoll(e);
  ex->split_enabled_ = ex->split_rows_option_ != 0 && is_host_backend(*ex->backend_) && ex->backend_->name() != "cpu-ref";
  if (ex->split_enabled_) ex->split_info_ = analyze_batch_split(ex->model_->graph);
  ex->split_front_bytes_ = options.split_front_bytes;
  if (const char* e = env_value("FERRY_SPLIT_FRONT"); e && *e) ex->split_front_bytes_ = std::atoll(e);
  if (ex->split_front_bytes_ != 0) ex->split_cuts_ = batch_split_cuts(ex->model_->graph, ex->split_info_);
  ASSIGN_OR_RETURN(ex->plan_, plan_partitions(*ex->model_, *ex->backend_, ex->host_.get(), options.allow_fallback));
  for (const Crossing& c : ex->plan_.crossings) ++ex->crossing_count_[c.value];
  RETURN_IF_ERROR(ex->prepare_graph(ex->model_->graph, nullptr));
  ex->tell_host_values();
  return ex;
}

namespace {
// Released weights were heap allocations below glibc's mmap threshold (`ferry run` sets 32 MiB) with
// the trim threshold high: their pages stay resident until trimmed. Trimmed every `every` bytes
// released, so the packed forms made next reuse what the originals held and the peak holds one.
void give_back_freed(int64_t* released, int64_t every) {
  if (*released < every) return;
  *released = 0;
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}
}  // namespace

Status Executor::prepare_graph(const Graph& g, Backend* backend) {
  auto owned = std::make_unique<PreparedGraph>();
  PreparedGraph* pg = owned.get();
  if (g.parent) {
    auto p = graphs_.find(g.parent);
    if (p != graphs_.end()) pg->parent = p->second.get();
  }
  graphs_[&g] = std::move(owned);  // registered first: the bodies prepared below resolve names through it
  for (const ValueInfo& v : g.inputs) pg->input_slots.push_back(pg->add_slot(v.name));
  for (const auto& [name, t] : g.initializers) {
    if (pg->slot_of.count(name)) continue;  // an input with a default: the feed overrides it
    pg->constant_of[name] = static_cast<int32_t>(pg->constants.size());
    pg->constants.emplace_back(t);
  }
  for (const Node& node : g.nodes)
    for (const std::string& o : node.outputs)
      if (!o.empty()) pg->add_slot(o);
  const size_t n = g.nodes.size();
  // Weights each held once (ExecutorOptions::release_weights): per initializer of the main graph,
  // the nodes reading it; one read otherwise (a subgraph, a graph output) keeps it.
  struct ConstantUse {
    std::vector<std::pair<size_t, size_t>> reads;  // (node, input position)
    bool kept = false;
  };
  std::unordered_map<std::string, ConstantUse> constant_uses;
  if (own_model_ && &g == &own_model_->graph) {
    for (size_t i = 0; i < n; ++i) {
      const Node& node = g.nodes[i];
      for (size_t j = 0; j < node.inputs.size(); ++j)
        if (g.initializers.count(node.inputs[j])) constant_uses[node.inputs[j]].reads.emplace_back(i, j);
      for (const std::string& in : node.implicit_inputs)
        if (g.initializers.count(in)) constant_uses[in].kept = true;
      for (const auto& [k, a] : node.attrs)
        if (a.g != nullptr || !a.graphs.empty())
          for (const std::string& in : node.inputs) constant_uses[in].kept = true;
    }
    for (const ValueInfo& v : g.outputs)
      if (g.initializers.count(v.name)) constant_uses[v.name].kept = true;
    for (auto& [name, use] : constant_uses) use.kept = use.kept || pg->slot_of.count(name) != 0;  // a graph input's default
  }
  int64_t untrimmed = 0;  // bytes of weights released since the heap last gave pages back
  std::vector<int32_t> last_use(static_cast<size_t>(pg->num_slots), -1);
  pg->nodes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    PreparedNode& pn = pg->nodes[i];
    const int64_t opset = model_->opset(node.domain);
    ASSIGN_OR_RETURN(const OpSchema* schema, resolve_schema(node, opset));
    Backend* runs_on = backend ? backend : (plan_.node_side[i] == Side::kHost ? host_.get() : backend_.get());
    std::string why;
    if (!runs_on->supports(node, *schema, &why))
      return unsupported(node.describe() + ": not supported on " + runs_on->name() + ": " + why);
    ASSIGN_OR_RETURN(pn.kernel, runs_on->create_kernel(node, *schema, g));
    // The last reader of a weight made: when every reader keeps its own form, the graph's copy goes.
    for (const std::string& in : node.inputs) {
      auto u = constant_uses.find(in);
      if (u == constant_uses.end() || u->second.kept || u->second.reads.empty() || u->second.reads.back().first != i) continue;
      bool all = true;
      for (const auto& [reader, pos] : u->second.reads) {
        Kernel* k = reader == i ? pn.kernel.get() : pg->nodes[reader].kernel.get();
        all = all && k && k->release_constant_input(pos);
      }
      u->second.kept = true;  // decided once
      auto c = pg->constant_of.find(in);
      if (!all || c == pg->constant_of.end()) continue;
      untrimmed += pg->constants[static_cast<size_t>(c->second)].tensor.nbytes();
      pg->constants[static_cast<size_t>(c->second)] = Value();
      pg->released.insert(c->second);
      own_model_->graph.initializers.erase(in);
      give_back_freed(&untrimmed, int64_t{16} << 20);
    }
    pn.schema = schema;
    pn.opset = opset;
    for (const std::string& in : node.inputs) {
      ValueRef ref;
      if (!in.empty() && !pg->resolve(in, &ref))
        return invalid_model(node.describe() + ": input '" + in + "' is not produced by any node, graph input or initializer");
      if (!ref.constant && ref.depth == 0 && ref.index >= 0) last_use[static_cast<size_t>(ref.index)] = static_cast<int32_t>(i);
      pn.inputs.push_back(ref);
    }
    for (const std::string& in : node.implicit_inputs) {
      ValueRef ref;
      if (pg->resolve(in, &ref) && !ref.constant && ref.depth == 0) last_use[static_cast<size_t>(ref.index)] = static_cast<int32_t>(i);
    }
    for (const std::string& o : node.outputs) pn.outputs.push_back(o.empty() ? -1 : pg->slot_of.at(o));
    for (const auto& [k, a] : node.attrs) {
      pn.has_subgraphs |= a.g != nullptr || !a.graphs.empty();
      if (a.g) RETURN_IF_ERROR(prepare_graph(*a.g, runs_on));
      for (const auto& sg : a.graphs) RETURN_IF_ERROR(prepare_graph(*sg, runs_on));
    }
  }
  give_back_freed(&untrimmed, 1);
  std::vector<bool> keep(static_cast<size_t>(pg->num_slots), false);
  for (const ValueInfo& v : g.outputs) {
    ValueRef ref;
    if (!pg->resolve(v.name, &ref))
      return invalid_model("graph output '" + v.name + "' is not produced by any node, graph input or initializer");
    if (!ref.constant && ref.depth == 0) keep[static_cast<size_t>(ref.index)] = true;
    pg->outputs.push_back(ref);
  }
  for (size_t i = 0; i < n; ++i)  // outputs nobody reads are released by the node that makes them
    for (int32_t o : pg->nodes[i].outputs)
      if (o >= 0 && last_use[static_cast<size_t>(o)] < 0) last_use[static_cast<size_t>(o)] = static_cast<int32_t>(i);
  for (int32_t s = 0; s < pg->num_slots; ++s)
    if (!keep[static_cast<size_t>(s)] && last_use[static_cast<size_t>(s)] >= 0)
      pg->nodes[static_cast<size_t>(last_use[static_cast<size_t>(s)])].frees.push_back(s);
  return Status::ok();
}

namespace {
const char* kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::kTensor: return "a tensor";
    case ValueKind::kSequence: return "a sequence";
    case ValueKind::kOptionalTensor: return "an optional tensor";
    case ValueKind::kOptionalSequence: return "an optional sequence";
  }
  return "?";
}
}  // namespace

Status Executor::check_feeds(const NamedValues& feeds) const {
  // Runs before every inference: the messages (and their strings) are built only on an error.
  const Graph& g = model_->graph;
  const auto names = [&g] {
    std::string list;
    for (const ValueInfo& v : g.inputs) list += (list.empty() ? "'" : ", '") + v.name + "' " + v.type.to_string();
    return list;
  };
  // Names matched by linear search for the usual few inputs; a map for many (training graphs take
  // their parameters as inputs).
  constexpr size_t kLinear = 16;
  const bool few = feeds.size() <= kLinear && g.inputs.size() <= kLinear;
  std::unordered_map<std::string, const Value*> given_map;
  std::unordered_set<std::string_view> input_names;
  if (!few)
    for (const ValueInfo& v : g.inputs) input_names.insert(v.name);
  for (size_t f = 0; f < feeds.size(); ++f) {
    const std::string& name = feeds[f].first;
    bool known = false;
    if (few) {
      for (const ValueInfo& v : g.inputs) known |= v.name == name;
    } else {
      known = input_names.count(name) != 0;
    }
    if (!known) return invalid_argument("'" + name + "' is not an input of the model; its inputs are: " + names());
    bool twice = false;
    if (few) {
      for (size_t e = 0; e < f; ++e) twice |= feeds[e].first == name;
    } else {
      twice = !given_map.emplace(name, &feeds[f].second).second;
    }
    if (twice) return invalid_argument("input '" + name + "' is given twice");
  }
  std::vector<std::pair<const std::string*, int64_t>> symbols;  // symbolic dim -> the size a feed binds
  for (const ValueInfo& v : g.inputs) {
    const Value* given = nullptr;
    if (few) {
      for (const auto& [name, t] : feeds)
        if (name == v.name) given = &t;
    } else if (auto it = given_map.find(v.name); it != given_map.end()) {
      given = it->second;
    }
    if (!given)
      return invalid_argument("input '" + v.name + "' (" + v.type.to_string() + ") was not given; the model's inputs are: " + names());
    const Value& value = *given;
    if (value.kind != v.type.kind) {
      const bool optional_ok = (v.type.kind == ValueKind::kOptionalTensor && value.kind == ValueKind::kTensor) ||
                               (v.type.kind == ValueKind::kOptionalSequence && value.kind == ValueKind::kSequence);
      if (!optional_ok)
        return invalid_argument("input '" + v.name + "': the model expects " + kind_name(v.type.kind) + " (" +
                                v.type.to_string() + "), given " + kind_name(value.kind));
    }
    if (!value.is_tensor()) continue;
    const Tensor& t = value.tensor;
    const auto expected = [&v] { return v.type.to_string(); };
    const auto got = [&t] { return t.type().to_string(); };
    if (v.type.dtype != DType::kUndefined && t.dtype() != v.type.dtype)
      return invalid_argument("input '" + v.name + "': the model expects " + expected() + ", given " + got() +
                              " (element type differs: convert the data to " + dtype_numpy_name(v.type.dtype) + ")");
    if (!v.type.shape) continue;
    const Shape& s = *v.type.shape;
    if (s.rank() != t.rank())
      return invalid_argument("input '" + v.name + "': the model expects " + expected() + " (rank " +
                              std::to_string(s.rank()) + "), given " + got() + " (rank " + std::to_string(t.rank()) + ")");
    for (int64_t i = 0; i < s.rank(); ++i) {
      const Dim& d = s.dims[i];
      if (d.is_known() && d.value != t.dim(i))
        return invalid_argument("input '" + v.name + "': the model expects " + expected() + ", given " + got() +
                                " (dimension " + std::to_string(i) + " is " + std::to_string(t.dim(i)) +
                                ", the model fixes it at " + std::to_string(d.value) +
                                "; resize the data, or re-export with dynamic_axes)");
      if (!d.is_known() && !d.symbol.empty()) {
        const auto sit = std::find_if(symbols.begin(), symbols.end(), [&d](const auto& e) { return *e.first == d.symbol; });
        if (sit == symbols.end()) {
          symbols.emplace_back(&d.symbol, t.dim(i));
        } else if (sit->second != t.dim(i)) {
          return invalid_argument("input '" + v.name + "': dimension " + std::to_string(i) + " ('" + d.symbol +
                                  "') is " + std::to_string(t.dim(i)) + ", but another input binds '" + d.symbol +
                                  "' to " + std::to_string(sit->second));
        }
      }
    }
  }
  return Status::ok();
}

Status Executor::run(const NamedTensors& feeds, NamedTensors* outputs) {
  NamedValues in, out;
  for (const auto& [name, t] : feeds) in.emplace_back(name, Value(t));
  RETURN_IF_ERROR(run_values(in, &out));
  outputs->clear();
  for (auto& [name, v] : out) {
    if (!v.is_tensor())
      return unsupported("output '" + name + "' is " + v.describe() + ", not a tensor; this caller handles tensors only");
    outputs->emplace_back(name, std::move(v.tensor));
  }
  return Status::ok();
}

int64_t Executor::sub_batch(const NamedValues& feeds) const {
  const int64_t forced = split_rows_option_;
  // An observer that keeps outputs (layer-by-layer compare) wants whole-batch tensors.
  if (!split_enabled_ || !split_info_.separable || feeds.empty() || (observer_ && observer_keeps_outputs_)) return 0;
  int64_t rows = -1;
  for (const auto& [name, v] : feeds) {
    if (!v.is_tensor() || v.tensor.rank() == 0 || v.tensor.dtype() == DType::kString) return 0;
    if (rows >= 0 && v.tensor.dim(0) != rows) return 0;
    rows = v.tensor.dim(0);
  }
  if (forced > 0) return rows > forced ? forced : 0;
  return batch_split_rows(split_info_, rows, last_level_cache_bytes());
}

Status Executor::run_values(const NamedValues& feeds, NamedValues* outputs) {
  const int64_t sub = sub_batch(feeds);
  last_split_rows_.store(sub);
  last_split_cut_.store(-1);
  if (sub <= 0) return run_whole(feeds, outputs);
  RETURN_IF_ERROR(check_feeds(feeds));
  const int64_t rows = feeds[0].second.tensor.dim(0);
  if (!split_cuts_.empty()) {
    // Only the front as parts: the first place after which every tensor of the whole batch fits.
    // A third of the LLC (as batch_split_rows sizes the parts) measured best of 4 / 11 / 16 MB
    // backs (b8, 1 thread, 32 MiB L3, process CPU ms medians of 4 interleaved rounds at load 3-4):
    // EfficientNet-B0 53.4 / 50.1 / 58.0 against 53.2 for the whole graph as parts, MobileNetV2
    // 33.4 / 33.8 / 59.0 (16 MB then paged the whole-batch cut value in every run; fixed since)
    // against 35.3, ResNet-50 within noise (286 / 289 / 308 against 285).
    const int64_t back_bytes = split_front_bytes_ > 0 ? split_front_bytes_ : last_level_cache_bytes() / 3;
    if (const BatchSplitCut* cut = choose_front_cut(split_cuts_, rows, back_bytes)) {
      last_split_cut_.store(cut->after);
      return run_split_front(feeds, sub, *cut, outputs);
    }
  }
  outputs->clear();
  const int64_t parts = (rows + sub - 1) / sub;
  // Parts side by side, one per intra-op thread (runtime/batch_split_parts.h), when the runs are
  // not watched node by node (an observer is called from one thread at a time).
  const int lanes = observer_ ? 1 : batch_split_lanes(parts);
  std::vector<NamedValues> part_outs(static_cast<size_t>(parts));
  std::vector<Status> part_status(static_cast<size_t>(parts), Status::ok());
  const std::atomic<bool>* terminate = run_terminate_flag();
  run_batch_parts(parts, lanes, [&](int64_t p) {
    ScopedRunTerminate on_lane(terminate);  // a lane's thread checks the caller's flag
    const int64_t begin = p * sub, count = std::min(sub, rows - begin);
    NamedValues part_feeds;
    for (const auto& [name, v] : feeds) part_feeds.emplace_back(name, Value(v.tensor.outer_slice(begin, count)));
    part_status[static_cast<size_t>(p)] = run_whole(part_feeds, &part_outs[static_cast<size_t>(p)]);
  });
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t begin = p * sub, count = std::min(sub, rows - begin);
    const NamedValues& part_out = part_outs[static_cast<size_t>(p)];
    if (!part_status[static_cast<size_t>(p)].is_ok()) {  // a part fails where the batch may not: run it whole
      last_split_rows_.store(0);
      outputs->clear();
      return run_whole(feeds, outputs);
    }
    for (size_t i = 0; i < part_out.size(); ++i) {
      const Tensor& t = part_out[i].second.tensor;
      // The analysis is conservative; should a part still come back with other rows than it was
      // given, the batch runs whole instead (its result is the model's own, only slower).
      if (!part_out[i].second.is_tensor() || t.rank() == 0 || t.dim(0) != count || t.dtype() == DType::kString ||
          (begin > 0 && (*outputs)[i].second.tensor.nbytes() / rows * count != t.nbytes())) {
        last_split_rows_.store(0);
        outputs->clear();
        return run_whole(feeds, outputs);
      }
      if (begin == 0) {
        std::vector<int64_t> dims = t.dims();
        dims[0] = rows;
        ASSIGN_OR_RETURN(Tensor whole, Tensor::try_allocate(t.dtype(), dims));
        outputs->emplace_back(part_out[i].first, Value(std::move(whole)));
      }
      Tensor& whole = (*outputs)[i].second.tensor;
      std::memcpy(static_cast<uint8_t*>(whole.mutable_raw()) + whole.nbytes() / rows * begin, t.raw(),
                  static_cast<size_t>(t.nbytes()));
    }
  }
  return Status::ok();
}

Status Executor::run_split_front(const NamedValues& feeds, int64_t sub, const BatchSplitCut& cut, NamedValues* outputs) {
  const Graph& g = model_->graph;
  const int64_t rows = feeds[0].second.tensor.dim(0);
  const int64_t parts = (rows + sub - 1) / sub;
  const TensorType* type = g.find_type(cut.value);
  if (!type || !type->shape) return internal_error("the split's cut value '" + cut.value + "' has no known type");
  std::vector<int64_t> dims{rows};
  for (size_t i = 1; i < type->shape->dims.size(); ++i) dims.push_back(type->shape->dims[i].value);
  Tensor whole;
  {
    std::lock_guard<std::mutex> lock(cut_mu_);
    for (auto it = cut_spares_.begin(); it != cut_spares_.end(); ++it)
      if (it->dtype() == type->dtype && it->dims() == dims) {
        whole = std::move(*it);
        cut_spares_.erase(it);
        break;
      }
  }
  if (!whole.raw()) {
    ASSIGN_OR_RETURN(whole, Tensor::try_allocate(type->dtype, dims));
  }
  const int64_t row_bytes = whole.nbytes() / rows;
  const Phase front{1, 0, static_cast<size_t>(cut.after) + 1, &cut};
  const Phase back{2, static_cast<size_t>(cut.after) + 1, g.nodes.size(), &cut};
  const int lanes = observer_ ? 1 : batch_split_lanes(parts);
  std::vector<Status> part_status(static_cast<size_t>(parts), Status::ok());
  std::vector<uint8_t> part_fits(static_cast<size_t>(parts), 0);
  const std::atomic<bool>* terminate = run_terminate_flag();
  run_batch_parts(parts, lanes, [&](int64_t p) {
    ScopedRunTerminate on_lane(terminate);
    const int64_t begin = p * sub, count = std::min(sub, rows - begin);
    NamedValues part_feeds, part_out;
    for (const auto& [name, v] : feeds) part_feeds.emplace_back(name, Value(v.tensor.outer_slice(begin, count)));
    const Tensor rows_of_part = whole.outer_slice(begin, count);
    Status st = run_phase(part_feeds, front, &part_out, &rows_of_part);
    if (st.is_ok() && part_out.size() == 1 && part_out[0].second.is_tensor()) {
      // The part's rows are one block of the whole (axis 0 outermost, dense): made there by the
      // producer, or copied when it made them elsewhere (a view op) with the type's shape.
      const Tensor& t = part_out[0].second.tensor;
      if (t.dtype() == whole.dtype() && t.dims() == rows_of_part.dims()) {
        if (t.raw() != rows_of_part.raw())
          std::memcpy(static_cast<uint8_t*>(whole.mutable_raw()) + row_bytes * begin, t.raw(), static_cast<size_t>(t.nbytes()));
        part_fits[static_cast<size_t>(p)] = 1;
      }
    }
    part_status[static_cast<size_t>(p)] = std::move(st);
  });
  for (int64_t p = 0; p < parts; ++p) {
    if (!part_status[static_cast<size_t>(p)].is_ok() || !part_fits[static_cast<size_t>(p)]) {
      // A part failed, or its cut value is not the type's (the analysis is conservative; should
      // it still be wrong): the batch runs whole, the model's own result, only slower.
      last_split_rows_.store(0);
      last_split_cut_.store(-1);
      outputs->clear();
      return run_whole(feeds, outputs);
    }
  }
  const Status st = run_phase({{cut.value, Value(whole)}}, back, outputs);
  // Kept for the next run unless an output still points into it (a view of the cut value).
  const auto* lo = static_cast<const uint8_t*>(whole.raw());
  bool shared = false;
  for (const auto& [name, v] : *outputs) {
    const auto* q = v.is_tensor() ? static_cast<const uint8_t*>(v.tensor.raw()) : nullptr;
    shared = shared || (q && q >= lo && q < lo + whole.nbytes());
  }
  if (st.is_ok() && !shared) {
    std::lock_guard<std::mutex> lock(cut_mu_);
    if (cut_spares_.size() < 4) cut_spares_.push_back(std::move(whole));
  }
  return st;
}

Status Executor::run_whole(const NamedValues& feeds, NamedValues* outputs) {
  RETURN_IF_ERROR(check_feeds(feeds));
  return run_phase(feeds, Phase{0, 0, model_->graph.nodes.size(), nullptr}, outputs);
}

Status Executor::run_phase(const NamedValues& feeds, const Phase& phase, NamedValues* outputs, const Tensor* cut_rows) {
  const Graph& g = model_->graph;
  const PreparedGraph& pg = *graphs_.at(&g);
  std::unique_ptr<RunState> state = acquire_state();
  state->slots.resize(static_cast<size_t>(pg.num_slots));
  std::vector<int64_t> shapes_key{phase.tag};
  bool plannable = plan_memory_ && (!observer_ || !observer_keeps_outputs_);
  const auto bind = [&](int32_t slot, const Value& v) {
    state->slots[static_cast<size_t>(slot)] = v;
    plannable = plannable && v.kind == ValueKind::kTensor;
    shapes_key.push_back(v.tensor.rank());
    shapes_key.insert(shapes_key.end(), v.tensor.dims().begin(), v.tensor.dims().end());
  };
  if (phase.tag == 2) {
    for (const auto& [name, v] : feeds) bind(pg.slot_of.at(name), v);
  } else {
    for (size_t i = 0; i < g.inputs.size(); ++i)
      for (const auto& [name, v] : feeds)
        if (name == g.inputs[i].name) bind(pg.input_slots[i], v);
  }
  RunMemory memory;
  if (cut_rows && phase.cut && phase.cut->producer >= 0) {
    memory.rows_step = static_cast<int32_t>(phase.cut->producer);
    memory.rows_output = static_cast<int32_t>(phase.cut->producer_output);
    memory.rows_dest = *cut_rows;
  }
  for (const auto& [name, t] : feeds) {
    auto c = crossing_count_.find(name);
    if (c != crossing_count_.end() && t.is_tensor()) {
      memory.transfers.boundaries += c->second;
      memory.transfers.bytes += c->second * t.tensor.nbytes();
    }
  }
  std::unique_ptr<AllocationRecorder> recorder;
  if (plannable) {
    std::shared_ptr<const ArenaPlan> plan = find_plan(shapes_key);
    if (plan) {
      Status bound = state->arena.bind(std::move(plan));
      if (!bound.is_ok()) {
        for (Value& v : state->slots) v = Value();
        release_state(std::move(state));
        return bound;
      }
      memory.arena = &state->arena;
    } else {
      // The recording run's large tensors reuse each other's pages, and leave them to the arena
      // of the next run (runtime/page_blocks.h; FERRY_ARENA_REUSE=0: mapped one by one).
      std::shared_ptr<PageBlocks> blocks;
      if (page_reuse_enabled()) {
        blocks = state->arena.take_spare();
        // Huge pages even where the arena would not have them fresh (`ferry train`): a fault per
        // 2 MiB instead of per 4 KiB, and the arena takes them over without faults.
        if (!blocks)
          blocks = std::make_shared<PageBlocks>(huge_pages_allowed() ? PageBlocks::Huge::kWhole : PageBlocks::Huge::kNone);
      }
      recorder = std::make_unique<AllocationRecorder>(static_cast<int32_t>(g.nodes.size()), std::move(blocks));
      memory.recorder = recorder.get();
    }
  }
  Frame frame;
  frame.graph = &pg;
  frame.slots = &state->slots;
  Status st = run_graph(g, pg, frame, &memory, phase.begin, phase.end);
  if (st.is_ok() && phase.tag == 1) {
    outputs->clear();
    Value& v = state->slots[static_cast<size_t>(pg.slot_of.at(phase.cut->value))];
    if (!v.defined()) st = internal_error("the split's cut value '" + phase.cut->value + "' was not computed");
    else outputs->emplace_back(phase.cut->value, v);  // alive past the run: the plan leaves it on the heap
    if (st.is_ok()) copy_out_of_arena(state->arena, &outputs->back().second);
  } else if (st.is_ok()) {
    outputs->clear();
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      const Value* v = frame.get(pg.outputs[i]);
      if (!v || !v->defined()) {
        st = internal_error("graph output '" + g.outputs[i].name + "' was not computed");
        break;
      }
      outputs->emplace_back(g.outputs[i].name, *v);
      copy_out_of_arena(state->arena, &outputs->back().second);
    }
  }
  if (recorder) {
    std::shared_ptr<const ArenaPlan> plan = recorder->finish();  // before the slots go: what is left escapes
    std::shared_ptr<PageBlocks> spare = recorder->take_blocks(plan->arena_bytes);  // the rest is unmapped
    if (st.is_ok()) {
      state->arena.set_spare(std::move(spare));
      store_plan(shapes_key, std::move(plan));
    }
  }
  if (memory.violated) store_plan(shapes_key, nullptr);  // the plan did not hold: record again next run
  for (Value& v : state->slots) v = Value();
  release_state(std::move(state));
#if defined(__GLIBC__)
  // The recording run's small tensors and its kernels' temporaries were heap allocations, freed by
  // now (its large tensors are mapped and gone: arena.cpp). glibc keeps freed chunks below its
  // mmap threshold as resident heap, under the arena of the next runs: give those pages back once.
  // (ResNet-50 b8 training peaked at 2.1 GiB with both on the heap and no trim, 1.31 GiB now.)
  if (recorder) malloc_trim(0);
#endif
  {
    std::lock_guard<std::mutex> lock(stats_mu_);  // concurrent runs: the last one to finish wins
    last_transfers_ = memory.transfers;
  }
  return st;
}

Status Executor::run_graph(const Graph& g, const PreparedGraph& pg, Frame& frame, RunMemory* memory, size_t begin,
                           size_t end) {
  std::vector<Value>& slots = *frame.slots;
  // Reused by every node (KernelContext views them): no allocation per node on the run path.
  std::vector<Value> results;
  std::vector<const Value*> inputs;
  const bool observe = memory != nullptr;  // the main graph
  const std::atomic<bool>* terminate = run_terminate_flag();
  if (end == 0) end = g.nodes.size();
  for (size_t i = begin; i < end; ++i) {
    const Node& node = g.nodes[i];
    if (terminate && terminate->load(std::memory_order_relaxed))
      return invalid_argument(std::string(kRunTerminatedMessage) + " (before " + node.describe() + ")");
    const PreparedNode& pn = pg.nodes[i];
    const size_t num_inputs = pn.inputs.size();
    inputs.resize(num_inputs);
    for (size_t k = 0; k < num_inputs; ++k) {
      const ValueRef& ref = pn.inputs[k];
      if (ref.index < 0) {
        inputs[k] = nullptr;
        continue;
      }
      const Value* t = ref.depth == 0 ? (ref.constant ? &pg.constants[static_cast<size_t>(ref.index)]
                                                      : &slots[static_cast<size_t>(ref.index)])
                                      : frame.get(ref);
      // A plain tensor (nearly every edge) passes both checks below; the rest is checked in full.
      if (!t || t->kind != ValueKind::kTensor || !t->tensor.defined()) {
        if (ref.constant && ref.depth == 0 && pg.released.count(ref.index)) {  // the kernel holds its own form
          inputs[k] = nullptr;
          continue;
        }
        if (!t || !t->defined()) return internal_error(node.describe() + ": input '" + node.inputs[k] + "' is not available");
        if (!t->is_tensor() && !pn.schema->accepts_sequences)
          return invalid_argument(node.describe() + ": input " + std::to_string(k) + " ('" + node.inputs[k] + "') is " +
                                  t->describe() + ", but " + node.op_type + " takes tensors");
      }
      inputs[k] = t;
    }
    const size_t num_outputs = pn.outputs.size();
    results.resize(num_outputs);  // every entry empty: moved out, or reset, after the previous node
    if (memory && memory->recorder) memory->recorder->begin_step(static_cast<int32_t>(i), node, &inputs);
    KernelContext ctx(node, pn.opset, inputs.data(), num_inputs, &results);
    if (memory && memory->recorder) ctx.allocator = memory->recorder;
    if (memory && memory->arena && memory->arena->active()) {
      memory->arena->begin_step(static_cast<int32_t>(i));
      ctx.allocator = memory->arena;
    }
    std::optional<RowsAllocator> rows;
    if (memory && memory->rows_step == static_cast<int32_t>(i)) {
      rows.emplace(ctx.allocator, memory->rows_output, &memory->rows_dest);
      ctx.allocator = &*rows;
    }
    if (pn.has_subgraphs) {
      ctx.run_subgraph = [this, &frame](const Graph& body, const std::vector<Value>& body_inputs,
                                        std::vector<Value>* body_outputs) {
        return run_body(body, frame, body_inputs, body_outputs);
      };
    }
    const bool timed = observe && observer_;
    std::chrono::steady_clock::time_point start;
    if (timed) start = std::chrono::steady_clock::now();
    Status st = pn.kernel->compute(ctx);
    if (!st.is_ok()) {
      if (st.message().rfind("node '", 0) != 0) st = st.with_context(node.describe());
      return st;
    }
    for (size_t k = 0; k < num_outputs; ++k) {
      if (pn.outputs[k] < 0 || results[k].defined()) continue;  // -1: an omitted output
      return internal_error(node.describe() + ": the kernel did not produce output " + std::to_string(k) + " ('" +
                            node.outputs[k] + "')");
    }
    if (timed) {
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      observer_(node, results, ms);
    }
    if (observe && !crossing_count_.empty()) count_crossings(node, results, &memory->transfers);
    for (size_t k = 0; k < num_outputs; ++k) {
      if (pn.outputs[k] >= 0) slots[static_cast<size_t>(pn.outputs[k])] = std::move(results[k]);
      results[k] = Value();  // moved-from, or an omitted output a kernel may have set
    }
    for (int32_t s : pn.frees) slots[static_cast<size_t>(s)] = Value();
    if (memory && memory->arena && memory->arena->active() && !memory->arena->end_step(static_cast<int32_t>(i))) {
      memory->arena->abandon();  // a tensor outlived its planned step: keep it intact, use the heap from here
      memory->violated = true;
    }
  }
  return Status::ok();
}

Status Executor::run_body(const Graph& body, const Frame& outer, const std::vector<Value>& body_inputs,
                          std::vector<Value>* body_outputs) {
  auto it = graphs_.find(&body);
  if (it == graphs_.end()) return internal_error("subgraph '" + body.name + "' was not prepared");
  const PreparedGraph& pg = *it->second;
  if (body_inputs.size() != body.inputs.size())
    return invalid_model("subgraph '" + body.name + "' takes " + std::to_string(body.inputs.size()) +
                         " inputs, given " + std::to_string(body_inputs.size()));
  std::vector<Value> slots(static_cast<size_t>(pg.num_slots));
  for (size_t k = 0; k < body_inputs.size(); ++k) slots[static_cast<size_t>(pg.input_slots[k])] = body_inputs[k];
  Frame frame;
  frame.graph = &pg;
  frame.slots = &slots;
  frame.parent = &outer;
  RETURN_IF_ERROR(run_graph(body, pg, frame, nullptr));
  body_outputs->clear();
  for (size_t k = 0; k < body.outputs.size(); ++k) {
    const Value* v = frame.get(pg.outputs[k]);
    if (!v || !v->defined()) return internal_error("subgraph output '" + body.outputs[k].name + "' was not computed");
    body_outputs->push_back(*v);
  }
  return Status::ok();
}

void Executor::copy_out_of_arena(const ArenaAllocator& arena, Value* v) {
  if (v->is_tensor() && arena.contains(v->tensor.raw())) v->tensor = v->tensor.clone();
  for (Tensor& t : v->sequence)
    if (arena.contains(t.raw())) t = t.clone();
}

std::shared_ptr<const ArenaPlan> Executor::find_plan(const std::vector<int64_t>& shapes_key) {
  std::lock_guard<std::mutex> lock(plans_mu_);
  auto it = plans_.find(shapes_key);
  if (it == plans_.end()) return nullptr;
  last_plan_ = it->second;
  return it->second;
}

void Executor::store_plan(const std::vector<int64_t>& shapes_key, std::shared_ptr<const ArenaPlan> plan) {
  std::lock_guard<std::mutex> lock(plans_mu_);
  if (!plan) {
    plans_.erase(shapes_key);
    return;
  }
  if (plans_.size() >= kMaxPlans) plans_.clear();  // many shapes in turn: start over rather than grow
  last_plan_ = plan;
  plans_[shapes_key] = std::move(plan);
}

std::unique_ptr<Executor::RunState> Executor::acquire_state() {
  std::lock_guard<std::mutex> lock(states_mu_);
  if (idle_states_.empty()) {
    auto s = std::make_unique<RunState>();
    s->arena.set_huge_pages(arena_huge_pages_);
    return s;
  }
  std::unique_ptr<RunState> s = std::move(idle_states_.back());
  idle_states_.pop_back();
  return s;
}

void Executor::release_state(std::unique_ptr<RunState> state) {
  std::lock_guard<std::mutex> lock(states_mu_);
  idle_states_.push_back(std::move(state));
}

MemoryStats Executor::memory_stats() const {
  std::lock_guard<std::mutex> lock(plans_mu_);
  MemoryStats s;
  if (!last_plan_) return s;
  s.planned = true;
  s.arena_bytes = last_plan_->arena_bytes;
  s.tensor_bytes = last_plan_->planned_bytes;
  s.tensors = static_cast<int64_t>(last_plan_->allocs.size());
  s.in_place = last_plan_->in_place;
  s.unplanned_bytes = last_plan_->unplanned_bytes;
  s.unplanned = last_plan_->unplanned;
  return s;
}

namespace {
// The process's resident set now: /proc/self/statm's second field, in pages (0: unreadable).
int64_t process_resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  const long page = ::sysconf(_SC_PAGESIZE);
  return got == 2 && page > 0 ? static_cast<int64_t>(resident) * page : 0;
}
}  // namespace

ResidentBytes Executor::resident_bytes() const {
  ResidentBytes r;
  std::unordered_set<const void*> seen;  // a buffer shared by the model, a graph and a kernel counts once
  auto count = [&](const Tensor& t) {
    if (t.defined() && t.raw() && seen.insert(t.raw()).second) r.weights += t.nbytes();
  };
  for (const auto& [name, t] : model_->graph.initializers) count(t);
  for (const auto& [graph, pg] : graphs_) {
    for (const Value& v : pg->constants)
      if (v.is_tensor()) count(v.tensor);
    for (const PreparedNode& n : pg->nodes)
      if (const auto* h = dynamic_cast<const PackedWeightsHolder*>(n.kernel.get())) r.packed_weights += h->packed_weight_bytes();
  }
  {
    std::lock_guard<std::mutex> lock(states_mu_);
    for (const auto& state : idle_states_) r.arena += state->arena.bytes();
  }
  r.process = process_resident_bytes();
  r.other = std::max<int64_t>(0, r.process - r.weights - r.packed_weights - r.arena);
  return r;
}

void Executor::count_crossings(const Node& node, const std::vector<Value>& outputs, CrossingStats* stats) const {
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    auto c = crossing_count_.find(node.outputs[k]);
    if (c == crossing_count_.end() || !outputs[k].is_tensor()) continue;
    stats->boundaries += c->second;
    stats->bytes += c->second * outputs[k].tensor.nbytes();
  }
}

void Executor::tell_host_values() {
  if (!host_) return;
  const Graph& g = model_->graph;
  std::vector<std::string> values;
  if (observer_) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (plan_.node_side[i] == Side::kDevice)
        for (const std::string& o : g.nodes[i].outputs)
          if (!o.empty()) values.push_back(o);
  } else {
    for (const Crossing& c : plan_.crossings)
      if (c.to == Side::kHost) values.push_back(c.value);
  }
  backend_->set_host_values(g, values);
}

}  // namespace ferry
