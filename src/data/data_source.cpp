// Opens training / evaluation data (see data_source.h).
#include "data/data_source.h"

#include <sys/stat.h>

#include "data/image_folder.h"
#include "data/npz_dataset.h"

namespace ferry {

StatusOr<DataSource> open_data_source(const std::string& path, const DataOptions& o) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    return invalid_argument("cannot open data '" + path + "': no such file or directory (give an .npz or an ImageFolder directory)");
  DataSource src;
  if (S_ISDIR(st.st_mode)) {
    if (o.inputs.size() != 1)
      return invalid_argument("an ImageFolder feeds one image input, but the model has " + std::to_string(o.inputs.size()) +
                              " data inputs; give an .npz with one array per input");
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
  } else {
    NpzDatasetOptions no;
    if (o.float_targets) no.labels = NpzLabelKind::kFloatTarget;
    no.input_names = o.inputs;
    ASSIGN_OR_RETURN(std::unique_ptr<NpzDataset> ds, NpzDataset::open(path, no));
    src.dataset = std::move(ds);
  }
  // Per-sample dims against the model's inputs.
  if (o.model_inputs) {
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
