// Pass attention_qkv_views (level 2, devices with trait "attention_qkv_views": cpu): after
// attention_layout, a block's q, k and v are
//   q/k/v = Reshape(Slice(QKV, [a, b), last axis), [.., H, D])
// of one fused QKV product: three copies of a third of QKV each, which the Attention kernel then
// gathers again per head (per-node CPU ms per run at 1 thread, `ferry profile -t 1 -b 8 --top 0`,
// interleaved with FERRY_ATTENTION_QKV_VIEWS=0, load 1.0-4.6: Slices BERT b8 5.5-7.4 -> 0, ViT-B/16
// b8 19.3-21.0 -> 1.7-2.0 (the last block's, cut by row_pruning); Attention unchanged within noise;
// whole-model A/B within noise: BERT b8 CPU p50 median 487.5 off / 488.5 on). Here the three
// operands become one Reshape of QKV to [.., N/D, D] (no copy) read through q_slice / k_slice /
// v_slice = [heads axis, a/D, b/D]: the kernel reads Q, K and V in place. Runs after row_pruning (a
// query cut to fewer rows, as ViT's last block, does not match and keeps its Slice).
// FERRY_DISABLE_PASSES=attention_qkv_views: off.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "ops/shape_inference.h"
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

const Shape* shape_of(const Graph& g, const std::string& v) {
  const TensorType* t = g.find_type(v);
  return t && t->shape ? &*t->shape : nullptr;
}

// The single constant int64 of `v` (a scalar or one-element tensor), or false.
bool const_int(const Graph& g, const std::string& v, int64_t* out) {
  const Tensor* t = constant_value(g, v);
  if (!t || t->numel() != 1 || (t->dtype() != DType::kI64 && t->dtype() != DType::kI32)) return false;
  *out = t->to_int64_vector()[0];
  return true;
}

bool rewrite(PatternContext& pc, long ai) {
  Graph& g = pc.g;
  Node& a = g.nodes[ai];
  if (a.inputs.size() < 3 || a.attr("q_slice") || a.attr("k_slice") || a.attr("v_slice")) return false;
  long reshapes[3], slices[3];
  int64_t start[3], end[3];
  std::string qkv;
  int64_t rank = -1, n = -1, d = -1;
  for (int i = 0; i < 3; ++i) {
    reshapes[i] = pc.single_use_producer(a.inputs[i], "Reshape");
    if (reshapes[i] < 0) return false;
    const Node& rn = g.nodes[reshapes[i]];
    slices[i] = pc.single_use_producer(rn.inputs[0], "Slice");
    if (slices[i] < 0) return false;
    const Node& sn = g.nodes[slices[i]];
    if (i == 0) qkv = sn.inputs[0];
    else if (sn.inputs[0] != qkv) return false;
    const Shape* xs = shape_of(g, qkv);
    const Shape* rs = shape_of(g, rn.outputs[0]);
    if (!xs || !rs || xs->rank() < 2 || rs->rank() != xs->rank() + 1) return false;
    rank = xs->rank();
    if (!xs->dims[rank - 1].is_known() || !rs->dims[rank - 1].is_known() || !rs->dims[rank].is_known()) return false;
    n = xs->dims[rank - 1].value;
    // The Reshape splits the last axis only: [.., E] -> [.., H, D], the leading dims unchanged.
    for (int64_t j = 0; j + 1 < rank; ++j)
      if (!(xs->dims[j] == rs->dims[j])) return false;
    const int64_t di = rs->dims[rank].value;
    if (i == 0) d = di;
    else if (di != d) return false;
    // Slice(QKV, start, end, axes = last[, steps = 1]) with constant bounds in [0, n].
    int64_t axis = 0, step = 1;
    if (sn.inputs.size() < 4 || !const_int(g, sn.inputs[1], &start[i]) || !const_int(g, sn.inputs[2], &end[i]) ||
        !const_int(g, sn.inputs[3], &axis))
      return false;
    if (sn.inputs.size() > 4 && !sn.inputs[4].empty() && (!const_int(g, sn.inputs[4], &step) || step != 1)) return false;
    if (axis != rank - 1 && axis != -1) return false;
    if (start[i] < 0 || end[i] > n || start[i] >= end[i] || d <= 0 || start[i] % d || end[i] % d || n % d) return false;
    if ((end[i] - start[i]) != rs->dims[rank - 1].value * d) return false;
  }
  if (pc.uses.pinned.count(qkv) || pc.uses.num_readers(qkv) != 3) return false;

  // One Reshape of QKV to [0.., n/d, d] in the first Slice's place (QKV exists there).
  std::vector<int64_t> target(static_cast<size_t>(rank - 1), 0);
  target.push_back(n / d);
  target.push_back(d);
  Node rn;
  rn.op_type = "Reshape";
  rn.name = fresh_name(g, a.name + "_qkv_heads");
  const std::string shape_name = fresh_name(g, rn.name + "_shape");
  Tensor ts = Tensor::from_vector<int64_t>(target, {static_cast<int64_t>(target.size())});
  g.value_types[shape_name] = ts.type();
  g.initializers[shape_name] = std::move(ts);
  rn.inputs = {qkv, shape_name};
  rn.outputs = {fresh_name(g, qkv + "_heads")};
  static const char* kAttrs[] = {"q_slice", "k_slice", "v_slice"};
  for (int i = 0; i < 3; ++i) {
    a.inputs[static_cast<size_t>(i)] = rn.outputs[0];
    set_attr(&a, kAttrs[i], std::vector<int64_t>{rank - 1, start[i] / d, end[i] / d});
    pc.dead[reshapes[i]] = pc.dead[slices[i]] = true;
  }
  long first = slices[0];
  for (long s : slices) first = std::min(first, s);
  rn.origin = {g.nodes[slices[0]].name, g.nodes[slices[1]].name, g.nodes[slices[2]].name};
  g.nodes[first] = std::move(rn);
  pc.dead[first] = false;
  return true;
}

Status run_attention_qkv_views(Model* model, PassContext& ctx) {
  PatternContext pc(model->graph);
  int changes = 0;
  for (size_t i = 0; i < pc.g.nodes.size(); ++i) {
    const Node& n = pc.g.nodes[i];
    if (!pc.dead[i] && n.domain == kFerryDomain && n.op_type == "Attention") changes += rewrite(pc, static_cast<long>(i));
  }
  if (!changes) return Status::ok();
  pc.finish();
  ctx.changes += changes;
  return infer_shapes(model);
}

}  // namespace

GraphPass attention_qkv_views_pass() {
  return {"attention_qkv_views", 2,
          "q, k, v sliced from one QKV product are read by the Attention in place (q_slice/k_slice/v_slice)",
          run_attention_qkv_views, "attention_qkv_views"};
}

}  // namespace ferry
