// The HTTP/REST front end (KServe v2 as Triton serves it) and the metrics endpoint, on
// Boost.Beast: asynchronous, TCP_NODELAY, the system's listen backlog, a client that
// disconnects takes its queued request with it. Only http_server.cpp includes Beast.
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

struct HttpServerOptions {
  std::string address = "0.0.0.0";
  /// 0: a free port, chosen by the system (read it back with http_port()); -1: no HTTP/REST
  /// endpoint (Triton's --allow-http false; the metrics endpoint still serves).
  int http_port = 8000;
  /// -1: no metrics endpoint.
  int metrics_port = 8002;
  int threads = 8;
  /// Microseconds an I/O thread polls without blocking right after work, before it blocks
  /// (serve/spin_wait.h); 0: it always blocks.
  int64_t io_spin_us = kDefaultIoSpinMicroseconds;
  /// Largest request body; a larger one is answered 413.
  int64_t max_input_size = int64_t(64) << 20;
  /// explicit: the repository extension may load and unload models.
  bool explicit_control = false;
  /// Triton's --strict-readiness: /v2/health/ready is 200 only while every model the repository
  /// knows is ready (ModelRepository::all_ready); false: while the server is not shutting down.
  bool strict_readiness = true;
  /// The shared-memory regions (shared with the gRPC front end; null: the extension answers
  /// "disabled" and no request may name a region).
  SharedMemoryRegistry* shm = nullptr;
  /// The log settings served at /v2/logging (null: that endpoint answers 400); verbose level >= 1
  /// logs every request with its answer.
  ServerLog* logging = nullptr;
  /// The trace extension's settings and file (null: /v2/trace/setting answers 400, nothing traced).
  Tracer* tracer = nullptr;
  std::string version = "0.1.0";
};

class HttpServer {
 public:
  HttpServer(ModelRepository* repository, HttpServerOptions options, std::function<void(const std::string&)> log);
  ~HttpServer();
  /// Binds both ports (those not -1) and starts the I/O threads.
  Status start();
  int http_port() const;
  int metrics_port() const;
  /// Readiness false at once and new inference requests refused with 503; health, metadata
  /// and metrics keep answering.
  void begin_shutdown();
  /// Inference requests accepted and not yet answered.
  int64_t in_flight() const;
  /// Closes the listeners and stops the I/O threads.
  void stop();

 /// The implementation (Beast types), defined in http_server.cpp only.
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::serve
