#include "io/image_metadata.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "io/image.h"

namespace ferry {

using nlohmann::json;

std::string class_names_json(const std::vector<std::string>& names) {
  json j = json::array();
  for (const std::string& n : names) j.push_back(escape_name(n));  // folder names need not be UTF-8
  return j.dump();
}

std::string eval_transform_json(const EvalImageTransform& t) {
  json j = {{"resize", t.resize > 0 ? t.resize : eval_resize_size(t.crop)},
            {"center_crop", t.crop},
            {"mean", t.mean},
            {"std", t.std}};
  return j.dump();
}

StatusOr<std::vector<std::string>> class_names_from_metadata(const std::map<std::string, std::string>& metadata) {
  auto it = metadata.find(kClassNamesKey);
  if (it == metadata.end()) return std::vector<std::string>{};
  json j = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return invalid_model(std::string("metadata '") + kClassNamesKey + "' is not a JSON array of names");
  std::vector<std::string> names;
  for (const json& e : j) {
    if (!e.is_string()) return invalid_model(std::string("metadata '") + kClassNamesKey + "' holds a value that is not a string");
    names.push_back(e.get<std::string>());
  }
  return names;
}

StatusOr<std::optional<EvalImageTransform>> eval_transform_from_metadata(const std::map<std::string, std::string>& metadata) {
  auto it = metadata.find(kImageTransformKey);
  if (it == metadata.end()) return std::optional<EvalImageTransform>{};
  const std::string bad = std::string("metadata '") + kImageTransformKey + "' ";
  json j = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return invalid_model(bad + "is not a JSON object");
  EvalImageTransform t;
  auto size = [&](const char* key, int64_t* out) -> Status {
    if (!j.contains(key)) return Status::ok();
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 1 || j[key].get<int64_t>() > 65536)
      return invalid_model(bad + "field '" + key + "' is not a size in 1..65536");
    *out = j[key].get<int64_t>();
    return Status::ok();
  };
  RETURN_IF_ERROR(size("center_crop", &t.crop));
  RETURN_IF_ERROR(size("resize", &t.resize));
  if (t.crop == 0) return invalid_model(bad + "has no 'center_crop'");
  if (t.resize > 0 && t.resize < t.crop) return invalid_model(bad + "'resize' is smaller than 'center_crop'");
  for (const char* key : {"mean", "std"}) {
    if (!j.contains(key)) continue;
    const json& v = j[key];
    if (!v.is_array() || v.size() != 3) return invalid_model(bad + "field '" + key + "' is not 3 numbers");
    for (size_t c = 0; c < 3; ++c) {
      if (!v[c].is_number()) return invalid_model(bad + "field '" + key + "' is not 3 numbers");
      (std::string(key) == "mean" ? t.mean : t.std)[c] = v[c].get<float>();
    }
  }
  for (float s : t.std)
    if (!(s > 0)) return invalid_model(bad + "field 'std' must be positive");
  return std::optional<EvalImageTransform>(t);
}

bool is_image_file_name(const std::string& path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = path.substr(dot);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

StatusOr<Tensor> read_image_tensor(const std::string& path, const EvalImageTransform& t) {
  ASSIGN_OR_RETURN(Image img, read_image(path));
  img = center_crop(resize_shorter_side(img, t.resize > 0 ? t.resize : eval_resize_size(t.crop)), t.crop);
  Tensor out = Tensor::allocate(DType::kF32, {3, t.crop, t.crop});
  to_normalized_chw(img, std::span<float>(out.mutable_data<float>(), static_cast<size_t>(3 * t.crop * t.crop)), t.mean, t.std);
  return out;
}

}  // namespace ferry
