// Batch gears (docs/format.md): a compiled model holds one plan per batch size; a run with batch b
// uses the smallest gear >= b, its inputs zero-padded to the gear's batch and the batched outputs
// cut back to b rows. Shared by ferry::Session (the C API) and the CLI commands.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "format/compiled_model.h"
#include "runtime/executor.h"

namespace ferry {

/// Whether the compiled model is compiled per batch size (several gears, or one gear with batch > 0).
bool has_batch_gears(const CompiledModel& model);

/// The batch of `feeds`: their common first dimension. Errors name the scalar input or the two
/// inputs whose batches differ.
StatusOr<int64_t> feeds_batch(const NamedTensors& feeds);

/// The gear for `batch` (the smallest gear >= batch); an error naming the compiled gears when the
/// batch is above the largest (or below 1).
StatusOr<const CompiledGear*> select_gear(const CompiledModel& model, int64_t batch);

/// For each output of `gear`: whether its first dimension is the batch in every gear (so it is cut
/// back after a padded run).
std::vector<bool> batched_outputs(const CompiledModel& model, const CompiledGear& gear);

/// Copies `feeds` into zero-padded tensors whose first dimension is `gear_batch`.
StatusOr<NamedTensors> pad_to_gear(const NamedTensors& feeds, int64_t gear_batch);

/// Cuts the outputs marked in `batched` back to their first `batch` rows.
void cut_to_batch(const std::vector<bool>& batched, int64_t batch, NamedTensors* outputs);

}  // namespace ferry
