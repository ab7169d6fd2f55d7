// The one dispatcher of data formats: what a data path holds, for training's `--data` / `--eval`
// (an .npz: one array per model input + `labels`; an ImageFolder directory) and for `ferry
// quantize`'s calibration data (an .npz, a .npy, a folder of them, or with --image-size an image
// folder); and the labels checked against the model before any training step runs.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"
#include "data/dataset.h"

namespace ferry {

/// Who reads the data: the formats each takes and the words of its errors.
enum class DataUse {
  kTraining,     // a directory is an ImageFolder, a file a labelled .npz
  kCalibration,  // image_size > 0: an image folder; else unlabelled arrays: .npz, .npy or a folder of them
};

struct DataOptions {
  DataUse use = DataUse::kTraining;
  int64_t image_size = 224;       // kCalibration: 0 = not images
  bool train = true;              // random (train) or fixed (eval) image transforms
  bool skip_bad_images = false;
  bool float_targets = false;     // regression losses (mse): .npz labels are float targets
  std::vector<std::string> inputs;           // the model's data inputs
  std::shared_ptr<const Model> model_inputs; // their types (per-sample dims checked against the data)
};

struct DataSource {
  std::unique_ptr<Dataset> dataset;  // an ImageFolder or a labelled .npz; null for array files
  /// kCalibration's unlabelled arrays: the files to read in this order (read_array_file), a
  /// folder's .npy/.npz sorted by name.
  std::vector<std::string> array_files;
  bool decodes = false;           // loading decodes images (worth background threads)
  std::vector<std::string> notes; // e.g. how many bad images were skipped
};

/// Decides what `path` holds for `options.use` and opens it: a Dataset, or the list of array
/// files. Errors name the path and say what to give instead.
StatusOr<DataSource> open_data_source(const std::string& path, const DataOptions& options);

/// The arrays of one of DataSource::array_files, in the file's order: an .npz's by name, a .npy's
/// one array named after the single data input ("" when there are several).
StatusOr<std::vector<std::pair<std::string, Tensor>>> read_array_file(const std::string& file, const DataOptions& options);

/// Labels must be class indices in [0, classes) for cross_entropy (errors name the row and the
/// label), targets of the output's shape for mse.
Status check_labels(const Dataset& data, const std::string& path, const std::string& loss, int64_t classes);

}  // namespace ferry
