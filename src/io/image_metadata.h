// What a model trained on images needs to classify a photo, kept in its ONNX metadata_props:
// `ferry train --out` writes the class names (ImageFolder order) and the eval transform, and
// `ferry run MODEL --input photo.jpg` reads them (tools/cli_common.cpp), so the user does not
// re-implement torchvision's eval pipeline to test what they trained.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "io/image_transform.h"
#include "ir/tensor.h"

namespace ferry {

/// metadata_props keys. Class names: a JSON array of strings, index = class. Transform: JSON
/// {"resize": 256, "center_crop": 224, "mean": [...], "std": [...]} (Resize shorter side,
/// CenterCrop, ToTensor, Normalize).
constexpr char kClassNamesKey[] = "ferry.class_names";
constexpr char kImageTransformKey[] = "ferry.image_transform";

struct EvalImageTransform {
  int64_t crop = 0;    // CenterCrop(crop): the model's input height and width
  int64_t resize = 0;  // Resize(resize) of the shorter side first (0: eval_resize_size(crop))
  std::array<float, 3> mean = kImageNetMean;
  std::array<float, 3> std = kImageNetStd;
};

std::string class_names_json(const std::vector<std::string>& names);
std::string eval_transform_json(const EvalImageTransform& t);

/// The class names in `metadata` (empty when it has none); an error names the key when malformed.
StatusOr<std::vector<std::string>> class_names_from_metadata(const std::map<std::string, std::string>& metadata);
/// The eval transform in `metadata` (nullopt when it has none).
StatusOr<std::optional<EvalImageTransform>> eval_transform_from_metadata(const std::map<std::string, std::string>& metadata);

/// True for the file names ferry reads as images (.jpg, .jpeg, .png, any case).
bool is_image_file_name(const std::string& path);

/// Reads a JPEG/PNG file through `t` (as the training's eval data): float32 [3, crop, crop].
StatusOr<Tensor> read_image_tensor(const std::string& path, const EvalImageTransform& t);

}  // namespace ferry
