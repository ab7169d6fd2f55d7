// ONNX import: ModelProto files -> ferry::Model, validated. The only place that sees protobuf.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "ir/graph.h"
#include "ir/value.h"

namespace ferry {

struct ImportOptions {
  /// Largest .onnx file accepted (protobuf itself caps one message at 2 GiB; bigger models
  /// keep their weights in external data files).
  int64_t max_file_bytes = (int64_t(1) << 31) - 1;
  /// Largest total of initializer bytes (inline + external).
  int64_t max_weight_bytes = int64_t(1) << 40;
  /// Run type and shape inference after import.
  bool infer_shapes = true;
  /// Refuse nodes whose op (at the model's opset) is not in the registry. `ferry info` turns
  /// this off to describe any model; running one needs it on.
  bool require_known_ops = true;
};

/// Loads and validates an .onnx file; external data is read from the model's folder only.
StatusOr<std::shared_ptr<Model>> load_onnx_model(const std::string& path, const ImportOptions& options = {});

/// Parses a serialized ModelProto held in memory. `base_dir` is where external data may be
/// read from ("" refuses external data). `what` names the source in messages.
StatusOr<std::shared_ptr<Model>> parse_onnx_model(const void* data, size_t size, const std::string& base_dir,
                                                  const std::string& what, const ImportOptions& options = {});

/// Reads a serialized ONNX TensorProto (.pb, as in the ONNX test data sets).
/// `name` receives the tensor's name (may be empty).
StatusOr<Tensor> read_tensor_pb(const std::string& path, std::string* name = nullptr);
/// Parses a serialized TensorProto held in memory (external data refused). `what` names it.
StatusOr<Tensor> parse_tensor_pb(const void* data, size_t size, const std::string& what, std::string* name = nullptr);
/// Reads a .pb holding a TensorProto, SequenceProto or OptionalProto, as `kind` says.
StatusOr<Value> read_value_pb(const std::string& path, ValueKind kind, std::string* name = nullptr);
/// Writes a TensorProto .pb file.
Status write_tensor_pb(const std::string& path, const Tensor& t, const std::string& name);

}  // namespace ferry
