// The graph IR: attributes, nodes, graphs (with subgraphs for If/Loop/Scan), models.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/shape.h"
#include "ir/tensor.h"

namespace ferry {

class Graph;

enum class AttrType { kUndefined, kFloat, kInt, kString, kTensor, kGraph, kFloats, kInts, kStrings, kTensors, kGraphs, kTypeProto };
const char* attr_type_name(AttrType t);

struct Attribute {
  AttrType type = AttrType::kUndefined;
  float f = 0.0f;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  /// kTypeProto (Optional's 'type'): a tensor, sequence or optional type.
  TensorType tp;
};

/// One operator application. Values are referred to by name; "" marks an omitted optional input.
struct Node {
  std::string name;       // unique within its graph after import (generated when the model has none)
  std::string op_type;    // "Conv"
  std::string domain;     // "" for ai.onnx
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::map<std::string, Attribute> attrs;
  /// Values of enclosing graphs that the node's subgraphs read (filled at import).
  std::vector<std::string> implicit_inputs;
  /// After graph optimization: the names of the original (ONNX) nodes this node computes, in
  /// order (a fused Conv+BatchNorm+Relu lists three). Empty: the node is an original one.
  std::vector<std::string> origin;

  const Attribute* attr(const std::string& key) const {
    auto it = attrs.find(key);
    return it == attrs.end() ? nullptr : &it->second;
  }
  /// "node 'Conv_12' (Conv)" for error messages.
  std::string describe() const;
};

struct ValueInfo {
  std::string name;
  TensorType type;
};

class Graph {
 public:
  std::string name;
  std::vector<ValueInfo> inputs;   // graph inputs that are not initializers
  std::vector<ValueInfo> outputs;
  std::vector<Node> nodes;         // topologically sorted after import
  /// Constant tensors; names may also appear in `inputs` of old models (then the input overrides).
  std::map<std::string, Tensor> initializers;
  /// Declared or inferred type of every value known (graph inputs, node outputs, initializers).
  std::unordered_map<std::string, TensorType> value_types;
  /// The graph this one is a body of (nullptr for the main graph).
  const Graph* parent = nullptr;

  const TensorType* find_type(const std::string& value) const;
  /// Looks up an initializer here or in enclosing graphs.
  const Tensor* find_initializer(const std::string& value) const;
};

/// Model::metadata key marking a model whose graph is already optimized (value: the opt level),
/// e.g. one loaded from a compiled .ferry file: the executor runs no passes on it.
inline constexpr const char* kOptimizedMetadataKey = "ferry.optimized";

struct Model {
  int64_t ir_version = 0;
  std::string producer_name;
  std::string producer_version;
  std::string domain;
  int64_t model_version = 0;
  std::string doc_string;
  /// Operator set version per domain ("" = ai.onnx).
  std::map<std::string, int64_t> opset_imports;
  /// The ai.onnx opset the file declared when import upgraded it (opsets 1-6); 0 when not upgraded.
  int64_t upgraded_from_opset = 0;
  std::map<std::string, std::string> metadata;
  Graph graph;
  std::string path;  // the file it was loaded from

  /// A deep copy: subgraphs are copied too and their parent pointers point into the copy, so
  /// passes may rewrite the copy freely. Tensor data stays shared with the original:
  /// a pass replaces an initializer with a new Tensor, never writes into one.
  std::shared_ptr<Model> clone() const;

  int64_t opset(const std::string& domain_name = "") const {
    auto it = opset_imports.find(domain_name == "ai.onnx" ? "" : domain_name);
    return it == opset_imports.end() ? 0 : it->second;
  }
};

}  // namespace ferry
