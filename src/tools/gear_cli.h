// Batch gears in the CLI: `ferry run`, `bench`, `profile`, `compare` and `info` on a compiled model
// with several batch gears (`ferry compile --dynamic-batch 1,2,4,8`) use the smallest gear >= the
// batch they are given, as the C API does (compiler/gears.h): inputs zero-padded to the gear,
// batched outputs cut back.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "format/compiled_model.h"
#include "precision/compare.h"
#include "runtime/executor.h"

namespace ferry::cli {

/// A model as a command loads it: an ONNX model, or a compiled one with every gear.
struct GearedModel {
  std::shared_ptr<Model> model;                   // the ONNX model, or the smallest gear
  std::shared_ptr<const CompiledModel> compiled;  // set for a .ferry file
  /// Whether runs pick a gear by batch (a .ferry compiled with --dynamic-batch).
  bool geared() const;
  /// "1,2,4,8" (empty without gears).
  std::string gear_list() const;
};
StatusOr<GearedModel> load_geared_model(const std::string& path);

/// The model to run for `batch` samples: the gear for it (an error naming the gears when none is
/// large enough), or the model itself when it has no gears.
struct GearChoice {
  std::shared_ptr<Model> model;
  int64_t batch = 0;  // the samples asked for
  int64_t gear = 0;   // the gear's batch (0: no gears)
  std::vector<bool> batched_outputs;
  bool padded() const { return gear > batch; }
};
StatusOr<GearChoice> choose_gear(const GearedModel& m, int64_t batch);

/// choose_gear for the batch of `feeds` (their first dimension), padding them to the gear.
StatusOr<GearChoice> choose_gear_for_feeds(const GearedModel& m, NamedTensors* feeds);

/// `ferry compare` on a model with gears: the gear for the first sample's batch replaces *model, and
/// the samples' inputs are padded to it (refused for an outputs:DIR reference, whose outputs have
/// the unpadded batch). Outputs are compared at the gear's batch.
Status use_gear_for_samples(const GearedModel& m, bool ref_is_outputs, std::shared_ptr<const Model>* model,
                            SampleSource* samples);

}  // namespace ferry::cli
