// The QDQ rewrite; see qdq_plan.h and docs/quantization.md.
#include "quant/qdq_plan.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

namespace ferry::quant {
namespace {

/// w viewed as [outer, channels, inner] around `axis` (a per-channel weight's layout).
struct AxisGeometry {
  int64_t outer = 1, channels = 1, inner = 1;
};
AxisGeometry axis_geometry(const Tensor& w, int64_t axis) {
  const auto& d = w.dims();
  AxisGeometry g;
  for (int64_t i = 0; i < axis; ++i) g.outer *= d[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < d.size(); ++i) g.inner *= d[i];
  g.channels = d[static_cast<size_t>(axis)];
  return g;
}

const std::set<std::string>& pass_through_ops() {
  static const std::set<std::string> ops = {"MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze"};
  return ops;
}
const std::set<std::string>& own_range_ops() {
  static const std::set<std::string> ops = {"Concat", "GlobalAveragePool", "AveragePool", "Softmax"};
  return ops;
}

struct Params {
  float scale = 1;
  uint8_t zp = 0;
};

struct Planner {
  const Model& model;
  const Graph& g;
  const RangeFn& range;
  QdqPlan plan;
  std::unordered_map<std::string, int> producer;                        // value -> node index
  std::unordered_map<std::string, std::vector<std::pair<int, int>>> consumers;  // value -> (node, slot)
  std::unordered_set<std::string> graph_outputs;
  std::unordered_set<std::string> used_names;
  std::set<std::string> absorbed;  // outputs not wrapped: their only consumer is an absorbed Relu/Clip
  std::set<std::string> float_out;  // quantized compute nodes' outputs left float (PlanOptions)
  std::map<std::string, Params> params;
  std::vector<bool> kept;

  const BiasShift* bias_shift;
  const WeightValues* weight_values;
  PlanOptions opts;

  Planner(const Model& m, const RangeFn& r, const BiasShift* bs, const WeightValues* wv, const PlanOptions* po)
      : model(m), g(m.graph), range(r), bias_shift(bs), weight_values(wv) {
    if (po) opts = *po;
  }

  bool is_init(const std::string& v) const { return g.initializers.count(v) > 0; }
  // The initializer `v` is, directly or through Identity nodes (exporters share equal tensors that way).
  const Tensor* init_of(const std::string& v) const {
    std::string cur = v;
    for (int hop = 0; hop < 8; ++hop) {
      if (const Tensor* t = g.find_initializer(cur)) return t;
      auto it = producer.find(cur);
      if (it == producer.end()) return nullptr;
      const Node& n = g.nodes[static_cast<size_t>(it->second)];
      if (n.op_type != "Identity" || n.inputs.empty()) return nullptr;
      cur = n.inputs[0];
    }
    return nullptr;
  }
  bool is_f32(const std::string& v) const {
    if (v.empty()) return false;
    if (const Tensor* t = g.find_initializer(v)) return t->dtype() == DType::kF32;
    const TensorType* t = g.find_type(v);
    return t && t->dtype == DType::kF32 && t->kind == ValueKind::kTensor;
  }
  bool act(const std::string& v) const {  // a float activation with a calibrated range
    float lo, hi;
    return is_f32(v) && !is_init(v) && range(v, &lo, &hi);
  }
  std::string fresh(const std::string& base) {
    std::string n = base;
    for (int i = 1; used_names.count(n); ++i) n = base + "_" + std::to_string(i);
    used_names.insert(n);
    return n;
  }
  Role role_of(int i) const { return plan.roles[static_cast<size_t>(i)]; }
  bool wrapped_output(const std::string& v) const {
    auto it = producer.find(v);
    if (it == producer.end()) return false;
    const Role r = role_of(it->second);
    return r != Role::kFloat && !absorbed.count(v) && !float_out.count(v);
  }

  Role decide(int idx) {
    const Node& n = g.nodes[static_cast<size_t>(idx)];
    if (kept[static_cast<size_t>(idx)] || !n.domain.empty() || n.outputs.empty()) return Role::kFloat;
    const auto& in = n.inputs;
    const std::string& op = n.op_type;
    if (opts.inputs_only && op != "Conv" && op != "Gemm" && op != "MatMul") return Role::kFloat;
    auto input = [&](size_t i) { return i < in.size() ? in[i] : std::string(); };
    if (op == "Conv") {
      const Tensor* w = init_of(input(1));
      if (act(input(0)) && w && w->dtype() == DType::kF32 && w->rank() >= 3 && act(n.outputs[0])) return Role::kCompute;
      return Role::kFloat;
    }
    if (op == "Gemm") {
      const Tensor* w = init_of(input(1));
      if (act(input(0)) && w && w->dtype() == DType::kF32 && w->rank() == 2 && act(n.outputs[0])) return Role::kCompute;
      return Role::kFloat;
    }
    if (op == "MatMul") {
      const Tensor* w = init_of(input(1));
      if (!act(input(0)) || !act(n.outputs[0])) return Role::kFloat;
      if (w) return w->dtype() == DType::kF32 && w->rank() == 2 ? Role::kCompute : Role::kFloat;
      return act(input(1)) ? Role::kCompute : Role::kFloat;
    }
    if (op == "Add") {
      if (in.size() != 2 || !act(n.outputs[0])) return Role::kFloat;
      if (bias_of_matmul(n) >= 0) {
        absorbed.insert(in[static_cast<size_t>(1 - bias_of_matmul(n))]);
        return Role::kBiasAdd;
      }
      // Quantized only when every activation input is already an int8 value (the wrapped output of
      // a quantized node): an Add after float ops (eps and beta of a LayerNorm decomposition, a
      // residual Add after a float LayerNorm) stays float, so no rounding is added where the
      // producer is float anyway, and the LayerNorm pattern stays intact for layernorm_fusion.
      int acts = 0;
      for (const auto& v : in) {
        if (act(v)) {
          if (!wrapped_output(v)) return Role::kFloat;
          ++acts;
        } else if (!(is_init(v) && is_f32(v) && g.find_initializer(v)->numel() > 0)) {
          return Role::kFloat;
        }
      }
      return acts >= 1 ? Role::kBinary : Role::kFloat;
    }
    if (own_range_ops().count(op)) {
      if (n.outputs.size() != 1 || !act(n.outputs[0])) return Role::kFloat;
      const size_t count = op == "Concat" ? in.size() : 1;
      for (size_t i = 0; i < count; ++i)
        if (!act(input(i))) return Role::kFloat;
      return Role::kOwnRange;
    }
    if (pass_through_ops().count(op)) {
      if (n.outputs.size() != 1 || !is_f32(n.outputs[0])) return Role::kFloat;
      return wrapped_output(input(0)) ? Role::kPassThrough : Role::kFloat;
    }
    if (op == "Relu" || op == "Clip") {
      if (!act(n.outputs[0]) || !absorbable_clip(n)) return Role::kFloat;
      auto it = producer.find(input(0));
      if (it == producer.end()) return Role::kFloat;
      const Role pr = role_of(it->second);
      if (pr != Role::kCompute && pr != Role::kBinary && pr != Role::kBiasAdd) return Role::kFloat;
      if (graph_outputs.count(input(0)) || consumers[input(0)].size() != 1 || float_out.count(input(0)))
        return Role::kFloat;
      absorbed.insert(input(0));
      return Role::kAbsorbed;
    }
    return Role::kFloat;
  }
  // Add(MatMul(x, W[K,N]), b[N]) with the MatMul quantized and read by this Add only: the slot of b, else -1.
  int bias_of_matmul(const Node& n) const {
    for (int s = 0; s < 2; ++s) {
      const std::string& b = n.inputs[static_cast<size_t>(s)];
      const std::string& m = n.inputs[static_cast<size_t>(1 - s)];
      const Tensor* bt = init_of(b);
      auto it = producer.find(m);
      if (!bt || bt->dtype() != DType::kF32 || bt->rank() != 1 || it == producer.end()) continue;
      const Node& mm = g.nodes[static_cast<size_t>(it->second)];
      const Tensor* w = mm.op_type == "MatMul" && mm.inputs.size() > 1 ? init_of(mm.inputs[1]) : nullptr;
      if (!w || role_of(it->second) != Role::kCompute || w->rank() != 2 || w->dim(1) != bt->numel() ||
          float_out.count(m))
        continue;
      auto c = consumers.find(m);
      if (c == consumers.end() || c->second.size() != 1 || graph_outputs.count(m)) continue;
      return s;
    }
    return -1;
  }
  int bias_of_matmul_cached(int i) const {
    const Node& n = g.nodes[static_cast<size_t>(i)];
    for (int s = 0; s < 2; ++s)
      if (init_of(n.inputs[static_cast<size_t>(s)]) && absorbed.count(n.inputs[static_cast<size_t>(1 - s)]))
        return s;
    return -1;
  }
  // An initializer, or the value of a Constant node.
  const Tensor* constant(const std::string& v) const {
    if (const Tensor* t = g.find_initializer(v)) return t;
    auto it = producer.find(v);
    if (it == producer.end()) return nullptr;
    const Node& c = g.nodes[static_cast<size_t>(it->second)];
    const Attribute* a = c.op_type == "Constant" ? c.attr("value") : nullptr;
    return a && a->type == AttrType::kTensor ? &a->t : nullptr;
  }
  bool absorbable_clip(const Node& n) const {
    if (n.op_type == "Relu") return true;
    if (const Attribute* a = n.attr("min")) return a->f >= 0;  // opset < 11
    if (n.inputs.size() < 2 || n.inputs[1].empty()) return false;
    const Tensor* mn = constant(n.inputs[1]);
    return mn && mn->numel() == 1 && mn->get_double(0) >= 0;
  }

  Params params_of(const std::string& v) {
    auto it = params.find(v);
    if (it != params.end()) return it->second;
    Params p;
    auto prod = producer.find(v);
    if (prod != producer.end() && role_of(prod->second) == Role::kPassThrough) {
      p = params_of(g.nodes[static_cast<size_t>(prod->second)].inputs[0]);
    } else if (prod != producer.end() && g.nodes[static_cast<size_t>(prod->second)].op_type == "Softmax" &&
               !opts.inputs_only) {  // the plain structure takes the measured range, as bench/int8_baseline.py
      activation_params(0.0f, 1.0f, &p.scale, &p.zp);
    } else {
      float lo = 0, hi = 0;
      range(v, &lo, &hi);
      activation_params(lo, hi, &p.scale, &p.zp);
    }
    params[v] = p;
    return p;
  }

  void add_init(const std::string& name, Tensor t) { plan.edit.add_initializers[name] = std::move(t); }
  void add_node(const std::string& name, const std::string& op, std::vector<std::string> ins,
                std::vector<std::string> outs, std::map<std::string, int64_t> attrs = {}) {
    plan.edit.add_nodes.push_back(OnnxNewNode{name, op, std::move(ins), std::move(outs), std::move(attrs)});
  }
  void rewire(int node, int slot, const std::string& value) {
    plan.edit.rewire[g.nodes[static_cast<size_t>(node)].outputs[0]][slot] = value;
  }

  // The weight range of a Conv/Gemm/MatMul: opts.weight_qmax, but 8 bits for a depthwise convolution's
  // (one input channel per group) under --reduce-range: its kernels widen to 32 bits before multiplying
  // (oneDNN's, ONNX Runtime's), so 7 bits buy no speed there, and with 9 weights per channel they cost the
  // most accuracy (docs/quantization.md "Reduce range").
  int weight_qmax_of(const Node& n) {
    const int q = weight_qmax_for(n);
    if (q < kFullWeightMax) plan.reduced_nodes.push_back(n.name);
    return q;
  }
  int weight_qmax_for(const Node& n) {
    if (opts.full_range_nodes.count(n.name)) return kFullWeightMax;
    if (n.op_type == "Conv") {
      const Attribute* grp = n.attr("group");
      const Tensor* w = init_of(n.inputs[1]);
      if (grp && grp->i > 1 && w && w->rank() >= 2 && w->dim(1) == 1) return kFullWeightMax;
      if (opts.reduce_where_split && params_of(n.inputs[0]).zp == 0) return kFullWeightMax;
    }
    return opts.weight_qmax;
  }

  // Per-channel symmetric int8 weight in [-qmax, qmax]: returns the DQ output and the scales.
  std::map<std::string, std::pair<std::string, std::vector<float>>> weights;
  std::pair<std::string, std::vector<float>> quantize_weight(const std::string& w_name, int64_t axis, int weight_qmax) {
    const std::string key = w_name + "#" + std::to_string(axis) + "#" + std::to_string(weight_qmax);
    auto it = weights.find(key);
    if (it != weights.end()) return it->second;
    const Tensor& w = *init_of(w_name);
    const auto [outer, channels, inner] = axis_geometry(w, axis);
    std::vector<float> scales;
    if (opts.weight_scale_cache && weight_qmax < kFullWeightMax) {
      auto c = opts.weight_scale_cache->find(key);
      if (c == opts.weight_scale_cache->end()) c = opts.weight_scale_cache->emplace(key, plan_weight_scales(w, axis, weight_qmax)).first;
      scales = c->second;
    } else {
      scales = plan_weight_scales(w, axis, weight_qmax);
    }
    const float qmax = static_cast<float>(weight_qmax);
    const float* p = w.data<float>();
    Tensor q = Tensor::allocate(DType::kI8, w.dims());
    int8_t* qp = q.mutable_data<int8_t>();
    const std::vector<int8_t>* given = nullptr;
    if (weight_values) {
      auto wv = weight_values->find(w_name);
      if (wv != weight_values->end() && static_cast<int64_t>(wv->second.size()) == w.numel()) given = &wv->second;
    }
    if (given) {
      for (size_t i = 0; i < given->size(); ++i)
        qp[i] = static_cast<int8_t>(std::clamp<int>((*given)[i], -weight_qmax, weight_qmax));
    } else {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < channels; ++c)
          for (int64_t k = 0; k < inner; ++k) {
            const int64_t i = (o * channels + c) * inner + k;
            const float v = std::nearbyint(p[i] / scales[static_cast<size_t>(c)]);
            qp[i] = static_cast<int8_t>(std::clamp(v, -qmax, qmax));
          }
    }
    const std::string qn = fresh(w_name + "_quantized"), sn = fresh(w_name + "_scale"), zn = fresh(w_name + "_zero_point");
    const std::string dqo = fresh(w_name + "_DequantizeLinear_Output");
    add_init(qn, std::move(q));
    add_init(sn, Tensor::from_vector<float>(scales, {channels}));
    add_init(zn, Tensor::from_vector<int8_t>(std::vector<int8_t>(static_cast<size_t>(channels), 0), {channels}));
    add_node(fresh(w_name + "_DequantizeLinear"), "DequantizeLinear", {qn, sn, zn}, {dqo}, {{"axis", axis}});
    ++plan.int8_weights;
    plan.reduced_weights += weight_qmax < kFullWeightMax;
    return weights[key] = {dqo, scales};
  }

  // int32 bias with scale s_x * s_w[c]; `out` (the biased output) names its bias correction, if any.
  std::string quantize_bias(const std::string& b_name, float s_x, const std::vector<float>& s_w, const std::string& out,
                            int channel_axis) {
    const Tensor& b = *init_of(b_name);
    const int64_t n = b.numel();
    plan.biased_outputs.emplace_back(out, channel_axis);
    const std::vector<float>* shift = nullptr;
    if (bias_shift) {
      auto it = bias_shift->find(out);
      if (it != bias_shift->end() && static_cast<int64_t>(it->second.size()) == n) shift = &it->second;
    }
    std::vector<float> scales(static_cast<size_t>(n));
    std::vector<int32_t> q(static_cast<size_t>(n));
    for (int64_t c = 0; c < n; ++c) {
      const float s = s_x * s_w[static_cast<size_t>(c)];
      scales[static_cast<size_t>(c)] = s > 0 ? s : 1.0f;
      const double f = static_cast<double>(b.data<float>()[c]) - (shift ? (*shift)[static_cast<size_t>(c)] : 0.0);
      const double v = std::nearbyint(f / scales[static_cast<size_t>(c)]);
      q[static_cast<size_t>(c)] = static_cast<int32_t>(std::clamp(v, double(INT_MIN), double(INT_MAX)));
    }
    const std::string qn = fresh(b_name + "_quantized"), sn = fresh(b_name + "_quantized_scale");
    const std::string zn = fresh(b_name + "_quantized_zero_point"), dqo = fresh(b_name + "_DequantizeLinear_Output");
    add_init(qn, Tensor::from_vector<int32_t>(q, {n}));
    add_init(sn, Tensor::from_vector<float>(scales, {n}));
    add_init(zn, Tensor::from_vector<int32_t>(std::vector<int32_t>(static_cast<size_t>(n), 0), {n}));
    add_node(fresh(b_name + "_DequantizeLinear"), "DequantizeLinear", {qn, sn, zn}, {dqo}, {{"axis", 0}});
    ++plan.int32_biases;
    return dqo;
  }

  // A float constant input of Add: uint8 per tensor over its own range.
  std::string quantize_constant(const std::string& c_name) {
    const Tensor& c = *g.find_initializer(c_name);
    const float* p = c.data<float>();
    float lo = p[0], hi = p[0];
    for (int64_t i = 0; i < c.numel(); ++i) {
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
    }
    Params pr;
    activation_params(lo, hi, &pr.scale, &pr.zp);
    Tensor q = Tensor::allocate(DType::kU8, c.dims());
    for (int64_t i = 0; i < c.numel(); ++i)
      q.mutable_data<uint8_t>()[i] =
          static_cast<uint8_t>(std::clamp(std::nearbyint(p[i] / pr.scale) + pr.zp, 0.0f, 255.0f));
    const std::string qn = fresh(c_name + "_quantized"), sn = fresh(c_name + "_scale"), zn = fresh(c_name + "_zero_point");
    const std::string dqo = fresh(c_name + "_DequantizeLinear_Output");
    add_init(qn, std::move(q));
    add_init(sn, Tensor::scalar<float>(pr.scale));
    add_init(zn, Tensor::scalar<uint8_t>(pr.zp));
    add_node(fresh(c_name + "_DequantizeLinear"), "DequantizeLinear", {qn, sn, zn}, {dqo});
    ++plan.int8_weights;
    return dqo;
  }

  Status run(const std::set<std::string>& keep) {
    for (const auto& [name, t] : g.initializers) used_names.insert(name);
    for (const auto& v : g.inputs) used_names.insert(v.name);
    for (const auto& v : g.outputs) graph_outputs.insert(v.name);
    const int count = static_cast<int>(g.nodes.size());
    kept.assign(static_cast<size_t>(count), false);
    for (int i = 0; i < count; ++i) {
      const Node& n = g.nodes[static_cast<size_t>(i)];
      used_names.insert(n.name);
      for (size_t s = 0; s < n.inputs.size(); ++s)
        if (!n.inputs[s].empty()) consumers[n.inputs[s]].emplace_back(i, static_cast<int>(s));
      for (const auto& o : n.outputs) {
        if (!o.empty()) producer[o] = i;
        used_names.insert(o);
      }
      kept[static_cast<size_t>(i)] = keep.count(n.name) || (!n.outputs.empty() && keep.count(n.outputs[0]));
    }
    plan.roles.assign(static_cast<size_t>(count), Role::kFloat);
    for (int i = 0; i < count; ++i) {
      const Role r = decide(i);
      plan.roles[static_cast<size_t>(i)] = r;
      const Node& n = g.nodes[static_cast<size_t>(i)];
      if (r == Role::kCompute && (opts.inputs_only || opts.float_outputs.count(n.name))) float_out.insert(n.outputs[0]);
    }

    // Tensors wrapped in Q/DQ: activation inputs of quantized nodes, their outputs (not absorbed ones).
    std::vector<std::string> wrap;
    std::unordered_set<std::string> wrap_set;
    // `as_input`: an input of a quantized node (a float output of a quantized Conv read by another one
    // is wrapped for that reader; as an output it is not).
    auto want = [&](const std::string& v, bool as_input = false) {
      if (!v.empty() && !is_init(v) && !absorbed.count(v) && (as_input || !float_out.count(v)) &&
          wrap_set.insert(v).second)
        wrap.push_back(v);
    };
    // Graph inputs first, then in node order, so Q/DQ names come out in a stable order.
    for (int i = 0; i < count; ++i) {
      const Node& n = g.nodes[static_cast<size_t>(i)];
      const Role r = role_of(i);
      if (r == Role::kFloat) continue;
      if (r == Role::kCompute) {
        want(n.inputs[0], true);
        if (n.op_type == "MatMul" && !init_of(n.inputs[1])) want(n.inputs[1], true);
      } else if (r == Role::kBiasAdd) {
        // The MatMul's output is absorbed; only the Add's output is wrapped.
      } else if (r == Role::kBinary || (r == Role::kOwnRange && n.op_type == "Concat")) {
        for (const auto& v : n.inputs) want(v);
      } else if (r == Role::kOwnRange) {
        want(n.inputs[0]);
      }
      want(n.outputs[0]);
      plan.quantized.push_back(n.name);
    }
    for (const std::string& v : wrap) {
      const Params p = params_of(v);
      const std::string sn = fresh(v + "_scale"), zn = fresh(v + "_zero_point");
      add_init(sn, Tensor::scalar<float>(p.scale));
      add_init(zn, Tensor::scalar<uint8_t>(p.zp));
      const bool is_out = graph_outputs.count(v) > 0;
      std::string q_in = v, dq_out;
      if (is_out) {
        q_in = fresh(v + "_QuantizeLinear_Input");
        plan.edit.rename_outputs[v] = q_in;
        dq_out = v;
      } else {
        dq_out = fresh(v + "_DequantizeLinear_Output");
      }
      const std::string q_out = fresh(v + "_QuantizeLinear_Output");
      add_node(fresh(v + "_QuantizeLinear"), "QuantizeLinear", {q_in, sn, zn}, {q_out});
      add_node(fresh(v + "_DequantizeLinear"), "DequantizeLinear", {q_out, sn, zn}, {dq_out});
      ++plan.qdq_pairs;
      // A float consumer reads the dequantized value only where the producer is quantized (ONNX
      // Runtime runs a quantized op in int8 only when its output goes to QuantizeLinear alone); the
      // output of a float op (a graph input, SiLU's Mul, a LayerNorm) stays unrounded for them.
      auto pv = producer.find(v);
      const bool float_producer = pv == producer.end() || role_of(pv->second) == Role::kFloat || float_out.count(v);
      for (const auto& [node, slot] : consumers[v]) {
        if (kept[static_cast<size_t>(node)] || (float_producer && role_of(node) == Role::kFloat)) {
          if (is_out) rewire(node, slot, q_in);
        } else if (!is_out) {
          rewire(node, slot, dq_out);
        }
      }
    }
    // Weights, biases, constants.
    std::map<std::string, int> rewired_uses;
    for (int i = 0; i < count; ++i) {
      const Node& n = g.nodes[static_cast<size_t>(i)];
      const Role r = role_of(i);
      if (r == Role::kCompute && init_of(n.inputs[1])) {
        int64_t axis = 1;
        if (n.op_type == "Conv") axis = 0;
        if (n.op_type == "Gemm") {
          const Attribute* tb = n.attr("transB");
          axis = tb && tb->i ? 0 : 1;
        }
        auto [dq, scales] = quantize_weight(n.inputs[1], axis, weight_qmax_of(n));
        rewire(i, 1, dq);
        ++rewired_uses[n.inputs[1]];
        const bool gemm_plain = n.op_type != "Gemm" || ((!n.attr("alpha") || n.attr("alpha")->f == 1.0f) &&
                                                        (!n.attr("beta") || n.attr("beta")->f == 1.0f));
        const Tensor* bias = n.inputs.size() > 2 ? init_of(n.inputs[2]) : nullptr;
        if (bias && bias->dtype() == DType::kF32 && gemm_plain && bias->rank() == 1 && !float_out.count(n.outputs[0]) &&
            bias->numel() == static_cast<int64_t>(scales.size())) {
          rewire(i, 2, quantize_bias(n.inputs[2], params_of(n.inputs[0]).scale, scales, n.outputs[0], 1));
          ++rewired_uses[n.inputs[2]];
        }
      } else if (r == Role::kBiasAdd) {
        const int slot = bias_of_matmul_cached(i);
        const Node& mm = g.nodes[static_cast<size_t>(producer.at(n.inputs[static_cast<size_t>(1 - slot)]))];
        auto [dq, scales] = quantize_weight(mm.inputs[1], 1, weight_qmax_of(mm));
        rewire(i, slot,
               quantize_bias(n.inputs[static_cast<size_t>(slot)], params_of(mm.inputs[0]).scale, scales, n.outputs[0], -1));
        ++rewired_uses[n.inputs[static_cast<size_t>(slot)]];
      } else if (r == Role::kBinary) {
        for (size_t s = 0; s < n.inputs.size(); ++s)
          if (is_init(n.inputs[s])) {
            rewire(i, static_cast<int>(s), quantize_constant(n.inputs[s]));
            ++rewired_uses[n.inputs[s]];
          }
      }
    }
    for (const auto& [name, uses] : rewired_uses)
      if (static_cast<size_t>(uses) == consumers[name].size() && !graph_outputs.count(name))
        plan.edit.remove_initializers.insert(name);
    for (int i = 0; i < count; ++i) {
      const Node& n = g.nodes[static_cast<size_t>(i)];
      if (kept[static_cast<size_t>(i)]) plan.kept.push_back(n.name);
      else if (role_of(i) == Role::kFloat && n.op_type != "Constant") plan.left_float[n.op_type].push_back(n.name);
    }
    return Status::ok();
  }
};

}  // namespace

void activation_params(float lo, float hi, float* scale, uint8_t* zero_point) {
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  const float s = (hi - lo) / 255.0f;
  if (!(s > 0) || !std::isfinite(s)) {
    *scale = 1.0f;
    *zero_point = 0;
    return;
  }
  *scale = s;
  *zero_point = static_cast<uint8_t>(std::clamp(std::nearbyint(-lo / s), 0.0f, 255.0f));
}

std::vector<float> weight_scales(const Tensor& w, int64_t axis, int qmax) {
  const auto [outer, channels, inner] = axis_geometry(w, axis);
  std::vector<float> scales(static_cast<size_t>(channels), 0.0f);
  const float* p = w.data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t k = 0; k < inner; ++k)
        scales[static_cast<size_t>(c)] = std::max(scales[static_cast<size_t>(c)], std::fabs(p[(o * channels + c) * inner + k]));
  for (float& s : scales) s = s > 0 && std::isfinite(s) ? s / static_cast<float>(qmax) : 1.0f;
  return scales;
}

std::vector<float> weight_scales_mse(const Tensor& w, int64_t axis, int qmax) {
  const auto [outer, channels, inner] = axis_geometry(w, axis);
  std::vector<float> scales = weight_scales(w, axis, qmax);  // MinMax: a = 1
  const float* p = w.data<float>();
  const float q = static_cast<float>(qmax);
  std::vector<float> v(static_cast<size_t>(outer * inner));
  for (int64_t c = 0; c < channels; ++c) {
    size_t n = 0;
    bool any = false;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < inner; ++k) {
        v[n] = p[(o * channels + c) * inner + k];
        any = any || v[n] != 0.0f;
        ++n;
      }
    if (!any || !std::isfinite(scales[static_cast<size_t>(c)])) continue;  // all-zero channel: scale 1, as MinMax
    const float s1 = scales[static_cast<size_t>(c)];
    double best = -1;
    float best_s = s1;
    for (int step = 100; step >= 50; --step) {  // a = step / 100
      const float s = s1 * static_cast<float>(step) / 100.0f;
      double err = 0;
      for (size_t i = 0; i < n; ++i) {
        const float r = s * std::clamp(std::nearbyint(v[i] / s), -q, q) - v[i];
        err += static_cast<double>(r) * r;
      }
      if (best < 0 || err < best) {
        best = err;
        best_s = s;
      }
    }
    scales[static_cast<size_t>(c)] = best_s;
  }
  return scales;
}

std::vector<float> plan_weight_scales(const Tensor& w, int64_t axis, int qmax) {
  return qmax < kFullWeightMax ? weight_scales_mse(w, axis, qmax) : weight_scales(w, axis, qmax);
}

StatusOr<QdqPlan> plan_qdq(const Model& model, const RangeFn& range, const std::set<std::string>& keep_fp32,
                           const BiasShift* bias_shift, const WeightValues* weight_values,
                           const PlanOptions* options) {
  if (model.opset() < 13)
    return unsupported("model '" + model.path + "' imports ai.onnx opset " + std::to_string(model.opset()) +
                       "; per-channel DequantizeLinear needs opset >= 13: re-export the model at opset 13 or newer");
  Planner p(model, range, bias_shift, weight_values, options);
  RETURN_IF_ERROR(p.run(keep_fp32));
  return std::move(p.plan);
}

int64_t count_quantization_ops(const Model& model) {
  static const std::set<std::string> ops = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                                            "QLinearConv",    "QLinearMatMul",    "ConvInteger",
                                            "MatMulInteger",  "QLinearAdd",       "QLinearMul"};
  int64_t n = 0;
  for (const Node& node : model.graph.nodes) n += ops.count(node.op_type);
  return n;
}

bool names_node(const Model& model, const std::string& name) {
  for (const Node& n : model.graph.nodes)
    if (n.name == name || (!n.outputs.empty() && n.outputs[0] == name)) return true;
  return false;
}

}  // namespace ferry::quant
