// Batch gears in the CLI; see gear_cli.h.
#include "tools/gear_cli.h"

#include "compiler/gears.h"
#include "tools/cli_common.h"

namespace ferry::cli {

bool GearedModel::geared() const { return compiled && has_batch_gears(*compiled); }

std::string GearedModel::gear_list() const {
  std::string s;
  if (geared())
    for (const CompiledGear& g : compiled->gears) {
      if (!s.empty()) s += ',';
      s += std::to_string(g.batch);
    }
  return s;
}

StatusOr<GearedModel> load_geared_model(const std::string& path) {
  GearedModel m;
  const bool ferry_suffix = path.size() > 6 && path.compare(path.size() - 6, 6, ".ferry") == 0;
  if (ferry_suffix || is_compiled_model_file(path)) {
    ASSIGN_OR_RETURN(CompiledModel cm, load_compiled_model(path));
    auto shared = std::make_shared<CompiledModel>(std::move(cm));
    m.model = shared->gears.front().model;
    m.compiled = std::move(shared);
    return m;
  }
  ASSIGN_OR_RETURN(m.model, load_model(path));
  return m;
}

StatusOr<GearChoice> choose_gear(const GearedModel& m, int64_t batch) {
  GearChoice c;
  c.model = m.model;
  c.batch = batch;
  if (!m.geared()) return c;
  ASSIGN_OR_RETURN(const CompiledGear* g, select_gear(*m.compiled, batch));
  c.model = g->model;
  c.gear = g->batch;
  c.batched_outputs = batched_outputs(*m.compiled, *g);
  return c;
}

StatusOr<GearChoice> choose_gear_for_feeds(const GearedModel& m, NamedTensors* feeds) {
  if (!m.geared()) return choose_gear(m, 0);
  ASSIGN_OR_RETURN(int64_t batch, feeds_batch(*feeds));
  ASSIGN_OR_RETURN(GearChoice c, choose_gear(m, batch));
  if (c.padded()) {
    ASSIGN_OR_RETURN(*feeds, pad_to_gear(*feeds, c.gear));
  }
  return c;
}

Status use_gear_for_samples(const GearedModel& m, bool ref_is_outputs, std::shared_ptr<const Model>* model,
                            SampleSource* samples) {
  ASSIGN_OR_RETURN(NamedTensors first, samples->inputs(0));
  ASSIGN_OR_RETURN(int64_t batch, feeds_batch(first));
  ASSIGN_OR_RETURN(GearChoice c, choose_gear(m, batch));
  *model = c.model;
  if (!c.padded()) return Status::ok();
  if (ref_is_outputs)
    return invalid_argument("batch " + std::to_string(batch) + " runs padded on the batch-" + std::to_string(c.gear) +
                            " gear, and an outputs:DIR reference has batch " + std::to_string(batch) +
                            "; give inputs of a compiled batch (" + m.gear_list() + ")");
  samples->inputs = [inner = samples->inputs, gear = c.gear](size_t i) -> StatusOr<NamedTensors> {
    ASSIGN_OR_RETURN(NamedTensors feeds, inner(i));
    return pad_to_gear(feeds, gear);
  };
  return Status::ok();
}

}  // namespace ferry::cli
