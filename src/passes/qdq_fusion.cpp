// Pass qdq_fusion (level 2): the QDQ form of a quantized model (QuantizeLinear/DequantizeLinear around
// float ops, as ONNX Runtime's quantize_static and `ferry quantize` write it) becomes int8 ops, so that
// 8-bit tensors go from one quantized op to the next with no float tensor in between:
//   DQ(x u8/s8, per-tensor), DQ(w s8 constant, per-channel axis 0 or per-tensor, zero point 0)
//   [, DQ(B int32 constant, scale x_scale * w_scale)] -> Conv [-> Relu]
//   [-> Q -> DQ (same scale and zero point) -> Add(DQ(z))  |  -> Add(DQ(z))] [-> Relu] -> Q
//                                             -> com.ferry.QConvFused (src/ops/quantize_fused.cpp)
//   the same with a float bias constant [M] (the plain structure's), a Clip with constant bounds in
//   the Relu's place, and with no Q at the end: a float output (the dequantization in the int8
//   kernel's epilogue; the chain ends where no Q follows: after the Conv, or its Relu / Clip, or its
//   SiLU (x * Sigmoid(x)) or Sigmoid, which make the output float, or after an Add of a float32 residual
//   of its shape [-> Relu], the plain structure's residual block: z float32, relu; that block's output
//   read by a per-tensor Q too (the next convolution's input): the Q becomes output 1, yq)
//   DQ(a), DQ(W s8 [K, N] or Gemm's [N, K], per column) -> MatMul [-> Add(DQ(B int32))] | Gemm(DQ(C int32))
//   [-> Relu] -> Q                            -> com.ferry.QMatMulFused (W kept as [K, N])
//   the same with a float bias constant [N] (Add or Gemm's C), and with no Q: a float output
//   (ONNX Runtime's MatMulIntegerToFloat)
//   the same ending in [-> Relu | Clip] -> MaxPool -> Q: the Q moved before the MaxPool (QConvFused, then the
//   MaxPool on its 8-bit output; exact, as below)
//   DQ(x) -> MaxPool | Flatten | Reshape | Squeeze | Unsqueeze -> Q with the same scale and zero point
//                                             -> the op on the 8-bit x (exact: max commutes with a monotone
//                                                map, the others move values)
//   DQ(x) -> GlobalAveragePool -> Q           -> com.ferry.QGlobalAveragePool (integer sum, one requantization:
//                                                ONNX Runtime's QLinearGlobalAveragePool; the f32 mean of the
//                                                QDQ nodes differs only next to a rounding tie)
//   DQ(x) -> element-wise float ops on x alone (and scalar constants) [-> Q]
//                                             -> com.ferry.QLookup: y = table[x], the table those nodes
//                                                evaluated on x's 256 values (EfficientNet's SiLU; exact);
//                                                without the Q a float table (the chain's end read in float);
//                                                qdq_lookup_chain.cpp
// A DQ whose output other nodes also read stays for them. Runs before constant_folding, which would
// otherwise turn the weights' DQ into float constants (and before shape_folding, which folds small ones).
#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "passes/graph_edit.h"
#include "passes/pipeline.h"
#include "passes/qdq_common.h"

namespace ferry {
namespace qdq {

bool per_tensor_params(const Graph& g, const Node& n, QParams* p) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  const Tensor* s = constant_value(g, n.inputs[1]);
  if (!s || s->numel() != 1 || s->dtype() != DType::kF32) return false;
  p->scale = n.inputs[1];
  p->s = s->data<float>()[0];
  if (!(p->s > 0) || !std::isfinite(p->s)) return false;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const Tensor* z = constant_value(g, n.inputs[2]);
    if (!z || z->numel() != 1 || (z->dtype() != DType::kU8 && z->dtype() != DType::kI8)) return false;
    p->zp = n.inputs[2];
    p->z = z->get_int64(0);
    p->dt = z->dtype();
  }
  const Attribute* bs = n.attr("block_size");
  return !(bs && bs->i != 0);
}

// The per-tensor DQ producing `v` (8-bit input), or -1.
long dq_per_tensor(const PatternContext& pc, const std::string& v, QParams* p) {
  const long d = pc.producer(v, "DequantizeLinear");
  if (d < 0 || !per_tensor_params(pc.g, pc.g.nodes[d], p)) return -1;
  const TensorType* t = pc.g.find_type(pc.g.nodes[d].inputs[0]);
  return t && (t->dtype == DType::kU8 || t->dtype == DType::kI8) ? d : -1;
}

}  // namespace qdq

namespace {

using qdq::dq_per_tensor;
using qdq::is_onnx;
using qdq::per_tensor_params;
using qdq::QParams;

bool same_params(const QParams& a, const QParams& b) { return a.s == b.s && a.z == b.z && a.dt == b.dt; }

bool rel_close(float a, float b) { return std::fabs(a - b) <= 1e-5f * std::fabs(b); }

// A zero point value name for `p` (an absent one becomes a uint8 0 initializer).
std::string zp_name(Graph* g, const QParams& p) {
  if (!p.zp.empty()) return p.zp;
  const std::string name = fresh_name(*g, "qdq_zero_u8");
  Tensor t = Tensor::allocate(DType::kU8, {});
  t.mutable_data<uint8_t>()[0] = 0;
  g->value_types[name] = t.type();
  g->initializers[name] = std::move(t);
  return name;
}

// A float constant with n elements ([n], or [1, n] where `row_ok`): the plain structure's float bias.
bool float_bias(const Graph& g, const std::string& v, int64_t n, bool row_ok) {
  const Tensor* b = v.empty() ? nullptr : constant_value(g, v);
  if (!b || b->dtype() != DType::kF32 || b->numel() != n) return false;
  return b->rank() == 1 || (row_ok && b->rank() == 2 && b->dim(0) == 1);
}

// Clip with constant scalar bounds (absent: unbounded; an initializer or a Constant node's value, as
// the PyTorch exporter writes ReLU6's) -> its bounds.
bool constant_clip(const PatternContext& pc, const Node& n, float* lo, float* hi) {
  if (!is_onnx(n, "Clip") || n.outputs.size() != 1) return false;
  *lo = -INFINITY;
  *hi = INFINITY;
  for (size_t i = 1; i < n.inputs.size() && i < 3; ++i) {
    if (n.inputs[i].empty()) continue;
    const Tensor* t = constant_value(pc.g, n.inputs[i]);
    if (const long k = pc.producer(n.inputs[i], "Constant"); !t && k >= 0) {
      const Attribute* v = pc.g.nodes[k].attr("value");
      t = v && v->t.defined() ? &v->t : nullptr;
    }
    if (!t || t->numel() != 1 || t->dtype() != DType::kF32) return false;
    (i == 1 ? *lo : *hi) = t->data<float>()[0];
  }
  const Attribute* mn = n.attr("min");  // opset < 11
  const Attribute* mx = n.attr("max");
  if (mn) *lo = mn->f;
  if (mx) *hi = mx->f;
  return !(*lo > *hi) && !std::isnan(*lo) && !std::isnan(*hi);
}

// v -> Sigmoid -> Mul(v, Sigmoid(v)) (SiLU, EfficientNet's), or v's only reader a Sigmoid (a
// squeeze-excitation gate): the nodes (gate first) and the activation's name; false when neither.
bool match_sigmoid_act(const PatternContext& pc, const std::string& v, std::vector<long>* nodes, std::string* name) {
  if (pc.uses.pinned.count(v)) return false;
  const long s = pc.sole_reader(v);
  if (s >= 0 && is_onnx(pc.g.nodes[s], "Sigmoid")) {
    *nodes = {s};
    *name = "Sigmoid";
    return true;
  }
  if (pc.uses.num_readers(v) != 2) return false;
  long gate = -1, mul = -1;
  for (size_t r : pc.uses.readers.at(v)) {
    if (pc.dead[r]) return false;
    if (is_onnx(pc.g.nodes[r], "Sigmoid")) gate = static_cast<long>(r);
    else if (is_onnx(pc.g.nodes[r], "Mul")) mul = static_cast<long>(r);
  }
  if (gate < 0 || mul < 0 || pc.sole_reader(pc.g.nodes[gate].outputs[0]) != mul ||
      other_input(pc.g.nodes[mul], v) != pc.g.nodes[gate].outputs[0])
    return false;
  *nodes = {gate, mul};
  *name = "Silu";
  return true;
}

// Adds DQ node `d` to `covered` when the fused node is its only reader.
void cover_if_sole(const PatternContext& pc, long d, long reader, std::vector<long>* covered) {
  if (d >= 0 && pc.sole_reader(pc.g.nodes[d].outputs[0]) == reader) covered->push_back(d);
}

// The plain structure's residual block output `v` (float32: the next block's residual) is read by a per-tensor
// QuantizeLinear too (the next convolution's input): that Q, to become the fused node's output 1 (yq: the Q's
// formula on the same float, written in the same pass over the output), or -1. The fused node takes the place
// of the last node it covers, so every other reader of v must come after the Q (`last`: the chain's last node).
long block_output_q(const PatternContext& pc, const std::string& v, long last, QParams* p) {
  auto it = pc.uses.readers.find(v);
  if (it == pc.uses.readers.end()) return -1;
  long q = -1;
  for (size_t r : it->second)
    if (!pc.dead[r] && is_onnx(pc.g.nodes[r], "QuantizeLinear") && pc.g.nodes[r].inputs[0] == v && q < 0) q = static_cast<long>(r);
  if (q < 0 || q < last || !per_tensor_params(pc.g, pc.g.nodes[q], p)) return -1;
  const TensorType* t = pc.g.find_type(pc.g.nodes[q].outputs[0]);
  if (!t || t->dtype != p->dt) return -1;
  for (size_t r : it->second)
    if (!pc.dead[r] && static_cast<long>(r) != q && static_cast<long>(r) < q) return -1;
  return q;
}

bool fuse_qconv(PatternContext& pc, long c) {
  Graph& g = pc.g;
  const Node conv = g.nodes[c];
  if (conv.inputs.size() < 2 || conv.outputs.size() != 1) return false;
  QParams xp;
  const long dx = dq_per_tensor(pc, conv.inputs[0], &xp);
  const long dw = pc.producer(conv.inputs[1], "DequantizeLinear");
  if (dx < 0 || dw < 0) return false;
  // Weights: int8 constant, scale per tensor or per output channel (axis 0), zero point 0.
  const Node& wn = g.nodes[dw];
  const Tensor* w = constant_value(g, wn.inputs[0]);
  const Tensor* ws = wn.inputs.size() > 1 ? constant_value(g, wn.inputs[1]) : nullptr;
  if (!w || w->dtype() != DType::kI8 || w->rank() < 3 || !ws || ws->dtype() != DType::kF32) return false;
  const int64_t M = w->dim(0);
  if (ws->numel() != 1) {
    const Attribute* axis = wn.attr("axis");
    if (ws->numel() != M || !axis || axis->i != 0) return false;
  }
  std::string wzp;
  if (wn.inputs.size() > 2 && !wn.inputs[2].empty()) {
    const Tensor* z = constant_value(g, wn.inputs[2]);
    if (!z || z->dtype() != DType::kI8) return false;
    for (int64_t i = 0; i < z->numel(); ++i)
      if (z->get_int64(i) != 0) return false;
  }
  // Bias: int32 constant with scale x_scale * w_scale[m] (what an integer accumulator adds exactly), or a
  // float constant (the plain structure's).
  long db = -1;
  std::string bq;
  if (conv.inputs.size() > 2 && !conv.inputs[2].empty()) {
    db = pc.producer(conv.inputs[2], "DequantizeLinear");
    if (db < 0 && !float_bias(g, conv.inputs[2], M, false)) return false;
    if (db < 0) bq = conv.inputs[2];
  }
  if (db >= 0) {
    const Node& bn = g.nodes[db];
    const Tensor* b = constant_value(g, bn.inputs[0]);
    const Tensor* bs = bn.inputs.size() > 1 ? constant_value(g, bn.inputs[1]) : nullptr;
    if (!b || b->dtype() != DType::kI32 || b->numel() != M || !bs || bs->dtype() != DType::kF32) return false;
    if (bs->numel() != 1 && bs->numel() != M) return false;
    if (bn.inputs.size() > 2 && !bn.inputs[2].empty()) {
      const Tensor* z = constant_value(g, bn.inputs[2]);
      if (!z || z->numel() != bs->numel()) return false;
      for (int64_t i = 0; i < z->numel(); ++i)
        if (z->get_int64(i) != 0) return false;
    }
    for (int64_t m = 0; m < M; ++m) {
      const float want = xp.s * ws->data<float>()[ws->numel() == 1 ? 0 : m];
      if (!rel_close(bs->data<float>()[bs->numel() == 1 ? 0 : m], want)) return false;
    }
    bq = bn.inputs[0];
  }
  // The chain after the convolution.
  std::vector<long> covered = {c};
  std::string out = conv.outputs[0];
  bool conv_relu = false, relu = false, clip = false;
  float clip_lo = 0, clip_hi = 0;
  long r = pc.sole_reader(out);
  if (r >= 0 && (is_onnx(g.nodes[r], "Relu") || constant_clip(pc, g.nodes[r], &clip_lo, &clip_hi))) {
    conv_relu = is_onnx(g.nodes[r], "Relu");
    clip = !conv_relu;
    covered.push_back(r);
    out = g.nodes[r].outputs[0];
    r = pc.sole_reader(out);
  }
  // Conv [-> Relu | Clip] -> MaxPool -> Q (the plain structure's ResNet stem): the Q goes before the MaxPool,
  // which then runs on the 8-bit tensor the fused node writes (exact: a maximum commutes with the monotone
  // quantization, and MaxPool ignores its padding either way).
  long pool = -1;
  if (r >= 0 && is_onnx(g.nodes[r], "MaxPool") && g.nodes[r].inputs.size() == 1 && g.nodes[r].outputs.size() == 1) {
    const long pq = pc.sole_reader(g.nodes[r].outputs[0]);
    QParams pp;
    if (pq >= 0 && is_onnx(g.nodes[pq], "QuantizeLinear") && per_tensor_params(g, g.nodes[pq], &pp) && g.find_type(out) &&
        g.find_type(out)->shape) {
      pool = r;
      r = pq;
    }
  }
  // SiLU / Sigmoid on the convolution's result: float outputs only (the activation in the epilogue).
  std::string act;
  std::vector<long> act_nodes;
  if (!conv_relu && !clip && pool < 0 && match_sigmoid_act(pc, out, &act_nodes, &act)) {
    covered.insert(covered.end(), act_nodes.begin(), act_nodes.end());
    out = g.nodes[act_nodes.back()].outputs[0];
    r = -1;  // no Q or residual after it
  }
  const size_t conv_covered = covered.size();  // a float output ends here
  const std::string float_out = out;
  QParams mid, yp, zp;
  bool has_mid = false;
  long q = -1, add = -1, dz = -1;
  std::vector<long> tail;  // nodes after a mid Q, covered only when the residual matches
  if (r >= 0 && is_onnx(g.nodes[r], "QuantizeLinear")) {
    if (!per_tensor_params(g, g.nodes[r], &yp)) return false;
    q = r;
    // Q -> DQ (same parameters) -> Add(DQ(z)) [-> Relu] -> Q: the residual joins the fused node.
    const long d1 = pool >= 0 ? -1 : pc.sole_reader(g.nodes[q].outputs[0]);
    QParams p1;
    if (d1 >= 0 && is_onnx(g.nodes[d1], "DequantizeLinear") && per_tensor_params(g, g.nodes[d1], &p1) &&
        same_params(p1, yp)) {
      const long a = pc.sole_reader(g.nodes[d1].outputs[0]);
      if (a >= 0 && is_onnx(g.nodes[a], "Add")) {
        mid = yp;
        has_mid = true;
        tail = {q, d1};
        add = a;
      }
    }
  } else if (r >= 0 && is_onnx(g.nodes[r], "Add")) {
    add = r;
  }
  if (add >= 0) {
    const Node& an = g.nodes[add];
    const std::string in = has_mid ? g.nodes[tail[1]].outputs[0] : out;
    const std::string other = other_input(an, in);
    long q2 = -1;
    std::vector<long> after = {add};
    bool ok = !other.empty() && (dz = dq_per_tensor(pc, other, &zp)) >= 0;
    if (ok) {
      const TensorType* tz = g.find_type(g.nodes[dz].inputs[0]);
      const TensorType* ty = g.find_type(an.outputs[0]);
      ok = tz && ty && tz->shape && ty->shape && *tz->shape == *ty->shape;  // no broadcast of z
    }
    long n2 = ok ? pc.sole_reader(an.outputs[0]) : -1;
    if (n2 >= 0 && is_onnx(g.nodes[n2], "Relu")) {
      relu = true;
      after.push_back(n2);
      n2 = pc.sole_reader(g.nodes[n2].outputs[0]);
    }
    QParams p2;
    if (n2 >= 0 && is_onnx(g.nodes[n2], "QuantizeLinear") && per_tensor_params(g, g.nodes[n2], &p2)) q2 = n2;
    if (q2 >= 0) {
      covered.insert(covered.end(), tail.begin(), tail.end());
      covered.insert(covered.end(), after.begin(), after.end());
      covered.push_back(q2);
      yp = p2;
      q = q2;
    } else {
      relu = false;
      dz = -1;
      has_mid = false;
    }
  }
  // No Q to end on (Conv [-> Relu | Clip] -> float ops): a float output, the convolution int8.
  const bool float_y = q < 0;
  std::string fz, fout = float_out;  // a float output's float32 residual and the node's output then
  long yq = -1;                      // and its QuantizeLinear, output 1 (block_output_q)
  QParams yqp;
  if (float_y) {
    covered.resize(conv_covered);
    relu = false;
    dz = -1;
    has_mid = false;
    // The plain structure's residual: the float output's only reader an Add of a float32 value of its shape
    // (no broadcast) [-> Relu]: both join the node (its epilogue adds z, then the Relu: the same f32 steps).
    const long fa = act.empty() && pool < 0 ? pc.sole_reader(float_out) : -1;
    if (fa >= 0 && is_onnx(g.nodes[fa], "Add")) {
      const Node& an = g.nodes[fa];
      const std::string other = other_input(an, float_out);
      const TensorType* tz = other.empty() ? nullptr : g.find_type(other);
      const TensorType* ty = g.find_type(an.outputs[0]);
      if (tz && ty && tz->dtype == DType::kF32 && ty->dtype == DType::kF32 && tz->shape && ty->shape && *tz->shape == *ty->shape) {
        covered.push_back(fa);
        fz = other;
        fout = an.outputs[0];
        const long fr = pc.sole_reader(fout);
        if (fr >= 0 && is_onnx(g.nodes[fr], "Relu")) {
          covered.push_back(fr);
          relu = true;
          fout = g.nodes[fr].outputs[0];
        }
        yq = block_output_q(pc, fout, *std::max_element(covered.begin(), covered.end()), &yqp);
        if (yq >= 0) covered.push_back(yq);
      }
    }
  } else if (std::find(covered.begin(), covered.end(), q) == covered.end()) {
    covered.push_back(q);
  }

  Node fused;
  fused.name = conv.name;
  fused.op_type = "QConvFused";
  fused.domain = kFerryDomain;
  fused.attrs = conv.attrs;
  if (conv_relu) set_attr(&fused, "conv_relu", int64_t{1});
  if (clip && clip_lo > -INFINITY) set_attr(&fused, "conv_min", clip_lo);
  if (clip && clip_hi < INFINITY) set_attr(&fused, "conv_max", clip_hi);
  if (!act.empty()) set_attr(&fused, "activation", act);
  if (relu) set_attr(&fused, "relu", int64_t{1});
  const std::string xzp = zp_name(&g, xp), yzp = float_y ? "" : zp_name(&g, yp);
  fused.inputs = {g.nodes[dx].inputs[0], xp.scale, xzp, wn.inputs[0], wn.inputs[1], wzp,
                  float_y ? "" : yp.scale, yzp, bq};
  if (!fz.empty()) fused.inputs.push_back(fz);
  if (dz >= 0) {
    fused.inputs.push_back(g.nodes[dz].inputs[0]);
    fused.inputs.push_back(zp.scale);
    fused.inputs.push_back(zp_name(&g, zp));
  }
  if (has_mid) {
    if (dz < 0) fused.inputs.resize(12);
    fused.inputs.push_back(mid.scale);
    fused.inputs.push_back(zp_name(&g, mid));
  }
  if (yq >= 0) {
    fused.inputs.resize(14);
    fused.inputs.push_back(yqp.scale);
    fused.inputs.push_back(zp_name(&g, yqp));
  }
  while (fused.inputs.back().empty()) fused.inputs.pop_back();
  fused.outputs = {float_y ? fout : g.nodes[q].outputs[0]};
  if (yq >= 0) fused.outputs.push_back(g.nodes[yq].outputs[0]);
  Node pooled;  // the MaxPool moved after the Q: the fused node's 8-bit output -> the Q's output
  if (pool >= 0) {
    covered.erase(std::remove(covered.begin(), covered.end(), q), covered.end());
    pooled = g.nodes[pool];
    const std::string mid_out = fresh_name(g, g.nodes[q].outputs[0] + "_before_pool");
    TensorType t = *g.find_type(out);
    t.dtype = yp.dt;
    g.value_types[mid_out] = t;
    pooled.inputs = {mid_out};
    pooled.outputs = fused.outputs;
    fused.outputs = {mid_out};
  }
  cover_if_sole(pc, dx, c, &covered);
  cover_if_sole(pc, dw, c, &covered);
  cover_if_sole(pc, db, c, &covered);
  if (dz >= 0) cover_if_sole(pc, dz, add, &covered);
  pc.replace(covered, std::move(fused));
  if (pool >= 0) pc.replace({pool, q}, std::move(pooled));
  return true;
}

// Weights of a MatMul/Gemm: DQ of an int8 2-D constant with zero point 0, scale per tensor or per
// column of the product (`axis` = the weight's N axis). Returns the int8 tensor as [K, N] (transposed
// into a new initializer when the weight is [N, K]) and its scale name, or false.
bool matmul_weights(PatternContext& pc, long dw, bool n_first, std::string* wq, std::string* ws_name, int64_t* N) {
  Graph& g = pc.g;
  const Node& wn = g.nodes[dw];
  const Tensor* w = constant_value(g, wn.inputs[0]);
  const Tensor* ws = wn.inputs.size() > 1 ? constant_value(g, wn.inputs[1]) : nullptr;
  if (!w || w->dtype() != DType::kI8 || w->rank() != 2 || !ws || ws->dtype() != DType::kF32) return false;
  const int64_t n_axis = n_first ? 0 : 1;
  *N = w->dim(n_axis);
  if (ws->numel() != 1) {
    const Attribute* axis = wn.attr("axis");
    const int64_t a = axis ? (axis->i < 0 ? axis->i + 2 : axis->i) : 1;
    if (ws->numel() != *N || a != n_axis) return false;
  }
  if (wn.inputs.size() > 2 && !wn.inputs[2].empty()) {
    const Tensor* z = constant_value(g, wn.inputs[2]);
    if (!z || z->dtype() != DType::kI8) return false;
    for (int64_t i = 0; i < z->numel(); ++i)
      if (z->get_int64(i) != 0) return false;
  }
  *ws_name = wn.inputs[1];
  if (!n_first) {
    *wq = wn.inputs[0];
    return true;
  }
  const int64_t K = w->dim(1);
  Tensor t = Tensor::allocate(DType::kI8, {K, *N});
  for (int64_t n = 0; n < *N; ++n)
    for (int64_t k = 0; k < K; ++k) t.mutable_data<int8_t>()[k * *N + n] = w->data<int8_t>()[n * K + k];
  *wq = fresh_name(g, wn.inputs[0] + "_kn");
  g.value_types[*wq] = t.type();
  g.initializers[*wq] = std::move(t);
  return true;
}

// DQ of an int32 [N] constant whose scale is a_scale * w_scale[n] (zero point 0): the int32 bias.
bool int32_bias(const PatternContext& pc, long db, float a_scale, const Tensor& ws, int64_t N) {
  const Node& bn = pc.g.nodes[db];
  const Tensor* b = constant_value(pc.g, bn.inputs[0]);
  const Tensor* bs = bn.inputs.size() > 1 ? constant_value(pc.g, bn.inputs[1]) : nullptr;
  if (!b || b->dtype() != DType::kI32 || b->numel() != N || !bs || bs->dtype() != DType::kF32) return false;
  if (bs->numel() != 1 && bs->numel() != N) return false;
  if (bn.inputs.size() > 2 && !bn.inputs[2].empty()) {
    const Tensor* z = constant_value(pc.g, bn.inputs[2]);
    if (!z) return false;
    for (int64_t i = 0; i < z->numel(); ++i)
      if (z->get_int64(i) != 0) return false;
  }
  for (int64_t n = 0; n < N; ++n) {
    const float want = a_scale * ws.data<float>()[ws.numel() == 1 ? 0 : n];
    if (!rel_close(bs->data<float>()[bs->numel() == 1 ? 0 : n], want)) return false;
  }
  return true;
}

// DQ(a), DQ(W) -> MatMul [-> Add(DQ(B int32))] [-> Relu] -> Q, and DQ(A), DQ(W) [, DQ(C int32)] -> Gemm
// (alpha = beta = 1, transA = 0) [-> Relu] -> Q: QMatMulFused.
bool fuse_qmatmul(PatternContext& pc, long i) {
  Graph& g = pc.g;
  const Node mm = g.nodes[i];
  const bool gemm = is_onnx(mm, "Gemm");
  if (mm.inputs.size() < 2 || mm.outputs.size() != 1) return false;
  if (gemm) {
    const Attribute* alpha = mm.attr("alpha");
    const Attribute* beta = mm.attr("beta");
    const Attribute* ta = mm.attr("transA");
    if ((alpha && alpha->f != 1.f) || (beta && beta->f != 1.f) || (ta && ta->i != 0)) return false;
  }
  QParams ap;
  const long da = dq_per_tensor(pc, mm.inputs[0], &ap);
  const long dw = pc.producer(mm.inputs[1], "DequantizeLinear");
  if (da < 0 || dw < 0) return false;
  const Attribute* tb = mm.attr("transB");
  const bool n_first = gemm && tb && tb->i != 0;
  std::vector<long> covered = {i};
  std::string out = mm.outputs[0];
  // Check the weights before making a transposed copy of them.
  const Node& wn = g.nodes[dw];
  const Tensor* ws = wn.inputs.size() > 1 ? constant_value(g, wn.inputs[1]) : nullptr;
  const Tensor* w = constant_value(g, wn.inputs[0]);
  if (!ws || !w || w->rank() != 2 || ws->dtype() != DType::kF32) return false;
  const int64_t N = w->dim(n_first ? 0 : 1);
  long db = -1;
  std::string fbias;  // a float bias constant (the plain structure's)
  if (gemm && mm.inputs.size() > 2 && !mm.inputs[2].empty()) {
    db = pc.producer(mm.inputs[2], "DequantizeLinear");
    if (db < 0 && !float_bias(g, mm.inputs[2], N, true)) return false;
    if (db < 0) fbias = mm.inputs[2];
  }
  long add = -1;
  if (!gemm) {  // MatMul + Add(DQ(int32 bias) | float bias [N])
    const long r = pc.sole_reader(out);
    if (r >= 0 && is_onnx(g.nodes[r], "Add")) {
      const std::string other = other_input(g.nodes[r], out);
      const long d = pc.producer(other, "DequantizeLinear");
      const TensorType* ot = g.find_type(out);
      const TensorType* at = g.find_type(g.nodes[r].outputs[0]);
      if (d >= 0) {
        db = d;
        add = r;
      } else if (float_bias(g, other, N, false) && ot && at && ot->shape && at->shape && *ot->shape == *at->shape) {
        fbias = other;  // the Add's output has the MatMul's shape: no broadcast beyond the rows
        add = r;
      }
    }
  }
  if (db >= 0 && !int32_bias(pc, db, ap.s, *ws, N)) return false;
  if (add >= 0) {
    covered.push_back(add);
    out = g.nodes[add].outputs[0];
  }
  bool relu = false;
  long r = pc.sole_reader(out);
  if (r >= 0 && is_onnx(g.nodes[r], "Relu")) {
    relu = true;
    covered.push_back(r);
    out = g.nodes[r].outputs[0];
    r = pc.sole_reader(out);
  }
  QParams yp;
  // No Q to end on: a float output (the dequantization in the int8 kernel's epilogue).
  const bool float_y = r < 0 || !is_onnx(g.nodes[r], "QuantizeLinear");
  if (!float_y && !per_tensor_params(g, g.nodes[r], &yp)) return false;
  if (!float_y) covered.push_back(r);
  std::string wq, ws_name;
  int64_t n = 0;
  if (!matmul_weights(pc, dw, n_first, &wq, &ws_name, &n)) return false;
  Node fused;
  fused.name = mm.name;
  fused.op_type = "QMatMulFused";
  fused.domain = kFerryDomain;
  if (relu) set_attr(&fused, "relu", int64_t{1});
  fused.inputs = {g.nodes[da].inputs[0], ap.scale, zp_name(&g, ap), wq, ws_name, "",
                  float_y ? "" : yp.scale, float_y ? "" : zp_name(&g, yp), db >= 0 ? g.nodes[db].inputs[0] : fbias};
  while (fused.inputs.back().empty()) fused.inputs.pop_back();
  fused.outputs = {float_y ? out : g.nodes[r].outputs[0]};
  cover_if_sole(pc, da, i, &covered);
  cover_if_sole(pc, dw, i, &covered);
  if (db >= 0) cover_if_sole(pc, db, add >= 0 ? add : i, &covered);
  pc.replace(covered, std::move(fused));
  return true;
}

// DQ(x) -> MaxPool | Flatten | Reshape | Squeeze | Unsqueeze -> Q with the DQ's parameters: the op on x
// itself (exact: they move values or take a maximum, which commutes with the monotone (de)quantization).
bool fuse_data_movement(PatternContext& pc, long i) {
  Graph& g = pc.g;
  const Node& n = g.nodes[i];
  if (n.outputs.size() != 1 || n.inputs.empty() || (n.op_type == "MaxPool" && n.inputs.size() != 1)) return false;
  QParams xp, yp;
  const long dx = dq_per_tensor(pc, n.inputs[0], &xp);
  const long q = pc.sole_reader(n.outputs[0]);
  if (dx < 0 || q < 0 || !is_onnx(g.nodes[q], "QuantizeLinear") || !per_tensor_params(g, g.nodes[q], &yp) ||
      !same_params(xp, yp))
    return false;
  Node fused = n;
  fused.inputs[0] = g.nodes[dx].inputs[0];
  fused.outputs = {g.nodes[q].outputs[0]};
  std::vector<long> covered = {i, q};
  cover_if_sole(pc, dx, i, &covered);
  pc.replace(covered, std::move(fused));
  return true;
}

// DQ(x 8-bit) -> GlobalAveragePool -> Q: com.ferry.QGlobalAveragePool (integer sum, one requantization;
// src/ops/quantize_fused.cpp), which the nhwc_layout pass runs on the NHWC region's uint8 tensor.
bool fuse_qgap(PatternContext& pc, long i) {
  Graph& g = pc.g;
  const Node& n = g.nodes[i];
  if (n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  QParams xp, yp;
  const long dx = dq_per_tensor(pc, n.inputs[0], &xp);
  const long q = pc.sole_reader(n.outputs[0]);
  if (dx < 0 || q < 0 || !is_onnx(g.nodes[q], "QuantizeLinear") || !per_tensor_params(g, g.nodes[q], &yp)) return false;
  const TensorType* xt = g.find_type(g.nodes[dx].inputs[0]);
  if (!xt || !xt->shape || xt->shape->rank() < 3) return false;
  Node fused;
  fused.name = n.name;
  fused.op_type = "QGlobalAveragePool";
  fused.domain = kFerryDomain;
  fused.inputs = {g.nodes[dx].inputs[0], xp.scale, zp_name(&g, xp), yp.scale, zp_name(&g, yp)};
  fused.outputs = {g.nodes[q].outputs[0]};
  std::vector<long> covered = {i, q};
  cover_if_sole(pc, dx, i, &covered);
  pc.replace(covered, std::move(fused));
  return true;
}

bool is_data_movement(const Node& n) {
  return is_onnx(n, "MaxPool") || is_onnx(n, "Flatten") || is_onnx(n, "Reshape") || is_onnx(n, "Squeeze") ||
         is_onnx(n, "Unsqueeze");
}

Status run_qdq_fusion(Model* model, PassContext& ctx) {
  if (model->opset("") < 13) return Status::ok();  // per-channel DQ (axis) and 8-bit MaxPool need 13 / 12
  PatternContext pc(model->graph);
  for (size_t i = 0; i < pc.g.nodes.size(); ++i) {
    if (pc.dead[i]) continue;
    const Node& n = pc.g.nodes[i];
    const long k = static_cast<long>(i);
    if ((is_onnx(n, "Conv") && fuse_qconv(pc, k)) || (is_data_movement(n) && fuse_data_movement(pc, k)) ||
        ((is_onnx(n, "MatMul") || is_onnx(n, "Gemm")) && fuse_qmatmul(pc, k)) ||
        (is_onnx(n, "GlobalAveragePool") && fuse_qgap(pc, k)) || (is_onnx(n, "QuantizeLinear") && qdq::fuse_qlookup(*model, pc, k)))
      ++ctx.changes;
  }
  pc.finish();
  PatternContext pl(model->graph);  // float lookups: on the graph the first round left (its uses fresh)
  for (size_t i = 0; i < pl.g.nodes.size(); ++i)
    if (!pl.dead[i] && qdq::fuse_float_lookup(*model, pl, static_cast<long>(i))) ++ctx.changes;
  pl.finish();
  if (ctx.changes) use_ferry_domain(model);
  return Status::ok();
}

}  // namespace

GraphPass qdq_fusion_pass() {
  return {"qdq_fusion", 2,
          "DequantizeLinear -> Conv|MatMul|Gemm [-> Relu] [-> Add] | GlobalAveragePool | element-wise ops -> QuantizeLinear become "
          "QConvFused / QMatMulFused / QGlobalAveragePool / QLookup (int8)",
          run_qdq_fusion};
}

}  // namespace ferry
