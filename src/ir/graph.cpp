#include "ir/graph.h"

namespace ferry {

const char* attr_type_name(AttrType t) {
  switch (t) {
    case AttrType::kFloat: return "float";
    case AttrType::kInt: return "int";
    case AttrType::kString: return "string";
    case AttrType::kTensor: return "tensor";
    case AttrType::kGraph: return "graph";
    case AttrType::kFloats: return "floats";
    case AttrType::kInts: return "ints";
    case AttrType::kStrings: return "strings";
    case AttrType::kTensors: return "tensors";
    case AttrType::kGraphs: return "graphs";
    case AttrType::kTypeProto: return "type";
    case AttrType::kUndefined: return "undefined";
  }
  return "undefined";
}

std::string Node::describe() const {
  std::string op = domain.empty() ? op_type : domain + "::" + op_type;
  return "node '" + name + "' (" + op + ")";
}

const TensorType* Graph::find_type(const std::string& value) const {
  for (const Graph* g = this; g; g = g->parent) {
    auto it = g->value_types.find(value);
    if (it != g->value_types.end()) return &it->second;
  }
  return nullptr;
}

const Tensor* Graph::find_initializer(const std::string& value) const {
  for (const Graph* g = this; g; g = g->parent) {
    auto it = g->initializers.find(value);
    if (it != g->initializers.end()) return &it->second;
  }
  return nullptr;
}

namespace {
void deep_copy_subgraphs(Graph* g) {
  for (Node& node : g->nodes) {
    for (auto& [key, a] : node.attrs) {
      if (a.g) {
        a.g = std::make_shared<Graph>(*a.g);
        a.g->parent = g;
        deep_copy_subgraphs(a.g.get());
      }
      for (auto& sg : a.graphs) {
        sg = std::make_shared<Graph>(*sg);
        sg->parent = g;
        deep_copy_subgraphs(sg.get());
      }
    }
  }
}
}  // namespace

std::shared_ptr<Model> Model::clone() const {
  auto copy = std::make_shared<Model>(*this);
  copy->graph.parent = nullptr;
  deep_copy_subgraphs(&copy->graph);
  return copy;
}

}  // namespace ferry
