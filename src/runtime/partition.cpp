// Per-node backend choice and the device<->host crossings; see partition.h.
#include "runtime/partition.h"

#include <algorithm>
#include <map>
#include <set>

#include "backends/device_defaults.h"

namespace ferry {
namespace {

/// The node's input-0 element type when known (for the dtype part of the capability query).
DType input0_dtype(const Graph& g, const Node& node) {
  if (node.inputs.empty() || node.inputs[0].empty()) return DType::kUndefined;
  const TensorType* t = g.find_type(node.inputs[0]);
  return t ? t->dtype : DType::kUndefined;
}

bool graph_taken(const Model& model, const Backend& backend, const Graph& g, std::string* why);

bool node_taken(const Model& model, const Backend& backend, const Graph& g, const Node& node, std::string* why) {
  auto schema = resolve_schema(node, model.opset(node.domain));
  if (!schema.is_ok()) {
    if (why) *why = schema.status().message();
    return false;
  }
  std::string reason;
  if (!backend.supports(node, *schema.value(), &reason)) {
    if (why) *why = reason.empty() ? "not supported" : reason;
    return false;
  }
  const std::vector<DType> types = backend.supported_types(*schema.value());
  const DType dt = input0_dtype(g, node);
  if (!types.empty() && dt != DType::kUndefined && std::find(types.begin(), types.end(), dt) == types.end()) {
    if (why) *why = std::string("element type ") + dtype_name(dt) + " is not supported by its kernel";
    return false;
  }
  for (const auto& [k, a] : node.attrs) {
    if (a.g && !graph_taken(model, backend, *a.g, why)) return false;
    for (const auto& sg : a.graphs)
      if (!graph_taken(model, backend, *sg, why)) return false;
  }
  return true;
}

bool graph_taken(const Model& model, const Backend& backend, const Graph& g, std::string* why) {
  for (const Node& n : g.nodes) {
    std::string inner;
    if (!node_taken(model, backend, g, n, &inner)) {
      if (why) *why = "its subgraph " + n.describe() + " is not supported: " + inner;
      return false;
    }
  }
  return true;
}

int64_t known_bytes(const Graph& g, const std::string& value) {
  const TensorType* t = g.find_type(value);
  if (!t || t->dtype == DType::kUndefined || !t->shape || t->dtype == DType::kString) return -1;
  int64_t n = 1;
  for (const Dim& d : t->shape->dims) {
    if (!d.is_known()) return -1;
    n *= d.value;
  }
  return n * dtype_size(t->dtype);
}

}  // namespace

int64_t PartitionPlan::static_bytes() const {
  int64_t total = 0;
  for (const Crossing& c : crossings) {
    if (c.static_bytes < 0) return -1;
    total += c.static_bytes;
  }
  return total;
}

bool is_host_backend(const Backend& backend) {
  return is_host_device(backend.name());
}

bool backend_takes(const Model& model, const Backend& backend, const Node& node, std::string* why) {
  return node_taken(model, backend, model.graph, node, why);
}

StatusOr<PartitionPlan> plan_partitions(const Model& model, const Backend& device, const Backend* host,
                                        bool allow_fallback) {
  const Graph& g = model.graph;
  PartitionPlan plan;
  plan.device = device.name();
  plan.host = host ? host->name() : "";
  plan.node_side.assign(g.nodes.size(), Side::kDevice);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    std::string why;
    if (node_taken(model, device, g, node, &why)) continue;
    if (!host)
      return unsupported(node.describe() + " (opset " + std::to_string(model.opset(node.domain)) +
                         "): not supported on " + device.name() + ": " + why);
    if (!allow_fallback)
      return unsupported(node.describe() + " (opset " + std::to_string(model.opset(node.domain)) +
                         "): not supported on " + device.name() + ": " + why +
                         "; fallback to " + host->name() + " is disabled (--no-fallback); allow it, or run `ferry check " +
                         "MODEL --target " + device.name() + "` for the fixes");
    plan.node_side[i] = Side::kHost;
    plan.fallbacks.push_back({i, why});
  }
  if (!host) {
    if (!g.nodes.empty()) plan.partitions.push_back({device.name(), Side::kDevice, 0, g.nodes.size()});
    return plan;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (plan.partitions.empty() || plan.partitions.back().side != plan.node_side[i])
      plan.partitions.push_back({plan.node_side[i] == Side::kDevice ? device.name() : host->name(), plan.node_side[i], i, 0});
    ++plan.partitions.back().num_nodes;
  }

  // Where each value is produced: graph inputs on the host; initializers are constants (none).
  std::map<std::string, Side> produced;
  for (const ValueInfo& v : g.inputs) produced[v.name] = Side::kHost;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const std::string& o : g.nodes[i].outputs)
      if (!o.empty()) produced[o] = plan.node_side[i];
  std::set<std::pair<std::string, Side>> seen;
  auto cross = [&](const std::string& value, Side to) {
    auto it = produced.find(value);
    if (it == produced.end() || it->second == to) return;  // initializer, outer value, same side
    if (!seen.insert({value, to}).second) return;
    plan.crossings.push_back({value, it->second, to, known_bytes(g, value)});
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    for (const std::string& in : node.inputs)
      if (!in.empty()) cross(in, plan.node_side[i]);
    for (const std::string& in : node.implicit_inputs) cross(in, plan.node_side[i]);
  }
  for (const ValueInfo& v : g.outputs) cross(v.name, Side::kHost);
  return plan;
}

}  // namespace ferry
