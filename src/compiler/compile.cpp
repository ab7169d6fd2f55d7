// The offline compiler; see compile.h.
#include "compiler/compile.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "backends/backend.h"
#include "backends/device_defaults.h"
#include "compiler/prepack.h"
#include "compiler/tuner.h"
#include "ops/shape_inference.h"
#include "passes/pipeline.h"
#include "passes/precision.h"

namespace ferry {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

StatusOr<std::vector<int64_t>> parse_ints(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  for (const std::string& part : split(text, ',')) {
    const std::string p = trim(part);
    char* end = nullptr;
    const long long v = std::strtoll(p.c_str(), &end, 10);
    if (p.empty() || *end != '\0' || v < 0 || v > kMaxTensorElements)
      return invalid_argument(what + ": '" + p + "' is not a dimension (a whole number >= 0); write e.g. 1,3,224,224");
    out.push_back(v);
  }
  return out;
}

std::string input_list(const Graph& g) {
  std::string names;
  for (const ValueInfo& v : g.inputs) names += (names.empty() ? "" : ", ") + v.name + " " + v.type.to_string();
  return names;
}

}  // namespace

Status parse_input_shapes(const std::vector<std::string>& specs,
                          std::vector<std::pair<std::string, std::vector<int64_t>>>* out) {
  for (const std::string& spec : specs) {
    for (const std::string& raw : split(spec, ';')) {
      const std::string item = trim(raw);
      if (item.empty()) continue;
      const size_t colon = item.rfind(':');
      if (colon == std::string::npos || colon == 0)
        return invalid_argument("--input-shape '" + item + "': expected NAME:D0,D1,... (e.g. image:1,3,224,224)");
      ASSIGN_OR_RETURN(auto dims, parse_ints(item.substr(colon + 1), "--input-shape '" + item + "'"));
      out->emplace_back(trim(item.substr(0, colon)), std::move(dims));
    }
  }
  return Status::ok();
}

StatusOr<std::vector<int64_t>> parse_batch_gears(const std::string& text) {
  ASSIGN_OR_RETURN(auto gears, parse_ints(text, "--dynamic-batch '" + text + "'"));
  std::sort(gears.begin(), gears.end());
  for (size_t i = 0; i < gears.size(); ++i) {
    if (gears[i] < 1) return invalid_argument("--dynamic-batch '" + text + "': batch sizes must be >= 1");
    if (i > 0 && gears[i] == gears[i - 1])
      return invalid_argument("--dynamic-batch '" + text + "': batch " + std::to_string(gears[i]) + " is listed twice");
  }
  if (gears.size() > 64) return invalid_argument("--dynamic-batch '" + text + "': at most 64 gears");
  return gears;
}

Status fix_input_shapes(Model* model, const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes,
                        int64_t batch) {
  Graph& g = model->graph;
  std::set<std::string> given;
  for (const auto& [name, dims] : shapes) {
    auto it = std::find_if(g.inputs.begin(), g.inputs.end(), [&](const ValueInfo& v) { return v.name == name; });
    if (it == g.inputs.end())
      return invalid_argument("--input-shape: the model has no input '" + name + "'; its inputs: " + input_list(g));
    if (it->type.kind != ValueKind::kTensor)
      return invalid_argument("--input-shape: input '" + name + "' is not a tensor (" + it->type.to_string() + ")");
    if (it->type.shape && it->type.shape->rank() != static_cast<int64_t>(dims.size()))
      return invalid_argument("--input-shape: input '" + name + "' is " + it->type.to_string() + " (rank " +
                              std::to_string(it->type.shape->rank()) + "), given " + std::to_string(dims.size()) +
                              " dims " + dims_to_string(dims));
    it->type.shape = Shape::of(dims);
    given.insert(name);
  }
  if (batch > 0) {
    for (ValueInfo& v : g.inputs) {
      if (v.type.kind != ValueKind::kTensor || !v.type.shape || v.type.shape->rank() == 0)
        return invalid_argument("--dynamic-batch: input '" + v.name + "' (" + v.type.to_string() +
                                ") has no first (batch) dimension; every input must have one");
      Dim& d0 = v.type.shape->dims[0];
      if (d0.is_known() && d0.value != batch && !given.count(v.name))
        return invalid_argument("--dynamic-batch: input '" + v.name + "' is " + v.type.to_string() +
                                ": its batch dimension is fixed at " + std::to_string(d0.value) +
                                "; re-export the model with a dynamic batch axis (dynamic_axes)");
      d0 = Dim(batch);
    }
  }
  // Forget the types inferred for the old shapes; keep inputs and weights, then infer again.
  g.value_types.clear();
  for (const ValueInfo& v : g.inputs) g.value_types[v.name] = v.type;
  for (const auto& [name, t] : g.initializers) g.value_types[name] = t.type();
  std::string what = "after fixing the input shapes";
  if (batch > 0) what += " (batch " + std::to_string(batch) + ")";
  return infer_shapes(model).with_context(what);
}

StatusOr<CompiledModelSpec> compile_model(const Model& source, const CompileOptions& options, CompileReport* report) {
  CompiledModelSpec spec;
  spec.source = source.path;
  spec.device = options.device;
  spec.opt_level = options.opt_level >= 0 ? options.opt_level : default_opt_level(options.device);
  PrecisionOptions precision;
  ASSIGN_OR_RETURN(precision.mode, parse_precision_mode(options.precision_mode));
  if (!options.precision_config.empty()) RETURN_IF_ERROR(load_precision_config(options.precision_config, &precision));
  spec.precision_mode = precision_mode_name(precision.mode);

  std::vector<int64_t> gears = options.batch_gears;
  if (gears.empty()) gears.push_back(0);
  CompileReport local;
  CompileReport& rep = report ? *report : local;
  rep.nodes_before = static_cast<int64_t>(source.graph.nodes.size());
  for (size_t i = 0; i < gears.size(); ++i) {
    const int64_t batch = gears[i];
    const std::string gear_name = batch > 0 ? "batch " + std::to_string(batch) : "plan";
    if (options.progress) options.progress("optimize", static_cast<int64_t>(i), static_cast<int64_t>(gears.size()), gear_name);
    std::shared_ptr<Model> m = source.clone();
    if (!options.input_shapes.empty() || batch > 0) RETURN_IF_ERROR(fix_input_shapes(m.get(), options.input_shapes, batch));
    if (spec.opt_level > 0) {
      OptimizeOptions oo;
      oo.opt_level = spec.opt_level;
      oo.device_traits = device_graph_traits(options.device);
      RETURN_IF_ERROR(optimize_model(m.get(), oo));
    }
    if (!precision.is_identity()) RETURN_IF_ERROR(apply_precision(m.get(), precision).with_context("--precision-mode"));
    if (options.tune) {
      TuneOptions to;
      to.device = options.device;
      to.threads = i == 0 ? options.threads : spec.threads;
      to.cache_path = options.tuning_cache;
      to.progress = options.progress;
      to.label = gear_name;
      TuneResult tr;
      RETURN_IF_ERROR(tune_model(m.get(), to, &tr).with_context("--tune (" + gear_name + ")"));
      if (i == 0) spec.threads = tr.threads;
      rep.tuned_nodes += tr.timed;
      rep.cache_hits += tr.cache_hits;
      rep.changed_nodes += tr.changed;
      for (TuningChoice& c : tr.choices) {
        if (batch > 0) c.node += " @batch " + std::to_string(batch);
        spec.tuning.push_back(std::move(c));
      }
    }
    if (options.prepack) {
      if (options.progress) options.progress("optimize", static_cast<int64_t>(i), static_cast<int64_t>(gears.size()), gear_name + ": packing weights");
      ASSIGN_OR_RETURN(PrepackReport pr, prepack_weights(m, options.device, spec.threads > 0 ? spec.threads : options.threads));
      rep.packed_nodes += pr.nodes;
      rep.packed_bytes += pr.bytes;
    }
    if (i == 0) rep.nodes_after = static_cast<int64_t>(m->graph.nodes.size());
    spec.gears.push_back({batch, std::move(m)});
  }
  if (options.progress) options.progress("optimize", static_cast<int64_t>(gears.size()), static_cast<int64_t>(gears.size()), "done");
  return spec;
}

}  // namespace ferry
