// KServe v2 HTTP/REST and /metrics on Boost.Beast; see http_server.h. Each connection reads one
// request at a time on its I/O thread; an inference request is run inline (ServedModel::enqueue)
// and answered at once, or queued on the model and answered when the model's callback posts it back. While it waits, the socket is watched for
// EOF, so a client that goes away cancels its queued request.
#include "serve/http_server.h"

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "serve/kserve_json.h"
#include "serve/metrics.h"
#include "serve/spin_wait.h"

namespace ferry::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

unsigned http_status_of(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNotFound: return 404;
    case StatusCode::kResourceExhausted: return 503;
    case StatusCode::kInternal: return 500;
    default: return 400;
  }
}

std::string percent_decode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
      continue;
    }
    out += s[i];
  }
  return out;
}

// The statistics of the given models (all when `name` is empty); the models stay alive meanwhile.
std::vector<StatsView> stats_views(const std::vector<std::shared_ptr<ServedModel>>& models, const std::string& name,
                                   const std::string& version) {
  std::vector<StatsView> out;
  for (const auto& m : models)
    if (name.empty() || (m->name() == name && (version.empty() || std::to_string(m->version()) == version)))
      out.push_back({m->name(), m->version(), &m->stats()});
  return out;
}

std::vector<std::string> split_path(std::string_view target) {
  const size_t q = target.find('?');
  if (q != std::string_view::npos) target = target.substr(0, q);
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < target.size()) {
    while (i < target.size() && target[i] == '/') ++i;
    size_t j = i;
    while (j < target.size() && target[j] != '/') ++j;
    if (j > i) parts.push_back(percent_decode(target.substr(i, j - i)));
    i = j;
  }
  return parts;
}

}  // namespace

struct HttpServer::Impl {
  ModelRepository* repo;
  HttpServerOptions opt;
  std::function<void(const std::string&)> log;
  // One io_context per I/O thread, each run by its thread alone: a connection lives on one of
  // them (round robin), its handlers run where its socket's events arrive, and no other thread
  // is woken to take over the polling (Asio's shared-context scheduler wakes one per event: about
  // 45 us a request here, measured with --http-thread-count 1 against 8).
  std::vector<std::unique_ptr<net::io_context>> iocs;
  std::vector<net::executor_work_guard<net::io_context::executor_type>> work;
  std::atomic<size_t> next_ioc{0};
  std::unique_ptr<tcp::acceptor> http_acceptor, metrics_acceptor;
  std::vector<std::thread> threads;
  std::atomic<bool> shutting_down{false};
  std::atomic<int64_t> in_flight{0};
  int http_port = 0, metrics_port = -1;
  // Repository loads and unloads running on threads of their own (stop() waits for them).
  std::mutex loaders_mu;
  std::condition_variable loaders_done;
  int loaders = 0;

  Impl(ModelRepository* r, HttpServerOptions o, std::function<void(const std::string&)> l)
      : repo(r), opt(std::move(o)), log(std::move(l)) {
    for (int i = 0; i < std::max(1, opt.threads); ++i) {
      iocs.push_back(std::make_unique<net::io_context>(1));
      work.push_back(net::make_work_guard(*iocs.back()));
    }
  }
  Status listen(int port, std::unique_ptr<tcp::acceptor>* out, int* bound, const char* what);
  void accept(tcp::acceptor* a, bool metrics);
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket s, HttpServer::Impl* server, bool metrics) : stream_(std::move(s)), server_(server), metrics_(metrics) {}
  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

 private:
  using Response = http::response<http::string_body>;
  static constexpr uint64_t kMaxBodyRead = 64 * 1024;

  void read() {
    parser_.emplace();
    parser_->body_limit(metrics_ ? uint64_t(1) << 16 : static_cast<uint64_t>(server_->opt.max_input_size));
    parser_->header_limit(64 * 1024);
    http::async_read_header(stream_, buffer_, *parser_, beast::bind_front_handler(&Connection::on_header, shared_from_this()));
  }

  void on_header(beast::error_code ec, size_t) {
    if (ec) return on_error(ec);
    const auto& req = parser_->get();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    // Room for the body (up to Beast's 64 KB a read) before it is read: Beast reads as much as the
    // buffer has free, at least 512 bytes, and a body that the parser takes as it comes never grows
    // the buffer, so a 9.5 KB JSON body took 19 reads and 19 reactor turns, about 1.5 us each.
    if (const auto length = parser_->content_length_remaining())
      buffer_.reserve(buffer_.size() + static_cast<size_t>(std::min<uint64_t>(*length, kMaxBodyRead)));
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      auto res = std::make_shared<http::response<http::empty_body>>(http::status::continue_, version_);
      http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code e, size_t) {
        if (!e) self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Connection::on_read, shared_from_this()));
  }

  void on_error(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      return send(413, error_json("request body is larger than --http-max-input-size (" +
                                  std::to_string(server_->opt.max_input_size) + " bytes)"));
    }
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      return send(400, error_json("request header is larger than 64 KB"));
    }
    if (ec == http::error::end_of_stream || ec == net::error::operation_aborted) return close();
    if (ec.category() == http::make_error_code(http::error::bad_target).category() && ec != http::error::partial_message) {
      keep_alive_ = false;
      return send(400, error_json(std::string("malformed HTTP request: ") + ec.message()));
    }
    close();
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  // After an error response: stop sending, then read and drop what the client still sends (at
  // most 2 s), so closing does not reset the connection before the client has read the response.
  void close_after_response() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(2));
    drain();
  }

  void drain() {
    stream_.async_read_some(net::buffer(scratch_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }

  void on_read(beast::error_code ec, size_t) {
    if (ec) return on_error(ec);
    auto req = parser_->release();
    if (metrics_) return handle_metrics(req);
    if (server_->opt.logging && server_->opt.logging->verbose_on(1))  // logged with its answer in send()
      verbose_request_ = "HTTP " + std::string(req.method_string()) + " " + std::string(req.target());
    handle(req);
  }

  void send(unsigned status, std::string body, const char* content_type = "application/json", int64_t json_size = -1) {
    auto res = std::make_shared<Response>(static_cast<http::status>(status), version_);
    res->set(http::field::server, "ferry");
    res->set(http::field::content_type, content_type);
    if (json_size >= 0) res->set("Inference-Header-Content-Length", std::to_string(json_size));
    res->keep_alive(keep_alive_);
    if (!verbose_request_.empty()) {
      server_->opt.logging->verbose(1, verbose_request_ + " -> " + std::to_string(status) + (status >= 400 ? " " + body : std::string()));
      verbose_request_.clear();
    }
    res->body() = std::move(body);
    res->prepare_payload();
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code e, size_t) {
      if (self->counted_) {
        self->counted_ = false;
        self->server_->in_flight.fetch_sub(1);
      }
      if (e) return self->close();
      if (res->need_eof()) return self->close_after_response();
      self->read();
    });
  }

  void handle_metrics(const http::request<http::string_body>& req) {
    const auto parts = split_path(std::string_view(req.target().data(), req.target().size()));
    if (parts.size() == 1 && parts[0] == "metrics" && req.method() == http::verb::get)
      return send(200, prometheus_text(server_->repo->ready_models()), "text/plain; version=0.0.4; charset=utf-8");
    send(404, error_json("not found: the metrics endpoint is GET /metrics"));
  }

  bool ready() const { return !server_->shutting_down.load(); }
  bool server_ready() const { return ready() && (!server_->opt.strict_readiness || server_->repo->all_ready()); }

  void handle(http::request<http::string_body>& req) {
    const auto p = split_path(std::string_view(req.target().data(), req.target().size()));
    const bool get = req.method() == http::verb::get;
    const bool post = req.method() == http::verb::post;
    auto wrong_method = [&](const char* want) {
      send(405, error_json(std::string("method ") + std::string(req.method_string()) + " is not allowed for " +
                           std::string(req.target()) + "; use " + want));
    };
    if (p.empty() || p[0] != "v2") return send(404, error_json("not found: " + std::string(req.target())));
    if (p.size() == 1) return get ? send(200, server_metadata_json(server_->opt.version)) : wrong_method("GET");
    if (p[1] == "health" && p.size() == 3) {
      if (!get) return wrong_method("GET");
      if (p[2] == "live") return send(200, "");
      if (p[2] == "ready") return send(server_ready() ? 200 : 400, "");
    }
    if (p[1] == "repository") return handle_repository(req, p, post);
    if (p[1] == "logging" && p.size() == 2) return handle_logging(req, get, post);
    if (p.size() == 3 && p[1] == "trace" && p[2] == "setting") return handle_trace(req, "", get, post);
    if (p.size() == 5 && p[1] == "models" && p[3] == "trace" && p[4] == "setting") return handle_trace(req, p[2], get, post);
    if (p[1] == "systemsharedmemory" || p[1] == "cudasharedmemory") {
      ShmHttpAnswer a = shm_http(server_->opt.shm, p, get, post, req.body());
      return send(a.status, std::move(a.body));
    }
    if (p[1] == "models" && p.size() == 3 && p[2] == "stats") {
      if (!get) return wrong_method("GET");
      return send(200, model_stats_json(stats_views(server_->repo->ready_models(), "", "")));
    }
    if (p[1] == "models" && p.size() >= 3) {
      const std::string& name = p[2];
      std::string version;
      size_t rest = 3;
      if (p.size() >= 5 && p[3] == "versions") {
        version = p[4];
        rest = 5;
      }
      if (p.size() > rest + 1) return send(404, error_json("not found: " + std::string(req.target())));
      const std::string action = p.size() == rest + 1 ? p[rest] : "";
      if (action == "infer") return post ? infer(req, name, version) : wrong_method("POST");
      if (!get) return wrong_method("GET");
      auto model = server_->repo->find(name, version);
      if (action == "ready") return send(model.is_ok() && ready() ? 200 : 400, "");
      if (!model.is_ok()) return send(http_status_of(model.status()), error_json(model.status().message()));
      if (action.empty()) {
        std::vector<int64_t> versions;
        for (const auto& m : server_->repo->ready_models())
          if (m->name() == name) versions.push_back(m->version());
        return send(200, model_metadata_json(model.value()->signature(), versions));
      }
      if (action == "config") return send(200, config_to_json(model.value()->config()));
      if (action == "stats") {
        return send(200, model_stats_json(stats_views(server_->repo->ready_models(), name, version)));
      }
    }
    send(404, error_json("not found: " + std::string(req.target())));
  }

  // Triton's logging extension: GET the settings; POST changes some and answers all of them.
  void handle_logging(http::request<http::string_body>& req, bool get, bool post) {
    ServerLog* logging = server_->opt.logging;
    if (!get && !post) return send(405, error_json("/v2/logging takes GET or POST"));
    if (!logging) return send(400, error_json("this server has no log settings to serve"));
    if (post) {
      Status st = logging->update_json(req.body());
      if (!st.is_ok()) return send(400, error_json(st.message()));
    }
    send(200, logging->settings_json());
  }

  // Triton's trace extension: GET the settings (global, or a model's); POST changes some and
  // answers all of them.
  void handle_trace(http::request<http::string_body>& req, const std::string& model, bool get, bool post) {
    Tracer* tracer = server_->opt.tracer;
    if (!get && !post) return send(405, error_json("trace/setting takes GET or POST"));
    if (!tracer) return send(400, error_json("this server has no trace settings to serve"));
    if (!model.empty()) {
      auto m = server_->repo->find(model, "");
      if (!m.is_ok() && m.status().code() == StatusCode::kNotFound) return send(404, error_json(m.status().message()));
    }
    if (post) {
      Status st = tracer->update_json(model, req.body());
      if (!st.is_ok()) return send(400, error_json(st.message()));
    }
    send(200, tracer->settings_json(model));
  }

  void handle_repository(http::request<http::string_body>& req, const std::vector<std::string>& p, bool post) {
    if (!post) return send(405, error_json("the repository extension takes POST"));
    if (p.size() == 3 && p[2] == "index") {
      auto ready_only = parse_index_request(req.body());
      if (!ready_only.is_ok()) return send(400, error_json(ready_only.status().message()));
      return send(200, repository_index_json(server_->repo->index(ready_only.value())));
    }
    if (p.size() == 5 && p[2] == "models" && (p[4] == "load" || p[4] == "unload")) {
      if (!server_->opt.explicit_control)
        return send(400, error_json("explicit model load / unload is not allowed: start `ferry serve --model-control-mode explicit`"));
      if (server_->shutting_down.load()) return send(503, error_json("the server is shutting down"));
      if (p[4] == "load") {
        Status body = check_load_request(req.body());
        if (!body.is_ok()) return send(400, error_json(body.message()));
      }
      // Loading takes seconds: on a thread of its own, so this I/O thread's other connections
      // keep being served; the answer is posted back to this connection.
      HttpServer::Impl* server = server_;
      {
        std::lock_guard<std::mutex> lock(server->loaders_mu);
        ++server->loaders;
      }
      std::thread([self = shared_from_this(), server, name = p[3], load = p[4] == "load"]() mutable {
        Status st = load ? server->repo->load(name) : server->repo->unload(name);
        net::post(self->stream_.get_executor(), [self, st] {
          if (!st.is_ok()) return self->send(http_status_of(st) == 503 ? 400 : http_status_of(st), error_json(st.message()));
          self->send(200, "");
        });
        self.reset();
        std::lock_guard<std::mutex> lock(server->loaders_mu);  // stop() waits for this
        if (--server->loaders == 0) server->loaders_done.notify_all();
      }).detach();
      return;
    }
    send(404, error_json("not found: " + std::string(req.target())));
  }

  void infer(http::request<http::string_body>& req, const std::string& name, const std::string& version) {
    if (server_->shutting_down.load())
      return send(503, error_json("the server is shutting down and accepts no new inference requests"));
    auto model = server_->repo->find(name, version);
    if (!model.is_ok()) return send(http_status_of(model.status()), error_json(model.status().message()));
    int64_t header_length = -1;
    auto hl = req.find("Inference-Header-Content-Length");
    if (hl != req.end()) {
      const std::string v(hl->value());
      if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
        return send(400, error_json("Inference-Header-Content-Length '" + v + "' is not a byte count"));
      header_length = std::stoll(v);
    }
    Tracer* tracer = server_->opt.tracer;
    const uint64_t trace_id = tracer ? tracer->sample(name) : 0;  // the trace extension's sample (0: not traced)
    const int64_t trace_start = trace_id ? Tracer::now_ns() : 0;
    std::shared_ptr<ServedModel> m = model.value();
    auto sig = std::make_shared<ModelSignature>(m->signature());
    auto decoded = decode_infer_request(req.body(), header_length, *sig, server_->opt.shm);
    if (!decoded.is_ok()) {
      if (trace_id) tracer->record(trace_id, name, m->version(), "", trace_start, {}, Tracer::now_ns());  // refused: its two ends
      return send(http_status_of(decoded.status()), error_json(decoded.status().message()));
    }
    auto meta = std::make_shared<DecodedInfer>(std::move(decoded).value());
    InferRequest request = std::move(meta->request);
    request.version_pinned = !version.empty();
    if (trace_id) tracer->record_inputs(trace_id, request.inputs);  // trace_level TENSORS: the inputs as queued
    meta->request.id = request.id;
    cancelled_ = request.cancelled;
    counted_ = true;
    server_->in_flight.fetch_add(1);
    auto self = shared_from_this();
    // The response is written by whichever comes second: this handler once enqueue returned, or
    // the callback. A request the model ran inline (or refused) is answered here, on this thread,
    // without a post; one answered from an instance thread is posted to the connection's thread.
    auto reply = std::make_shared<Reply>();
    m->enqueue(std::move(request), [self, sig, meta, reply, tracer, trace_id, trace_start](InferResult r) {
      // Encoded on the thread that ran the model.
      unsigned status = 200;
      EncodedResponse e;
      if (r.status.is_ok()) r.status = write_shm_outputs(*sig, meta->outputs, r.outputs);  // outputs asked into shared memory
      if (r.status.is_ok()) {
        if (r.version != sig->version && r.version > 0) {  // forwarded to a successor version
          ModelSignature ran = *sig;
          ran.version = r.version;
          e = encode_infer_response(ran, *meta, r.outputs);
        } else {
          e = encode_infer_response(*sig, *meta, r.outputs);
        }
      } else {
        status = http_status_of(r.status);
        e.body = error_json(r.status.message());
      }
      if (trace_id)
        tracer->record(trace_id, sig->name, r.version > 0 ? r.version : sig->version, meta->request.id, trace_start, r.timestamps, Tracer::now_ns(),
                       r.status.is_ok() ? &r.outputs : nullptr);
      reply->status = status;
      reply->encoded = std::move(e);
      if (reply->phase.exchange(Reply::kAnswered, std::memory_order_acq_rel) != Reply::kWaiting) return;
      net::post(self->stream_.get_executor(), [self, reply]() mutable {
        beast::error_code ignored;
        self->stream_.socket().cancel(ignored);  // ends the disconnect watch
        self->send_reply(*reply);
      });
    });
    if (reply->phase.exchange(Reply::kWaiting, std::memory_order_acq_rel) == Reply::kAnswered) return send_reply(*reply);
    watch_disconnect();
  }

  // An inference response, handed from the thread that ran the model to the connection's thread.
  struct Reply {
    enum Phase : int { kQueuing, kWaiting, kAnswered };
    std::atomic<int> phase{kQueuing};
    unsigned status = 200;
    EncodedResponse encoded;
  };

  void send_reply(Reply& r) {
    const int64_t json_size = r.encoded.json_size;
    send(r.status, std::move(r.encoded.body), json_size >= 0 ? "application/octet-stream" : "application/json", json_size);
  }

  void watch_disconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), cancelled = cancelled_](beast::error_code ec) {
      if (ec || !cancelled) return;
      char c;
      const ssize_t n = ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) cancelled->set();  // the queued request leaves now
      // n > 0: the client sent its next request already; it is read after this response.
    });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpServer::Impl* server_;
  bool metrics_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool counted_ = false;
  std::shared_ptr<Cancellation> cancelled_;
  std::string verbose_request_;  // "HTTP POST /v2/...", while verbose logging is on: logged with the answer
  std::array<char, 4096> scratch_;
};

}  // namespace

Status HttpServer::Impl::listen(int port, std::unique_ptr<tcp::acceptor>* out, int* bound, const char* what) {
  beast::error_code ec;
  const auto address = net::ip::make_address(opt.address, ec);
  if (ec) return invalid_argument("--http-address '" + opt.address + "' is not an IP address");
  tcp::endpoint ep(address, static_cast<unsigned short>(port));
  auto a = std::make_unique<tcp::acceptor>(*iocs[0]);
  a->open(ep.protocol(), ec);
  if (!ec) a->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a->bind(ep, ec);
  if (!ec) a->listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return invalid_argument(std::string("cannot listen for ") + what + " on " + opt.address + ":" + std::to_string(port) + ": " +
                            ec.message() + " (choose another port)");
  *bound = a->local_endpoint().port();
  *out = std::move(a);
  return Status::ok();
}

void HttpServer::Impl::accept(tcp::acceptor* a, bool metrics) {
  net::io_context& target = *iocs[next_ioc.fetch_add(1, std::memory_order_relaxed) % iocs.size()];
  a->async_accept(target, [this, a, metrics](beast::error_code ec, tcp::socket s) {
    if (ec == net::error::operation_aborted || !a->is_open()) return;
    if (!ec) {
      beast::error_code ignored;
      s.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Connection>(std::move(s), this, metrics)->start();
    }
    accept(a, metrics);
  });
}

namespace {

// An I/O thread's loop: handlers run as their events arrive; right after work the thread polls
// without blocking for up to `spin_us` (SpinWait: bounded, never on busy cores) before it blocks
// in the reactor, so that a client's next request is read without an idle vCPU's wake-up.
void run_io(net::io_context& ioc, int64_t spin_us) {
  if (spin_us <= 0) {
    ioc.run();
    return;
  }
  SpinWait spin(spin_us);
  while (!ioc.stopped()) {
    if (spin.spinning()) {  // else (no spin started: busy cores, backed off) straight to the blocking wait
      if (ioc.poll() > 0) {
        spin.arm();
        continue;
      }
      if (spin.again()) continue;
    }
    if (ioc.run_one() > 0) spin.arm();
  }
}

}  // namespace

HttpServer::HttpServer(ModelRepository* repository, HttpServerOptions options, std::function<void(const std::string&)> log)
    : impl_(std::make_unique<Impl>(repository, std::move(options), std::move(log))) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  impl_->http_port = -1;
  if (impl_->opt.http_port >= 0)
    RETURN_IF_ERROR(impl_->listen(impl_->opt.http_port, &impl_->http_acceptor, &impl_->http_port, "HTTP"));
  if (impl_->opt.metrics_port >= 0)
    RETURN_IF_ERROR(impl_->listen(impl_->opt.metrics_port, &impl_->metrics_acceptor, &impl_->metrics_port, "metrics"));
  if (impl_->http_acceptor) impl_->accept(impl_->http_acceptor.get(), false);
  if (impl_->metrics_acceptor) impl_->accept(impl_->metrics_acceptor.get(), true);
  for (auto& ioc : impl_->iocs)
    impl_->threads.emplace_back([ioc = ioc.get(), spin_us = impl_->opt.io_spin_us] { run_io(*ioc, spin_us); });
  return Status::ok();
}

int HttpServer::http_port() const { return impl_->http_port; }
int HttpServer::metrics_port() const { return impl_->metrics_port; }
void HttpServer::begin_shutdown() { impl_->shutting_down.store(true); }
int64_t HttpServer::in_flight() const { return impl_->in_flight.load(); }

void HttpServer::stop() {
  if (impl_->threads.empty()) return;
  {
    std::unique_lock<std::mutex> lock(impl_->loaders_mu);
    impl_->loaders_done.wait(lock, [&] { return impl_->loaders == 0; });
  }
  net::post(*impl_->iocs[0], [this] {
    beast::error_code ignored;
    if (impl_->http_acceptor) impl_->http_acceptor->close(ignored);
    if (impl_->metrics_acceptor) impl_->metrics_acceptor->close(ignored);
  });
  impl_->work.clear();
  for (auto& ioc : impl_->iocs) ioc->stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace ferry::serve
