// A small blocking HTTP/1.1 client on one kept-alive connection (Boost.Beast, TCP_NODELAY):
// what `ferry perf` drives the server with, one client per concurrent stream.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ferry::serve {

struct HttpResponse {
  unsigned status = 0;
  std::string body;
  /// Inference-Header-Content-Length when the response has one, else -1.
  int64_t header_length = -1;
};

class HttpClient {
 public:
  /// Connects to host:port ("localhost:8000", "http://127.0.0.1:8000" also accepted). After
  /// sending a request it polls for the response without blocking for up to `spin_us` before it
  /// blocks (serve/spin_wait.h); 0: it always blocks.
  static StatusOr<std::unique_ptr<HttpClient>> connect(const std::string& url, int64_t spin_us = 0);
  ~HttpClient();
  /// One request and its response; reconnects once when the server closed the kept-alive
  /// connection. `headers`: extra (name, value) pairs.
  StatusOr<HttpResponse> request(const std::string& method, const std::string& target, const std::string& body,
                                 const std::vector<std::pair<std::string, std::string>>& headers = {});

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::serve
