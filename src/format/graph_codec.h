// Graph <-> flatbuffer conversion for the .ferry graph section (ferry_model.fbs). Private to
// src/format/: the writer collects every tensor's bytes into the weights section (64-byte
// aligned, identical tensors stored once); the reader validates and wraps them in place.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "format/ferry_model_generated.h"
#include "ir/graph.h"

namespace ferry::format {

/// Builds the flatbuffer and the weights section.
class GraphWriter {
 public:
  GraphWriter() : fbb_(1 << 20) {}
  flatbuffers::FlatBufferBuilder& builder() { return fbb_; }
  /// The weights section's bytes (a multiple of 64 long).
  const std::string& weights() const { return weights_; }

  flatbuffers::Offset<fb::Graph> graph(const Graph& g);
  flatbuffers::Offset<flatbuffers::String> str(const std::string& s) { return fbb_.CreateSharedString(s); }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> strs(const std::vector<std::string>& v);

 private:
  flatbuffers::Offset<fb::TensorRef> tensor(const Tensor& t);
  /// A weight stored as the packed bytes `packed` of the node reading it, in `layout`.
  flatbuffers::Offset<fb::TensorRef> packed_tensor(const Tensor& t, const Tensor& packed, const std::vector<int64_t>& layout);
  flatbuffers::Offset<fb::TensorType> type(const TensorType& t);
  flatbuffers::Offset<fb::Node> node(const Node& n);
  flatbuffers::Offset<fb::Attribute> attribute(const std::string& name, const Attribute& a);
  flatbuffers::Offset<fb::ValueInfo> value_info(const std::string& name, const TensorType& t);
  /// Appends the tensor's bytes (or finds an identical copy) and returns its offset.
  uint64_t store(const Tensor& t);

  flatbuffers::FlatBufferBuilder fbb_;
  std::string weights_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> by_hash_;  // content hash -> offsets
};

/// What the reader needs besides the flatbuffer: the weights section and its owner.
struct WeightsView {
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  bool mapped = false;  // a read-only file mapping: pages dropped come back from the file
};

/// Reads a graph; `parent` is the enclosing graph (nullptr for the main graph). Checks every
/// tensor reference, dtype, dim and enum, and that every node input names a value defined
/// before it. Errors are kInvalidModel and name the graph and node.
Status read_graph(const fb::Graph& in, const WeightsView& weights, const Graph* parent, Graph* out);

}  // namespace ferry::format
