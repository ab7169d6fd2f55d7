// The KServe v2 (Open Inference) protocol's JSON as Triton's HTTP front end speaks it: inference
// requests (JSON tensors and the binary tensor data extension) decoded into InferRequests, and
// responses, metadata, statistics and the repository index encoded. Pure functions of bytes,
// independent of the HTTP library and of the runtime (library ferry_serve_protocol), so a fuzz
// target drives the decoder directly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "serve/inference_types.h"
#include "serve/shared_memory.h"

namespace ferry::serve {

struct RequestedOutput {
  std::string name;
  bool binary = false;
  /// > 0: Triton's classification extension, the top this many classes instead of the tensor.
  int64_t classification = 0;
  /// Set: written into this shared-memory slice (write_shm_outputs) instead of the response.
  std::optional<ShmSlice> shm;
};

struct DecodedInfer {
  InferRequest request;
  /// The outputs to return, in the order asked for (all of the model's when the request names none).
  std::vector<RequestedOutput> outputs;
};

/// Decodes POST .../infer. `body` is the whole HTTP body; `header_length` the value of
/// Inference-Header-Content-Length (-1: absent, the body is all JSON). Every error is
/// kInvalidArgument naming the input and saying expected vs given. `shm`: the registered
/// shared-memory regions that inputs and outputs may name (null: none may).
StatusOr<DecodedInfer> decode_infer_request(std::string_view body, int64_t header_length, const ModelSignature& sig,
                                            const SharedMemoryRegistry* shm = nullptr);

/// A request's input read off the wire: Tensor::try_copy_of (`dims` valid: checked by the caller; each
/// byte written once), its errors starting with `what`. Not for BYTES tensors.
StatusOr<Tensor> copy_input_tensor(DType dtype, std::vector<int64_t> dims, const void* bytes, const std::string& what);

/// The checks the JSON and gRPC decoders share (same messages). One input's name, KServe datatype
/// and shape (batch axis included) against the model; returns its spec. `given`: the inputs
/// decoded so far (a repeated name fails); `batch` / `batch_from` carry the first input's batch
/// size across the calls (start with -1 and "").
StatusOr<const TensorSpec*> check_input(const ModelSignature& sig, const std::string& name, std::string_view datatype,
                                        const std::vector<int64_t>& dims, const TensorList& given, int64_t* batch,
                                        std::string* batch_from);
/// Every input of the model is in `inputs`.
Status check_inputs_complete(const ModelSignature& sig, const TensorList& inputs);
/// `name` is an output of the model.
Status check_output_name(const ModelSignature& sig, const std::string& name);
/// Triton's classification extension for output `name`: `classes` (> 0) and a numeric output.
Status check_classification(const ModelSignature& sig, const std::string& name, int64_t classes);
/// Triton's classification extension: the `classes` largest values of each batch row of `t` (of
/// all of it when the model does not batch), largest first (ties: the lower index), as BYTES
/// "value:index" (value as std::to_string), or "value:index:label" when `labels` has a line for the
/// index (config.pbtxt label_filename); shape [rows, k] or [k], k = min(classes, values per row).
StatusOr<Tensor> classify(const Tensor& t, int64_t classes, bool batched, const std::vector<std::string>* labels = nullptr);
/// The labels of output `name` of the model (null when it has none).
const std::vector<std::string>* output_labels(const ModelSignature& sig, const std::string& name);
/// BYTES tensors in the binary forms (HTTP binary tensor data, gRPC raw_input_contents /
/// raw_output_contents), Triton's serialization: each element a 4-byte little-endian length, then
/// its bytes. The decoder checks the element count against `dims` and names the element that runs
/// past the end.
StatusOr<Tensor> decode_bytes_tensor(std::string_view raw, const std::vector<int64_t>& dims, const std::string& what);
/// Bytes the serialization of a BYTES tensor takes, and the serialization appended to `out`.
int64_t bytes_tensor_size(const Tensor& t);
void append_bytes_tensor(const Tensor& t, std::string* out);

/// A tensor's shape as the protocol shows it: the batch axis (-1) first when the model batches.
std::vector<int64_t> protocol_dims(const TensorSpec& spec, int32_t max_batch);

struct EncodedResponse {
  std::string body;
  /// Bytes of JSON at the front of `body` (the Inference-Header-Content-Length) when binary
  /// outputs follow; -1 when the body is all JSON.
  int64_t json_size = -1;
};
/// Encodes the response to a decoded request from the model's outputs (in the config's order).
EncodedResponse encode_infer_response(const ModelSignature& sig, const DecodedInfer& req, const TensorList& outputs);

/// {"error":"..."}
std::string error_json(std::string_view message);
std::string server_metadata_json(std::string_view version);
/// GET /v2/models/M: the signature, and every ready version of the model.
std::string model_metadata_json(const ModelSignature& model, const std::vector<int64_t>& versions);
/// One model version's counters for the statistics endpoint.
struct StatsView {
  std::string name;
  int64_t version = 0;
  const ModelStats* stats = nullptr;
};
std::string model_stats_json(const std::vector<StatsView>& models);
std::string repository_index_json(const std::vector<IndexEntry>& entries);
/// Reads {"ready": true} from a repository index request body (false when absent or empty).
StatusOr<bool> parse_index_request(std::string_view body);
/// A repository load request's body: empty, or a JSON object whose "parameters" (Triton's config
/// override "config" and model files "file:...") are empty; ferry reads the model from the
/// repository, so a load that gives any is refused naming one (as gRPC RepositoryModelLoad).
Status check_load_request(std::string_view body);

}  // namespace ferry::serve
