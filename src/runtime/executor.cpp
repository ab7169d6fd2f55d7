#include "runtime/executor.h"
#include "backends/device_defaults.h"
#include "backends/packed_weights.h"
#include "runtime/executor_internal.h"

#include "common/env_switch.h"
#include "common/heap_trim.h"
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
#include <fcntl.h>
#include <unistd.h>
#endif

namespace ferry {

namespace {
thread_local const std::atomic<bool>* t_run_terminate = nullptr;
}  // namespace

const std::atomic<bool>* run_terminate_flag() { return t_run_terminate; }
ScopedRunTerminate::ScopedRunTerminate(const std::atomic<bool>* flag) : saved_(t_run_terminate) { t_run_terminate = flag; }
ScopedRunTerminate::~ScopedRunTerminate() { t_run_terminate = saved_; }

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
  const int level = options.opt_level >= 0 ? options.opt_level : default_opt_level(ex->backend_->name());
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
  ex->split_enabled_ = ex->split_rows_option_ != 0 && is_host_backend(*ex->backend_) && splits_batches(ex->backend_->name());
  if (ex->split_enabled_) ex->split_info_ = analyze_batch_split(ex->model_->graph);
  ex->split_front_bytes_ = options.split_front_bytes;
  if (const char* e = env_value("FERRY_SPLIT_FRONT"); e && *e) ex->split_front_bytes_ = std::atoll(e);
  if (ex->split_front_bytes_ != 0) ex->split_cuts_ = batch_split_cuts(ex->model_->graph, ex->split_info_);
  ASSIGN_OR_RETURN(ex->plan_, plan_partitions(*ex->model_, *ex->backend_, ex->host_.get(), options.allow_fallback));
  for (const Crossing& c : ex->plan_.crossings) ++ex->crossing_count_[c.value];
  {
    ScopedSharedForms forms(options.shared_forms);  // the kernels made here keep it
    RETURN_IF_ERROR(ex->prepare_graph(ex->model_->graph, nullptr));
  }
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
  trim_heap();
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

void Executor::release_idle_arenas() {
  std::vector<std::unique_ptr<RunState>> idle;
  {
    std::lock_guard<std::mutex> lock(states_mu_);
    idle.swap(idle_states_);
  }
}  // freed here, outside the lock

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
// The bytes of [p, p + n) on pages the process has in memory now (/proc/self/pagemap's present bit):
// a weight a file mapping holds counts only where something read it (a .ferry file's plain weights
// that a kernel replaced with its packed form are never read). `pagemap` is the open file (-1: all
// of n, as when it cannot be read).
int64_t resident_part(int pagemap, const void* p, int64_t n) {
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pagemap < 0 || page <= 0 || n <= 0) return std::max<int64_t>(n, 0);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + static_cast<uintptr_t>(n);
  const uintptr_t first = begin / static_cast<uintptr_t>(page), last = (end - 1) / static_cast<uintptr_t>(page);
  int64_t bytes = 0;
  std::vector<uint64_t> entries;
  for (uintptr_t at = first; at <= last;) {
    const size_t count = static_cast<size_t>(std::min<uintptr_t>(last - at + 1, 4096));
    entries.resize(count);
    const ssize_t got = ::pread(pagemap, entries.data(), count * sizeof(uint64_t), static_cast<off_t>(at * sizeof(uint64_t)));
    if (got != static_cast<ssize_t>(count * sizeof(uint64_t))) return n;
    for (size_t i = 0; i < count; ++i) {
      if (!(entries[i] >> 63)) continue;  // bit 63: present in memory
      const uintptr_t lo = std::max(begin, (at + i) * static_cast<uintptr_t>(page));
      const uintptr_t hi = std::min(end, (at + i + 1) * static_cast<uintptr_t>(page));
      bytes += static_cast<int64_t>(hi - lo);
    }
    at += count;
  }
  return bytes;
}
}  // namespace

ResidentBytes Executor::resident_bytes() const {
  ResidentBytes r;
  std::unordered_set<const void*> seen;  // a buffer shared by the model, a graph and a kernel counts once
  const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  auto count = [&](const Tensor& t) {
    // A weight the file stores only packed, not unpacked by any reader, holds no bytes of its own.
    if (t.defined() && !t.pending() && t.raw() && seen.insert(t.raw()).second) r.weights += resident_part(pagemap, t.raw(), t.nbytes());
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
  if (pagemap >= 0) ::close(pagemap);
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
