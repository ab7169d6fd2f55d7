#include "runtime/executor.h"

#include <chrono>
#include <unordered_set>

namespace ferry {

struct Executor::PreparedGraph {
  std::vector<const OpSchema*> schemas;
  std::vector<int64_t> opsets;
  std::vector<std::unique_ptr<Kernel>> kernels;
  /// For each node, the local values whose last reader it is (freed after it runs).
  std::vector<std::vector<std::string>> frees;
};

/// Values visible while a graph runs; lookups fall back to the enclosing scope (subgraphs).
struct Executor::Scope {
  std::unordered_map<std::string, Value> values;
  const Scope* parent = nullptr;
  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      auto it = s->values.find(name);
      if (it != s->values.end()) return &it->second;
    }
    return nullptr;
  }
};

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
    oo.device = ex->backend_->name();
    const Backend* dev = ex->backend_.get();
    oo.device_supports = [dev](const Model& m, const Node& n) { return backend_takes(m, *dev, n, nullptr); };
    RETURN_IF_ERROR(optimize_model(optimized.get(), oo, &ex->optimize_report_));
    model = std::move(optimized);
  }
  ex->model_ = std::move(model);
  ASSIGN_OR_RETURN(ex->plan_, plan_partitions(*ex->model_, *ex->backend_, ex->host_.get(), options.allow_fallback));
  for (const Crossing& c : ex->plan_.crossings) ++ex->crossing_count_[c.value];
  RETURN_IF_ERROR(ex->prepare_graph(ex->model_->graph, nullptr));
  ex->tell_host_values();
  return ex;
}

Status Executor::prepare_graph(const Graph& g, Backend* backend) {
  auto pg = std::make_unique<PreparedGraph>();
  const size_t n = g.nodes.size();
  std::unordered_map<std::string, size_t> last_use;
  std::unordered_set<std::string> local;
  for (const ValueInfo& v : g.inputs) local.insert(v.name);
  for (const auto& [name, t] : g.initializers) local.insert(name);
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    const int64_t opset = model_->opset(node.domain);
    ASSIGN_OR_RETURN(const OpSchema* schema, resolve_schema(node, opset));
    Backend* runs_on = backend ? backend : (plan_.node_side[i] == Side::kHost ? host_.get() : backend_.get());
    std::string why;
    if (!runs_on->supports(node, *schema, &why))
      return unsupported(node.describe() + ": not supported on " + runs_on->name() + ": " + why);
    ASSIGN_OR_RETURN(auto kernel, runs_on->create_kernel(node, *schema, g));
    pg->schemas.push_back(schema);
    pg->opsets.push_back(opset);
    pg->kernels.push_back(std::move(kernel));
    for (const std::string& in : node.inputs)
      if (!in.empty()) last_use[in] = i;
    for (const std::string& in : node.implicit_inputs) last_use[in] = i;
    for (const std::string& o : node.outputs) local.insert(o);
    for (const auto& [k, a] : node.attrs) {
      if (a.g) RETURN_IF_ERROR(prepare_graph(*a.g, runs_on));
      for (const auto& sg : a.graphs) RETURN_IF_ERROR(prepare_graph(*sg, runs_on));
    }
  }
  std::unordered_set<std::string> keep;
  for (const ValueInfo& v : g.outputs) keep.insert(v.name);
  pg->frees.resize(n);
  for (const auto& [name, idx] : last_use)
    if (!keep.count(name) && local.count(name) && !g.initializers.count(name)) pg->frees[idx].push_back(name);
  graphs_[&g] = std::move(pg);
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
  const Graph& g = model_->graph;
  std::string names;
  for (const ValueInfo& v : g.inputs) names += (names.empty() ? "'" : ", '") + v.name + "' " + v.type.to_string();
  std::unordered_map<std::string, const Value*> given;
  for (const auto& [name, t] : feeds) {
    bool known = false;
    for (const ValueInfo& v : g.inputs) known |= v.name == name;
    if (!known) return invalid_argument("'" + name + "' is not an input of the model; its inputs are: " + names);
    if (!given.emplace(name, &t).second) return invalid_argument("input '" + name + "' is given twice");
  }
  std::unordered_map<std::string, int64_t> symbols;
  for (const ValueInfo& v : g.inputs) {
    auto it = given.find(v.name);
    if (it == given.end())
      return invalid_argument("input '" + v.name + "' (" + v.type.to_string() + ") was not given; the model's inputs are: " + names);
    const Value& value = *it->second;
    if (value.kind != v.type.kind) {
      const bool optional_ok = (v.type.kind == ValueKind::kOptionalTensor && value.kind == ValueKind::kTensor) ||
                               (v.type.kind == ValueKind::kOptionalSequence && value.kind == ValueKind::kSequence);
      if (!optional_ok)
        return invalid_argument("input '" + v.name + "': the model expects " + kind_name(v.type.kind) + " (" +
                                v.type.to_string() + "), given " + kind_name(value.kind));
    }
    if (!value.is_tensor()) continue;
    const Tensor& t = value.tensor;
    const std::string expected = v.type.to_string();
    const std::string got = t.type().to_string();
    if (v.type.dtype != DType::kUndefined && t.dtype() != v.type.dtype)
      return invalid_argument("input '" + v.name + "': the model expects " + expected + ", given " + got +
                              " (element type differs: convert the data to " + dtype_numpy_name(v.type.dtype) + ")");
    if (!v.type.shape) continue;
    const Shape& s = *v.type.shape;
    if (s.rank() != t.rank())
      return invalid_argument("input '" + v.name + "': the model expects " + expected + " (rank " +
                              std::to_string(s.rank()) + "), given " + got + " (rank " + std::to_string(t.rank()) + ")");
    for (int64_t i = 0; i < s.rank(); ++i) {
      const Dim& d = s.dims[i];
      if (d.is_known() && d.value != t.dim(i))
        return invalid_argument("input '" + v.name + "': the model expects " + expected + ", given " + got +
                                " (dimension " + std::to_string(i) + " is " + std::to_string(t.dim(i)) +
                                ", the model fixes it at " + std::to_string(d.value) +
                                "; resize the data, or re-export with dynamic_axes)");
      if (!d.is_known() && !d.symbol.empty()) {
        auto [sit, fresh] = symbols.emplace(d.symbol, t.dim(i));
        if (!fresh && sit->second != t.dim(i))
          return invalid_argument("input '" + v.name + "': dimension " + std::to_string(i) + " ('" + d.symbol +
                                  "') is " + std::to_string(t.dim(i)) + ", but another input binds '" + d.symbol +
                                  "' to " + std::to_string(sit->second));
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

Status Executor::run_values(const NamedValues& feeds, NamedValues* outputs) {
  RETURN_IF_ERROR(check_feeds(feeds));
  const Graph& g = model_->graph;
  Scope scope;
  for (const auto& [name, t] : g.initializers) scope.values[name] = t;
  for (const auto& [name, t] : feeds) scope.values[name] = t;
  last_transfers_ = CrossingStats{};
  for (const auto& [name, t] : feeds) {
    auto c = crossing_count_.find(name);
    if (c != crossing_count_.end() && t.is_tensor()) {
      last_transfers_.boundaries += c->second;
      last_transfers_.bytes += c->second * t.tensor.nbytes();
    }
  }
  RETURN_IF_ERROR(run_graph(g, scope, true));
  outputs->clear();
  for (const ValueInfo& v : g.outputs) {
    const Value* t = scope.find(v.name);
    if (!t) return internal_error("graph output '" + v.name + "' was not computed");
    outputs->emplace_back(v.name, *t);
  }
  return Status::ok();
}

Status Executor::run_graph(const Graph& g, Scope& scope, bool observe) {
  auto pit = graphs_.find(&g);
  if (pit == graphs_.end()) return internal_error("graph '" + g.name + "' was not prepared");
  PreparedGraph& pg = *pit->second;
  std::vector<Value> results;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    std::vector<const Value*> inputs;
    inputs.reserve(node.inputs.size());
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const std::string& in = node.inputs[k];
      if (in.empty()) {
        inputs.push_back(nullptr);
        continue;
      }
      const Value* t = scope.find(in);
      if (!t) return internal_error(node.describe() + ": input '" + in + "' is not available");
      if (!t->is_tensor() && !pg.schemas[i]->accepts_sequences)
        return invalid_argument(node.describe() + ": input " + std::to_string(k) + " ('" + in + "') is " +
                                t->describe() + ", but " + node.op_type + " takes tensors");
      inputs.push_back(t);
    }
    results.assign(node.outputs.size(), Value());
    KernelContext ctx(node, pg.opsets[i], std::move(inputs), &results);
    ctx.run_subgraph = [this, &scope](const Graph& body, const std::vector<Value>& body_inputs,
                                      std::vector<Value>* body_outputs) -> Status {
      Scope inner;
      inner.parent = &scope;
      if (body_inputs.size() != body.inputs.size())
        return invalid_model("subgraph '" + body.name + "' takes " + std::to_string(body.inputs.size()) +
                             " inputs, given " + std::to_string(body_inputs.size()));
      for (const auto& [name, t] : body.initializers) inner.values[name] = t;
      for (size_t k = 0; k < body_inputs.size(); ++k) inner.values[body.inputs[k].name] = body_inputs[k];
      RETURN_IF_ERROR(run_graph(body, inner, false));
      body_outputs->clear();
      for (const ValueInfo& v : body.outputs) {
        const Value* t = inner.find(v.name);
        if (!t) return internal_error("subgraph output '" + v.name + "' was not computed");
        body_outputs->push_back(*t);
      }
      return Status::ok();
    };
    auto start = std::chrono::steady_clock::now();
    Status st = pg.kernels[i]->compute(ctx);
    if (!st.is_ok()) {
      if (st.message().rfind("node '", 0) != 0) st = st.with_context(node.describe());
      return st;
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      if (node.outputs[k].empty()) continue;
      if (!results[k].defined())
        return internal_error(node.describe() + ": the kernel did not produce output " + std::to_string(k) + " ('" +
                              node.outputs[k] + "')");
    }
    if (observe && observer_) observer_(node, results, ms);
    if (observe && !crossing_count_.empty()) count_crossings(node, results);
    for (size_t k = 0; k < node.outputs.size(); ++k)
      if (!node.outputs[k].empty()) scope.values[node.outputs[k]] = std::move(results[k]);
    for (const std::string& name : pg.frees[i]) scope.values.erase(name);
  }
  return Status::ok();
}

void Executor::count_crossings(const Node& node, const std::vector<Value>& outputs) {
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    auto c = crossing_count_.find(node.outputs[k]);
    if (c == crossing_count_.end() || !outputs[k].is_tensor()) continue;
    last_transfers_.boundaries += c->second;
    last_transfers_.bytes += c->second * outputs[k].tensor.nbytes();
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
