// Which forward convolutions of a training graph hand their input X, in the backend's layout, to
// the ConvGrad that reads the same X and W (backends/cpu/dnnl_conv_train.cpp keeps the forward's
// blocked copy of X for ConvGrad's backward-weights instead of reordering X twice per step;
// train/memory_plan_train.cpp counts the copies). One rule for both.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/env_switch.h"
#include "ir/graph.h"
#include "ops/blocked_layout.h"

namespace ferry {

/// One link: the forward Conv / FusedConv (inputs X, W) and the ConvGrad(dY, X, W) after it.
struct ConvGradLink {
  size_t forward = 0, grad = 0;  // node indices
  std::string key;               // the forward's output Y and X: unique within the graph
};

/// The links of `g`: a pair where exactly one forward node and exactly one ConvGrad read (X, W)
/// and the forward comes first. None under --recompute (nodes named ".../recompute"): a clone
/// runs just before its ConvGrad, and holding every copy would undo what recompute saves.
/// $FERRY_TRAIN_CONV_KEEP_X=0: none (to compare).
inline std::vector<ConvGradLink> conv_grad_links(const Graph& g) {
  std::vector<ConvGradLink> links;
  const char* off = env_value("FERRY_TRAIN_CONV_KEEP_X");
  if (off && std::string(off) == "0") return links;
  std::map<std::pair<std::string, std::string>, std::pair<std::vector<size_t>, std::vector<size_t>>> by_xw;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.name.size() >= 10 && n.name.compare(n.name.size() - 10, 10, "/recompute") == 0) return {};
    // com.ferry Blocked (train_blocked_layout) wraps them: an X held blocked needs no copy in f32,
    // but under --amp bf16 the forward's bf16 copy is kept as for a plain X.
    const bool wrapped = n.domain == "com.ferry" && n.op_type == "Blocked";
    const std::string op = inner_op(n);
    const bool conv = (n.domain.empty() && op == "Conv") || ((n.domain == "com.ferry") && op == "FusedConv") ||
                      (wrapped && op == "Conv");
    const bool grad = n.domain == "com.ferry" && op == "ConvGrad";
    if (conv && n.inputs.size() >= 2 && !n.outputs.empty() && !n.outputs[0].empty() && !n.inputs[0].empty())
      by_xw[{n.inputs[0], n.inputs[1]}].first.push_back(i);
    if (grad && n.inputs.size() >= 3 && !n.inputs[1].empty()) by_xw[{n.inputs[1], n.inputs[2]}].second.push_back(i);
  }
  for (const auto& [xw, nodes] : by_xw) {
    if (nodes.first.size() != 1 || nodes.second.size() != 1 || nodes.first[0] > nodes.second[0]) continue;
    const size_t f = nodes.first[0];
    links.push_back({f, nodes.second[0], g.nodes[f].outputs[0] + "\n" + xw.first});
  }
  return links;
}

/// --amp bf16: whether a ConvGrad's backward-weights runs in f32 on bf16-rounded operands instead of
/// oneDNN's bf16 kernel (backends/cpu/dnnl_conv_train_util.h measured why; train/memory_plan_train.cpp
/// counts its buffers): kernels wider than 1 with 128 input channels or more, ungrouped.
/// $FERRY_AMP_WGRAD = bf16 | f32 forces one for every shape.
inline bool amp_wgrad_f32(int64_t group, int64_t in_channels, const std::vector<int64_t>& kernel) {
  static const int forced = [] {
    const char* e = env_value("FERRY_AMP_WGRAD");
    if (!e) return -1;
    return std::string(e) == "f32" ? 1 : std::string(e) == "bf16" ? 0 : -1;
  }();
  if (forced >= 0) return forced == 1;
  bool wide = false;
  for (int64_t k : kernel) wide |= k > 1;
  return wide && group == 1 && in_channels >= 128;
}

}  // namespace ferry
