// Sample enumeration for `ferry compare`; see compare_samples.h.
#include "tools/compare_samples.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "io/npy.h"
#include "onnx/onnx_import.h"
#include "tools/cli_common.h"

namespace ferry::cli {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

StatusOr<std::vector<std::string>> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return invalid_argument("folder '" + dir + "' cannot be read");
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.empty() || n[0] == '.') continue;
    names.push_back(n);
  }
  ::closedir(d);
  // Natural order: input_2 before input_10.
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return names;
}

std::string stem(const std::string& file) {
  const size_t dot = file.rfind('.');
  return dot == std::string::npos ? file : file.substr(0, dot);
}

// --input specs for the files of one sample folder.
StatusOr<std::vector<std::string>> folder_specs(const Model& model, const std::string& dir) {
  ASSIGN_OR_RETURN(auto names, list_dir(dir));
  std::set<std::string> inputs;
  for (const ValueInfo& v : model.graph.inputs) inputs.insert(v.name);
  std::vector<std::string> specs;
  for (const std::string& n : names) {
    const std::string path = dir + "/" + n;
    if (n.rfind("input_", 0) == 0 && (ends_with(n, ".pb") || ends_with(n, ".npy"))) specs.push_back(path);
    else if (ends_with(n, ".npy") && inputs.count(stem(n))) specs.push_back(stem(n) + "=" + path);
    else if (ends_with(n, ".npz") && n.rfind("expected", 0) != 0) specs.push_back(path);
  }
  if (specs.empty())
    return invalid_argument("sample folder '" + dir + "' has no inputs (input_<i>.pb / input_<i>.npy, <input name>.npy or .npz)");
  return specs;
}

// Reference outputs of one sample from `dir` (or `npz`).
StatusOr<NamedTensors> read_reference(const Model& model, const std::string& dir) {
  NamedTensors out;
  if (is_file(dir + ".npz")) {
    ASSIGN_OR_RETURN(auto arrays, read_npz(dir + ".npz"));
    for (auto& [name, t] : arrays) out.emplace_back(name, std::move(t));
    return out;
  }
  for (size_t k = 0; k < model.graph.outputs.size(); ++k) {
    const std::string& name = model.graph.outputs[k].name;
    const std::vector<std::string> tries = {dir + "/" + safe_file_name(name) + ".npy",
                                            dir + "/expected_" + std::to_string(k) + ".npy",
                                            dir + "/output_" + std::to_string(k) + ".pb"};
    bool found = false;
    for (const std::string& p : tries) {
      if (!is_file(p)) continue;
      Tensor t;
      if (ends_with(p, ".pb")) {
        ASSIGN_OR_RETURN(t, read_tensor_pb(p));
      } else {
        ASSIGN_OR_RETURN(t, read_npy(p));
      }
      out.emplace_back(name, std::move(t));
      found = true;
      break;
    }
    if (!found)
      return invalid_argument("reference outputs: no file for output '" + name + "' (tried " + tries[0] + ", " + tries[1] +
                              ", " + tries[2] + ")");
  }
  return out;
}

}  // namespace

StatusOr<SampleSource> make_sample_source(std::shared_ptr<const Model> model, const std::vector<std::string>& input_specs,
                                          const std::string& inputs_dir, const RunSpec& ref) {
  struct Sample {
    std::string name;
    std::vector<std::string> specs;
  };
  auto samples = std::make_shared<std::vector<Sample>>();
  if (!inputs_dir.empty()) {
    if (!input_specs.empty()) return invalid_argument("give either --input or --inputs-dir, not both");
    ASSIGN_OR_RETURN(auto names, list_dir(inputs_dir));
    for (const std::string& n : names) {
      const std::string path = inputs_dir + "/" + n;
      if (is_dir(path)) {
        ASSIGN_OR_RETURN(auto specs, folder_specs(*model, path));
        samples->push_back({n, specs});
      } else if (ends_with(n, ".npz") || ends_with(n, ".npy")) {
        samples->push_back({stem(n), {path}});
      }
    }
    if (samples->empty())
      return invalid_argument("--inputs-dir '" + inputs_dir + "' holds no samples (.npz or .npy files, or one folder per sample)");
  } else {
    samples->push_back({"input", input_specs});
  }
  SampleSource src;
  src.count = samples->size();
  src.name = [samples](size_t i) { return (*samples)[i].name; };
  src.inputs = [samples, model](size_t i) -> StatusOr<NamedTensors> {
    auto feeds = load_inputs(*model, (*samples)[i].specs);
    if (!feeds.is_ok()) return feeds.status().with_context("sample '" + (*samples)[i].name + "'");
    return feeds;
  };
  if (ref.is_outputs) {
    const std::string dir = ref.outputs_dir;
    const bool dataset = !inputs_dir.empty();
    src.reference_outputs = [samples, model, dir, dataset](size_t i) -> StatusOr<NamedTensors> {
      return read_reference(*model, dataset ? dir + "/" + (*samples)[i].name : dir);
    };
  }
  return src;
}

}  // namespace ferry::cli
