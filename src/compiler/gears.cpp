// Batch gears: choosing one, padding inputs, cutting outputs; see gears.h.
#include "compiler/gears.h"

#include <algorithm>
#include <cstring>

namespace ferry {

bool has_batch_gears(const CompiledModel& model) {
  return model.gears.size() > 1 || (!model.gears.empty() && model.gears[0].batch > 0);
}

StatusOr<int64_t> feeds_batch(const NamedTensors& feeds) {
  int64_t batch = 0;
  std::string first;
  for (const auto& [name, t] : feeds) {
    if (t.rank() == 0) return invalid_argument("input '" + name + "' is a scalar; this model is compiled per batch size");
    if (first.empty()) {
      batch = t.dim(0);
      first = name;
    } else if (t.dim(0) != batch) {
      return invalid_argument("input '" + name + "' has batch " + std::to_string(t.dim(0)) + ", input '" + first +
                              "' has " + std::to_string(batch) + "; all inputs share the batch");
    }
  }
  return batch;
}

StatusOr<const CompiledGear*> select_gear(const CompiledModel& model, int64_t batch) {
  const CompiledGear* g = batch >= 1 ? model.gear_for_batch(batch) : nullptr;
  if (g) return g;
  std::string sizes;
  for (const CompiledGear& cg : model.gears) {
    if (!sizes.empty()) sizes += ',';
    sizes += std::to_string(cg.batch);
  }
  return invalid_argument("batch " + std::to_string(batch) + " is not covered by the compiled batch sizes " + sizes +
                          (batch >= 1 ? "; recompile with a larger --dynamic-batch gear" : "; give at least one sample"));
}

std::vector<bool> batched_outputs(const CompiledModel& model, const CompiledGear& gear) {
  std::vector<bool> out;
  for (const ValueInfo& o : gear.model->graph.outputs) {
    bool batched = gear.batch > 0;
    for (const CompiledGear& other : model.gears) {
      const Graph& og = other.model->graph;
      auto it = std::find_if(og.outputs.begin(), og.outputs.end(), [&](const ValueInfo& v) { return v.name == o.name; });
      const auto& shape = it == og.outputs.end() ? std::nullopt : it->type.shape;
      if (!shape || shape->rank() == 0 || !shape->dims[0].is_known() || shape->dims[0].value != other.batch) batched = false;
    }
    out.push_back(batched);
  }
  return out;
}

StatusOr<NamedTensors> pad_to_gear(const NamedTensors& feeds, int64_t gear_batch) {
  NamedTensors padded;
  for (const auto& [name, t] : feeds) {
    if (t.dtype() == DType::kString) return unsupported("input '" + name + "': string inputs cannot be padded to a gear");
    if (t.rank() == 0 || t.dim(0) > gear_batch)
      return invalid_argument("input '" + name + "' (" + dims_to_string(t.dims()) + ") does not fit the batch-" +
                              std::to_string(gear_batch) + " gear");
    std::vector<int64_t> dims = t.dims();
    dims[0] = gear_batch;
    ASSIGN_OR_RETURN(Tensor p, Tensor::create(t.dtype(), dims, "input '" + name + "'"));  // zero-filled
    if (t.nbytes()) std::memcpy(p.mutable_raw(), t.raw(), static_cast<size_t>(t.nbytes()));
    padded.emplace_back(name, std::move(p));
  }
  return padded;
}

void cut_to_batch(const std::vector<bool>& batched, int64_t batch, NamedTensors* outputs) {
  for (size_t k = 0; k < outputs->size(); ++k) {
    Tensor& t = (*outputs)[k].second;
    if (k >= batched.size() || !batched[k] || t.dtype() == DType::kString || t.rank() == 0 || t.dim(0) <= batch) continue;
    std::vector<int64_t> dims = t.dims();
    dims[0] = batch;
    Tensor cut = Tensor::allocate(t.dtype(), dims);
    std::memcpy(cut.mutable_raw(), t.raw(), static_cast<size_t>(cut.nbytes()));
    t = std::move(cut);
  }
}

}  // namespace ferry
