// The operator registry: one schema per (op, first opset), each with a shape rule and a
// reference kernel. Op families register themselves from op_families.inc.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"
#include "ir/value.h"

namespace ferry {

constexpr int64_t kMinOpset = 1;
constexpr int64_t kMaxOpset = 21;

/// Reads a node's attributes with ONNX defaults.
class AttrReader {
 public:
  explicit AttrReader(const Node& node) : node_(node) {}
  bool has(const char* name) const { return node_.attr(name) != nullptr; }
  int64_t get_int(const char* name, int64_t dflt) const;
  float get_float(const char* name, float dflt) const;
  std::string get_string(const char* name, const std::string& dflt) const;
  std::vector<int64_t> get_ints(const char* name, const std::vector<int64_t>& dflt = {}) const;
  std::vector<float> get_floats(const char* name, const std::vector<float>& dflt = {}) const;
  std::vector<std::string> get_strings(const char* name) const;
  const Tensor* get_tensor(const char* name) const;
  const Graph* get_graph(const char* name) const;
  const Node& node() const { return node_; }

 private:
  const Node& node_;
};

/// What a shape rule sees: input types, constant input values where known, attributes.
class InferContext : public AttrReader {
 public:
  InferContext(const Node& node, int64_t opset, std::vector<const TensorType*> input_types,
               std::vector<const Tensor*> input_values)
      : AttrReader(node), opset_(opset), types_(std::move(input_types)), values_(std::move(input_values)),
        outputs_(node.outputs.size()) {}

  int64_t opset() const { return opset_; }
  int64_t num_inputs() const { return static_cast<int64_t>(types_.size()); }
  int64_t num_outputs() const { return static_cast<int64_t>(outputs_.size()); }
  /// True when input i is given (not omitted, not past the end).
  bool has_input(int64_t i) const { return i < num_inputs() && types_[i] != nullptr; }
  /// Type of input i; call only when has_input(i).
  const TensorType& input_type(int64_t i) const { return *types_[i]; }
  /// Constant value of input i, or nullptr when unknown before running.
  const Tensor* input_value(int64_t i) const { return i < num_inputs() ? values_[i] : nullptr; }
  void set_output(int64_t i, TensorType t) { outputs_[i] = std::move(t); }
  const std::vector<TensorType>& outputs() const { return outputs_; }
  /// Sets the value of output i when the shape rule knows it without running the kernel (Shape or
  /// Size of a static shape); shape inference then treats that output as a constant.
  void set_output_value(int64_t i, Tensor v) {
    output_values_.resize(outputs_.size());
    output_values_[i] = std::move(v);
  }
  /// Values set by set_output_value (undefined tensors where none was set; may be empty).
  const std::vector<Tensor>& output_values() const { return output_values_; }
  /// An InvalidModel error naming the node.
  Status error(const std::string& msg) const;

 private:
  int64_t opset_;
  std::vector<const TensorType*> types_;
  std::vector<const Tensor*> values_;
  std::vector<TensorType> outputs_;
  std::vector<Tensor> output_values_;
};

/// Runs a subgraph (If/Loop/Scan body) with the given inputs; provided by the executor.
using SubgraphRunner = std::function<Status(const Graph& body, const std::vector<Value>& inputs,
                                            std::vector<Value>* outputs)>;

/// Where KernelContext::allocate_output takes memory from; the executor installs one that hands
/// out slices of its planned arena. Returns false to let the heap allocate the tensor.
class OutputAllocator {
 public:
  virtual ~OutputAllocator() = default;
  /// Makes output `index` (dims already validated) in `out`; zero-filled when `zero_fill`.
  virtual bool allocate(int64_t index, DType dtype, std::vector<int64_t>* dims, bool zero_fill, Tensor* out) = 0;
  /// As allocate (not zero-filled), and output `index` may share input `input`'s buffer: the kernel
  /// reads that input only element for element before writing it (or not at all when they alias).
  virtual bool allocate_over(int64_t index, int64_t /*input*/, DType dtype, std::vector<int64_t>* dims, Tensor* out) {
    return allocate(index, dtype, dims, false, out);
  }
};

/// What a kernel sees. Outputs are pre-sized to node.outputs.size(); the kernel allocates them.
class KernelContext : public AttrReader {
 public:
  KernelContext(const Node& node, int64_t opset, std::vector<const Value*> inputs, std::vector<Value>* outputs)
      : AttrReader(node), opset_(opset), owned_inputs_(std::move(inputs)), inputs_(owned_inputs_.data()),
        num_inputs_(static_cast<int64_t>(owned_inputs_.size())), outputs_(outputs) {}
  /// The same over `num_inputs` input pointers the caller keeps alive for the context's life (the
  /// executor's per-run buffer: no allocation per node).
  KernelContext(const Node& node, int64_t opset, const Value* const* inputs, size_t num_inputs, std::vector<Value>* outputs)
      : AttrReader(node), opset_(opset), inputs_(inputs), num_inputs_(static_cast<int64_t>(num_inputs)), outputs_(outputs) {}
  // inputs_ may point into owned_inputs_: not copyable.
  KernelContext(const KernelContext&) = delete;
  KernelContext& operator=(const KernelContext&) = delete;

  int64_t opset() const { return opset_; }
  int64_t num_inputs() const { return num_inputs_; }
  int64_t num_outputs() const { return static_cast<int64_t>(outputs_->size()); }
  bool has_input(int64_t i) const { return i < num_inputs() && inputs_[i] != nullptr; }
  /// Tensor input i; call only when has_input(i).
  const Tensor& input(int64_t i) const { return inputs_[i]->tensor; }
  /// Input i as a Value (sequence and optional ops).
  const Value& input_value(int64_t i) const { return *inputs_[i]; }
  /// Allocates output i (checked against element limits), zero-filled unless `zero_fill` is
  /// false (pass false when the kernel writes every element: it saves a memset). Memory may come
  /// from the executor's arena, so never keep the tensor beyond the run.
  StatusOr<Tensor*> allocate_output(int64_t i, DType dtype, std::vector<int64_t> dims, bool zero_fill = true);
  /// As allocate_output (not zero-filled), for a kernel that accepts output i written over input
  /// `input` (same dtype and size, e.g. a residual added by the convolution's sum post-op): the
  /// memory plan may then give both one buffer when the input is not read after this node. The
  /// kernel must check `output(i).raw() == input(input).raw()` rather than assume either way.
  StatusOr<Tensor*> allocate_output_over(int64_t i, int64_t input, DType dtype, std::vector<int64_t> dims);
  /// Sets output i to an existing tensor (e.g. a view sharing an input's storage).
  void set_output(int64_t i, Tensor t) { (*outputs_)[i] = Value(std::move(t)); }
  /// Sets output i to a sequence or optional.
  void set_output_value(int64_t i, Value v) { (*outputs_)[i] = std::move(v); }
  Tensor& output(int64_t i) { return (*outputs_)[i].tensor; }
  Status error(const std::string& msg) const;

  SubgraphRunner run_subgraph;
  /// Set by the executor (nullptr: every output comes from the heap).
  OutputAllocator* allocator = nullptr;

 private:
  // Output i from the heap; out of memory is a Status naming the node, the output and the bytes.
  StatusOr<Tensor*> allocate_on_heap(int64_t i, DType dtype, std::vector<int64_t> dims);

  int64_t opset_;
  std::vector<const Value*> owned_inputs_;  // empty when the inputs are viewed
  const Value* const* inputs_;
  int64_t num_inputs_;
  std::vector<Value>* outputs_;
};

using InferFn = Status (*)(InferContext&);
using KernelFn = Status (*)(KernelContext&);

struct AttrSpec {
  const char* name;
  AttrType type;
  bool required = false;
};

/// One definition of an op, valid from `since_version` until the next definition of the same op.
struct OpSchema {
  const char* name = "";
  const char* domain = "";  // "" = ai.onnx
  int64_t since_version = 1;
  int min_inputs = 1;
  int max_inputs = 1;
  int min_outputs = 1;
  int max_outputs = 1;
  std::vector<AttrSpec> attrs;
  /// Element types the reference kernel accepts for input 0 (empty = any).
  std::vector<DType> types;
  InferFn infer = nullptr;
  KernelFn kernel = nullptr;
  /// Filled by the registry: the last opset this definition covers.
  int64_t until_version = kMaxOpset;
  /// Whether inputs may be sequences or optionals (otherwise the executor refuses them).
  bool accepts_sequences = false;
  /// Bit i set: input i may be omitted ("") even though i < min_inputs (Scan-8's sequence_lens).
  uint64_t optional_input_mask = 0;
};

class OpRegistry {
 public:
  /// Adds a definition. Definitions of one op may be added in any order.
  void add(OpSchema schema);
  /// The definition that applies at `opset` (newest since_version <= opset), or nullptr.
  const OpSchema* find(const std::string& domain, const std::string& op, int64_t opset) const;
  /// All definitions of an op (sorted by since_version), empty if unknown.
  const std::vector<OpSchema>* versions(const std::string& domain, const std::string& op) const;
  /// Every op name, sorted.
  std::vector<std::string> op_names() const;
  /// Every op's definitions (each list sorted by since_version), ordered by domain then name.
  std::vector<const std::vector<OpSchema>*> all() const;
  void finalize();

 private:
  std::map<std::string, std::vector<OpSchema>> ops_;  // key: domain + "::" + name
};

/// The process-wide registry with every op family registered.
const OpRegistry& op_registry();

/// Looks up the schema for a node, with an error naming the node, op and opset when missing.
StatusOr<const OpSchema*> resolve_schema(const Node& node, int64_t opset);

}  // namespace ferry
