#include "onnx/opset_upgrade.h"

#include <exception>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"
#include "onnx/version_converter/convert.h"

namespace ferry {
namespace {

// Largest initializer copied into the one-node model that finds the node a failed upgrade
// stopped at; bigger ones go in as typed inputs.
constexpr int64_t kMaxProbeInitializerBytes = int64_t(1) << 20;
// Nodes upgraded one by one to find the failing one (each a small conversion); past this the
// error gives the converter's message alone rather than take minutes.
constexpr int kMaxProbedNodes = 1000;

std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  // The converter prefixes its source location ("./onnx/version_converter/helper.cc:56: ").
  size_t colon = line.find(": ");
  if (line.rfind("./onnx/", 0) == 0 && colon != std::string::npos) line = line.substr(colon + 2);
  while (!line.empty() && (line.back() == '.' || line.back() == ' ')) line.pop_back();
  return line;
}

// Ranks known before the upgrade: graph inputs, initializers and whatever ONNX shape inference found.
std::unordered_map<std::string, int64_t> known_ranks(const onnx::GraphProto& g) {
  std::unordered_map<std::string, int64_t> ranks;
  auto add = [&](const onnx::ValueInfoProto& vi) {
    if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
      ranks[vi.name()] = vi.type().tensor_type().shape().dim_size();
  };
  for (const auto& vi : g.input()) add(vi);
  for (const auto& vi : g.value_info()) add(vi);
  for (const auto& vi : g.output()) add(vi);
  for (const auto& t : g.initializer()) ranks[t.name()] = t.dims_size();
  return ranks;
}

bool is_old_broadcast_op(const std::string& op) {
  static const std::set<std::string> kOps = {"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor",
                                             "Equal", "Greater", "Less"};
  return kOps.count(op) > 0;
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

std::string describe(const onnx::NodeProto& n, int index, int64_t opset) {
  return "node '" + (n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name()) + "' (" + n.op_type() +
         ", opset " + std::to_string(opset) + ")";
}

// Opset 1-6 binary ops with broadcast=1 and an explicit `axis` align B at that axis of A. The
// converter's own rewrite unsqueezes B to A's rank (the wrong axes unless axis + rank(B) ends at
// A's last axis), so the trailing 1s are added here and `axis` dropped: numpy alignment then means
// the same thing.
Status align_broadcast_axes(onnx::GraphProto* g, int64_t from, const std::string& what) {
  auto ranks = known_ranks(*g);
  std::vector<onnx::NodeProto> nodes;
  nodes.reserve(static_cast<size_t>(g->node_size()));
  for (int i = 0; i < g->node_size(); ++i) {
    onnx::NodeProto n = g->node(i);
    const onnx::AttributeProto* axis = find_attr(n, "axis");
    const onnx::AttributeProto* bc = find_attr(n, "broadcast");
    if (is_old_broadcast_op(n.op_type()) && axis && bc && bc->i() != 0 && n.input_size() == 2) {
      auto ra = ranks.find(n.input(0));
      auto rb = ranks.find(n.input(1));
      if (ra != ranks.end() && rb != ranks.end()) {
        int64_t ax = axis->i() < 0 ? axis->i() + ra->second : axis->i();
        int64_t trailing = ra->second - ax - rb->second;
        if (ax < 0 || trailing < 0)
          return invalid_model(what + ": " + describe(n, i, from) + ": broadcast axis " + std::to_string(axis->i()) +
                               " does not fit input B (rank " + std::to_string(rb->second) + ") into input A (rank " +
                               std::to_string(ra->second) + ")");
        if (trailing > 0) {
          onnx::NodeProto unsq;
          unsq.set_op_type("Unsqueeze");
          unsq.set_name(n.name() + "_ferry_align_b_" + std::to_string(i));
          unsq.add_input(n.input(1));
          std::string out = n.input(1) + "_ferry_aligned_" + std::to_string(i);
          unsq.add_output(out);
          onnx::AttributeProto* axes = unsq.add_attribute();
          axes->set_name("axes");
          axes->set_type(onnx::AttributeProto::INTS);
          for (int64_t k = 0; k < trailing; ++k) axes->add_ints(rb->second + k);
          n.set_input(1, out);
          nodes.push_back(std::move(unsq));
        }
        for (int k = 0; k < n.attribute_size(); ++k)
          if (n.attribute(k).name() == "axis") {
            n.mutable_attribute()->DeleteSubrange(k, 1);
            break;
          }
      }
    }
    nodes.push_back(std::move(n));
  }
  g->clear_node();
  for (auto& n : nodes) *g->add_node() = std::move(n);
  return Status::ok();
}

// The converter says what failed but not where: upgrade each node alone to find the first one
// that fails by itself.
std::string find_failing_node(const onnx::ModelProto& typed, int64_t from, int64_t to) {
  const onnx::GraphProto& g = typed.graph();
  std::unordered_map<std::string, const onnx::ValueInfoProto*> types;
  for (const auto& vi : g.input()) types[vi.name()] = &vi;
  for (const auto& vi : g.value_info()) types[vi.name()] = &vi;
  for (const auto& vi : g.output()) types[vi.name()] = &vi;
  std::unordered_map<std::string, const onnx::TensorProto*> inits;
  for (const auto& t : g.initializer()) inits[t.name()] = &t;
  for (int i = 0; i < g.node_size() && i < kMaxProbedNodes; ++i) {
    const onnx::NodeProto& n = g.node(i);
    onnx::ModelProto one;
    one.set_ir_version(typed.ir_version());
    *one.mutable_opset_import() = typed.opset_import();
    onnx::GraphProto* og = one.mutable_graph();
    og->set_name("probe");
    *og->add_node() = n;
    std::set<std::string> seen;
    for (const auto& in : n.input()) {
      if (in.empty() || !seen.insert(in).second) continue;
      auto it = inits.find(in);
      if (it != inits.end() && it->second->ByteSizeLong() <= static_cast<size_t>(kMaxProbeInitializerBytes))
        *og->add_initializer() = *it->second;
      auto t = types.find(in);
      if (t != types.end()) {
        *og->add_input() = *t->second;
      } else {
        onnx::ValueInfoProto* vi = og->add_input();
        vi->set_name(in);
        vi->mutable_type()->mutable_tensor_type()->set_elem_type(
            it != inits.end() ? it->second->data_type() : onnx::TensorProto::FLOAT);
      }
    }
    for (const auto& out : n.output()) {
      auto t = types.find(out);
      if (t != types.end()) {
        *og->add_output() = *t->second;
      } else {
        onnx::ValueInfoProto* vi = og->add_output();
        vi->set_name(out);
      }
    }
    try {
      (void)onnx::version_conversion::ConvertVersion(one, static_cast<int>(to));
    } catch (const std::exception& e) {
      return describe(n, i, from) + ": " + first_line(e.what());
    }
  }
  return "";
}

}  // namespace

Status upgrade_opset(onnx::ModelProto* mp, int64_t from, const std::string& what, bool name_failing_node) {
  // An op ONNX never defined at this opset has no adapter: name it without converting anything.
  for (int i = 0; i < mp->graph().node_size(); ++i) {
    const onnx::NodeProto& n = mp->graph().node(i);
    if ((n.domain().empty() || n.domain() == "ai.onnx") &&
        !onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(from), ""))
      return unsupported(what + " uses ai.onnx opset " + std::to_string(from) + ", which ferry upgrades to opset " +
                         std::to_string(kUpgradeTargetOpset) + ": " + describe(n, i, from) + ": ONNX defines no op '" +
                         n.op_type() + "' at opset " + std::to_string(from));
  }
  // Ranks for the broadcast rewrite and sizes for the converter's own checks.
  auto infer = [](onnx::ModelProto* m) {
    try {
      onnx::shape_inference::InferShapes(*m);
    } catch (const std::exception&) {
      // Shapes are a help here, not a requirement: ferry infers its own after import.
    }
  };
  const auto original_value_info = mp->graph().value_info();
  onnx::ModelProto typed = *mp;
  // The converter knows the sizes of graph inputs, not of initializers (opset 1-6 exporters list
  // every initializer as an input too; later ones need not): list the others for the upgrade only.
  std::set<std::string> listed, added;
  for (const auto& vi : typed.graph().input()) listed.insert(vi.name());
  for (const auto& t : typed.graph().initializer()) {
    if (listed.count(t.name())) continue;
    onnx::ValueInfoProto* vi = typed.mutable_graph()->add_input();
    vi->set_name(t.name());
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(t.data_type());
    for (int64_t d : t.dims()) tt->mutable_shape()->add_dim()->set_dim_value(d);
    added.insert(t.name());
  }
  // Two steps: ONNX shape inference knows few opset 1-5 ops (BatchNormalization-1 stops it), and
  // the opset 6->7 adapters (Gemm, broadcasting) need the sizes of their inputs.
  onnx::ModelProto upgraded;
  int64_t stage_from = from;
  try {
    if (from < 6) {
      typed = onnx::version_conversion::ConvertVersion(typed, 6);
    }
    stage_from = 6;
    infer(&typed);
    RETURN_IF_ERROR(align_broadcast_axes(typed.mutable_graph(), from, what));
    infer(&typed);
    upgraded = onnx::version_conversion::ConvertVersion(typed, static_cast<int>(kUpgradeTargetOpset));
  } catch (const std::exception& e) {
    std::string where =
        name_failing_node ? find_failing_node(typed, stage_from, stage_from < 6 ? 6 : kUpgradeTargetOpset) : "";
    return unsupported(what + " uses ai.onnx opset " + std::to_string(from) + ", which ferry upgrades to opset " +
                       std::to_string(kUpgradeTargetOpset) + " with the ONNX version converter; it failed" +
                       (where.empty() ? ": " + first_line(e.what()) : " at " + where) +
                       ". Re-export the model at opset " + std::to_string(kUpgradeTargetOpset) +
                       " or later (torch.onnx.export(..., opset_version=17)), or upgrade it with "
                       "onnx.version_converter.convert_version");
  }
  // Keep the model's own value_info and inputs: the rest was only for the converter.
  onnx::GraphProto* ug = upgraded.mutable_graph();
  *ug->mutable_value_info() = original_value_info;
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
  for (auto& vi : *ug->mutable_input())
    if (!added.count(vi.name())) *inputs.Add() = std::move(vi);
  ug->mutable_input()->Swap(&inputs);
  // Upsample-1 spelled its modes NEAREST / BILINEAR; opset 7 says nearest / linear, and the
  // converter keeps the old spelling.
  for (auto& n : *ug->mutable_node()) {
    // Reshape 4->5 moves `shape` into a Constant whose tensor the converter leaves without dims.
    if (n.op_type() == "Constant")
      for (auto& a : *n.mutable_attribute())
        if (a.name() == "value" && a.has_t() && a.t().dims_size() == 0 && a.t().int64_data_size() > 1)
          a.mutable_t()->add_dims(a.t().int64_data_size());
    if (n.op_type() != "Upsample") continue;
    for (auto& a : *n.mutable_attribute())
      if (a.name() == "mode" && a.s() == "NEAREST") a.set_s("nearest");
      else if (a.name() == "mode" && a.s() == "BILINEAR") a.set_s("linear");
  }
  *mp = std::move(upgraded);
  return Status::ok();
}

}  // namespace ferry
