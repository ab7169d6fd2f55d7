// Runs the registered passes in order; see pipeline.h.
#include "passes/pipeline.h"

#include <algorithm>
#include <chrono>

#include "common/env_switch.h"
#include "ops/shape_inference.h"

namespace ferry {

#define P(name) GraphPass name##_pass();
#include "passes/passes.inc"
#undef P

const std::vector<GraphPass>& graph_passes() {
  static const std::vector<GraphPass> passes = {
#define P(name) name##_pass(),
#include "passes/passes.inc"
#undef P
  };
  return passes;
}

namespace {

// FERRY_DISABLE_PASSES=a,b: the passes named are skipped, as OptimizeOptions::disabled (to isolate a
// pass, or to compare a graph with and without it). A name that is no pass is refused.
Status passes_disabled_by_env(std::vector<std::string>* out) {
  const char* e = env_value("FERRY_DISABLE_PASSES");
  if (!e) return Status::ok();
  const std::string list = e;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string name = list.substr(start, end - start);
    start = end + 1;
    if (name.empty()) continue;
    bool known = false;
    std::string names;
    for (const GraphPass& p : graph_passes()) {
      known = known || name == p.name;
      names += std::string(names.empty() ? "" : ", ") + p.name;
    }
    if (!known) return invalid_argument("FERRY_DISABLE_PASSES names '" + name + "', which is not a graph pass; the passes: " + names);
    out->push_back(name);
  }
  return Status::ok();
}

}  // namespace

bool pass_applies(const GraphPass& pass, const OptimizeOptions& options) {
  if (pass.needs == nullptr || !options.device_traits) return true;
  const std::vector<std::string>& traits = *options.device_traits;
  return std::find(traits.begin(), traits.end(), pass.needs) != traits.end();
}

Status optimize_model(Model* model, const OptimizeOptions& options, OptimizeReport* report) {
  if (report) report->nodes_before = static_cast<int64_t>(model->graph.nodes.size());
  std::vector<std::string> disabled = options.disabled;
  RETURN_IF_ERROR(passes_disabled_by_env(&disabled));
  for (const GraphPass& pass : graph_passes()) {
    if (pass.level > options.opt_level || !pass_applies(pass, options)) continue;
    if (std::find(disabled.begin(), disabled.end(), pass.name) != disabled.end()) continue;
    PassContext ctx{options};
    auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(pass.run(model, ctx).with_context(std::string("graph pass '") + pass.name + "'"));
    if (report)
      report->passes.push_back({pass.name, ctx.changes,
                                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()});
  }
  if (options.opt_level > 0) RETURN_IF_ERROR(infer_shapes(model).with_context("shape inference after optimization"));
  if (report) report->nodes_after = static_cast<int64_t>(model->graph.nodes.size());
  return Status::ok();
}

}  // namespace ferry
