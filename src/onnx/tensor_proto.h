// TensorProto -> Tensor for the ONNX importer (onnx_import.cpp) and the .pb readers (onnx_import.h).
// Internal to onnx/: it names protobuf types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>

#include <google/protobuf/io/zero_copy_stream.h>

#include "common/status.h"
#include "io/file.h"
#include "ir/tensor.h"
#include "onnx/onnx_pb.h"

namespace ferry {

/// Where a TensorProto's external data may come from and what has been read: one per import.
struct TensorSource {
  std::string base_dir;  // external data only from regular files inside it ("" refuses external data)
  int64_t max_weight_bytes = std::numeric_limits<int64_t>::max();  // over all tensors read
  int64_t weight_bytes = 0;
  std::unordered_map<std::string, FileBytes> external_files;  // mapped once, shared by the tensors
};

/// The tensor a TensorProto holds, checked against its shape before anything is allocated.
/// `src` null: external data is refused and no limit applies. `what` ("" = "tensor '<name>'")
/// starts every message. `raw_data`, when given, stands for tp's raw_data (bytes read in place from
/// a mapped file by the import, which leaves them out of the parsed TensorProto).
StatusOr<Tensor> tensor_from_proto(TensorSource* src, const onnx::TensorProto& tp, const std::string& what,
                                   const std::string_view* raw_data = nullptr);

/// Parses `size` bytes as one whole ModelProto within protobuf's limits (2 GiB, nesting 200): the one
/// reader of model bytes (import, export, edit). False when they are not one; the caller names the file.
bool parse_model_proto(const void* data, size_t size, onnx::ModelProto* mp);
/// The same limits on a stream (a file read through a buffer, the export's read_model_proto).
bool parse_model_proto(google::protobuf::io::ZeroCopyInputStream* in, onnx::ModelProto* mp);

}  // namespace ferry
