// Blocking HTTP/1.1 client on Boost.Beast; see http_client.h.
#include "serve/http_client.h"

#include <poll.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "serve/spin_wait.h"

namespace ferry::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

struct HttpClient::Impl {
  std::string host, port;
  net::io_context ioc;
  std::unique_ptr<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  SpinWait spin{0};

  // After a request went out: polls the socket without blocking while the spin lasts, so that
  // the read that follows finds the response there instead of blocking for it.
  void spin_for_response() {
    spin.arm();
    if (!spin.spinning() || buffer.size() > 0) return;
    pollfd p{stream->socket().native_handle(), POLLIN, 0};
    while (::poll(&p, 1, 0) == 0 && spin.again()) {
    }
  }

  Status open() {
    beast::error_code ec;
    tcp::resolver resolver(ioc);
    auto results = resolver.resolve(host, port, ec);
    if (ec) return invalid_argument("cannot resolve " + host + ":" + port + ": " + ec.message());
    stream = std::make_unique<beast::tcp_stream>(ioc);
    stream->connect(results, ec);
    if (ec) return invalid_argument("cannot connect to " + host + ":" + port + ": " + ec.message());
    stream->socket().set_option(tcp::no_delay(true), ec);
    buffer.clear();
    return Status::ok();
  }
};

StatusOr<std::unique_ptr<HttpClient>> HttpClient::connect(const std::string& url, int64_t spin_us) {
  std::string rest = url;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  std::unique_ptr<HttpClient> c(new HttpClient());
  c->impl_ = std::make_unique<Impl>();
  c->impl_->spin = SpinWait(spin_us);
  c->impl_->host = colon == std::string::npos ? rest : rest.substr(0, colon);
  c->impl_->port = colon == std::string::npos ? "8000" : rest.substr(colon + 1);
  if (c->impl_->host.empty()) return invalid_argument("server URL '" + url + "' has no host (want host:port)");
  RETURN_IF_ERROR(c->impl_->open());
  return c;
}

HttpClient::~HttpClient() = default;

StatusOr<HttpResponse> HttpClient::request(const std::string& method, const std::string& target, const std::string& body,
                                           const std::vector<std::pair<std::string, std::string>>& headers) {
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, impl_->host);
  req.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  for (int attempt = 0; attempt < 2; ++attempt) {
    beast::error_code ec;
    http::write(*impl_->stream, req, ec);
    http::response_parser<http::string_body> parser;
    parser.body_limit(uint64_t(1) << 32);
    if (!ec) impl_->spin_for_response();
    if (!ec) http::read(*impl_->stream, impl_->buffer, parser, ec);
    if (ec) {
      if (attempt == 0 && (ec == http::error::end_of_stream || ec == net::error::connection_reset || ec == net::error::broken_pipe)) {
        RETURN_IF_ERROR(impl_->open());
        continue;
      }
      return invalid_argument(method + " " + target + ": " + ec.message());
    }
    auto res = parser.release();
    HttpResponse out;
    out.status = res.result_int();
    auto hl = res.find("Inference-Header-Content-Length");
    if (hl != res.end()) out.header_length = std::atoll(std::string(hl->value()).c_str());
    out.body = std::move(res.body());
    if (!res.keep_alive()) RETURN_IF_ERROR(impl_->open());
    return out;
  }
  return invalid_argument(method + " " + target + ": the server closed the connection");
}

}  // namespace ferry::serve
