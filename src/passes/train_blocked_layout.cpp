// Pass train_blocked_layout (level 2, devices with trait "blocked_training_layout": cpu; training
// graphs: those with a com.ferry
// ConvGrad): the activations of a CNN's training graph stay in oneDNN's blocked layout nChw16c
// (nChw8c on AVX2 CPUs, graph_layout_block) between its ops, as the logical shape [N, C/B, H, W, B]
// (ops/blocked_layout.h), so the
// convolutions' primitives read and write them with no reorder and Conv -> BN(+Relu) -> ... -> Add
// chains and their backward (ConvGrad dX -> BN grad -> ReluGrad / Sum -> ConvGrad dY) run with no
// layout change in between.
//
// Values are grouped by the ops that must see them in one layout: BatchNormTraining's X and Y;
// BatchNormTrainingGrad's dY, X, Z and dX; Add / Sum / Relu / ReluGrad of equally shaped operands
// (all of them); ConvGrad's X and dX (its dY alone); a Conv / FusedConv's Y and residual Z (its X
// alone). A group is blocked when each of its values is a 4-D f32 static activation with C % 16 == 0
// that is no graph input or output. Then the convolution and BN nodes reading or writing it become
// com.ferry Blocked (their op in the attribute `op`, which operands are blocked in masks), the
// elementwise ops stay as they are (same shapes), and where a blocked value meets any other node
// (MaxPool, GlobalAveragePool, their gradients, the 3-channel image's convolution...) a ToBlocked
// follows its producer or a FromBlocked precedes its first plain reader.
// Only Conv / FusedConv whose weights are fed at run time (training; constant weights are inference
// convolutions, dnnl_conv.cpp) and only 2-D ones.
// The graph stays plain when the region would be cut up by ops with no blocked form (more than one
// edge per two wrapped nodes: --sync-bn's SyncBatchNormTraining, the emulated --amp graph's Cast
// pairs under FERRY_AMP_NATIVE=0), as each edge costs the reorder a wrapped node saves.
// ResNet-50 b8 (2 threads): 368 -> 164 oneDNN reorders per step (what remains: the weights'), six
// edges (the stem's MaxPool and GlobalAveragePool, forward and backward).
// $FERRY_TRAIN_BLOCKED=0 (read at each run of the pass) or FERRY_DISABLE_PASSES=train_blocked_layout
// turn it off.
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "common/env_switch.h"
#include "ops/blocked_layout.h"
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

// An operand of a node: input (true) or output, and its index.
struct Slot {
  bool input;
  size_t index;
};

bool is(const Node& n, const char* domain, const char* op) { return n.domain == domain && n.op_type == op; }

const TensorType* static_type(const Graph& g, const std::string& v) {
  const TensorType* t = v.empty() ? nullptr : g.find_type(v);
  return t && t->kind == ValueKind::kTensor && t->shape && t->shape->is_static() ? t : nullptr;
}

bool rank4(const Graph& g, const std::string& v) {
  const TensorType* t = static_type(g, v);
  return t && t->shape->rank() == 4;
}

bool elementwise(const Node& n) {
  return is(n, "", "Add") || is(n, "", "Relu") || is(n, kFerryDomain, "ReluGrad") || is(n, "", "Sum");
}

// The operand groups of a node that can run blocked (each group: operands in one layout); empty
// when it cannot.
std::vector<std::vector<Slot>> layout_groups(const Graph& g, const Node& n) {
  if ((is(n, "", "Conv") || is(n, kFerryDomain, "FusedConv")) && n.inputs.size() >= 2 && !n.outputs.empty()) {
    if (constant_value(g, n.inputs[1]) || !rank4(g, n.inputs[0])) return {};
    const Attribute* cl = n.attr("channels_last");
    if (cl && cl->i != 0) return {};
    std::vector<Slot> y = {{false, 0}};
    if (n.inputs.size() > 3 && !n.inputs[3].empty()) y.push_back({true, 3});
    return {{{true, 0}}, y};
  }
  if (is(n, kFerryDomain, "ConvGrad") && n.inputs.size() == 3) {
    if (!rank4(g, n.inputs[1])) return {};
    return {{{true, 0}}, {{true, 1}, {false, 0}}};
  }
  if (is(n, kFerryDomain, "BatchNormTraining") && n.inputs.size() == 5) {
    if (!rank4(g, n.inputs[0])) return {};
    return {{{true, 0}, {false, 0}}};
  }
  if (is(n, kFerryDomain, "BatchNormTrainingGrad") && n.inputs.size() >= 5) {
    if (!rank4(g, n.inputs[1])) return {};
    std::vector<Slot> s = {{true, 0}, {true, 1}, {false, 0}};
    if (n.inputs.size() > 5) s.push_back({true, 5});
    return {s};
  }
  if (elementwise(n) && n.outputs.size() == 1 && !n.inputs.empty()) {
    const TensorType* o = static_type(g, n.outputs[0]);
    if (!o || o->shape->rank() != 4) return {};
    std::vector<Slot> s = {{false, 0}};
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const TensorType* t = static_type(g, n.inputs[i]);
      if (!t || t->shape->values() != o->shape->values()) return {};
      s.push_back({true, i});
    }
    return {s};
  }
  return {};
}

struct UnionFind {
  std::vector<size_t> parent;
  size_t add() {
    parent.push_back(parent.size());
    return parent.size() - 1;
  }
  size_t find(size_t a) {
    while (parent[a] != a) a = parent[a] = parent[parent[a]];
    return a;
  }
  void unite(size_t a, size_t b) { parent[find(a)] = find(b); }
};

bool disabled_by_env() {
  const char* e = env_value("FERRY_TRAIN_BLOCKED");
  return e && std::strcmp(e, "0") == 0;
}

// The block of the graph's blocked activations: oneDNN's on this CPU (16 with AVX-512, 8 on AVX2,
// where oneDNN's convolutions read and write nChw8c and a 16-block costs a reorder before and after
// each: ResNet-50 b8, 210 nChw8c <-> nChw16c reorders a step, ~80 ms of a 1.45 s step and ~290 ms of
// step 1). $FERRY_TRAIN_LAYOUT_BLOCK = 8 | 16 (read at each run of the pass) forces one: the same
// values either way (tests/unit/test_train_blocked.cpp).
int64_t graph_layout_block() {
  const char* e = env_value("FERRY_TRAIN_LAYOUT_BLOCK");
  if (e && std::strcmp(e, "8") == 0) return 8;
  if (e && std::strcmp(e, "16") == 0) return 16;
  return host_layout_block();
}

bool bf16_activations_off() {
  const char* e = env_value("FERRY_AMP_BF16_ACT");
  return e && std::strcmp(e, "0") == 0;
}

// --amp bf16: an output that holds bf16 values in f32 is stored in bf16 where each of its readers
// would convert it to bf16, or reads it in bf16 as well, anyway (as torch.autocast's bf16
// convolution returns a bf16 tensor, which BatchNorm reads and computes its statistics of in f32):
//   - a Conv / FusedConv's Y (amp_bf16 with amp_round_outputs bit 0, src/passes/amp_bf16_fold.cpp)
//     read only by BatchNormTraining (X) and BatchNormTrainingGrad (X, the saved input): the
//     convolution writes it with no bf16 -> f32 reorder and the BN kernels read half the bytes;
//   - a ConvGrad's dX (amp_bf16, amp_round_outputs bit 0) read only by BatchNormTrainingGrad (dY);
//   - a BatchNormTrainingGrad's dX read only by amp_bf16 ConvGrads as their dY, which they round to
//     bf16 first thing: the BN kernel rounds it as it writes it (to nearest even, as the reorder);
//   - a BatchNormTraining's Y (ResNet's BN + Relu, relu = 1) read only by amp_bf16 convolutions as
//     their X (Conv / FusedConv input 0, ConvGrad input 1), which round it, and by
//     BatchNormTrainingGrad as its Relu mask Z (input 5): rounding keeps the sign of every value
//     but the positive ones below 2^-134 (bf16's smallest subnormal halved), which become 0.
// All of them blocked and wrapped (com.ferry Blocked). Bit i of `bf16_outputs` / `bf16_inputs` on
// the Blocked node says output / input i is such a bf16 tensor that its op sees as f32
// (grad_blocked.cpp's rules and reference kernel; cpu: dnnl_conv_grad.cpp, grad_blocked.cpp).
// Same values as in f32. $FERRY_AMP_BF16_ACT=0 keeps them in f32.
void bf16_activations(Graph* graph) {
  if (bf16_activations_off()) return;
  Graph& g = *graph;
  const GraphUses uses(g);
  std::set<std::string> outputs;
  for (const ValueInfo& v : g.outputs) outputs.insert(v.name);
  auto amp_rounded = [](const Node& n) {
    const Attribute *amp = n.attr("amp_bf16"), *round = n.attr("amp_round_outputs");
    return amp && amp->i != 0 && round && (round->i & 1) != 0;
  };
  struct Plan {
    size_t producer;
    std::string value;
    std::vector<std::pair<size_t, size_t>> reads;  // (node, input)
  };
  std::vector<Plan> plans;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!is(n, kFerryDomain, "Blocked") || n.outputs.empty() || n.outputs[0].empty() || !output_blocked(n, 0)) continue;
    const std::string op = inner_op(n);
    // Which reader (op, input index) may take output 0 in bf16.
    std::string reader_op;
    size_t reader_input = 0;
    bool reader_amp = false;
    if ((op == "Conv" || op == "FusedConv") && amp_rounded(n)) {
      reader_op = "BatchNorm";  // BatchNormTraining input 0 or BatchNormTrainingGrad input 1
    } else if (op == "ConvGrad" && amp_rounded(n)) {
      reader_op = "BatchNormTrainingGrad";
    } else if (op == "BatchNormTrainingGrad") {
      reader_op = "ConvGrad";
      reader_amp = true;
    } else if (op == "BatchNormTraining") {
      reader_op = "ConvInput";  // Conv / FusedConv input 0, ConvGrad input 1 (amp_bf16); BN grad's Z
    } else {
      continue;
    }
    const std::string& y = n.outputs[0];
    const TensorType* t = g.find_type(y);
    if (!t || t->dtype != DType::kF32 || uses.pinned.count(y) || outputs.count(y) || !uses.num_readers(y)) continue;
    Plan plan{i, y, {}};
    bool ok = true;
    for (size_t r : uses.readers.at(y)) {
      const Node& m = g.nodes[r];
      const std::string mop = is(m, kFerryDomain, "Blocked") ? inner_op(m) : "";
      for (size_t k = 0; k < m.inputs.size(); ++k) {
        if (m.inputs[k] != y) continue;
        bool fits = false;
        if (reader_op == "BatchNorm") {
          fits = (mop == "BatchNormTraining" && k == 0) || (mop == "BatchNormTrainingGrad" && k == 1);
        } else if (reader_op == "ConvInput") {
          const Attribute* a = m.attr("amp_bf16");
          const bool amp = a && a->i != 0;
          fits = ((mop == "Conv" || mop == "FusedConv") && k == 0 && amp) || (mop == "ConvGrad" && k == 1 && amp) ||
                 (mop == "BatchNormTrainingGrad" && k == 5);
        } else {
          fits = mop == reader_op && k == reader_input;
        }
        if (reader_amp) {
          const Attribute* a = m.attr("amp_bf16");
          fits = fits && a && a->i != 0;
        }
        ok = ok && fits && input_blocked(m, k);
        plan.reads.push_back({r, k});
      }
    }
    if (ok && !plan.reads.empty()) plans.push_back(std::move(plan));
  }
  for (const Plan& p : plans) {
    for (const auto& [r, k] : p.reads) {
      Node& m = g.nodes[r];
      const Attribute* a = m.attr("bf16_inputs");
      set_attr(&m, "bf16_inputs", (a ? a->i : 0) | (int64_t{1} << k));
    }
    set_attr(&g.nodes[p.producer], "bf16_outputs", int64_t{1});
    g.value_types[p.value].dtype = DType::kBF16;
  }
}

Status run_train_blocked_layout(Model* model, PassContext& ctx) {
  if (disabled_by_env()) return Status::ok();
  Graph& g = model->graph;
  bool training = false;
  for (const Node& n : g.nodes) training |= is(n, kFerryDomain, "ConvGrad");
  if (!training) return Status::ok();

  // Groups of values.
  std::map<std::string, size_t> id;
  UnionFind uf;
  auto value_id = [&](const std::string& v) {
    auto it = id.find(v);
    if (it != id.end()) return it->second;
    return id[v] = uf.add();
  };
  std::vector<std::vector<std::vector<Slot>>> node_groups(g.nodes.size());
  std::vector<std::string> core_values;  // operands of convolutions and BN (a group without one stays plain)
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    node_groups[i] = layout_groups(g, n);
    for (const auto& grp : node_groups[i]) {
      long first = -1;
      for (const Slot& s : grp) {
        const std::string& v = s.input ? n.inputs[s.index] : n.outputs[s.index];
        if (v.empty()) continue;
        const size_t k = value_id(v);
        if (first >= 0) uf.unite(k, static_cast<size_t>(first));
        else first = static_cast<long>(k);
        if (!elementwise(n)) core_values.push_back(v);
      }
    }
  }
  if (id.empty()) return Status::ok();
  const GraphUses uses(g);
  std::set<std::string> graph_inputs;
  for (const ValueInfo& v : g.inputs) graph_inputs.insert(v.name);
  std::vector<bool> group_ok(uf.parent.size(), true);
  const int64_t block = graph_layout_block();
  for (const auto& [v, k] : id) {
    const TensorType* t = static_type(g, v);
    const bool ok = t && t->dtype == DType::kF32 && t->shape->rank() == 4 && t->shape->dims[1].value % block == 0 &&
                    uses.producer_of(v) >= 0 && !uses.pinned.count(v) && !graph_inputs.count(v) &&
                    !g.find_initializer(v);
    if (!ok) group_ok[uf.find(k)] = false;
  }
  std::vector<bool> group_core(uf.parent.size(), false);
  for (const std::string& v : core_values) group_core[uf.find(id.at(v))] = true;
  for (size_t k = 0; k < group_ok.size(); ++k) group_ok[k] = group_ok[k] && group_core[uf.find(k)];
  auto blocked = [&](const std::string& v) {
    auto it = id.find(v);
    return it != id.end() && group_ok[uf.find(it->second)];
  };

  // The plain copy of each blocked value something reads plain (made on first need).
  std::map<std::string, std::string> plain_name;
  std::vector<Node> out;
  out.reserve(g.nodes.size() + 16);
  std::map<std::string, TensorType> old_types;
  for (const auto& [v, k] : id)
    if (blocked(v)) old_types[v] = *g.find_type(v);
  int64_t edges = 0, wrapped = 0;
  auto plain_of = [&](const std::string& v) -> std::string& {
    std::string& p = plain_name[v];
    if (p.empty()) {
      p = fresh_name(g, v + "/plain");
      g.value_types[p] = old_types.at(v);
    }
    return p;
  };
  // Values whose producer writes them plain (their ToBlocked follows it): the plain copy exists.
  std::set<std::string> plain_made;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node n = g.nodes[i];
    std::vector<bool> in_slot(n.inputs.size(), false), out_slot(n.outputs.size(), false);
    for (const auto& grp : node_groups[i])
      for (const Slot& s : grp) (s.input ? in_slot : out_slot)[s.index] = true;
    int64_t in_mask = 0, out_mask = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const std::string v = n.inputs[k];
      if (!blocked(v)) continue;
      if (in_slot[k]) {
        in_mask |= int64_t{1} << k;
        continue;
      }
      const std::string p = plain_of(v);
      if (!plain_made.count(v)) {  // FromBlocked just before the first plain reader
        Node fb;
        fb.name = fresh_name(g, v + "/from_blocked");
        fb.op_type = "FromBlocked";
        fb.domain = kFerryDomain;
        fb.inputs = {v};
        fb.outputs = {p};
        out.push_back(std::move(fb));
        plain_made.insert(v);
        ++edges;
      }
      n.inputs[k] = p;
    }
    std::vector<Node> after;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const std::string v = n.outputs[k];
      if (!blocked(v)) continue;
      if (out_slot[k]) {
        out_mask |= int64_t{1} << k;
        continue;
      }
      const std::string p = plain_of(v);
      Node tb;
      tb.name = fresh_name(g, v + "/to_blocked");
      tb.op_type = "ToBlocked";
      tb.domain = kFerryDomain;
      if (block != kLayoutBlock) set_attr(&tb, "block", block);
      tb.inputs = {p};
      tb.outputs = {v};
      after.push_back(std::move(tb));
      plain_made.insert(v);
      n.outputs[k] = p;
      ++edges;
    }
    if ((in_mask || out_mask) && !elementwise(n) && !node_groups[i].empty()) {
      set_attr(&n, "op", n.op_type);
      set_attr(&n, "op_domain", n.domain);
      set_attr(&n, "op_opset", model->opset(n.domain));
      set_attr(&n, "blocked_inputs", in_mask);
      set_attr(&n, "blocked_outputs", out_mask);
      if (block != kLayoutBlock) set_attr(&n, "block", block);
      n.op_type = "Blocked";
      n.domain = kFerryDomain;
      ++wrapped;
    }
    out.push_back(std::move(n));
    for (Node& a : after) out.push_back(std::move(a));
  }
  // Nothing runs blocked, or the region is cut up by ops with no blocked form (each edge is a
  // reorder, as each wrapped node saves about one: e.g. --sync-bn's SyncBatchNormTraining, or the
  // emulated --amp graph's Cast pairs, FERRY_AMP_NATIVE=0): leave the graph as it was.
  if (!wrapped || edges * 2 > wrapped) {
    for (const auto& [v, p] : plain_name) g.value_types.erase(p);
    return Status::ok();
  }
  g.nodes = std::move(out);
  for (const auto& [v, t] : old_types) {
    TensorType b = t;
    b.shape = Shape::of(blocked_dims(t.shape->values(), block));
    g.value_types[v] = b;
  }
  bf16_activations(&g);
  use_ferry_domain(model);
  ctx.changes += static_cast<int>(wrapped + edges);
  return Status::ok();
}

}  // namespace

GraphPass train_blocked_layout_pass() {
  return {"train_blocked_layout", 2,
          "training graphs (cpu): activations stay in oneDNN's blocked layout nChw16c between convolutions, "
          "BN and elementwise ops, reorders only at the region's edges",
          run_train_blocked_layout, "blocked_training_layout"};
}

}  // namespace ferry
