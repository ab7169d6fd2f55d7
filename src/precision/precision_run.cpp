// Running a model in a precision mode; see precision_run.h.
#include "precision/precision_run.h"

#include <cmath>

#include "backends/backend.h"
#include "backends/device_defaults.h"

namespace ferry {

int effective_opt_level(const ExecutorOptions& options) {
  if (options.opt_level >= 0) return options.opt_level;
  return default_opt_level(options.device);  // as Executor::create decides
}

StatusOr<std::shared_ptr<const Model>> prepare_precision_model(std::shared_ptr<const Model> model,
                                                               const ExecutorOptions& options,
                                                               const PrecisionOptions& precision,
                                                               PrecisionReport* report) {
  if (precision.is_identity() && precision.keep_fp32.empty() && precision.node_dtype.empty()) {
    if (report) *report = PrecisionReport{};
    return model;
  }
  std::shared_ptr<Model> copy = model->clone();
  const int level = effective_opt_level(options);
  if (level > 0 && !copy->metadata.count(kOptimizedMetadataKey)) {
    OptimizeOptions oo;
    oo.opt_level = level;
    oo.device_traits = device_graph_traits(options.device);
    RETURN_IF_ERROR(optimize_model(copy.get(), oo));
  }
  RETURN_IF_ERROR(apply_precision(copy.get(), precision, report));
  copy->metadata[kOptimizedMetadataKey] = std::to_string(level);
  return std::shared_ptr<const Model>(std::move(copy));
}

StatusOr<std::unique_ptr<Executor>> create_precision_executor(std::shared_ptr<const Model> model,
                                                              const ExecutorOptions& options,
                                                              const PrecisionOptions& precision,
                                                              PrecisionReport* report) {
  ASSIGN_OR_RETURN(auto prepared, prepare_precision_model(std::move(model), options, precision, report));
  return Executor::create(std::move(prepared), options);
}

NonFiniteCount count_non_finite(const Tensor& t) {
  NonFiniteCount c;
  auto scan = [&c](float v) {
    if (std::isnan(v)) ++c.nan;
    else if (std::isinf(v)) ++c.inf;
  };
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kF32: for (int64_t i = 0; i < n; ++i) scan(t.data<float>()[i]); break;
    case DType::kF16: for (int64_t i = 0; i < n; ++i) scan(f16_to_f32(t.data<uint16_t>()[i])); break;
    case DType::kBF16: for (int64_t i = 0; i < n; ++i) scan(bf16_to_f32(t.data<uint16_t>()[i])); break;
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) {
        const double v = t.data<double>()[i];
        if (std::isnan(v)) ++c.nan;
        else if (std::isinf(v)) ++c.inf;
      }
      break;
    default: break;
  }
  return c;
}

std::string NonFiniteEvent::describe() const {
  return "node '" + node + "' (" + op + ") is the first to produce non-finite values: " + std::to_string(count.inf) +
         " inf, " + std::to_string(count.nan) + " NaN in '" + value + "'";
}

NodeObserver NonFiniteWatch::observer() {
  return [this](const Node& node, const std::vector<Value>& outputs, double) {
    if (first_) return;
    if (pending_cast_) {
      for (const std::string& in : node.inputs) {
        if (in != pending_cast_->value) continue;
        first_ = NonFiniteEvent{node.name, node.op_type, precision_base_name(in), pending_cast_->count};
        return;
      }
    }
    for (size_t k = 0; k < outputs.size() && k < node.outputs.size(); ++k) {
      if (!outputs[k].is_tensor()) continue;
      NonFiniteCount c = count_non_finite(outputs[k].tensor);
      if (!c.any()) continue;
      if (is_precision_cast(node)) {
        if (!pending_cast_) pending_cast_ = NonFiniteEvent{node.name, node.op_type, node.outputs[k], c};
        return;
      }
      first_ = NonFiniteEvent{node.name, node.op_type, precision_base_name(node.outputs[k]), c};
      return;
    }
  };
}

}  // namespace ferry
