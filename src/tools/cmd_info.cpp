// `ferry info MODEL [--json]`: what the model is.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "ops/registry.h"
#include "format/compiled_model.h"
#include "onnx/onnx_import.h"
#include "tools/cli_common.h"
#include "tools/gear_cli.h"
#include "tools/command_registry.h"
#include "tools/commands.h"

namespace ferry::cli {
namespace {

using nlohmann::json;

json type_json(const TensorType& t) {
  json dims = json::array();
  if (t.shape)
    for (const Dim& d : t.shape->dims) {
      if (d.is_known()) dims.push_back(d.value);
      else dims.push_back(d.symbol.empty() ? "?" : d.symbol);
    }
  return json{{"dtype", dtype_name(t.dtype)}, {"shape", t.shape ? dims : json(nullptr)}};
}

void count_ops(const Model& m, const Graph& g, std::map<std::string, int64_t>* hist, int64_t* nodes,
               std::map<std::string, int64_t>* missing) {
  for (const Node& n : g.nodes) {
    const std::string op = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
    ++(*hist)[op];
    ++*nodes;
    if (!op_registry().find(n.domain, n.op_type, m.opset(n.domain))) ++(*missing)[op];
    for (const auto& [k, a] : n.attrs) {
      if (a.g) count_ops(m, *a.g, hist, nodes, missing);
      for (const auto& sg : a.graphs) count_ops(m, *sg, hist, nodes, missing);
    }
  }
}

}  // namespace

int cmd_info(const InfoOptions& opt) {
  std::shared_ptr<Model> model;
  std::string gears;  // a compiled model's batch gears, "1,2,4,8"
  std::string shapes_note;  // why shapes were not inferred (described as the file has them)
  if (is_compiled_model_file(opt.model)) {
    auto loaded = load_geared_model(opt.model);
    if (!loaded.is_ok()) return report(loaded.status());
    auto gear = choose_gear(loaded.value(), opt.batch > 0 ? opt.batch : 1);
    if (!gear.is_ok()) return report(gear.status().with_context(opt.model));
    model = gear.value().model;
    gears = loaded.value().gear_list();
  } else {
    auto loaded = load_model(opt.model, /*require_known_ops=*/false);
    if (!loaded.is_ok()) {
      // A model ferry cannot infer shapes for (a training-mode export, the file `ferry train`
      // takes) is still described, as it is in the file, with the reason shapes are missing.
      ImportOptions io;
      io.require_known_ops = false;
      io.infer_shapes = false;
      if (loaded.status().code() != StatusCode::kUnsupported) return report(loaded.status());  // broken: say so
      auto raw = load_onnx_model(opt.model, io);
      if (!raw.is_ok()) return report(loaded.status());
      shapes_note = loaded.status().message();
      loaded = raw;
    }
    model = loaded.value();
  }
  const Model& m = *model;
  const Graph& g = m.graph;
  std::map<std::string, int64_t> hist, missing;
  int64_t nodes = 0;
  count_ops(m, g, &hist, &nodes, &missing);
  int64_t params = 0, param_bytes = 0;
  for (const auto& [name, t] : g.initializers) {
    params += t.numel();
    param_bytes += t.nbytes();
  }
  std::vector<std::pair<std::string, int64_t>> ops(hist.begin(), hist.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });

  if (opt.json) {
    json j;
    j["model"] = opt.model;
    j["producer"] = {{"name", m.producer_name}, {"version", m.producer_version}};
    j["ir_version"] = m.ir_version;
    json opsets = json::object();
    for (const auto& [d, v] : m.opset_imports) opsets[d.empty() ? "ai.onnx" : d] = v;
    j["opset_imports"] = opsets;
    if (m.upgraded_from_opset > 0) j["upgraded_from_opset"] = m.upgraded_from_opset;
    j["inputs"] = json::array();
    for (const ValueInfo& v : g.inputs) {
      json e = type_json(v.type);
      e["name"] = v.name;
      j["inputs"].push_back(e);
    }
    j["outputs"] = json::array();
    for (const ValueInfo& v : g.outputs) {
      json e = type_json(v.type);
      e["name"] = v.name;
      j["outputs"].push_back(e);
    }
    j["node_count"] = nodes;
    json h = json::array();
    for (const auto& [op, n] : ops) h.push_back({{"op", op}, {"count", n}});
    j["op_histogram"] = h;
    j["initializer_count"] = g.initializers.size();
    j["parameter_count"] = params;
    j["parameter_bytes"] = param_bytes;
    if (!m.metadata.empty()) j["metadata"] = m.metadata;
    j["unsupported_ops"] = missing;
    if (!gears.empty()) j["batch_gears"] = gears;
    if (!shapes_note.empty()) j["shapes_not_inferred"] = shapes_note;
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("model:      %s\n", opt.model.c_str());
  std::printf("producer:   %s %s (ir_version %lld)\n", m.producer_name.empty() ? "(unknown)" : m.producer_name.c_str(),
              m.producer_version.c_str(), static_cast<long long>(m.ir_version));
  std::string opsets;
  for (const auto& [d, v] : m.opset_imports)
    opsets += (opsets.empty() ? "" : ", ") + (d.empty() ? std::string("ai.onnx") : d) + " " + std::to_string(v);
  if (m.upgraded_from_opset > 0)
    opsets += " (upgraded at import from ai.onnx opset " + std::to_string(m.upgraded_from_opset) + ")";
  std::printf("opsets:     %s\n", opsets.c_str());
  if (!gears.empty())
    std::printf("gears:      batch %s (shapes below: the gear for batch %lld; --batch B picks another)\n", gears.c_str(),
                static_cast<long long>(opt.batch > 0 ? opt.batch : 1));
  if (!shapes_note.empty())
    std::printf("note:       shapes as the file declares them, not inferred: %s\n", shapes_note.c_str());
  std::printf("inputs:\n");
  for (const ValueInfo& v : g.inputs) std::printf("  %-24s %s\n", v.name.c_str(), v.type.to_string().c_str());
  std::printf("outputs:\n");
  for (const ValueInfo& v : g.outputs) std::printf("  %-24s %s\n", v.name.c_str(), v.type.to_string().c_str());
  std::printf("parameters: %lld in %zu initializers (%s)\n", static_cast<long long>(params), g.initializers.size(),
              human_bytes(param_bytes).c_str());
  std::printf("nodes:      %lld\n", static_cast<long long>(nodes));
  for (const auto& [op, n] : ops)
    std::printf("  %-24s %lld%s\n", op.c_str(), static_cast<long long>(n), missing.count(op) ? "  (not implemented)" : "");
  if (!missing.empty()) {
    std::printf("not runnable: %zu op type(s) are not implemented by ferry:", missing.size());
    for (const auto& [op, n] : missing) std::printf(" %s", op.c_str());
    std::printf("\n");
  }
  return kExitOk;
}

namespace {
const bool kRegistered = register_command({"info", 20, [](CLI::App& app) {
  auto opt = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "Describe a model: inputs, outputs, opsets, producer, op histogram, parameters");
  cmd->add_option("model", opt->model, "ONNX model file (.onnx) or compiled model (.ferry)")->required();
  cmd->add_flag("--json", opt->json, "Print JSON instead of text");
  cmd->add_option("-b,--batch", opt->batch, "A compiled model with batch gears: describe the gear that runs this batch (default: the smallest gear)")
      ->check(CLI::PositiveNumber);
  return CommandRun{cmd, [opt] { return cmd_info(*opt); }};
}});
}  // namespace

}  // namespace ferry::cli
