// A small blocking client of inference.GRPCInferenceService (one channel, one HTTP/2
// connection): what `ferry perf --protocol grpc` drives the server with, one client per
// concurrent stream. Plain types in, plain types out; only grpc_client.cpp includes gRPC.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "serve/inference_types.h"

namespace ferry::serve {

class GrpcClient {
 public:
  /// Connects to host:port ("grpc://" or "http://" prefixes accepted), waiting at most 10 s.
  /// infer() polls for its response without blocking for up to `spin_us` before it blocks
  /// (serve/spin_wait.h); 0: it always blocks.
  static StatusOr<std::unique_ptr<GrpcClient>> connect(const std::string& url, int64_t spin_us = 0);
  ~GrpcClient();
  /// ModelMetadata as the HTTP endpoint's JSON (GET /v2/models/M), so callers read one format.
  StatusOr<std::string> model_metadata_json(const std::string& model, const std::string& version);
  /// max_batch_size from ModelConfig.
  StatusOr<int32_t> max_batch_size(const std::string& model, const std::string& version);
  StatusOr<StatsTotals> statistics(const std::string& model, const std::string& version);
  /// The request infer() sends: the tensors as raw_input_contents.
  void set_request(const std::string& model, const std::string& version, const TensorList& inputs);
  /// Opens a ModelStreamInfer call (bidirectional stream) on which infer() then sends its
  /// requests, one at a time, as perf_analyzer's --streaming.
  Status open_stream();
  /// One ModelInfer (or one request and its response on the stream); a failure carries the gRPC
  /// code's name and the server's message (a streamed response's error_message).
  Status infer();

  struct Impl;

 private:
  Status infer_on_stream();
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::serve
