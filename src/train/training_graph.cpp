// From an exported model to a training graph (see training_graph.h).
#include "train/training_graph.h"

#include <cmath>
#include <cstdlib>
#include <regex>
#include <set>
#include <unordered_map>

#include "common/env_switch.h"
#include "grad/autodiff.h"
#include "grad/recompute.h"
#include "grad/registry.h"
#include "ops/op_util.h"
#include "ops/shape_inference.h"
#include "train/autocast.h"

namespace ferry {
namespace {

const char* kFerry = "com.ferry";

// Forgets inferred types of node outputs (they change with the batch and the classifier) and the
// declared output shapes, so shape inference starts from the inputs and initializers.
void reset_types(Graph* g) {
  std::set<std::string> keep;
  for (const auto& in : g->inputs) keep.insert(in.name);
  for (const auto& [name, t] : g->initializers) keep.insert(name);
  for (auto it = g->value_types.begin(); it != g->value_types.end();)
    it = keep.count(it->first) ? std::next(it) : g->value_types.erase(it);
  for (auto& out : g->outputs) out.type = TensorType{};
}

// Value of `name` when it is an initializer or the output of a Constant node.
const Tensor* constant_value(const Graph& g, const std::string& name) {
  if (const Tensor* t = g.find_initializer(name)) return t;
  for (const Node& n : g.nodes)
    if (n.op_type == "Constant" && n.domain.empty() && !n.outputs.empty() && n.outputs[0] == name)
      if (const Attribute* a = n.attr("value")) return &a->t;
  return nullptr;
}

// The nodes `value` depends on (indices), to find the classifier on the way to the output.
std::set<std::string> ancestors(const Graph& g, const std::string& value) {
  std::set<std::string> need{value};
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    bool feeds = false;
    for (const auto& o : it->outputs) feeds |= need.count(o) > 0;
    if (feeds)
      for (const auto& i : it->inputs) need.insert(i);
  }
  return need;
}

Tensor uniform_f32(const std::vector<int64_t>& dims, double bound, std::mt19937_64* rng) {
  Tensor t = Tensor::allocate(DType::kF32, dims);
  std::uniform_real_distribution<double> u(-bound, bound);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = static_cast<float>(u(*rng));
  return t;
}

// --num-classes: the last Gemm/MatMul with an initializer weight that the output depends on gets
// fresh weights [.. x num_classes], initialized as torch.nn.Linear (U(-1/sqrt(in), 1/sqrt(in))).
Status replace_classifier(Model* m, const TrainGraphOptions& o, TrainGraph* tg) {
  Graph& g = m->graph;
  const std::set<std::string> need = ancestors(g, tg->logits);
  for (size_t k = g.nodes.size(); k-- > 0;) {
    Node& n = g.nodes[k];
    if ((n.op_type != "Gemm" && n.op_type != "MatMul") || !n.domain.empty() || n.inputs.size() < 2) continue;
    if (!need.count(n.outputs[0])) continue;
    auto wit = g.initializers.find(n.inputs[1]);
    if (wit == g.initializers.end() || wit->second.rank() != 2) continue;
    const bool trans_b = n.op_type == "Gemm" && AttrReader(n).get_int("transB", 0) != 0;
    const int64_t in = trans_b ? wit->second.dim(1) : wit->second.dim(0);
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    std::mt19937_64 rng(o.seed ^ 0x6a09e667f3bcc909ull);
    std::vector<int64_t> wdims = trans_b ? std::vector<int64_t>{o.num_classes, in} : std::vector<int64_t>{in, o.num_classes};
    wit->second = uniform_f32(wdims, bound, &rng);
    tg->fresh_params.push_back(n.inputs[1]);
    std::string bias;
    if (n.op_type == "Gemm" && n.inputs.size() > 2 && g.initializers.count(n.inputs[2])) {
      bias = n.inputs[2];
    } else if (n.op_type == "MatMul") {  // MatMul + Add(bias)
      for (const Node& c : g.nodes)
        if (c.op_type == "Add" && c.inputs.size() == 2 && c.inputs[0] == n.outputs[0] && g.initializers.count(c.inputs[1]))
          bias = c.inputs[1];
    }
    if (!bias.empty()) {
      g.initializers[bias] = uniform_f32({o.num_classes}, bound, &rng);
      tg->fresh_params.push_back(bias);
    }
    for (const auto& p : tg->fresh_params) g.value_types[p] = g.initializers[p].type();
    tg->replaced_classifier = n.name;
    return Status::ok();
  }
  return invalid_argument("--num-classes: found no Gemm or MatMul with a 2-D weight initializer on the way to output '" +
                          tg->logits + "'; the model has no classifier ferry can replace");
}

// `sync`: --sync-bn in a job of several ranks, SyncBatchNormTraining (statistics over every rank).
Status rewrite_batchnorm(Model* m, Node* n, bool sync, TrainGraph* tg) {
  Graph& g = m->graph;
  if (n->inputs.size() < 5) return invalid_model(n->describe() + ": BatchNormalization needs 5 inputs");
  for (int i : {3, 4})
    if (!g.initializers.count(n->inputs[i]))
      return unsupported(n->describe() + ": running statistic '" + n->inputs[i] +
                         "' is not an initializer; ferry trains BatchNormalization with stored running statistics");
  AttrReader a(*n);
  const float eps = a.get_float("epsilon", 1e-5f);
  const float momentum = a.get_float("momentum", 0.9f);
  Node t;
  t.name = n->name;
  t.op_type = sync ? "SyncBatchNormTraining" : "BatchNormTraining";
  t.domain = kFerry;
  t.inputs = {n->inputs[0], n->inputs[1], n->inputs[2], n->inputs[3], n->inputs[4]};
  const std::string base = "train/" + n->name + "/";
  auto out_name = [&](size_t i, const char* what) {
    return i < n->outputs.size() && !n->outputs[i].empty() ? n->outputs[i] : base + what;
  };
  t.outputs = {n->outputs[0], out_name(1, "running_mean"), out_name(2, "running_var"), base + "saved_mean",
               base + "saved_inv_std"};
  t.attrs["epsilon"] = attr_float(eps);
  t.attrs["momentum"] = attr_float(momentum);
  t.origin = {n->name};
  tg->state.push_back({n->inputs[3], t.outputs[1]});
  tg->state.push_back({n->inputs[4], t.outputs[2]});
  *n = std::move(t);
  return Status::ok();
}

Status rewrite_dropout(Model* m, Node* n, TrainGraph* tg) {
  Graph& g = m->graph;
  float ratio = 0.5f;
  if (m->opset() >= 12) {
    if (n->inputs.size() > 1 && !n->inputs[1].empty()) {
      const Tensor* r = constant_value(g, n->inputs[1]);
      if (!r || r->numel() != 1)
        return unsupported(n->describe() + ": the dropout ratio '" + n->inputs[1] + "' is not a constant scalar");
      ratio = static_cast<float>(r->get_double(0));
    }
  } else {
    ratio = AttrReader(*n).get_float("ratio", 0.5f);
  }
  if (!(ratio >= 0.0f && ratio < 1.0f)) return invalid_model(n->describe() + ": dropout ratio " + std::to_string(ratio) + " is not in [0, 1)");
  const std::string seed = "train/seed/" + n->name;
  Node t;
  t.name = n->name;
  t.op_type = "TrainDropout";
  t.domain = kFerry;
  t.inputs = {n->inputs[0], seed};
  t.outputs = {n->outputs[0], n->outputs.size() > 1 && !n->outputs[1].empty() ? n->outputs[1] : "train/" + n->name + "/mask"};
  t.attrs["ratio"] = attr_float(ratio);
  t.origin = {n->name};
  TensorType st{DType::kI64, Shape()};
  g.inputs.push_back({seed, st});
  g.value_types[seed] = st;
  tg->dropout_seeds.push_back(seed);
  *n = std::move(t);
  return Status::ok();
}

// Gives the data inputs the training batch; errors when an input's batch is fixed otherwise.
// BatchNormTraining -> Relu and, in the backward, ReluGrad -> BatchNormTrainingGrad become one
// node each (the CPU kernels then make one pass over the activation instead of two): the forward
// takes relu = 1 and writes the Relu's output Z, the gradient takes dZ and Z (its mask) in place of
// ReluGrad's result. Only where BN's Y is read by the Relu alone and ReluGrad's result by that BN's
// gradient alone. Returns the number of pairs fused.
int64_t fuse_bn_relu(Graph* g) {
  std::unordered_map<std::string, std::vector<size_t>> readers;
  for (size_t i = 0; i < g->nodes.size(); ++i)
    for (const std::string& in : g->nodes[i].inputs)
      if (!in.empty()) readers[in].push_back(i);
  std::set<std::string> graph_outputs;
  for (const ValueInfo& o : g->outputs) graph_outputs.insert(o.name);
  auto only_reader = [&](const std::string& v) -> Node* {
    auto it = readers.find(v);
    if (graph_outputs.count(v) || it == readers.end() || it->second.size() != 1) return nullptr;
    return &g->nodes[it->second[0]];
  };
  std::set<const Node*> dead;
  int64_t fused = 0;
  for (Node& bn : g->nodes) {
    if (bn.domain != kFerry || bn.op_type != "BatchNormTraining" || bn.outputs.empty() || bn.attrs.count("relu")) continue;
    Node* relu = only_reader(bn.outputs[0]);
    if (!relu || !relu->domain.empty() || relu->op_type != "Relu" || relu->outputs.size() != 1) continue;
    const std::string z = relu->outputs[0];
    // The Relu's gradient: the one ReluGrad(dZ, Z); its dY read only by this BN's gradient.
    Node* rg = nullptr;
    int n_rg = 0;
    for (size_t i : readers[z]) {
      Node& r = g->nodes[i];
      if (r.domain == kFerry && r.op_type == "ReluGrad" && r.inputs.size() == 2 && r.inputs[1] == z) {
        rg = &r;
        ++n_rg;
      }
    }
    if (n_rg != 1 || rg->outputs.size() != 1 || rg->inputs[0].empty()) continue;
    Node* bng = only_reader(rg->outputs[0]);
    if (!bng || bng->domain != kFerry || bng->op_type != "BatchNormTrainingGrad" || bng->inputs.size() != 5 ||
        bng->inputs[0] != rg->outputs[0] || bng->inputs[1] != bn.inputs[0])
      continue;
    g->value_types.erase(bn.outputs[0]);
    g->value_types.erase(rg->outputs[0]);
    bn.outputs[0] = z;
    bn.attrs["relu"] = attr_int(1);
    bng->inputs[0] = rg->inputs[0];
    bng->inputs.push_back(z);
    dead.insert(relu);
    dead.insert(rg);
    ++fused;
  }
  if (fused) {
    std::vector<Node> kept;
    kept.reserve(g->nodes.size() - dead.size());
    for (Node& n : g->nodes)
      if (!dead.count(&n)) kept.push_back(std::move(n));
    g->nodes = std::move(kept);
  }
  return fused;
}

Status set_batch(Model* m, const TrainGraph& tg, int64_t batch) {
  for (auto& in : m->graph.inputs) {
    if (std::find(tg.data_inputs.begin(), tg.data_inputs.end(), in.name) == tg.data_inputs.end()) continue;
    if (!in.type.shape || in.type.shape->rank() == 0)
      return unsupported("model input '" + in.name + "' has no batch axis (shape " + in.type.to_string() + "); ferry train needs [N, ...] inputs");
    Dim& d = in.type.shape->dims[0];
    if (d.is_known() && d.value != batch)
      return invalid_argument("model input '" + in.name + "' has a fixed batch of " + std::to_string(d.value) + " (shape " +
                              in.type.to_string() + "); use --batch-size " + std::to_string(d.value) +
                              " or export the model with a dynamic batch axis");
    d = Dim(batch);
    for (size_t i = 1; i < in.type.shape->dims.size(); ++i)
      if (!in.type.shape->dims[i].is_known())
        return unsupported("model input '" + in.name + "' has an unknown dim " + std::to_string(i) + " (" + in.type.to_string() +
                           "); export it with fixed sizes except the batch");
    m->graph.value_types[in.name] = in.type;
  }
  return Status::ok();
}

// Everything up to the loss: training forms, parameters as inputs, batch, labels, loss node.
Status build_forward_with_loss(Model* m, const TrainGraphOptions& o, TrainGraph* tg,
                               std::unordered_map<std::string, Tensor>* constants) {
  RETURN_IF_ERROR(prepare_training_forward(m, o, tg));
  Graph& g = m->graph;
  RETURN_IF_ERROR(set_batch(m, *tg, o.batch_size));
  // Parameters and BN statistics become graph inputs with f32 copies the trainer owns.
  std::set<std::string> state_names;
  for (const auto& s : tg->state) state_names.insert(s.input);
  std::vector<std::string> moved = tg->params;
  moved.insert(moved.end(), state_names.begin(), state_names.end());
  for (const auto& name : moved) {
    const Tensor& t = g.initializers.at(name);
    if (t.dtype() != DType::kF32)
      return unsupported("parameter '" + name + "' is " + dtype_name(t.dtype()) +
                         "; ferry train keeps f32 master weights: export the model in float32");
    tg->initial[name] = t.clone();
    g.inputs.push_back({name, t.type()});
    g.value_types[name] = t.type();
    g.initializers.erase(name);
  }
  reset_types(&g);
  RETURN_IF_ERROR(infer_shapes(m, constants));
  const TensorType* lt = g.find_type(tg->logits);
  if (!lt || !lt->shape || !lt->shape->is_static() || !dtype_is_float(lt->dtype))
    return unsupported("output '" + tg->logits + "' has no static float type after shape inference (" +
                       (lt ? lt->to_string() : std::string("unknown")) + ")");
  Node loss;
  loss.name = "train/loss";
  loss.domain = kFerry;
  loss.outputs = {tg->loss};
  m->opset_imports[kFerry] = 1;
  if (o.loss == "cross_entropy") {
    if (lt->shape->rank() != 2)
      return unsupported("cross_entropy needs [N, C] scores; output '" + tg->logits + "' is " + lt->to_string());
    tg->num_classes = lt->shape->dims[1].value;
    TensorType yt{DType::kI64, Shape::of({o.batch_size})};
    g.inputs.push_back({tg->labels, yt});
    g.value_types[tg->labels] = yt;
    loss.op_type = "CrossEntropyLoss";
    loss.inputs = {tg->logits, tg->labels};
    if (o.label_smoothing != 0.0) loss.attrs["label_smoothing"] = attr_float(static_cast<float>(o.label_smoothing));
  } else if (o.loss == "mse") {
    g.inputs.push_back({tg->labels, *lt});
    g.value_types[tg->labels] = *lt;
    loss.op_type = "MseLoss";
    loss.inputs = {tg->logits, tg->labels};
  } else {
    return invalid_argument("unknown loss '" + o.loss + "'; use cross_entropy or mse");
  }
  g.nodes.push_back(loss);
  return infer_shapes(m, constants);
}

}  // namespace

Status prepare_training_forward(Model* m, const TrainGraphOptions& o, TrainGraph* tg) {
  Graph& g = m->graph;
  if (g.outputs.empty()) return invalid_model("the model has no outputs");
  tg->logits = g.outputs[0].name;
  tg->data_inputs.clear();
  for (const auto& in : g.inputs)
    if (!g.initializers.count(in.name)) tg->data_inputs.push_back(in.name);
  // Old models list initializers among the inputs: keep only the data inputs there.
  std::vector<ValueInfo> inputs;
  for (const auto& in : g.inputs)
    if (!g.initializers.count(in.name)) inputs.push_back(in);
  g.inputs = inputs;
  if (o.num_classes > 0) RETURN_IF_ERROR(replace_classifier(m, o, tg));
  for (Node& n : g.nodes) {
    if (!n.domain.empty()) continue;
    if (n.op_type == "BatchNormalization") RETURN_IF_ERROR(rewrite_batchnorm(m, &n, o.sync_bn, tg));
    else if (n.op_type == "Dropout") RETURN_IF_ERROR(rewrite_dropout(m, &n, tg));
  }
  if (!tg->dropout_seeds.empty() || !tg->state.empty()) m->opset_imports[kFerry] = 1;
  std::set<std::string> state;
  for (const auto& s : tg->state) state.insert(s.input);
  std::regex freeze;
  if (!o.freeze.empty()) {
    try {
      freeze = std::regex(o.freeze, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return invalid_argument("--freeze '" + o.freeze + "' is not a valid regular expression: " + e.what());
    }
  }
  tg->params.clear();
  tg->frozen.clear();
  for (const auto& [name, t] : g.initializers) {
    if (!dtype_is_float(t.dtype()) || state.count(name)) continue;
    if (!o.freeze.empty() && std::regex_search(name, freeze)) tg->frozen.push_back(name);
    else tg->params.push_back(name);
  }
  return Status::ok();
}

StatusOr<TrainGraph> build_train_graph(const Model& model, const TrainGraphOptions& o) {
  if (o.batch_size < 1) return invalid_argument("--batch-size must be at least 1");
  TrainGraph tg;
  tg.model = model.clone();
  Model* m = tg.model.get();
  std::unordered_map<std::string, Tensor> constants;
  RETURN_IF_ERROR(build_forward_with_loss(m, o, &tg, &constants));
  if (tg.params.empty()) return invalid_argument("no parameter to train: every float initializer is frozen or a BN statistic");
  if (o.amp != DType::kF32) {
    AutocastReport ar;
    RETURN_IF_ERROR(apply_autocast(m, o.amp, o.keep_fp32, &ar));
    tg.amp_nodes = ar.lowered;
    RETURN_IF_ERROR(infer_shapes(m, &constants));
  }
  Graph& g = m->graph;
  if (o.loss_seed_input) {
    tg.loss_seed = "train/loss_scale";
    const TensorType loss_type = *g.find_type(tg.loss);
    g.inputs.push_back({tg.loss_seed, loss_type});
    g.value_types[tg.loss_seed] = loss_type;
  }
  ASSIGN_OR_RETURN(tg.grads, build_gradients(m, tg.loss, tg.params, &constants, tg.loss_seed));
  g.outputs = {{tg.loss, {}}};
  for (const auto& p : tg.params) {
    auto it = tg.grads.find(p);
    if (it == tg.grads.end()) continue;
    // A gradient that is itself a forward value or constant gets its own name as an output.
    std::string out = "train/grad/" + p;
    Node id;
    id.name = out;
    id.op_type = "Identity";
    id.inputs = {it->second};
    id.outputs = {out};
    g.nodes.push_back(id);
    it->second = out;
    g.outputs.push_back({out, {}});
  }
  for (const auto& s : tg.state) g.outputs.push_back({s.output, {}});
  // Not under --recompute (which clones forward segments). Under --amp the pattern holds where
  // autocast left BN -> Relu without a Cast between (both stay f32; fuse_bn_relu checks the pattern).
  const char* fuse_env = env_value("FERRY_TRAIN_FUSE_BN_RELU");
  if (o.fuse_bn_relu && o.recompute_segments < 0 && !(fuse_env && std::string(fuse_env) == "0"))
    tg.fused_bn_relu = fuse_bn_relu(&g);
  if (o.recompute_segments >= 0) {
    ASSIGN_OR_RETURN(RecomputeReport r, apply_recompute(m, tg.loss, o.recompute_segments));
    tg.recompute_segments = r.segments;
    tg.recomputed_nodes = r.cloned_nodes;
  }
  RETURN_IF_ERROR(infer_shapes(m));
  return tg;
}

int64_t share_trained_initializers(Model* source, const TrainGraph& tg) {
  int64_t released = 0;
  for (const auto& [name, t] : tg.initial) {
    auto it = source->graph.initializers.find(name);
    if (it == source->graph.initializers.end() || it->second.raw() == t.raw() || it->second.dtype() != t.dtype() ||
        it->second.dims() != t.dims())
      continue;
    released += it->second.nbytes();
    it->second = t;
  }
  return released;
}

StatusOr<std::vector<std::string>> untrainable_nodes(const Model& model, const TrainGraphOptions& o) {
  TrainGraph tg;
  std::shared_ptr<Model> m = model.clone();
  std::unordered_map<std::string, Tensor> constants;
  RETURN_IF_ERROR(build_forward_with_loss(m.get(), o, &tg, &constants));
  std::vector<std::string> out;
  for (const Node* n : nodes_without_gradient(*m, tg.loss, tg.params)) out.push_back(n->describe());
  return out;
}

StatusOr<std::shared_ptr<Model>> inference_model(const Model& model, const TrainGraph& tg,
                                                 const std::map<std::string, Tensor>& weights, int64_t batch) {
  std::shared_ptr<Model> m = model.clone();
  Graph& g = m->graph;
  for (const auto& [name, t] : weights) {
    g.initializers[name] = t;
    g.value_types[name] = t.type();
  }
  std::vector<ValueInfo> inputs;
  for (const auto& in : g.inputs)
    if (!g.initializers.count(in.name)) inputs.push_back(in);
  g.inputs = inputs;
  for (ValueInfo& in : g.inputs) {
    if (batch <= 0 || in.type.kind != ValueKind::kTensor || !in.type.shape || in.type.shape->rank() == 0 ||
        in.type.shape->dims[0].is_known())
      continue;
    in.type.shape->dims[0] = Dim(batch);
    g.value_types[in.name] = in.type;
  }
  for (Node& n : g.nodes) {
    if (!n.domain.empty()) continue;
    if (n.op_type == "BatchNormalization") {
      n.attrs.erase("training_mode");
      n.attrs.erase("is_test");
      n.outputs.resize(1);
    } else if (n.op_type == "Dropout") {
      n.op_type = "Identity";
      n.inputs.resize(1);
      n.attrs.clear();
      if (n.outputs.size() > 1) n.outputs.resize(1);
    }
  }
  (void)tg;
  reset_types(&g);
  RETURN_IF_ERROR(infer_shapes(m.get()));
  return m;
}

}  // namespace ferry
