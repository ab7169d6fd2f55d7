// Pass nhwc_tokens (level 2, after nhwc_layout): a patch embedding's tokens, torch's
//   Transpose(Reshape(conv(x), [N, C, H*W]), [0, 2, 1])      (ViT: x.flatten(2).transpose(1, 2))
// become, once nhwc_layout runs the convolution channels-last,
//   Transpose(Reshape(Transpose(y_nhwc, [0, 3, 1, 2]), [N, C, H*W]), [0, 2, 1])
// two full copies that undo each other (ViT-B/16 b1: 0.23 + 0.31 of ~207 CPU ms at 1 thread, the
// reference Transpose kernel). [N, H, W, C] read as [N, H*W, C] is the same tensor: one Reshape.
// Likewise a classifier's Flatten(Transpose(y_nhwc, to NCHW)) where H = W = 1 (after a global pooling):
// the Transpose moves no byte, so Flatten(y_nhwc) is the same [N, C] (int8 MobileNetV2: one node less).
// FERRY_DISABLE_PASSES=nhwc_tokens: off.
#include <cstdlib>
#include <string>
#include <vector>

#include "ops/shape_inference.h"
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

std::vector<int64_t> perm_of(const Node& n) {
  const Attribute* a = n.attr("perm");
  return a ? a->ints : std::vector<int64_t>{};
}

const Shape* shape_of(const Graph& g, const std::string& v) {
  const TensorType* t = g.find_type(v);
  return t && t->shape ? &*t->shape : nullptr;
}

bool rewrite(PatternContext& pc, long t2) {
  Graph& g = pc.g;
  const Node& tn = g.nodes[t2];
  if (perm_of(tn) != std::vector<int64_t>{0, 2, 1}) return false;
  const long r = pc.single_use_producer(tn.inputs[0], "Reshape");
  if (r < 0) return false;
  const long t1 = pc.single_use_producer(g.nodes[r].inputs[0], "Transpose");
  if (t1 < 0 || perm_of(g.nodes[t1]) != std::vector<int64_t>{0, 3, 1, 2}) return false;
  const std::string x = g.nodes[t1].inputs[0];
  const Shape* xs = shape_of(g, x);            // [N, H, W, C]
  const Shape* rs = shape_of(g, g.nodes[r].outputs[0]);  // [N, C, H*W]
  if (!xs || !rs || xs->rank() != 4 || rs->rank() != 3) return false;
  for (int i = 1; i < 4; ++i)
    if (!xs->dims[i].is_known()) return false;
  const int64_t h = xs->dims[1].value, w = xs->dims[2].value, c = xs->dims[3].value;
  if (!(rs->dims[0] == xs->dims[0]) || !rs->dims[1].is_known() || rs->dims[1].value != c || !rs->dims[2].is_known() ||
      rs->dims[2].value != h * w)
    return false;
  // One Reshape of x to [N, H*W, C], written as the second Transpose's output, in its place.
  Node rn;
  rn.op_type = "Reshape";
  rn.name = fresh_name(g, tn.name + "_tokens");
  const std::string shape_name = fresh_name(g, rn.name + "_shape");
  Tensor ts = Tensor::from_vector<int64_t>({0, h * w, c}, {3});
  g.value_types[shape_name] = ts.type();
  g.initializers[shape_name] = std::move(ts);
  rn.inputs = {x, shape_name};
  rn.outputs = tn.outputs;
  rn.origin = {g.nodes[t1].name, g.nodes[r].name, tn.name};
  pc.dead[t1] = pc.dead[r] = true;
  g.nodes[t2] = std::move(rn);
  return true;
}

// Flatten (axis 1) of Transpose(x, [0, 3, 1, 2]) where x is [N, 1, 1, C]: Flatten(x).
bool pooled_flatten(PatternContext& pc, long f) {
  Graph& g = pc.g;
  Node& fn = g.nodes[f];
  if (const Attribute* a = fn.attr("axis"); a && a->i != 1) return false;
  const long t = pc.single_use_producer(fn.inputs[0], "Transpose");
  if (t < 0 || perm_of(g.nodes[t]) != std::vector<int64_t>{0, 3, 1, 2}) return false;
  const Shape* xs = shape_of(g, g.nodes[t].inputs[0]);
  if (!xs || xs->rank() != 4 || !(xs->dims[1] == Dim(int64_t{1})) || !(xs->dims[2] == Dim(int64_t{1}))) return false;
  fn.inputs[0] = g.nodes[t].inputs[0];
  if (fn.origin.empty()) fn.origin = {fn.name};
  fn.origin.insert(fn.origin.begin(), g.nodes[t].name);
  pc.dead[t] = true;
  return true;
}

Status run_nhwc_tokens(Model* model, PassContext& ctx) {
  PatternContext pc(model->graph);
  int changes = 0;
  for (size_t i = 0; i < pc.g.nodes.size(); ++i) {
    const Node& n = pc.g.nodes[i];
    if (pc.dead[i] || !n.domain.empty()) continue;
    if (n.op_type == "Transpose") changes += rewrite(pc, static_cast<long>(i));
    else if (n.op_type == "Flatten") changes += pooled_flatten(pc, static_cast<long>(i));
  }
  if (!changes) return Status::ok();
  pc.finish();
  ctx.changes += changes;
  return infer_shapes(model);
}

}  // namespace

GraphPass nhwc_tokens_pass() {
  return {"nhwc_tokens", 2,
          "Transpose(Reshape(Transpose(x_nhwc, to NCHW), [N, C, HW]), [0, 2, 1]) is Reshape(x_nhwc, [N, HW, C]); "
          "Flatten(Transpose(x_nhwc, to NCHW)) with H = W = 1 is Flatten(x_nhwc)",
          run_nhwc_tokens};
}

}  // namespace ferry
