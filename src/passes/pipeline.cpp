// Runs the registered passes in order; see pipeline.h.
#include "passes/pipeline.h"

#include <algorithm>
#include <chrono>

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

Status optimize_model(Model* model, const OptimizeOptions& options, OptimizeReport* report) {
  if (report) report->nodes_before = static_cast<int64_t>(model->graph.nodes.size());
  for (const GraphPass& pass : graph_passes()) {
    if (pass.level > options.opt_level) continue;
    if (std::find(options.disabled.begin(), options.disabled.end(), pass.name) != options.disabled.end()) continue;
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
