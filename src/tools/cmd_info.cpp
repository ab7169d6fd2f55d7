// `ferry info MODEL [--json] [--resident]`: what the model is, and how its weights are stored;
// with --resident, what one process running it holds by kind (Executor::resident_bytes).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "ops/registry.h"
#include "format/compiled_model.h"
#include "ir/packed_layout.h"
#include "onnx/onnx_import.h"
#include "tools/bench_common.h"
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

// What a process running the model holds (--resident): the executor made as `ferry bench` makes it
// (an .onnx file's weights released to their kernels once packed), two runs on random inputs (the
// first packs what it needs and records the memory plan, the second binds the arena), then
// Executor::resident_bytes and the peak RSS. Made before anything else is loaded, so the process
// holds this model once.
struct Resident {
  ResidentBytes bytes;
  int64_t peak_rss = 0;
  int threads = 1;
  int64_t batch = 1;
};
StatusOr<Resident> measure_resident(const InfoOptions& opt) {
  BenchOptions bo;
  bo.model = opt.model;
  bo.device = opt.device;
  bo.threads = opt.threads;
  bo.batch = opt.batch;
  ASSIGN_OR_RETURN(BenchSetup b, prepare_bench(bo));
  NamedTensors out;
  for (int i = 0; i < 2; ++i) RETURN_IF_ERROR(b.executor->run(b.feeds, &out).with_context("--resident: run " + std::to_string(i + 1)));
  out.clear();
  Resident r;
  r.bytes = b.executor->resident_bytes();
  r.peak_rss = peak_rss_bytes();
  r.threads = b.threads;
  r.batch = b.batch;
  return r;
}

std::string count_of(int64_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

}  // namespace

int cmd_info(const InfoOptions& opt) {
  std::optional<Resident> resident;
  if (opt.resident) {
    auto r = measure_resident(opt);
    if (!r.is_ok()) return report(r.status().with_context(opt.model));
    resident = r.value();
  }
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
  const StoredWeights stored = stored_weights(g);
  std::error_code ec;
  const auto size = std::filesystem::file_size(opt.model, ec);
  const int64_t file_bytes = ec ? -1 : static_cast<int64_t>(size);
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
    if (file_bytes >= 0) j["file_bytes"] = file_bytes;
    j["weights_stored"] = {{"plain_bytes", stored.plain_bytes},
                           {"plain_count", stored.plain_count},
                           {"packed_only_bytes", stored.packed_only_bytes},
                           {"packed_only_count", stored.packed_only_count},
                           {"packed_beside_bytes", stored.packed_beside_bytes},
                           {"packed_beside_nodes", stored.packed_beside_nodes}};
    if (resident) {
      const ResidentBytes& r = resident->bytes;
      j["resident_bytes"] = {{"weights", r.weights}, {"packed_weights", r.packed_weights}, {"arena", r.arena},
                             {"other", r.other}, {"process", r.process}, {"peak_rss", resident->peak_rss},
                             {"device", opt.device}, {"threads", resident->threads}, {"batch", resident->batch}};
    }
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
  // How the weights are stored: what a load maps or reads, before any kernel makes its own form.
  std::string weights = human_bytes(stored.plain_bytes) + " plain (" + count_of(stored.plain_count, "tensor") + ")";
  if (stored.packed_only_count > 0)
    weights += ", " + human_bytes(stored.packed_only_bytes) + " only in their kernels' packed layout (" +
               count_of(stored.packed_only_count, "tensor") + ")";
  if (stored.packed_beside_nodes > 0)
    weights += ", " + human_bytes(stored.packed_beside_bytes) + " of packed forms beside plain weights (" +
               count_of(stored.packed_beside_nodes, "node") + ")";
  if (file_bytes >= 0) weights += "; file " + human_bytes(file_bytes);
  std::printf("weights:    %s\n", weights.c_str());
  if (resident) {
    const ResidentBytes& r = resident->bytes;
    std::printf("resident:   %s after two runs (%s, %d thread%s, batch %lld): weights %s, packed weights %s, arena %s, "
                "other %s (code, libraries, heap); peak RSS %s\n",
                human_bytes(r.process).c_str(), opt.device.c_str(), resident->threads, resident->threads == 1 ? "" : "s",
                static_cast<long long>(resident->batch), human_bytes(r.weights).c_str(),
                human_bytes(r.packed_weights).c_str(), human_bytes(r.arena).c_str(), human_bytes(r.other).c_str(),
                human_bytes(resident->peak_rss).c_str());
  } else {
    std::printf("            (--resident runs it and reports what the process holds: weights, packed weights, arena, other)\n");
  }
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
  cmd->add_option("-b,--batch", opt->batch, "A compiled model with batch gears: describe the gear that runs this batch (default: the smallest gear); with --resident, the batch run")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--resident", opt->resident,
                "Make the executor, run it twice on random inputs and report the resident bytes by kind (weights, packed weights, arena, other) and the peak RSS");
  cmd->add_option("-d,--device", opt->device, "With --resident: the device to run on (default cpu)");
  cmd->add_option("-t,--threads", opt->threads, "With --resident: intra-op threads (default: all cores)")->check(CLI::NonNegativeNumber);
  return CommandRun{cmd, [opt] { return cmd_info(*opt); }};
}});
}  // namespace

}  // namespace ferry::cli
