// config.pbtxt: Triton's model configuration (model_config.proto, package inference), parsed in
// one place, completed from the model where fields are missing and checked against the model.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "serve/model_config.pb.h"

namespace ferry::serve {

/// Triton's max_batch_size for a model that batches when config.pbtxt does not say (as Triton's
/// ONNX Runtime backend's default-max-batch-size).
constexpr int32_t kDefaultMaxBatchSize = 4;

struct ParsedConfig {
  inference::ModelConfig config;
  /// "config.pbtxt:12:3: field 'optimization' is not supported by ferry and is ignored"
  std::vector<std::string> warnings;
};

/// Parses config.pbtxt text. Syntax errors and unknown enum values fail, naming `file`, line and
/// column; fields ferry's schema does not have are skipped and each named in a warning.
StatusOr<ParsedConfig> parse_model_config(std::string_view text, const std::string& file);

/// What a served model exposes: per input/output, the name, dtype and dims as the protocol sees
/// them (without the batch axis when max_batch_size > 0; -1 = any size).
struct TensorSpec {
  std::string name;
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;
  /// An output's classification labels (config.pbtxt label_filename), line i labels class i; null: none.
  std::shared_ptr<const std::vector<std::string>> labels;
};

/// Output name -> its labels, as read from the files that label_filename names.
using OutputLabels = std::map<std::string, std::shared_ptr<const std::vector<std::string>>>;

/// Reads the label files of `config`'s outputs (label_filename, relative to `model_dir`): one label
/// per line, a trailing \r dropped. A missing or unreadable file, an absolute path or one that
/// leaves the model directory fails, naming the output and the path.
StatusOr<OutputLabels> read_output_labels(const inference::ModelConfig& config, const std::string& model_dir, const std::string& where);

/// Triton's server-side completion of the backend fields (its AutoCompleteBackendFields, for the
/// two backends ferry serves): an empty `backend` becomes "onnxruntime" for platform
/// "onnxruntime_onnx" and "ferry" for platform "ferry", else by the file (`compiled`: a .ferry
/// file, "ferry"; an ONNX model, "onnxruntime"); backend "onnxruntime" without a platform gets
/// "onnxruntime_onnx"; an empty default_model_filename becomes `model_file` (the file served).
/// Triton's clients read them from the config (`GET .../config`, gRPC ModelConfig).
void complete_backend_fields(inference::ModelConfig* config, const std::string& model_file, bool compiled);

/// Fills what `config` leaves out from the model's signature (inputs, outputs, max_batch_size,
/// dynamic batching when the model batches, one instance), then checks every field against it:
/// names, dtypes, dims, max_batch_size against the model's batch axis, batching and instance
/// settings. `gears`: a compiled model's batch sizes (empty for ONNX). Warnings for settings
/// ferry accepts but does not act on go to `warnings`. Errors name `where` and the field.
/// `auto_complete` false (--disable-auto-complete-config): nothing is filled in; a config that
/// lists no inputs or no outputs is refused, naming the flag.
Status complete_and_validate(inference::ModelConfig* config, const std::vector<ValueInfo>& model_inputs,
                             const std::vector<ValueInfo>& model_outputs, const std::vector<int64_t>& gears,
                             const std::string& where, std::vector<std::string>* warnings, bool auto_complete = true);

/// Triton's TYPE_FP32 <-> ferry's DType (kUndefined / TYPE_INVALID when there is none).
DType dtype_from_config(inference::DataType t);
inference::DataType config_from_dtype(DType t);
/// The KServe v2 names: "FP32", "INT64", "BOOL", "BYTES", ...
const char* kserve_dtype_name(DType t);
/// "FP32" -> kF32; false for names ferry does not know.
bool dtype_from_kserve(std::string_view name, DType* out);

/// The inputs / outputs of a completed config as TensorSpecs.
std::vector<TensorSpec> input_specs(const inference::ModelConfig& config);
std::vector<TensorSpec> output_specs(const inference::ModelConfig& config);

/// A config `reshape` of one tensor, without the batch axis: a tensor of shape `from` is given to
/// its reader as `to` (an input: dims -> the reshape, the model's; an output: the reshape -> dims).
struct TensorReshape {
  std::string name;
  std::vector<int64_t> from, to;
};
std::vector<TensorReshape> input_reshapes(const inference::ModelConfig& config);
std::vector<TensorReshape> output_reshapes(const inference::ModelConfig& config);
/// `shape` (a tensor's dims without the batch axis, of the pattern `from`) as `to`: `to`'s k-th -1
/// takes the size at `from`'s k-th -1 (Triton's rule: the sizes between -1 dims hold as many
/// elements). Fails when the elements are not as many.
StatusOr<std::vector<int64_t>> reshape_dims(const std::vector<int64_t>& shape, const std::vector<int64_t>& from,
                                            const std::vector<int64_t>& to);

/// The config as JSON with proto field names (GET /v2/models/M/config).
std::string config_to_json(const inference::ModelConfig& config);

}  // namespace ferry::serve
