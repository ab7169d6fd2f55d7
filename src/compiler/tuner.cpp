// Kernel tuning for `ferry compile --tune`; see tuner.h.
#include "compiler/tuner.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "backends/backend.h"
#include "common/env_switch.h"
#include "io/file.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kReferenceImpl = -1;
constexpr int kCacheVersion = 1;

std::string impl_name(int impl) { return impl == kReferenceImpl ? "reference" : "optimized:" + std::to_string(impl); }

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Deterministic stand-in inputs: floats in [0, 1), integers and bools zero (valid indices).
StatusOr<NamedTensors> synthetic_feeds(const Graph& g) {
  NamedTensors feeds;
  uint32_t state = 12345;
  for (const ValueInfo& v : g.inputs) {
    if (v.type.kind != ValueKind::kTensor || !v.type.shape || !v.type.shape->is_static())
      return unsupported("input '" + v.name + "' is " + v.type.to_string() +
                         ": tuning needs static input shapes (give --input-shape or --dynamic-batch)");
    ASSIGN_OR_RETURN(Tensor t, Tensor::create(v.type.dtype, v.type.shape->values(), "input '" + v.name + "'"));
    if (v.type.dtype == DType::kF32) {
      float* p = t.mutable_data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        state = state * 1664525u + 1013904223u;
        p[i] = static_cast<float>(state >> 8) / static_cast<float>(1u << 24);
      }
    }
    feeds.emplace_back(v.name, std::move(t));
  }
  return feeds;
}

// Runs the whole model once and keeps every main-graph value (the inputs each node is timed on).
Status capture_values(std::shared_ptr<const Model> model, const TuneOptions& o, int threads, const NamedTensors& feeds,
                      std::map<std::string, Value>* values) {
  ExecutorOptions eo;
  eo.device = o.device;
  eo.opt_level = 0;
  eo.threads = threads;
  ASSIGN_OR_RETURN(auto ex, Executor::create(model, eo));
  ex->set_observer([values](const Node& node, const std::vector<Value>& outs, double) {
    for (size_t k = 0; k < node.outputs.size() && k < outs.size(); ++k)
      if (!node.outputs[k].empty()) (*values)[node.outputs[k]] = outs[k];
  });
  NamedTensors outputs;
  RETURN_IF_ERROR(ex->run(feeds, &outputs));
  for (const auto& [name, t] : feeds) (*values)[name] = t;
  for (const auto& [name, t] : model->graph.initializers) (*values)[name] = t;
  return Status::ok();
}

// Whole-model latency (min of a few runs after a warm-up) at `threads`.
StatusOr<double> time_model(std::shared_ptr<const Model> model, const TuneOptions& o, int threads,
                            const NamedTensors& feeds) {
  ExecutorOptions eo;
  eo.device = o.device;
  eo.opt_level = 0;
  eo.threads = threads;
  ASSIGN_OR_RETURN(auto ex, Executor::create(model, eo));
  NamedTensors outputs;
  RETURN_IF_ERROR(ex->run(feeds, &outputs));
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < 3; ++r) {
    auto start = Clock::now();
    RETURN_IF_ERROR(ex->run(feeds, &outputs));
    best = std::min(best, ms_since(start));
  }
  return best;
}

// One kernel's time on captured inputs: min over a few runs after a warm-up; -1 if it fails.
double time_kernel(Kernel& kernel, const Node& node, int64_t opset, const std::vector<const Value*>& inputs) {
  double best = std::numeric_limits<double>::infinity();
  double total = 0;
  for (int r = 0; r < 6; ++r) {
    std::vector<Value> outs(node.outputs.size());
    KernelContext ctx(node, opset, inputs, &outs);
    auto start = Clock::now();
    if (!kernel.compute(ctx).is_ok()) return -1;
    const double ms = ms_since(start);
    total += ms;
    if (r > 0) best = std::min(best, ms);
    if (r >= 2 && total > 200) break;
  }
  return best;
}

std::string attr_key(const Attribute& a) {
  std::ostringstream s;
  s << static_cast<int>(a.type) << ':';
  switch (a.type) {
    case AttrType::kFloat: s << a.f; break;
    case AttrType::kInt: s << a.i; break;
    case AttrType::kString: s << a.s; break;
    case AttrType::kFloats: for (float f : a.floats) s << f << ','; break;
    case AttrType::kInts: for (int64_t i : a.ints) s << i << ','; break;
    case AttrType::kStrings: for (const auto& x : a.strings) s << x << ','; break;
    case AttrType::kTensor: s << a.t.type().to_string(); break;
    default: break;
  }
  return s.str();
}

// What decides a kernel's speed: device, ISA, op, input types (and which are weights), attributes.
std::string cache_key(const TuneOptions& o, int threads, const Node& node, int64_t opset, const Graph& g) {
  std::ostringstream s;
  s << o.device << '|' << host_isa() << "|t" << threads << '|' << node.domain << "::" << node.op_type << '@' << opset << '|';
  for (const std::string& in : node.inputs) {
    const TensorType* t = in.empty() ? nullptr : g.find_type(in);
    s << (t ? t->to_string() : "-") << (g.initializers.count(in) ? "c" : "") << ';';
  }
  s << '|';
  for (const auto& [k, a] : node.attrs)
    if (k != kKernelChoiceAttr) s << k << '=' << attr_key(a) << ';';
  return s.str();
}

bool static_inputs(const Node& node, const Graph& g) {
  for (const std::string& in : node.inputs) {
    if (in.empty()) continue;
    const TensorType* t = g.find_type(in);
    if (!t || !t->shape || !t->shape->is_static()) return false;
  }
  for (const auto& [k, a] : node.attrs)
    if (a.g || !a.graphs.empty()) return false;
  return true;
}

json read_cache(const std::string& path) {
  if (path.empty()) return json::object();
  std::ifstream f(path);
  if (!f) return json::object();
  json j = json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("version", 0) != kCacheVersion || !j.contains("entries") || !j["entries"].is_object())
    return json::object();  // unreadable or another version: start over
  return j["entries"];
}

Status write_cache(const std::string& path, const json& entries) {
  if (path.empty()) return Status::ok();
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return invalid_argument("tuning cache: cannot create folder '" + parent.string() + "': " + ec.message());
  json j = {{"version", kCacheVersion}, {"entries", entries}};
  const std::string text = j.dump(1);
  ASSIGN_OR_RETURN(auto w, AtomicFileWriter::create(path));
  RETURN_IF_ERROR(w->write(text.data(), text.size()));
  return w->commit().with_context("tuning cache");
}

}  // namespace

std::string default_tuning_cache_path() {
  if (const char* p = env_value("FERRY_TUNING_CACHE")) return p;
  if (const char* x = env_value("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/ferry/tuning.json";
  if (const char* h = env_value("HOME"); h && *h) return std::string(h) + "/.cache/ferry/tuning.json";
  return "";
}

Status tune_model(Model* model, const TuneOptions& o, TuneResult* result) {
  std::shared_ptr<const Model> view(model, [](const Model*) {});
  ASSIGN_OR_RETURN(NamedTensors feeds, synthetic_feeds(model->graph));

  // 1. Intra-op threads for the whole model.
  int threads = o.threads;
  if (threads <= 0) {
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    std::vector<int> candidates;
    for (int t = 1; t < cores; t *= 2) candidates.push_back(t);
    candidates.push_back(cores);
    double best = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (o.progress) o.progress("tune", 0, 1, o.label + ": threads " + std::to_string(candidates[i]));
      ASSIGN_OR_RETURN(double ms, time_model(view, o, candidates[i], feeds));
      if (ms < best * 0.97) {  // more threads must win clearly
        best = ms;
        threads = candidates[i];
      }
    }
  }
  result->threads = threads;

  // 2. Per-node kernel choice (backends with several kernels for an op: Backend::kernel_choices;
  // a device that cannot be opened here has none to time).
  StatusOr<std::unique_ptr<Backend>> made = make_backend(o.device);
  if (!made.is_ok()) return Status::ok();
  std::unique_ptr<Backend> backend = std::move(made).value();
  std::vector<size_t> tunable;
  for (size_t i = 0; i < model->graph.nodes.size(); ++i) {
    const Node& n = model->graph.nodes[i];
    if (backend->has_kernel_choices(n) && static_inputs(n, model->graph)) tunable.push_back(i);
  }
  if (tunable.empty()) return Status::ok();
  std::map<std::string, Value> values;
  RETURN_IF_ERROR(capture_values(view, o, threads, feeds, &values));
  json cache = read_cache(o.cache_path);
  backend->set_num_threads(threads);
  const Graph& g = model->graph;

  for (size_t step = 0; step < tunable.size(); ++step) {
    Node& node = model->graph.nodes[tunable[step]];
    if (o.progress) o.progress("tune", static_cast<int64_t>(step), static_cast<int64_t>(tunable.size()), o.label + ": " + node.name);
    const int64_t opset = model->opset(node.domain);
    ASSIGN_OR_RETURN(const OpSchema* schema, resolve_schema(node, opset));
    // Candidates: the backend's kernels that accept the node, then the reference kernel.
    ASSIGN_OR_RETURN(std::vector<int> candidates, backend->kernel_choices(node, *schema, g));
    const int default_impl = candidates.empty() ? kReferenceImpl : candidates.front();
    if (schema->kernel) candidates.push_back(kReferenceImpl);
    if (candidates.size() < 2) continue;

    const std::string key = cache_key(o, threads, node, opset, g);
    TuningChoice choice{node.name, node.op_type, "", 0, 0};
    int best_impl = default_impl;
    auto hit = cache.find(key);
    if (hit != cache.end() && hit->is_object() &&
        std::find(candidates.begin(), candidates.end(), hit->value("impl", -2)) != candidates.end()) {
      best_impl = (*hit)["impl"].get<int>();
      choice.ms = hit->value("ms", 0.0);
      choice.reference_ms = hit->value("reference_ms", 0.0);
      ++result->cache_hits;
    } else {
      std::vector<const Value*> inputs;
      bool have_inputs = true;
      for (const std::string& in : node.inputs) {
        if (in.empty()) { inputs.push_back(nullptr); continue; }
        auto it = values.find(in);
        if (it == values.end()) { have_inputs = false; break; }
        inputs.push_back(&it->second);
      }
      if (!have_inputs) continue;
      double best = std::numeric_limits<double>::infinity();
      for (int impl : candidates) {
        Node pinned = node;
        Attribute a;
        a.type = AttrType::kInt;
        a.i = impl;
        pinned.attrs[kKernelChoiceAttr] = a;
        ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, backend->create_kernel(pinned, *schema, g));
        const double ms = time_kernel(*kernel, pinned, opset, inputs);
        if (ms < 0) continue;
        if (impl == kReferenceImpl) choice.reference_ms = ms;
        if (ms < best) {
          best = ms;
          best_impl = impl;
        }
      }
      choice.ms = best;
      cache[key] = {{"impl", best_impl}, {"ms", choice.ms}, {"reference_ms", choice.reference_ms}, {"op", node.op_type}};
      ++result->timed;
    }
    Attribute pin;
    pin.type = AttrType::kInt;
    pin.i = best_impl;
    node.attrs[kKernelChoiceAttr] = pin;
    if (best_impl != default_impl) ++result->changed;
    choice.impl = impl_name(best_impl);
    result->choices.push_back(std::move(choice));
  }
  if (o.progress) o.progress("tune", static_cast<int64_t>(tunable.size()), static_cast<int64_t>(tunable.size()), o.label);
  return write_cache(o.cache_path, cache);
}

}  // namespace ferry
