// Autocast of the forward training model (see autocast.h).
#include "train/autocast.h"

#include <algorithm>
#include <map>
#include <set>

#include "passes/graph_edit.h"
#include "passes/precision.h"

namespace ferry {
namespace {

bool node_matches(const Node& n, const std::string& name) {
  return n.name == name || std::find(n.origin.begin(), n.origin.end(), name) != n.origin.end();
}

}  // namespace

StatusOr<DType> parse_amp_dtype(const std::string& text) {
  if (text.empty() || text == "fp32" || text == "f32" || text == "float32") return DType::kF32;
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  if (text == "fp16" || text == "f16" || text == "float16") return DType::kF16;
  return invalid_argument("--amp '" + text + "': use bf16 or fp16");
}

Status apply_autocast(Model* model, DType low, const std::vector<std::string>& keep_fp32, AutocastReport* report) {
  if (low == DType::kF32) return Status::ok();
  Graph& g = model->graph;
  for (const std::string& name : keep_fp32) {
    bool found = false;
    for (const Node& n : g.nodes) found |= node_matches(n, name);
    if (!found) return invalid_argument("--keep-fp32: the model has no node named '" + name + "'");
  }
  const auto& cube = default_cube_ops();
  const std::set<std::string> ops(cube.begin(), cube.end());
  const std::string tag = low == DType::kBF16 ? "bf16" : "f16";
  std::map<std::string, std::string> rounded;  // f32 value -> its rounded f32 form
  std::vector<Node> out;
  out.reserve(g.nodes.size() * 2);
  auto is_f32 = [&](const std::string& v) {
    const TensorType* t = v.empty() ? nullptr : g.find_type(v);
    return t && t->dtype == DType::kF32;
  };
  auto round_pair = [&](const std::string& from, const std::string& to) {
    const std::string mid = "amp/" + to + "::" + tag;
    out.push_back(make_cast_node("amp/cast/" + mid, from, mid, low));
    out.push_back(make_cast_node("amp/cast/" + to, mid, to, DType::kF32));
    if (report) report->casts_inserted += 2;
  };
  for (Node& n : g.nodes) {
    const bool lower = n.domain.empty() && ops.count(n.op_type) &&
                       std::none_of(keep_fp32.begin(), keep_fp32.end(), [&](const std::string& k) { return node_matches(n, k); }) &&
                       !n.outputs.empty() && is_f32(n.outputs[0]);
    if (!lower) {
      out.push_back(std::move(n));
      continue;
    }
    for (std::string& in : n.inputs) {
      if (!is_f32(in)) continue;
      auto it = rounded.find(in);
      if (it == rounded.end()) {
        const std::string r = "amp/" + in + "::rounded";
        round_pair(in, r);
        it = rounded.emplace(in, r).first;
      }
      in = it->second;
    }
    const std::string y = n.outputs[0];
    const std::string acc = "amp/" + y + "::f32acc";
    n.outputs[0] = acc;
    if (report) report->lowered.push_back(n.name);
    out.push_back(std::move(n));
    round_pair(acc, y);
  }
  g.nodes = std::move(out);
  return Status::ok();
}

}  // namespace ferry
