// Opens `--data` / `--eval` for training: an .npz (one array per model input + `labels`) or an
// ImageFolder directory, and checks the labels against the model before any step runs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"
#include "data/dataset.h"

namespace ferry {

struct DataOptions {
  int64_t image_size = 224;
  bool train = true;              // random (train) or fixed (eval) image transforms
  bool skip_bad_images = false;
  bool float_targets = false;     // regression losses (mse): .npz labels are float targets
  std::vector<std::string> inputs;           // the model's data inputs
  std::shared_ptr<const Model> model_inputs; // their types (per-sample dims checked against the data)
};

struct DataSource {
  std::unique_ptr<Dataset> dataset;
  bool decodes = false;           // loading decodes images (worth background threads)
  std::vector<std::string> notes; // e.g. how many bad images were skipped
};

StatusOr<DataSource> open_data_source(const std::string& path, const DataOptions& options);

/// Labels must be class indices in [0, classes) for cross_entropy (errors name the row and the
/// label), targets of the output's shape for mse.
Status check_labels(const Dataset& data, const std::string& path, const std::string& loss, int64_t classes);

}  // namespace ferry
