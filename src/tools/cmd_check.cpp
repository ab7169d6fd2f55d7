// `ferry check MODEL --target T[,T...] [--json] [--no-fallback]`: will the model run on each
// target, and if not, which nodes, why, and what to do. Exit 0 when every target passes, 2 when
// one fails (CI-friendly), 2 for an unknown target or an unreadable model.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "check/model_check.h"
#include "onnx/onnx_import.h"
#include "train/training_graph.h"
#include "tools/cli_common.h"
#include "tools/command_registry.h"

namespace ferry::cli {
namespace {

using nlohmann::json;

struct CheckCliOptions {
  std::string model;
  std::string targets;
  bool json = false;
  bool no_fallback = false;
  bool all_nodes = false;
  bool train = false;
};

std::vector<std::string> split_targets(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string t;
  while (std::getline(in, t, ','))
    if (!t.empty()) out.push_back(t);
  return out;
}

std::string bytes_text(int64_t b) { return b < 0 ? "dynamic (counted per run by `ferry profile`)" : human_bytes(b); }

json plan_json(const Model& m, const PartitionPlan& plan) {
  json parts = json::array();
  for (const Partition& p : plan.partitions)
    parts.push_back({{"backend", p.backend}, {"first_node", m.graph.nodes.size() > p.first_node ? m.graph.nodes[p.first_node].name : ""},
                     {"nodes", p.num_nodes}});
  json crossings = json::array();
  for (const Crossing& c : plan.crossings)
    crossings.push_back({{"value", c.value}, {"to", c.to == Side::kDevice ? "device" : "host"}, {"bytes", c.static_bytes}});
  return {{"partitions", parts}, {"boundaries", plan.boundaries()}, {"bytes_per_inference", plan.static_bytes()},
          {"crossings", crossings}};
}

json target_json(const Model& m, const TargetCheck& tc) {
  json findings = json::array();
  for (const NodeFinding& f : tc.findings) {
    json j = {{"node", f.node}, {"op", f.op}, {"opset", f.opset}, {"verdict", node_verdict_name(f.verdict)},
              {"reason", f.reason}, {"fix", f.fix}};
    if (!f.target_says.empty()) j["target_says"] = f.target_says;
    findings.push_back(j);
  }
  json j = {{"target", tc.target}, {"kind", tc.kind}, {"title", tc.title}, {"passed", tc.passed()},
            {"verdict", tc.verdict()}, {"unavailable", tc.unavailable},
            {"nodes", tc.nodes}, {"runs", tc.runs}, {"decomposed", tc.decomposed}, {"fallback", tc.fallback},
            {"fails", tc.fails}, {"findings", findings}, {"notes", tc.notes}};
  if (tc.plan) j["partitions"] = plan_json(m, *tc.plan);
  return j;
}

/// Prints findings, grouping nodes with the same op, verdict, reason and fix.
void print_findings(const TargetCheck& tc, bool all_nodes) {
  struct Group {
    const NodeFinding* first;
    std::vector<std::string> nodes;
  };
  std::vector<Group> groups;
  std::map<std::string, size_t> index;
  for (const NodeFinding& f : tc.findings) {
    const std::string key = all_nodes ? f.node : f.op + "|" + node_verdict_name(f.verdict) + "|" + f.reason + "|" + f.fix;
    auto it = index.find(key);
    if (it == index.end()) {
      index[key] = groups.size();
      groups.push_back({&f, {}});
      it = index.find(key);
    }
    groups[it->second].nodes.push_back(f.node);
  }
  for (const Group& g : groups) {
    const NodeFinding& f = *g.first;
    std::string who = "node '" + f.node + "'";
    if (g.nodes.size() > 1) {
      who = std::to_string(g.nodes.size()) + " nodes ('" + g.nodes[0] + "', '" + g.nodes[1] + "'" +
            (g.nodes.size() > 2 ? ", ..." : "") + ")";
    }
    std::printf("  [%s] %s (%s, opset %lld): %s\n", node_verdict_name(f.verdict), who.c_str(), f.op.c_str(),
                static_cast<long long>(f.opset), f.reason.c_str());
    if (!f.fix.empty()) std::printf("      fix: %s\n", f.fix.c_str());
    if (!f.target_says.empty() && f.verdict == NodeVerdict::kFails)
      std::printf("      target says: %s\n", f.target_says.c_str());
  }
}

void print_plan(const Model& m, const PartitionPlan& plan) {
  std::printf("  partitions (%zu):", plan.partitions.size());
  for (const Partition& p : plan.partitions) std::printf(" [%s: %zu nodes]", p.backend.c_str(), p.num_nodes);
  std::printf("\n  device<->host copies per inference: %lld, %s\n", static_cast<long long>(plan.boundaries()),
              bytes_text(plan.static_bytes()).c_str());
}

// `--train`: the nodes without a gradient on the way from the trained parameters to the loss.
int run_train_check(const CheckCliOptions& opt) {
  ImportOptions io;
  io.infer_shapes = false;  // training-mode BatchNormalization is rewritten first
  auto loaded = load_onnx_model(opt.model, io);
  if (!loaded.is_ok()) return report(loaded.status());
  TrainGraphOptions to;
  to.batch_size = 2;
  auto missing = untrainable_nodes(*loaded.value(), to);
  if (!missing.is_ok()) return report(missing.status());
  const auto& nodes = missing.value();
  if (opt.json) {
    json j = {{"model", opt.model}, {"trainable", nodes.empty()}, {"nodes_without_gradient", nodes}};
    std::printf("%s\n", j.dump(2).c_str());
  } else if (nodes.empty()) {
    std::printf("train: PASS, every op on the way from the parameters to the loss has a gradient\n");
  } else {
    std::printf("train: FAIL, %zu node(s) have no gradient:\n", nodes.size());
    for (const auto& n : nodes) std::printf("  %s\n", n.c_str());
    std::printf("  freeze the parameters before them (--freeze REGEX) or replace these ops in the exported model\n");
  }
  return nodes.empty() ? kExitOk : kExitBadInput;
}

int run_check(const CheckCliOptions& opt) {
  if (opt.train && opt.targets.empty()) return run_train_check(opt);
  if (opt.train) {
    const int rc = run_train_check(opt);
    if (rc != kExitOk) return rc;
  }
  const std::vector<std::string> names = opt.targets == "all" ? check_targets() : split_targets(opt.targets);
  if (names.empty()) return report(invalid_argument("--target is empty (or give --train); targets: cpu, cpu-ref, tensorrt-10.1, ... or 'all'"));
  auto loaded = load_model(opt.model, /*require_known_ops=*/false);
  if (!loaded.is_ok()) return report(loaded.status());
  const Model& m = *loaded.value();
  CheckOptions co;
  co.no_fallback = opt.no_fallback;
  std::vector<TargetCheck> results;
  for (const std::string& t : names) {
    auto r = check_model(m, t, co);
    if (!r.is_ok()) return report(r.status());
    results.push_back(std::move(r).value());
  }
  // A device named explicitly must be checkable here; with 'all', devices that are not here
  // (no GPU) are reported as unknown without failing the run.
  bool all_passed = true;
  for (const TargetCheck& tc : results) all_passed &= tc.passed() || (opt.targets == "all" && !tc.unavailable.empty());
  if (opt.json) {
    json j = {{"model", opt.model}, {"opset", m.opset("")}, {"passed", all_passed}, {"targets", json::array()}};
    for (const TargetCheck& tc : results) j["targets"].push_back(target_json(m, tc));
    std::printf("%s\n", j.dump(2).c_str());
    return all_passed ? kExitOk : kExitBadInput;
  }
  std::printf("model: %s (opset %lld, %zu nodes in the main graph)\n", opt.model.c_str(), static_cast<long long>(m.opset("")),
              m.graph.nodes.size());
  for (const TargetCheck& tc : results) {
    const char* verdict = !tc.unavailable.empty() ? "UNKNOWN (device not here)"
                          : !tc.passed()         ? "FAIL"
                          : tc.findings.empty()  ? "PASS, every node runs"
                                                 : "PASS";
    std::printf("\n%s — %s (%s): %s\n", tc.target.c_str(), tc.title.c_str(), tc.kind.c_str(), verdict);
    for (const std::string& n : tc.notes) std::printf("  note: %s\n", n.c_str());
    print_findings(tc, opt.all_nodes);
    if (tc.plan) print_plan(m, *tc.plan);
  }
  std::printf("\nsummary\n  %-18s %-8s %6s %6s %10s %9s %6s\n", "target", "verdict", "nodes", "runs", "decomposed",
              "fallback", "fails");
  for (const TargetCheck& tc : results)
    std::printf("  %-18s %-8s %6lld %6lld %10lld %9lld %6lld\n", tc.target.c_str(), tc.verdict(),
                static_cast<long long>(tc.nodes), static_cast<long long>(tc.runs), static_cast<long long>(tc.decomposed),
                static_cast<long long>(tc.fallback), static_cast<long long>(tc.fails));
  return all_passed ? kExitOk : kExitBadInput;
}

const bool kRegistered = register_command({"check", 30, [](CLI::App& app) {
  auto opt = std::make_shared<CheckCliOptions>();
  CLI::App* cmd = app.add_subcommand("check", "Will the model run on a target? Every node that will not, why, and the fix");
  cmd->add_option("model", opt->model, "ONNX model file (.onnx)")->required();
  cmd->add_option("--target,-T", opt->targets,
                  "Comma-separated targets: ferry backends (cpu, cpu-ref, cuda) and external profiles (tensorrt-10.1, "
                  "ascend-atc-2025, ascend-atc-2022, openvino), or 'all'")
      ;
  cmd->add_flag("--train", opt->train, "Can `ferry train` train it: every op on the way from the parameters to the loss "
                "that has no gradient, by node (answered from the gradient registry)");
  cmd->add_flag("--json", opt->json, "Print JSON instead of text");
  cmd->add_flag("--no-fallback", opt->no_fallback, "Nodes a ferry device lacks are failures instead of CPU fallback");
  cmd->add_flag("--all-nodes", opt->all_nodes, "List every node instead of grouping nodes with the same finding");
  return CommandRun{cmd, [opt] { return run_check(*opt); }};
}});

}  // namespace
}  // namespace ferry::cli
