// inference.GRPCInferenceService on gRPC's async API; see grpc_server.h. Every method's calls come to
// one completion queue polled by a thread of ours, and no thread of gRPC's polls beside it (with the
// callback API, gRPC's callback threads took the sockets' events and handed the calls on: one more
// wake-up a call, 40-60 us here; bench/grpc_floor_probe.cpp --bare async|mixed). Unary calls answer
// on the poller, except ModelInfer (queued on the model or run inline, ServedModel::enqueue, and
// finished from there or from the instance thread that ran its batch) and model load / unload (on
// a thread of their own). ModelStreamInfer queues each request as it is read and writes each
// response when it is ready, one write at a time; a per-request error goes in the response's
// error_message and the stream goes on. A client that cancels takes its queued requests with it.
#include "serve/grpc_server.h"

#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <deque>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>

#include "serve/grpc_codec.h"
#include "serve/grpc_extensions.h"
#include "serve/grpc_service.grpc.pb.h"
#include "serve/kserve_json.h"

namespace ferry::serve {

namespace {

// One thread polls one completion queue for every method: gRPC reads the sockets on whichever thread
// polls, so with two pollers a call read on one was handed to the other (+30-50 us a call here).
// At concurrency 16 one matched the callback API with two ModelInfer pollers within the noise.
constexpr int kInferCallsWaiting = 16;  // ModelInfer calls requested (waiting for clients) at a time

using inference::ModelInferRequest;
using inference::ModelInferResponse;

class AsyncInfer;

grpc::Status to_grpc(const Status& s) {
  grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT;
  switch (s.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case StatusCode::kResourceExhausted: code = grpc::StatusCode::UNAVAILABLE; break;  // HTTP 503
    case StatusCode::kUnsupported: code = grpc::StatusCode::UNIMPLEMENTED; break;
    case StatusCode::kInternal: code = grpc::StatusCode::INTERNAL; break;
    default: break;
  }
  return grpc::Status(code, s.message());
}

}  // namespace

struct GrpcServer::Impl {
  ModelRepository* repo;
  GrpcServerOptions opt;
  std::function<void(const std::string&)> log;
  std::atomic<bool> shutting_down{false};
  std::atomic<int64_t> in_flight{0};
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<grpc::ServerCompletionQueue> cq;  // every method's calls
  std::thread poller;
  std::shared_mutex cq_mu;
  bool cq_open = false;  // an operation may still be started on cq (held shared while starting one)
  int port = 0;
  // ModelInfer calls that ended, kept for the next ones (AsyncInfer::request): their messages
  // keep what they allocated (the tensors' strings, the repeated fields' elements).
  std::mutex infer_pool_mu;
  std::vector<AsyncInfer*> infer_pool;

  Impl(ModelRepository* r, GrpcServerOptions o, std::function<void(const std::string&)> l)
      : repo(r), opt(std::move(o)), log(std::move(l)) {}

  // Decodes and queues one inference request. `done` runs exactly once (on an instance thread, or
  // on this one when the request is refused or ran inline), after the response is filled in when
  // it succeeded. The caller is a poller, which takes every client's calls on its queue, so a
  // request runs inline only when it is the one the poller has in hand (`alone`: no other came
  // with it) and no other is in flight (else it would serialize them all).
  void infer(const ModelInferRequest& req, std::shared_ptr<Cancellation> cancelled, ModelInferResponse* resp,
             std::function<void(grpc::Status)> done, bool alone) {
    if (opt.logging && opt.logging->verbose_on(1)) {  // every request with its status, when it is answered
      done = [log = opt.logging, what = "gRPC ModelInfer model '" + req.model_name() + "'" +
                                        (req.model_version().empty() ? std::string() : " version " + req.model_version()) +
                                        (req.id().empty() ? std::string() : " id '" + req.id() + "'"),
              done = std::move(done)](grpc::Status st) {
        log->verbose(1, what + " -> " + (st.ok() ? std::string("OK") : "code " + std::to_string(static_cast<int>(st.error_code())) + ": " +
                                                                    st.error_message()));
        done(st);
      };
    }
    if (shutting_down.load())
      return done(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down and accepts no new inference requests"));
    auto model = repo->find(req.model_name(), req.model_version());
    if (!model.is_ok()) return done(to_grpc(model.status()));
    std::shared_ptr<ServedModel> m = model.value();
    const uint64_t trace_id = opt.tracer ? opt.tracer->sample(m->name()) : 0;  // the trace extension's sample (0: not traced)
    const int64_t trace_start = trace_id ? Tracer::now_ns() : 0;
    auto decoded = decode_request(req, m->signature(), opt.shm);
    if (!decoded.is_ok()) {
      if (trace_id) opt.tracer->record(trace_id, m->name(), m->version(), req.id(), trace_start, {}, Tracer::now_ns());  // refused: its two ends
      return done(to_grpc(decoded.status()));
    }
    InferRequest request = std::move(decoded.value().request);
    if (trace_id) opt.tracer->record_inputs(trace_id, request.inputs);  // trace_level TENSORS: the inputs as queued
    request.cancelled = std::move(cancelled);
    request.version_pinned = !req.model_version().empty();
    std::vector<RequestedOutput> names = std::move(decoded.value().outputs);  // held by the callback (one allocation for both)
    const std::string id = request.id;
    const bool idle = in_flight.fetch_add(1) == 0;
    const InlinePolicy policy = alone && idle ? InlinePolicy::kIdle : InlinePolicy::kNever;
    m->enqueue(std::move(request), [this, m, names = std::move(names), id, resp, trace_id, trace_start, done = std::move(done)](InferResult r) {
      grpc::Status st = grpc::Status::OK;
      if (r.status.is_ok()) r.status = write_shm_outputs(m->signature(), names, r.outputs);  // outputs asked into shared memory
      if (r.status.is_ok()) {
        encode_response(m->signature(), id, names, r.outputs, resp);
        if (r.version > 0) resp->set_model_version(std::to_string(r.version));  // a successor may have run it
      } else if (r.reason == FailureReason::kCanceled) {
        st = grpc::Status(grpc::StatusCode::CANCELLED, r.status.message());
      } else {
        st = to_grpc(r.status);
      }
      if (trace_id)
        opt.tracer->record(trace_id, m->name(), r.version > 0 ? r.version : m->version(), id, trace_start, r.timestamps, Tracer::now_ns(),
                           r.status.is_ok() ? &r.outputs : nullptr);
      in_flight.fetch_sub(1);
      done(st);
    }, policy);
  }
};

namespace {

// A call on the async API: its operations' tags come back to proceed() on a poller thread.
// `alone`: no other inference request came with this tag (a request may run inline).
class AsyncCall {
 public:
  virtual ~AsyncCall() = default;
  virtual void proceed(int kind, bool ok, bool alone) = 0;
  /// Whether this tag brings an inference request.
  virtual bool carries_request(int kind, bool ok) const { return false; }
};

struct Tag {
  AsyncCall* call;
  int kind;
};

// A unary call as its handler sees it: finish() answers it, once, from any thread.
class Unary {
 public:
  virtual void finish(const grpc::Status& st) = 0;
 protected:
  ~Unary() = default;
};

void answer(Unary* ctx, const grpc::Status& st) { ctx->finish(st); }

class Service final : public inference::GRPCInferenceService::AsyncService {
 public:
  explicit Service(GrpcServer::Impl* s) : s_(s) {}

  // The handlers below take the call as a Unary (answered once, from any thread) and are found by
  // their own signature (UnaryCall::HandlerFn). They overload, not override, the generated
  // service's synchronous virtuals of the same names (ServerContext*; disabled by AsyncService):
  // brought into scope here so that ours do not hide them (clang's -Woverloaded-virtual).
  using Base = inference::GRPCInferenceService::AsyncService;
  using Base::ServerLive, Base::ServerReady, Base::ModelReady, Base::ServerMetadata;
  using Base::ModelMetadata, Base::ModelConfig, Base::ModelStatistics, Base::RepositoryIndex;
  using Base::RepositoryModelLoad, Base::RepositoryModelUnload, Base::SystemSharedMemoryStatus, Base::SystemSharedMemoryRegister;
  using Base::SystemSharedMemoryUnregister, Base::CudaSharedMemoryStatus, Base::CudaSharedMemoryRegister, Base::CudaSharedMemoryUnregister;
  using Base::TraceSetting, Base::LogSettings;

  void ServerLive(Unary* ctx, const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* resp) {
    resp->set_live(true);
    return answer(ctx, grpc::Status::OK);
  }

  void ServerReady(Unary* ctx, const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* resp) {
    resp->set_ready(!s_->shutting_down.load() && (!s_->opt.strict_readiness || s_->repo->all_ready()));
    return answer(ctx, grpc::Status::OK);
  }

  void ModelReady(Unary* ctx, const inference::ModelReadyRequest* req,
                                       inference::ModelReadyResponse* resp) {
    resp->set_ready(!s_->shutting_down.load() && s_->repo->find(req->name(), req->version()).is_ok());
    return answer(ctx, grpc::Status::OK);
  }

  void ServerMetadata(Unary* ctx, const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* resp) {
    resp->set_name("ferry");
    resp->set_version(s_->opt.version);
    for (const char* e : {"binary_tensor_data", "classification", "model_repository", "model_configuration", "statistics", "parameters",
                          "system_shared_memory", "logging", "trace"})
      resp->add_extensions(e);
    return answer(ctx, grpc::Status::OK);
  }

  void ModelMetadata(Unary* ctx, const inference::ModelMetadataRequest* req,
                                          inference::ModelMetadataResponse* resp) {
    auto model = s_->repo->find(req->name(), req->version());
    if (!model.is_ok()) return answer(ctx, to_grpc(model.status()));
    const ModelSignature& sig = model.value()->signature();
    resp->set_name(sig.name);
    for (const auto& m : s_->repo->ready_models())
      if (m->name() == sig.name) resp->add_versions(std::to_string(m->version()));
    resp->set_platform(sig.platform);
    for (int k = 0; k < 2; ++k) {
      for (const TensorSpec& spec : k == 0 ? sig.inputs : sig.outputs) {
        auto* t = k == 0 ? resp->add_inputs() : resp->add_outputs();
        t->set_name(spec.name);
        t->set_datatype(kserve_dtype_name(spec.dtype));
        for (int64_t d : protocol_dims(spec, sig.max_batch)) t->add_shape(d);
      }
    }
    return answer(ctx, grpc::Status::OK);
  }

  void ModelConfig(Unary* ctx, const inference::ModelConfigRequest* req,
                                        inference::ModelConfigResponse* resp) {
    auto model = s_->repo->find(req->name(), req->version());
    if (!model.is_ok()) return answer(ctx, to_grpc(model.status()));
    *resp->mutable_config() = model.value()->config();
    return answer(ctx, grpc::Status::OK);
  }

  void ModelStatistics(Unary* ctx, const inference::ModelStatisticsRequest* req,
                                            inference::ModelStatisticsResponse* resp) {
    if (!req->name().empty()) {
      auto model = s_->repo->find(req->name(), req->version());
      if (!model.is_ok()) return answer(ctx, to_grpc(model.status()));
    }
    for (const auto& m : s_->repo->ready_models()) {
      if (!req->name().empty() && m->name() != req->name()) continue;
      if (!req->version().empty() && std::to_string(m->version()) != req->version()) continue;
      fill_stats(*m, resp->add_model_stats());
    }
    return answer(ctx, grpc::Status::OK);
  }

  void RepositoryIndex(Unary* ctx, const inference::RepositoryIndexRequest* req,
                                            inference::RepositoryIndexResponse* resp) {
    for (const IndexEntry& e : s_->repo->index(req->ready())) {
      auto* m = resp->add_models();
      m->set_name(e.name);
      m->set_version(e.version);
      m->set_state(e.state);
      m->set_reason(e.reason);
    }
    return answer(ctx, grpc::Status::OK);
  }

  void RepositoryModelLoad(Unary* ctx, const inference::RepositoryModelLoadRequest* req,
                                                inference::RepositoryModelLoadResponse*) {
    if (!req->parameters().empty())
      return answer(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      "load parameters (such as '" + req->parameters().begin()->first +
                                          "') are not supported by ferry: the model's config.pbtxt and files are read from the repository"));
    return load_or_unload(ctx, req->model_name(), true);
  }

  void RepositoryModelUnload(Unary* ctx, const inference::RepositoryModelUnloadRequest* req,
                                                  inference::RepositoryModelUnloadResponse*) {
    return load_or_unload(ctx, req->model_name(), false);
  }

  // Triton's extensions (grpc_extensions.h): system shared memory on the registry the HTTP front
  // end shares, CUDA shared memory refused (not supported by this build), log and trace settings.
  void SystemSharedMemoryStatus(Unary* ctx, const inference::SystemSharedMemoryStatusRequest* req,
                                inference::SystemSharedMemoryStatusResponse* resp) {
    return answer(ctx, to_grpc(shm_status(s_->opt.shm, *req, resp)));
  }
  void SystemSharedMemoryRegister(Unary* ctx, const inference::SystemSharedMemoryRegisterRequest* req,
                                  inference::SystemSharedMemoryRegisterResponse*) {
    return answer(ctx, to_grpc(shm_register(s_->opt.shm, *req)));
  }
  void SystemSharedMemoryUnregister(Unary* ctx, const inference::SystemSharedMemoryUnregisterRequest* req,
                                    inference::SystemSharedMemoryUnregisterResponse*) {
    shm_unregister(s_->opt.shm, *req);
    return answer(ctx, grpc::Status::OK);
  }
  void CudaSharedMemoryStatus(Unary* ctx, const inference::CudaSharedMemoryStatusRequest* req, inference::CudaSharedMemoryStatusResponse*) {
    return answer(ctx, to_grpc(cuda_shm_status(*req)));
  }
  void CudaSharedMemoryRegister(Unary* ctx, const inference::CudaSharedMemoryRegisterRequest*, inference::CudaSharedMemoryRegisterResponse*) {
    return answer(ctx, grpc::Status(grpc::StatusCode::UNIMPLEMENTED, cuda_shm_unsupported("CudaSharedMemoryRegister")));
  }
  void CudaSharedMemoryUnregister(Unary* ctx, const inference::CudaSharedMemoryUnregisterRequest*, inference::CudaSharedMemoryUnregisterResponse*) {
    return answer(ctx, grpc::Status::OK);  // nothing registered: unregistering is idempotent, as for system regions
  }
  void TraceSetting(Unary* ctx, const inference::TraceSettingRequest* req, inference::TraceSettingResponse* resp) {
    return answer(ctx, to_grpc(trace_setting(s_->opt.tracer, *s_->repo, *req, resp)));
  }
  void LogSettings(Unary* ctx, const inference::LogSettingsRequest* req, inference::LogSettingsResponse* resp) {
    return answer(ctx, to_grpc(log_settings(s_->opt.logging, *req, resp)));
  }

 private:
  void load_or_unload(Unary* ctx, const std::string& name, bool load) {
    if (!s_->opt.explicit_control)
      return answer(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      "explicit model load / unload is not allowed: start `ferry serve --model-control-mode explicit`"));
    if (s_->shutting_down.load()) return answer(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
    if (name.empty()) return answer(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "model_name is empty"));
    // Loading takes seconds: on a thread of its own, so the poller keeps serving.
    ModelRepository* repo = s_->repo;
    std::thread([ctx, repo, name, load] {
      Status st = load ? repo->load(name) : repo->unload(name);
      if (st.is_ok()) return ctx->finish(grpc::Status::OK);
      // A model that fails to load is a bad request (HTTP 400), not an unavailable server.
      ctx->finish(grpc::Status(st.code() == StatusCode::kNotFound ? grpc::StatusCode::NOT_FOUND : grpc::StatusCode::INVALID_ARGUMENT,
                               st.message()));
    }).detach();
  }

  GrpcServer::Impl* s_;
};

// Starts an operation on the server's completion queues unless they are being shut down (then
// no tag will come back for it): false when it was not started.
template <typename F>
bool start_op(GrpcServer::Impl* s, F&& op) {
  std::shared_lock<std::shared_mutex> lock(s->cq_mu);
  if (!s->cq_open) return false;
  op();
  return true;
}

Service* service_of(GrpcServer::Impl* s) { return static_cast<Service*>(s->service.get()); }

// One call of a unary method other than ModelInfer: requested on a queue; when a client calls, the
// next call is requested and the handler runs on the poller; deleted when its answer went out (or
// at once when it never started).
template <typename Req, typename Resp>
class UnaryCall final : public AsyncCall, public Unary {
 public:
  using RequestFn = void (*)(Service*, grpc::ServerContext*, Req*, grpc::ServerAsyncResponseWriter<Resp>*, grpc::ServerCompletionQueue*, void*);
  using HandlerFn = void (Service::*)(Unary*, const Req*, Resp*);

  static void request(GrpcServer::Impl* s, grpc::ServerCompletionQueue* cq, RequestFn rq, HandlerFn h) {
    auto* c = new UnaryCall(s, cq, rq, h);
    if (!start_op(s, [&] { rq(service_of(s), &c->ctx_, &c->req_, &c->writer_, cq, &c->started_tag_); })) delete c;
  }

  void proceed(int kind, bool ok, bool) override {
    if (kind == kFinished || !ok) return delete this;  // answered, or never started (shutting down)
    request(s_, cq_, rq_, h_);
    (service_of(s_)->*h_)(this, &req_, &resp_);
  }

  void finish(const grpc::Status& st) override {
    if (!start_op(s_, [&] { writer_.Finish(resp_, st, &finished_tag_); })) delete this;
  }

 private:
  enum Kind { kStarted, kFinished };
  UnaryCall(GrpcServer::Impl* s, grpc::ServerCompletionQueue* cq, RequestFn rq, HandlerFn h) : s_(s), cq_(cq), rq_(rq), h_(h) {}

  GrpcServer::Impl* s_;
  grpc::ServerCompletionQueue* cq_;
  RequestFn rq_;
  HandlerFn h_;
  grpc::ServerContext ctx_;
  Req req_;
  Resp resp_;
  grpc::ServerAsyncResponseWriter<Resp> writer_{&ctx_};
  Tag started_tag_{this, kStarted}, finished_tag_{this, kFinished};
};

// One ModelInfer call. Its tags: started (a client called; the next call is requested at once),
// done (the call ended, or the client cancelled it: a queued request is dropped, CANCELLED) and
// finished (the response went out). When both done and finished came back (or at once when it
// never started) its ServerContext goes and the object returns to the server's pool: the next call
// takes it with its messages' allocations (the request's raw_input_contents strings, the response's
// outputs), so that a call allocates neither the object nor most of its messages' parts again.
class AsyncInfer final : public AsyncCall {
 public:
  static void request(GrpcServer::Impl* s, grpc::ServerCompletionQueue* cq) {
    AsyncInfer* c = nullptr;
    {
      std::lock_guard<std::mutex> lock(s->infer_pool_mu);
      if (!s->infer_pool.empty()) {
        c = s->infer_pool.back();
        s->infer_pool.pop_back();
      }
    }
    if (!c) c = new AsyncInfer(s, cq);
    c->start(cq);
  }

  // The server's pool, emptied when it stopped (every call's last tag came back).
  static void free_pool(GrpcServer::Impl* s) {
    for (AsyncInfer* c : s->infer_pool) delete c;
    s->infer_pool.clear();
  }

  bool carries_request(int kind, bool ok) const override { return ok && kind == kStarted; }

  void proceed(int kind, bool ok, bool alone) override {
    switch (kind) {
      case kStarted: {
        if (!ok) return recycle();  // the server is shutting down: this call never started
        // The next call is requested after this one was queued or answered (inline), off the
        // request's path: another kInferCallsWaiting - 1 are waiting for clients meanwhile.
        GrpcServer::Impl* s = s_;
        grpc::ServerCompletionQueue* cq = cq_;
        s->infer(req_, cancelled_, &resp_, [this](grpc::Status st) { finish(st); }, alone);
        return request(s, cq);  // (this call may be back in the pool already)
      }
      case kDone:
        if (ctx_->IsCancelled()) cancelled_->set();  // its queued request leaves now
        return release();
      default:
        return release();
    }
  }

 private:
  enum Kind { kStarted, kDone, kFinished };
  // A call whose request or response held more than this is freed, not pooled (its strings would
  // keep the memory): digits_cnn's request is 3 KB, a ResNet-50 image 600 KB.
  static constexpr size_t kPooledBytes = size_t(1) << 20;
  static constexpr size_t kPoolSize = 64;  // kInferCallsWaiting and the calls in flight

  AsyncInfer(GrpcServer::Impl* s, grpc::ServerCompletionQueue* cq) : s_(s), cq_(cq) {}

  // A fresh ServerContext and writer, the messages cleared, requested on `cq`.
  void start(grpc::ServerCompletionQueue* cq) {
    cq_ = cq;
    ctx_.emplace();
    writer_.emplace(&*ctx_);
    // A cancellation flag of its own: a request of the call before may still hold that one's.
    if (!cancelled_ || cancelled_.use_count() > 1) cancelled_ = std::make_shared<Cancellation>();
    cancelled_->reset();
    refs_.store(2);
    ctx_->AsyncNotifyWhenDone(&done_tag_);
    if (!start_op(s_, [&] { service_of(s_)->RequestModelInfer(&*ctx_, &req_, &*writer_, cq, cq, &started_tag_); })) {
      writer_.reset();
      ctx_.reset();
      delete this;
    }
  }

  // From the thread that answered (this one, or an instance thread).
  void finish(const grpc::Status& st) {
    if (!start_op(s_, [&] { writer_->Finish(resp_, st, &finished_tag_); })) release();  // the queue is gone: no finished tag will come
  }

  void release() {
    if (refs_.fetch_sub(1) == 1) recycle();
  }

  // The call is over: its context goes (the gRPC call with it), the object to the pool.
  void recycle() {
    writer_.reset();
    ctx_.reset();
    bool keep = true;
    for (const std::string& b : req_.raw_input_contents()) keep = keep && b.capacity() <= kPooledBytes;
    for (const std::string& b : resp_.raw_output_contents()) keep = keep && b.capacity() <= kPooledBytes;
    for (const auto& in : req_.inputs()) keep = keep && !in.has_contents();  // typed contents: not measured, not kept
    if (keep) {
      req_.Clear();
      resp_.Clear();
      std::shared_lock<std::shared_mutex> open(s_->cq_mu);  // stop() frees the pool once the queue is closed: not after
      std::lock_guard<std::mutex> lock(s_->infer_pool_mu);
      if (s_->cq_open && s_->infer_pool.size() < kPoolSize) return s_->infer_pool.push_back(this);
    }
    delete this;
  }

  GrpcServer::Impl* s_;
  grpc::ServerCompletionQueue* cq_;
  std::optional<grpc::ServerContext> ctx_;
  ModelInferRequest req_;
  ModelInferResponse resp_;
  std::optional<grpc::ServerAsyncResponseWriter<ModelInferResponse>> writer_;
  std::shared_ptr<Cancellation> cancelled_;
  std::atomic<int> refs_{2};  // done and finished
  Tag started_tag_{this, kStarted}, done_tag_{this, kDone}, finished_tag_{this, kFinished};
};

// One ModelStreamInfer call: reads one request at a time and queues it; responses are written in
// the order they finish, one write in flight (from whichever thread answered); Finish once reading
// ended and every queued request was answered and written. Deleted when nothing of it is left
// outstanding: the done tag, a read, a write, the finish, a queued request (refs_).
class AsyncStream final : public AsyncCall {
 public:
  using Response = inference::ModelStreamInferResponse;

  static void request(GrpcServer::Impl* s, grpc::ServerCompletionQueue* cq) {
    auto* c = new AsyncStream(s, cq);
    c->ctx_.AsyncNotifyWhenDone(&c->done_tag_);
    if (!start_op(s, [&] { service_of(s)->RequestModelStreamInfer(&c->ctx_, &c->stream_, cq, cq, &c->started_tag_); })) delete c;
  }

  bool carries_request(int kind, bool ok) const override { return ok && kind == kRead; }

  void proceed(int kind, bool ok, bool alone) override {
    switch (kind) {
      case kStarted:
        if (!ok) return delete this;  // never started
        request(s_, cq_);
        refs_.store(1);  // the done tag
        return read();
      case kRead:
        if (ok) return queue(alone);
        {
          std::lock_guard<std::mutex> lock(mu_);
          reads_done_ = true;
        }
        maybe_finish();
        return release();  // the read's
      case kWrite: {
        const Response* next = nullptr;
        {
          std::lock_guard<std::mutex> lock(mu_);
          out_.pop_front();
          if (!ok) out_.clear();  // the client is gone: nothing more can be written
          write_failed_ = write_failed_ || !ok;
          if (!out_.empty()) next = out_.front().get();
          else writing_ = false;
        }
        if (next && write(next)) return;  // the write's reference goes on to the next one
        maybe_finish();  // (a write not started: the queue is shut down, nothing more starts)
        return release();
      }
      case kDone:
        if (ctx_.IsCancelled()) cancelled_->set();  // its queued requests leave now
        return release();
      default:  // kFinish
        return release();
    }
  }

 private:
  enum Kind { kStarted, kRead, kWrite, kFinish, kDone };
  AsyncStream(GrpcServer::Impl* s, grpc::ServerCompletionQueue* cq) : s_(s), cq_(cq), cancelled_(std::make_shared<Cancellation>()) {}

  void read() {
    refs_.fetch_add(1);
    if (!start_op(s_, [&] { stream_.Read(&request_, &read_tag_); })) release();
  }

  // A request was read: queued on its model (its answer comes to push()), then the next read.
  void queue(bool alone) {
    auto response = std::make_shared<Response>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++pending_;
    }
    refs_.fetch_add(1);  // the queued request's
    const std::string id = request_.id();
    const std::string model = request_.model_name(), version = request_.model_version();
    s_->infer(request_, cancelled_, response->mutable_infer_response(), [this, response, id, model, version](grpc::Status st) {
      if (!st.ok()) {
        response->Clear();
        response->set_error_message(st.error_message());
        auto* r = response->mutable_infer_response();
        r->set_id(id);
        r->set_model_name(model);
        r->set_model_version(version);
      }
      push(response);
    }, alone);
    request_.Clear();
    if (!start_op(s_, [&] { stream_.Read(&request_, &read_tag_); })) release();  // else the read's reference goes on to this one
  }

  // A finished request's response: written now, or after the ones before it.
  void push(std::shared_ptr<Response> r) {
    const Response* next = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
      if (!write_failed_) {
        out_.push_back(std::move(r));
        if (!writing_) {
          writing_ = true;
          next = out_.front().get();
        }
      }
    }
    if (next) {
      refs_.fetch_add(1);  // the write's
      if (!write(next)) release();  // the queue is shut down: nothing more starts
    }
    maybe_finish();
    release();  // the queued request's
  }

  bool write(const Response* r) {
    return start_op(s_, [&] { stream_.Write(*r, &write_tag_); });
  }

  void maybe_finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ || !reads_done_ || pending_ > 0 || writing_) return;
      finished_ = true;
    }
    refs_.fetch_add(1);
    if (!start_op(s_, [&] { stream_.Finish(grpc::Status::OK, &finish_tag_); })) release();
  }

  void release() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  GrpcServer::Impl* s_;
  grpc::ServerCompletionQueue* cq_;
  grpc::ServerContext ctx_;
  grpc::ServerAsyncReaderWriter<Response, ModelInferRequest> stream_{&ctx_};
  std::shared_ptr<Cancellation> cancelled_;
  ModelInferRequest request_;
  std::mutex mu_;
  std::deque<std::shared_ptr<Response>> out_;
  int64_t pending_ = 0;
  bool writing_ = false, write_failed_ = false, reads_done_ = false, finished_ = false;
  std::atomic<int> refs_{0};
  Tag started_tag_{this, kStarted}, read_tag_{this, kRead}, write_tag_{this, kWrite}, finish_tag_{this, kFinish}, done_tag_{this, kDone};
};

// Requests a call of every method on `cq`.
void request_calls(GrpcServer::Impl* s, grpc::ServerCompletionQueue* cq) {
  // Several ModelInfer calls waiting for clients, so that calls that come together are all on the
  // queue together (with one, gRPC holds the others until the next is requested): the poller then
  // sees that a request is not alone (it queues them) rather than running each inline in turn.
  for (int i = 0; i < kInferCallsWaiting; ++i) AsyncInfer::request(s, cq);
  AsyncStream::request(s, cq);
#define FERRY_UNARY(M)                                                                                                          \
  UnaryCall<inference::M##Request, inference::M##Response>::request(                                                             \
      s, cq,                                                                                                                      \
      [](Service* sv, grpc::ServerContext* c, inference::M##Request* q, grpc::ServerAsyncResponseWriter<inference::M##Response>* w, \
         grpc::ServerCompletionQueue* q2, void* tag) { sv->Request##M(c, q, w, q2, q2, tag); },                                   \
      &Service::M)
  FERRY_UNARY(ServerLive), FERRY_UNARY(ServerReady), FERRY_UNARY(ModelReady), FERRY_UNARY(ServerMetadata);
  FERRY_UNARY(ModelMetadata), FERRY_UNARY(ModelConfig), FERRY_UNARY(ModelStatistics), FERRY_UNARY(RepositoryIndex);
  FERRY_UNARY(RepositoryModelLoad), FERRY_UNARY(RepositoryModelUnload), FERRY_UNARY(TraceSetting), FERRY_UNARY(LogSettings);
  FERRY_UNARY(SystemSharedMemoryStatus), FERRY_UNARY(SystemSharedMemoryRegister), FERRY_UNARY(SystemSharedMemoryUnregister);
  FERRY_UNARY(CudaSharedMemoryStatus), FERRY_UNARY(CudaSharedMemoryRegister), FERRY_UNARY(CudaSharedMemoryUnregister);
#undef FERRY_UNARY
}

// The poller's loop. Right after work it polls the queue without blocking for up to spin_us before
// blocking in Next (SpinWait: bounded, never on busy cores): the next call is taken without a
// wake-up. An event that brings a request comes with what else is ready then (taken without
// blocking): a request runs inline only when it is the one request in hand, so that calls that
// came together go to the instance threads while this thread goes on reading. Other events (a
// response sent, a call ended: two a call) are handled as they come, without that look-ahead, whose
// poll finds the queue empty at concurrency 1 and then costs a system call (epoll_wait).
// After kLoneRun requests in a row that each came alone, a request that came after a poll found the
// queue empty (the spin's, or the last one before the blocking Next) is taken as alone without the
// look-ahead: the poll it would cost is off the request's path. A request already waiting when the
// poller came back from work (requests coming faster than one at a time), or any request while no
// spin polls (busy cores: nothing tells then whether Next blocked), has the look-ahead, and one that
// finds another request ends the run; so a burst after a run of lone requests costs at most its first
// request, run inline (only when nothing else is in flight) while the others wait for it.
void poll(grpc::ServerCompletionQueue* cq, int64_t spin_us) {
  SpinWait spin(spin_us);
  const gpr_timespec now = gpr_time_0(GPR_CLOCK_MONOTONIC);
  constexpr size_t kMaxBatch = 64;
  constexpr int kLoneRun = 16;
  std::vector<std::pair<const Tag*, bool>> batch;
  int lone = 0;         // requests in a row that came alone
  bool waited = false;  // a poll since the last event found the queue empty
  void* tag;
  bool ok;
  for (;;) {
    // No spin on (none started: busy cores, backed off, or no budget): straight to the blocking Next.
    const bool polled = spin.spinning();
    const auto st = polled ? cq->AsyncNext(&tag, &ok, now) : grpc::CompletionQueue::TIMEOUT;
    if (st == grpc::CompletionQueue::SHUTDOWN) break;
    if (st == grpc::CompletionQueue::TIMEOUT) {
      waited = waited || polled;
      if (spin.again()) continue;
      if (!cq->Next(&tag, &ok)) break;
    }
    const bool came_to_waiting = waited;
    waited = false;
    const Tag* first = static_cast<const Tag*>(tag);
    if (!first->call->carries_request(first->kind, ok) || (came_to_waiting && lone >= kLoneRun)) {
      first->call->proceed(first->kind, ok, true);
      spin.arm();
      continue;
    }
    batch.clear();
    batch.emplace_back(first, ok);
    while (batch.size() < kMaxBatch && cq->AsyncNext(&tag, &ok, now) == grpc::CompletionQueue::GOT_EVENT)
      batch.emplace_back(static_cast<const Tag*>(tag), ok);
    size_t requests = 0;
    for (const auto& [t, o] : batch) requests += t->call->carries_request(t->kind, o);
    lone = requests <= 1 ? std::min(lone + 1, kLoneRun) : 0;
    for (const auto& [t, o] : batch) t->call->proceed(t->kind, o, requests <= 1);
    spin.arm();
  }
}

}  // namespace

GrpcServer::GrpcServer(ModelRepository* repository, GrpcServerOptions options, std::function<void(const std::string&)> log)
    : impl_(std::make_unique<Impl>(repository, std::move(options), std::move(log))) {}

GrpcServer::~GrpcServer() { stop(); }

Status GrpcServer::start() {
  const std::string& a = impl_->opt.address;
  const std::string host = a.find(':') != std::string::npos && a.front() != '[' ? "[" + a + "]" : a;
  const std::string where = host + ":" + std::to_string(impl_->opt.port);
  impl_->service = std::make_unique<Service>(impl_.get());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(where, grpc::InsecureServerCredentials(), &impl_->port);
  builder.RegisterService(impl_->service.get());
  builder.SetMaxReceiveMessageSize(impl_->opt.max_message_size);
  builder.SetMaxSendMessageSize(INT_MAX);
  // gRPC turns SO_REUSEPORT on by default: a second server on a busy port would bind silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // No channelz service is served: its per-call counters (CallCountingHelper) and sockets' nodes
  // would be kept for nobody (ferry perf's channel has it off too).
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 0);
  // Debian's Abseil checks every mutex lock for deadlocks (a debug build; 2-3% of a call's CPU
  // here, see grpc_client.cpp): off, as in a release build. Not GRPC_ARG_MINIMAL_STACK: it drops
  // the filter that enforces the maximum message size (RESOURCE_EXHAUSTED).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  impl_->cq = builder.AddCompletionQueue();
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || impl_->port == 0) {
    impl_->server.reset();
    impl_->cq->Shutdown();
    void* tag;
    bool ok;
    while (impl_->cq->Next(&tag, &ok)) {
    }
    impl_->cq.reset();
    return invalid_argument("cannot listen for gRPC on " + where + " (the port is in use or the address is not local; choose another "
                            "--grpc-port, or --allow-grpc false)");
  }
  impl_->cq_open = true;
  request_calls(impl_.get(), impl_->cq.get());
  impl_->poller = std::thread(poll, impl_->cq.get(), impl_->opt.io_spin_us);
  return Status::ok();
}

int GrpcServer::port() const { return impl_->port; }
void GrpcServer::begin_shutdown() { impl_->shutting_down.store(true); }
int64_t GrpcServer::in_flight() const { return impl_->in_flight.load(); }

void GrpcServer::stop() {
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  impl_->server->Wait();
  {
    std::unique_lock<std::shared_mutex> lock(impl_->cq_mu);
    impl_->cq_open = false;
  }
  impl_->cq->Shutdown();
  impl_->poller.join();  // drains the queue: every call's last tag comes back
  AsyncInfer::free_pool(impl_.get());
  impl_->server.reset();
  impl_->cq.reset();
  impl_->service.reset();
}

}  // namespace ferry::serve
