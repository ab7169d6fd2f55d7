// The gRPC front end: inference.GRPCInferenceService (grpc_service.proto, the KServe v2 / Triton
// protocol) on gRPC's async API (a completion queue polled by a thread of ours: grpc_server.cpp), over the same
// repository, batcher and statistics as the HTTP front end. Status codes as Triton's: INVALID_ARGUMENT (a bad request, with the HTTP path's
// messages), NOT_FOUND (unknown model or version), UNAVAILABLE (not ready, queue full, timed out
// in the queue, shutting down), RESOURCE_EXHAUSTED (a message over the size limit, from gRPC).
// Only grpc_server.cpp and grpc_client.cpp include gRPC (library ferry_serve_grpc, FERRY_GRPC).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "serve/model_repository.h"
#include "serve/server_log.h"
#include "serve/shared_memory.h"
#include "serve/trace.h"
#include "serve/spin_wait.h"

namespace ferry::serve {

struct GrpcServerOptions {
  std::string address = "0.0.0.0";
  /// 0: a free port, chosen by the system (read it back with port()).
  int port = 8001;
  /// Largest request message; gRPC answers a larger one RESOURCE_EXHAUSTED ("Received message
  /// larger than max (N vs. LIMIT)"). The default is Triton's fixed limit (its
  /// --http-max-input-size is HTTP's alone).
  int32_t max_message_size = INT32_MAX;
  /// explicit: RepositoryModelLoad / RepositoryModelUnload are allowed.
  bool explicit_control = false;
  /// Triton's --strict-readiness: ServerReady only while every model is ready (as HTTP's).
  bool strict_readiness = true;
  /// The shared-memory regions (shared with the HTTP front end; null: registration refused).
  SharedMemoryRegistry* shm = nullptr;
  /// The log settings LogSettings reads and changes (null: UNAVAILABLE); verbose level >= 1 logs
  /// every ModelInfer with its status.
  ServerLog* logging = nullptr;
  /// The trace extension (TraceSetting; sampled ModelInfer requests recorded); null: none.
  Tracer* tracer = nullptr;
  /// Microseconds the poller polls its completion queue without blocking right after
  /// work, before it blocks (serve/spin_wait.h); 0: it always blocks.
  int64_t io_spin_us = kDefaultIoSpinMicroseconds;
  std::string version = "0.1.0";
};

class GrpcServer {
 public:
  GrpcServer(ModelRepository* repository, GrpcServerOptions options, std::function<void(const std::string&)> log);
  ~GrpcServer();
  /// Binds the port and starts serving.
  Status start();
  int port() const;
  /// Readiness false at once; new inference requests (unary and streamed) refused with UNAVAILABLE.
  void begin_shutdown();
  /// Inference requests accepted and not yet answered.
  int64_t in_flight() const;
  /// Stops the server (open streams are cancelled after a short grace period).
  void stop();

  /// The implementation (gRPC types), defined in grpc_server.cpp only.
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::serve
