// A .npz data set: one array per model input with the samples on axis 0, plus `labels`
// (int class indices for classification losses, or float targets for regression losses).
//   np.savez("train.npz", input=x.astype(np.float32), labels=y.astype(np.int64))
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace ferry {

enum class NpzLabelKind {
  kClassIndex,   // integer labels [N] -> int64 [B]
  kFloatTarget,  // numeric targets [N, ...] -> float32 [B, ...]
};

struct NpzDatasetOptions {
  /// The model inputs to take from the archive (each must be an array of that name).
  std::vector<std::string> input_names;
  NpzLabelKind labels = NpzLabelKind::kClassIndex;
};

class NpzDataset : public Dataset {
 public:
  /// Reads the archive at `path` and checks it against `options`.
  static StatusOr<std::unique_ptr<NpzDataset>> open(const std::string& path, const NpzDatasetOptions& options);
  /// Same checks on arrays already in memory; `what` names them in errors (e.g. "'train.npz'").
  static StatusOr<std::unique_ptr<NpzDataset>> from_arrays(std::vector<std::pair<std::string, Tensor>> arrays,
                                                           const std::string& what, const NpzDatasetOptions& options);

  int64_t size() const override { return size_; }
  std::vector<SampleInput> inputs() const override;
  int64_t num_classes() const override { return num_classes_; }
  /// Copies the rows `indices` of every input and of the labels.
  Status load(const std::vector<int64_t>& indices, uint64_t seed, Batch* out) const override;

 private:
  NpzDataset() = default;

  std::string what_;
  std::vector<std::pair<std::string, Tensor>> inputs_;
  Tensor labels_;  // int64 [N] or float32 [N, ...]
  int64_t size_ = 0;
  int64_t num_classes_ = 0;
};

}  // namespace ferry
