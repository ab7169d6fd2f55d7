// Training data: a Dataset hands out samples by index; a Prefetcher (data/prefetch.h) loads the
// batches of coming steps on background threads so a step does not wait on decoding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/tensor.h"

namespace ferry {

/// One model input as the data set provides it: per-sample dims (the batch axis excluded).
struct SampleInput {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;
};

/// A batch: one tensor per model input ([B, ...]) and int64 labels [B] (or float targets).
struct Batch {
  std::vector<std::pair<std::string, Tensor>> inputs;
  Tensor labels;
  /// The sample indices the batch holds, in row order.
  std::vector<int64_t> indices;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of samples.
  virtual int64_t size() const = 0;
  /// The inputs each sample provides.
  virtual std::vector<SampleInput> inputs() const = 0;
  /// Number of classes known to the data (ImageFolder: its class folders; .npz: max label + 1;
  /// 0 when the labels are not class indices).
  virtual int64_t num_classes() const = 0;
  /// Class names when the data has them (ImageFolder's sorted folder names).
  virtual std::vector<std::string> class_names() const { return {}; }
  /// Fills `out` with the samples `indices` (in order). `seed` drives random transforms: the
  /// same (indices, seed) gives the same batch on any thread. Errors name the sample (file, row).
  virtual Status load(const std::vector<int64_t>& indices, uint64_t seed, Batch* out) const = 0;
};

}  // namespace ferry
