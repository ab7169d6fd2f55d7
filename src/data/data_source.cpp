// Opens training, evaluation and calibration data (see data_source.h).
#include "data/data_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "data/image_folder.h"
#include "data/npz_dataset.h"
#include "io/npy.h"

namespace ferry {
namespace {

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

// Calibration's unlabelled arrays: a folder's .npy/.npz files sorted by name, or the one file.
Status list_array_files(const std::string& path, bool directory, DataSource* src) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!directory) {
    src->array_files.push_back(path);
    return Status::ok();
  }
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string p = e.path().string();
    if (e.is_regular_file(ec) && (ends_with(p, ".npy") || ends_with(p, ".npz"))) src->array_files.push_back(p);
  }
  std::sort(src->array_files.begin(), src->array_files.end());
  if (src->array_files.empty())
    return invalid_argument("calibration folder '" + path + "' holds no .npy or .npz files; for an image folder "
                            "give --image-size");
  return Status::ok();
}

}  // namespace

StatusOr<DataSource> open_data_source(const std::string& path, const DataOptions& o) {
  const bool training = o.use == DataUse::kTraining;
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    return invalid_argument(training ? "cannot open data '" + path + "': no such file or directory (give an .npz or an ImageFolder directory)"
                                     : "calibration data '" + path + "' does not exist; give an .npz, a folder of .npy/.npz "
                                       "files or an image folder with --image-size");
  const bool directory = S_ISDIR(st.st_mode);
  DataSource src;
  if (training ? directory : o.image_size > 0) {
    if (o.inputs.size() != 1)
      return invalid_argument(training ? "an ImageFolder feeds one image input, but the model has " + std::to_string(o.inputs.size()) +
                                             " data inputs; give an .npz with one array per input"
                                       : "--image-size feeds images to a single-input model; this one has " +
                                             std::to_string(o.inputs.size()) + " inputs");
    ImageFolderOptions io;
    io.input_name = o.inputs[0];
    io.image_size = o.image_size;
    io.train = o.train;
    io.skip_bad_images = o.skip_bad_images;
    ASSIGN_OR_RETURN(std::unique_ptr<ImageFolderDataset> ds, ImageFolderDataset::open(path, io));
    if (ds->skipped_files() > 0)
      src.notes.push_back("'" + path + "': skipped " + std::to_string(ds->skipped_files()) + " unreadable image file(s)" +
                          (ds->skipped_examples().empty() ? std::string() : ", e.g. " + ds->skipped_examples()[0]));
    src.decodes = true;
    src.dataset = std::move(ds);
  } else if (!training) {
    RETURN_IF_ERROR(list_array_files(path, directory, &src));
  } else {
    NpzDatasetOptions no;
    if (o.float_targets) no.labels = NpzLabelKind::kFloatTarget;
    no.input_names = o.inputs;
    ASSIGN_OR_RETURN(std::unique_ptr<NpzDataset> ds, NpzDataset::open(path, no));
    src.dataset = std::move(ds);
  }
  // Per-sample dims against the model's inputs.
  if (o.model_inputs && src.dataset) {
    for (const SampleInput& s : src.dataset->inputs()) {
      for (const auto& in : o.model_inputs->graph.inputs) {
        if (in.name != s.name || !in.type.shape) continue;
        const auto& dims = in.type.shape->dims;
        bool ok = dims.size() == s.dims.size() + 1;
        for (size_t i = 1; ok && i < dims.size(); ++i) ok = !dims[i].is_known() || dims[i].value == s.dims[i - 1];
        std::string got = "[";
        for (size_t i = 0; i < s.dims.size(); ++i) {
          if (i) got += ',';
          got += std::to_string(s.dims[i]);
        }
        got += "]";
        if (!ok)
          return invalid_argument("'" + path + "': samples of input '" + s.name + "' are " + got + ", the model wants " +
                                  in.type.to_string() + " (batch first)" +
                                  (src.decodes ? "; set --image-size to the model's input size" : ""));
        if (in.type.dtype != s.dtype)
          return invalid_argument("'" + path + "': input '" + s.name + "' is " + dtype_name(s.dtype) + ", the model wants " +
                                  dtype_name(in.type.dtype));
      }
    }
  }
  return src;
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> read_array_file(const std::string& file, const DataOptions& o) {
  std::vector<std::pair<std::string, Tensor>> arrays;
  if (ends_with(file, ".npy")) {
    ASSIGN_OR_RETURN(Tensor t, read_npy(file));
    arrays.emplace_back(o.inputs.size() == 1 ? o.inputs[0] : "", std::move(t));
  } else if (ends_with(file, ".npz")) {
    ASSIGN_OR_RETURN(arrays, read_npz(file));
  } else {
    return invalid_argument("calibration data '" + file + "' is not an .npz, .npy or folder; for images give --image-size");
  }
  return arrays;
}

Status check_labels(const Dataset& data, const std::string& path, const std::string& loss, int64_t classes) {
  if (loss != "cross_entropy") return Status::ok();
  if (classes > 0 && data.num_classes() > classes) {
    // Find the first offending row to name it.
    const int64_t n = data.size();
    const auto* npz = dynamic_cast<const NpzDataset*>(&data);
    if (npz) {
      for (int64_t begin = 0; begin < n; begin += 4096) {
        std::vector<int64_t> idx;
        for (int64_t i = begin; i < std::min(n, begin + 4096); ++i) idx.push_back(i);
        Batch b;
        RETURN_IF_ERROR(data.load(idx, 0, &b));
        for (size_t r = 0; r < idx.size(); ++r) {
          const int64_t label = b.labels.get_int64(static_cast<int64_t>(r));
          if (label < 0 || label >= classes)
            return invalid_argument("'" + path + "': row " + std::to_string(idx[r]) + " has label " + std::to_string(label) +
                                    ", outside the model's " + std::to_string(classes) + " classes [0, " +
                                    std::to_string(classes - 1) + "]; fix the labels or give --num-classes " +
                                    std::to_string(data.num_classes()));
        }
      }
    }
    return invalid_argument("'" + path + "' has " + std::to_string(data.num_classes()) + " classes but the model outputs " +
                            std::to_string(classes) + "; give --num-classes " + std::to_string(data.num_classes()) +
                            " to replace the classifier");
  }
  return Status::ok();
}

}  // namespace ferry
