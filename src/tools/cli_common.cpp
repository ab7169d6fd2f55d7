#include "tools/cli_common.h"

#include "common/env_switch.h"
#include "runtime/memory_estimate.h"

#include <malloc.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <set>

#include "common/utf8.h"
#include "format/compiled_model.h"
#include "io/image_metadata.h"
#include "io/npy.h"
#include "onnx/onnx_import.h"

namespace ferry::cli {

int report(const Status& status) {
  if (status.is_ok()) return kExitOk;
  // Messages quote file names and model contents: escaped so the terminal gets valid UTF-8.
  std::fprintf(stderr, "ferry: error: %s\n", escape_non_utf8(status.message()).c_str());
  return status.code() == StatusCode::kInternal ? kExitInternal : kExitBadInput;
}

StatusOr<std::shared_ptr<Model>> load_model(const std::string& path, bool require_known_ops) {
  const bool ferry_suffix = path.size() > 6 && path.compare(path.size() - 6, 6, ".ferry") == 0;
  if (ferry_suffix || is_compiled_model_file(path)) {  // from `ferry compile`: its first (smallest) gear
    ASSIGN_OR_RETURN(CompiledModel compiled, load_compiled_model(path));
    return compiled.gears.front().model;
  }
  ImportOptions options;
  options.require_known_ops = require_known_ops;
  return load_onnx_model(path, options);
}

std::string human_bytes(int64_t bytes) { return format_bytes(bytes); }

void apply_inference_malloc_defaults() {
#if defined(__GLIBC__)
  static const bool done = [] {
    const char* off = env_value("FERRY_MALLOC_DEFAULTS");
    if (off && std::string(off) == "0") return false;
    for (const char* user : {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"})
      if (env_value(user)) return false;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)done;
#endif
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

InputSpec split_input_spec(const Model& model, const std::string& spec) {
  InputSpec out;
  out.file = spec;
  for (const ValueInfo& v : model.graph.inputs) {
    if (v.name.empty() || v.name.size() <= out.name.size()) continue;
    if (spec.size() > v.name.size() && spec.compare(0, v.name.size(), v.name) == 0 && spec[v.name.size()] == '=') {
      out.name = v.name;
      out.file = spec.substr(v.name.size() + 1);
    }
  }
  struct stat st;
  const bool whole_is_file = ::stat(spec.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  if (!out.name.empty()) {
    if (whole_is_file)
      out.note = "--input '" + spec + "' is also a file name; read as input '" + out.name + "' from '" + out.file + "'";
    else if (out.name.find('=') != std::string::npos)
      out.note = "--input '" + spec + "': input '" + out.name + "' from '" + out.file + "'";
    return out;
  }
  const size_t eq = spec.find('=');
  // NAME=FILE, unless the part before '=' looks like a path or the whole spec is a file.
  if (eq != std::string::npos && !whole_is_file && spec.substr(0, eq).find('/') == std::string::npos) {
    out.name = spec.substr(0, eq);
    out.file = spec.substr(eq + 1);
  }
  return out;
}

namespace {
// A JPEG/PNG for a model input: the eval transform the model's metadata gives (`ferry train --out`
// writes it), else Resize + CenterCrop to the input's fixed square size (or `image_size`) with
// ImageNet's mean and std, as torchvision's eval pipeline; batch dimension added for a rank-4 input.
StatusOr<Tensor> load_image_input(const Model& model, const ValueInfo& input, const std::string& file, int64_t image_size) {
  const std::string where = "--input '" + file + "' (image) for input '" + input.name + "' " + input.type.to_string();
  ASSIGN_OR_RETURN(std::optional<EvalImageTransform> meta, eval_transform_from_metadata(model.metadata));
  EvalImageTransform t = meta.value_or(EvalImageTransform{});
  const std::optional<Shape>& shape = input.type.shape;
  const size_t rank = shape ? shape->dims.size() : 0;
  if (input.type.dtype != DType::kF32 || (rank != 3 && rank != 4))
    return invalid_argument(where + ": an image becomes a float32 [1, 3, S, S] tensor; this input takes another type");
  const Dim& c = shape->dims[rank - 3];
  if (c.is_known() && c.value != 3)
    return invalid_argument(where + ": an image has 3 channels (RGB); this input takes " + std::to_string(c.value));
  const Dim& h = shape->dims[rank - 2];
  const Dim& w = shape->dims[rank - 1];
  if (image_size > 0) {
    t.crop = image_size;
    t.resize = 0;
  } else if (!meta) {
    if (!h.is_known() || !w.is_known() || h.value != w.value)
      return invalid_argument(where + ": the model does not say its image size (no " + kImageTransformKey +
                              " metadata, no fixed square input); give --image-size S, the size it was trained at");
    t.crop = h.value;
  }
  if ((h.is_known() && h.value != t.crop) || (w.is_known() && w.value != t.crop))
    return invalid_argument(where + ": the image would be " + std::to_string(t.crop) + "x" + std::to_string(t.crop) +
                            " but the input is " + std::to_string(h.is_known() ? h.value : -1) + "x" +
                            std::to_string(w.is_known() ? w.value : -1));
  ASSIGN_OR_RETURN(Tensor image, read_image_tensor(file, t));
  if (rank == 3) return image;
  return image.reshaped({1, 3, t.crop, t.crop});
}
}  // namespace

StatusOr<NamedTensors> load_inputs(const Model& model, const std::vector<std::string>& specs, int64_t image_size) {
  const Graph& g = model.graph;
  std::set<std::string> input_names;
  for (const ValueInfo& v : g.inputs) input_names.insert(v.name);
  NamedTensors feeds;
  std::set<std::string> fed;
  size_t next_positional = 0;
  auto next_unfed = [&]() -> const ValueInfo* {
    while (next_positional < g.inputs.size() && fed.count(g.inputs[next_positional].name)) ++next_positional;
    return next_positional < g.inputs.size() ? &g.inputs[next_positional] : nullptr;
  };
  for (const std::string& spec : specs) {
    InputSpec parsed = split_input_spec(model, spec);
    if (!parsed.note.empty()) std::fprintf(stderr, "ferry: note: %s\n", parsed.note.c_str());
    std::string name = parsed.name, file = parsed.file;
    if (ends_with(file, ".npz")) {
      ASSIGN_OR_RETURN(auto arrays, read_npz(file));
      for (auto& [member, t] : arrays) {
        std::string target = member;
        if (!input_names.count(member)) {
          const ValueInfo* v = next_unfed();
          if (!v)
            return invalid_argument("'" + file + "' array '" + member + "' matches no model input and every input "
                                    "is already given");
          target = v->name;
        }
        if (!fed.insert(target).second) return invalid_argument("input '" + target + "' is given twice");
        feeds.emplace_back(target, std::move(t));
      }
      continue;
    }
    if (is_image_file_name(file)) {
      const ValueInfo* v = nullptr;
      if (name.empty()) {
        v = next_unfed();
        if (!v) return invalid_argument("input file '" + file + "': the model has only " + std::to_string(g.inputs.size()) +
                                        " inputs and all are given");
      } else {
        for (const ValueInfo& in : g.inputs)
          if (in.name == name) v = &in;
        if (!v) return invalid_argument("--input " + spec + ": the model has no input named '" + name + "'");
      }
      ASSIGN_OR_RETURN(Tensor image, load_image_input(model, *v, file, image_size));
      if (!fed.insert(v->name).second) return invalid_argument("input '" + v->name + "' is given twice");
      feeds.emplace_back(v->name, std::move(image));
      continue;
    }
    Tensor t;
    if (ends_with(file, ".npy")) {
      ASSIGN_OR_RETURN(t, read_npy(file));
    } else if (ends_with(file, ".pb")) {
      std::string pb_name;
      ASSIGN_OR_RETURN(t, read_tensor_pb(file, &pb_name));
      if (name.empty() && input_names.count(pb_name) && !fed.count(pb_name)) name = pb_name;
    } else {
      return invalid_argument("input file '" + file + "': unknown format; use .npy, .npz, an ONNX TensorProto .pb, or a .jpg / .png image");
    }
    if (name.empty()) {
      const ValueInfo* v = next_unfed();
      if (!v) return invalid_argument("input file '" + file + "': the model has only " + std::to_string(g.inputs.size()) +
                                      " inputs and all are given");
      name = v->name;
    } else if (!input_names.count(name)) {
      std::string names;
      for (const ValueInfo& v : g.inputs) names += (names.empty() ? "" : ", ") + v.name;
      return invalid_argument("--input " + spec + ": the model has no input named '" + name + "'; its inputs: " + names);
    }
    if (!fed.insert(name).second) return invalid_argument("input '" + name + "' is given twice");
    feeds.emplace_back(name, std::move(t));
  }
  return feeds;
}

}  // namespace ferry::cli
