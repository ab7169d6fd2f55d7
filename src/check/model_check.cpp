// Per-node verdicts for ferry backends and external profiles; see model_check.h.
#include "check/model_check.h"

#include <algorithm>

#include "check/target_profile.h"
#include "ops/registry.h"
#include "passes/decompositions.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

std::string op_label(const Node& n) { return n.domain.empty() || n.domain == "ai.onnx" ? n.op_type : n.domain + "::" + n.op_type; }

void count(TargetCheck* tc, NodeFinding f) {
  ++tc->nodes;
  switch (f.verdict) {
    case NodeVerdict::kRuns: ++tc->runs; return;
    case NodeVerdict::kDecomposed: ++tc->decomposed; break;
    case NodeVerdict::kFallback: ++tc->fallback; break;
    case NodeVerdict::kFails: ++tc->fails; break;
  }
  tc->findings.push_back(std::move(f));
}

std::string decomposition_fix(const Decomposition& d, bool ferry_backend) {
  if (ferry_backend)
    return std::string("ferry's decompose pass rewrites it as ") + d.formula + " (automatic at --opt-level 1 and above)";
  return std::string("expressible as ") + d.formula + " with ops the target has: rewrite it so in the exported graph";
}

std::string reexport_fix(int64_t opset) {
  return "re-export at opset " + std::to_string(opset) + " (torch.onnx.export(..., opset_version=" + std::to_string(opset) + "))";
}

// ---- ferry backends -------------------------------------------------------------------------

/// The backend for `target`, or nullptr with tc->unavailable set when the device is not here.
StatusOr<std::unique_ptr<Backend>> backend_for(const std::string& target, TargetCheck* tc) {
  for (const BackendEntry& e : backend_entries()) {
    const std::string name = e.name;
    if (target != name && target.rfind(name + ":", 0) != 0) continue;
    tc->title = e.summary;
    auto opened = make_backend(target);
    if (opened.is_ok()) return std::move(opened).value();
    tc->unavailable = opened.status().message();
    return std::unique_ptr<Backend>();
  }
  return Status(StatusCode::kNotFound, "");
}

Status check_on_backend(const Model& model, const std::string& target, const CheckOptions& options, TargetCheck* tc) {
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> device, backend_for(target, tc));
  tc->kind = "ferry backend";
  if (!device) {
    // Which ops the device takes is only known with the device here; say so instead of guessing.
    tc->nodes = static_cast<int64_t>(model.graph.nodes.size());
    tc->notes.push_back("cannot check on " + target + " here: " + tc->unavailable +
                        " (`ferry doctor` says more); run `ferry check` where the device is");
    return Status::ok();
  }
  std::unique_ptr<Backend> host;
  if (!is_host_backend(*device)) {
    ASSIGN_OR_RETURN(host, make_backend("cpu"));
  }
  const Graph& g = model.graph;
  for (const Node& node : g.nodes) {
    NodeFinding f{node.name, op_label(node), model.opset(node.domain)};
    auto schema = resolve_schema(node, f.opset);
    const Decomposition* d = find_decomposition(node.domain, node.op_type);
    auto device_runs = [&](const std::string& op) {
      Node probe;
      probe.name = "probe";
      probe.op_type = op;
      probe.inputs = {node.inputs.empty() ? "" : node.inputs[0]};
      probe.outputs = {"probe:0"};
      return backend_takes(model, *device, probe, nullptr);
    };
    std::string why;
    if (!schema.is_ok()) {
      f.verdict = NodeVerdict::kFails;
      f.reason = schema.status().message();
      f.fix = d ? std::string("replace it by ") + d->formula : "ferry does not implement it: `ferry ops` lists the opsets it has";
    } else if (backend_takes(model, *device, node, &why)) {
      f.verdict = NodeVerdict::kRuns;
    } else if (d && can_decompose(model, g, node, nullptr) && decomposition_accepted(*d, device_runs)) {
      f.verdict = NodeVerdict::kDecomposed;
      f.reason = why;
      f.fix = decomposition_fix(*d, true);
    } else if (host && !options.no_fallback) {
      f.verdict = NodeVerdict::kFallback;
      f.reason = why;
      f.fix = "runs on the CPU (" + host->name() + "), with copies at the boundaries (see partitions)";
    } else {
      f.verdict = NodeVerdict::kFails;
      f.reason = why;
      f.fix = host ? "allow CPU fallback (drop --no-fallback)" : "no fix known: the op has no kernel here";
    }
    count(tc, std::move(f));
  }
  if (!host || tc->fails > 0) return Status::ok();
  // The partitions as the executor makes them: decompositions applied, the rest on the CPU.
  std::shared_ptr<Model> copy = model.clone();
  OptimizeOptions oo;
  oo.opt_level = 1;
  oo.device_traits = device->graph_traits();
  for (const GraphPass& p : graph_passes())
    if (std::string(p.name) != "decompose") oo.disabled.push_back(p.name);
  const Backend* dev = device.get();
  oo.device_supports = [dev](const Model& m, const Node& n) { return backend_takes(m, *dev, n, nullptr); };
  RETURN_IF_ERROR(optimize_model(copy.get(), oo));
  ASSIGN_OR_RETURN(PartitionPlan plan, plan_partitions(*copy, *device, host.get(), true));
  tc->plan = std::move(plan);
  return Status::ok();
}

// ---- external profiles ----------------------------------------------------------------------

/// The value whose element type a profile's dtype list describes: input 0, except Where's
/// condition and ConstantOfShape's shape input (its output's type counts).
std::string typed_value(const Node& n) {
  if (n.op_type == "ConstantOfShape") return n.outputs.empty() ? "" : n.outputs[0];
  const size_t k = n.op_type == "Where" ? 1 : 0;
  return k < n.inputs.size() ? n.inputs[k] : "";
}

void check_graph_on_profile(const Model& model, const Graph& g, const TargetProfile& p, const std::string& prefix,
                            TargetCheck* tc, bool* used_core_ops) {
  for (const Node& node : g.nodes) {
    NodeFinding f{prefix + node.name, op_label(node), model.opset(node.domain)};
    auto op_it = p.ops.find(node.op_type);
    if (op_it != p.ops.end()) f.target_says = op_it->second.restrictions;
    const Decomposition* d = find_decomposition(node.domain, node.op_type);
    std::string why;
    int64_t fix_opset = 0;
    bool op_level = true;  // the op itself is missing (a decomposition can help), not a restriction
    bool ok;
    if (!node.domain.empty() && node.domain != "ai.onnx") {
      why = "custom domain '" + node.domain + "': the target's ONNX parser has no such ops";
      ok = false;
    } else {
      ok = p.accepts(node.op_type, f.opset, &why, &fix_opset);
      if (ok && std::find(p.core_ops.begin(), p.core_ops.end(), node.op_type) != p.core_ops.end()) *used_core_ops = true;
    }
    if (ok && op_it != p.ops.end() && !op_it->second.dtypes.empty()) {
      const std::string typed = typed_value(node);
      const TensorType* t = typed.empty() ? nullptr : g.find_type(typed);
      const auto& dts = op_it->second.dtypes;
      if (t && t->dtype != DType::kUndefined && std::find(dts.begin(), dts.end(), t->dtype) == dts.end()) {
        ok = false;
        why = std::string("element type ") + dtype_name(t->dtype) + " ('" + typed + "')" +
              " is not among the types the target lists for " + node.op_type;
        op_level = false;
        f.reason = why;
        f.fix = "compute this node in a type the target lists (cast around it), or keep it off the target";
      }
    }
    if (ok) {
      auto broken = p.broken_rules(g, node, f.opset);
      op_level = false;
      if (!broken.empty()) {
        ok = false;
        for (const auto& [reason, fix] : broken) {
          f.reason += (f.reason.empty() ? "" : "; ") + reason;
          f.fix += (f.fix.empty() ? "" : "; ") + fix;
        }
      }
    }
    if (ok) {
      f.verdict = NodeVerdict::kRuns;
    } else if (op_level && d && can_decompose(model, g, node, nullptr) &&
               decomposition_accepted(*d, [&](const std::string& op) {
                 std::string w;
                 int64_t o = 0;
                 return p.accepts(op, f.opset, &w, &o);
               })) {
      f.verdict = NodeVerdict::kDecomposed;
      f.reason = why;
      f.fix = decomposition_fix(*d, false);
    } else {
      f.verdict = NodeVerdict::kFails;
      if (op_level) {
        f.reason = why;
        if (fix_opset > 0) f.fix = reexport_fix(fix_opset);
        else f.fix = "keep this node off the target: " + p.fallback;
      }
    }
    count(tc, std::move(f));
    for (const auto& [k, a] : node.attrs) {
      if (a.g) check_graph_on_profile(model, *a.g, p, prefix + node.name + "/", tc, used_core_ops);
      for (const auto& sg : a.graphs) check_graph_on_profile(model, *sg, p, prefix + node.name + "/", tc, used_core_ops);
    }
  }
}

void check_on_profile(const Model& model, const TargetProfile& p, TargetCheck* tc) {
  tc->kind = "external profile";
  tc->title = p.title;
  bool used_core_ops = false;
  check_graph_on_profile(model, model.graph, p, "", tc, &used_core_ops);
  if (used_core_ops) {
    std::string ops;
    for (const std::string& o : p.core_ops) ops += (ops.empty() ? "" : ", ") + o;
    tc->notes.push_back(ops + " are handled by the parser core and absent from the profile: treated as supported");
  }
}

}  // namespace

const char* node_verdict_name(NodeVerdict v) {
  switch (v) {
    case NodeVerdict::kRuns: return "runs";
    case NodeVerdict::kDecomposed: return "decomposed";
    case NodeVerdict::kFallback: return "fallback";
    case NodeVerdict::kFails: return "fails";
  }
  return "?";
}

std::vector<std::string> check_targets() {
  std::vector<std::string> names;
  for (const BackendEntry& e : backend_entries()) names.push_back(e.name);
  for (const auto& [name, p] : target_profiles()) names.push_back(name);
  return names;
}

StatusOr<TargetCheck> check_model(const Model& model, const std::string& target, const CheckOptions& options) {
  TargetCheck tc;
  tc.target = target;
  auto profile = target_profiles().find(target);
  if (profile != target_profiles().end()) {
    check_on_profile(model, profile->second, &tc);
    return tc;
  }
  Status st = check_on_backend(model, target, options, &tc);
  if (st.code() == StatusCode::kNotFound && st.message().empty()) {
    std::string known;
    for (const std::string& n : check_targets()) known += (known.empty() ? "" : ", ") + n;
    return invalid_argument("unknown target '" + target + "'; targets: " + known);
  }
  RETURN_IF_ERROR(st);
  return tc;
}

}  // namespace ferry
