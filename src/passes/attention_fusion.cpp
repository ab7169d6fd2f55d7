// Pass attention_fusion (level 2): scaled dot-product attention of transformer exports,
//   s = MatMul(q [* / c1], kT) [* / c2] [+ mask [* 1]];  p = Softmax(s, last axis);  y = MatMul(p, v)
// becomes com.ferry.Attention(q, kT, v, mask; scale). Transposes that only feed q, kT or v, and a
// Transpose that is the only reader of y, are absorbed as q_perm/k_perm/v_perm/out_perm, so the
// kernel reads the heads in place instead of materializing [batch, heads, seq, dim] copies.
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

// Walks back from v through Mul/Div by scalar constants (each read once), multiplying `scale`.
std::string strip_scales(const PatternContext& pc, std::string v, double* scale, std::vector<long>* covered) {
  for (;;) {
    long m = pc.single_use_producer(v, "Mul");
    double c = 0;
    if (m >= 0) {
      const Node& n = pc.g.nodes[m];
      if (scalar_constant(pc.g, n.inputs[1], &c)) v = n.inputs[0];
      else if (scalar_constant(pc.g, n.inputs[0], &c)) v = n.inputs[1];
      else return v;
      *scale *= c;
      covered->push_back(m);
      continue;
    }
    m = pc.single_use_producer(v, "Div");
    if (m >= 0 && scalar_constant(pc.g, pc.g.nodes[m].inputs[1], &c) && c != 0) {
      v = pc.g.nodes[m].inputs[0];
      *scale /= c;
      covered->push_back(m);
      continue;
    }
    return v;
  }
}

// The shape of an f32 value of known rank (dims may be symbolic: dynamic batch exports).
const Shape* ranked_shape(const Graph& g, const std::string& v) {
  const TensorType* t = g.find_type(v);
  return t && t->dtype == DType::kF32 && t->shape ? &*t->shape : nullptr;
}

// Whether mask dim `d` broadcasts to scores dim `want` (unknown dims: the kernels check at run time).
bool mask_dim_fits(const Dim& d, const Dim& want) {
  if (d.is_known() && d.value == 1) return true;
  if (d.is_known() && want.is_known()) return d.value == want.value;
  return !(want.is_known() && want.value == 1);
}

// Absorbs a Transpose producing v (read only here): returns its input and sets perm.
std::string absorb_transpose(const PatternContext& pc, const std::string& v, std::vector<int64_t>* perm,
                             std::vector<long>* covered) {
  const long t = pc.single_use_producer(v, "Transpose");
  if (t < 0 || !pc.g.nodes[t].attr("perm")) return v;
  *perm = pc.g.nodes[t].attr("perm")->ints;
  covered->push_back(t);
  return pc.g.nodes[t].inputs[0];
}

bool fuse_attention(PatternContext& pc, long sm) {
  const Graph& g = pc.g;
  const Node& smn = g.nodes[sm];
  const Shape* ss = ranked_shape(g, smn.inputs[0]);
  if (!ss || ss->rank() < 2) return false;
  // (Before opset 13 the default axis is 1 with flattening; the caller skips those.)
  const int64_t axis = smn.attr("axis") ? smn.attr("axis")->i : -1;
  if (axis != -1 && axis != ss->rank() - 1) return false;
  const long mm2 = pc.sole_reader(smn.outputs[0]);
  if (mm2 < 0 || g.nodes[mm2].op_type != "MatMul" || !g.nodes[mm2].domain.empty() || g.nodes[mm2].inputs[0] != smn.outputs[0])
    return false;
  std::vector<long> covered = {sm, mm2};
  double scale = 1;
  std::string scores = smn.inputs[0], mask;
  if (!pc.uses.single_use(scores)) return false;
  const long add = pc.producer(scores, "Add");
  long mm1 = -1;
  if (add >= 0) {
    covered.push_back(add);
    for (int k = 0; k < 2 && mm1 < 0; ++k) {
      std::vector<long> cov;
      double sc = 1;
      const std::string s = strip_scales(pc, g.nodes[add].inputs[k], &sc, &cov);
      const long m = pc.single_use_producer(s, "MatMul");
      if (m < 0) continue;
      mm1 = m;
      scale = sc;
      covered.insert(covered.end(), cov.begin(), cov.end());
      mask = g.nodes[add].inputs[1 - k];
    }
    if (mm1 < 0) return false;
    // mask * 1 (baddbmm's beta) needs no node.
    const long mb = pc.single_use_producer(mask, "Mul");
    double one = 0;
    if (mb >= 0 && scalar_constant(g, g.nodes[mb].inputs[1], &one) && one == 1.0) {
      mask = g.nodes[mb].inputs[0];
      covered.push_back(mb);
    }
    // The mask must broadcast to the scores (not the other way round).
    const Shape* ms = ranked_shape(g, mask);
    if (!ms || ms->rank() > ss->rank()) return false;
    for (int64_t i = 0; i < ms->rank(); ++i)
      if (!mask_dim_fits(ms->dims[i], ss->dims[ss->rank() - ms->rank() + i])) return false;
  } else {
    const std::string s = strip_scales(pc, scores, &scale, &covered);
    mm1 = pc.single_use_producer(s, "MatMul");
    if (mm1 < 0) return false;
  }
  covered.push_back(mm1);
  std::string q = strip_scales(pc, g.nodes[mm1].inputs[0], &scale, &covered);
  std::string k = g.nodes[mm1].inputs[1];
  std::string v = g.nodes[mm2].inputs[1];
  // Equal ranks; the batch dims broadcast in Attention as in MatMul (checked at run time when symbolic).
  const Shape *sq = ranked_shape(g, q), *sk = ranked_shape(g, k), *sv = ranked_shape(g, v);
  if (!sq || !sk || !sv || sq->rank() != ss->rank() || sk->rank() != ss->rank() || sv->rank() != ss->rank()) return false;
  std::vector<int64_t> qp, kp, vp, op;
  q = absorb_transpose(pc, q, &qp, &covered);
  k = absorb_transpose(pc, k, &kp, &covered);
  if (v != q && v != k) v = absorb_transpose(pc, v, &vp, &covered);
  std::string out = g.nodes[mm2].outputs[0];
  const long ot = pc.sole_reader(out);
  if (ot >= 0 && g.nodes[ot].op_type == "Transpose" && g.nodes[ot].domain.empty() && g.nodes[ot].attr("perm")) {
    op = g.nodes[ot].attr("perm")->ints;
    covered.push_back(ot);
    out = g.nodes[ot].outputs[0];
  }
  Node fused;
  fused.op_type = "Attention";
  fused.domain = kFerryDomain;
  fused.name = smn.name + "_Attention";
  fused.inputs = {q, k, v};
  if (!mask.empty()) fused.inputs.push_back(mask);
  fused.outputs = {out};
  set_attr(&fused, "scale", static_cast<float>(scale));
  if (!qp.empty()) set_attr(&fused, "q_perm", qp);
  if (!kp.empty()) set_attr(&fused, "k_perm", kp);
  if (!vp.empty()) set_attr(&fused, "v_perm", vp);
  if (!op.empty()) set_attr(&fused, "out_perm", op);
  pc.replace(covered, std::move(fused));
  return true;
}

Status run_attention_fusion(Model* model, PassContext& ctx) {
  PatternContext pc(model->graph);
  const bool default_axis_last = model->opset() >= 13;
  for (size_t i = 0; i < pc.g.nodes.size(); ++i) {
    const Node& n = pc.g.nodes[i];
    if (pc.dead[i] || !n.domain.empty() || n.op_type != "Softmax") continue;
    if (!n.attr("axis") && !default_axis_last) continue;
    if (fuse_attention(pc, static_cast<long>(i))) ++ctx.changes;
  }
  pc.finish();
  if (ctx.changes) use_ferry_domain(model);
  return Status::ok();
}

}  // namespace

GraphPass attention_fusion_pass() {
  return {"attention_fusion", 2, "MatMul-scale-mask-Softmax-MatMul becomes com.ferry.Attention (transposes absorbed)",
          run_attention_fusion};
}

}  // namespace ferry
