// Graph edits written back into an .onnx file: new nodes and initializers, rewired inputs, renamed
// producer outputs (the quantizer's QDQ files, src/quant/). The source ModelProto is edited, so
// metadata, doc strings, value_info and attributes of untouched nodes survive.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/tensor.h"

namespace ferry {

struct OnnxNewNode {
  std::string name;
  std::string op_type;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::map<std::string, int64_t> int_attrs;
};

struct OnnxGraphEdit {
  std::map<std::string, Tensor> add_initializers;  // names must not exist yet
  std::set<std::string> remove_initializers;       // also dropped from graph.input (old IR versions)
  std::vector<OnnxNewNode> add_nodes;
  /// Node (named by its first output) -> input index -> the value it reads instead.
  std::map<std::string, std::map<int, std::string>> rewire;
  /// Outputs of existing nodes renamed (from -> to); graph outputs keep their names.
  std::map<std::string, std::string> rename_outputs;
  /// Raised to at least this (0: unchanged).
  int64_t min_opset = 0;
};

/// Writes `out_path`: `source_onnx` with `edit` applied, main-graph nodes sorted topologically
/// (original order kept where possible), external data inlined, through a temporary file.
/// `out_path` must differ from the source.
Status write_edited_onnx(const std::string& source_onnx, const OnnxGraphEdit& edit, const std::string& out_path);

}  // namespace ferry
