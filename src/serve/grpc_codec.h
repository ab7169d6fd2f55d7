// inference.GRPCInferenceService's messages <-> ferry's serving types: a ModelInferRequest decoded
// and checked against the model (the HTTP decoder's checks and messages, kserve_json.h), the
// outputs into a ModelInferResponse, a model's statistics into ModelStatistics. On the generated
// protobuf messages only (no gRPC); grpc_server.cpp serves them.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "serve/grpc_service.pb.h"
#include "serve/inference_types.h"
#include "serve/kserve_json.h"
#include "serve/served_model.h"

namespace ferry::serve {

struct GrpcDecoded {
  InferRequest request;
  std::vector<RequestedOutput> outputs;  // in the order asked for (all of the model's when none named)
};

/// ModelInferRequest -> InferRequest, checked against the model with the HTTP decoder's checks:
/// typed `contents` (the field that matches the datatype, and no other) or `raw_input_contents`
/// (one per input not in shared memory), the `timeout` parameter, the requested outputs; inputs and
/// outputs in a region of `shm` (shared_memory_region / _offset / _byte_size parameters; null: none).
StatusOr<GrpcDecoded> decode_request(const inference::ModelInferRequest& r, const ModelSignature& sig,
                                     const SharedMemoryRegistry* shm = nullptr);

/// The model's outputs (config order) into the response: the requested ones, as raw bytes (a
/// classification as BYTES, kserve_json.h classify).
void encode_response(const ModelSignature& sig, const std::string& id, const std::vector<RequestedOutput>& names, const TensorList& outputs,
                     inference::ModelInferResponse* resp);

/// One model version's statistics, as Triton's ModelStatistics.
void fill_stats(const ServedModel& m, inference::ModelStatistics* out);

}  // namespace ferry::serve
