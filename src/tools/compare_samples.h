// The samples `ferry compare` runs: one set of --input files, or a dataset folder (--inputs-dir)
// holding one sample per .npz / .npy file or per sub-folder (ONNX test_data_set_* with
// input_<i>.pb, or .npy files named after the inputs). Reference outputs of an outputs:DIR spec
// are read per sample as <output>.npy, expected_<k>.npy or output_<k>.pb (a sub-folder per sample
// in dataset mode, or <sample>.npz).
#pragma once

#include <string>
#include <vector>

#include "precision/compare.h"

namespace ferry::cli {

StatusOr<SampleSource> make_sample_source(std::shared_ptr<const Model> model, const std::vector<std::string>& input_specs,
                                          const std::string& inputs_dir, const RunSpec& ref);

}  // namespace ferry::cli
