// Trained-model export: the source .onnx file re-read with protobuf, its initializers replaced
// by trained values, training-only parts turned off (BatchNormalization in inference mode,
// Dropout removed), written atomically. Everything else the user's file had is kept.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "ir/tensor.h"

namespace ferry {

struct TrainedExport {
  /// Initializer name (as in the source, before `renames`) -> new value (trained parameters,
  /// BatchNorm running statistics). The dtype must stay; the shape may change (a replaced classifier).
  std::map<std::string, Tensor> weights;
  /// New initializers (a fresh classifier's weights); names must not exist in the graph yet.
  std::map<std::string, Tensor> added;
  /// (from, to): every node input and graph output reading `from` reads `to` instead. When
  /// `from` is an initializer and `to` names no initializer, the initializer is renamed; an
  /// initializer left unread by a rename is dropped.
  std::vector<std::pair<std::string, std::string>> renames;
  /// metadata_props entries set on the output (a key the source has is replaced): `ferry train`
  /// writes the class names and the eval image transform (onnx/model_metadata.h).
  std::map<std::string, std::string> metadata;
};

struct ExportOptions {
  /// Initializers of a model whose serialized size would exceed this go to an external data
  /// file "<out name>.data" beside the output (protobuf cannot hold 2 GiB in one message).
  int64_t max_inline_bytes = (int64_t(1) << 31) - (int64_t(64) << 20);
  /// Initializers smaller than this stay inline even then.
  int64_t external_min_bytes = 1024;
};

/// Writes `out_path`: the model in `source_onnx` with `e` applied, every BatchNormalization in
/// inference mode (training_mode removed, only output Y; opset < 9: is_test/spatial fixed up),
/// every Dropout removed (its consumers read its input; a used mask output is an error naming
/// the node), initializers and Constant nodes that only fed removed training parts dropped,
/// stale value_info removed and graph output shapes re-inferred when a weight's shape changed.
/// External data of the source is copied (inline, or into the output's own data file), never
/// written to. `out_path` must differ from the source. The file appears whole or not at all.
Status export_trained_onnx(const std::string& source_onnx, const TrainedExport& e, const std::string& out_path,
                           const ExportOptions& options = {});

}  // namespace ferry
