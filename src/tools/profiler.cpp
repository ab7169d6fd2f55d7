#include "tools/profiler.h"

#include <time.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace ferry::cli {

namespace {
double process_cpu_ms() {
  struct timespec ts {};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

std::string shape_of(const Value& v) {
  if (!v.is_tensor()) return v.describe();
  return v.tensor.type().to_string();
}
}  // namespace

Profiler::Profiler(const Graph& graph, const NamedTensors& feeds) : graph_(graph), origin_(Clock::now()) {
  nodes_.resize(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) nodes_[i].node = &graph.nodes[i];
  for (const auto& [name, t] : graph.initializers) shapes_[name] = t.type().to_string();
  for (const auto& [name, t] : feeds) shapes_[name] = t.type().to_string();
}

double Profiler::now_us() const {
  return std::chrono::duration<double, std::micro>(Clock::now() - origin_).count();
}

NodeObserver Profiler::observer() {
  return [this](const Node& node, const std::vector<Value>& outputs, double ms) { on_node(node, outputs, ms); };
}

void Profiler::on_node(const Node& node, const std::vector<Value>& outputs, double ms) {
  const Clock::time_point entered = Clock::now();
  if (graph_.nodes.empty() || &node < &graph_.nodes.front() || &node > &graph_.nodes.back()) return;
  const size_t i = static_cast<size_t>(&node - &graph_.nodes.front());
  NodeProfile& p = nodes_[i];
  if (p.output_shapes.empty() && !outputs.empty()) {  // first sight: shapes (the same on every run)
    for (size_t k = 0; k < outputs.size() && k < node.outputs.size(); ++k) {
      p.output_shapes.push_back(node.outputs[k].empty() ? "" : shape_of(outputs[k]));
      if (!node.outputs[k].empty()) shapes_[node.outputs[k]] = p.output_shapes.back();
    }
    for (const std::string& in : node.inputs) {
      auto it = shapes_.find(in);
      p.input_shapes.push_back(in.empty() ? "" : (it == shapes_.end() ? "?" : it->second));
    }
  }
  ++p.calls;
  p.total_ms += ms;
  const double cpu = process_cpu_ms();  // nodes run one after the other: the CPU since the last one ended
  p.cpu_ms += cpu - cpu_mark_;
  cpu_mark_ = cpu;
  const double end = std::chrono::duration<double, std::micro>(entered - origin_).count();
  events_.push_back(Event{static_cast<int32_t>(i), end - ms * 1000.0, ms * 1000.0});
  own_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - entered).count();
}

void Profiler::begin_run() {
  run_start_us_ = now_us();
  run_cpu_start_ = cpu_mark_ = process_cpu_ms();
}

void Profiler::end_run() {
  const double end = now_us();
  runs_events_.push_back(Event{static_cast<int32_t>(runs_), run_start_us_, end - run_start_us_});
  run_total_ms_ += (end - run_start_us_) / 1000.0;
  run_cpu_ms_ += process_cpu_ms() - run_cpu_start_;
  ++runs_;
}

void Profiler::reset() {
  for (NodeProfile& p : nodes_) {
    p.calls = 0;
    p.total_ms = 0;
    p.cpu_ms = 0;
  }
  events_.clear();
  runs_events_.clear();
  run_total_ms_ = 0;
  run_cpu_ms_ = 0;
  own_ms_ = 0;
  runs_ = 0;
}

std::vector<NodeProfile> Profiler::by_node() const {
  std::vector<NodeProfile> out;
  for (const NodeProfile& p : nodes_)
    if (p.calls > 0) out.push_back(p);
  std::stable_sort(out.begin(), out.end(), [](const NodeProfile& a, const NodeProfile& b) { return a.total_ms > b.total_ms; });
  return out;
}

std::vector<OpTypeProfile> Profiler::by_op_type() const {
  std::map<std::string, OpTypeProfile> m;
  for (const NodeProfile& p : nodes_) {
    if (p.calls == 0) continue;
    const std::string op = p.node->domain.empty() ? p.node->op_type : p.node->domain + "." + p.node->op_type;
    OpTypeProfile& o = m[op];
    o.op_type = op;
    ++o.nodes;
    o.calls += p.calls;
    o.total_ms += p.total_ms;
    o.cpu_ms += p.cpu_ms;
  }
  std::vector<OpTypeProfile> out;
  for (auto& [k, v] : m) out.push_back(v);
  std::stable_sort(out.begin(), out.end(), [](const OpTypeProfile& a, const OpTypeProfile& b) { return a.total_ms > b.total_ms; });
  return out;
}

Status Profiler::write_trace(const std::string& path, const std::string& title) const {
  using nlohmann::json;
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", title}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "inference"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "nodes"}}}});
  for (const Event& e : runs_events_)
    events.push_back({{"name", "inference " + std::to_string(e.node)}, {"cat", "inference"}, {"ph", "X"},
                      {"ts", e.start_us}, {"dur", e.dur_us}, {"pid", 1}, {"tid", 0}});
  for (const Event& e : events_) {
    const NodeProfile& p = nodes_[static_cast<size_t>(e.node)];
    const Node& n = *p.node;
    json args = {{"op_type", n.op_type}, {"inputs", p.input_shapes}, {"outputs", p.output_shapes}};
    if (!n.domain.empty()) args["domain"] = n.domain;
    if (!n.origin.empty()) args["covers"] = n.origin;
    events.push_back({{"name", n.name}, {"cat", n.op_type}, {"ph", "X"}, {"ts", e.start_us}, {"dur", e.dur_us},
                      {"pid", 1}, {"tid", 1}, {"args", args}});
  }
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", {{"producer", "ferry profile"}}}};
  std::ofstream f(path);
  if (!f) return invalid_argument("--trace '" + path + "' cannot be written");
  f << doc.dump() << "\n";
  if (!f) return internal_error("writing the trace '" + path + "' failed");
  return Status::ok();
}

}  // namespace ferry::cli
